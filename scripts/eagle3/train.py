"""Train SmolLM2's EAGLE-3 head (torch, converter venv) on the self-distilled taps; export float16 weights.

The module computes exactly the function of `build_eagle3_head` (heads.py): step 0 fuses the target's three
taps with fc3, later steps recycle the head's own `hidden_out`; fc(concat(norm(embed), norm(fused))), one
llama layer whose attention reads only the head's own cache, final norm, LM head over the draft vocabulary.

Training-time test: the runtime proposer starts each proposal from an empty head cache and unrolls K steps,
so training does the same from every start position t: step j reads the true token x[t+1+j] at position
t+1+j, attends to the keys of steps 0..j of this unroll, and is scored on x[t+2+j]. Gradients flow through
the recurrence. Step losses are weighted 0.8**j (later steps matter only when the earlier ones were right).

Choices, for a few tens of thousands of positions on two cores:
- draft vocabulary Vd = 8192: the most frequent tokens of the training answers, then of their prompts (and the
  chat's special ids); 4096 covered 89% of held-out answer tokens, 8192 about 93%; targets outside it are
  ignored by the loss and count as misses in the evaluation;
- the LM head rows are the target's tied embedding rows for those tokens and stay frozen (the head's hidden
  state is trained to land in the target's output space; 2.4M fewer parameters to overfit);
- the llama layer starts from the target's last layer (norms and matrices of a trained block, sensible scales),
  fc3 from reading the high tap, fc from passing the fused state through; then AdamW with a cosine schedule.

At each checkpoint it prints the held-out expected accepted length: for each held-out start, the number of
leading unrolled steps whose argmax equals the true next token, averaged.

    .venv-genai/bin/python scripts/eagle3/train.py --data build/eagle3 --resume
"""

from __future__ import annotations

import argparse
import json
import math
import time
from pathlib import Path

import numpy as np
import torch
import torch.nn.functional as F
from torch import nn

ROOT = Path(__file__).resolve().parents[2]
SPECIAL_IDS = (0, 1, 2)  # <|endoftext|>, <|im_start|>, <|im_end|> (the chat's EOS)


def rms(x: torch.Tensor, w: torch.Tensor, eps: float) -> torch.Tensor:
    return x / torch.sqrt(x.pow(2).mean(-1, keepdim=True) + eps) * w


def rotate(x: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor) -> torch.Tensor:
    half = x.shape[-1] // 2
    return x * cos + torch.cat([-x[..., half:], x[..., :half]], dim=-1) * sin


class Eagle3Head(nn.Module):
    """Parameters named as the ONNX graph's initializers; matrices stored [in, out] (`*_t`)."""

    def __init__(self, spec: dict, lm_head: np.ndarray, init: dict, seed: int = 0):
        super().__init__()
        g = torch.Generator().manual_seed(seed)
        h, ff = spec["hidden_size"], spec["intermediate_size"]
        self.nh, self.kvh = spec["num_heads"], spec["num_kv_heads"]
        self.hd, self.eps = h // self.nh, spec["rms_eps"]
        inv = 1.0 / (spec["rope_theta"] ** (np.arange(0, self.hd, 2, dtype=np.float64) / self.hd))
        self.register_buffer("inv_freq", torch.tensor(inv, dtype=torch.float32))
        self.register_buffer("lm_head", torch.tensor(lm_head, dtype=torch.float32))  # frozen [Vd, h]
        t = lambda a: nn.Parameter(torch.tensor(np.ascontiguousarray(a), dtype=torch.float32))  # noqa: E731
        noise = lambda r, c, s: torch.randn(r, c, generator=g) * s  # noqa: E731
        fc3 = noise(3 * h, h, 0.02 / math.sqrt(3))
        fc3[2 * h:] += torch.eye(h)
        fc = noise(2 * h, h, 0.02)
        fc[h:] += torch.eye(h)
        fc[:h] += 0.5 * torch.eye(h)
        self.fc3_t, self.fc_t = nn.Parameter(fc3), nn.Parameter(fc)
        self.embed_norm, self.hidden_norm = t(np.ones(h)), t(np.ones(h))
        self.attn_norm, self.mlp_norm = t(init["attn_norm"]), t(init["ffn_norm"])
        self.q_t, self.k_t, self.v_t, self.o_t = (t(init[n].T) for n in ("q", "k", "v", "o"))
        self.gate_t, self.up_t, self.down_t = (t(init[n].T) for n in ("gate", "up", "down"))
        self.final_norm = t(init["final_norm"])
        assert self.down_t.shape == (ff, h)

    def step(self, fused: torch.Tensor, emb: torch.Tensor, pos: torch.Tensor, cache: list) -> tuple:
        """One draft step for B independent unrolls: fused, emb [B, h], pos [B]; cache: [(k, v)] of earlier steps."""
        b, eps = fused.shape[0], self.eps
        x = torch.cat([rms(emb, self.embed_norm, eps), rms(fused, self.hidden_norm, eps)], -1) @ self.fc_t
        xn = rms(x, self.attn_norm, eps)
        freqs = pos.float()[:, None] * self.inv_freq[None]
        angles = torch.cat([freqs, freqs], -1)[:, None, :]  # [B, 1, hd]
        cos, sin = angles.cos(), angles.sin()
        q = rotate((xn @ self.q_t).view(b, self.nh, self.hd), cos, sin)
        k = rotate((xn @ self.k_t).view(b, self.kvh, self.hd), cos, sin)
        v = (xn @ self.v_t).view(b, self.kvh, self.hd)
        cache.append((k, v))
        keys = torch.stack([c[0] for c in cache], 2)  # [B, kvh, j+1, hd]
        values = torch.stack([c[1] for c in cache], 2)
        qg = q.view(b, self.kvh, self.nh // self.kvh, self.hd) / math.sqrt(self.hd)
        probs = torch.softmax(qg @ keys.transpose(2, 3), -1)  # [B, kvh, groups, j+1]
        ctx = (probs @ values).reshape(b, self.nh * self.hd)
        x = x + ctx @ self.o_t
        xm = rms(x, self.mlp_norm, eps)
        gate = xm @ self.gate_t
        x = x + (F.silu(gate) * (xm @ self.up_t)) @ self.down_t
        return x, rms(x, self.final_norm, eps) @ self.lm_head.T

    def unroll(self, taps: torch.Tensor, embs: torch.Tensor, pos: torch.Tensor) -> list[torch.Tensor]:
        """taps [B, 3h]; embs [B, K, h] (the embeddings of x[t+1..t+K]); pos [B] (t+1) -> K logits [B, Vd]."""
        fused, cache, out = taps @ self.fc3_t, [], []
        for j in range(embs.shape[1]):
            fused, logits = self.step(fused, embs[:, j], pos + j, cache)
            out.append(logits)
        return out

    def export(self) -> dict[str, np.ndarray]:
        """The graph's initializer names -> float32 arrays (heads.py `build_eagle3_head(weights=...)`)."""
        names = {"fc3_t": self.fc3_t, "fc_t": self.fc_t, "embed_norm": self.embed_norm,
                 "hidden_norm": self.hidden_norm, "attn_norm": self.attn_norm, "layers.0.q_t": self.q_t,
                 "layers.0.k_t": self.k_t, "layers.0.v_t": self.v_t, "attn.o_t": self.o_t, "mlp.norm": self.mlp_norm,
                 "mlp.gate_t": self.gate_t, "mlp.up_t": self.up_t, "mlp.down_t": self.down_t,
                 "final_norm": self.final_norm, "lm_head": self.lm_head}
        return {k: v.detach().numpy().astype(np.float32) for k, v in names.items()}


class Split:
    """One split's taps and tokens; `starts(k)`: kept indices whose k-step unroll stays inside its sequence."""

    def __init__(self, folder: Path):
        self.taps = np.load(folder / "taps.npy", mmap_mode="r")
        self.tokens = np.load(folder / "tokens.npy")
        self.positions = np.load(folder / "positions.npy")
        self.bounds = np.load(folder / "starts.npy")

    def starts(self, k: int) -> np.ndarray:
        return np.concatenate([np.arange(a, b - k - 1) for a, b in zip(self.bounds[:-1], self.bounds[1:])])

    def batch(self, idx: np.ndarray, k: int, embedding: torch.Tensor, t2d: torch.Tensor) -> tuple:
        steps = idx[:, None] + np.arange(k)[None]
        taps = torch.from_numpy(np.asarray(self.taps[idx], np.float32))
        embs = embedding[torch.from_numpy(self.tokens[steps + 1]).long()]
        labels = t2d[torch.from_numpy(self.tokens[steps + 2]).long()]  # -1: outside the draft vocabulary
        return taps, embs, torch.from_numpy(self.positions[idx] + 1).long(), labels


def draft_vocab(tokens: np.ndarray, size: int, vocab: int, prompt_tokens: np.ndarray | None = None) -> np.ndarray:
    """The `size` most frequent ids of the training answers, then of the training prompts (answers often reuse
    a passage's words; the tied LM head rows let the head name tokens it saw only as input), the special ids
    always in; sorted."""
    counts = np.bincount(tokens, minlength=vocab).astype(np.int64) * (1 << 32)
    if prompt_tokens is not None:
        counts += np.bincount(prompt_tokens, minlength=vocab)
    counts[list(SPECIAL_IDS)] = np.iinfo(np.int64).max
    return np.sort(np.argsort(-counts, kind="stable")[:size])


@torch.no_grad()
def evaluate(model: Eagle3Head, split: Split, starts: np.ndarray, k: int, embedding, t2d, batch: int = 1024) -> dict:
    model.eval()
    accepted, step_hits, n = 0.0, np.zeros(k), 0
    for i in range(0, len(starts), batch):
        taps, embs, pos, labels = split.batch(starts[i:i + batch], k, embedding, t2d)
        hits = torch.stack([lg.argmax(-1) == labels[:, j] for j, lg in enumerate(model.unroll(taps, embs, pos))], 1)
        accepted += hits.long().cumprod(1).sum().item()
        step_hits += hits.float().sum(0).numpy()
        n += len(labels)
    model.train()
    return {"accepted_length": accepted / n, "step_accuracy": [round(x, 3) for x in (step_hits / n).tolist()]}


def parse_args() -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--data", type=Path, default=ROOT / "build" / "eagle3")
    parser.add_argument("--out", type=Path, default=ROOT / "backend_src" / "tritongen" / "model_build" /
                        "eagle3_smollm2.npz")
    parser.add_argument("--vocab", type=int, default=8192, help="draft vocabulary size Vd")
    parser.add_argument("--k", type=int, default=4, help="unrolled draft steps (the proposer's K)")
    parser.add_argument("--epochs", type=float, default=2.0)
    parser.add_argument("--batch", type=int, default=256)
    parser.add_argument("--lr", type=float, default=1.5e-3)
    parser.add_argument("--eval-every", type=int, default=40, help="steps between checkpoints")
    parser.add_argument("--max-steps", type=int, default=0, help="stop after this many steps (throughput probes)")
    parser.add_argument("--resume", action="store_true")
    parser.add_argument("--threads", type=int, default=2)
    return parser.parse_args()


def optimizer(model: Eagle3Head, lr: float, total: int):
    """AdamW with a linear warm-up, then a cosine down to a tenth of lr at the last step."""
    opt = torch.optim.AdamW(model.parameters(), lr=lr, weight_decay=0.01, betas=(0.9, 0.95))
    warmup = min(50, total // 10)
    sched = torch.optim.lr_scheduler.LambdaLR(opt, lambda s: min(1.0, (s + 1) / max(warmup, 1)) * (
        0.1 + 0.9 * 0.5 * (1 + math.cos(math.pi * min(s, total) / max(total, 1)))))
    return opt, sched


def write_weights(out: Path, model: Eagle3Head, d2t: np.ndarray, spec: dict) -> None:
    """float16 weights and the draft-to-target map; the LM head is the target's embedding rows d2t, frozen:
    the builder takes them from the target."""
    arrays = {k: v.astype(np.float16) for k, v in model.export().items() if k != "lm_head"}
    meta = [spec[n] for n in ("vocab_size", "hidden_size", "intermediate_size", "num_layers", "num_heads",
                              "num_kv_heads")]
    np.savez_compressed(out, d2t=d2t.astype(np.int64), target_spec=np.array(meta, np.int64), **arrays)
    print(f"wrote {out} ({out.stat().st_size / 1e6:.1f} MB)")


def main() -> None:
    args = parse_args()
    torch.set_num_threads(args.threads)
    torch.manual_seed(0)

    spec = json.loads((args.data / "target_spec.json").read_text())
    h, vocab = spec["hidden_size"], spec["vocab_size"]
    embedding = torch.from_numpy(np.fromfile(ROOT / "model_repository" / "target_gqa" / "embedding.f32", "<f4")
                                 .reshape(vocab, h))
    train, held = Split(args.data / "train"), Split(args.data / "heldout")
    prompt_ids = [i for line in (args.data / "train.jsonl").open() for i in json.loads(line)["prompt_ids"]]
    d2t = draft_vocab(train.tokens, args.vocab, vocab, np.array(prompt_ids, np.int64))
    t2d = torch.full((vocab,), -1, dtype=torch.long)
    t2d[torch.from_numpy(d2t)] = torch.arange(len(d2t))
    init = dict(np.load(args.data / "target_init.npz"))
    model = Eagle3Head(spec, embedding.numpy()[d2t], init)
    train_starts, held_starts = train.starts(args.k), held.starts(args.k)
    covered = (t2d[torch.from_numpy(held.tokens).long()] >= 0).float().mean().item()
    print(f"train starts {len(train_starts)}, held-out starts {len(held_starts)}, Vd {len(d2t)}, "
          f"held-out tokens in the draft vocabulary {covered:.1%}", flush=True)

    steps_per_epoch = len(train_starts) // args.batch
    total = int(args.epochs * steps_per_epoch)
    opt, sched = optimizer(model, args.lr, total)
    ckpt = args.data / "checkpoint.pt"
    state = {"step": 0, "tokens": 0, "log": [], "elapsed": 0.0}
    if args.resume and ckpt.exists():
        saved = torch.load(ckpt, weights_only=False)
        model.load_state_dict(saved["model"])
        opt.load_state_dict(saved["opt"])
        sched.load_state_dict(saved["sched"])
        state = saved["state"]
        print(f"resumed at step {state['step']} of {total}", flush=True)
    if state["step"] == 0:
        ev = evaluate(model, held, held_starts, args.k, embedding, t2d)
        state["log"].append({"step": 0, "tokens": 0, **ev})
        print(f"step 0: held-out expected accepted length {ev['accepted_length']:.3f} {ev['step_accuracy']}")
    weights = torch.tensor([0.8 ** j for j in range(args.k)])
    order = np.random.default_rng(0).permutation(np.tile(train_starts, math.ceil(args.epochs) + 1).reshape(-1,
                                                 len(train_starts)), axis=1).reshape(-1)
    t0, last_loss = time.time() - state["elapsed"], 0.0
    stop = min(total, args.max_steps) if args.max_steps else total
    while state["step"] < stop:
        s = state["step"]
        idx = np.sort(order[s * args.batch:(s + 1) * args.batch])
        taps, embs, pos, labels = train.batch(idx, args.k, embedding, t2d)
        losses = [F.cross_entropy(lg, labels[:, j], ignore_index=-1) for j, lg in
                  enumerate(model.unroll(taps, embs, pos))]
        loss = (torch.stack(losses) * weights).sum() / weights.sum()
        opt.zero_grad()
        loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        opt.step()
        sched.step()
        state["step"] += 1
        state["tokens"] += len(idx)
        last_loss = loss.item()
        if state["step"] % args.eval_every == 0 or state["step"] == stop:
            ev = evaluate(model, held, held_starts, args.k, embedding, t2d)
            state["elapsed"] = time.time() - t0
            state["log"].append({"step": state["step"], "tokens": state["tokens"], "loss": last_loss, **ev})
            print(f"step {state['step']}/{total}: {state['tokens']} start positions seen, loss {last_loss:.3f}, "
                  f"held-out expected accepted length {ev['accepted_length']:.3f} {ev['step_accuracy']}, "
                  f"{state['elapsed']:.0f}s", flush=True)
            torch.save({"model": model.state_dict(), "opt": opt.state_dict(), "sched": sched.state_dict(),
                        "state": state}, ckpt)
        elif state["step"] % 10 == 0:
            print(f"step {state['step']}: loss {last_loss:.3f}, {(time.time() - t0) / state['step']:.2f}s/step",
                  flush=True)
    (args.data / "train_log.json").write_text(json.dumps(state["log"], indent=1))
    if state["step"] >= total and not (args.out.exists() and args.out.stat().st_mtime > ckpt.stat().st_mtime):
        write_weights(args.out, model, d2t, spec)


if __name__ == "__main__":
    main()
