"""The generator's config.pbtxt `parameters` -> EngineConfig and request defaults.

Every int, float, bool and str field of EngineConfig and SchedulerConfig is the
parameter of its name, so a new engine setting needs no line here; the rest are
the generator's own or spelled with a prefix (kv_connector_*, kv_events_*).
Unknown keys are errors so a typo does not silently fall back to a default.
"""

from __future__ import annotations

import socket
from collections.abc import Callable, Iterable
from dataclasses import dataclass, fields
from pathlib import Path
from typing import Optional, TypeVar, get_type_hints

from ..engine.options import EngineConfig, GenerateOptions, SchedulerConfig
from ..kv.connector import CachePriority
from ..kv.connector_config import DEFAULT_CHUNK_SIZE, KvConnectorConfig, LocalTieredConfig, RedisTierConfig
from ..kv.kv_events import KvEventsConfig
from ..speculative.head_config import load_head_of
from ..speculative.modes import Eagle3Config, MtpConfig, SharedKvProposerConfig, SpeculativeMode
from .request_limits import RequestLimits

T = TypeVar("T")


@dataclass
class GeneratorSettings:
    target_model: str
    engine: EngineConfig
    defaults: dict
    stream_interval: int = 1  # a streaming response holds at least this many new tokens (the last one fewer)
    limits: RequestLimits = RequestLimits()
    allow_high_priority: bool = False  # clients may ask for `high` (off: it is an error naming priority)
    vllm_metric_aliases: bool = True  # also export the router-facing gauges under vLLM's `vllm:` names
    shutdown_grace_seconds: float = 2.0  # after SIGTERM, open streams go on this long, then end with an error


def _scalar_fields(config: type) -> dict[str, type]:
    """A config class's int, float, bool and str fields (an Optional[int] read as int): each is the parameter of
    its name."""
    hints = get_type_hints(config)
    return {f.name: int if hints[f.name] == Optional[int] else hints[f.name] for f in fields(config)
            if hints[f.name] in (int, Optional[int], float, bool, str)}


_ENGINE_KEYS = _scalar_fields(EngineConfig)
_SCHEDULER_KEYS = _scalar_fields(SchedulerConfig)
# The settings beyond those fields: the generator's own, and the sub-configs' that are spelled with a prefix.
_INT_KEYS = (*(key for key, kind in {**_ENGINE_KEYS, **_SCHEDULER_KEYS}.items() if kind is int),
             "default_max_tokens", "kv_connector_chunk_size", "kv_connector_cpu_bytes", "kv_connector_disk_bytes",
             "stream_interval", "kv_connector_redis_ttl_seconds", "kv_connector_redis_max_bytes",
             "kv_connector_redis_timeout_ms", "kv_events_buffer_steps", *RequestLimits.settings())
_FLOAT_KEYS = (*(key for key, kind in {**_ENGINE_KEYS, **_SCHEDULER_KEYS}.items() if kind is float),
               "shutdown_grace_seconds")
_BOOL_KEYS = (*(key for key, kind in _ENGINE_KEYS.items() if kind is bool), "allow_high_priority",
              "vllm_metric_aliases")
_STR_KEYS = tuple(key for key, kind in _ENGINE_KEYS.items() if kind is str)
_FOLDERS = ("draft_model", "mtp_head", "eagle3_head", "shared_kv_head")
_KNOWN = set(_INT_KEYS) | set(_FLOAT_KEYS) | set(_BOOL_KEYS) | set(_STR_KEYS) | set(_FOLDERS) | {
    "target_model", "scheduler_policy", "execution_providers", "speculative_mode", "mtp_kv_mode",
    "kv_connector", "kv_connector_disk_path", "kv_connector_compression", "kv_connector_store_priority",
    "kv_connector_model_id", "kv_connector_redis_url", "recompute_ms_per_token", "kv_events_endpoint",
    "kv_events_replay_endpoint", "kv_events_topic"}


def parse_settings(params: dict[str, str], repository: Path) -> GeneratorSettings:
    """`repository` holds the folders that target_model, draft_model and the *_head parameters name."""
    unknown = sorted(set(params) - _KNOWN)
    if unknown:
        raise ValueError(f"generator config.pbtxt has unknown parameter(s): {', '.join(unknown)}")
    ints, floats, bools = _typed(params)
    stream_interval = ints.get("stream_interval", 1)
    if stream_interval < 1:
        raise ValueError(f"generator parameter stream_interval must be at least 1, got {stream_interval}")
    grace = floats.get("shutdown_grace_seconds", GeneratorSettings.shutdown_grace_seconds)
    if not 0 <= grace < 3600:
        raise ValueError(f"generator parameter shutdown_grace_seconds must be 0 to 3600, got {grace}")
    # A field's parameter left out or empty keeps the field's default.
    given: dict = {**ints, **floats, **bools, **{key: params[key].strip() for key in _STR_KEYS
                                                 if params.get(key, "").strip()}}
    engine = EngineConfig(
        **{key: given[key] for key in _ENGINE_KEYS if key in given},
        scheduler=SchedulerConfig(**{key: given[key] for key in _SCHEDULER_KEYS if key in given},
                                  policy=params.get("scheduler_policy", "").strip() or SchedulerConfig.policy),
        execution_providers=[p.strip() for p in params.get("execution_providers", "").split(",") if p.strip()],
        speculative_mode=SpeculativeMode(params.get("speculative_mode", "").strip() or "none"),
    )
    _attach_speculative_folders(engine, params, repository)
    engine.kv_connector = _connector(params, ints, repository)
    target_model = params.get("target_model", "").strip() or "target_gqa"
    engine.kv_events = _kv_events(params, ints, target_model)
    engine.validate()
    limits = RequestLimits(**{key: ints[key] for key in RequestLimits.settings() if key in ints})
    small = [key for key in RequestLimits.settings() if getattr(limits, key) < 1]
    if small:
        raise ValueError(f"generator parameter(s) must be at least 1: {', '.join(small)}")
    return GeneratorSettings(
        target_model=target_model,
        engine=engine,
        defaults={"max_tokens": ints.get("default_max_tokens", GenerateOptions.max_new_tokens)},
        stream_interval=stream_interval,
        limits=limits,
        allow_high_priority=bools.get("allow_high_priority", False),
        vllm_metric_aliases=bools.get("vllm_metric_aliases", True),
        shutdown_grace_seconds=grace,
    )


def _typed(params: dict[str, str]) -> tuple[dict[str, int], dict[str, float], dict[str, bool]]:
    """The integer, number and boolean parameters that are set, each parsed or refused by name."""
    ints = _parsed(params, _INT_KEYS, int, "an integer")
    floats = _parsed(params, _FLOAT_KEYS, float, "a number")
    bools = {}
    for key in _BOOL_KEYS:
        value = params.get(key, "").strip().lower()
        if value and value not in ("true", "false"):
            raise ValueError(f"generator parameter {key} must be true or false, got {params[key]!r}")
        if value:
            bools[key] = value == "true"
    return ints, floats, bools


def _parsed(params: dict[str, str], keys: Iterable[str], parse: Callable[[str], T], kind: str) -> dict[str, T]:
    out = {}
    for key in keys:
        if params.get(key, "").strip():
            try:
                out[key] = parse(params[key])
            except ValueError:
                raise ValueError(f"generator parameter {key} must be {kind}, got {params[key]!r}") from None
    return out


def _attach_speculative_folders(engine: EngineConfig, params: dict[str, str], repository: Path) -> None:
    """The draft model and the heads the parameters name, each folder checked to exist."""
    folders = {key: repository / params[key].strip() for key in _FOLDERS if params.get(key, "").strip()}
    missing = [f"{key}={path.name}" for key, path in folders.items() if not path.is_dir()]
    if missing:
        raise ValueError(f"generator parameter(s) name missing repository folder(s): {', '.join(missing)}")
    k = engine.num_speculative_tokens
    engine.draft_model = folders.get("draft_model")
    if "mtp_head" in folders:
        kv_mode = params.get("mtp_kv_mode", "").strip()
        engine.mtp = load_head_of(MtpConfig, folders["mtp_head"], k, **({"kv_mode": kv_mode} if kv_mode else {}))
    if "eagle3_head" in folders:
        engine.eagle3 = load_head_of(Eagle3Config, folders["eagle3_head"], k)
    if "shared_kv_head" in folders:
        engine.shared_kv = load_head_of(SharedKvProposerConfig, folders["shared_kv_head"], k)


def _connector(params: dict[str, str], ints: dict[str, int], repository: Path) -> KvConnectorConfig:
    """kv_connector (null | local_tiered | redis) and its kv_connector_* settings; a relative disk path is under
    the repository."""
    get = lambda key: params.get(key, "").strip()  # noqa: E731
    disk = get("kv_connector_disk_path")
    recompute = get("recompute_ms_per_token")
    priority = get("kv_connector_store_priority") or "session"
    try:
        store_priority = CachePriority[priority.upper()]
    except KeyError:
        raise ValueError("kv_connector_store_priority must be system_prompt, session or opportunistic, "
                         f"got {priority!r}") from None
    tiers = LocalTieredConfig(
        cpu_max_bytes=ints.get("kv_connector_cpu_bytes", LocalTieredConfig.cpu_max_bytes),
        disk_path=(repository / disk) if disk else None,
        disk_max_bytes=ints.get("kv_connector_disk_bytes", LocalTieredConfig.disk_max_bytes),
        compression=get("kv_connector_compression") or "none",
    )
    shared = RedisTierConfig(
        url=get("kv_connector_redis_url") or RedisTierConfig.url,
        ttl_seconds=ints.get("kv_connector_redis_ttl_seconds", RedisTierConfig.ttl_seconds),
        max_bytes=ints.get("kv_connector_redis_max_bytes", RedisTierConfig.max_bytes),
        timeout_ms=ints.get("kv_connector_redis_timeout_ms", RedisTierConfig.timeout_ms),
    )
    return KvConnectorConfig(
        backend=get("kv_connector") or "null", model_id=get("kv_connector_model_id") or None,
        chunk_size=ints.get("kv_connector_chunk_size", DEFAULT_CHUNK_SIZE), store_priority=store_priority,
        recompute_ms_per_token=float(recompute) if recompute else None, local_tiered=tiers, redis=shared,
    )


def _kv_events(params: dict[str, str], ints: dict[str, int], target_model: str) -> KvEventsConfig:
    """kv_events_* settings; the topic defaults to llm-d's `kv@<pod>@<model>` (the host name is the pod's)."""
    endpoint = params.get("kv_events_endpoint", "").strip()
    topic = params.get("kv_events_topic", "").strip() or f"kv@{socket.gethostname()}@{Path(target_model).name}"
    return KvEventsConfig(endpoint=endpoint, replay_endpoint=params.get("kv_events_replay_endpoint", "").strip(),
                          topic=topic if endpoint else "",
                          buffer_steps=ints.get("kv_events_buffer_steps", KvEventsConfig.buffer_steps))
