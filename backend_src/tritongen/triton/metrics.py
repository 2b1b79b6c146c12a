"""Prometheus metrics through pb_utils.MetricFamily, named like the vLLM backend's under `tritongen:`.

Each metric update is a call into the Triton backend, so updates run on the
generator's send thread, never on the engine thread; sharing its FIFO with the
responses means a client that has its final response already finds the request
counted and the gauges that followed its end. The time-per-output-token
histogram takes one call per generated token (17 ms for a 512-token request
here), so those run on a thread of their own: neither the request's final
response nor the other streams' responses wait behind them.

What KV-aware routers and autoscalers read (requests waiting and running, KV
usage as a fraction, the block size) is also exported under vLLM's `vllm:`
names, which llm-d's scheduler and the Gateway API Inference Extension scrape
by default, unless the operator turns the aliases off.
"""

from __future__ import annotations

import time
from functools import partial
from typing import Callable, Protocol

import triton_python_backend_utils as pb_utils

from ..engine.options import GenerateResult

_LATENCY_BUCKETS = [0.001, 0.005, 0.01, 0.02, 0.04, 0.06, 0.08, 0.1, 0.25, 0.5, 0.75, 1.0, 2.5, 5.0, 7.5, 10.0,
                    20.0, 40.0, 80.0]
_TOKEN_BUCKETS = [0.005, 0.01, 0.015, 0.02, 0.025, 0.03, 0.04, 0.05, 0.075, 0.1, 0.15, 0.2, 0.3, 0.4, 0.5, 0.75,
                  1.0, 2.5]


class _Counter(Protocol):
    """A pb_utils counter Metric."""

    def increment(self, value: float) -> None: ...


# Router-facing gauges and their vLLM names (kv_cache_usage_perc is vLLM's V1 name, gpu_cache_usage_perc its
# earlier one, which older Inference Extension releases scrape).
_VLLM_ALIASES = {"running": ("vllm:num_requests_running",), "waiting": ("vllm:num_requests_waiting",),
                 "kv_usage": ("vllm:kv_cache_usage_perc", "vllm:gpu_cache_usage_perc")}


class GeneratorMetrics:
    def __init__(self, labels: dict[str, str], run: Callable[[Callable[[], None]], None],
                 run_per_token: Callable[[Callable[[], None]], None], cache_info: dict[str, str],
                 vllm_aliases: bool = True):
        """`run` queues a metric update on the thread that sends the responses (JobThread.put);
        `run_per_token` the per-token observations on another (JobThread.put). `cache_info` labels the
        cache_config_info metric (block_size, num_gpu_blocks, cache_dtype, and kv_device: cuda or cpu, where the
        running batch's KV lives)."""
        def family(name, description, kind):
            return pb_utils.MetricFamily(name=name, description=description, kind=kind)

        counter, gauge = pb_utils.MetricFamily.COUNTER, pb_utils.MetricFamily.GAUGE
        hist = pb_utils.MetricFamily.HISTOGRAM
        self._families = {
            "prompt": family("tritongen:prompt_tokens_total", "Number of prefill tokens processed.", counter),
            "generation": family("tritongen:generation_tokens_total", "Number of generation tokens processed.",
                                 counter),
            "success": family("tritongen:request_success_total", "Count of finished requests by finish reason.",
                              counter),
            "prefix": family("tritongen:prefix_cache_hit_tokens_total", "Prompt tokens whose KV was reused.", counter),
            "ttft": family("tritongen:time_to_first_token_seconds", "Histogram of time to first token in seconds.",
                           hist),
            "tpot": family("tritongen:time_per_output_token_seconds",
                           "Histogram of time per output token in seconds.", hist),
            "e2e": family("tritongen:e2e_request_latency_seconds",
                          "Histogram of end to end request latency in seconds.", hist),
            "queue": family("tritongen:request_queue_time_seconds", "Histogram of time spent waiting for admission.",
                            hist),
            "running": family("tritongen:num_requests_running", "Requests in the running batch.", gauge),
            "waiting": family("tritongen:num_requests_waiting", "Requests waiting for admission.", gauge),
            "swapped": family("tritongen:num_requests_swapped", "Preempted requests waiting to resume.", gauge),
            "pages_used": family("tritongen:kv_pages_used", "KV pages referenced by requests or sessions.", gauge),
            "pages_free": family("tritongen:kv_pages_free", "KV pages free or holding reusable cached prefixes.",
                                 gauge),
            "kv_usage": family("tritongen:kv_cache_usage_perc", "KV cache usage: pages used over all pages, 0 to 1.",
                               gauge),
            "cache_info": family("tritongen:cache_config_info", "KV cache configuration (labels; value 1).", gauge),
            "masks": family("tritongen:constraint_mask_seconds_total", "Time spent computing constraint masks.",
                            counter),
            "drafted": family("tritongen:spec_draft_tokens_total", "Speculative tokens proposed.", counter),
            "accepted": family("tritongen:spec_accepted_tokens_total", "Speculative tokens the target accepted.",
                               counter),
            "verify": family("tritongen:spec_verify_steps_total", "Verification calls (mean accepted length = "
                             "accepted / verify steps).", counter),
            "connector": family("tritongen:kv_connector_events_total", "KV connector lookups and decisions by "
                                "event (hit_cpu, hit_disk, hit_redis, miss, unavailable, decided_fetch, "
                                "decided_recompute, fetch_failed, stored_chunks).", counter),
            "connector_bytes": family("tritongen:kv_connector_fetched_bytes_total", "Bytes fetched from the "
                                      "KV connector.", counter),
        }
        f = self._families
        self.prompt = f["prompt"].Metric(labels=labels)
        self.generation = f["generation"].Metric(labels=labels)
        self.prefix = f["prefix"].Metric(labels=labels)
        self.ttft = f["ttft"].Metric(labels=labels, buckets=_LATENCY_BUCKETS)
        self.tpot = f["tpot"].Metric(labels=labels, buckets=_TOKEN_BUCKETS)
        self.e2e = f["e2e"].Metric(labels=labels, buckets=_LATENCY_BUCKETS)
        self.queue_time = f["queue"].Metric(labels=labels, buckets=_LATENCY_BUCKETS)
        self.gauges = {k: [f[k].Metric(labels=labels)]
                       for k in ("running", "waiting", "swapped", "pages_used", "pages_free", "kv_usage")}
        self._cache_info = [f["cache_info"].Metric(labels={**labels, **cache_info})]
        if vllm_aliases:
            self._alias_gauges(labels, cache_info)
        for info in self._cache_info:
            info.set(1)
        # Engine totals mirrored as counters: the drain thread adds what grew since the last snapshot.
        self.totals = {k: f[k].Metric(labels=labels) for k in ("masks", "drafted", "accepted", "verify")}
        self.totals["fetched_bytes"] = f["connector_bytes"].Metric(labels=labels)
        for event in ("hit_cpu", "hit_disk", "hit_redis", "miss", "unavailable", "decided_fetch", "decided_recompute",
                      "fetch_failed", "stored_chunks"):
            self.totals[event] = f["connector"].Metric(labels={**labels, "event": event})
        self._totals_seen = dict.fromkeys(self.totals, 0.0)
        self._gauges_seen: dict[str, float] = {}
        self._labels = labels
        self._success: dict[str, _Counter] = {}
        self._run, self._run_per_token = run, run_per_token
        self._last_gauges = 0.0

    def _alias_gauges(self, labels: dict[str, str], cache_info: dict[str, str]) -> None:
        """The same gauges under vLLM's names, labelled with vLLM's model_name too."""
        named = {**labels, "model_name": labels["model"]}
        for key, names in _VLLM_ALIASES.items():
            for name in names:
                family = pb_utils.MetricFamily(name=name, description=f"Alias of tritongen's {key} gauge.",
                                               kind=pb_utils.MetricFamily.GAUGE)
                self._families[name] = family
                self.gauges[key].append(family.Metric(labels=named))
        family = pb_utils.MetricFamily(name="vllm:cache_config_info", description="KV cache configuration.",
                                       kind=pb_utils.MetricFamily.GAUGE)
        self._families["vllm:cache_config_info"] = family
        self._cache_info.append(family.Metric(labels={**named, **cache_info}))

    def request_finished(self, result: GenerateResult) -> None:
        self._run(partial(self._observe, result))
        self._run_per_token(partial(self._observe_intervals, result.timing.inter_token))

    def engine_stepped(self, engine, force: bool = False) -> None:
        """Called on the engine thread after each step (and, forced, as each request ends): snapshot the
        gauges a few times a second; the step that leaves the engine idle always reports."""
        now = time.monotonic()
        snap = engine.snapshot()
        if not force and now - self._last_gauges < 0.2 and snap.busy:
            return
        self._last_gauges = now
        gauges = {"running": snap.running, "waiting": snap.waiting, "swapped": snap.swapped,
                  "pages_used": snap.pages_used, "pages_free": snap.pages_free,
                  "kv_usage": snap.pages_used / max(snap.pages_used + snap.pages_free, 1)}
        totals = {"masks": snap.mask_seconds, "drafted": snap.drafted_tokens, "accepted": snap.accepted_tokens,
                  "verify": snap.verify_calls, **snap.connector}
        self._run(partial(self._publish, gauges, totals))

    def _publish(self, gauges: dict, totals: dict) -> None:
        """Only what changed: each set is a round trip, and in a steady batch most gauges hold still."""
        for name, number in gauges.items():
            if self._gauges_seen.get(name) != number:
                for gauge in self.gauges[name]:
                    gauge.set(number)
                self._gauges_seen[name] = number
        for name, total in totals.items():
            if total > self._totals_seen[name]:
                self.totals[name].increment(total - self._totals_seen[name])
                self._totals_seen[name] = total

    def _observe(self, result: GenerateResult) -> None:
        reason = result.finish_reason.kind
        if reason not in self._success:
            self._success[reason] = self._families["success"].Metric(labels={**self._labels, "finished_reason": reason})
        self._success[reason].increment(1)
        self.prompt.increment(result.num_prompt_tokens)
        self.generation.increment(len(result.token_ids))
        self.prefix.increment(result.prefix_cache_hit_len)
        t = result.timing
        self.queue_time.observe(t.queue)
        self.e2e.observe(t.end_to_end)
        if result.token_ids:
            self.ttft.observe(t.first_token)

    def _observe_intervals(self, intervals: list[float]) -> None:
        for interval in intervals:
            self.tpot.observe(interval)
