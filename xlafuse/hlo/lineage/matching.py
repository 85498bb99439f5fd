"""Identifying optimized instructions with reference ones: the steps of `Matcher.run`.

Each round runs the steps below in order; after a round that identified something, the
optimized graph is numbered again with each identified instruction given its reference's number
(a dot's kernel: what it writes), and step 1 runs again, so what follows a rewritten op is found
by structure. Every step checks that the operands already identified agree (`Matcher._agree`).

1. "structure": the same value number (`numbering.py`, `rules.py`); an elementwise op run on a
   transposed layout is also the op on the values under it. Two reference instructions of one
   number compute the same value: where XLA's CSE kept one, an identification of either is one
   of both ("duplicate").
2. "name": XLA keeps instruction names through its GPU passes, appending `.N` to clones
   (`tanh.1` -> `tanh.1.7`): the longest dot-prefix of the optimized name that names a reference
   instruction. Where fewer than half of the instructions identified by structure carry their
   reference name (the CPU with jax 0.10.2 renumbers fused clones), a name counts only with the
   same source line and an identified operand.
3. "metadata": the one instruction on each side with this opcode, `op_name` and source line
   (first with the shape, then the element type and count, then neither).
4. "neighbours": the one unidentified reference reader of this opcode and element count of the
   values an optimized instruction reads (an elementwise op of one operand also across an
   unidentified transpose), or the operands in the same places of an identified pair.
5. "epilogue": what a dot's kernel writes beyond the dot: the transpose of its result XLA folds
   into it, the multiplication by a constant a cuBLAS call does as its `alpha`, the adds of a
   cuBLASLt call's epilogue (`BIAS`, `beta`'s C).
6. "order", when 1 to 5 find nothing more: dots and convolutions of one signature, as many
   left on each side, the k-th in reference order with the k-th in kernel order.

An opcode here is `NumberedGraph.kind`: a library call is the instruction it replaced (a cuBLAS
GEMM a `dot`, a cuDNN convolution a `convolution`), its data operands the first two, each taken
through the transposes XLA added to lay it out; a division by a constant is the multiplication
by its inverse XLA makes of it, a subtraction of a constant the addition of its negation. An
identified value is identified in every kernel that computes it again (XLA duplicates cheap ops
into each consumer). The instructions of a computation called from several places are
identified by structure only (they are numbered for one of its callers).
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Mapping
from dataclasses import replace

from xlafuse.hlo.lineage import ops
from xlafuse.hlo.lineage.graph import Key
from xlafuse.hlo.lineage.numbering import NumberedGraph
from xlafuse.hlo.lineage.result import Trace

_ROUNDS = 40


class Matcher:
    """Identifies optimized instructions with reference ones (see the module docstring)."""

    def __init__(self, ref: NumberedGraph, opt: NumberedGraph):
        self.ref, self.opt = ref, opt
        self.matched: dict[Key, set[Key]] = defaultdict(set)  # optimized -> reference
        self.back: dict[Key, set[Key]] = defaultdict(set)  # reference -> optimized
        self.how: dict[Key, str] = {}  # reference -> how first identified
        self.names_kept = False
        self.value_of: dict[Key, Key] = {}  # a dot's kernel -> what it writes (`_epilogues`)
        self._written: set[Key] = set()  # dots whose epilogues were looked for

    def run(self) -> None:
        """Numbers both graphs, then runs the steps round after round until one identifies
        nothing (at most 40 rounds): `matched`, `back` and `how` hold what was identified."""
        self.ref.number({})
        self.opt.number({})
        self._copies: dict[int, list[Key]] = defaultdict(list)  # one value computed again
        self._plain = dict(self.opt.vn)
        for o in self.opt.traced:
            if self.opt.source(o) == o:
                self._copies[self._plain[o]].append(o)
        for round_ in range(_ROUNDS):
            if round_:  # round 0: numbered just above, nothing identified yet
                self._renumber()
            new = self._by_structure()
            if round_ == 0:
                self.names_kept = self._names_kept()
            new += self._by_name(same_line=not self.names_kept)
            for shape in ("dims", "elements", None):
                new += self._by_metadata(shape)
            new += self._by_neighbours()
            new += self._epilogues()
            if not new:
                new = self._by_order()
            if not new:
                break

    def _renumber(self) -> None:
        """Numbers the optimized graph, each identified instruction as its reference."""
        self.opt.number(
            {
                o: self.ref.vn[self.value_of.get(o) or min(rs)]
                for o, rs in self.matched.items()
                if rs
            }
        )

    def _pair(self, o: Key, r: Key, how: str) -> bool:
        """Identifies `o` with `r`, and so every copy of `o`: the same value computed again in
        another kernel (XLA duplicates cheap ops into each consumer's fusion); and with `r`,
        every reference instruction of `r`'s value number left unidentified: the same value
        computed twice in the program, which XLA's CSE keeps once (how "duplicate")."""
        if r in self.matched[o] or (r in self.ref.shared and how not in ("structure", "duplicate")):
            return False  # a computation called from several places: numbered for one only
        for copy in self._copies.get(self._plain.get(o), [o]):
            self.matched[copy].add(r)
            self.back[r].add(copy)
        self.how.setdefault(r, how)
        for twin in self._same_value().get(self.ref.vn[r], ()):
            if twin != r and not self.back.get(twin):
                self._pair(o, twin, how if how == "structure" else "duplicate")
        return True

    def _same_value(self) -> dict[int, list[Key]]:
        """Reference value number -> the computing instructions that have it."""
        if not hasattr(self, "_by_value"):
            self._by_value: dict[int, list[Key]] = defaultdict(list)
            for r in self.ref.traced:
                if self.ref.source(r) == r:
                    self._by_value[self.ref.vn[r]].append(r)
        return self._by_value

    def _by_structure(self) -> int:
        """Step 1: the same value number; an elementwise op run on a transposed layout is also
        the op on the values under it (`rules.transposed_elementwise`), a transpose never."""
        index: dict[int, list[Key]] = defaultdict(list)
        for r in self.ref.traced:
            if self.ref.source(r) == r:
                index[self.ref.vn[r]].append(r)
                if r in self.ref.layout and self.ref.instr[r].opcode != "transpose":
                    index[self.ref.layout[r][1]].append(r)
        new = 0
        for o in self.opt.traced:
            if self.opt.source(o) != o:
                continue
            values = [self.opt.vn[o]]
            if o in self.opt.layout and self.opt.instr[o].opcode != "transpose":
                values.append(self.opt.layout[o][1])
            for value in values:
                for r in index.get(value, ()):
                    new += self._pair(o, r, "structure")
        return new

    def _names_kept(self) -> bool:
        """Whether at least half of the instructions identified by structure with exactly one
        reference instruction carry its name as a prefix (one equal to several, a broadcast
        constant, says nothing about names)."""
        pairs = [(o, next(iter(rs))) for o, rs in self.matched.items() if len(rs) == 1]
        if not pairs:
            return False
        kept = sum(ops.is_prefix(r[1], o[1]) for o, r in pairs)
        return 2 * kept >= len(pairs)

    def _by_name(self, same_line: bool) -> int:
        """Step 2; with `same_line` (a module that does not keep most names) only where more
        than the name agrees (`_supported`)."""
        names: dict[str, list[Key]] = defaultdict(list)
        for r in self.ref.traced:
            names[r[1]].append(r)
        new = 0
        for o in self._unmatched_opt():
            parts = o[1].split(".")
            for n in range(len(parts), 0, -1):
                found = names.get(".".join(parts[:n]))
                if found and len(found) == 1 and self._agree(o, found[0]):
                    if not same_line or self._supported(o, found[0]):
                        new += self._pair(o, found[0], "name")
                    break
        return new

    def _by_metadata(self, shape_key: str | None) -> int:
        def group(graph: NumberedGraph, keys) -> dict[tuple, list[Key]]:
            out: dict[tuple, list[Key]] = defaultdict(list)
            for k in keys:
                i = graph.instr[k]
                if graph.op_name(k) and i.source_file:
                    value = ops.value_shape(i)
                    shape = (
                        ops.shape_sig(value)
                        if shape_key == "dims"
                        else (value.dtype, value.num_elements)
                        if shape_key == "elements"
                        else None
                    )
                    key = (graph.kind(k), graph.op_name(k), i.source_file, i.source_line, shape)
                    out[key].append(k)
            return out

        opt = group(self.opt, self._unmatched_opt())
        ref = group(self.ref, [r for r in self.ref.traced if not self.back.get(r)])
        new = 0
        for key, os_ in opt.items():
            rs = ref.get(key, ())
            if len(os_) == 1 and len(rs) == 1 and self._agree(os_[0], rs[0]):
                new += self._pair(os_[0], rs[0], "metadata")
        return new

    def _by_order(self) -> int:
        """Dots and convolutions of one signature (kind, `op_name` and source line, the value's
        type and elements, the operands' elements), when as many are left unidentified on each
        side: the k-th in reference order is the k-th in kernel order. A model's layers repeat
        one line and the copies do the same work, so only which layer's copy is which is taken
        from the order. Then the same without `op_name` and line (XLA drops the metadata of
        some GEMMs it rewrites into cuBLAS calls)."""
        kernels = {k: n for n, k in enumerate(self.opt.kernel_order)}
        position = {k: n for n, k in enumerate(self.ref.traced)}
        new = 0
        for metadata in ("all", "shapes", "operands", "metadata"):
            opt = self._signatures(self.opt, self._unmatched_opt(), metadata)
            ref = self._signatures(
                self.ref, [r for r in self.ref.traced if not self.back.get(r)], metadata
            )
            for key, os_ in opt.items():
                rs = ref.get(key, [])
                if len(os_) != len(rs):
                    continue
                os_.sort(key=lambda k: kernels.get(self.opt.kernel[k], -1))
                rs.sort(key=position.get)
                new += sum(self._pair(o, r, "order") for o, r in self._in_order(os_, rs))
            if new:
                break
        return new

    def _in_order(self, os_: list[Key], rs: list[Key]) -> list[tuple[Key, Key]]:
        """Each optimized instruction, in order, with the first reference one left whose
        identified operands agree (`_agree`), else with the first one left."""
        left = list(rs)
        pairs = []
        for o in os_:
            r = next((r for r in left if self._agree(o, r)), left[0])
            left.remove(r)
            pairs.append((o, r))
        return pairs

    @staticmethod
    def _signatures(graph: NumberedGraph, keys, by: str) -> dict[tuple, list[Key]]:
        """Signature -> instructions: `by` "all" (metadata, the value's type and elements, the
        operands' elements), "shapes" (the value and the operands), "operands" (a split-K
        GEMM's value has K's splits as a dimension of its own) or "metadata" (cuBLAS pads a
        GEMM's odd dimensions, GPT-2's 50,257-word vocabulary to 50,264, and the GEMM may write
        the f32 its consumer converts to)."""
        out: dict[tuple, list[Key]] = defaultdict(list)
        for k in keys:
            i = graph.instr[k]
            if ops.kind(i) not in ops.ORDERED or (
                by in ("all", "metadata") and not graph.op_name(k)
            ):
                continue
            value = ops.value_shape(i)
            key = [ops.kind(i)]
            if by != "metadata":
                operands = graph.operands[k][:2]
                key += sorted(graph.instr[graph.source(o)].shape.num_elements for o in operands)
            if by in ("all", "shapes"):
                key.append(value.num_elements)
            if by in ("all", "metadata"):
                key += [graph.op_name(k), i.source_file, i.source_line]
            if by == "all":
                key.append(value.dtype)
            out[tuple(key)].append(k)
        return out

    def _epilogues(self) -> int:
        """What a dot's kernel writes beyond the dot, once the dot is identified: XLA folds
        `transpose(dot(a, b))` into the dot (its value then has the transpose's dimensions, or,
        square, its `op_name`) and `dot * c` into a cuBLAS call's alpha, and a cuBLASLt call
        adds its epilogue's operands (`BIAS`: a broadcast vector, last operand; `beta` != 0:
        the third operand) to the product. Each such reference op, the only unidentified reader
        of the value before it, is identified with the kernel (how "epilogue"), which is then
        numbered as the last of them. An add of a value not identified yet (`beta`'s C, the
        residual of the layer before) is looked for again in the next round."""
        users = self._ref_users()
        new = 0
        for o in self.opt.traced:
            if o in self._written or self.opt.kind(o) not in ops.ORDERED:
                continue
            if o not in self.value_of:  # the dot alone is identified: its transpose and alpha
                rs = self.matched.get(o)
                if not rs or len(rs) != 1:
                    continue
                (r,) = rs
                transpose = self._folded_transpose(o, r, users)
                if transpose is not None:
                    new += self._pair(o, transpose, "epilogue")
                    r = transpose
                scaled = self._scaled_by_alpha(o, r, users)
                if scaled is not None:
                    new += self._pair(o, scaled, "epilogue")
                    r = scaled
                self.value_of[o] = r
            added, finished = self._epilogue_adds(o, self.value_of[o], users)
            new += added
            if finished:
                self._written.add(o)
        return new

    def _unidentified_readers(self, r: Key, users) -> list[Key]:
        """The computing reference instructions that read `r` and are not identified yet."""
        return [u for u in users.get(r, ()) if not self.back.get(u) and self.ref.source(u) == u]

    def _scaled_by_alpha(self, o: Key, r: Key, users) -> Key | None:
        """The multiplication of dot `r`'s value by a constant (or its division by one) that
        cuBLAS call `o` does as its `alpha` (XLA's GEMM rewriter folds `dot * c` into the
        call): its only unidentified reader, by a constant equal to alpha; else None."""
        alpha = ops.alpha(self.opt.instr[o])
        if alpha is None:
            return None
        readers = self._unidentified_readers(r, users)
        if len(readers) != 1:
            return None
        (u,) = readers
        instr, operands = self.ref.instr[u], [self.ref.source(k) for k in self.ref.operands[u]]
        if instr.opcode not in ("multiply", "divide") or len(operands) != 2:
            return None
        if instr.opcode == "divide" and operands[0] != r:
            return None  # c / dot is no scale of the dot
        others = [k for k in operands if k != r]
        if len(others) != 1 or instr.shape.num_elements != ops.elements(self.ref.instr[r]):
            return None
        try:
            factor = float(self.ref.literal(others[0]) or "nan")
        except ValueError:
            return None
        if instr.opcode == "divide":
            factor = 1 / factor if factor else float("nan")
        return u if abs(factor - alpha) <= 1e-6 * abs(alpha) else None

    def _folded_transpose(self, o: Key, r: Key, users) -> Key | None:
        """The transpose of dot `r`'s value that kernel `o` writes instead (its only
        unidentified reader, of the kernel's dimensions or, square, its `op_name`), else None."""
        readers = self._unidentified_readers(r, users)
        if len(readers) != 1:
            return None
        t, oi = self.ref.instr[readers[0]], self.opt.instr[o]
        value = ops.value_shape(oi)
        if t.opcode != "transpose" or t.shape.num_elements != value.num_elements:
            return None
        if ops.squeezed(value) != ops.squeezed(t.shape):
            return None
        if ops.squeezed(t.shape) != ops.squeezed(self.ref.instr[r].shape):
            return readers[0]
        same_name = oi.op_name is not None and oi.op_name == self.ref.op_name(readers[0])
        return readers[0] if same_name and oi.op_name != self.ref.op_name(r) else None

    def _epilogue_adds(self, o: Key, r: Key, users) -> tuple[int, bool]:
        """Pairs library call `o` with the adds of its epilogue's operands onto `r` (each the
        one unidentified add of the value before it and of an extra operand): (how many,
        whether `o` is done: every add found, none to find, or an epilogue this cannot read)."""
        oi = self.opt.instr[o]
        extra = list(self._data_operands(o, every=True)[2:]) if ops.is_library(oi) else []
        if not extra or len(extra) != ops.epilogue_operands(oi):
            return 0, True
        chain = []
        while extra:
            step = [
                (u, e)
                for u in users.get(r, ())
                if not self.back.get(u) and self.ref.instr[u].opcode == "add"
                for e in extra
                if self._adds(u, r, e)
            ]
            if len(step) != 1:
                break
            ((u, e),) = step
            chain.append(u)
            extra.remove(e)
            r = u
        if not chain or extra:
            return 0, False
        new = sum(self._pair(o, u, "epilogue") for u in chain)
        self.value_of[o] = chain[-1]
        return new, True

    def _adds(self, u: Key, r: Key, e: Key) -> bool:
        """Whether reference `u` adds to `r` the value of optimized operand `e` (or its
        broadcast)."""
        others = [self.ref.source(k) for k in self.ref.operands[u] if self.ref.source(k) != r]
        if len(others) != 1:
            return False
        x = others[0]
        values = {x}
        if self.ref.instr[x].opcode == "broadcast" and len(self.ref.operands[x]) == 1:
            values.add(self.ref.source(self.ref.operands[x][0]))
        known = self.matched.get(e, set())
        return bool(values & known) or self.opt.vn.get(e) in {self.ref.vn.get(v) for v in values}

    def _ref_users(self) -> dict[Key, list[Key]]:
        """Reference value -> the traced instructions that read it."""
        if not hasattr(self, "_users"):
            self._users: dict[Key, list[Key]] = defaultdict(list)
            for r in self.ref.traced:
                for k in self.ref.operands[r]:
                    self._users[self.ref.source(k)].append(r)
        return self._users

    def _by_neighbours(self) -> int:
        """Forward: the one unidentified reference user, of this opcode, of the values an
        instruction reads (an elementwise op of one operand also across an unidentified
        transpose: XLA moves such ops before a transpose, `convert(transpose(x))` ->
        `transpose(convert(x))`). Backward: the operands, in the same places, of an identified
        pair."""
        self._ref_users()
        if not hasattr(self, "_across"):
            self._across: dict[Key, list[tuple[Key, Key]]] = defaultdict(list)
            for r in self.ref.traced:
                if self.ref.instr[r].opcode in ops.ELEMENTWISE and len(self.ref.operands[r]) == 1:
                    t = self.ref.source(self.ref.operands[r][0])
                    if self.ref.instr[t].opcode == "transpose" and len(self.ref.operands[t]) == 1:
                        self._across[self.ref.source(self.ref.operands[t][0])].append((r, t))
        new = 0
        for o in self._unmatched_opt():
            found: set[Key] | None = None
            for k in self._data_operands(o):
                rs = self.matched.get(k)
                if not rs:
                    continue
                users = {
                    u
                    for r in rs
                    for u in self._users.get(r, ())
                    if not self.back.get(u) and self._alike(o, u)
                } | {
                    u
                    for r in rs
                    for u, t in self._across.get(r, ())
                    if not self.back.get(t) and not self.back.get(u) and self._alike(o, u)
                }
                found = users if found is None else found & users
            if found and len(found) == 1:
                (u,) = found
                if self._agree(o, u) and not self._elsewhere_operand(o, u):
                    new += self._pair(o, u, "neighbours")
        for o, rs in list(self.matched.items()):
            if len(rs) == 1:
                new += self._operands_of(o, next(iter(rs)))
        return new

    def _elsewhere_operand(self, o: Key, r: Key) -> bool:
        """Whether, in place, an operand of `o` is unidentified where `r`'s is identified (with
        another instruction): `o` then reads something else than `r` does (`(a / b) / c` made
        `a / (b * c)`: the new division reads `a` as `a / b` did)."""
        if self.opt.instr[o].opcode in ops.COMMUTATIVE or ops.is_library(self.opt.instr[o]):
            return False
        operands = self._data_operands(o)
        refs = [self.ref.source(k) for k in self.ref.operands[r]]
        return len(operands) == len(refs) and any(
            not self.matched.get(k) and k in self.opt.traced_set and self.back.get(x)
            for k, x in zip(operands, refs, strict=True)
        )

    def _operands_of(self, o: Key, r: Key) -> int:
        if ops.is_library(self.opt.instr[o]):
            return 0  # its operands may be swapped: not identified by place
        operands = self._data_operands(o)
        refs = [self.ref.source(k) for k in self.ref.operands[r]]
        if len(operands) != len(refs):
            return 0
        if self.opt.instr[o].opcode in ops.COMMUTATIVE:
            operands = [k for k in operands if not self.matched.get(k)]
            refs = [k for k in refs if not self.back.get(k)]
            if len(operands) != 1 or len(refs) != 1:
                return 0
        new = 0
        for a, b in zip(operands, refs, strict=True):
            if (
                a in self.opt.traced_set
                and b in self.ref.traced_set
                and not self.matched.get(a)
                and not self.back.get(b)
                and self._alike(a, b)
            ):
                new += self._pair(a, b, "neighbours")
        return new

    def _data_operands(self, o: Key, every: bool = False) -> list[Key]:
        """What `o` computes from: a library call's first two operands (a GEMM's bias or a
        fused convolution's side input stands for an instruction of its own; `every`: all),
        each taken through the transposes XLA added to lay it out (`_laid_out`)."""
        operands = [self._laid_out(self.opt.source(k)) for k in self.opt.operands[o]]
        return operands[:2] if ops.is_library(self.opt.instr[o]) and not every else operands

    def _laid_out(self, o: Key) -> Key:
        """The value under a chain of unidentified transposes of the optimized module: XLA adds
        them to give a dot or a library call the layout it wants (the reference has none)."""
        while not self.matched.get(o) and self.opt.instr[o].opcode == "transpose":
            operands = self.opt.operands[o]
            if len(operands) != 1:
                break
            o = self.opt.source(operands[0])
        return o

    def _alike(self, o: Key, r: Key) -> bool:
        oi, ri = self.opt.instr[o], self.ref.instr[r]
        return (
            self.opt.kind(o) == self.ref.kind(r)
            and ops.elements(oi) == ri.shape.num_elements
            and not (oi.op_name and (name := self.ref.op_name(r)) and oi.op_name != name)
        )

    def _unmatched_opt(self) -> list[Key]:
        return [o for o in self.opt.traced if not self.matched.get(o) and self.opt.source(o) == o]

    def _agree(self, o: Key, r: Key) -> bool:
        """Opcode, element count and op_name agree, and so do operands identified already."""
        oi, ri = self.opt.instr[o], self.ref.instr[r]
        if self.opt.kind(o) != self.ref.kind(r) and not (
            oi.opcode in ops.VIEWS and ri.opcode in ops.VIEWS
        ):
            return False
        if ops.elements(oi) != ri.shape.num_elements:
            return False
        if oi.op_name and (name := self.ref.op_name(r)) and oi.op_name != name:
            return False
        operands = self._data_operands(o)
        refs = [self._carriers(self.ref.source(k)) for k in self.ref.operands[r]]
        if len(operands) != len(refs):
            return False
        if oi.opcode in ops.COMMUTATIVE or ops.is_library(oi):  # a library call may swap operands
            known = [self.matched.get(k) for k in operands]
            return all(not s or any(s & x for x in refs) for s in known)
        for k, xs in zip(operands, refs, strict=True):
            s = self.matched.get(k)
            if s and not s & xs and self.opt.vn.get(k) not in {self.ref.vn.get(x) for x in xs}:
                return False
        return True

    def _supported(self, o: Key, r: Key) -> bool:
        """Evidence beyond a name (names can coincide: XLA numbers the instructions it makes
        from the same counters): the same source line, and an operand identified with one of
        the reference's."""
        if not ops.same_line(self.opt.instr[o], self.ref.instr[r]):
            return False
        refs = set().union(*(self._carriers(self.ref.source(k)) for k in self.ref.operands[r]))
        return any(self.matched.get(k, set()) & refs for k in self._data_operands(o))

    def _carriers(self, r: Key) -> set[Key]:
        """`r` and, while unidentified, what it carries on unchanged in size: XLA drops such ops
        (`maximum(x, -inf)`), so the optimized operand is then the value under them."""
        out = {r}
        while not self.back.get(r):
            instr = self.ref.instr.get(r)
            if instr is None:
                break
            data = [
                self.ref.source(k)
                for k in self.ref.operands[r]
                if self.ref.instr[self.ref.source(k)].opcode != "constant"
                and not self.ref.constant_broadcast(self.ref.source(k))
            ]
            if len(data) != 1 or self.ref.instr[data[0]].shape.num_elements != (
                instr.shape.num_elements
            ):
                break
            r = data[0]
            if r in out:  # a computation called from two places, one call reading the other
                break
            out.add(r)
        return out

    def trace(self, r: Key, order: Mapping[str, int]) -> Trace:
        """Where reference instruction `r` ended up; `order`: kernel -> its place."""
        instr = self.ref.instr[r]
        source = self.ref.source(r)
        if source != r:  # a view: where the value under it is
            if source not in self.ref.traced_set:
                return Trace(instr.name, r[0], instr.opcode, "outside", how="view")
            under = self.trace(source, order)
            how = "view" if under.status != "lost" else None
            return replace(
                under, instruction=instr.name, computation=r[0], opcode=instr.opcode, how=how
            )
        copies = sorted(self.back.get(r, ()), key=lambda k: k[1])
        if not copies:
            return Trace(instr.name, r[0], instr.opcode, "lost")
        kernels = {self.opt.kernel.get(o) for o in copies} - {None}
        holders = tuple(sorted(kernels, key=lambda k: order.get(k, len(order))))
        names = tuple(o[1] for o in copies)
        how = self.how.get(r)
        if not holders:
            return Trace(instr.name, r[0], instr.opcode, "outside", None, (), names, how)
        writers = [self.opt.kernel[o] for o in copies if o in self.opt.output]
        kernel = min(writers, key=lambda k: order.get(k, len(order))) if writers else holders[0]
        return Trace(instr.name, r[0], instr.opcode, "kernel", kernel, holders, names, how)
