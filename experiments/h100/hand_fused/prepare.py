"""The hand-fused study's configs as this machine can run them (issue 46).

For each `configs/hand_fused_*.toml`, every implementation variant (`impl=NAME`) that some
workload of the config cannot run here (`xlafuse.models.registry.implementation_problem`: the
installed tokamax does not offer it, the GPU is too old for Mosaic GPU, ...) is left out, and
why is written to OUT/offered.txt; the configs that remain go to OUT/configs/.

Usage, from the repository root: PYTHONPATH=. python3 experiments/h100/hand_fused/prepare.py OUT
"""

from __future__ import annotations

import re
import sys
import tomllib
from pathlib import Path

from xlafuse.compiler import variants
from xlafuse.models import implementations, registry

STUDIES = ("attention", "layernorm", "swiglu", "gpt2")


def kept_variants(data: dict) -> tuple[list[str], list[str]]:
    """(the config's variants every workload can run here, a line per variant left out)."""
    kept, dropped = [], []
    for name in data["experiment"]["variants"]:
        implementation = variants.get(name).implementation
        problems = [
            registry.implementation_problem(
                w["name"], implementation, mode=w.get("mode", "forward"), dtype=w.get("dtype")
            )
            for w in data["workloads"]
            if implementation is not None
        ]
        problems = [p for p in problems if p]
        if problems:
            dropped.append(f"{name}: {problems[0]}")
        else:
            kept.append(name)
    return kept, dropped


def main(out: Path) -> None:
    (out / "configs").mkdir(parents=True, exist_ok=True)
    lines = [f"tokamax {implementations.tokamax_version()}"]
    for op in implementations.OPS:
        lines.append(f"{op}: tokamax offers {', '.join(implementations.offered(op))}")
    for study in STUDIES:
        source = Path(f"configs/hand_fused_{study}.toml")
        text = source.read_text()
        kept, dropped = kept_variants(tomllib.loads(text))
        lines += [f"{study}: left out {line}" for line in dropped]
        shown = ", ".join(f'"{name}"' for name in kept)
        text = re.sub(r"variants = \[.*?\]", f"variants = [{shown}]", text, count=1, flags=re.S)
        (out / "configs" / source.name).write_text(text)
    (out / "offered.txt").write_text("\n".join(lines) + "\n")
    print("\n".join(lines))


if __name__ == "__main__":
    main(Path(sys.argv[1] if len(sys.argv) > 1 else "experiments/h100/hand_fused"))
