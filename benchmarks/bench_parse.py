"""Parse speed of `parse_hlo` on the H200 samples (MB/s). A benchmark script, not a test.

Run: python benchmarks/bench_parse.py [repeats]
"""

from pathlib import Path

from bench_corpus import command_line, timed

from xlafuse.hlo import analyze_module, parse_hlo

SAMPLES = Path(__file__).resolve().parent.parent / "tests" / "data" / "h200-jax0.11.2"


def main(argv: list[str] | None = None) -> None:
    repeats = command_line(__doc__, repeats=5).parse_args(argv).repeats
    files = sorted(SAMPLES.glob("*.hlo.txt")) + sorted(
        (SAMPLES / "dump_block_fwd").glob("*after_optimizations.txt")
    )
    texts = [p.read_text() for p in files]
    size = sum(map(len, texts))
    for label, work, nbytes in [
        (f"{len(texts)} sample files", lambda: [parse_hlo(t) for t in texts], size),
        ("parse + analyze", lambda: [analyze_module(parse_hlo(t)) for t in texts], size),
    ]:
        best = min(timed(work) for _ in range(repeats))
        print(
            f"{label:>24}: {nbytes / 1e6:6.2f} MB in {best * 1e3:7.1f} ms = {nbytes / best / 1e6:5.1f} MB/s"
        )


if __name__ == "__main__":
    main()
