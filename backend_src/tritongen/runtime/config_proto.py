"""Triton's model configuration message (config.pbtxt's schema), taken from tritonclient without its client.

tritonclient ships the generated module inside `tritonclient.grpc`, whose package `__init__` imports gRPC and
the whole gRPC client: importing it from there would load gRPC into every process that reads a config.pbtxt,
the engine inside Triton's Python backend among them. The one file is loaded under its own name instead, so a
later `import tritonclient.grpc` (a front end in the same process) finds it in `sys.modules` and reuses it, and
the message types are registered with protobuf once.
"""

from __future__ import annotations

import importlib.util
import sys
from pathlib import Path
from types import ModuleType

_NAME = "tritonclient.grpc.model_config_pb2"


def _load() -> ModuleType:
    if _NAME in sys.modules:
        return sys.modules[_NAME]
    package = importlib.util.find_spec("tritonclient")
    if package is None or not package.submodule_search_locations:
        raise ImportError("tritonclient is not installed: it holds Triton's model configuration schema")
    path = Path(next(iter(package.submodule_search_locations))) / "grpc" / "model_config_pb2.py"
    spec = importlib.util.spec_from_file_location(_NAME, path)
    if spec is None or spec.loader is None:
        raise ImportError(f"{path}: not a loadable module")
    module = importlib.util.module_from_spec(spec)
    sys.modules[_NAME] = module
    spec.loader.exec_module(module)
    return module


model_config_pb2 = _load()
