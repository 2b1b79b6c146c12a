"""A user has only this repository: no tracked file may send them to documents it does not contain (a sibling
folder of the authors' notes, a design document's numbered sections, an issue tracker's numbers)."""

import re
import subprocess
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
# Slashes, dots and spaces in the names are spelt as classes ([/], [.], [ ]) so that this file names none of them.
OUTSIDE = re.compile(
    r"[.][.][/]shared|\bshared[/]|DESIGN[.]md"
    r"|design[ ](doc(ument)?'?s?[ ])?section|section[ ]\d+[ ]of[ ](the[ ])?design"
    r"|\b(issue|stop)[ ]#?\d+|\bthe[ ]seed\b",
    re.IGNORECASE,
)


def tracked_text_files() -> list[Path]:
    names = subprocess.run(["git", "ls-files", "-z"], cwd=ROOT, check=True, capture_output=True).stdout
    paths = [ROOT / name for name in names.decode().split("\0") if name]
    return [p for p in paths if p.is_file()]


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
    # \x2f is "/" and \x2e is ".": the lines are what a stray reference looks like, without this file holding one.
    for line in ["see ..\x2fshared\x2fDESIGN\x2emd", "as DESIGN\x20section 6 says", "fixed for issue\x2028",
                 "stop\x20#37's figures", "the\x20seed's default", "in shared\x2fseed\x2f"]:
        assert OUTSIDE.search(line), line
    for line in ["shared KV head", "issue a request", "section of the docs", "seeded random weights"]:
        assert not OUTSIDE.search(line), line
