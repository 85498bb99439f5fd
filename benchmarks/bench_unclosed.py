"""Read time of modules whose bracket groups hold a comment or a string that never ends.

A benchmark script, not a test. Each text is about 96 KB (or the size given): an attribute value
of bracket groups, on its own line so that the general path reads it, that hold `/*` with no
`*/` after it, or quotes whose strings never end. A reader that looks for the end of each such
comment or string anew takes time quadratic in the size: before issue 30's fix, 7.5 s, 10.0 s
and 24.9 s for the three texts at 96 KB (2026-12-03, this machine's 2 cores, C scanner; the
same without it); after it, 0.01-0.02 s. Where the C scanner is built, each text is read with
it and without it; both must give the same outcome.

Run: python benchmarks/bench_unclosed.py [kilobytes]
"""

import sys
import time

from xlafuse.errors import HloParseError
from xlafuse.hlo import _reader, parse_hlo

HEAD = "HloModule m\n\nENTRY e {\n  ROOT p = f32[8] parameter(0)\n    , x="
FORMS = {
    "unclosed /* in each group": "{/*}",
    "one group, /* repeated": "/* ",
    "unclosed escaped quotes": '"\\',
}


def texts(kilobytes: int) -> dict[str, str]:
    """The benchmark's texts, each about `kilobytes` KB.

    Args:
        kilobytes: the size of each text in KB.

    Returns:
        Each form's name and its text.
    """
    out = {}
    for label, piece in FORMS.items():
        repeat = kilobytes * 1000 // len(piece)
        body = piece * repeat if piece.startswith("{") else "{" + piece * repeat + "}"
        out[label] = f"{HEAD}{body}\n}}\n"
    return out


def main(kilobytes: int = 96) -> None:
    paths = [("C scanner", _reader.scanner)] if _reader.scanner is not None else []
    paths.append(("pure Python", None))
    compiled = _reader.scanner
    try:
        for label, text in texts(kilobytes).items():
            for path, scanner in paths:
                _reader.scanner = scanner
                start = time.perf_counter()
                try:
                    parse_hlo(text)
                    outcome = "read"
                except HloParseError as exc:
                    outcome = f"rejected: {exc}"[:80]
                took = time.perf_counter() - start
                print(
                    f"{label:>28}, {path:>11}: {len(text) / 1e3:5.1f} KB in {took:8.3f} s, {outcome}"
                )
    finally:
        _reader.scanner = compiled


if __name__ == "__main__":
    main(int(sys.argv[1]) if len(sys.argv) > 1 else 96)
