"""The fusion graph of report.html: what a workload's records say joins its kernels.

A record keeps no HLO, so this is not the program's buffer graph (`xlafuse inspect --svg` draws
that from the HLO); it is every link the records hold, as nodes and edges that the page lays out
around a chosen kernel:

- a kernel group of a kernel diff (`trace.kernel_diff`'s gains, losses and top groups): the
  reference's kernels -> the group -> the variant's kernels that hold the same instructions,
  the group labelled with its measured change and verdict;
- a missed fusion (`fusion.missed_fusions`): the producer's kernel -> the consumer's kernel,
  labelled with the bytes written and read back between them;
- the fusion decisions of XLA's that the measurement contradicts (`trace.cost_model`'s
  `decisions`): one node per kernel and way (predicted a gain, measured a loss, or the other
  way) -> the kernel the steps fused into, the steps with XLA's predicted gain and the measured
  one in the edge's detail.

Node ids: `VARIANT:KERNEL` for a kernel (a kernel's name is unique in its program),
`group:VARIANT:N` for the N-th group of a variant's diff, `decision:VARIANT:WAY:KERNEL` for a
kernel's contradicted decisions.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from xlafuse.report.format import format_bytes
from xlafuse.report.kernels import PAIRING
from xlafuse.results.records import CellResult

KERNEL, GROUP, MORE, DECISION = "kernel", "group", "more", "decision"


class _Builder:
    """Nodes by id (first label wins) and edges by (source, target, kind), in order."""

    def __init__(self) -> None:
        self.nodes: dict[str, dict[str, str]] = {}
        self.edges: dict[tuple[str, str, str], tuple[str, str]] = {}

    def node(self, node_id: str, label: str, kind: str, variant: str) -> str:
        self.nodes.setdefault(node_id, {"label": label, "type": kind, "variant": variant})
        return node_id

    def kernel(self, variant: str, name: str) -> str:
        return self.node(f"{variant}:{name}", name, KERNEL, variant)

    def edge(self, source: str, target: str, kind: str, label: str, detail: str) -> None:
        self.edges.setdefault((source, target, kind), (label, detail))

    def data(self) -> dict[str, Any]:
        edges = [[s, t, kind, *texts] for (s, t, kind), texts in self.edges.items()]
        return {"nodes": self.nodes, "edges": edges}


def workload_graph(group: Sequence[CellResult]) -> dict[str, Any]:
    """The graph of one workload's records.

    Returns:
      {"nodes": {id: {"label", "type" ("kernel", "group", "more", "decision"), "variant"}},
      "edges": [[source id, target id, kind ("group", "missed", "decision"), label, detail]]}:
      the label is drawn on the edge, the detail shown when it is pointed at.

    Raises:
      KeyError, TypeError, ValueError: a record's nested objects are malformed.
    """
    graph = _Builder()
    for r in group:
        diff = r.trace.kernel_diff
        if diff and "error" not in diff:
            _diff_groups(graph, diff)
        missed = r.fusion.missed_fusions
        if missed and "error" not in missed:
            _missed(graph, r.variant, missed.get("top", []))
        decisions = (r.trace.cost_model or {}).get("decisions")
        if decisions and "error" not in decisions:
            _decisions(graph, decisions)
    return graph.data()


def _diff_groups(graph: _Builder, diff: Mapping[str, Any]) -> None:
    """Each group the diff keeps (gains, losses, top; each once) as A's kernels -> the group ->
    B's kernels; the names a group does not list (it keeps a few) as one node."""
    a, b = diff["a"], diff["b"]
    seen = set()
    for g in [*diff.get("gains", []), *diff.get("losses", []), *diff.get("top", [])]:
        key = (tuple(g["kernels_a"]), tuple(g["kernels_b"]))
        if key in seen:
            continue
        seen.add(key)
        node = graph.node(f"group:{b}:{len(seen)}", _group_label(g, a, b), GROUP, b)
        for side, variant, names, count in ((0, a, g["kernels_a"], g["n_a"]),
                                            (1, b, g["kernels_b"], g["n_b"])):  # fmt: skip
            ids = [graph.kernel(variant, n) for n in names]
            if count > len(names):
                more = f"+{count - len(names)} more of {variant}"
                ids.append(graph.node(f"{node}:{variant}:more", more, MORE, variant))
            for i in ids:
                graph.edge(*((i, node) if side == 0 else (node, i)), GROUP, "", "")


def _group_label(g: Mapping[str, Any], a: str, b: str) -> str:
    change = f"{b} - {a} {g['saved_s'] * 1e6:.4g} µs"
    verdict = f" ({g['verdict']})" if g.get("verdict") else ""
    return f"{PAIRING.get(g['kind'], g['kind'])}: {change}{verdict}"


def _missed(graph: _Builder, variant: str, rows: Sequence[Mapping[str, Any]]) -> None:
    for row in rows:
        source = graph.kernel(variant, row["producer_kernel"])
        target = graph.kernel(variant, row["consumer_kernel"])
        size = format_bytes(row["boundary_bytes"])
        detail = f"missed fusion: {size} from {row['producer']} to {row['consumer']}"
        graph.edge(source, target, "missed", size, detail)


_DECISION_LISTS = (
    ("predicted_gain_measured_loss", "XLA predicted a gain, measured a loss"),
    ("predicted_loss_measured_gain", "XLA predicted a loss, measured a gain"),
)


def _decisions(graph: _Builder, d: Mapping[str, Any]) -> None:
    """The fusion steps where XLA's prediction and the measurement disagree, one node per
    kernel of A and way they disagree, listing its steps."""
    a = d["a"]
    for key, words in _DECISION_LISTS:
        steps: dict[str, list[str]] = {}
        for row in d.get(key, []):
            steps.setdefault(row["kernel"], []).append(
                f"step {row['step']}: {row['producer']} -> {row['consumer']}, predicted gain "
                f"{row['predicted_gain_s'] * 1e6:.4g} µs, measured gain "
                f"{row['measured_gain_s'] * 1e6:.4g} µs"
            )
        for kernel, lines in steps.items():
            label = f"{words}: {len(lines)} step{'s' if len(lines) != 1 else ''}"
            node = graph.node(f"decision:{a}:{key}:{kernel}", label, DECISION, a)
            graph.edge(node, graph.kernel(a, kernel), "decision", "", "\n".join(lines))
