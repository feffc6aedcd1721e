"""Element expressions: a node's value at a domain index, as Python source (with CSE).

An op is evaluated at a domain element; each operand is read at the index
:func:`astitch_sim.indexing.operand_index` implies (broadcast drops dims,
transpose permutes, reshape re-ravels...), generated here as index arithmetic
(:mod:`gpu_backend.exprs`).  Where the operand comes from is the plan's
``Value.space``: computed in this stage (its op-table ``scalar`` template),
a register array kept by an earlier stage, a shared view (Regional), or a global
array (an input, or a Global value after a grid barrier).  A :class:`Scope`
remembers what is already in a variable, so each ``(node, index)`` is loaded or
computed once per element.
"""
from __future__ import annotations

from typing import Optional

from astitch_sim import indexed
from astitch_sim.graph import shape_str
from astitch_sim.ops import compare_scalar

from . import exprs as E
from .dtypes import HELPER_BY_DTYPE, BITS, FLOATS

#: compare with type=TOTALORDER on floats (IEEE total order: -NaN < -inf < -0 < +0 < inf < +NaN)
_TOTAL_ORDER = {"LT": "_tot_less({0}, {1})", "GT": "_tot_less({1}, {0})", "LE": "(not _tot_less({1}, {0}))",
                "GE": "(not _tot_less({0}, {1}))", "EQ": "_tot_eq({0}, {1})", "NE": "(not _tot_eq({0}, {1}))"}


class Scope:
    """Values already in registers at this point of the code: (node, index) -> variable (CSE)."""

    def __init__(self, parent: Optional["Scope"] = None):
        self.parent, self.known = parent, {}

    def get(self, key):
        s = self
        while s is not None:
            if key in s.known:
                return s.known[key]
            s = s.parent
        return None


class ValueEmitter:
    """Values at domain elements (a mixin of :class:`~gpu_backend.stage.StageWriter`)."""

    def value(self, n: str, idx: tuple, scope: Scope) -> str:
        """Source of node ``n``'s value at index ``idx`` (emitting the statements it needs)."""
        node = self.g[n]
        if node.op == "constant" and node.rank == 0:
            return self.kw.mod.constant(node.attrs["value"], node.dtype, n)
        key = (n, tuple(str(x) for x in idx))
        hit = scope.get(key)
        if hit is not None:
            return hit
        if self.phase == "epilogue" and n in self.result_var:
            return self.result_var[n]
        if (n in self.ops and node.op != "reduce") or (self.phase == "epilogue" and n in self.epi):
            return self.compute(n, idx, scope, key)
        if n in self.ops or n in self.epi:
            self.fail(f"{n} is read at a domain element before the stage has finished computing it")
        v = self.kw.values.get(n)
        if v is None:
            self.fail(f"{n} is read but the kernel has no Value for it")
        if v.stage >= self.si:
            self.fail(f"{n} is read before stage {v.stage} computes it")
        if v.stage < 0 and 0 <= v.loaded_in < self.si:
            return self.kept_register(n, v)
        if v.stage < 0:
            ref = f"{self.kw.global_array(n)}[{E.ravel(idx, node.shape)}]"
            var = self.assign(scope, key, n, self.kw.load(node.dtype, ref),
                              f"{n}: {shape_str(node.shape, node.dtype)} from global memory")
            return var
        if v.space == "register":
            return self.kept_register(n, v)
        if v.space == "shared":
            ref = f"{self.kw.shared_view(n)}[{self.shared_slot(n, idx)}]"
            return self.assign(scope, key, n, self.kw.load(node.dtype, ref),
                               f"{n} from shared memory (Regional, written by stage {v.stage})")
        if v.space == "global":
            arr = self.kw.result_of.get(n) or self.kw.global_array(n)
            ref = f"{arr}[{E.ravel(idx, node.shape)}]"
            return self.assign(scope, key, n, self.kw.load(node.dtype, ref),
                               f"{n} from global memory (Global, written by stage {v.stage})")
        self.fail(f"{n} lives in unknown space {v.space!r}")

    def kept_register(self, n: str, v) -> str:
        """A value an earlier stage left in this thread's registers (computed there, or a kept input it loaded)."""
        at = v.stage if v.stage >= 0 else v.loaded_in
        if self.it is None:
            self.fail(f"{n} is kept in registers by stage {at} but read outside a domain loop")
        if self.k.stages[at].mapping != self.m:
            self.fail(f"{n} is kept in registers by stage {at}, whose mapping differs from this stage's")
        return f"{self.kw.local_array(n)}[{self.it}]"

    def assign(self, scope: Scope, key, n: str, expr: str, comment: str) -> str:
        var = self.kw.names.fresh(n)
        self.out(f"{var} = {expr}  # {comment}")
        scope.known[key] = var
        return var

    def compute(self, n: str, idx: tuple, scope: Scope, key) -> str:
        node = self.g[n]
        op = node.op
        if node.opdef.is_view:
            return self.value(node.operands[0].name, self.operand_index(node, idx), scope)
        if op == "copy" or (op == "convert" and node.operands[0].dtype == node.dtype):
            return self.value(node.operands[0].name, idx, scope)
        if op == "iota":
            d = node.attrs["iota_dimension"]
            return self.assign(scope, key, n, self.cast(node, str(idx[d]), force=True), self.describe(node))
        if op in ("concatenate", "pad"):
            return self.branchy(node, idx, scope, key)
        if node.kind == "indexed":
            return self.indexed(node, idx, scope, key)
        if node.kind != "elementwise":
            self.fail(f"{n} ({op}) cannot be evaluated per element")
        args = [self.value(o.name, idx, scope) for o in node.operands]
        if op == "convert":
            expr = self.convert(node.operands[0].dtype, node.dtype, args[0])
        else:
            expr = self.cast(node, self.template(node).format(*args, bits=BITS.get(node.dtype, 32)))
        return self.assign(scope, key, n, expr, self.describe(node))

    def describe(self, node) -> str:
        args = ", ".join(o.name for o in node.operands)
        return f"{node.name}: {shape_str(node.shape, node.dtype)} = {node.op}{node.attr_str()}({args})"

    def template(self, node) -> str:
        op, dtype = node.op, node.dtype
        if op == "compare":
            if node.attrs.get("type") == "TOTALORDER" and node.operands[0].dtype in FLOATS:
                return _TOTAL_ORDER[node.attrs["direction"]]
            return compare_scalar(node.attrs["direction"])
        t = node.opdef.scalar
        if t is None:
            self.fail(f"op {op} has no scalar template")
        if dtype not in FLOATS:
            for f, i in HELPER_BY_DTYPE.items():
                if f == "_not" and dtype == "pred":
                    continue
                t = t.replace(f + "(", i + "(")
        return t

    def indexed(self, node, idx, scope: Scope, key) -> str:
        """gather / dynamic-slice / dynamic-update-slice: load the index values, clamp, load where they point
        (astitch_sim.indexed holds the index arithmetic; here it runs on source expressions)."""
        def fetch(j, where):
            return self.value(node.operands[j].name, tuple(where), scope)

        def clamp(v, lo, hi):
            var = self.kw.names.fresh(f"start_{node.name}")
            expr = str(lo) if lo == hi else f"min(max(int64({v}), {lo}), {hi})"
            self.out(f"{var} = {expr}  # a start index of {node.name}, clamped into the operand (XLA semantics)")
            return var

        if node.op == "gather":
            self.out(f"# {self.describe(node)}: an indexed load")
            src = indexed.gather_index(node, idx, lambda w: fetch(1, w), E.add, clamp)
            return self.value(node.operands[0].name, src, scope)
        if node.op == "dynamic-slice":
            self.out(f"# {self.describe(node)}: a load at run-time offsets")
            src = indexed.dynamic_slice_index(node, idx, lambda j: fetch(j, ()), E.add, clamp)
            return self.value(node.operands[0].name, src, scope)
        upd = node.operands[1]
        starts = indexed.dynamic_starts(node, upd.shape, lambda j: fetch(j, ()), clamp)
        pos = tuple(E.sub(x, s) for x, s in zip(idx, starts))
        inside = E.all_of([f"{s} <= {x} < {E.add(s, n)}" for x, s, n in zip(idx, starts, upd.shape)])
        return self.emit_branches(node, [(inside, upd.name, pos), (True, node.operands[0].name, idx)], scope, key)

    def branchy(self, node, idx, scope: Scope, key) -> str:
        """concatenate / pad: the operand an element reads depends on where the element is."""
        if node.op == "concatenate":
            dim = node.attrs["dimension"]
            start = 0
            branches = []
            for i, o in enumerate(node.operands):
                end = start + o.shape[dim]
                last = i == len(node.operands) - 1      # by position: one node may be several operands
                branches.append((True if last else E.lt(idx[dim], end), o.name,
                                 tuple(E.sub(x, start) if d == dim else x for d, x in enumerate(idx))))
                start = end
        else:
            if any(node.attrs["interior"]) or any(x < 0 for x in node.attrs["low"]) or \
                    any(x < 0 for x in node.attrs["high"]):
                self.fail(f"{node.name}: pad with interior or negative padding is not supported")
            x = node.operands[0]
            pos = tuple(E.sub(i, lo) for i, lo in zip(idx, node.attrs["low"]))
            conds = []
            for p, n in zip(pos, x.shape):
                conds.append(True if isinstance(p, int) and 0 <= p < n else
                             (False if isinstance(p, int) else f"0 <= {p} < {n}"))
            branches = [(E.all_of(conds), x.name, pos), (True, node.operands[1].name, ())]
        return self.emit_branches(node, branches, scope, key)

    def emit_branches(self, node, branches, scope: Scope, key) -> str:
        """``if cond: var = operand[index] elif ...``: one branch per place an element may come from."""
        var = self.kw.names.fresh(node.name)
        self.out(f"# {self.describe(node)}")
        first = True
        for cond, o, oidx in branches:
            if cond is False:
                continue
            if cond is True:
                if first:           # statically this branch: no if at all
                    val = self.value(o, oidx, scope)
                    self.out(f"{var} = {self.cast(node, val, force=True)}")
                    scope.known[key] = var
                    return var
                self.out("else:")
            else:
                self.out(f"{'if' if first else 'elif'} {cond}:")
            self.out.indent()
            child = Scope(scope)
            val = self.value(o, oidx, child)
            self.out(f"{var} = {self.cast(node, val, force=True)}")
            self.out.dedent()
            first = False
            if cond is True:
                break
        scope.known[key] = var
        return var

    def operand_index(self, node, idx):
        """indexing.operand_index, as index expressions."""
        op, operand = node.op, node.operands[0]
        if operand.rank == 0:
            return ()
        if op == "broadcast":
            return tuple(idx[d] for d in node.attrs["dimensions"])
        if op in ("reshape", "bitcast"):
            return E.reshape_index(idx, node.shape, operand.shape)
        if op == "transpose":
            perm = node.attrs["permutation"]
            out = [None] * len(perm)
            for j, p in enumerate(perm):
                out[p] = idx[j]
            return tuple(out)
        if op == "reverse":
            dims = set(node.attrs["dimensions"])
            return tuple(E.sub(operand.shape[d] - 1, x) if d in dims else x for d, x in enumerate(idx))
        if op == "slice":
            strides = node.attrs.get("strides") or (1,) * node.rank
            return tuple(E.add(s, E.mul(x, st)) for x, s, st in zip(idx, node.attrs["starts"], strides))
        self.fail(f"cannot propagate an index through {op}")
