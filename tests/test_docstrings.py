"""Docstrings in xlafuse/ are contracts (issue 45): what a function takes, returns and raises, and
why it does what it does. What was measured to decide it, and when, lives in
benchmarks/README.md and experiments/README.md ("Figures behind the code"), not in the code."""

from __future__ import annotations

import ast
import re
from pathlib import Path

import xlafuse

PACKAGE = Path(xlafuse.__file__).resolve().parent
ROOT = PACKAGE.parent

# A lab note: a date, a benchmark's "best of N", a speed against another, a time per call, a
# machine's core count. Text in backticks is an example of a format, not a note.
LAB_NOTE = re.compile(
    r"\b20\d\d-\d\d-\d\d\b|\bbest of (?:\d+|two|three|four|five|six|seven|eight|nine|ten)\b"
    r"|MB/s against|\d ms per call|\bs on \d+ cores\b|\d-core machine"
)


def lab_notes(root: Path) -> list[str]:
    """`FILE:LINE: the note` for each docstring of a module, class or function under `root`."""
    found = []
    for path in sorted(root.rglob("*.py")):
        tree = ast.parse(path.read_text())
        for node in ast.walk(tree):
            kinds = ast.Module | ast.ClassDef | ast.FunctionDef | ast.AsyncFunctionDef
            text = ast.get_docstring(node, clean=False) if isinstance(node, kinds) else None
            for match in LAB_NOTE.finditer(re.sub(r"`[^`]*`", "", text or "")):
                line = getattr(node, "lineno", 1)
                found.append(f"{path.relative_to(root.parent)}:{line}: {match.group(0)}")
    return found


def test_no_docstring_in_the_package_carries_a_lab_note():
    assert lab_notes(PACKAGE) == []


def test_the_scan_finds_a_dated_measurement_and_passes_a_format_example(tmp_path):
    (tmp_path / "pkg").mkdir()
    (tmp_path / "pkg" / "m.py").write_text(
        '"""Reads `2025-06-01 14:03` times."""\n\n\n'
        'def f():\n    """Faster (2026-12-01, best of nine): 26.6 MB/s against 22.3."""\n'
    )
    assert lab_notes(tmp_path / "pkg") == [
        "pkg/m.py:4: 2026-12-01",
        "pkg/m.py:4: best of nine",
        "pkg/m.py:4: MB/s against",
    ]


def test_the_figures_moved_out_of_the_docstrings_are_where_they_point():
    benchmarks = (ROOT / "benchmarks" / "README.md").read_text()
    experiments = (ROOT / "experiments" / "README.md").read_text()
    assert "0.86-0.91 s" in benchmarks and "9.1 MB/s against 25.0" in benchmarks
    assert "8.35 ms per call" in experiments and "0.011 ms in two runs" in experiments
    for heading in ('"The cyclic GC paused while HLO is read"', '"The pure-Python fast reader"'):
        assert f"### {heading.strip(chr(34))}" in benchmarks
    assert (
        "## Figures behind the code" in experiments and "## Figures behind the code" in benchmarks
    )
