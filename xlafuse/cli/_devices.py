"""`--devices N --parallelism P --overrides K=V` for the commands that compile a workload."""

from __future__ import annotations

from xlafuse.errors import XlafuseError
from xlafuse.models.names import PARALLELISMS


def add_mesh_arguments(parser) -> None:
    """Adds --devices, --parallelism and --overrides (a sharded batch must divide evenly)."""
    parser.add_argument(
        "--overrides",
        action="append",
        metavar="K=V[,K=V]",
        help="workload size-table or option overrides, e.g. batch=8",
    )
    parser.add_argument(
        "--devices",
        type=int,
        default=1,
        help="shard the workload over N devices (on a CPU: N host devices; default: 1)",
    )
    parser.add_argument(
        "--parallelism",
        default="data",
        choices=PARALLELISMS,
        help="data: batch split, parameters replicated; model: Megatron column/row sharding",
    )


def overrides(args) -> dict:
    """The parsed --overrides (`{"batch": 8}`)."""
    return parse_overrides(args.overrides)


def rerun_if_needed(args) -> int | None:
    """Runs the command again with N host devices when the CPU backend has fewer.

    Returns:
      The child's exit status, or None when this process has the devices (or is a GPU one:
      building the workload then reports a missing device as a one-line error).
    """
    # JAX, imported here: a command that reads HLO or results never calls this (it starts faster)
    from xlafuse.compile.devices import needs_host_devices, rerun_with_host_devices

    if args.devices < 1:
        raise ValueError(f"--devices must be at least 1, got {args.devices}")
    if not needs_host_devices(args.devices):
        return None
    return rerun_with_host_devices(args.argv, args.devices)


def parse_overrides(texts: list[str] | None) -> dict:
    """`--overrides a=1,b=2 --overrides c=x` -> {"a": 1, "b": 2, "c": "x"}."""
    out = {}
    for item in _split(",".join(texts or ())):
        key, sep, value = item.partition("=")
        if not sep or not key:
            raise XlafuseError(f"override {item!r} is not KEY=VALUE (e.g. ops=8)")
        out[key.strip()] = _value(value.strip())
    return out


def _value(text: str):
    """An override value: an int, a float, true/false, or else the string."""
    for kind in (int, float):
        try:
            return kind(text)
        except ValueError:
            pass
    return {"true": True, "false": False}.get(text.lower(), text)


def _split(text: str) -> list[str]:
    return [n.strip() for n in text.split(",") if n.strip()]
