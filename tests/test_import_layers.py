"""The package's import graph, read with `ast`: no cycles, and no module importing a layer above its own.

Every intra-package import counts: relative ones, those inside functions, and those under `if TYPE_CHECKING:`.
The interpreter skips the last, but a type from a higher layer is still a dependency on that layer, and a cycle
closed by a guarded import is one the reader still has to untangle: guarding an import is not a way out of
either rule. An import of a package counts as an import of its `__init__`; the parent packages that a dotted
import runs implicitly do not count.
"""

from __future__ import annotations

import ast
from functools import cache
from graphlib import CycleError, TopologicalSorter
from pathlib import Path

from conftest import ROOT

SOURCE = ROOT / "backend_src"
# Lowest first. A module may import its own package and the packages of lower layers, never another package of
# its own layer: runtime and kv stay independent (what kv needs of a decoder is kv/protocols.py).
LAYERS = [
    ["__init__", "errors", "request_fields"],  # the standard library only: every layer may use them
    ["json_depth"],  # the standard library and errors: every layer above may use it
    ["runtime", "kv"],
    ["speculative"],
    ["engine"],
    ["triton", "model_build"],  # the Python backend's models, the model builders
    ["serve"],  # starts Triton over a repository
    ["openai_api", "dynamo"],  # front ends, over serve
]
LAYER = {package: level for level, packages in enumerate(LAYERS) for package in packages}


def module_name(path: Path) -> str:
    parts = path.relative_to(SOURCE).with_suffix("").parts
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def package_of(module: str) -> str:
    """The layer unit: tritongen's subpackage or top-level module, "__init__" for tritongen itself."""
    return module.split(".")[1] if "." in module else "__init__"


@cache
def modules() -> dict[str, Path]:
    return {module_name(p): p for p in sorted((SOURCE / "tritongen").rglob("*.py"))}


def imported(node: ast.Import | ast.ImportFrom, module: str, is_package: bool) -> list[str]:
    """The package modules an import statement names (a name that is not a module: the module it is in)."""
    if isinstance(node, ast.Import):
        names = [alias.name for alias in node.names]
    else:
        if node.level:
            base = module.split(".")[:len(module.split(".")) - node.level + is_package]
            source = ".".join(base + ([node.module] if node.module else []))
        else:
            source = node.module or ""
        names = [f"{source}.{alias.name}" if f"{source}.{alias.name}" in modules() else source
                 for alias in node.names]
    found = []
    for name in names:
        while name not in modules() and "." in name:
            name = name.rsplit(".", 1)[0]
        if name in modules():
            found.append(name)
    return found


@cache
def graph() -> dict[str, dict[str, int]]:
    """module -> {imported module: line of the first import}."""
    edges: dict[str, dict[str, int]] = {}
    for module, path in modules().items():
        edges[module] = {}
        for node in ast.walk(ast.parse(path.read_text(), str(path))):
            if isinstance(node, (ast.Import, ast.ImportFrom)):
                for target in imported(node, module, path.name == "__init__.py"):
                    if target != module:
                        edges[module].setdefault(target, node.lineno)
    return edges


def test_the_graph_is_read():
    edges = graph()
    assert "tritongen.runtime.decoder" in edges["tritongen.runtime.open_decoder"]  # a relative import
    assert "tritongen.engine.options" in edges["tritongen.triton.model"]  # an absolute one
    assert sum(len(targets) for targets in edges.values()) > 200


def test_every_package_has_a_layer():
    assert sorted({package_of(m) for m in modules()} - set(LAYER)) == []


def test_no_module_imports_a_layer_above_its_own_or_a_sibling_package():
    wrong = []
    for module, targets in graph().items():
        own = package_of(module)
        for target, line in targets.items():
            other = package_of(target)
            if other != own and LAYER.get(other, -1) >= LAYER.get(own, -1):
                wrong.append(f"{modules()[module].relative_to(ROOT)}:{line} imports {target}")
    assert wrong == []


def test_the_import_graph_has_no_cycles():
    try:
        TopologicalSorter({m: set(targets) for m, targets in graph().items()}).prepare()
    except CycleError as error:
        raise AssertionError(f"an import cycle: {' -> '.join(error.args[1])}") from None
