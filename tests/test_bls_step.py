"""bench.bls_step's arithmetic and table (no timing): the KV a BLS step ships, the steady window, the ratios, and
the temporary repository's configs as Triton parses them."""

from __future__ import annotations

from google.protobuf import text_format
from tritonclient.grpc import model_config_pb2

from bench.bls_step import kv_shape, shipped_bytes, steady_gaps, table, write_repository

SMOLLM2_KV_PER_TOKEN = 30 * 2 * 3 * 64 * 4  # layers x (K, V) x kv heads x head dim x float32


def test_a_bls_step_ships_the_batch_past_in_and_back():
    assert SMOLLM2_KV_PER_TOKEN == 46_080
    assert kv_shape(16, 256, SMOLLM2_KV_PER_TOKEN) == (16, 256, 11_520)
    assert shipped_bytes(kv_shape(1, 256, SMOLLM2_KV_PER_TOKEN)) == 2 * 256 * 46_080
    assert shipped_bytes(kv_shape(16, 256, SMOLLM2_KV_PER_TOKEN)) == 16 * shipped_bytes((1, 256, 11_520))


def test_steady_gaps_are_taken_only_while_every_stream_decodes():
    streams = [{"times": [0.0, 1.0, 2.0, 3.0, 4.0]}, {"times": [1.5, 2.5, 3.5, 9.0]}]
    # window 1.5 .. 4.0: stream 0 contributes 2->3->4, stream 1 contributes 1.5->2.5->3.5
    assert steady_gaps(streams) == [1.0, 1.0, 1.0, 1.0]


def test_the_table_divides_each_bls_round_trip_by_our_step_of_the_same_batch():
    medians = {"engine b1": [0.020, 0.022, 0.021], "engine b16": [0.050],
               "bls tiny b1": [0.0001], "bls tiny b16": [0.0002],
               "bls kv b1": [0.010], "bls kv b16": [0.200],
               "copy b1": [0.001], "copy b16": [0.015]}
    rows = table(medians, 256, SMOLLM2_KV_PER_TOKEN).splitlines()
    assert rows[2].split("|")[1:-1] == [" 1 ", " 23.6 MB ", " 21.00 ms ", " 0.10 ms ", " 10.0 ms ", " 1.0 ms ",
                                        " 0.005x ", " 0.48x "]
    assert rows[3].endswith("| 0.004x | 4.00x |") and "377.5 MB" in rows[3]


def test_the_temporary_repository_holds_two_complete_python_models(tmp_path):
    repository = write_repository(tmp_path / "repo")
    for name, inputs in (("echo", ["X"]), ("bls_driver", ["SHAPE", "STEPS"])):
        config = text_format.Parse((repository / name / "config.pbtxt").read_text(), model_config_pb2.ModelConfig())
        assert config.name == name and config.backend == "python"
        assert [i.name for i in config.input] == inputs
        compile((repository / name / "1" / "model.py").read_text(), name, "exec")
