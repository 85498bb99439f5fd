"""List every registered workload with its sizes, modes and dtypes, the overrides it accepts
(--overrides K=V, a config's overrides): name, type and default at each size, and its
implementations (a variant's impl=NAME: docs/implementations.md)."""

from __future__ import annotations

import argparse
import json

from xlafuse.cli._devices import add_import_argument, import_user_code

HELP = "the workloads: their sizes, modes, dtypes and overrides"


def add_arguments(p: argparse.ArgumentParser) -> None:
    """The options of `xlafuse workloads`."""
    p.add_argument("names", nargs="*", metavar="NAME", help="only these workloads")
    p.add_argument("--json", action="store_true", help="print JSON")
    add_import_argument(p)


def run(args: argparse.Namespace) -> int:
    """Prints one block per workload (or JSON): the registry's declarations, nothing built."""
    # on use, not at the top: the family modules import JAX (see xlafuse.cli)
    from xlafuse.models import registry

    import_user_code(args)
    names = args.names or registry.available()
    rows = [_describe(registry.spec(name)) for name in names]
    if args.json:
        print(json.dumps({"workloads": rows}, indent=1))
        return 0
    print("\n\n".join(_block(row) for row in rows))
    return 0


def _describe(spec) -> dict:
    """A workload's declarations as JSON-able values; an override's default at every size."""
    from xlafuse.models import implementations  # on use, as in `run`
    from xlafuse.models.registry import DTYPES, SIZES

    configs = {size: spec.config(size) for size in SIZES}
    overrides = [
        {
            "name": key,
            "type": type(value).__name__,
            "defaults": {size: configs[size][key] for size in SIZES},
        }
        for key, value in configs[SIZES[0]].items()
    ]
    return {
        "name": spec.name,
        "sizes": list(SIZES),
        "modes": list(spec.modes),
        "dtypes": list(DTYPES),
        "default_dtype": spec.default_dtype,
        "overrides": overrides,
        "implementations": list(implementations.names(spec.op)),
    }


def _block(row: dict) -> str:
    """`mlp  modes: ...  dtypes: ...`, then its overrides' defaults by size, as TOML writes them."""
    from xlafuse.report.format import text_table  # on use, as in `run`

    dtype = row["default_dtype"] or "per backend"
    head = (
        f"{row['name']}  modes: {', '.join(row['modes'])}  "
        f"dtypes: {', '.join(row['dtypes'])} (default: {dtype})"
    )
    if len(row["implementations"]) > 1:
        head += "\n  implementations: " + ", ".join(f"impl={n}" for n in row["implementations"])
    table = text_table(
        ["  override", "type", *row["sizes"]],
        [
            [f"  {o['name']}", o["type"], *(json.dumps(o["defaults"][s]) for s in row["sizes"])]
            for o in row["overrides"]
        ],
    )
    return f"{head}\n{table}"
