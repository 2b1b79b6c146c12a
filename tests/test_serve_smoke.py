"""Smoke test of tritongen.serve: the bundled tritonserver runs a decoupled python-backend model.

The model is written here (not the real generator) so the test proves only the
launcher: stub installed, libpython and PATH right, ports, readiness, shutdown.
"""
import queue
import textwrap

import numpy as np
import pytest

from tritongen.serve import TritonServer

from triton_helpers import later

pytestmark = pytest.mark.server

MODEL_PY = textwrap.dedent('''
    import numpy as np
    import triton_python_backend_utils as pb_utils

    class TritonPythonModel:
        """Decoupled echo: sends IN back 3 times, then the FINAL flag."""

        def execute(self, requests):
            for request in requests:
                sender = request.get_response_sender()
                x = pb_utils.get_input_tensor_by_name(request, "IN").as_numpy()
                for i in range(3):
                    out = pb_utils.Tensor("OUT", (x + i).astype(np.int32))
                    sender.send(pb_utils.InferenceResponse(output_tensors=[out]))
                sender.send(flags=pb_utils.TRITONSERVER_RESPONSE_COMPLETE_FINAL)
            return None
''')

CONFIG = textwrap.dedent('''
    name: "echo"
    backend: "python"
    max_batch_size: 0
    model_transaction_policy { decoupled: true }
    input [ { name: "IN" data_type: TYPE_INT32 dims: [ -1 ] } ]
    output [ { name: "OUT" data_type: TYPE_INT32 dims: [ -1 ] } ]
    instance_group [ { count: 1 kind: KIND_CPU } ]
''')


@pytest.fixture
def model_repository(tmp_path):
    model = tmp_path / "repo" / "echo"
    (model / "1").mkdir(parents=True)
    (model / "1" / "model.py").write_text(MODEL_PY)
    (model / "config.pbtxt").write_text(CONFIG)
    return tmp_path / "repo"


def test_decoupled_model_streams_three_responses(model_repository, tmp_path):
    import tritonclient.grpc as grpcclient

    server = TritonServer(model_repository, models=["echo"], http_port=0, grpc_port=0,
                          metrics_port=0, log_file=tmp_path / "triton.log").start()
    try:
        results: queue.Queue = queue.Queue()
        client = grpcclient.InferenceServerClient(server.url_grpc)
        try:
            client.start_stream(callback=lambda result, error: results.put((result, error)))
            inp = grpcclient.InferInput("IN", [2], "INT32")
            inp.set_data_from_numpy(np.array([7, 40], dtype=np.int32))
            client.async_stream_infer("echo", [inp], request_id="1",
                                      enable_empty_final_response=True)
            outputs = []
            while True:
                result, error = results.get(timeout=30)
                assert error is None, error
                final = result.get_response().parameters["triton_final_response"].bool_param
                if result.as_numpy("OUT") is not None:
                    outputs.append(result.as_numpy("OUT").tolist())
                if final:
                    break
        finally:
            client.stop_stream()
            client.close()
        assert outputs == [[7, 40], [8, 41], [9, 42]]
    finally:
        later(lambda: stops_cleanly(server))


def stops_cleanly(server: TritonServer) -> None:
    """SIGTERM ends tritonserver with exit code 0 (checked in the background: Triton takes seconds to stop)."""
    returncode = server.stop()
    assert server.process.poll() is not None, "tritonserver still running after stop()"
    assert returncode == 0, server.log_tail()
