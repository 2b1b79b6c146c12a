"""The systems under test. Each runs one greedy generation of exactly `n` new tokens for a prompt and
returns what a client of it observes: the token ids and, per token, the time it became visible to the
caller (seconds from the moment the request was issued).

Every system lives in its own worker process (see worker.py), so onnxruntime thread pools, the
RTLD_GLOBAL onnxruntime that onnx_genai loads, and memory arenas do not interfere with each other.
"""

from __future__ import annotations

import os
import queue
import time
from pathlib import Path

import numpy as np

now = time.perf_counter


def _threads() -> int:
    return len(os.sched_getaffinity(0))


def result(tokens, times, **extra) -> dict:
    """tokens: list of rows (one per sequence); times: per-token visibility times, seconds from issue."""
    return {"tokens": [[int(t) for t in row] for row in tokens],
            "times": None if times is None else [float(t) for t in times], **extra}


class RawLoop:
    """The limit: plain numpy feeds into one onnxruntime session, concat past/present, argmax, no server."""

    def __init__(self, model_path: str, batch: int = 1, **_):
        import onnxruntime as ort

        options = ort.SessionOptions()
        options.intra_op_num_threads = _threads()
        options.graph_optimization_level = ort.GraphOptimizationLevel.ORT_ENABLE_ALL
        self.session = ort.InferenceSession(model_path, options, providers=["CPUExecutionProvider"])
        inputs = [i.name for i in self.session.get_inputs()]
        self.layers = sum(1 for n in inputs if n.startswith("past_key_values.") and n.endswith(".key"))
        kv = next(i for i in self.session.get_inputs() if i.name == "past_key_values.0.key").shape
        self.kv_heads, self.head_dim = int(kv[1]), int(kv[3])
        self.batch = batch
        # Only what a greedy loop needs; the hidden-state outputs are computed on the way to the logits anyway.
        self.outputs = ["logits"] + [f"present.{i}.{kv}" for i in range(self.layers) for kv in ("key", "value")]

    def run(self, text: str, ids: list[int], n: int) -> dict:
        b, p = self.batch, len(ids)
        t0 = now()
        empty = np.zeros((b, self.kv_heads, 0, self.head_dim), dtype=np.float32)
        past = [empty] * (2 * self.layers)
        input_ids = np.tile(np.asarray(ids, dtype=np.int64), (b, 1))
        position_ids = np.tile(np.arange(p, dtype=np.int64), (b, 1))
        rows, times, last = [], [], []
        for step in range(n):
            feeds = {"input_ids": input_ids, "attention_mask": np.ones((b, p + step), dtype=np.int64),
                     "position_ids": position_ids}
            for i in range(self.layers):
                feeds[f"past_key_values.{i}.key"] = past[2 * i]
                feeds[f"past_key_values.{i}.value"] = past[2 * i + 1]
            out = self.session.run(self.outputs, feeds)
            chosen = out[0][:, -1].argmax(-1)
            past = out[1:]
            rows.append(chosen)
            times.append(now() - t0)
            last.append(out[0][0, -1])  # row 0's logits, for the top-2 gaps computed after the clock stops
            input_ids = chosen[:, None].astype(np.int64)
            position_ids = np.full((b, 1), p + step, dtype=np.int64)
        top2 = [np.partition(logits, -2)[-2:] for logits in last]
        return result(np.stack(rows, 1), times, margins=[float(b - a) for a, b in top2])


def generator_parameters(model_repository: str) -> dict[str, str]:
    """The generator's config.pbtxt parameters, read the way Triton hands them to the model."""
    from google.protobuf import text_format
    from tritonclient.grpc import model_config_pb2

    text = (Path(model_repository) / "generator" / "config.pbtxt").read_text()
    config = text_format.Parse(text, model_config_pb2.ModelConfig())
    return {key: value.string_value for key, value in config.parameters.items()}


class EngineInProcess:
    """tritongen's engine without Triton, configured from the generator's config.pbtxt exactly as the server
    runs it (same target model and engine settings); or, when `target` names another model folder, that
    folder with the default EngineConfig.
    Tokens come from Engine.stream(), handed over from the engine thread."""

    def __init__(self, model_repository: str, target: str | None = None, **_):
        from tritongen.engine import Engine
        from tritongen.generator_settings import parse_settings

        import inspect

        params, repository = generator_parameters(model_repository), Path(model_repository)
        # As triton_model.initialize() does it (newer parse_settings also takes the repository).
        takes_repository = len(inspect.signature(parse_settings).parameters) > 1
        settings = parse_settings(params, repository) if takes_repository else parse_settings(params)
        if target is None:
            self.engine = Engine(repository / settings.target_model, settings.engine)
        else:  # another model folder: the default EngineConfig (the served one may name GQA-only heads)
            from tritongen.options import EngineConfig

            self.engine = Engine(repository / target, EngineConfig())

    def run(self, text: str, ids: list[int], n: int) -> dict:
        from tritongen.options import GenerateOptions, GenerateRequest

        request = GenerateRequest(list(ids), GenerateOptions(max_new_tokens=n, stop_on_eos=False, greedy=True))
        tokens, times = [], []
        t0 = now()
        for token in self.engine.stream(request):
            times.append(now() - t0)
            tokens.append(token.token_id)
        return result([tokens], times)

    def close(self) -> None:
        self.engine.close()


class TritonGrpc:
    """tritongen through tritonserver: one gRPC stream, input_ids + max_tokens + ignore_eos + stream=true."""

    def __init__(self, grpc_url: str, **_):
        import tritonclient.grpc as grpcclient

        self.grpcclient = grpcclient
        self.client = grpcclient.InferenceServerClient(grpc_url)
        self.events: queue.Queue = queue.Queue()
        self.client.start_stream(callback=lambda result, error: self.events.put((now(), result, error)))
        self.count = 0

    def _tensor(self, name, value, dtype):
        value = np.asarray(value, dtype=dtype)
        t = self.grpcclient.InferInput(name, list(value.shape), {np.int64: "INT64", np.int32: "INT32",
                                                                 np.bool_: "BOOL"}[dtype])
        t.set_data_from_numpy(value)
        return t

    def run(self, text: str, ids: list[int], n: int) -> dict:
        inputs = [self._tensor("input_ids", ids, np.int64), self._tensor("max_tokens", [n], np.int32),
                  self._tensor("ignore_eos", [True], np.bool_), self._tensor("stream", [True], np.bool_)]
        self.count += 1
        tokens, times, responses, prefix_hit = [], [], 0, None
        t0 = now()
        self.client.async_stream_infer("generator", inputs, request_id=str(self.count))
        while True:
            at, res, err = self.events.get(timeout=120)
            if err is not None:
                raise RuntimeError(f"generator error: {err}")
            responses += 1
            got = res.as_numpy("output_ids")
            got = [] if got is None else got.reshape(-1).tolist()
            tokens += got
            times += [at - t0] * len(got)  # tokens that arrive together become visible together
            hit = res.as_numpy("prefix_cache_hit_len")
            if hit is not None:
                prefix_hit = int(hit.reshape(-1)[0])
            if res.get_response().parameters["triton_final_response"].bool_param:
                break
        return result([tokens], times, responses=responses, prefix_hits=[prefix_hit])

    def close(self) -> None:
        self.client.stop_stream()
        self.client.close()


class OrtGenai:
    """onnxruntime-genai: one Generator per request, fed our token ids; min_length = max_length = exactly n."""

    def __init__(self, workdir: str, **_):
        import onnxruntime_genai as og

        self.og = og
        self.model = og.Model(workdir)

    def run(self, text: str, ids: list[int], n: int) -> dict:
        og = self.og
        tokens, times = [], []
        t0 = now()
        params = og.GeneratorParams(self.model)
        params.set_search_options(do_sample=False, max_length=len(ids) + n, min_length=len(ids) + n)
        generator = og.Generator(self.model, params)
        generator.append_tokens([list(ids)])  # the prefill runs here
        while not generator.is_done():
            generator.generate_next_token()
            tokens.append(int(generator.get_next_tokens()[0]))
            times.append(now() - t0)
        del generator
        return result([tokens], times)


class OnnxGenai:
    """onnx-genai (the Rust engine's Python package): Engine.generate(text), temperature=0 (greedy).

    It takes text only and cannot ignore EOS, so the prompts are ones that run long; it tokenizes
    itself (checked against our ids). Its streaming callback delivered every token at the end of the
    request in 0.1.0.dev6, so per-token times are not observable: TTFT is a cold max_tokens=1 request,
    and the decode rate comes from end-to-end times of an n-token and a 1-token request that both
    reuse the prompt from its prefix cache.
    """

    def __init__(self, workdir: str, **_):
        import onnx_genai

        self.engine = onnx_genai.Engine.from_dir(workdir)

    def run(self, text: str, ids: list[int], n: int) -> dict:
        own_ids = [int(i) for i in self.engine.tokenize(text)]
        t0 = now()
        first = self.engine.generate(text, max_tokens=1, temperature=0.0)
        ttft = now() - t0
        t0 = now()
        full = self.engine.generate(text, max_tokens=n, temperature=0.0)
        total = now() - t0
        t0 = now()
        again = self.engine.generate(text, max_tokens=1, temperature=0.0)
        ttft_cached = now() - t0
        return result([list(full.token_ids)], None, ttft=ttft, total=total, ttft_cached=ttft_cached,
                      prompt_ids_match=own_ids == list(ids), finish_reason=full.finish_reason,
                      prefix_hits=[first.prefix_cache_hit_len, full.prefix_cache_hit_len, again.prefix_cache_hit_len])


KINDS = {"raw": RawLoop, "engine": EngineInProcess, "triton": TritonGrpc, "ort-genai": OrtGenai,
         "onnx-genai": OnnxGenai}
