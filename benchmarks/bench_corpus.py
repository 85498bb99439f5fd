"""Parse + analyze speed over XLA's own test corpus (MB/s). A benchmark script, not a test.

Reads `../shared/hlo-corpus/xla-tests.jsonl.gz` beside the clone, parses and analyzes every
module's canonical text (XLA's own print, the form XLA writes in dumps) and prints MB/s, the
largest module's time, and how many raw test texts that XLA accepts are read. Each run is done
with the reader's C scanner (`xlafuse/hlo/_scan.c`, built by `pip install`) where it is built,
and without it (the pure-Python reader); and each of those with the cyclic GC paused around
each module (`gc_paused`, as the `xlafuse` command reads) and without (as a library call
reads: `parse_hlo` leaves the GC alone).

Run: python benchmarks/bench_corpus.py [repeats]
"""

import argparse
import gzip
import json
import sys
import time
from contextlib import nullcontext
from pathlib import Path

from xlafuse.errors import HloParseError
from xlafuse.hlo import _reader, analyze_module, parse_hlo
from xlafuse.hlo.parse import gc_paused

CORPUS = Path(__file__).resolve().parents[2] / "shared" / "hlo-corpus" / "xla-tests.jsonl.gz"
PAUSES = {"GC paused": gc_paused, "GC as found": nullcontext}


def main(argv: list[str] | None = None) -> None:
    repeats = command_line(__doc__, repeats=3).parse_args(argv).repeats
    if not CORPUS.is_file():
        sys.exit(f"no corpus at {CORPUS}")
    with gzip.open(CORPUS, "rt", encoding="utf-8") as f:
        records = [json.loads(line) for line in f]
    accepted = [r for r in records if r["xla_accepts"]]
    canonical = [r["canonical"] for r in accepted]
    size = sum(map(len, canonical))
    # With the C scanner built, the pure-Python reader runs beside it, alternating: the ratio of
    # the two holds when the shared machine's speed moves between runs (it does, by up to half).
    scanner = _reader.scanner
    readers = {"C scanner": scanner, "pure Python": None} if scanner else {"pure Python": None}
    if not scanner:
        print("no C scanner built (pip install -e . builds it): the pure-Python reader only")
    runs = [(reader, pause) for reader in readers for pause in PAUSES]
    largest = max(canonical, key=len)
    best = dict.fromkeys(runs, float("inf"))
    best_largest = dict.fromkeys(runs, float("inf"))
    try:
        for i in range(repeats):
            for reader, pause in runs:
                _reader.scanner = readers[reader]
                cpu = time.process_time()
                start = time.perf_counter()
                parse, analyze = _parse_all(canonical, PAUSES[pause])
                seconds = time.perf_counter() - start
                cpu = time.process_time() - cpu  # less moved by other work on a shared machine
                best[reader, pause] = min(best[reader, pause], cpu)
                print(
                    f"run {i + 1}, {reader}, {pause}: {len(canonical)} canonical modules, "
                    f"{size / 1e6:.1f} MB parsed + analyzed in {seconds:.2f} s = "
                    f"{size / seconds / 1e6:.1f} MB/s ({size / cpu / 1e6:.1f} MB/s of CPU time: "
                    f"parse {parse:.2f} s, analyze {analyze:.2f} s)"
                )
                largest_s = timed(lambda p=PAUSES[pause]: _parse_one(largest, p))
                best_largest[reader, pause] = min(best_largest[reader, pause], largest_s)
    finally:
        _reader.scanner = scanner
    for (reader, pause), cpu in best.items():
        print(
            f"{reader}, {pause}: {size / cpu / 1e6:.1f} MB/s of CPU time (best of the runs); "
            f"largest module ({len(largest) / 1e6:.1f} MB): "
            f"{best_largest[reader, pause]:.3f} s parse + analyze"
        )
    for key, texts in [("canonical", canonical), ("raw text", [r["text"] for r in accepted])]:
        read = sum(_reads(t) for t in texts)
        print(f"{key}: {read}/{len(texts)} = {100 * read / len(texts):.2f}% of what XLA reads")


def command_line(doc: str, repeats: int) -> argparse.ArgumentParser:
    """The benchmarks' arguments: how many times each measurement is repeated."""
    parser = argparse.ArgumentParser(
        description=doc, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument(
        "repeats", nargs="?", type=int, default=repeats, help=f"runs of each ({repeats})"
    )
    return parser


def timed(work) -> float:
    """Wall seconds of one call of `work`."""
    start = time.perf_counter()
    work()
    return time.perf_counter() - start


def _parse_all(texts: list[str], pause) -> tuple[float, float]:
    """Reads every text, each inside `pause()`; returns the CPU seconds spent parsing and
    analyzing."""
    parse = analyze = 0.0
    clock = time.process_time
    for text in texts:  # each report dropped at once, as by a user reading one module
        with pause():
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


def _parse_one(text: str, pause) -> None:
    with pause():
        analyze_module(parse_hlo(text))


def _reads(text: str) -> bool:
    try:
        analyze_module(parse_hlo(text))
        return True
    except HloParseError:
        return False


if __name__ == "__main__":
    main()
