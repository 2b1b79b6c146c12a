"""The engine's KV side put together: the page manager over the pool and the decoder's slots, its session
limits, and the KV connector with the keys and the recompute baseline it is used with."""

from __future__ import annotations

import time

import numpy as np

from ..kv.connector import KvCacheConnector
from ..kv.manager import ConnectorLink, KvManager, SessionLimits
from ..kv.model_identity import model_identity
from ..kv.open_connector import open_connector
from ..kv.page_pool import PagePool
from ..runtime.decoder import Decoder
from ..runtime.model_folder import ModelFiles
from .options import EngineConfig


def assemble_kv(config: EngineConfig, files: ModelFiles, decoder: Decoder, pool: PagePool,
                max_len: int) -> tuple[KvManager, KvCacheConnector]:
    model_id = _connector_model_id(config, files)
    connector = open_connector(config.kv_connector, model_id, config.kv_cache_dtype)
    link = _connector_link(config, decoder, connector, model_id)
    kv = KvManager(pool, decoder, link, _session_limits(config, max_len))
    if config.kv_events.enabled:
        kv.cache.events = []  # the prefix cache records its page events from now on
    return kv, connector


def _session_limits(config: EngineConfig, max_len: int) -> SessionLimits:
    full_context = -(-max_len // config.page_size)
    per_session = config.max_session_pages if config.max_session_pages is not None else full_context
    total = config.max_pinned_pages if config.max_pinned_pages is not None else config.num_gpu_pages // 2
    return SessionLimits(per_session, total, config.session_idle_seconds)


def _connector_model_id(config: EngineConfig, files: ModelFiles) -> str:
    """Connector keys name the model and the digest of its files: a rebuilt model never reads stale KV."""
    cfg = config.kv_connector
    if cfg.backend == "null":
        return ""
    return f"{cfg.model_id or files.folder.name}@{model_identity(files.onnx_file)}"


def _connector_link(config: EngineConfig, decoder: Decoder, connector: KvCacheConnector,
                    model_id: str) -> ConnectorLink | None:
    cfg = config.kv_connector
    if cfg.backend == "null":
        return None
    cost = cfg.recompute_ms_per_token or measure_prefill_ms_per_token(decoder)
    shape = decoder.shape
    return ConnectorLink(connector, model_id, shape.num_layers, cfg.chunk_size, cfg.store_priority, cost,
                         (shape.num_layers, 2, shape.num_kv_heads, cfg.chunk_size, shape.head_dim))


def measure_prefill_ms_per_token(decoder: Decoder, tokens: int = 128) -> float:
    """Prefill cost on this machine, the baseline a connector fetch must beat (slot 0 is still free)."""
    ids = np.arange(3, 3 + tokens, dtype=np.int64)[None] % decoder.shape.vocab_size
    decoder.prefill(0, ids, 0)  # warm-up
    start = time.perf_counter()
    decoder.prefill(0, ids, 0)
    return 1000.0 * (time.perf_counter() - start) / tokens
