"""A model repository beside the real one: the same model folders (symlinked), the generator's own copy
with some config.pbtxt parameters changed, so two servers can differ in one setting only."""

from __future__ import annotations

import re
import shutil
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def variant_repository(folder: Path, parameters: dict[str, str]) -> Path:
    folder.mkdir(parents=True)
    for model in (ROOT / "model_repository").iterdir():
        if model.name != "generator":
            (folder / model.name).symlink_to(model)
    shutil.copytree(ROOT / "model_repository" / "generator", folder / "generator")
    config = folder / "generator" / "config.pbtxt"
    text = config.read_text()
    for key, value in parameters.items():
        text, count = re.subn(rf'(key: "{key}", value: {{ string_value: )"[^"]*"', rf'\1"{value}"', text)
        if count != 1:
            raise ValueError(f"generator config.pbtxt has no parameter {key}")
    config.write_text(text)
    return folder
