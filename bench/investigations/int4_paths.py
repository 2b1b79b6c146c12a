"""Which calls change a row's numbers: one MatMulNBits node over M rows, decode rows alone and batched, and
a prompt prefilled in different chunkings (logits and KV compared bitwise).

.venv/bin/python -m bench.investigations.int4_paths MODEL.onnx [--head-dim 64 --vocab 49152]
"""

from __future__ import annotations

import argparse
from pathlib import Path

import numpy as np
import onnxruntime as ort
from onnx import TensorProto, helper

from tritongen.runtime.gqa_decoder import GqaDecoder


def matmul_nbits(k: int, n: int, accuracy_level: int) -> list[int]:
    """The M at which row 0 of a one-node MatMulNBits graph differs from its M=1 result."""
    rng = np.random.default_rng(0)
    weights = rng.integers(0, 256, (n, k // 32, 16), dtype=np.uint8)
    scales = rng.random(n * k // 32, dtype=np.float32) * 0.02 + 0.001
    node = helper.make_node("MatMulNBits", ["A", "B", "S"], ["Y"], domain="com.microsoft", K=k, N=n, bits=4,
                            block_size=32, accuracy_level=accuracy_level)
    graph = helper.make_graph(
        [node], "g", [helper.make_tensor_value_info("A", TensorProto.FLOAT, ["M", k])],
        [helper.make_tensor_value_info("Y", TensorProto.FLOAT, ["M", n])],
        initializer=[helper.make_tensor("B", TensorProto.UINT8, weights.shape, weights.tobytes(), raw=True),
                     helper.make_tensor("S", TensorProto.FLOAT, scales.shape, scales.tobytes(), raw=True)])
    opsets = [helper.make_opsetid("", 17), helper.make_opsetid("com.microsoft", 1)]
    model = helper.make_model(graph, opset_imports=opsets)
    session = ort.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"])
    x = rng.standard_normal((256, k)).astype(np.float32)
    alone = session.run(None, {"A": x[:1]})[0][0]
    return [m for m in [*range(2, 33), 64, 256] if not np.array_equal(session.run(None, {"A": x[:m]})[0][0], alone)]


def chunkings(decoder: GqaDecoder, sizes_list: list[list[int]]) -> None:
    """A 48-token prompt in one call against the given chunkings: last logits and last layer's KV."""
    prompt = np.random.default_rng(2).integers(0, 1000, (1, sum(sizes_list[0])))

    def run(sizes: list[int]) -> tuple[np.ndarray, np.ndarray]:
        start = 0
        for n in sizes:
            logits = decoder.prefill(0, prompt[:, start:start + n], start)[0][0, -1].copy()
            start += n
        return logits, decoder.keys[-1][0, :, :start].copy()

    whole = run(sizes_list[0])
    for sizes in sizes_list[1:]:
        logits, kv = run(sizes)
        print(f"chunks {sizes}: logits equal {np.array_equal(logits, whole[0])} "
              f"(max diff {float(np.abs(logits - whole[0]).max()):.3g}), KV equal {np.array_equal(kv, whole[1])}")


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("model", type=Path)
    parser.add_argument("--head-dim", type=int)
    parser.add_argument("--vocab", type=int)
    args = parser.parse_args()
    for k, n in ((576, 960), (1536, 576), (576, 49152)):
        for level in (4, 0):
            print(f"MatMulNBits K={k} N={n} accuracy_level={level}: row 0 differs from M=1 at M in "
                  f"{matmul_nbits(k, n, level)}")
    decoder = GqaDecoder(args.model, 16, 256, intra_op_threads=2, head_dim=args.head_dim, vocab_size=args.vocab)
    rng = np.random.default_rng(0)
    lengths = np.array([5 + 3 * i for i in range(16)], np.int32)
    for slot, length in enumerate(lengths):
        decoder.prefill(slot, rng.integers(0, 1000, (1, int(length))), 0)
    ids = rng.integers(0, 1000, (16, 1))
    alone = decoder.decode(ids[:1], lengths[:1])[0][0, -1].copy()  # decode writes one position: re-runs agree
    same = [b for b in range(2, 17) if np.array_equal(decoder.decode(ids[:b], lengths[:b])[0][0, -1], alone)]
    print(f"decode: row 0 alone equals row 0 of a {len(same)} of 15 batch sizes 2..16")
    chunkings(decoder, [[48], [16, 32], [1, 47], [2, 46], [8] * 6, [47, 1], [46, 1, 1]])


if __name__ == "__main__":
    main()
