"""The target's low/mid/high hidden taps for every generated position, for EAGLE-3 training.

One prefill of (prompt + answer) per sequence on the served graph (model_repository/target_gqa: the taps
the runtime proposer reads; logits for the last position only). Kept: the positions from the last prompt
token on (the first proposal starts there), as float16. Per split: taps.npy [N, 3*hidden] f16, tokens.npy
[N] int32 (the token at each kept position), positions.npy [N] int32, starts.npy (where each sequence
begins in them); beside the splits the target's spec and last layer (target_spec.json, target_init.npz)
for the trainer, which has no tritongen. Resumable: a split whose taps.npy exists is skipped.

    .venv/bin/python scripts/eagle3/features.py --data build/eagle3
"""

from __future__ import annotations

import argparse
import json
import time
from pathlib import Path

import numpy as np
import onnxruntime as ort

ROOT = Path(__file__).resolve().parents[2]
TAPS = ("hidden_states.2", "hidden_states.15", "hidden_states.27")


def open_target(path: Path, threads: int) -> ort.InferenceSession:
    so = ort.SessionOptions()
    so.intra_op_num_threads = threads
    return ort.InferenceSession(str(path), so, providers=["CPUExecutionProvider"])


def taps(session: ort.InferenceSession, ids: list[int]) -> np.ndarray:
    """[len(ids), 3*hidden] f32: the three taps at every position, one prefill from an empty cache."""
    n = len(ids)
    feeds: dict[str, np.ndarray] = {
        "input_ids": np.array([ids], np.int64), "seqlens_k": np.array([n - 1], np.int32),
        "total_sequence_length": np.array([n], np.int32), "num_logits_to_keep": np.array([1], np.int64)}
    for inp in session.get_inputs():
        if inp.name.startswith("past_key_values."):
            _, heads, _, dim = inp.shape
            feeds[inp.name] = np.zeros((1, heads, n, dim), np.float32)
    outs = session.run(list(TAPS), feeds)
    return np.concatenate([o[0] for o in outs], axis=-1)


def split_features(session: ort.InferenceSession, jsonl: Path, out: Path) -> None:
    rows = [json.loads(line) for line in jsonl.open()]
    rows.sort(key=lambda r: r["index"])
    feats, toks, positions, starts, total = [], [], [], [0], 0
    t0 = time.time()
    for i, r in enumerate(rows):
        ids = r["prompt_ids"] + r["answer_ids"]
        keep = len(r["prompt_ids"]) - 1
        feats.append(taps(session, ids)[keep:].astype(np.float16))
        toks.append(np.array(ids[keep:], np.int32))
        positions.append(np.arange(keep, len(ids), dtype=np.int32))
        total += len(ids)
        starts.append(starts[-1] + len(ids) - keep)
        if (i + 1) % 50 == 0 or i + 1 == len(rows):
            print(f"{jsonl.stem}: {i + 1}/{len(rows)} sequences, {total / (time.time() - t0):.0f} tok/s prefill",
                  flush=True)
    out.mkdir(parents=True, exist_ok=True)
    np.save(out / "tokens.npy", np.concatenate(toks))
    np.save(out / "positions.npy", np.concatenate(positions))
    np.save(out / "starts.npy", np.array(starts, np.int64))
    np.save(out / "taps.npy", np.concatenate(feats))  # last: its presence marks the split done


def write_target_init(out: Path) -> None:
    """The target's spec, embedding-free last layer and final norm: the trainer (torch, no tritongen) reads them."""
    from dataclasses import asdict

    from gguf import GGUFReader

    from tritongen.model_build.__main__ import default_gguf
    from tritongen.model_build.gguf_import import read_weights

    w = read_weights(GGUFReader(str(default_gguf())), progress=False)
    last = w.layers[-1]
    arrays = {name: getattr(last, name) for name in ("attn_norm", "q", "k", "v", "o", "ffn_norm", "gate", "up", "down")}
    np.savez(out / "target_init.npz", final_norm=w.final_norm, **arrays)
    (out / "target_spec.json").write_text(json.dumps(asdict(w.spec)), encoding="utf-8")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--data", type=Path, default=ROOT / "build" / "eagle3")
    parser.add_argument("--model", type=Path, default=ROOT / "model_repository" / "target_gqa" / "1" / "model.onnx")
    parser.add_argument("--threads", type=int, default=2)
    args = parser.parse_args()
    if not (args.data / "target_spec.json").exists():
        write_target_init(args.data)
    session = open_target(args.model, args.threads)
    for split in ("train", "heldout"):
        if not (args.data / split / "taps.npy").exists():
            split_features(session, args.data / f"{split}.jsonl", args.data / split)


if __name__ == "__main__":
    main()
