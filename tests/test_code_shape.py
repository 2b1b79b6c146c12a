"""Size limits that keep the code readable: every function of ours under 80 lines, every class under 300
counting the classes it inherits from (ours, not the standard library's)."""

from __future__ import annotations

import ast
from functools import cache

from conftest import ROOT

FOLDERS = ["backend_src", "bench", "client", "scripts", "tests"]
MAX_FUNCTION_LINES = 79
MAX_CLASS_LINES = 300


@cache
def definitions() -> tuple[list[tuple[str, int]], dict[str, tuple[int, list[str]]]]:
    """(where, lines) of every function; name -> (lines, base names) of every class (of two classes with
    one name, the longer)."""
    functions, classes = [], {}
    for folder in FOLDERS:
        for path in sorted((ROOT / folder).rglob("*.py")):
            for node in ast.walk(ast.parse(path.read_text(), str(path))):
                if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
                    functions.append((f"{path.relative_to(ROOT)}:{node.lineno} {node.name}", span(node)))
                elif isinstance(node, ast.ClassDef) and span(node) > classes.get(node.name, (0, []))[0]:
                    bases = [b.id if isinstance(b, ast.Name) else b.attr for b in node.bases
                             if isinstance(b, (ast.Name, ast.Attribute))]
                    classes[node.name] = (span(node), bases)
    return functions, classes


def span(node: ast.FunctionDef | ast.AsyncFunctionDef | ast.ClassDef) -> int:
    return (node.end_lineno or node.lineno) - node.lineno + 1


def class_lines(name: str, classes: dict[str, tuple[int, list[str]]], seen: frozenset = frozenset()) -> int:
    lines, bases = classes[name]
    return lines + sum(class_lines(b, classes, seen | {name}) for b in bases if b in classes and b not in seen)


def test_every_function_is_under_80_lines():
    functions, _ = definitions()
    assert len(functions) > 1000  # the walk found the code
    long = [(where, lines) for where, lines in functions if lines > MAX_FUNCTION_LINES]
    assert long == [], f"split these: {long}"


def test_no_class_is_over_300_lines_with_its_bases():
    _, classes = definitions()
    large = {name: class_lines(name, classes) for name in classes if class_lines(name, classes) > MAX_CLASS_LINES}
    assert large == {}, f"split these: {large}"
