"""The bandwidth-bound figures of the llama.cpp comparison: batch 16 reads the weights once per step."""

from bench import bandwidth


def test_limit_scales_with_batch_not_weights_read():
    assert bandwidth.limit_tps(100, 1000.0, 1) == 10.0
    assert bandwidth.limit_tps(100, 1000.0, 16) == 160.0
    assert bandwidth.fraction(80.0, 100, 1000.0, 16) == 0.5


def test_measure_is_a_positive_rate():
    assert bandwidth.measure(mib=4, repeats=2) > 0
