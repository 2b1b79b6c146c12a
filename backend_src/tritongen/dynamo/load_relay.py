"""The generator's load, relayed to Dynamo's router: KV pages in use, read off Triton's metrics page.

Why: Dynamo's KV router weighs a replica's cached prefix against its load, and the load it reads is each
worker's KV blocks in use (the `kv_used_blocks` signal of the worker's snapshot publisher). The generator exports
that as `tritongen:kv_pages_used` (pages held by requests or sessions; cached prefixes nobody holds are free).
"""

from __future__ import annotations

import asyncio
import logging
import urllib.error

from dynamo.common.backend.publisher import ComponentSnapshot

from ..serve import scrape_metrics

log = logging.getLogger(__name__)
INTERVAL_SECONDS = 0.5


def snapshot(metrics: dict[str, float], total_pages: int) -> ComponentSnapshot:
    prompt = metrics.get("tritongen:prompt_tokens_total", 0.0)
    hits = metrics.get("tritongen:prefix_cache_hit_tokens_total", 0.0)
    return ComponentSnapshot(kv_used_blocks=int(metrics.get("tritongen:kv_pages_used", 0)),
                             kv_total_blocks=total_pages,
                             gpu_cache_usage=metrics.get("tritongen:kv_cache_usage_perc", 0.0), dp_rank=0,
                             kv_cache_hit_rate=hits / prompt if prompt else None)


async def relay_load(metrics_url: str, total_pages: int, publisher) -> None:
    """Publish a snapshot every INTERVAL_SECONDS until cancelled; a failed scrape is logged and retried."""
    while True:
        try:
            metrics = await asyncio.to_thread(scrape_metrics, metrics_url)
            publisher.publish(0, snapshot(metrics, total_pages))
        except (OSError, urllib.error.URLError, ValueError) as exc:
            log.warning("cannot read the generator's load from %s: %s", metrics_url, exc)
        await asyncio.sleep(INTERVAL_SECONDS)
