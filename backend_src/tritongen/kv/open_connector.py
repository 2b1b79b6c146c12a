"""The connector a configuration names, opened."""

from __future__ import annotations

from .connector import KvCacheConnector, NullConnector
from .connector_config import KvConnectorConfig
from .local_tiered import LocalTieredConnector
from .redis_tier import RedisTierConnector


def open_connector(config: KvConnectorConfig, model_id: str = "", kv_dtype: str = "f32") -> KvCacheConnector:
    """`model_id` ("name@weights-digest") lets a disk tier drop what an earlier build of the same model left;
    `kv_dtype` is the page dtype, the one chunks are stored in."""
    if config.backend == "local_tiered":
        return LocalTieredConnector(config.local_tiered, model_id, kv_dtype)
    if config.backend == "redis":
        return RedisTierConnector(config.redis, model_id, kv_dtype)
    return NullConnector()
