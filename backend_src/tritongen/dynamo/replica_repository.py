"""A replica's own model repository: the source's model folders linked, the generator's configuration copied with
the replica's settings (its KV event sockets, no thread pinning).

Why a copy per replica: each Triton server's generator publishes its KV events on sockets of its own, and the
settings live in the generator's config.pbtxt. The model folders themselves are shared, read-only.
"""

from __future__ import annotations

import shutil
from pathlib import Path

from google.protobuf import text_format

from ..runtime.model_card import write_model_card
from .generator_config import read_config


def replica_repository(source: Path, dest: Path, params: dict[str, str]) -> Path:
    """`dest` with `params` set on the generator (an unknown key fails the load, naming it)."""
    source = Path(source).resolve()
    dest.mkdir(parents=True)
    for folder in source.iterdir():
        if folder.is_dir() and folder.name != "generator":
            (dest / folder.name).symlink_to(folder.resolve(), target_is_directory=True)
    shutil.copytree(source / "generator", dest / "generator", ignore=shutil.ignore_patterns("__pycache__"))
    config = read_config(dest)
    for key, value in params.items():
        config.parameters[key].string_value = value
    (dest / "generator" / "config.pbtxt").write_text(text_format.MessageToString(config), encoding="utf-8")
    return dest


def model_path(target: Path, card: Path) -> Path:
    """What Dynamo's frontend reads: the served folder when it has a config.json, else a model card beside it."""
    return target if (target / "config.json").is_file() else write_model_card(target, card)
