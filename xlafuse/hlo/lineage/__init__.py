"""Which kernel of an optimized module holds each instruction of a reference module.

The reference is normally the unoptimized module of the same program; `trace_module` gives one
`Trace` per computing instruction of it. The modules, in the order the work is done
(docs/lineage.md is the overview):

* `graph.py`: a module as keyed instructions, operands and kernels;
* `numbering.py`: value numbering of both graphs, through fusions and calls;
* `rules.py`: the rewrites of XLA that the numbering follows, `RULES` in order, one function
  each, with the recorded HLO that needs it;
* `matching.py`: the steps that identify optimized instructions with reference ones;
* `folding.py`: what XLA folded into what reads it;
* `result.py`: `Trace` and `Lineage`; `ops.py`: facts about one instruction; `trace.py`:
  `trace_module`.
"""

from xlafuse.hlo.lineage.ops import NOT_TRACED, kind, literal_payloads
from xlafuse.hlo.lineage.result import LAYOUT_ONLY, Lineage, Trace, lost_summary
from xlafuse.hlo.lineage.trace import trace_module

__all__ = [
    "LAYOUT_ONLY",
    "NOT_TRACED",
    "Lineage",
    "Trace",
    "kind",
    "literal_payloads",
    "lost_summary",
    "trace_module",
]
