"""Parse + analyze speed over XLA's own test corpus (MB/s). A benchmark script, not a test.

Reads `../shared/hlo-corpus/xla-tests.jsonl.gz` beside the clone, parses and analyzes every
module's canonical text (XLA's own print, the form XLA writes in dumps) and prints MB/s, the
largest module's time, and how many raw test texts that XLA accepts are read. It says whether
the reader's C line scanner (`xlafuse/hlo/_scan.c`, built by `pip install`) is in use.

Run: python benchmarks/bench_corpus.py [repeats]
"""

import gzip
import json
import sys
import time
from pathlib import Path

from xlafuse.errors import HloParseError
from xlafuse.hlo import _reader, analyze_module, parse_hlo

CORPUS = Path(__file__).resolve().parents[2] / "shared" / "hlo-corpus" / "xla-tests.jsonl.gz"


def main(repeats: int = 3) -> None:
    if not CORPUS.is_file():
        sys.exit(f"no corpus at {CORPUS}")
    with gzip.open(CORPUS, "rt", encoding="utf-8") as f:
        records = [json.loads(line) for line in f]
    accepted = [r for r in records if r["xla_accepts"]]
    canonical = [r["canonical"] for r in accepted]
    size = sum(map(len, canonical))
    built = _reader.scan_lines is not None
    print("reader: " + ("with the C line scanner" if built else "pure Python (no C scanner built)"))
    for i in range(repeats):
        cpu = time.process_time()
        start = time.perf_counter()
        parse, analyze = _parse_all(canonical)
        seconds = time.perf_counter() - start
        cpu = time.process_time() - cpu  # less moved by other work on a shared machine
        print(
            f"run {i + 1}: {len(canonical)} canonical modules, {size / 1e6:.1f} MB parsed + "
            f"analyzed in {seconds:.2f} s = {size / seconds / 1e6:.1f} MB/s "
            f"({size / cpu / 1e6:.1f} MB/s of CPU time: parse {parse:.2f} s, "
            f"analyze {analyze:.2f} s)"
        )
    largest = max(canonical, key=len)
    best = min(_timed(lambda: analyze_module(parse_hlo(largest))) for _ in range(repeats))
    print(f"largest module ({len(largest) / 1e6:.1f} MB): {best:.3f} s parse + analyze")
    for key, texts in [("canonical", canonical), ("raw text", [r["text"] for r in accepted])]:
        read = sum(_reads(t) for t in texts)
        print(f"{key}: {read}/{len(texts)} = {100 * read / len(texts):.2f}% of what XLA reads")


def _parse_all(texts: list[str]) -> tuple[float, float]:
    """Reads every text; returns the CPU seconds spent parsing and analyzing."""
    parse = analyze = 0.0
    clock = time.process_time
    for text in texts:  # each report dropped at once, as by a user reading one module
        start = clock()
        try:
            module = parse_hlo(text)
            parsed = clock()
            analyze_module(module)
        except HloParseError:
            parsed = clock()
        done = clock()
        parse += parsed - start
        analyze += done - parsed
    return parse, analyze


def _reads(text: str) -> bool:
    try:
        analyze_module(parse_hlo(text))
        return True
    except HloParseError:
        return False


def _timed(work) -> float:
    start = time.perf_counter()
    work()
    return time.perf_counter() - start


if __name__ == "__main__":
    main(int(sys.argv[1]) if len(sys.argv) > 1 else 3)
