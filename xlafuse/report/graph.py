"""Graphviz DOT of a module's kernels and the buffers that flow between them.

Nodes: every kernel of the executed computations (see `xlafuse.hlo.fusion`), labelled with its
name, kind and fused ops; the parameters a kernel reads (ellipses); the module's outputs (double
octagons); and control instructions (while, conditional, call, async) as diamonds. Kernels of a
loop body or branch sit in a cluster named after their computation.

Edges: a buffer from its producer to a kernel that reads it (or to an output), labelled with its
modeled bytes. Free instructions (bitcast, get-tuple-element, tuple, `*-done`) are looked through,
so an edge joins the kernel that wrote the buffer to the kernel that reads it. Constants are left
out. Several buffers between the same two nodes make one edge with their bytes summed.
"""

from __future__ import annotations

import re
import shutil
import subprocess
from collections import Counter
from pathlib import Path

from xlafuse.errors import XlafuseError
from xlafuse.hlo.dataflow import buffer_producers
from xlafuse.hlo.fusion import FusionReport, KernelInfo, analyze_module
from xlafuse.hlo.ir import Computation, HloModule, Instruction
from xlafuse.kinds import FusionKind
from xlafuse.report.format import format_bytes

_LAYOUT = re.compile(r"\{[^{}]*\}")
_KIND_COLORS = {
    FusionKind.LOOP: "#cfe2f3",
    FusionKind.INPUT: "#d9ead3",
    FusionKind.OUTPUT: "#fff2cc",
    FusionKind.CUSTOM: "#f4cccc",
}
_LIBRARY_COLOR = "#ead1dc"


class _Graph:
    """Nodes and edges as they are found; `text()` writes the DOT."""

    def __init__(self, module: HloModule, report: FusionReport, max_ops: int):
        self.module = module
        self.max_ops = max_ops
        self.kernels = {(k.computation, k.name): k for k in report.kernel_details}
        self.nodes: dict[str, str] = {}  # id -> attribute text
        self.clusters: dict[str, list[str]] = {}  # computation -> node ids
        self.edges: Counter[tuple[str, str]] = Counter()  # (src, dst) -> bytes
        self.pending: list[tuple[Computation, Instruction]] = []  # control nodes to wire up

    def add_node(self, node_id: str, attrs: str, comp: Computation) -> str:
        if node_id not in self.nodes:
            self.nodes[node_id] = attrs
            if not comp.is_entry:
                self.clusters.setdefault(comp.name, []).append(node_id)
        return node_id

    def node_for(self, comp: Computation, instr: Instruction) -> str:
        kernel = self.kernels.get((comp.name, instr.name))
        if kernel is not None:
            return self.add_node(_id(comp, instr), self.kernel_attrs(kernel), comp)
        if instr.opcode == "parameter":
            return self.add_node(_id(comp, instr), _param_attrs(comp, instr), comp)
        node = _id(comp, instr)
        if node not in self.nodes:
            self.pending.append((comp, instr))
        return self.add_node(node, _control_attrs(instr), comp)

    def kernel_attrs(self, kernel: KernelInfo) -> str:
        kind = f"{kernel.kind}/{kernel.sub_kind}" if kernel.sub_kind else kernel.kind
        counts = Counter(kernel.ops)
        ops = [op if n == 1 else f"{op} x{n}" for op, n in counts.most_common(self.max_ops)]
        if len(counts) > self.max_ops:
            ops.append(f"+{len(counts) - self.max_ops} more")
        label = "\\n".join([_esc(kernel.name), _esc(kind), *map(_esc, ops)])
        color = _KIND_COLORS.get(kernel.kind, _LIBRARY_COLOR)
        return f'shape=box, style="rounded,filled", fillcolor="{color}", label="{label}"'

    def add_reads(self, comp: Computation, instr: Instruction, dst: str) -> None:
        indices = instr.operand_indices or (None,) * len(instr.operands)
        seen: set[tuple[str, int | None]] = set()
        for name, index in zip(instr.operands, indices, strict=True):
            if (name, index) in seen:
                continue
            seen.add((name, index))
            for producer, element in buffer_producers(comp, comp.by_name[name], index):
                src = self.node_for(comp, producer)
                if src != dst:
                    self.edges[(src, dst)] += _buffer_bytes(producer, element)

    def add_outputs(self, comp: Computation) -> None:
        root = comp.root
        if root is None:
            return
        outputs = root.operands if root.opcode == "tuple" else (root.name,)
        for i, name in enumerate(outputs):
            label = f"output {i}" if root.opcode == "tuple" else "output"
            dst = self.add_node(f"out:{i}", f'shape=doubleoctagon, label="{label}"', comp)
            for producer, element in buffer_producers(comp, comp.by_name[name], None):
                src = self.node_for(comp, producer)
                self.edges[(src, dst)] += _buffer_bytes(producer, element)

    def text(self, name: str) -> str:
        clustered = {n for ids in self.clusters.values() for n in ids}
        lines = [f"digraph {_quote(name)} {{", "  rankdir=TB;", '  node [fontname="monospace"];']
        lines += [f"  {_quote(n)} [{a}];" for n, a in self.nodes.items() if n not in clustered]
        for i, (comp, ids) in enumerate(self.clusters.items()):
            lines.append(f'  subgraph cluster_{i} {{ label="{_esc(comp)}"; style=dashed;')
            lines += [f"    {_quote(n)} [{self.nodes[n]}];" for n in ids]
            lines.append("  }")
        for (src, dst), nbytes in self.edges.items():
            lines.append(f'  {_quote(src)} -> {_quote(dst)} [label="{format_bytes(nbytes)}"];')
        lines.append("}")
        return "\n".join(lines) + "\n"


def to_dot(module: HloModule, *, report: FusionReport | None = None, max_ops: int = 6) -> str:
    """The kernel graph of `module` in Graphviz DOT.

    Args:
        module: a parsed module.
        report: its FusionReport (computed when None).
        max_ops: how many distinct fused ops to name in a kernel's label.

    Returns:
        DOT text (`digraph NAME { ... }`).
    """
    report = report or analyze_module(module)
    graph = _Graph(module, report, max_ops)
    for kernel in report.kernel_details:
        comp = module.computation(kernel.computation)
        instr = comp.by_name[kernel.name]
        dst = graph.add_node(_id(comp, instr), graph.kernel_attrs(kernel), comp)
        graph.add_reads(comp, instr, dst)
    graph.add_outputs(module.entry)
    while graph.pending:  # control nodes (while, call, ...) read buffers too
        comp, instr = graph.pending.pop()
        graph.add_reads(comp, instr, _id(comp, instr))
    return graph.text(module.name)


def render_svg(dot_text: str, path: str | Path) -> Path:
    """Renders DOT to an SVG file with Graphviz's `dot` program.

    Args:
        dot_text: from `to_dot`.
        path: where to write the SVG.

    Returns:
        The path written.

    Raises:
        XlafuseError: `dot` is not installed (the message says how to install it), or it failed.
    """
    dot = shutil.which("dot")
    if dot is None:
        raise XlafuseError(
            "Graphviz's 'dot' program is not installed (not on PATH): install Graphviz "
            "(apt install graphviz, brew install graphviz or conda install graphviz), "
            "or write DOT with --dot FILE and render it elsewhere"
        )
    path = Path(path)
    proc = subprocess.run(
        [dot, "-Tsvg", "-o", str(path)], input=dot_text, capture_output=True, text=True, timeout=120
    )
    if proc.returncode != 0:
        reason = (proc.stderr.strip().splitlines() or ["no message"])[0]
        raise XlafuseError(f"Graphviz dot failed (exit {proc.returncode}): {reason}")
    return path


def _id(comp: Computation, instr: Instruction) -> str:
    return f"{comp.name}/{instr.name}"


def _param_attrs(comp: Computation, instr: Instruction) -> str:
    where = "" if comp.is_entry else f" of {comp.name}"
    shape = _LAYOUT.sub("", str(instr.shape))
    shape = shape if len(shape) <= 48 else shape[:45] + "..."
    label = f"{_esc(instr.name)}{where}\\n{_esc(shape)}"
    return f'shape=ellipse, label="{label}"'


def _control_attrs(instr: Instruction) -> str:
    return f'shape=diamond, label="{_esc(instr.name)}\\n{_esc(instr.opcode)}"'


def _buffer_bytes(producer: Instruction, index: int | None) -> int:
    shape = producer.shape
    if index is not None and shape.is_tuple and index < len(shape.tuple_shapes):
        shape = shape.tuple_shapes[index]
    return shape.byte_size


def _esc(text: str) -> str:
    return text.replace("\\", "\\\\").replace('"', '\\"')


def _quote(text: str) -> str:
    return f'"{_esc(text)}"'
