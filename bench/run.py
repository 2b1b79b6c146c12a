"""`make bench`: the limit, tritongen (in-process and through Triton) and the peers on the same model.onnx,
measured side by side in one run; then perf_analyzer and genai-perf against the same server.

Part 2 (concurrency.py) runs first, right after the warm-up: 1, 4 and 16 concurrent streams, the
GroupQueryAttention variant beside the concat model, and Poisson arrivals through Triton; the part-1 rounds
then fill the time budget that is left (at least one).

Every system is loaded once in its own process. After one warm-up generation each, the measured rounds
ask them in turn (the order rotates every round), one generation at a time, so a change in machine load
hits all of them alike. Figures are reported with their ratio to the raw onnxruntime loop of the same
batch size measured in the same run: on a shared 2-core machine only the ratios travel.

    .venv/bin/python bench/run.py [--new-tokens 128] [--rounds 3] [--skip onnx-genai,...] [--no-clients]
"""

from __future__ import annotations

import argparse
import hashlib
import json
import os
import platform
import sys
import time
from datetime import datetime, timezone
from importlib import metadata
from pathlib import Path

HERE = Path(__file__).resolve().parent
ROOT = HERE.parent
sys.path.insert(0, str(HERE))

import clients  # noqa: E402
import concurrency  # noqa: E402
import genai_folders  # noqa: E402
import numpy as np  # noqa: E402
import peers  # noqa: E402
import report  # noqa: E402
from prompts import PROMPTS, WARMUP  # noqa: E402
from worker import Worker  # noqa: E402

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


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--model-repository", type=Path, default=ROOT / "model_repository")
    ap.add_argument("--new-tokens", type=int, default=128)
    ap.add_argument("--rounds", type=int, default=5, help=f"measured rounds, one prompt each (at most {len(PROMPTS)})")
    ap.add_argument("--skip", default="", help="comma-separated systems to leave out: " + ",".join(SYSTEMS))
    ap.add_argument("--no-clients", action="store_true", help="skip perf_analyzer and genai-perf")
    ap.add_argument("--client-requests", type=int, default=3, help="measured requests per genai-perf run")
    ap.add_argument("--out", type=Path, default=HERE / "results")
    ap.add_argument("--work", type=Path, default=HERE / "work")
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
    args = ap.parse_args(argv)
    started = time.monotonic()
    n, rounds = args.new_tokens, min(args.rounds, len(PROMPTS))
    skip = {s for s in args.skip.split(",") if s}
    args.out.mkdir(parents=True, exist_ok=True)
    (args.out / "raw").mkdir(exist_ok=True)
    args.work.mkdir(parents=True, exist_ok=True)

    from tritongen.runtime.tokenizer import TextTokenizer
    from tritongen.serve import TritonServer

    target = args.model_repository / "target"
    onnx_file = target / "1" / "model.onnx"
    if not onnx_file.is_file():
        print(f"{onnx_file} missing: run `make models`", file=sys.stderr)
        return 1
    tokenizer = TextTokenizer(target)
    prompts = [(text, tokenizer.encode(text)) for text in PROMPTS[:rounds]]
    warm = (WARMUP, tokenizer.encode(WARMUP))
    threads = len(os.sched_getaffinity(0))
    from systems import generator_parameters

    served = generator_parameters(str(args.model_repository)).get("target_model") or "target_gqa"
    served_file = args.model_repository / served / "1" / "model.onnx"
    versions = {"onnxruntime": version("onnxruntime"), "onnxruntime-genai": version("onnxruntime-genai"),
                "onnx-genai": version("onnx-genai"), "tritonclient": version("tritonclient"),
                "onnx-genai-server": version("onnx-genai-server"),
                "genai-perf": "0.0.16"}
    log(f"{onnx_file} ({onnx_file.stat().st_size / 1e6:.0f} MB), {n} new tokens, {rounds} rounds, "
        f"prompts of {[len(ids) for _, ids in prompts]} tokens, {threads} threads")

    log("peer model folders ...")
    gqa_target = args.model_repository / "target_gqa"
    gqa_file = gqa_target / "1" / "model.onnx"
    served_settings = generator_parameters(str(args.model_repository))
    max_model_len = int(served_settings.get("max_model_len") or 2048)
    folders = peers.prepare(target, onnx_file, args.work, threads,
                            *((gqa_target, gqa_file, max_model_len) if gqa_file.is_file() else ()))
    levels = tuple(int(x) for x in args.levels.split(",") if x)
    part2 = not args.no_concurrency

    server = TritonServer(args.model_repository, ["generator"], http_port=0, grpc_port=0, metrics_port=0,
                          log_file=args.work / "tritonserver.log")
    workers: dict[str, Worker] = {}
    failures: dict[str, str] = {}
    records: dict[str, list[dict]] = {}
    pa, gp, cut, loads = None, [], [], []
    section, token_notes = None, {}
    in_tokens = sorted(len(ids) for _, ids in prompts)[len(prompts) // 2]
    client_n = min(n, CLIENT_TOKENS)
    try:
        log("loading every system in its own process (and tritonserver) ...")
        options = {"raw": {"model_path": str(onnx_file), "batch": 1},
                   "raw-gqa": {"model_path": str(gqa_file), "max_slots": max(levels + (1,)), "max_len": max_model_len},
                   "raw-b16": {"model_path": str(onnx_file), "batch": 16},
                   "engine": {"model_repository": str(args.model_repository)},
                   "engine-concat": {"model_repository": str(args.model_repository), "target": "target"},
                   "ort-genai": {"workdir": str(folders["ort-genai"])},
                   "onnx-genai": {"workdir": str(folders["onnx-genai"])}}
        if part2 and "ort-genai-gqa" in folders:
            options["ort-genai-gqa"] = {"workdir": str(folders["ort-genai-gqa"])}
        if part2 and args.onnx_genai_server and "ort-genai-gqa" in folders:
            options["onnx-genai-server"] = {"workdir": str(folders["ort-genai-gqa"])}
        kinds = {"ort-genai-gqa": "ort-genai", "onnx-genai-server": "onnx-genai-server"}
        for name, opts in options.items():
            if name not in skip:
                workers[name] = Worker(name, kinds.get(name) or SYSTEMS[name][0], **opts)
        server_ok = False
        if "triton" not in skip or not args.no_clients:
            try:
                server.start(timeout=300)
                server_ok = True
                if "triton" not in skip:
                    workers["triton"] = Worker("triton", "triton", grpc_url=server.url_grpc)
                    if part2:
                        workers["triton-si4"] = Worker("triton-si4", "triton", grpc_url=server.url_grpc,
                                                       stream_interval=4)
            except RuntimeError as exc:
                failures["triton"] = f"tritonserver did not start: {str(exc).splitlines()[0]}"
                log(f"FAILED {failures['triton']}\n{exc}")
        for name in list(workers):
            if workers[name].wait_ready():
                log(f"  {name} loaded in {workers[name].load_s:.1f}s")
            else:
                failures[name] = workers[name].error.strip().splitlines()[-1]
                log(f"FAILED to load {name}:\n{workers[name].error}")
                workers.pop(name).stop()

        order = [name for name in SYSTEMS if name in workers]
        warm_n = min(n, WARMUP_TOKENS)
        log(f"warm-up: one {warm_n}-token generation each ...")
        for name in order:
            try:
                workers[name].run(*warm, warm_n)
            except Exception as exc:  # noqa: BLE001 - one broken system must not hide the others
                failures[name] = str(exc).strip().splitlines()[-1]
                log(f"FAILED {name} warm-up:\n{exc}")
            time.sleep(PAUSE_S)
        order = [name for name in order if name not in failures]
        records = {name: [] for name in order}
        budget = 60 * args.budget_min
        if part2:
            log(f"part 2: {', '.join(map(str, levels))} concurrent streams, prompts of {args.conc_length} tokens, "
                f"{args.conc_new_tokens} new tokens each ...")
            live = {k: w for k, w in workers.items() if k not in failures}
            section = concurrency.run(live, tokenizer, args.conc_length, args.conc_new_tokens, levels,
                                      args.poisson_requests, args.poisson_fraction,
                                      deadline=started + budget - 60 * args.part2_reserve_min, pause_s=PAUSE_S)
            log("part 2: token checks ...")
            token_notes = concurrency.check_tokens(section, live.get("raw"))
        rounds_started = time.monotonic()
        for r, (text, ids) in enumerate(prompts):
            if r > 0:
                round_s = (time.monotonic() - rounds_started) / r
                raw_s = float(np.median([rec["times"][-1] for rec in records.get("raw", [])] or [round_s / 6]))
                clients_s = 0 if args.no_clients else \
                    3 * ((args.client_requests + 1) * raw_s * client_n / n * 1.3 + raw_s * client_n / n + 30) + 15
                if time.monotonic() - started + round_s + clients_s > budget:
                    cut.append(f"measured {r} of {rounds} rounds: another ({round_s:.0f}s) and the clients "
                               f"(~{clients_s:.0f}s) would overrun the {args.budget_min:g}-min budget")
                    log("TIME BUDGET: " + cut[-1])
                    break
            turn = order[r % len(order):] + order[:r % len(order)] if order else []
            loads.append(os.getloadavg()[0])
            log(f"round {r + 1}/{rounds} (load average {loads[-1]:.1f}): {', '.join(turn)}")
            for name in turn:
                if name in failures:
                    continue
                try:
                    rec = workers[name].run(text, ids, n)
                    rec["round"] = r
                    records[name].append(rec)
                except Exception as exc:  # noqa: BLE001
                    failures[name] = str(exc).strip().splitlines()[-1]
                    log(f"FAILED {name} in round {r + 1}:\n{exc}")
                time.sleep(PAUSE_S)
        for name, w in workers.items():
            if name != "raw":  # the raw loop stays, as the reference next to the clients
                w.stop()
        if "onnx-genai-server" in workers:  # its server process logs how its driver batched
            log(f"onnx-genai server log: {args.work / 'onnx-genai-server.log'}")

        if not args.no_clients and server_ok:
            raw_refs = [raw_reference(workers.get("raw"), prompts[0], REF_TOKENS)]
            log("perf_analyzer (bench/perf_analyzer_input.json) ...")
            pa = clients.perf_analyzer(server.url_grpc, args.work)
            log("  FAILED:\n" + pa["error"] if "error" in pa else "  ok")
            commands = clients.genai_perf_commands(server.url_grpc, server.url_http.removeprefix("http://"), target,
                                                   in_tokens, client_n, args.client_requests,
                                                   args.work / "genai-perf")
            client_started = time.monotonic()
            for k, (name, cmd) in enumerate(commands.items()):
                per_run = (time.monotonic() - client_started) / k if k else 0
                if k and time.monotonic() - started + per_run > budget + 60:
                    cut.append(f"genai-perf {name} skipped: it would overrun the {args.budget_min:g}-min budget")
                    log("TIME BUDGET: " + cut[-1])
                    continue
                log(f"genai-perf {name} ...")
                gp.append(clients.genai_perf(name, cmd))
                log("  FAILED:\n" + gp[-1]["error"] if "error" in gp[-1] else "  ok")
                raw_refs.append(raw_reference(workers.get("raw"), prompts[0], REF_TOKENS))
            for k, summary in enumerate(gp):
                around = [r for r in raw_refs[k:k + 2] if r]
                if around:
                    summary["raw"] = {key: sum(r[key] for r in around) / len(around) for key in around[0]}
    finally:
        for w in workers.values():
            w.stop()
        server.stop()

    genai = None
    genai_folder = ROOT / "foreign_models" / "smollm2-genai-int4"
    if not args.no_genai_folders and genai_folder.is_dir():
        log(f"{genai_folder.name}: tritongen via Triton beside og.Generator and og.Engine ...")
        try:
            genai = genai_folders.measure(genai_folder, passes=3, tokens=64, threads=threads)
        except Exception as exc:  # noqa: BLE001 - reported in the table, the rest of the bench stands
            genai = {"error": str(exc).strip().splitlines()[-1]}

    # ---- figures, checks, table, plots -------------------------------------------------------------
    ref_by_round = {rec["round"]: rec for rec in records.get("raw", [])}
    rows, timelines, loud = [], {}, []
    bases = {}
    for name in SYSTEMS:
        kind, batch, label, short = SYSTEMS[name]
        label = label.format(v=versions.get(name.replace("ort-genai", "onnxruntime-genai"), ""), served=served)
        if name in skip:
            continue
        runs = records.get(name, [])
        if name in failures or not runs:
            rows.append({"name": label, "batch": batch, "error": failures.get(name, "no runs")})
            loud.append(f"{name}: FAILED: {failures.get(name, 'no runs')}")
            continue
        fig = report.figures(runs, batch, n)
        if name in ("raw", "raw-b16"):
            bases[batch] = fig
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
        loud += [f"{name}: {note}" for note in notes + remarks]
        rows.append({"name": label, "batch": batch, "figures": fig, "tokens": tokens, "short": short, "key": name})
        line = report.timeline(runs)
        if line is not None:
            timelines[f"{short} b{batch}"] = line
    for row in rows:
        if "figures" in row:
            row["base"] = bases.get(row["batch"])

    wall = time.monotonic() - started
    measured = max((len(v) for v in records.values()), default=0)
    loud += [f"TIME BUDGET: {c}" for c in cut]
    stamp = datetime.now(timezone.utc).strftime("%Y-%m-%d %H:%M UTC")
    lengths = [len(ids) for _, ids in prompts[:max(measured, 1)]]

    def rel(p: Path) -> Path:
        return p.relative_to(ROOT) if p.is_relative_to(ROOT) else p

    contended = bool(loads) and max(loads) > threads + 1  # the bench itself keeps ~`threads` busy
    if contended:
        loud.append(f"measured under contention: load average {min(loads):.1f}-{max(loads):.1f} at the rounds' "
                    f"starts on {threads} cores; ratios are less reliable than on an idle machine")
    header = (
        f"Measured {stamp} on {threads} cores ({cpu_model()}); load average at the start of each round "
        f"{', '.join(f'{x:.1f}' for x in loads)}{' (**contended**: other work was running)' if contended else ''}. "
        f"Model files: `{rel(onnx_file)}` (sha256 {sha256_prefix(onnx_file)}; fp32, concat "
        f"past/present) for the raw loop, both peers and the concat engine row; the generator and the raw "
        f"GQA loop run "
        f"`{rel(served_file)}` (sha256 {sha256_prefix(served_file) if served_file.is_file() else '?'}; "
        f"the same weights in the GroupQueryAttention layout). Greedy, exactly {n} new tokens, prompts of "
        f"{min(lengths)}-{max(lengths)} tokens, 1 warm-up ({min(n, WARMUP_TOKENS)} tokens) + {measured} measured "
        f"rounds per system, interleaved "
        f"(one prompt per round, same for all); onnxruntime {versions['onnxruntime']}. Values are medians "
        f"over rounds (ITL: all inter-token gaps pooled); `(x)` is the ratio to the raw loop of the same "
        f"batch size in this run: for latencies >1 is slower, for tok/s <1 is slower. Batch 16 tok/s "
        f"counts all 16 streams. Best round: the fastest round of each system, the one least disturbed "
        f"by other load.\n"
    )
    md = "## Side by side on one model.onnx\n\n" + header + "\n" + report.table(rows)
    if pa is not None or gp:
        md += ("\n## perf_analyzer and genai-perf against the generator, unchanged\n\n"
               f"Same server (already warm), concurrency 1, {args.client_requests} measured requests each, no "
               f"genai-perf warm-up (its warm-up request repeats the first prompt, a prefix-cache hit); "
               f"synthetic prompts of {in_tokens} tokens, {client_n} output tokens. `x raw`: ratio to the raw batch-1 "
               f"loop run right before and right after each client (median of 3 runs of {REF_TOKENS} tokens each "
               f"time, mean of before and after), "
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
    part1 = {r["key"]: r["figures"] for r in rows if r.get("figures") and r.get("key")}
    conc_figs, poisson_fig, target_rows = {}, None, []
    if section is not None:
        conc_figs, raws = concurrency.summarize(section, token_notes)
        lo, hi = section.length, section.length + section.n
        short_note = ("" if concurrency.SHORT_TOKENS >= section.n else
                      f" (from 4 streams on with {concurrency.SHORT_TOKENS} new tokens: 16 x {section.n} would take "
                      "minutes)")
        md += (
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
        md += concurrency.table(section, conc_figs, raws, token_notes, versions)
        if section.poisson is not None:
            md += "\n### Poisson arrivals through Triton\n\n"
            if "error" in section.poisson:
                md += f"**Not measured**: {section.poisson['error']}\n"
                loud.append(f"Poisson run: {section.poisson['error']}")
            else:
                poisson_fig = concurrency.poisson_figures(section.poisson)
                md += (f"Requests with exponential inter-arrival times (numpy seed {section.poisson['seed']}) at "
                       f"{section.poisson['fraction']:g}x the request rate Triton sustained in this run with "
                       f"{max(section.levels)} streams issued together (streams / time until the last finished); "
                       f"prompts of {section.length} tokens (their own), {section.n} new tokens; load average "
                       f"{section.poisson['load']:.1f} at the start.\n\n" + concurrency.poisson_table(poisson_fig))
        target_rows = concurrency.targets(conc_figs, raws, part1, section.levels)
        md += "\n### Throughput targets, read from this run\n\n" + concurrency.targets_table(target_rows)
        loud += [f"part 2 {k[0]} x{k[1]}: FAILED: {v}" for k, v in section.failures.items()]
        loud += [f"part 2 {k[0]} x{k[1]}: tokens: {v}" for k, v in token_notes.items() if "differ" in v]
        loud += [f"TIME BUDGET: {c}" for c in section.cut]
        md += "".join(f"\n**Time budget**: {c}.\n" for c in section.cut)
    md += "".join(f"\n**Time budget**: {c}.\n" for c in cut)
    if genai is not None:
        md += "\n## onnxruntime-genai's int4 folder, served in place\n\n"
        if "error" in genai:
            md += f"**FAILED**: `{genai['error']}`\n"
            loud.append(f"genai folder FAILED: {genai['error']}")
        else:
            md += genai_folders.markdown(genai_folder.name, genai, threads)
            md += "\n" + concurrency.targets_table(genai_folders.targets(genai))
            target_rows += genai_folders.targets(genai)
    md += f"\n`make bench` wall time: {wall / 60:.1f} min.\n"

    images = report.plots(args.out, rows, timelines)
    if section is not None and conc_figs:
        images += concurrency.plots(args.out, section, conc_figs, poisson_fig)
    (args.out / "table.md").write_text(md)
    part2_raw = None if section is None else {
        "length": section.length, "new_tokens": section.n, "levels": section.levels,
        "runs": {f"{k}@{lvl}": v for (k, lvl), v in section.runs.items()},
        "repeats": {f"{k}@{lvl}": v for (k, lvl), v in section.repeats.items()},
        "loads": {f"{k}@{lvl}": v for (k, lvl), v in section.loads.items()},
        "failures": {f"{k}@{lvl}": v for (k, lvl), v in section.failures.items()}, "poisson": section.poisson}
    (args.out / "raw" / "records.json").write_text(json.dumps(
        {"records": records, "failures": failures, "perf_analyzer": pa, "genai_perf": gp, "versions": versions,
         "prompt_lengths": lengths, "new_tokens": n, "part2": part2_raw}, indent=1))
    summary = {k: v for k, v in ((r.get("key") or r["name"], r.get("figures")) for r in rows)}
    (args.out / "summary.json").write_text(json.dumps(
        {"measured": stamp, "figures": summary, "failures": failures, "genai_perf": [
            {k: s.get(k) for k in ("name", "time_to_first_token", "inter_token_latency", "raw", "error")} for s in gp],
         "part2": {f"{k}@{lvl}": v for (k, lvl), v in conc_figs.items()}, "poisson": poisson_fig,
         "targets": [{"issue": i, "target": w, "ratio": r, "threshold": t, "met": m} for i, w, r, t, m in target_rows],
         "wall_s": round(wall)}, indent=1) + "\n")

    print()
    print(md)
    print("plots: " + ", ".join(str(p.relative_to(ROOT) if p.is_relative_to(ROOT) else p) for p in images))
    if loud:
        print("\n" + "!" * 78 + "\nPROBLEMS (see above):\n" + "\n".join(f"  - {x}" for x in loud) + "\n" + "!" * 78)
    return 0


if __name__ == "__main__":
    sys.exit(main())
