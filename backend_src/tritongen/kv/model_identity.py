"""Which weights a KV chunk came from: a digest of the model's files, part of every connector key.

Why content and not the folder name: a model rebuilt in place (new weights, same folder) must never
read the KV its predecessor left in a disk tier that survives restarts. Hashing reads the files once
at start-up (about half a second for SmolLM2's 540 MB here), and only when a connector is configured.
"""

from __future__ import annotations

import hashlib
from pathlib import Path

_BLOCK = 1 << 20


def model_identity(onnx_file: Path) -> str:
    """A short digest of the ONNX file and its external data files (those named after it)."""
    digest = hashlib.sha256()
    for path in sorted(p for p in onnx_file.parent.iterdir() if p.is_file() and p.name.startswith(onnx_file.name)):
        digest.update(path.name.encode() + b"\0")
        with open(path, "rb") as f:
            while block := f.read(_BLOCK):
                digest.update(block)
    return digest.hexdigest()[:16]
