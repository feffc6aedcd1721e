"""Element expressions: a node's value at a domain index, as Python source (with CSE).

An op is evaluated at a domain element; each operand is read at the index
:func:`astitch_sim.ir.indexing.operand_index` implies (broadcast drops dims,
transpose permutes, reshape re-ravels...), generated here as index arithmetic
(:mod:`gpu_backend.codegen.exprs`).  Where the operand comes from is the plan's
``Value.space``: computed in this stage (its op-table ``scalar`` template),
a register array kept by an earlier stage, a shared view (Regional), or a global
array (an input, or a Global value after a grid barrier).  A :class:`Scope`
remembers what is already in a variable, so each ``(node, index)`` is loaded or
computed once per element.
"""
from __future__ import annotations

from typing import TYPE_CHECKING, Optional

from astitch_sim.ir import indexed
from astitch_sim.ir.graph import shape_str
from astitch_sim.ir.ops import compare_scalar
from astitch_sim.plan.task_registers import kept_per_task, same_task_threads
from astitch_sim.plan.vector_width import SCATTER, SCALAR_DTYPES, UNIFORM, through

from . import exprs as E
from .dtypes import HELPER_BY_DTYPE, BITS, FLOATS

if TYPE_CHECKING:
    from .dtypes import CastEmitter
    from .slots import SlotEmitter
    from .stage_context import StageContext

#: compare with type=TOTALORDER on floats (IEEE total order: -NaN < -inf < -0 < +0 < inf < +NaN)
_TOTAL_ORDER = {"LT": "_tot_less({0}, {1})", "GT": "_tot_less({1}, {0})", "LE": "(not _tot_less({1}, {0}))",
                "GE": "(not _tot_less({0}, {1}))", "EQ": "_tot_eq({0}, {1})", "NE": "(not _tot_eq({0}, {1}))"}


class LaneIdx(tuple):
    """A domain index of one element of a vector (a flat mapping's ``vector`` consecutive elements):
    the index itself, plus ``lane`` (the element's place in the vector), ``base`` (the index of the
    vector's first element, followed through the same views) and ``state`` -- how the vector's
    elements sit in the tensor the index reaches (``astitch_sim.plan.vector_width.through``)."""

    def __new__(cls, items, lane: int, base: tuple, state, width: int):
        self = super().__new__(cls, items)
        self.lane, self.base, self.state, self.width = lane, tuple(base), state, width
        return self

    def follow(self, node, items, base) -> "LaneIdx":
        """The index at ``node``'s operand (``items``; ``base`` for the first lane)."""
        state, _ = through(node, self.state, self.width)
        return LaneIdx(items, self.lane, base, state, self.width)

    @property
    def contiguous(self) -> bool:
        return self.state not in (UNIFORM, SCATTER)


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
    """Values at domain elements: the statements that load or compute a node at an index, and the
    expression that holds it.

    Built with the stage context (which stage, its Values, the phase: per element or the
    epilogue), the :class:`~gpu_backend.codegen.dtypes.CastEmitter` (an op's result back to its
    node's type) and the :class:`~gpu_backend.codegen.slots.SlotEmitter` (where a Regional value
    sits in shared memory).
    """

    def __init__(self, ctx: StageContext, casts: CastEmitter, slots: SlotEmitter):
        self.ctx, self.casts, self.slots = ctx, casts, slots

    def value(self, n: str, idx: tuple, scope: Scope) -> str:
        """Source of node ``n``'s value at index ``idx`` (emitting the statements it needs)."""
        ctx = self.ctx
        node = ctx.g[n]
        if node.op == "constant" and node.rank == 0:
            return ctx.kw.mod.constant(node.attrs["value"], node.dtype, n)
        key = (n, tuple(str(x) for x in idx))
        hit = scope.get(key)
        if hit is not None:
            return hit
        if ctx.phase == "epilogue" and n in ctx.result_var:
            return ctx.result_var[n]
        if (n in ctx.ops and node.op != "reduce") or (ctx.phase == "epilogue" and n in ctx.epi):
            return self.compute(n, idx, scope, key)
        if n in ctx.ops or n in ctx.epi:
            ctx.fail(f"{n} is read at a domain element before the stage has finished computing it")
        return self.read(n, idx, scope, key)

    def read(self, n: str, idx: tuple, scope: Scope, key) -> str:
        """A value this stage does not compute: a kernel input, or an earlier stage's value, read from
        where the plan's ``Value.space`` puts it (registers, shared memory, global memory)."""
        ctx = self.ctx
        node = ctx.g[n]
        v = ctx.kw.values.get(n)
        if v is None:
            ctx.fail(f"{n} is read but the kernel has no Value for it")
        if v.stage >= ctx.si:
            ctx.fail(f"{n} is read before stage {v.stage} computes it")
        if v.stage < 0 and 0 <= v.loaded_in < ctx.si:
            return self.kept_register(n, v)
        if v.stage < 0:
            return self.global_read(n, ctx.kw.global_array(n), idx, scope, key,
                                    f"{n}: {shape_str(node.shape, node.dtype)} from global memory")
        if v.space == "register":
            return self.kept_register(n, v)
        if v.space == "shared":
            ref = f"{ctx.kw.shared_view(n)}[{self.slots.shared_slot(n, idx)}]"
            return self.assign(scope, key, n, ctx.kw.load(node.dtype, ref),
                               f"{n} from shared memory (Regional, written by stage {v.stage})")
        if v.space == "global":
            arr = ctx.kw.result_of.get(n) or ctx.kw.global_array(n)
            return self.global_read(n, arr, idx, scope, key, f"{n} from global memory (Global, written by "
                                                             f"stage {v.stage})")
        ctx.fail(f"{n} lives in unknown space {v.space!r}")

    def global_read(self, n: str, arr: str, idx: tuple, scope: Scope, key, comment: str) -> str:
        """A load from a global array, by pointer arithmetic (``ldg``: no negative-index wraparound).

        Inside a flat stage's vector (``idx`` a :class:`LaneIdx`) the load depends on the thread's
        index variables only, so it goes to the vector's load section (``ctx.prefetch``), ahead of
        every use; a tensor the vector reads contiguously is one vector load (``ldg4``: its lanes
        are the tuple's items), a uniform one a single scalar load all lanes share (the same
        index, so the same CSE key)."""
        ctx = self.ctx
        node = ctx.g[n]
        flat = E.ravel(idx, node.shape)
        lanes = isinstance(idx, LaneIdx) and ctx.prefetch is not None
        if lanes and idx.contiguous and idx.width > 1 and node.dtype not in SCALAR_DTYPES:
            base = E.ravel(idx.base, node.shape)
            vkey = ("vector", n, str(base))
            vec = scope.get(vkey)
            if vec is None:
                vec = ctx.kw.names.fresh(f"{n}_v")
                ctx.prefetch(f"{vec} = ldg{idx.width}({arr}, {base})  # {comment}: {idx.width} elements, "
                             "one vector load")
                scope.known[vkey] = vec
            return self.assign(scope, key, n, ctx.kw.load(node.dtype, f"{vec}[{idx.lane}]"),
                               f"{n}: lane {idx.lane} of the vector")
        ref = f"ldg({arr}, {flat})"
        if lanes:
            var = ctx.kw.names.fresh(n)
            ctx.prefetch(f"{var} = {ctx.kw.load(node.dtype, ref)}  # {comment}"
                         + (" (one load for the vector's elements)" if idx.state == UNIFORM else ""))
            scope.known[key] = var
            return var
        return self.assign(scope, key, n, ctx.kw.load(node.dtype, ref), comment)

    def kept_register(self, n: str, v) -> str:
        """A value an earlier stage left in this thread's registers (computed there, or a kept input it loaded;
        a per-task value: in the slot of the task-loop trip, ``plan/task_registers.py``)."""
        ctx = self.ctx
        at = v.stage if v.stage >= 0 else v.loaded_in
        if kept_per_task(ctx.k, ctx.g, n):
            if ctx.outer is None or not same_task_threads(ctx.k.stages[at].mapping, ctx.m):
                ctx.fail(f"{n} is kept per task in the registers of stage {at}'s lanes, but this stage does not "
                         "give each task to the same threads")
            return f"{ctx.kw.local_array(n)}[{ctx.outer}]"
        if ctx.it is None:
            ctx.fail(f"{n} is kept in registers by stage {at} but read outside a domain loop")
        if ctx.k.stages[at].mapping != ctx.m:
            ctx.fail(f"{n} is kept in registers by stage {at}, whose mapping differs from this stage's")
        return f"{ctx.kw.local_array(n)}[{ctx.it}]"

    def assign(self, scope: Scope, key, n: str, expr: str, comment: str) -> str:
        """``var = expr  # comment`` under a fresh name, remembered in ``scope`` for ``key`` (CSE)."""
        var = self.ctx.kw.names.fresh(n)
        self.ctx.out(f"{var} = {expr}  # {comment}")
        scope.known[key] = var
        return var

    def compute(self, n: str, idx: tuple, scope: Scope, key) -> str:
        """A value this stage computes: views follow their operand's index, iota is the index itself,
        concatenate/pad/indexed ops branch or look up, elementwise ops apply their scalar template."""
        node = self.ctx.g[n]
        op = node.op
        if node.opdef.is_view:
            at = self.operand_index(node, idx)
            if isinstance(idx, LaneIdx):
                at = idx.follow(node, at, self.operand_index(node, idx.base))
            return self.value(node.operands[0].name, at, scope)
        if op == "copy" or (op == "convert" and node.operands[0].dtype == node.dtype):
            return self.value(node.operands[0].name, idx, scope)
        if op == "iota":
            d = node.attrs["iota_dimension"]
            return self.assign(scope, key, n, self.casts.cast(node, str(idx[d]), force=True), self.describe(node))
        if op in ("concatenate", "pad"):
            return self.branchy(node, idx, scope, key)
        if node.kind == "indexed":
            return self.indexed(node, idx, scope, key)
        if node.kind != "elementwise":
            self.ctx.fail(f"{n} ({op}) cannot be evaluated per element")
        # a rank-0 operand (clamp's bounds, select's scalar predicate) is one element whatever the index:
        # inside a vector, one load the vector's elements share, issued with the vector's loads
        scalar = LaneIdx((), idx.lane, (), UNIFORM, idx.width) if isinstance(idx, LaneIdx) else ()
        args = [self.value(o.name, scalar if o.rank == 0 else idx, scope) for o in node.operands]
        if op == "convert":
            expr = self.casts.convert(node.operands[0].dtype, node.dtype, args[0])
        else:
            expr = self.casts.cast(node, self.template(node).format(*args, bits=BITS.get(node.dtype, 32)))
        return self.assign(scope, key, n, expr, self.describe(node))

    def describe(self, node) -> str:
        """The node as the comment beside its statement: ``name: shape = op{attrs}(operands)``."""
        args = ", ".join(o.name for o in node.operands)
        return f"{node.name}: {shape_str(node.shape, node.dtype)} = {node.op}{node.attr_str()}({args})"

    def template(self, node) -> str:
        """The op's scalar template, with integer helper variants for integer dtypes."""
        op, dtype = node.op, node.dtype
        if op == "compare":
            if node.attrs.get("type") == "TOTALORDER" and node.operands[0].dtype in FLOATS:
                return _TOTAL_ORDER[node.attrs["direction"]]
            return compare_scalar(node.attrs["direction"])
        t = node.opdef.scalar
        if t is None:
            self.ctx.fail(f"op {op} has no scalar template")
        if dtype not in FLOATS:
            for f, i in HELPER_BY_DTYPE.items():
                if f == "_not" and dtype == "pred":
                    continue
                t = t.replace(f + "(", i + "(")
        return t

    def indexed(self, node, idx, scope: Scope, key) -> str:
        """gather / dynamic-slice / dynamic-update-slice: load the index values, clamp, load where they point
        (astitch_sim.ir.indexed holds the index arithmetic; here it runs on source expressions)."""
        def fetch(j, where):
            return self.value(node.operands[j].name, tuple(where), scope)

        def clamp(v, lo, hi):
            var = self.ctx.kw.names.fresh(f"start_{node.name}")
            expr = str(lo) if lo == hi else f"min(max(int64({v}), {lo}), {hi})"
            self.ctx.out(f"{var} = {expr}  # a start index of {node.name}, clamped into the operand (XLA semantics)")
            return var

        if node.op == "gather":
            self.ctx.out(f"# {self.describe(node)}: an indexed load")
            src = indexed.gather_index(node, idx, lambda w: fetch(1, w), E.add, clamp)
            return self.value(node.operands[0].name, src, scope)
        if node.op == "dynamic-slice":
            self.ctx.out(f"# {self.describe(node)}: a load at run-time offsets")
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
                self.ctx.fail(f"{node.name}: pad with interior or negative padding is not supported")
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
        var = self.ctx.kw.names.fresh(node.name)
        self.ctx.out(f"# {self.describe(node)}")
        first = True
        for cond, o, oidx in branches:
            if cond is False:
                continue
            if cond is True:
                if first:           # statically this branch: no if at all
                    val = self.value(o, oidx, scope)
                    self.ctx.out(f"{var} = {self.casts.cast(node, val, force=True)}")
                    scope.known[key] = var
                    return var
                self.ctx.out("else:")
            else:
                self.ctx.out(f"{'if' if first else 'elif'} {cond}:")
            self.ctx.out.indent()
            child = Scope(scope)
            val = self.value(o, oidx, child)
            self.ctx.out(f"{var} = {self.casts.cast(node, val, force=True)}")
            self.ctx.out.dedent()
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
        self.ctx.fail(f"cannot propagate an index through {op}")
