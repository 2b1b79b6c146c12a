"""A user has only this repository: no tracked file may send them to documents it does not contain (a sibling
`shared/` folder, a design document's sections, an issue tracker's numbers)."""

import re
import subprocess
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
OUTSIDE = re.compile(
    r"\.\./shared|\bshared/|DESIGN\.md|design (doc(ument)?'?s? )?section|section \d+ of (the )?design"
    r"|\b(issue|stop) #?\d+|\bthe seed\b",
    re.IGNORECASE,
)


def tracked_text_files() -> list[Path]:
    names = subprocess.run(["git", "ls-files", "-z"], cwd=ROOT, check=True, capture_output=True).stdout
    paths = [ROOT / name for name in names.decode().split("\0") if name]
    return [p for p in paths if p.is_file() and p.resolve() != Path(__file__).resolve()]


def test_no_file_points_outside_the_repository():
    found = []
    for path in tracked_text_files():
        try:
            text = path.read_text()
        except UnicodeDecodeError:  # weights, images
            continue
        found += [f"{path.relative_to(ROOT)}:{n}: {line.strip()}" for n, line in enumerate(text.splitlines(), 1)
                  if OUTSIDE.search(line)]
    assert found == []


def test_the_pattern_finds_what_it_is_for():
    for line in ["see ../shared/DESIGN.md", "as DESIGN section 6 says", "fixed for issue 28", "stop #37's figures",
                 "the seed's default", "in shared/seed/"]:
        assert OUTSIDE.search(line), line
    for line in ["shared KV head", "issue a request", "section of the docs", "seeded random weights"]:
        assert not OUTSIDE.search(line), line
