"""Render a results JSONL (from `xlafuse run`) as markdown tables and plots, and as report.html."""

from __future__ import annotations

import argparse
import sys

HELP = "write report.md, report.html and PNG plots from a results file"


def add_arguments(parser: argparse.ArgumentParser) -> None:
    """The options of `xlafuse report`."""
    parser.add_argument("results", help="the results file (results.jsonl) or its folder")
    parser.add_argument("--out", help="output folder (default: the results file's folder)")
    parser.add_argument(
        "--roofline-cell",
        metavar="CELL",
        help="traced cell whose kernels kernel_roofline.png plots: LABEL@VARIANT like "
        "chain[ops=8]/full/forward@no-fusion, or a cell_id (default: the traced reference cell "
        "with the longest time per call)",
    )


def run(args: argparse.Namespace) -> int:
    """Write the report and print its path; say on stderr which lines were not records, or
    that the file holds no cell (its report says so too)."""
    # on use, not at the top: `xlafuse --help` imports no report code (see xlafuse.cli)
    from xlafuse.report.markdown import write_report
    from xlafuse.results.records import read_results

    data = read_results(args.results, empty_ok=True)
    note = data.skipped_note()
    if note:
        print(note, file=sys.stderr)
    if not data.records and not data.skipped:
        print(
            f"results file '{data.path}' holds no cell (it is empty): report.md and "
            "report.html say so",
            file=sys.stderr,
        )
    print(write_report(args.results, out_dir=args.out, roofline_cell=args.roofline_cell))
    return 0
