"""List HLO pass names the running XLA uses on this backend (names accepted by
xla_disable_hlo_passes)."""

from __future__ import annotations

import argparse

HELP = "the fusion-related HLO passes of the running XLA"


def add_arguments(p: argparse.ArgumentParser) -> None:
    """The options of `xlafuse passes`."""
    p.add_argument("--all", action="store_true", help="every pass, not only fusion-related ones")
    p.add_argument("--backend", type=_backend, help="cpu or gpu (default: JAX's default backend)")


def run(args: argparse.Namespace) -> int:
    """Prints a count line, then one pass name per line."""
    # on use, not at the top: `xlafuse --help` imports no JAX (see xlafuse.cli)
    import jax

    from xlafuse.compiler.passes import fusion_passes, known_passes

    backend = args.backend or jax.default_backend()
    names = sorted(known_passes(backend=backend)) if args.all else fusion_passes(backend=backend)
    which = "HLO passes" if args.all else "fusion-related HLO passes"
    print(f"{len(names)} {which} of XLA ({backend}, jax {jax.__version__}):")
    print("\n".join(f"  {n}" for n in names))
    return 0


def _backend(name: str) -> str:
    """--backend's value, one of the backends variants know (checked when given, with JAX)."""
    from xlafuse.compiler.variants import BACKENDS  # on use, as in `run`

    if name not in BACKENDS:
        raise argparse.ArgumentTypeError(
            f"invalid choice: {name!r} (choose from {', '.join(map(repr, BACKENDS))})"
        )
    return name
