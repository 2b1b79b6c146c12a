"""The generator's config.pbtxt `parameters` -> EngineConfig and request defaults.

Unknown keys are errors so a typo does not silently fall back to a default.
"""

from __future__ import annotations

from dataclasses import dataclass

from .options import EngineConfig, GenerateOptions, SchedulerConfig


@dataclass
class GeneratorSettings:
    target_model: str
    engine: EngineConfig
    defaults: dict


_INT_KEYS = ("num_gpu_pages", "page_size", "max_num_seqs", "max_num_batched_tokens", "max_model_len",
             "intra_op_threads", "default_max_tokens")
_KNOWN = set(_INT_KEYS) | {"target_model", "scheduler_policy", "execution_providers"}


def parse_settings(params: dict[str, str]) -> GeneratorSettings:
    unknown = sorted(set(params) - _KNOWN)
    if unknown:
        raise ValueError(f"generator config.pbtxt has unknown parameter(s): {', '.join(unknown)}")
    ints = {}
    for key in _INT_KEYS:
        if key in params and params[key].strip():
            try:
                ints[key] = int(params[key])
            except ValueError:
                raise ValueError(f"generator parameter {key} must be an integer, got {params[key]!r}") from None
    defaults = EngineConfig()
    engine = EngineConfig(
        num_gpu_pages=ints.get("num_gpu_pages", defaults.num_gpu_pages),
        page_size=ints.get("page_size", defaults.page_size),
        scheduler=SchedulerConfig(
            max_num_seqs=ints.get("max_num_seqs", SchedulerConfig.max_num_seqs),
            max_num_batched_tokens=ints.get("max_num_batched_tokens", SchedulerConfig.max_num_batched_tokens),
            policy=params.get("scheduler_policy", "").strip() or SchedulerConfig.policy,
        ),
        max_model_len=ints.get("max_model_len", defaults.max_model_len),
        intra_op_threads=ints.get("intra_op_threads", 0),
        execution_providers=[p.strip() for p in params.get("execution_providers", "").split(",") if p.strip()],
    )
    engine.validate()
    return GeneratorSettings(
        target_model=params.get("target_model", "").strip() or "target_gqa",
        engine=engine,
        defaults={"max_tokens": ints.get("default_max_tokens", GenerateOptions.max_new_tokens)},
    )
