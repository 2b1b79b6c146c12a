"""The connector a configuration names, opened."""

from __future__ import annotations

from .connector import KvCacheConnector, NullConnector
from .connector_config import KvConnectorConfig
from .local_tiered import LocalTieredConnector


def open_connector(config: KvConnectorConfig, model_id: str = "") -> KvCacheConnector:
    """`model_id` ("name@weights-digest") lets a disk tier drop what an earlier build of the same model left."""
    if config.backend == "local_tiered":
        return LocalTieredConnector(config.local_tiered, model_id)
    return NullConnector()
