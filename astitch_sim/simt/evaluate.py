"""Evaluating a stage's ops at its elements by index propagation (plan.py, steps 1-2).

An :class:`Evaluator` holds one phase of one stage: the element loop (a
:class:`~astitch_sim.simt.geometry.Geometry`) or the epilogue (an
``EpilogueGeometry``).  ``value(node, idx)`` is "the value every thread sees
for ``node`` at index ``idx``", where ``idx`` is a tuple of integer arrays
broadcastable over the phase's domain -- one entry per dim of ``node``:

* an op of this stage is computed from its operands, each read at the index
  the op table implies (``indexing.operand_index``): a broadcast drops dims, a
  transpose permutes them, a slice offsets them...  Data-movement ops cost
  nothing; an indexed load (gather, dynamic slices) first reads its index values,
  then the operand where they point -- so its loads are counted at the addresses
  the tokens or labels really touch; elementwise ops apply the op table's numpy
  function and count their flops once per domain element (a broadcast Local op is recomputed per
  element, as TVM does, and counted that way);
* anything else is *read* from where the plan says it lives
  (``KernelRun.read``): global memory, a block's shared memory, a thread's
  registers -- and that read is counted.

Values are memoised per (node, index arrays): a thread computes a value once
per index, like a compiler's common-subexpression elimination.  In the element
loop only values read more than once are kept (:func:`element_uses`): a value
with one reader is computed once anyway, and dropping it as soon as that reader
has it keeps one stage of a 262-million-element softmax at a couple of arrays
of host memory instead of one per intermediate; past :data:`IN_PLACE_MIN` elements an elementwise op
writes its result into an operand that only it reads (:func:`in_place`: ``exp(x - max)`` holds one array,
not two).  Holding the
index as broadcastable arrays (``[R, 1]``, ``[1, C]``) keeps the arithmetic
as cheap as numpy's own broadcasting: the simulated stage costs about what the
numpy reference costs for the same ops.
"""
from __future__ import annotations

import weakref

import numpy as np

from ..ir.dtypes import cast
from ..errors import AStitchError
from ..ir.index_rules import reshape_index
from ..ir.indexing import operand_index, runtime_operand_index
# the thresholds are the numpy reference's (same reason: a domain-sized result is a gigabyte at 8192x32000)
from ..ir.reference import IN_PLACE_BLOCK, IN_PLACE_MIN, compute_into, result_dtype
from .boxes import cut, inside, mask_box


class Evaluator:
    def __init__(self, run, index: int, stage, geom, phase: str, stats):
        self.run, self.i, self.stage, self.geom, self.phase, self.stats = run, index, stage, geom, phase, stats
        self.g = run.graph
        self.memo: dict = {}
        self.keep: list = []              # keeps index arrays alive so their ids stay unique
        self.ops = set(stage.ops)
        self.epilogue = set(stage.epilogue)
        self.reduce_results: dict = {}    # epilogue phase: this stage's reduce results
        self.interned: dict = {}          # (shape, dtype) -> index arrays seen, to reuse equal ones
        self.uses = run.stage_uses[index] if phase == "elements" else None
        self.fresh = weakref.WeakValueDictionary()   # name -> the array an elementwise op of this loop just made
        self.own: dict = {}               # shape -> the own index of an op of that shape (own_index)
        self.in_order: set = set()        # (index arrays, shape) known to read a tensor of that shape in order
        self.boxes: dict = {}             # id(mask) -> (mask, its box or None)
        for a in geom.idx:
            self.intern_array(a)

    def intern_array(self, a):
        """The first index array equal to ``a`` (so equal indices share a memo entry: one load, one op)."""
        a = np.asarray(a)
        bucket = self.interned.setdefault((a.shape, a.dtype.str), [])
        for b in bucket:
            if b is a or np.array_equal(b, a):
                return b
        bucket.append(a)
        return a

    def intern(self, idx: tuple) -> tuple:
        return tuple(self.intern_array(a) for a in idx)

    # -- the one entry point ---------------------------------------------------------
    def value(self, name: str, idx: tuple, mask=None):
        key = (name, tuple(id(a) for a in idx), id(mask) if mask is not None else 0)
        hit = self.memo.get(key)
        if hit is not None:
            return hit
        node = self.g[name]
        kept = self.uses is None or self.uses.get(name, 0) > 1
        if kept:
            self.keep.append((idx, mask))
        if node.op == "constant" and node.rank == 0:
            val = cast(np.asarray(node.attrs["value"]), node.dtype).reshape(())
        elif self.computes(node):
            val = self.compute(node, idx, mask)
        else:
            val = self.run.read(self, name, idx, mask)
        if kept:
            self.memo[key] = val
        return val

    def computes(self, node) -> bool:
        if node.name in self.epilogue:
            return True
        return node.name in self.ops and node.op != "reduce"

    def own_index(self, node) -> tuple:
        """``node``'s index at each element of the phase: the domain's own, or, where the node is the domain
        reshaped (``flatindex.reshapes``: a stage over ``[2, 32, 10240]`` computing an op of ``[2, 320, 32, 32]``),
        the index reshaped -- interned, so every reader of the node at its own elements shares one memo entry
        (one load, one op)."""
        shape = tuple(node.shape)
        if self.geom.kind != "element" or shape == tuple(self.geom.shape):
            return self.geom.idx
        got = self.own.get(shape)
        if got is None:
            got = self.own[shape] = self.intern(reshape_index(self.geom.idx, self.geom.shape, shape))
        return got

    def is_identity(self, idx: tuple, node) -> bool:
        """Is ``idx`` the phase's own index of ``node`` (:meth:`own_index`): the node of the domain's (or the
        task's) shape, or the domain reshaped (once :meth:`own_index` made its index: a root of that shape)?"""
        if self.geom.kind == "element":
            if tuple(node.shape) == tuple(self.geom.shape):
                own = self.geom.idx
            else:               # the domain reshaped: only once its own index exists (a root made it), as no
                own = self.own.get(tuple(node.shape))   # other index is (a transpose's would cost a domain-sized
                if own is None:                         # reshape to tell apart)
                    return False
        else:
            if tuple(node.shape) != tuple(self.geom.task_shape):
                return False
            own = self.geom.idx
        return len(idx) == len(own) and all(a is b for a, b in zip(idx, own))

    def at_whole(self, node, idx: tuple, mask) -> bool:
        """Is ``idx`` every element of ``node``, in row-major order (its own index, or an index a reshape read in
        order handed down: :meth:`walks_in_order`), with no mask?  The value is then the whole tensor, the
        same numbers in every stage that computes it, whatever the stage's domain (``recomputed.Recomputed``)."""
        return mask is None and self.uses is not None and self.walks_in_order(idx, node)

    def walks_in_order(self, idx: tuple, node) -> bool:
        """Is ``idx`` known to read ``node`` in row-major order (the domain's element ``e`` at the tensor's element
        ``e``): its own index (:meth:`is_identity`), or an index a reshape read in order handed to its operand?
        (False means "not known": ``flatindex.walks_in_order`` may still find it from the arrays.)"""
        return self.geom.kind == "element" and (self.is_identity(idx, node) or _index_key(idx, node) in self.in_order)

    def box_slice(self, mask, shapes: list):
        """Where ``mask`` is a box (``boxes.mask_box``, worked out once per mask): ``(shape, slice)`` of a value of
        the broadcast of ``shapes`` that only the slice's elements need (``boxes.inside``); else None."""
        if mask is None:
            return None
        hit = self.boxes.get(id(mask))
        if hit is None:
            hit = self.boxes[id(mask)] = (mask, mask_box(mask))     # (the mask kept: its id stays its own)
        return None if hit[1] is None else inside(hit[1], shapes)

    # -- computing an op of this stage ---------------------------------------------------
    def compute(self, node, idx, mask):
        op = node.op
        if op == "iota":
            d = node.attrs["iota_dimension"]
            self.count_flops(node, mask)
            return cast(np.asarray(idx[d]), node.dtype)
        if node.opdef.is_view:               # an index remap: the operand's element, no instruction
            src = node.operands[0]
            oidx = self.intern(operand_index(node, 0, idx)[0])
            if node.op in RESHAPES and self.walks_in_order(idx, node):
                # a reshape read at its own elements, or at any index that walks it in row-major order, reads
                # its operand at the same row-major positions: a load of it is known to walk the tensor in order
                # (no domain-sized check of the index arrays: a third of Inductor's global norm, by the profiler)
                self.in_order.add(_index_key(oidx, src))
            return self.value(src.name, oidx, mask)
        if op == "concatenate":
            parts = []
            for i, o in enumerate(node.operands):
                oidx, m = operand_index(node, i, idx)
                parts.append((self.value(o.name, oidx, m if mask is None else m & mask), m))
            return self.joined(parts)
        if op == "pad":
            # indexing.operand_index builds pad's mask in place: it needs index arrays of one shape
            oidx, m = operand_index(node, 0, tuple(np.broadcast_arrays(*idx)) if idx else idx)
            v = self.value(node.operands[0].name, oidx, m if mask is None else m & mask)
            outside = ~m if mask is None else (~m) & mask
            p = self.value(node.operands[1].name, (), outside)
            return np.where(m, v, p).astype(v.dtype, copy=False)
        if node.kind == "indexed":
            return self.indexed(node, idx, mask)
        if node.kind == "elementwise":
            args = []
            for i, o in enumerate(node.operands):
                oidx, _ = operand_index(node, i, idx)
                args.append(self.value(o.name, oidx, mask))
            self.count_flops(node, mask)
            again = self.run.recomputed
            whole = again is not None and again.wanted(node.name) and self.at_whole(node, idx, mask)
            if whole and (val := again.get(node.name, np.broadcast_shapes(*map(np.shape, idx)))) is not None:
                return val                       # computed by an earlier stage: read and counted again, not redone
            donor = self.donor(node, args)
            if donor is not None:
                val = in_place(node, args, donor)
            else:
                val = cast(node.opdef.numpy(node, *args), node.dtype)
                if not any(val is a or np.may_share_memory(val, a) for a in args if isinstance(a, np.ndarray)):
                    if self.uses is not None and isinstance(val, np.ndarray) and val.base is None:
                        self.fresh[node.name] = val
            if whole and (donor is not None or self.fresh.get(node.name) is val) and np.size(val) == node.size:
                again.keep(node.name, val)      # (an array of its own: made here, or a dead operand's it overwrote)
            return val
        raise AStitchError(f"kernel {self.run.kernel.name}: stage {self.i} cannot evaluate {node.name} ({op}) "
                           "per element inside a generated kernel")

    def joined(self, parts: list):
        """A concatenate's value from its operands' ``(value, mask)``: where each mask is a box (an operand's own
        range of the joined dim, ``boxes.mask_box``) each operand's box is copied into one new array -- the boxes
        tile the domain, so every element is written once (numpy's ``where`` over the whole domain per operand
        cost about twice as much); otherwise each mask picks its operand."""
        shape = np.broadcast_shapes(*(np.shape(a) for part in parts for a in part))
        where = [self.box_slice(m, [shape]) for _, m in parts]
        if all(w is not None for w in where):
            out = np.empty(shape, dtype=np.result_type(*(v for v, _ in parts)))
            for (v, _), (_, sl) in zip(parts, where):
                out[sl] = cut(v, sl)                 # (broadcast into the box as it is assigned)
            return out
        val = None
        for v, m in parts:
            val = v if val is None else np.where(m, v, val)
        return val

    def donor(self, node, args):
        """An operand array this elementwise op may overwrite with its result, or None.

        Only a big array (over :data:`IN_PLACE_MIN` elements) of the result's full shape and dtype that nothing
        else reads (used once: :func:`element_uses`), and either an elementwise op of this element loop made
        it (``fresh``: not a buffer, a register, a view or an index array) -- ``exp(x - max)`` then holds one
        domain-sized array instead of two -- or it is a global buffer this kernel's one read of kills
        (``KernelRun.read_once``: no later kernel reads it, it is no output, it shares no memory with any
        other buffer, an input included) -- unfused ``exp`` over ``shifted`` then needs no third gigabyte.
        Host memory only: the buffer keeps its address, and what is counted and computed is the same."""
        if self.uses is None or not node.operands or self.geom.kind != "element":
            return None
        mem = self.run.mem
        for o, a in zip(node.operands, args, strict=True):
            if not (isinstance(a, np.ndarray) and a.ndim and a.size > IN_PLACE_MIN and a.shape == self.geom.shape
                    and a.dtype == result_dtype(node) and a.flags.c_contiguous and a.flags.writeable
                    and sum(b is a for b in args) == 1 and self.uses.get(o.name, 0) == 1):
                continue
            if self.fresh.get(o.name) is a:
                del self.fresh[o.name]
                return a
            if (o.name in self.run.read_once and mem.arrays.get(o.name) is a and a.base is None
                    and not any(np.may_share_memory(a, b) for n, b in mem.arrays.items() if n != o.name)):
                mem.release(o.name)          # dead after this op: its address stays, its host array is reused
                return a
        return None

    def indexed(self, node, idx, mask):
        """An indexed load: read the index operands (counted), then the operand where they point (counted)."""
        def fetch(j, where):
            return self.value(node.operands[j].name, self.intern(tuple(np.asarray(w) for w in where)), mask)

        self.count_flops(node, mask)
        both = (lambda m: m) if mask is None else (lambda m: mask if m is None else m & mask)
        if node.op == "dynamic-update-slice":
            xi, outside = runtime_operand_index(node, 0, idx, fetch)
            ui, inside = runtime_operand_index(node, 1, idx, fetch)
            kept = self.value(node.operands[0].name, idx, both(outside))
            new = self.value(node.operands[1].name, self.intern(ui), both(inside))
            return np.where(inside, new, kept).astype(kept.dtype, copy=False)
        oidx, _ = runtime_operand_index(node, 0, idx, fetch)
        return self.value(node.operands[0].name, self.intern(tuple(np.asarray(a) for a in oidx)), mask)

    def count_flops(self, node, mask):
        per = node.opdef.flops
        if not per:
            return
        n = self.geom.count(mask)
        f = per * n
        st = self.stats
        st.flops += f
        if node.opdef.cost == "expensive":
            st.expensive_flops += f
        v = self.run.kernel.values.get(node.name)
        if self.phase == "epilogue":
            s = self.geom.splits
            st.recomputed_flops += f * (s - 1) // s
        elif v is not None and v.stage >= 0 and v.stage != self.i:
            st.recomputed_flops += f                     # a copy of an op another stage computes
        else:
            factor = self.stage.recompute.get(node.name, 1)
            if factor > 1:
                st.recomputed_flops += f * (factor - 1) // factor


#: view ops that read their operand at the same row-major position (``index_rules.same_flat_position``)
RESHAPES = ("reshape", "bitcast")


def _index_key(idx: tuple, node) -> tuple:
    """An index (interned arrays, alive as long as the evaluator) and a tensor's shape, as a set key."""
    return tuple(map(id, idx)), tuple(node.shape)


def in_place(node, args, donor):
    """``node``'s result written into ``donor`` (one of ``args``, the full domain), a block of leading rows at
    a time (``reference.compute_into``: each block reads its rows of ``donor`` before overwriting them; the
    donor has the result's dtype: :meth:`Evaluator.donor` checks)."""
    return compute_into(node, args, donor, IN_PLACE_BLOCK)


#: ops whose evaluation reads an operand at one index per occurrence in its operand list (elementwise ops,
#: index remaps); any other reader (concatenate, pad, indexed loads: their index operands may be fetched
#: once per operand they address) keeps what it reads memoised
_ONE_READ_PER_OPERAND = ("elementwise",)


def element_uses(stage, graph, kept_inputs) -> dict:
    """How many times the element loop of ``stage`` asks for each value: once per occurrence in the operand
    list of an op of the stage (twice for ``x * x``), once more for a root (evaluated and stored), a reduce
    input, or an input the stage keeps in registers.  A reader that may ask twice for one operand counts 2,
    so its operands stay memoised.  Only a value asked for more than once needs keeping: the count is what
    lets :class:`Evaluator` free intermediates after their only use without reading anything twice."""
    uses: dict = {}

    def add(name, n=1):
        uses[name] = uses.get(name, 0) + n

    for name in list(stage.ops) + list(stage.epilogue):     # (the element loop computes epilogue ops too, if asked)
        node = graph[name]
        simple = node.kind in _ONE_READ_PER_OPERAND or node.opdef.is_view or node.op == "reduce"
        for o in node.operands:
            add(o.name, 1 if simple else 2)
    for name in list(stage.roots) + list(kept_inputs):
        add(name)
    return uses
