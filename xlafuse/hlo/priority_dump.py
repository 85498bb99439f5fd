"""XLA's `<module>.priority_fusion_dump.txt`: the GPU priority-fusion pass's own decisions.

Written when a GPU compile gets the options `xla_dump_to=DIR` and
`xla_dump_hlo_pass_re=priority-fusion`. It is a text protobuf of repeated `fusion_steps`, each
holding one of:

* `update_priority { producer_name, consumer_names..., us_fused, us_unfused }`: the cost
  model's estimate of the time of the producer and its consumers fused and unfused (XLA fuses a
  producer into all its consumers at once);
* `fusion { fusion_name, producer_name, consumer_name }`: a fusion XLA made;
* `producer_ineligible { producer_name, reason }`: why a producer was not fused at all.

Names are those of the module as priority-fusion saw it (`tanh.1.0` for the unoptimized
`tanh.1`), or fusions made by earlier steps (`fusion.3`). The dump also holds that module
(`hlo_module_before_fusion`, HLO text) and the device description (`gpu_device_info`, not read).
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from xlafuse.errors import FOLDER, NOTHING, check_path_kind, path_kind
from xlafuse.hlo.dump import read_text_file

_TOKEN = re.compile(
    r'\s*(?:(#[^\n]*)|([A-Za-z_]\w*)\s*:?|(\{)|(\})|("(?:[^"\\]++|\\.)*+")|([-+.\w]+))\s*'
)
DUMP_SUFFIX = ".priority_fusion_dump.txt"
# The per-compile options that write the dump (with `xla_dump_to`, the folder)
DUMP_OPTIONS = {"xla_dump_hlo_pass_re": "priority-fusion"}


@dataclass(frozen=True)
class FusionStep:
    """One step of priority fusion, in the order XLA took it.

    Attributes:
        index: position in the dump (0-based).
        kind: "update_priority", "fusion" or "producer_ineligible".
        producer: the producer's name.
        consumers: the consumer names (one for "fusion", none for "producer_ineligible").
        fusion_name: the fusion made ("fusion" steps), else None.
        reason: XLA's reason ("producer_ineligible" steps), else None.
        us_fused: the cost model's estimate fused, in microseconds ("update_priority").
        us_unfused: the same unfused.
    """

    index: int
    kind: str
    producer: str
    consumers: tuple[str, ...] = ()
    fusion_name: str | None = None
    reason: str | None = None
    us_fused: float | None = None
    us_unfused: float | None = None

    def to_dict(self) -> dict[str, Any]:
        """JSON-able dict; None fields left out."""
        out = {k: list(v) if isinstance(v, tuple) else v for k, v in self.__dict__.items()}
        return {k: v for k, v in out.items() if v is not None}


@dataclass(frozen=True)
class PriorityDump:
    """A priority-fusion dump: the steps in order, and the module the pass started from.

    Attributes:
        steps: every fusion step, in the order XLA took them.
        hlo_before_fusion: HLO text of the module as priority-fusion saw it (None if absent).
        source: the file it came from.
    """

    steps: tuple[FusionStep, ...]
    hlo_before_fusion: str | None = None
    source: str | None = None

    def of_kind(self, kind: str) -> tuple[FusionStep, ...]:
        """The steps of one kind ("update_priority", "fusion", "producer_ineligible")."""
        return tuple(s for s in self.steps if s.kind == kind)


def find_priority_dump(folder: str | Path, *, module: str | None = None) -> Path:
    """The `*.priority_fusion_dump.txt` of a dump folder.

    Args:
        folder: an `--xla_dump_to` folder.
        module: a part of the file name, to choose among several.

    Raises:
        FileNotFoundError: the folder does not exist.
        ValueError: it holds no dump, none matching `module`, or several (the message lists them);
            or it is neither a folder nor nothing (a file, a device, a FIFO, a symlink loop).
    """
    folder = Path(folder)
    check_path_kind(folder, FOLDER, "expected an --xla_dump_to folder")
    if not folder.is_dir():
        raise FileNotFoundError(
            f"no such folder: {str(folder)!r} (expected an --xla_dump_to folder)"
        )
    found = sorted(p for p in folder.iterdir() if p.name.endswith(DUMP_SUFFIX))
    if module is not None:
        found = [p for p in found if module in p.name]
    if len(found) == 1:
        return found[0]
    hint = (
        "compile on the GPU with the options xla_dump_to=DIR and "
        "xla_dump_hlo_pass_re=priority-fusion"
    )
    if not found:
        which = f" matching {module!r}" if module else ""
        raise ValueError(f"folder {str(folder)!r} holds no *{DUMP_SUFFIX}{which}; {hint}")
    names = ", ".join(p.name for p in found[:6])
    raise ValueError(
        f"folder {str(folder)!r} holds {len(found)} dumps ({names}); pick one with --module"
    )


def read_priority_dump(path: str | Path) -> PriorityDump:
    """Reads a `*.priority_fusion_dump.txt` file.

    Raises:
        FileNotFoundError: no such file.
        ValueError: not a regular file (a device, a FIFO, a symlink loop: never opened), a binary
            (NUL byte) or non-UTF-8 file (its bytes are not echoed), or text that is not a dump
            of `fusion_steps` (the message names the line).
    """
    path = Path(path)
    if path_kind(path) == NOTHING:
        raise FileNotFoundError(f"no such priority-fusion dump: {str(path)!r}")
    text = read_text_file(path, "a priority-fusion dump", f"expected a *{DUMP_SUFFIX} file")
    return parse_priority_dump(text, source=str(path))


def parse_priority_dump(text: str, *, source: str = "<text>") -> PriorityDump:
    """Parses the text protobuf of a priority-fusion dump.

    Raises:
        ValueError: malformed text, an unknown step kind, or no `fusion_steps` at all (the
            message names the line).
    """
    steps = []
    before = None
    for field, value, line in _fields(text, source):
        if field == "fusion_steps" and isinstance(value, dict):
            steps.append(_step(len(steps), value, source, line))
        elif field == "hlo_module_before_fusion" and isinstance(value, str):
            before = value
    if not steps:
        raise ValueError(f"{source}: no fusion_steps: not a priority-fusion dump")
    return PriorityDump(tuple(steps), before, source)


def _step(index: int, message: dict, source: str, line: int) -> FusionStep:
    if len(message) != 1:
        raise ValueError(f"{source}:{line}: a fusion step holds one kind, got {sorted(message)}")
    kind, (body,) = next(iter(message.items()))
    if not isinstance(body, dict) or "producer_name" not in body:
        raise ValueError(f"{source}:{line}: step {kind!r} without a producer_name")

    def one(key: str) -> Any:
        values = body.get(key)
        return values[-1] if values else None

    if kind == "update_priority":
        return FusionStep(
            index, kind, one("producer_name"), tuple(body.get("consumer_names", ())),
            us_fused=_float(one("us_fused")), us_unfused=_float(one("us_unfused")),
        )  # fmt: skip
    if kind == "fusion":
        consumer = one("consumer_name")
        return FusionStep(
            index, kind, one("producer_name"), (consumer,) if consumer else (),
            fusion_name=one("fusion_name"),
        )  # fmt: skip
    if kind == "producer_ineligible":
        return FusionStep(index, kind, one("producer_name"), reason=one("reason"))
    accepted = "update_priority, fusion, producer_ineligible"
    raise ValueError(f"{source}:{line}: unknown fusion step {kind!r}; accepted: {accepted}")


def _float(value: Any) -> float | None:
    return float(value) if value is not None else None


def _fields(text: str, source: str):
    """Top-level (field, value, line) of a text protobuf; messages become {field: [values]}."""
    stack: list[dict] = [{}]
    top: list[tuple[str, Any, int]] = []
    pending: str | None = None
    pos = counted = 0
    line = 1  # of `pos`, counted on as the scan goes (a count from the start each time is
    opened: list[tuple[str, int]] = []  # quadratic: a GPT-2 train step's dump took minutes)
    while pos < len(text):
        m = _TOKEN.match(text, pos)
        line += text.count("\n", counted, pos)
        counted = pos
        if not m or m.end() == pos:
            if text[pos:].strip():
                raise ValueError(f"{source}:{line}: unexpected text {text[pos : pos + 30]!r}")
            break
        pos = m.end()
        comment, name, lbrace, rbrace, string, scalar = m.groups()
        if comment:
            continue
        if name and pending is None:
            pending = name
            continue
        if lbrace:
            if pending is None:
                raise ValueError(f"{source}:{line}: '{{' without a field name")
            stack.append({})
            opened.append((pending, line))
            pending = None
        elif rbrace:
            if not opened:
                raise ValueError(f"{source}:{line}: unbalanced '}}'")
            message = stack.pop()
            field, start = opened.pop()
            _put(stack, top, field, message, start)
        else:
            value = _unquote(string) if string else (scalar or name)
            if pending is None:
                raise ValueError(f"{source}:{line}: value {value!r} without a field name")
            _put(stack, top, pending, value, line)
            pending = None
    if opened:
        raise ValueError(f"{source}: truncated: {opened[-1][0]!r} opened at line {opened[-1][1]}")
    return top


def _put(stack, top, field, value, line) -> None:
    if len(stack) == 1:
        top.append((field, value, line))
    else:
        stack[-1].setdefault(field, []).append(value)


def _unquote(token: str) -> str:
    return bytes(token[1:-1], "utf-8").decode("unicode_escape")
