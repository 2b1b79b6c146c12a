"""`make bench`: the limit, tritongen (in-process and through Triton) and the peers on the same model.onnx,
measured side by side in one run; then perf_analyzer and genai-perf against the same server.

Part 2 (concurrency.py) runs first, right after the warm-up: 1, 4 and 16 concurrent streams, the
GroupQueryAttention variant beside the concat model, and Poisson arrivals through Triton; the part-1 rounds
then fill the time budget that is left (at least one).

Every system is loaded once in its own process. After one warm-up generation each, the measured rounds
ask them in turn (the order rotates every round), one generation at a time, so a change in machine load
hits all of them alike. Figures are reported with their ratio to the raw onnxruntime loop of the same
batch size measured in the same run: on a shared 2-core machine only the ratios travel. The pass/fail
thresholds are the table in targets.py.

    .venv/bin/python -m bench.run [--new-tokens 128] [--rounds 3] [--skip onnx-genai,...] [--no-clients]
"""

from __future__ import annotations

import argparse
import hashlib
import json
import os
import platform
import sys
import time
from dataclasses import dataclass, field
from datetime import datetime, timezone
from importlib import metadata
from pathlib import Path

import numpy as np

from bench import clients, concurrency, genai_folders, peers, report, targets
from bench.prompts import PROMPTS, WARMUP
from bench.worker import Worker

BENCH = Path(__file__).resolve().parent
ROOT = BENCH.parent

# name -> (kind, batch, label in the table, short label in plots)
SYSTEMS = {
    "raw": ("raw", 1, "raw onnxruntime loop (the limit)", "raw"),
    "raw-gqa": ("raw-gqa", 1, "raw onnxruntime loop on target_gqa (GQA, one shared KV buffer per layer)", "raw-gqa"),
    "engine": ("engine", 1, "tritongen engine in-process, as served ({served})", "engine"),
    "triton": ("triton", 1, "tritongen via Triton, gRPC streaming ({served})", "triton"),
    "engine-concat": (
        "engine",
        1,
        "tritongen engine in-process, concat model.onnx (default EngineConfig)",
        "engine-concat",
    ),
    "ort-genai": ("ort-genai", 1, "onnxruntime-genai {v}", "ort-genai"),
    "onnx-genai": ("onnx-genai", 1, "onnx-genai {v} (no ITL: tokens arrive at the end)", "onnx-genai"),
    "raw-b16": ("raw", 16, "raw onnxruntime loop (the limit)", "raw"),
}
CLIENT_TOKENS = 64  # output tokens per genai-perf request (ITL needs no more; keeps make bench short)
WARMUP_TOKENS = 32  # enough to take first-run costs out; longer warm-ups only cost time
REF_TOKENS = 32  # raw-loop reference runs around each client run
PAUSE_S = 0.3  # between systems: lets the previous one's onnxruntime threads stop spinning
GENAI_FOLDER = ROOT / "foreign_models" / "smollm2-genai-int4"  # served in place after the budgeted parts


def log(message: str) -> None:
    print(f"[bench {time.strftime('%H:%M:%S')}] {message}", flush=True)


def version(dist: str) -> str:
    try:
        return metadata.version(dist)
    except metadata.PackageNotFoundError:
        return "?"


def sha256_prefix(path: Path) -> str:
    h = hashlib.sha256()
    with open(path, "rb") as f:
        for block in iter(lambda: f.read(1 << 22), b""):
            h.update(block)
    return h.hexdigest()[:12]


def cpu_model() -> str:
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or "?"


def rel(p: Path) -> Path:
    return p.relative_to(ROOT) if p.is_relative_to(ROOT) else p


def raw_reference(raw: Worker | None, prompt: tuple[str, list[int]], n: int, runs: int = 3) -> dict | None:
    """Raw batch-1 generations next to a client run (median of `runs`): the limit under that moment's load."""
    if raw is None or not raw.process.is_alive():
        return None
    ttft, itl = [], []
    for _ in range(runs):
        try:
            times = raw.run(*prompt, n)["times"]
        except Exception:  # noqa: BLE001 - the client figures still stand without it
            return None
        ttft.append(1e3 * times[0])
        itl.append(1e3 * float(np.median(np.diff(times))))
    return {"ttft_ms": float(np.median(ttft)), "itl_p50_ms": float(np.median(itl))}


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--model-repository", type=Path, default=ROOT / "model_repository")
    ap.add_argument("--new-tokens", type=int, default=128)
    ap.add_argument("--rounds", type=int, default=5, help=f"measured rounds, one prompt each (at most {len(PROMPTS)})")
    ap.add_argument("--skip", default="", help="comma-separated systems to leave out: " + ",".join(SYSTEMS))
    ap.add_argument("--no-clients", action="store_true", help="skip perf_analyzer and genai-perf")
    ap.add_argument("--client-requests", type=int, default=3, help="measured requests per genai-perf run")
    ap.add_argument("--out", type=Path, default=BENCH / "results")
    ap.add_argument("--work", type=Path, default=BENCH / "work")
    ap.add_argument("--budget-min", type=float, default=13.0,
                    help="wall-time budget: stop adding rounds / client runs that would overrun it (loudly)")
    ap.add_argument("--no-concurrency", action="store_true", help="skip part 2 (concurrency, GQA, Poisson)")
    ap.add_argument("--levels", default="1,4,16", help="concurrent streams per part-2 level")
    ap.add_argument("--conc-length", type=int, default=448, help="part 2: prompt tokens (past ~length + n/2)")
    ap.add_argument("--conc-new-tokens", type=int, default=96, help="part 2: new tokens per stream")
    ap.add_argument("--poisson-requests", type=int, default=20, help="part 2: requests in the Poisson run (0: none)")
    ap.add_argument("--poisson-fraction", type=float, default=0.9,
                    help="Poisson rate as a fraction of the request rate Triton sustained with the most streams")
    ap.add_argument("--onnx-genai-server", action="store_true",
                    help="part 2 also drives `onnx-genai serve` (its batch driver prefills one token per step: "
                         "a 16-stream burst takes minutes, so it is off by default)")
    ap.add_argument("--no-genai-folders", action="store_true",
                    help="skip onnxruntime-genai's int4 folder served by Triton beside og.Generator and og.Engine "
                         "(needs `make foreign-models`; about 2 minutes, after the budgeted parts)")
    ap.add_argument("--part2-reserve-min", type=float, default=4.5,
                    help="minutes of the budget kept for the part-1 rounds and the clients after part 2")
    return ap.parse_args(argv)


@dataclass
class Setup:
    """What the run measures with, settled before any system loads."""

    args: argparse.Namespace
    started: float  # time.monotonic() at the start: the time budget counts from here
    n: int  # new tokens per part-1 generation
    rounds: int
    skip: set[str]
    tokenizer: object
    prompts: list[tuple[str, list[int]]]
    warm: tuple[str, list[int]]
    threads: int
    onnx_file: Path  # the concat model: raw loops, peers, the concat engine row
    served: str  # the generator's target model folder
    served_file: Path
    gqa_file: Path
    max_model_len: int
    versions: dict[str, str]
    folders: dict  # the peers' model folders
    levels: tuple[int, ...]
    part2: bool

    @property
    def budget(self) -> float:
        return 60 * self.args.budget_min

    @property
    def client_n(self) -> int:
        return min(self.n, CLIENT_TOKENS)

    @property
    def in_tokens(self) -> int:
        return sorted(len(ids) for _, ids in self.prompts)[len(self.prompts) // 2]


@dataclass
class Measured:
    """What the measuring parts collected (and what failed or was cut)."""

    workers: dict[str, Worker] = field(default_factory=dict)
    failures: dict[str, str] = field(default_factory=dict)
    records: dict[str, list[dict]] = field(default_factory=dict)
    pa: dict | None = None
    gp: list[dict] = field(default_factory=list)
    cut: list[str] = field(default_factory=list)
    loads: list[float] = field(default_factory=list)
    section: concurrency.Section | None = None
    token_notes: dict = field(default_factory=dict)
    server_ok: bool = False
    genai: dict | None = None


def prepare(args: argparse.Namespace, started: float) -> Setup | None:
    """Prompts, versions and the peers' model folders; None (said on stderr) when the model is not built."""
    n, rounds = args.new_tokens, min(args.rounds, len(PROMPTS))
    args.out.mkdir(parents=True, exist_ok=True)
    (args.out / "raw").mkdir(exist_ok=True)
    args.work.mkdir(parents=True, exist_ok=True)

    from bench.systems import generator_parameters
    from tritongen.runtime.tokenizer import TextTokenizer

    target = args.model_repository / "target"
    onnx_file = target / "1" / "model.onnx"
    if not onnx_file.is_file():
        print(f"{onnx_file} missing: run `make models`", file=sys.stderr)
        return None
    tokenizer = TextTokenizer(target)
    prompts = [(text, tokenizer.encode(text)) for text in PROMPTS[:rounds]]
    threads = len(os.sched_getaffinity(0))
    served = generator_parameters(str(args.model_repository)).get("target_model") or "target_gqa"
    versions = {"onnxruntime": version("onnxruntime"), "onnxruntime-genai": version("onnxruntime-genai"),
                "onnx-genai": version("onnx-genai"), "tritonclient": version("tritonclient"),
                "onnx-genai-server": version("onnx-genai-server"),
                "genai-perf": "0.0.16"}
    log(f"{onnx_file} ({onnx_file.stat().st_size / 1e6:.0f} MB), {n} new tokens, {rounds} rounds, "
        f"prompts of {[len(ids) for _, ids in prompts]} tokens, {threads} threads")

    log("peer model folders ...")
    gqa_target = args.model_repository / "target_gqa"
    gqa_file = gqa_target / "1" / "model.onnx"
    max_model_len = int(generator_parameters(str(args.model_repository)).get("max_model_len") or 2048)
    folders = peers.prepare(target, onnx_file, args.work, threads,
                            *((gqa_target, gqa_file, max_model_len) if gqa_file.is_file() else ()))
    return Setup(args=args, started=started, n=n, rounds=rounds, skip={s for s in args.skip.split(",") if s},
                 tokenizer=tokenizer, prompts=prompts, warm=(WARMUP, tokenizer.encode(WARMUP)), threads=threads,
                 onnx_file=onnx_file, served=served, served_file=args.model_repository / served / "1" / "model.onnx",
                 gqa_file=gqa_file, max_model_len=max_model_len, versions=versions, folders=folders,
                 levels=tuple(int(x) for x in args.levels.split(",") if x), part2=not args.no_concurrency)


def worker_options(setup: Setup) -> dict[str, dict]:
    """Every system's worker options, by name (the Triton ones wait for the server)."""
    repository, folders = str(setup.args.model_repository), setup.folders
    options = {"raw": {"model_path": str(setup.onnx_file), "batch": 1},
               "raw-gqa": {"model_path": str(setup.gqa_file), "max_slots": max(setup.levels + (1,)),
                           "max_len": setup.max_model_len},
               "raw-b16": {"model_path": str(setup.onnx_file), "batch": 16},
               "engine": {"model_repository": repository},
               "engine-concat": {"model_repository": repository, "target": "target"},
               "ort-genai": {"workdir": str(folders["ort-genai"])},
               "onnx-genai": {"workdir": str(folders["onnx-genai"])}}
    if setup.part2 and "ort-genai-gqa" in folders:
        options["ort-genai-gqa"] = {"workdir": str(folders["ort-genai-gqa"])}
    if setup.part2 and setup.args.onnx_genai_server and "ort-genai-gqa" in folders:
        options["onnx-genai-server"] = {"workdir": str(folders["ort-genai-gqa"])}
    return options


def load_systems(setup: Setup, server, m: Measured) -> None:
    """Every system in its own process, and tritonserver; a system that fails to load is dropped, loudly."""
    log("loading every system in its own process (and tritonserver) ...")
    kinds = {"ort-genai-gqa": "ort-genai", "onnx-genai-server": "onnx-genai-server"}
    for name, opts in worker_options(setup).items():
        if name not in setup.skip:
            m.workers[name] = Worker(name, kinds.get(name) or SYSTEMS[name][0], **opts)
    if "triton" not in setup.skip or not setup.args.no_clients:
        try:
            server.start(timeout=300)
            m.server_ok = True
            if "triton" not in setup.skip:
                m.workers["triton"] = Worker("triton", "triton", grpc_url=server.url_grpc)
                if setup.part2:
                    m.workers["triton-si4"] = Worker("triton-si4", "triton", grpc_url=server.url_grpc,
                                                     stream_interval=4)
        except RuntimeError as exc:
            m.failures["triton"] = f"tritonserver did not start: {str(exc).splitlines()[0]}"
            log(f"FAILED {m.failures['triton']}\n{exc}")
    for name in list(m.workers):
        if m.workers[name].wait_ready():
            log(f"  {name} loaded in {m.workers[name].load_s:.1f}s")
        else:
            m.failures[name] = m.workers[name].error.strip().splitlines()[-1]
            log(f"FAILED to load {name}:\n{m.workers[name].error}")
            m.workers.pop(name).stop()


def warm_up(setup: Setup, m: Measured) -> list[str]:
    """One short generation per part-1 system; returns the ones that came through, in table order."""
    order = [name for name in SYSTEMS if name in m.workers]
    warm_n = min(setup.n, WARMUP_TOKENS)
    log(f"warm-up: one {warm_n}-token generation each ...")
    for name in order:
        try:
            m.workers[name].run(*setup.warm, warm_n)
        except Exception as exc:  # noqa: BLE001 - one broken system must not hide the others
            m.failures[name] = str(exc).strip().splitlines()[-1]
            log(f"FAILED {name} warm-up:\n{exc}")
        time.sleep(PAUSE_S)
    order = [name for name in order if name not in m.failures]
    m.records = {name: [] for name in order}
    return order


def measure_part2(setup: Setup, m: Measured) -> None:
    args = setup.args
    log(f"part 2: {', '.join(map(str, setup.levels))} concurrent streams, prompts of {args.conc_length} tokens, "
        f"{args.conc_new_tokens} new tokens each ...")
    live = {k: w for k, w in m.workers.items() if k not in m.failures}
    m.section = concurrency.run(live, setup.tokenizer, args.conc_length, args.conc_new_tokens, setup.levels,
                                args.poisson_requests, args.poisson_fraction,
                                deadline=setup.started + setup.budget - 60 * args.part2_reserve_min, pause_s=PAUSE_S)
    log("part 2: token checks ...")
    m.token_notes = concurrency.check_tokens(m.section, live.get("raw"))


def rounds_overrun(setup: Setup, m: Measured, r: int, rounds_started: float) -> bool:
    """Whether another part-1 round and then the clients would overrun the budget (noted in m.cut)."""
    n, client_n, args = setup.n, setup.client_n, setup.args
    round_s = (time.monotonic() - rounds_started) / r
    raw_s = float(np.median([rec["times"][-1] for rec in m.records.get("raw", [])] or [round_s / 6]))
    clients_s = 0 if args.no_clients else \
        3 * ((args.client_requests + 1) * raw_s * client_n / n * 1.3 + raw_s * client_n / n + 30) + 15
    if time.monotonic() - setup.started + round_s + clients_s > setup.budget:
        m.cut.append(f"measured {r} of {setup.rounds} rounds: another ({round_s:.0f}s) and the clients "
                     f"(~{clients_s:.0f}s) would overrun the {args.budget_min:g}-min budget")
        log("TIME BUDGET: " + m.cut[-1])
        return True
    return False


def measure_rounds(setup: Setup, m: Measured, order: list[str]) -> None:
    """Part 1: one prompt per round, every system in turn (the order rotates), while the budget lasts."""
    rounds_started = time.monotonic()
    for r, (text, ids) in enumerate(setup.prompts):
        if r > 0 and rounds_overrun(setup, m, r, rounds_started):
            break
        turn = order[r % len(order):] + order[:r % len(order)] if order else []
        m.loads.append(os.getloadavg()[0])
        log(f"round {r + 1}/{setup.rounds} (load average {m.loads[-1]:.1f}): {', '.join(turn)}")
        for name in turn:
            if name in m.failures:
                continue
            try:
                rec = m.workers[name].run(text, ids, setup.n)
                rec["round"] = r
                m.records[name].append(rec)
            except Exception as exc:  # noqa: BLE001
                m.failures[name] = str(exc).strip().splitlines()[-1]
                log(f"FAILED {name} in round {r + 1}:\n{exc}")
            time.sleep(PAUSE_S)


def measure_clients(setup: Setup, m: Measured, server) -> None:
    """perf_analyzer, then each genai-perf run while the budget lasts, each beside raw-loop references."""
    args, raw, first = setup.args, m.workers.get("raw"), setup.prompts[0]
    raw_refs = [raw_reference(raw, first, REF_TOKENS)]
    log("perf_analyzer (bench/perf_analyzer_input.json) ...")
    m.pa = clients.perf_analyzer(server.url_grpc, args.work)
    log("  FAILED:\n" + m.pa["error"] if "error" in m.pa else "  ok")
    commands = clients.genai_perf_commands(server.url_grpc, server.url_http.removeprefix("http://"),
                                           args.model_repository / "target", setup.in_tokens, setup.client_n,
                                           args.client_requests, args.work / "genai-perf")
    client_started = time.monotonic()
    for k, (name, cmd) in enumerate(commands.items()):
        per_run = (time.monotonic() - client_started) / k if k else 0
        if k and time.monotonic() - setup.started + per_run > setup.budget + 60:
            m.cut.append(f"genai-perf {name} skipped: it would overrun the {args.budget_min:g}-min budget")
            log("TIME BUDGET: " + m.cut[-1])
            continue
        log(f"genai-perf {name} ...")
        m.gp.append(clients.genai_perf(name, cmd))
        log("  FAILED:\n" + m.gp[-1]["error"] if "error" in m.gp[-1] else "  ok")
        raw_refs.append(raw_reference(raw, first, REF_TOKENS))
    for k, summary in enumerate(m.gp):
        around = [r for r in raw_refs[k:k + 2] if r]
        if around:
            summary["raw"] = {key: sum(r[key] for r in around) / len(around) for key in around[0]}


def measure(setup: Setup) -> Measured:
    """Load every system, warm up, then part 2, the part-1 rounds and the clients; every process stopped after."""
    from tritongen.serve import TritonServer

    args, m = setup.args, Measured()
    server = TritonServer(args.model_repository, ["generator"], http_port=0, grpc_port=0, metrics_port=0,
                          log_file=args.work / "tritonserver.log")
    try:
        load_systems(setup, server, m)
        order = warm_up(setup, m)
        if setup.part2:
            measure_part2(setup, m)
        measure_rounds(setup, m, order)
        for name, w in m.workers.items():
            if name != "raw":  # the raw loop stays, as the reference next to the clients
                w.stop()
        if "onnx-genai-server" in m.workers:  # its server process logs how its driver batched
            log(f"onnx-genai server log: {args.work / 'onnx-genai-server.log'}")
        if not args.no_clients and m.server_ok:
            measure_clients(setup, m, server)
    finally:
        for w in m.workers.values():
            w.stop()
        server.stop()
    return m



def measure_genai_folder(setup: Setup) -> dict | None:
    """onnxruntime-genai's int4 folder through Triton beside og.Generator and og.Engine (after the budget)."""
    if setup.args.no_genai_folders or not GENAI_FOLDER.is_dir():
        return None
    log(f"{GENAI_FOLDER.name}: tritongen via Triton beside og.Generator and og.Engine ...")
    try:
        return genai_folders.measure(GENAI_FOLDER, passes=3, tokens=64, threads=setup.threads)
    except Exception as exc:  # noqa: BLE001 - reported in the table, the rest of the bench stands
        return {"error": str(exc).strip().splitlines()[-1]}


def token_check(name: str, runs: list[dict], ref_by_round: dict) -> tuple[str, list[str]]:
    """The `tokens vs raw` cell of a system's row, and its differences and remarks (for PROBLEMS)."""
    notes, remarks = [], []
    for rec in runs:
        ref = ref_by_round.get(rec["round"])
        if ref is None:
            notes.append("no raw reference for this round")
        elif rec is not ref:
            notes += [x for x in report.check_tokens(ref, rec) if x]
        if name == "onnx-genai" and not rec.get("prompt_ids_match", True):
            remarks.append("its tokenizer gave other prompt ids")
        if rec.get("prefix_hits") and rec["prefix_hits"][0]:
            remarks.append(f"round {rec['round'] + 1}: the first request hit the prefix cache "
                           f"({rec['prefix_hits'][0]} tokens), TTFT not cold")
    rows_checked = sum(len(rec["tokens"]) for rec in runs)
    if name == "raw":
        tokens = f"reference ({rows_checked} runs)"
    elif not notes:
        tokens = f"equal ({rows_checked}/{rows_checked} sequences)"
    else:
        tokens = f"**{len(notes)} of {rows_checked} differ**: {notes[0]}"
    if remarks:
        tokens += f"; **{remarks[0]}**"
    return tokens, notes + remarks


def system_rows(setup: Setup, m: Measured, loud: list[str]) -> tuple[list[dict], dict]:
    """Part 1's table rows (figures, ratios' bases, token checks) and the ITL timelines for the plots."""
    ref_by_round = {rec["round"]: rec for rec in m.records.get("raw", [])}
    rows, timelines, bases = [], {}, {}
    for name in SYSTEMS:
        kind, batch, label, short = SYSTEMS[name]
        label = label.format(v=setup.versions.get(name.replace("ort-genai", "onnxruntime-genai"), ""),
                             served=setup.served)
        if name in setup.skip:
            continue
        runs = m.records.get(name, [])
        if name in m.failures or not runs:
            rows.append({"name": label, "batch": batch, "error": m.failures.get(name, "no runs")})
            loud.append(f"{name}: FAILED: {m.failures.get(name, 'no runs')}")
            continue
        fig = report.figures(runs, batch, setup.n)
        if name in ("raw", "raw-b16"):
            bases[batch] = fig
        tokens, problems = token_check(name, runs, ref_by_round)
        loud += [f"{name}: {note}" for note in problems]
        rows.append({"name": label, "batch": batch, "figures": fig, "tokens": tokens, "short": short, "key": name})
        line = report.timeline(runs)
        if line is not None:
            timelines[f"{short} b{batch}"] = line
    for row in rows:
        if "figures" in row:
            row["base"] = bases.get(row["batch"])
    return rows, timelines


def part1_header(setup: Setup, m: Measured, stamp: str, lengths: list[int], loud: list[str]) -> str:
    """The part-1 table's heading paragraph (noting contention, also in PROBLEMS)."""
    n, threads, loads, onnx_file, served_file = setup.n, setup.threads, m.loads, setup.onnx_file, setup.served_file
    measured = max((len(v) for v in m.records.values()), default=0)
    contended = bool(loads) and max(loads) > threads + 1  # the bench itself keeps ~`threads` busy
    if contended:
        loud.append(f"measured under contention: load average {min(loads):.1f}-{max(loads):.1f} at the rounds' "
                    f"starts on {threads} cores; ratios are less reliable than on an idle machine")
    return (
        f"Measured {stamp} on {threads} cores ({cpu_model()}); load average at the start of each round "
        f"{', '.join(f'{x:.1f}' for x in loads)}{' (**contended**: other work was running)' if contended else ''}. "
        f"Model files: `{rel(onnx_file)}` (sha256 {sha256_prefix(onnx_file)}; fp32, concat "
        f"past/present) for the raw loop, both peers and the concat engine row; the generator and the raw "
        f"GQA loop run "
        f"`{rel(served_file)}` (sha256 {sha256_prefix(served_file) if served_file.is_file() else '?'}; "
        f"the same weights in the GroupQueryAttention layout). Greedy, exactly {n} new tokens, prompts of "
        f"{min(lengths)}-{max(lengths)} tokens, 1 warm-up ({min(n, WARMUP_TOKENS)} tokens) + {measured} measured "
        f"rounds per system, interleaved "
        f"(one prompt per round, same for all); onnxruntime {setup.versions['onnxruntime']}. Values are medians "
        f"over rounds (ITL: all inter-token gaps pooled); `(x)` is the ratio to the raw loop of the same "
        f"batch size in this run: for latencies >1 is slower, for tok/s <1 is slower. Batch 16 tok/s "
        f"counts all 16 streams. Best round: the fastest round of each system, the one least disturbed "
        f"by other load.\n"
    )


def clients_markdown(setup: Setup, m: Measured, loud: list[str]) -> str:
    """perf_analyzer's and genai-perf's section ('' when neither ran)."""
    pa, gp = m.pa, m.gp
    if pa is None and not gp:
        return ""
    md = ("\n## perf_analyzer and genai-perf against the generator, unchanged\n\n"
          f"Same server (already warm), concurrency 1, {setup.args.client_requests} measured requests each, no "
          f"genai-perf warm-up (its warm-up request repeats the first prompt, a prefix-cache hit); "
          f"synthetic prompts of {setup.in_tokens} tokens, {setup.client_n} output tokens. `x raw`: ratio to the "
          f"raw batch-1 loop run right before and right after each client (median of 3 runs of {REF_TOKENS} tokens "
          f"each time, mean of before and after), "
          f"since these runs are not interleaved with the rest.\n\n")
    if pa is not None:
        if "error" in pa:
            md += f"perf_analyzer: **FAILED**: `{pa['error'].splitlines()[-1]}`\n\n"
            loud.append(f"perf_analyzer FAILED: {pa['error']}")
        else:
            md += (f"perf_analyzer 2.51 (`-i grpc --streaming`, bench/perf_analyzer_input.json): "
                   f"{pa['requests']} requests, responses per request {pa['responses_per_request']}, tokens "
                   f"{pa['tokens_per_request']}, first response p50 {pa['first_response_ms_p50']:.0f} ms, "
                   f"gap between responses p50 {pa['response_gap_ms_p50']:.1f} ms.\n\n")
    if gp:
        md += report.client_table(gp)
        loud += [f"genai-perf {s['name']} FAILED (sent {s.get('sent')}):\n{s['error']}" for s in gp if "error" in s]
    return md


def part2_intro(section: concurrency.Section) -> str:
    """How part 2 measured, above its table."""
    lo, hi = section.length, section.length + section.n
    short_note = ("" if concurrency.SHORT_TOKENS >= section.n else
                  f" (from 4 streams on with {concurrency.SHORT_TOKENS} new tokens: 16 x {section.n} would take "
                  "minutes)")
    return (
        "\n## Concurrent streams, GQA beside concat (part 2)\n\n"
        f"Same run, before the part-1 rounds. Every stream: a distinct prompt of exactly {section.length} tokens "
        f"(no two share a KV page, so no prefix-cache hits), greedy, exactly {section.n} new tokens, so decode "
        f"runs at a past of {lo}-{hi}. Each level has its own prompts, the same for every system; one run per "
        "system and level, after a short warm-up at that level's batch size; at "
        f"{' and '.join(str(x) for x in concurrency.REPEAT_LEVELS)} stream(s) the raw loops, the engine and "
        f"Triton run {concurrency.PASSES} passes, each on fresh prompts, in alternating order (A B C D, D C B A, "
        "...), before the other systems' one run (a machine too slow for the time budget loses those first), "
        "and their rate is the mean of the passes (`per pass`); the Triton row with `stream_interval` 4 "
        "shares the server with the default Triton row, so it gets prompts of its own (the same prompts would "
        "be prefix-cache hits there). `load` is the load average just before the (first) run (2 cores). "
        "**Decode tok/s, steady**: the window runs from the "
        "moment the last stream got its first token until the first stream got its last (prefills and the "
        "tail are outside it); each stream's rate there is its tokens after its first one in the window over "
        "the time to its last one in the window, and the figure is the sum over streams (for a static batch: "
        "batch x (n-1) / (last - first token)). **End-to-end tok/s**: all new tokens over the time from issuing "
        "the requests to the last token "
        "(prefills included). `x raw`: ratio to the raw loop of that layout at the same batch size in this run. "
        "The raw "
        "loops prefill their one prompt once and repeat its KV into every row (their TTFT is not "
        "comparable); everything else prefills every prompt. Triton: one client and gRPC stream per "
        "request. onnxruntime-genai's one-Generator-per-request rows run each Generator in its own "
        "thread, all started together"
        f"{short_note}. Tokens: each row against the in-process engine's row for the "
        "same prompt; a difference is classified by the raw concat loop's top-2 logit gap at the first "
        "differing token (teacher-forced).\n\n"
    )


def poisson_markdown(section: concurrency.Section, loud: list[str]) -> tuple[str, dict | None]:
    """The Poisson run's section ('' when it did not run) and its figures."""
    if section.poisson is None:
        return "", None
    md = "\n### Poisson arrivals through Triton\n\n"
    if "error" in section.poisson:
        loud.append(f"Poisson run: {section.poisson['error']}")
        return md + f"**Not measured**: {section.poisson['error']}\n", None
    poisson_fig = concurrency.poisson_figures(section.poisson)
    md += (f"Requests with exponential inter-arrival times (numpy seed {section.poisson['seed']}) at "
           f"{section.poisson['fraction']:g}x the request rate Triton sustained in this run with "
           f"{max(section.levels)} streams issued together (streams / time until the last finished); "
           f"prompts of {section.length} tokens (their own), {section.n} new tokens; load average "
           f"{section.poisson['load']:.1f} at the start.\n\n" + concurrency.poisson_table(poisson_fig))
    return md, poisson_fig


@dataclass
class Part2Report:
    markdown: str = ""
    figs: dict = field(default_factory=dict)  # part 2's figures by (system, level)
    poisson: dict | None = None
    targets: list[tuple] = field(default_factory=list)  # targets.evaluate's rows


def part2_report(setup: Setup, m: Measured, rows: list[dict], loud: list[str]) -> Part2Report:
    """Part 2's table, the Poisson run and the throughput targets (read from part 2 and the part-1 rows)."""
    section, out = m.section, Part2Report()
    if section is None:
        return out
    out.figs, raws = concurrency.summarize(section, m.token_notes)
    out.markdown = part2_intro(section) + concurrency.table(section, out.figs, raws, m.token_notes, setup.versions)
    poisson_md, out.poisson = poisson_markdown(section, loud)
    part1 = {r["key"]: r["figures"] for r in rows if r.get("figures") and r.get("key")}
    out.targets = targets.evaluate(figs=out.figs, raws=raws, part1=part1, levels=section.levels)
    out.markdown += (poisson_md + "\n### Throughput targets, read from this run\n\n" + targets.table(out.targets))
    loud += [f"part 2 {k[0]} x{k[1]}: FAILED: {v}" for k, v in section.failures.items()]
    loud += [f"part 2 {k[0]} x{k[1]}: tokens: {v}" for k, v in m.token_notes.items() if "differ" in v]
    loud += [f"TIME BUDGET: {c}" for c in section.cut]
    out.markdown += "".join(f"\n**Time budget**: {c}.\n" for c in section.cut)
    return out


def genai_markdown(setup: Setup, genai: dict, target_rows: list[tuple], loud: list[str]) -> str:
    """The onnxruntime-genai folder's section; its targets are added to `target_rows`."""
    md = "\n## onnxruntime-genai's int4 folder, served in place\n\n"
    if "error" in genai:
        loud.append(f"genai folder FAILED: {genai['error']}")
        return md + f"**FAILED**: `{genai['error']}`\n"
    rows = targets.evaluate(genai=genai)
    target_rows += rows
    return md + genai_folders.markdown(GENAI_FOLDER.name, genai, setup.threads) + "\n" + targets.table(rows)


def write_results(setup: Setup, m: Measured, md: str, rows: list[dict], timelines: dict, part2: Part2Report, *,
                  stamp: str, lengths: list[int], wall: float) -> list[Path]:
    """table.md, summary.json, raw/records.json and the plots under --out; returns the plots' paths."""
    out, section, gp = setup.args.out, m.section, m.gp
    images = report.plots(out, rows, timelines)
    if section is not None and part2.figs:
        images += concurrency.plots(out, section, part2.figs, part2.poisson)
    (out / "table.md").write_text(md)
    part2_raw = None if section is None else {
        "length": section.length, "new_tokens": section.n, "levels": section.levels,
        "runs": {f"{k}@{lvl}": v for (k, lvl), v in section.runs.items()},
        "repeats": {f"{k}@{lvl}": v for (k, lvl), v in section.repeats.items()},
        "loads": {f"{k}@{lvl}": v for (k, lvl), v in section.loads.items()},
        "failures": {f"{k}@{lvl}": v for (k, lvl), v in section.failures.items()}, "poisson": section.poisson}
    (out / "raw" / "records.json").write_text(json.dumps(
        {"records": m.records, "failures": m.failures, "perf_analyzer": m.pa, "genai_perf": gp,
         "versions": setup.versions, "prompt_lengths": lengths, "new_tokens": setup.n,
         "part2": part2_raw}, indent=1))
    summary = {k: v for k, v in ((r.get("key") or r["name"], r.get("figures")) for r in rows)}
    (out / "summary.json").write_text(json.dumps(
        {"measured": stamp, "figures": summary, "failures": m.failures, "genai_perf": [
            {k: s.get(k) for k in ("name", "time_to_first_token", "inter_token_latency", "raw", "error")} for s in gp],
         "part2": {f"{k}@{lvl}": v for (k, lvl), v in part2.figs.items()}, "poisson": part2.poisson,
         "targets": [{"compares": i, "target": w, "ratio": r, "threshold": t, "met": met}
                     for i, w, r, t, met in part2.targets],
         "wall_s": round(wall)}, indent=1) + "\n")
    return images


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    setup = prepare(args, time.monotonic())
    if setup is None:
        return 1
    m = measure(setup)
    m.genai = measure_genai_folder(setup)

    # ---- figures, checks, table, plots -------------------------------------------------------------
    loud: list[str] = []
    rows, timelines = system_rows(setup, m, loud)
    wall = time.monotonic() - setup.started
    measured = max((len(v) for v in m.records.values()), default=0)
    loud += [f"TIME BUDGET: {c}" for c in m.cut]
    stamp = datetime.now(timezone.utc).strftime("%Y-%m-%d %H:%M UTC")
    lengths = [len(ids) for _, ids in setup.prompts[:max(measured, 1)]]
    md = ("## Side by side on one model.onnx\n\n" + part1_header(setup, m, stamp, lengths, loud) + "\n"
          + report.table(rows))
    md += clients_markdown(setup, m, loud)
    part2 = part2_report(setup, m, rows, loud)
    md += part2.markdown
    md += "".join(f"\n**Time budget**: {c}.\n" for c in m.cut)
    if m.genai is not None:
        md += genai_markdown(setup, m.genai, part2.targets, loud)
    md += f"\n`make bench` wall time: {wall / 60:.1f} min.\n"
    images = write_results(setup, m, md, rows, timelines, part2, stamp=stamp, lengths=lengths, wall=wall)

    print()
    print(md)
    print("plots: " + ", ".join(str(rel(p)) for p in images))
    if loud:
        print("\n" + "!" * 78 + "\nPROBLEMS (see above):\n" + "\n".join(f"  - {x}" for x in loud) + "\n" + "!" * 78)
    return 0


if __name__ == "__main__":
    sys.exit(main())
