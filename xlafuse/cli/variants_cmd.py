"""List the variant presets, their XLA options here, and where they apply."""

from __future__ import annotations

import argparse
import json

from xlafuse.kinds import Framework
from xlafuse.report.format import fit

HELP = "the fusion variant presets and their XLA options"


def add_arguments(p: argparse.ArgumentParser) -> None:
    """The options of `xlafuse variants`."""
    p.add_argument("--json", action="store_true", help="print JSON")


def run(args: argparse.Namespace) -> int:
    """Prints one block per preset: name, applies here or not, description, XLA options."""
    # on use, not at the top: `xlafuse --help` imports no JAX (see xlafuse.cli)
    import jax

    from xlafuse.compiler import variants

    backend = jax.default_backend()
    rows = [_describe(variants.get(name), backend) for name in variants.available()]
    if args.json:
        print(json.dumps({"backend": backend, "variants": rows}, indent=1))
        return 0
    print(f"backend: {backend}")
    for row in rows:
        here = "applies here" if row["applies"] else f"{'/'.join(row['backends'])} only"
        print(fit(f"\n{row['name']}  ({here})\n  {row['description']}"))
        if row["framework"] == Framework.TORCH:
            print(fit(f"  {_torch_line(row)}"))
            continue
        for key, value in row["options"].items():
            print(fit(f"  {key}={value!r}"))
        if not row["options"]:
            print("  (no options: XLA as shipped)")
        if row["remains"]:
            print(fit(f"  cannot be switched off: {row['remains']}"))
    print(fit(f"\n{IMPLEMENTATION_LINE}"))
    return 0


# Not a preset: a part any variant may end with (`xlafuse.compiler.variants.implementation_variant`).
IMPLEMENTATION_LINE = (
    "impl=NAME  (composes: no-fusion+impl=NAME)\n  another implementation of the workload's "
    "computation, its own being xla: tokamax's kernels (`xlafuse workloads` lists each "
    "workload's) or the user's (docs/implementations.md)"
)


def _torch_line(row: dict) -> str:
    from xlafuse.compiler.variants import TORCH_INSTALL  # on use, as in `run`

    kwargs = row["torch_compile"]
    how = (
        "eager"
        if kwargs is None
        else f"torch.compile({', '.join(f'{k}={v!r}' for k, v in kwargs.items())})"
    )
    version = row["framework_version"]
    installed = f"torch {version}" if version else f"torch not installed: {TORCH_INSTALL}"
    return f"the workload's PyTorch twin, {how} ({installed})"


def _describe(variant, backend: str) -> dict:
    from xlafuse.compiler.variants import DISABLE_PASSES  # on use, as in `run`

    applies = variant.applies_to(backend)
    if applies:
        options = variant.compiler_options(backend=backend)
    else:  # not validated: its passes belong to another backend's XLA
        options = variant.options_for(backend)
        if variant.passes_for(backend):
            options[DISABLE_PASSES] = ",".join(variant.passes_for(backend))
    return {
        "name": variant.name,
        "description": variant.description,
        "applies": applies,
        "backends": list(variant.backends),
        "options": options,
        "remains": variant.remains,
        "framework": variant.framework,
        "framework_version": variant.framework_version(),
        "torch_compile": None if variant.torch_compile is None else dict(variant.torch_compile),
    }
