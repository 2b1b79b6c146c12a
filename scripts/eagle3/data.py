"""EAGLE-3 training data for SmolLM2: prompts from text on this machine, answered by SmolLM2 itself.

Self-distillation: the head learns to predict what the served target generates, so the answers come from
the target through our engine (mostly greedy, as served; some sampled at temperature 0.7-1.0 for variety).
Prompts: passages of the Python standard library's documentation (pydoc topics, module docstrings) and of
Debian's documentation (/usr/share/doc, /usr/share/common-licenses) with a summarise/explain instruction,
plus templated questions. The held-out split is drawn by source document and by template filler before
anything is generated, so no held-out prompt shares a document or a template instance with training.

    .venv/bin/python scripts/eagle3/data.py --out build/eagle3 --train 300 --heldout 32 --rounds 2
"""

from __future__ import annotations

import argparse
import ast
import gzip
import hashlib
import json
import random
import sys
import threading
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]

PASSAGE_TEMPLATES = [
    "Summarize the following passage in a few sentences:\n\n{x}",
    "Explain this text in simple terms:\n\n{x}",
    "What are the key points of the following text?\n\n{x}",
    "Read this passage and explain what it is about:\n\n{x}",
    "Write three questions a student could ask about this text, and answer them:\n\n{x}",
]
THINGS = [
    "a black hole", "photosynthesis", "a compiler", "the Roman Empire", "inflation", "a neural network", "DNA",
    "democracy", "a volcano", "the internet", "gravity", "a vaccine", "climate change", "an operating system",
    "the water cycle", "a database", "the stock market", "electricity", "a rainbow", "the immune system",
    "a hash table", "the French Revolution", "an earthquake", "a recession", "the moon", "a glacier",
    "renewable energy", "a linked list", "the printing press", "a microscope", "the Renaissance", "a hurricane",
    "an encryption key", "a protein", "a satellite", "the ozone layer", "a web browser", "a solar eclipse",
    "machine learning", "a bank loan", "a symphony", "the Great Wall of China", "a coral reef", "recursion",
    "an atom", "a contract", "the speed of light", "a spreadsheet", "evolution", "a tsunami",
]
CONCEPTS = [
    "supply and demand", "object-oriented programming", "the theory of relativity", "compound interest",
    "natural selection", "version control", "the scientific method", "opportunity cost", "entropy",
    "public key cryptography", "the greenhouse effect", "binary numbers", "plate tectonics", "probability",
    "the food chain", "garbage collection", "photosynthesis", "the Pythagorean theorem", "cloud computing",
    "vaccination", "interest rates", "the placebo effect", "recycling", "time zones", "a budget",
    "open source software", "the blockchain", "the water cycle", "cell division", "a unit test",
]
STORIES = [
    "a lost robot", "a dragon who is afraid of fire", "a girl who finds a secret door", "an old lighthouse keeper",
    "a cat that learns to read", "a journey to Mars", "a haunted library", "two friends on a fishing trip",
    "a talking tree", "a baker who wins a contest", "a time traveler", "a small village during a storm",
    "a detective solving a mystery", "a pirate who hates the sea", "a musician who loses her voice",
    "a boy and his kite", "the last day of summer", "a clockmaker's apprentice", "a friendly ghost",
    "a penguin in the desert", "a mountain climber", "a city under the ocean", "a magic paintbrush",
    "a spaceship crew", "a lonely giant", "a chess tournament", "a river that flows backwards", "a new teacher",
]
TIPS = [
    "learning a new language", "staying healthy", "saving money", "writing clean code", "studying for exams",
    "sleeping better", "public speaking", "cooking at home", "managing time", "traveling on a budget",
    "starting a garden", "reducing stress", "working from home", "learning to play guitar", "running a meeting",
    "writing a resume", "keeping a pet dog", "staying focused", "making friends in a new city", "reading more books",
    "debugging a program", "taking better photos", "preparing for a job interview", "exercising regularly",
    "keeping a clean kitchen", "learning mathematics", "protecting your privacy online", "eating less sugar",
]
QUESTION_TEMPLATES = {
    "thing": ["What is {x}?", "Describe {x}.", "How does {x} work?", "Tell me some facts about {x}."],
    "concept": ["Explain {x} in simple terms.", "Why is {x} important?", "Give an example of {x}."],
    "story": ["Write a short story about {x}.", "Write a poem about {x}."],
    "tips": ["Give three tips for {x}.", "What are some common mistakes in {x}?"],
}
FILLERS = {"thing": THINGS, "concept": CONCEPTS, "story": STORIES, "tips": TIPS}


def _read(path: Path) -> str:
    try:
        raw = gzip.open(path).read() if path.suffix == ".gz" else path.read_bytes()
        return raw[:200_000].decode("utf-8", errors="ignore")
    except OSError:
        return ""


def documents() -> list[tuple[str, str]]:
    """(document id, text) for every source document, in a fixed order."""
    import pydoc_data.topics as topics

    docs = [(f"pydoc:{k}", v) for k, v in sorted(topics.topics.items())]
    stdlib = Path(sys.base_prefix) / "lib" / f"python{sys.version_info.major}.{sys.version_info.minor}"
    for src in sorted(stdlib.glob("*.py")) + sorted(stdlib.glob("*/__init__.py")):
        try:
            doc = ast.get_docstring(ast.parse(src.read_text(encoding="utf-8", errors="ignore")))
        except (SyntaxError, ValueError):
            continue
        if doc and len(doc) > 300:
            docs.append((f"module:{src.relative_to(stdlib)}", doc))
    share = Path("/usr/share/doc")
    for pattern in ("*/README*", "*/changelog*", "*/copyright"):
        for path in sorted(share.glob(pattern)):
            if path.is_file():
                docs.append((f"doc:{path.relative_to(share)}", _read(path)))
    for path in sorted(Path("/usr/share/common-licenses").iterdir()):
        if path.is_file():
            docs.append((f"license:{path.name}", _read(path)))
    return [(i, t) for i, t in docs if len(t.strip()) > 300]


def excerpts(text: str, rng: random.Random, n: int, size: int = 480) -> list[str]:
    """n passages of about `size` characters starting at paragraph boundaries."""
    paras = [i for i in range(len(text)) if i == 0 or text[i - 1] == "\n" and text[i] != "\n"]
    out = []
    for _ in range(n):
        start = rng.choice(paras)
        chunk = text[start:start + size]
        cut = max(chunk.rfind(". "), chunk.rfind("\n"))
        chunk = chunk[:cut + 1] if cut > size // 2 else chunk
        if len(chunk.strip()) > 150:
            out.append(chunk.strip())
    return out


def heldout(key: str, fraction: float) -> bool:
    return int(hashlib.sha256(key.encode()).hexdigest()[:8], 16) / 0xFFFFFFFF < fraction


def prompts(n_train: int, n_heldout: int, seed: int = 0) -> dict[str, list[dict]]:
    """Split first (by document and by filler), then draw prompts within each side."""
    rng = random.Random(seed)
    fraction = 0.1
    docs = documents()
    split: dict[str, dict[str, list]] = {"train": {"docs": [], "questions": []},
                                         "heldout": {"docs": [], "questions": []}}
    for doc_id, text in docs:
        split["heldout" if heldout(doc_id, fraction) else "train"]["docs"].append((doc_id, text))
    for kind, fillers in FILLERS.items():
        for x in fillers:
            side = "heldout" if heldout(f"{kind}:{x}", fraction) else "train"
            split[side]["questions"] += [(f"{kind}:{x}", t.format(x=x)) for t in QUESTION_TEMPLATES[kind]]
    out: dict[str, list[dict]] = {}
    for side, n in (("train", n_train), ("heldout", n_heldout)):
        qs = split[side]["questions"]
        rng.shuffle(qs)
        chosen = [{"source": s, "text": q} for s, q in qs[: n // 3]]  # about a third templated questions
        pool = split[side]["docs"]
        while len(chosen) < n:
            doc_id, text = rng.choice(pool)
            for ex in excerpts(text, rng, 1):
                chosen.append({"source": doc_id, "text": rng.choice(PASSAGE_TEMPLATES).format(x=ex)})
        for i, p in enumerate(chosen):
            sampled = side == "train" and rng.random() < 0.3
            p.update(temperature=round(rng.uniform(0.7, 1.0), 2) if sampled else 0.0,
                     max_new_tokens=rng.randint(128, 256), seed=seed * 100_000 + i)
        out[side] = chosen
    return out


def generate(out_dir: Path, n_train: int, n_heldout: int, workers: int, rounds: int = 1) -> None:
    """Round r draws `n_train` more training prompts with seed r (indices r * n_train on); held-out: round 0."""
    from tritongen.engine.engine import Engine
    from tritongen.engine.options import EngineConfig, GenerateOptions, GenerateRequest

    plan = prompts(n_train, n_heldout)
    for r in range(1, rounds):
        seen = {p["text"] for p in plan["train"]}
        plan["train"] += [p for p in prompts(n_train, 0, seed=r)["train"] if p["text"] not in seen]
    engine = Engine(ROOT / "model_repository" / "target_gqa", EngineConfig())
    lock = threading.Lock()
    try:
        for side, items in plan.items():
            path = out_dir / f"{side}.jsonl"
            done = {json.loads(line)["index"] for line in path.open()} if path.exists() else set()
            todo = [(i, p) for i, p in enumerate(items) if i not in done]
            t0, tokens = time.time(), 0
            with path.open("a") as f:
                def one(item: tuple[int, dict]) -> None:
                    nonlocal tokens
                    i, p = item
                    prompt = engine.tokenizer.render_chat([{"role": "user", "content": p["text"]}])
                    t = p["temperature"]
                    opts = GenerateOptions(max_new_tokens=p["max_new_tokens"], greedy=t == 0.0,
                                           temperature=t or 1.0, seed=p["seed"])
                    r = engine.generate(GenerateRequest(prompt, opts))
                    prompt_ids = engine.tokenizer.encode(prompt) if isinstance(prompt, str) else prompt
                    row = {"index": i, **p, "prompt_ids": list(prompt_ids), "answer_ids": list(r.token_ids)}
                    with lock:
                        f.write(json.dumps(row) + "\n")
                        f.flush()
                        tokens += len(r.token_ids)
                with ThreadPoolExecutor(workers) as pool:
                    for n, _ in enumerate(pool.map(one, todo), 1):
                        if n % 25 == 0 or n == len(todo):
                            dt = time.time() - t0
                            print(f"{side}: {n}/{len(todo)} prompts, {tokens} new tokens, {tokens / dt:.0f} tok/s",
                                  flush=True)
    finally:
        engine.close()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--out", type=Path, default=ROOT / "build" / "eagle3")
    parser.add_argument("--train", type=int, default=600)
    parser.add_argument("--heldout", type=int, default=48)
    parser.add_argument("--workers", type=int, default=32)
    parser.add_argument("--rounds", type=int, default=1, help="training prompts: rounds x --train, seeds 0..")
    parser.add_argument("--show", action="store_true", help="print the plan's sizes and a few prompts, no generation")
    args = parser.parse_args()
    args.out.mkdir(parents=True, exist_ok=True)
    if args.show:
        plan = prompts(args.train, args.heldout)
        for side, items in plan.items():
            print(side, len(items), len({p["source"] for p in items}), "sources")
        for p in plan["train"][::97]:
            print(repr(p["text"][:160]))
        return
    generate(args.out, args.train, args.heldout, args.workers, args.rounds)


if __name__ == "__main__":
    main()
