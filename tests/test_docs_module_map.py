"""The architecture document's module map must name every module the package ships, and no other."""

import re
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
PACKAGE = ROOT / "backend_src"


def test_module_map_lists_exactly_the_package_modules():
    text = (ROOT / "docs" / "architecture.md").read_text()
    listed = set(re.findall(r"^\| `(tritongen/[\w/]+\.py)` \|", text, re.M))
    shipped = {
        str(p.relative_to(PACKAGE))
        for p in (PACKAGE / "tritongen").rglob("*.py")
        if "__pycache__" not in p.parts
    }
    assert sorted(shipped - listed) == [], "modules missing from docs/architecture.md"
    assert sorted(listed - shipped) == [], "docs/architecture.md names modules that do not exist"
