"""The systems under test. Each runs one greedy generation of exactly `n` new tokens for a prompt and
returns what a client of it observes: the token ids and, per token, the time it became visible to the
caller (seconds from the moment the request was issued).

Every system lives in its own worker process (see worker.py), so onnxruntime thread pools, the
RTLD_GLOBAL onnxruntime that onnx_genai loads, and memory arenas do not interfere with each other.

The concurrency runs (concurrency.py) call `run_streams(items, n, offsets)` (several requests in flight,
issued together or at given offsets) or `run_tiled` / `run_batch` (one static batch). They return one
record per stream: its tokens, the time each token became visible and when it was issued, all in seconds
from one common start.
"""

from __future__ import annotations

import os
import queue
import threading
import time
from pathlib import Path

import numpy as np

now = time.perf_counter


def _threads() -> int:
    return len(os.sched_getaffinity(0))


def stream_record(tokens, times, issued: float, **extra) -> dict:
    return {"tokens": [int(t) for t in tokens], "times": [float(t) for t in times], "issued": float(issued), **extra}


def result(tokens, times, **extra) -> dict:
    """tokens: list of rows (one per sequence); times: per-token visibility times, seconds from issue."""
    return {"tokens": [[int(t) for t in row] for row in tokens],
            "times": None if times is None else [float(t) for t in times], **extra}


class RawLoop:
    """The limit: plain numpy feeds into one onnxruntime session, concat past/present, argmax, no server.
    Its threads are pinned as the engine's are (pin_threads): this process's one thread on the first CPU,
    onnxruntime's workers on the others."""

    def __init__(self, model_path: str, batch: int = 1, **_):
        import onnxruntime as ort

        from tritongen.runtime.cpu_threads import pin_calling_thread, session_options

        options = session_options(_threads(), pin=True)
        options.graph_optimization_level = ort.GraphOptimizationLevel.ORT_ENABLE_ALL
        pin_calling_thread()
        self.session = ort.InferenceSession(model_path, options, providers=["CPUExecutionProvider"])
        inputs = [i.name for i in self.session.get_inputs()]
        self.layers = sum(1 for n in inputs if n.startswith("past_key_values.") and n.endswith(".key"))
        kv = next(i for i in self.session.get_inputs() if i.name == "past_key_values.0.key").shape
        self.kv_heads, self.head_dim = int(kv[1]), int(kv[3])
        self.batch = batch
        # Only what a greedy loop needs; the hidden-state outputs are computed on the way to the logits anyway.
        self.outputs = ["logits"] + [f"present.{i}.{kv}" for i in range(self.layers) for kv in ("key", "value")]

    def _forward(self, input_ids, position_ids, past: list, total_len: int) -> list:
        """One call with plain numpy feeds: the new tokens on top of `past` (2 per layer), `total_len` in all."""
        feeds = {"input_ids": input_ids, "attention_mask": np.ones((len(input_ids), total_len), dtype=np.int64),
                 "position_ids": position_ids}
        for i in range(self.layers):
            feeds[f"past_key_values.{i}.key"] = past[2 * i]
            feeds[f"past_key_values.{i}.value"] = past[2 * i + 1]
        return self.session.run(self.outputs, feeds)

    def run(self, text: str, ids: list[int], n: int) -> dict:
        b, p = self.batch, len(ids)
        t0 = now()
        empty = np.zeros((b, self.kv_heads, 0, self.head_dim), dtype=np.float32)
        past = [empty] * (2 * self.layers)
        input_ids = np.tile(np.asarray(ids, dtype=np.int64), (b, 1))
        position_ids = np.tile(np.arange(p, dtype=np.int64), (b, 1))
        rows, times, last = [], [], []
        for step in range(n):
            out = self._forward(input_ids, position_ids, past, p + step)
            chosen = out[0][:, -1].argmax(-1)
            past = out[1:]
            rows.append(chosen)
            times.append(now() - t0)
            last.append(out[0][0, -1])  # row 0's logits, for the top-2 gaps computed after the clock stops
            input_ids = chosen[:, None].astype(np.int64)
            position_ids = np.full((b, 1), p + step, dtype=np.int64)
        top2 = [np.partition(logits, -2)[-2:] for logits in last]
        return result(np.stack(rows, 1), times, margins=[float(b - a) for a, b in top2])

    def run_tiled(self, text: str, ids: list[int], n: int, batch: int) -> dict:
        """`batch` rows of one prompt: a batch-1 prefill whose KV is repeated into every row, then `n` - 1
        batched decode steps (the decode is what is measured: every row attends over the same past length;
        the prefill is done once, so no TTFT is reported)."""
        b, p = batch, len(ids)
        t0 = now()
        empty = np.zeros((1, self.kv_heads, 0, self.head_dim), dtype=np.float32)
        out = self._forward(np.asarray([ids], dtype=np.int64), np.arange(p, dtype=np.int64)[None],
                            [empty] * (2 * self.layers), p)
        past = [np.repeat(x, b, axis=0) for x in out[1:]]
        chosen = np.repeat(out[0][:, -1].argmax(-1), b)
        rows, times, last = [chosen], [now() - t0], [out[0][0, -1]]
        for step in range(1, n):
            out = self._forward(chosen[:, None].astype(np.int64), np.full((b, 1), p + step - 1, dtype=np.int64),
                                past, p + step)
            chosen = out[0][:, -1].argmax(-1)
            past = out[1:]
            rows.append(chosen)
            times.append(now() - t0)
            last.append(out[0][0, -1])
        top2 = [np.partition(logits, -2)[-2:] for logits in last]
        tokens = np.stack(rows, 1)
        return {"streams": [stream_record(row, times, 0.0) for row in tokens], "tiled": True,
                "margins": [float(b - a) for a, b in top2]}

    def margin_at(self, ids: list[int], generated: list[int], k: int) -> float:
        """Top-2 logit gap of the raw loop at generated token k (teacher-forced on `generated`[:k]): is a
        divergence there a near-tie?"""
        seq = list(ids) + list(generated[:k])
        empty = np.zeros((1, self.kv_heads, 0, self.head_dim), dtype=np.float32)
        feeds = {"input_ids": np.asarray([seq], dtype=np.int64), "attention_mask": np.ones((1, len(seq)), np.int64),
                 "position_ids": np.arange(len(seq), dtype=np.int64)[None]}
        for i in range(self.layers):
            feeds[f"past_key_values.{i}.key"] = feeds[f"past_key_values.{i}.value"] = empty
        logits = self.session.run(["logits"], feeds)[0][0, -1]
        a, b = np.partition(logits, -2)[-2:]
        return float(b - a)


class RawGqaLoop:
    """The limit on the GroupQueryAttention variant: tritongen's GqaDecoder used directly, one KV buffer per
    layer bound through I/O binding as both past and present (a decode step writes only the new row), argmax,
    no scheduler. A batch of one prompt: prefilled once into slot 0, copied into the other slots. Threads
    pinned as the engine's are (pin_threads)."""

    def __init__(self, model_path: str, max_slots: int = 16, max_len: int = 2048, **_):
        from tritongen.runtime.cpu_threads import pin_calling_thread
        from tritongen.runtime.gqa_decoder import GqaDecoder

        self.decoder = GqaDecoder(Path(model_path), max_slots, max_len, _threads(), pin_threads=True)
        pin_calling_thread()

    def run(self, text: str, ids: list[int], n: int) -> dict:
        rec = self.run_tiled(text, ids, n, 1)
        row = rec["streams"][0]
        return result([row["tokens"]], row["times"], margins=rec["margins"])

    def run_tiled(self, text: str, ids: list[int], n: int, batch: int) -> dict:
        d, p = self.decoder, len(ids)
        t0 = now()
        logits, _ = d.prefill(0, np.asarray([ids], dtype=np.int64), 0)
        chosen = np.repeat(int(logits[0, -1].argmax()), batch)
        last = [logits[0, -1].copy()]
        for slot in range(1, batch):
            d.move(0, slot, p)
        rows, times = [chosen], [now() - t0]
        for step in range(1, n):
            logits, _ = d.decode(chosen[:, None].astype(np.int64), np.full(batch, p + step - 1, dtype=np.int32))
            chosen = logits[:, 0].argmax(-1)
            rows.append(chosen)
            times.append(now() - t0)
            last.append(logits[0, 0].copy())
        top2 = [np.partition(x, -2)[-2:] for x in last]
        tokens = np.stack(rows, 1)
        return {"streams": [stream_record(row, times, 0.0) for row in tokens], "tiled": True,
                "margins": [float(b - a) for a, b in top2]}


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
        import inspect

        from tritongen.engine.engine import Engine
        from tritongen.triton.generator_settings import parse_settings

        params, repository = generator_parameters(model_repository), Path(model_repository)
        # As the Triton model's initialize() does it (newer parse_settings also takes the repository).
        takes_repository = len(inspect.signature(parse_settings).parameters) > 1
        settings = parse_settings(params, repository) if takes_repository else parse_settings(params)
        if target is None:
            self.engine = Engine(repository / settings.target_model, settings.engine)
        else:  # another model folder: the default EngineConfig (the served one may name GQA-only heads)
            from tritongen.engine.options import EngineConfig

            self.engine = Engine(repository / target, EngineConfig())

    def run(self, text: str, ids: list[int], n: int) -> dict:
        from tritongen.engine.options import GenerateOptions, GenerateRequest

        request = GenerateRequest(list(ids), GenerateOptions(max_new_tokens=n, stop_on_eos=False, greedy=True))
        tokens, times = [], []
        t0 = now()
        for token in self.engine.stream(request):
            times.append(now() - t0)
            tokens.append(token.token_id)
        return result([tokens], times)

    def run_streams(self, items: list[tuple[str, list[int]]], n: int, offsets: list[float] | None = None) -> dict:
        """Every prompt as its own request, submitted together (or at `offsets` seconds from the start); a
        token's time is when the engine hands it to the request's callback."""
        from tritongen.engine.options import GenerateOptions, GenerateRequest

        count = len(items)
        tokens = [[] for _ in range(count)]
        times = [[] for _ in range(count)]
        issued, hits, errors = [0.0] * count, [None] * count, [None] * count
        done = queue.Queue()
        steps0 = self.engine.stats.decode_steps
        t0 = now()

        def on_token(i, token):
            times[i].append(now() - t0)
            tokens[i].append(token.token_id)

        def on_done(i, res, error):
            hits[i] = None if res is None else res.prefix_cache_hit_len
            errors[i] = None if error is None else repr(error)
            done.put(i)

        for i, (_, ids) in enumerate(items):
            if offsets is not None:
                time.sleep(max(0.0, t0 + offsets[i] - now()))
            issued[i] = now() - t0
            request = GenerateRequest(list(ids), GenerateOptions(max_new_tokens=n, stop_on_eos=False, greedy=True))
            self.engine.submit(request, on_token=lambda tok, i=i: on_token(i, tok),
                               on_done=lambda res, err, i=i: on_done(i, res, err))
        for _ in range(count):
            done.get(timeout=900)
        failed = [e for e in errors if e]
        if failed:
            raise RuntimeError(f"{len(failed)} request(s) failed: {failed[0]}")
        return {"streams": [stream_record(tokens[i], times[i], issued[i], prefix_hit=hits[i]) for i in range(count)],
                "decode_steps": self.engine.stats.decode_steps - steps0}

    def close(self) -> None:
        self.engine.close()


class TritonGrpc:
    """tritongen through tritonserver: one gRPC stream, input_ids + max_tokens + ignore_eos + stream=true
    (and the request parameter stream_interval when given)."""

    def __init__(self, grpc_url: str, stream_interval: int | None = None, **_):
        import tritonclient.grpc as grpcclient

        self.grpcclient = grpcclient
        self.grpc_url = grpc_url
        self.parameters = None if stream_interval is None else {"stream_interval": stream_interval}
        self.clients: list = []  # one per concurrent stream (run_streams)
        self.active: list[dict] = []
        self.client = grpcclient.InferenceServerClient(grpc_url)
        self.events: queue.Queue = queue.Queue()
        self.client.start_stream(callback=lambda result, error: self.events.put((now(), result, error)))
        self.count = 0

    def _outputs(self):
        """What the bench reads, no more (the generator builds only the outputs a client asks for)."""
        return [self.grpcclient.InferRequestedOutput(name) for name in ("output_ids", "prefix_cache_hit_len")]

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
        self.client.async_stream_infer("generator", inputs, outputs=self._outputs(), request_id=str(self.count),
                                       parameters=self.parameters)
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

    def _stream_client(self, k: int):
        """The k-th extra client, its own channel, as a separate user of the server would have; run_streams
        opens its gRPC stream for each run and closes it after."""
        while len(self.clients) <= k:
            self.clients.append(self.grpcclient.InferenceServerClient(self.grpc_url))
        return self.clients[k]

    def _on_response(self, k: int, res, err) -> None:
        at = now()
        st = self.active[k]
        if err is not None:
            st["error"] = str(err)
            st["done"].set()
            return
        got = res.as_numpy("output_ids")
        got = [] if got is None else got.reshape(-1).tolist()
        st["tokens"] += got
        st["times"] += [at - st["t0"]] * len(got)
        st["responses"] += 1
        if res.get_response().parameters["triton_final_response"].bool_param:
            hit = res.as_numpy("prefix_cache_hit_len")
            st["hit"] = None if hit is None else int(hit.reshape(-1)[0])
            st["done"].set()

    def run_streams(self, items: list[tuple[str, list[int]]], n: int, offsets: list[float] | None = None) -> dict:
        """Every prompt from its own client over its own gRPC stream, issued together (or at `offsets`)."""
        count = len(items)
        for k in range(count):
            self._stream_client(k).start_stream(callback=lambda result, error, k=k: self._on_response(k, result, error))
        t0 = now()
        self.active = [{"tokens": [], "times": [], "responses": 0, "hit": None, "error": None, "t0": t0,
                        "done": threading.Event(), "issued": 0.0} for _ in range(count)]
        for k, (_, ids) in enumerate(items):
            if offsets is not None:
                time.sleep(max(0.0, t0 + offsets[k] - now()))
            inputs = [self._tensor("input_ids", ids, np.int64), self._tensor("max_tokens", [n], np.int32),
                      self._tensor("ignore_eos", [True], np.bool_), self._tensor("stream", [True], np.bool_)]
            self.count += 1
            self.active[k]["issued"] = now() - t0
            self.clients[k].async_stream_infer("generator", inputs, outputs=self._outputs(), request_id=str(self.count),
                                               parameters=self.parameters)
        try:
            for st in self.active:
                if not st["done"].wait(900):
                    raise TimeoutError("a stream did not finish in 900 s")
                if st["error"]:
                    raise RuntimeError(f"generator error: {st['error']}")
        finally:
            # An open stream's reader thread wakes ~17 times a second while idle: 16 of them would disturb
            # every other system's runs. A run that failed cancels what is still in flight.
            unfinished = any(not st["done"].is_set() for st in self.active)
            for client in self.clients[:count]:
                client.stop_stream(cancel_requests=unfinished)
        return {"streams": [stream_record(st["tokens"], st["times"], st["issued"], prefix_hit=st["hit"],
                                          responses=st["responses"]) for st in self.active]}

    def close(self) -> None:
        for client in [self.client, *self.clients]:
            client.stop_stream()
            client.close()


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

    def run_streams(self, items: list[tuple[str, list[int]]], n: int, offsets: list[float] | None = None) -> dict:
        """One Generator per request, each in its own thread, all started together: what a server built on
        onnxruntime-genai does for requests that arrive at different times."""
        og = self.og
        count = len(items)
        records: list = [None] * count
        errors: list = []
        t0 = now()

        def one(i: int, ids: list[int]) -> None:
            try:
                if offsets is not None:
                    time.sleep(max(0.0, t0 + offsets[i] - now()))
                issued = now() - t0
                tokens, times = [], []
                params = og.GeneratorParams(self.model)
                params.set_search_options(do_sample=False, max_length=len(ids) + n, min_length=len(ids) + n)
                generator = og.Generator(self.model, params)
                generator.append_tokens([list(ids)])
                while not generator.is_done():
                    generator.generate_next_token()
                    tokens.append(int(generator.get_next_tokens()[0]))
                    times.append(now() - t0)
                del generator
                records[i] = stream_record(tokens, times, issued)
            except BaseException as exc:  # noqa: BLE001 - reported below
                errors.append(repr(exc))

        threads = [threading.Thread(target=one, args=(i, ids)) for i, (_, ids) in enumerate(items)]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
        if errors:
            raise RuntimeError(f"{len(errors)} generator thread(s) failed: {errors[0]}")
        return {"streams": records}

    def run_batch(self, items: list[tuple[str, list[int]]], n: int) -> dict:
        """One static batch of every prompt (equal lengths), started together: onnxruntime-genai's best case."""
        og = self.og
        lengths = {len(ids) for _, ids in items}
        if len(lengths) != 1:
            raise ValueError(f"a static batch needs prompts of one length, got {sorted(lengths)}")
        p, b = lengths.pop(), len(items)
        rows, times = [], []
        t0 = now()
        params = og.GeneratorParams(self.model)
        params.set_search_options(do_sample=False, batch_size=b, max_length=p + n, min_length=p + n)
        generator = og.Generator(self.model, params)
        generator.append_tokens(np.asarray([ids for _, ids in items], dtype=np.int32))
        while not generator.is_done():
            generator.generate_next_token()
            rows.append(np.asarray(generator.get_next_tokens()).reshape(-1).copy())
            times.append(now() - t0)
        del generator
        tokens = np.stack(rows, 1)
        return {"streams": [stream_record(row, times, 0.0) for row in tokens]}


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


class OnnxGenaiServer:
    """onnx-genai's own server (`onnx-genai serve`, from the onnx-genai-server package: an OpenAI-compatible
    HTTP server with a continuous-batching driver), with one HTTP client thread per concurrent request.

    Its driver batches only a model with a shared past/present buffer (on the concat model it logs "only one
    sequence can be decoded at a time"), so it serves the GQA wrapper (peers.gqa_wrapper). In 0.1.0.dev6 a
    streamed response delivers every token at the end of the request, as the Python API's callback does, so
    per-token times are not observable. Per concurrency setting it runs the prompts twice, all in flight
    together: with max_tokens 1 (each request's end-to-end time is its TTFT) and with max_tokens n (token ids
    from the response's `workflow_outputs`). Its server keeps no prefix cache between requests (the same
    448-token prompt twice took the same time), so both bursts prefill alike, and the decode rate is
    streams * (n - 1) / (mean end-to-end of the n-token burst - mean of the 1-token burst).
    """

    def __init__(self, workdir: str, max_batch: int = 16, **_):
        import socket
        import subprocess
        import sys as _sys

        with socket.socket() as sock:
            sock.bind(("127.0.0.1", 0))
            self.port = sock.getsockname()[1]
        self.model_id = Path(workdir).name
        exe = Path(_sys.executable).parent / "onnx-genai"
        self.log = open(Path(workdir).parent / "onnx-genai-server.log", "w")
        self.process = subprocess.Popen([str(exe), "serve", workdir, "--addr", f"127.0.0.1:{self.port}",
                                         "--max-batch", str(max_batch)], stdout=self.log, stderr=subprocess.STDOUT)
        deadline = time.monotonic() + 300
        while True:
            if self.process.poll() is not None:
                raise RuntimeError(f"onnx-genai serve exited with {self.process.returncode}; see {self.log.name}")
            try:
                self._get("/v1/models")
                break
            except OSError:
                if time.monotonic() > deadline:
                    raise
                time.sleep(0.5)

    def _get(self, path: str) -> dict:
        import http.client
        import json

        conn = http.client.HTTPConnection("127.0.0.1", self.port, timeout=5)
        conn.request("GET", path)
        return json.loads(conn.getresponse().read())

    def _complete(self, text: str, n: int) -> tuple[float, dict]:
        import http.client
        import json

        conn = http.client.HTTPConnection("127.0.0.1", self.port, timeout=900)
        body = json.dumps({"model": self.model_id, "prompt": text, "max_tokens": n, "temperature": 0.0})
        start = now()
        conn.request("POST", "/v1/completions", body, {"content-type": "application/json"})
        answer = json.loads(conn.getresponse().read())
        return now() - start, answer

    @staticmethod
    def _token_ids(answer: dict) -> list[int]:
        import base64

        ids = []
        for out in answer.get("workflow_outputs", []):
            if out.get("output") == "tokens":
                ids += np.frombuffer(base64.b64decode(out["payload"]["bytes"]), dtype="<i8").tolist()
        return ids

    def _burst(self, items, n: int) -> list[tuple[float, dict]]:
        out: list = [None] * len(items)

        def one(i, text):
            try:
                out[i] = self._complete(text, n)
            except BaseException as exc:  # noqa: BLE001
                out[i] = exc

        threads = [threading.Thread(target=one, args=(i, text)) for i, (text, _) in enumerate(items)]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
        bad = [x for x in out if isinstance(x, BaseException) or "error" in x[1]]
        if bad:
            raise RuntimeError(f"onnx-genai server: {bad[0] if isinstance(bad[0], BaseException) else bad[0][1]}")
        return out

    def run(self, text: str, ids: list[int], n: int) -> dict:
        rec = self.run_streams([(text, ids)], n)
        row = rec["streams"][0]
        return result([row["tokens"]], None, ttft=row["ttft"], total=row["total"], ttft_cached=row["ttft"])

    def run_streams(self, items: list[tuple[str, list[int]]], n: int, offsets: list[float] | None = None) -> dict:
        if offsets is not None:
            raise ValueError("onnx-genai's server shows no per-token times: no arrival-time runs")
        first = self._burst(items, 1)
        full = self._burst(items, n)
        streams = [{"tokens": self._token_ids(answer), "times": None, "issued": 0.0, "ttft": ttft, "total": total,
                    "usage": answer.get("usage"), "finish_reason": answer["choices"][0].get("finish_reason")}
                   for (ttft, _), (total, answer) in zip(first, full)]
        return {"streams": streams, "derived": True}

    def close(self) -> None:
        self.process.terminate()
        try:
            self.process.wait(15)
        except Exception:  # noqa: BLE001
            self.process.kill()
        self.log.close()


KINDS = {"raw": RawLoop, "raw-gqa": RawGqaLoop, "engine": EngineInProcess, "triton": TritonGrpc,
         "ort-genai": OrtGenai, "onnx-genai": OnnxGenai, "onnx-genai-server": OnnxGenaiServer}
