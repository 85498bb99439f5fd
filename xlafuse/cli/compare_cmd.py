"""`xlafuse compare WORKLOAD`: one workload under several variants, one table."""

from __future__ import annotations

import json


def register(subparsers) -> None:
    p = subparsers.add_parser(
        "compare", help="compile one workload under several variants and tabulate what changed"
    )
    p.add_argument("workload", help="a workload name (see `xlafuse.models.available()`)")
    p.add_argument("--size", default="tiny", help="tiny, small or full (default: tiny)")
    p.add_argument("--mode", default="forward", help="forward or train (default: forward)")
    p.add_argument(
        "--variants",
        default="default,no-fusion",
        help="comma-separated variants; the first is the reference (default: default,no-fusion)",
    )
    p.add_argument("--json", action="store_true", help="print JSON instead of a table")
    p.set_defaults(func=run)


def run(args) -> int:
    from xlafuse import models
    from xlafuse.cli._progress import steps
    from xlafuse.compare import compare_workload

    names = [v.strip() for v in args.variants.split(",") if v.strip()]
    label = f"{args.workload}/{args.size}/{args.mode}"
    with steps(total=1 + len(names)) as step:
        step(f"building {label}")
        workload = models.build(args.workload, size=args.size, mode=args.mode)
        table = compare_workload(workload, variants=names, on_step=step)
    print(json.dumps(table.to_dict(), indent=1) if args.json else table)
    return 0
