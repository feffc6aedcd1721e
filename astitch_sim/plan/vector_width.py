"""Vector width and elements per thread of a flat (elementwise) kernel: a planning decision.

A memory-bound elementwise kernel reaches copy bandwidth only if each thread keeps
several wide loads in flight: one 32-bit load per thread per element leaves HBM idle
and spends the issue slots on address arithmetic (``benchmarks.sass_budget``).  So a
flat mapping cuts its domain into *vectors* of ``vector`` consecutive elements (one
64/128-bit ``ld.global.v2/v4`` per tensor that is read contiguously) and gives each
thread ``per_thread`` elements per round -- ``per_thread // vector`` vectors whose
loads are all issued before the first is used.  Blocks are full (at least
:data:`MIN_BLOCK` threads), not one warp: a million 32-thread blocks cannot fill an SM.

The decision is made here, once, for every strategy's kernels
(``kernel_builder.assemble_kernel`` calls :func:`vectorize`), and recorded on the
:class:`~astitch_sim.plan.mapping.ThreadMapping` with the reason (``vector_why``) so that
``print(plan)`` says it.  The readers follow it: the code generator emits the vector
accesses, the SIMT model counts a warp's vector access as one request.

Which reads are vectors follows from how the element's index reaches the tensor
(:func:`lane_reads`): through elementwise ops unchanged; a broadcast that drops the
innermost dim makes the read *uniform* (one scalar load serves the vector's
elements); a broadcast, transpose or reshape that keeps the innermost dim innermost
(and its extent a multiple of the width) keeps it *contiguous*; anything else
(a transpose that moves it, a reverse, a slice whose start is not a multiple of the
width, concatenate, pad, gather) is *scattered*: one scalar load per element, said
in ``vector_why``.  The width divides the innermost extent (a vector never straddles
two rows, so a thread decomposes its index once per vector, not per element);
where it cannot, a narrower one, or scalar, and the plan says why.

One exception keeps the full width where the innermost extent does not allow it (f32[1001,999],
a [4096,1] column of per-row values, logits over an odd vocabulary): a stage whose every tensor is
read and written at the domain's own *flat* index (:func:`flat_order`: elementwise ops, reshapes,
bitcasts, broadcasts of scalars or of unit dims; no iota, concatenate, pad or reduce, no broadcast of a
row, no transpose) sees
memory exactly as one long row.  Its vectors run across the rows in flat order
(``ThreadMapping.flat_vectors``): vector ``c`` is elements ``c*V ..``, aligned in every tensor
(each starts at an aligned base), and where ``size % V`` elements are left over, the last vector is
a **scalar tail**: the one thread that holds it reads and writes those elements one at a time.
"""
from __future__ import annotations

from dataclasses import replace
from math import ceil

from ..ir.dtypes import itemsize
from ..ir.flatindex import reshapes

#: widest vector access, bytes (ld.global.v4.b32 / v2.b64)
VECTOR_BYTES = 16
#: most elements per vector
MAX_VECTOR = 8
#: a flat kernel's block is at least this many threads (XLA: 128-1024)
MIN_BLOCK = 256
#: most vectors per thread per round (loads in flight before use)
MAX_UNROLL = 4
#: dtypes never loaded as vectors (stored one byte per bool: not worth a case)
SCALAR_DTYPES = ("pred",)

#: why a flat stage of a stitched kernel stays scalar
STITCHED = "scalar: the stages of a stitched kernel share one launch shape (vectors are planned for one-stage kernels)"

CONTIG, UNIFORM, SCATTER = "contiguous", "uniform", "scattered"
#: a vector's elements are consecutive in the tensor's row-major (flat) order from an aligned start, whatever
#: its rows: the state of every read of a ``flat_vectors`` stage (:func:`flat_order`)
FLAT = "flat"


def through(node, state, width: int):
    """The lane state of ``node``'s operand when ``node`` (a view) is read in ``state``.

    ``state`` is ``(CONTIG, pos)`` (the vector runs along dim ``pos`` of the index), :data:`FLAT`
    (it runs along the flat index, across rows), :data:`UNIFORM` or :data:`SCATTER`; returns the state
    at the operand's index and, for a scattered result, why."""
    if state == UNIFORM or state == SCATTER:
        return state, ""
    operand = node.operands[0]
    op = node.op
    if operand.rank == 0:
        return UNIFORM, ""
    if state == FLAT:
        return _through_flat(node)
    pos = state[1]
    last = operand.rank - 1
    if op == "broadcast":
        dims = list(node.attrs["dimensions"])
        if pos not in dims:
            return UNIFORM, ""
        k = dims.index(pos)
        return ((CONTIG, k), "") if k == last else (SCATTER, f"{operand.name} is read strided (broadcast)")
    if op == "transpose":
        k = node.attrs["permutation"][pos]
        return ((CONTIG, k), "") if k == last else (SCATTER, f"{operand.name} is read transposed")
    if op in ("reshape", "bitcast"):
        if pos == node.rank - 1 and operand.shape[-1] % width == 0:
            return (CONTIG, last), ""
        return SCATTER, f"{operand.name}'s innermost extent {operand.shape[-1]} breaks the vectors (reshape)"
    if op == "slice":
        strides = node.attrs.get("strides") or (1,) * node.rank
        start = node.attrs["starts"][pos]
        if strides[pos] != 1:
            return SCATTER, f"{operand.name} is sliced with stride {strides[pos]}"
        if start % width:
            return SCATTER, f"{operand.name} is sliced from offset {start}, not a multiple of {width}"
        return (CONTIG, pos), ""
    if op == "reverse":
        if pos in node.attrs["dimensions"]:
            return SCATTER, f"{operand.name} is read reversed"
        return (CONTIG, pos), ""
    return SCATTER, f"{operand.name} is read through {op}"


def _through_flat(node):
    """:func:`through` for a vector in flat order (:data:`FLAT`): views that keep every element's flat
    index keep it -- a reshape or bitcast, a broadcast that only adds unit dims -- and any other breaks it."""
    operand = node.operands[0]
    if node.op in ("reshape", "bitcast"):
        return FLAT, ""
    if node.op == "broadcast" and operand.size == node.size and list(node.attrs["dimensions"]) == \
            sorted(node.attrs["dimensions"]):
        return FLAT, ""
    return SCATTER, f"{operand.name} is read through {node.op}, not at the domain's flat index"


def reshaped_state(state, shape, width: int, rank: int):
    """The lane state at an op of ``shape`` that a stage over a domain of ``rank`` dims computes at every element,
    its index the domain's reshaped (``flatindex.reshapes``).  A vector along the domain's innermost dim (whose
    extent ``width`` divides) covers ``width`` consecutive flat positions from a multiple of ``width``: the same
    positions of the op -- inside one of its rows when ``width`` divides the op's innermost extent too, else across
    its rows in flat order (:data:`FLAT`: a tensor read at the op's own index is still one aligned vector)."""
    if state in (UNIFORM, SCATTER, FLAT) or not shape:
        return state
    if state[1] != rank - 1:
        return SCATTER
    return (CONTIG, len(shape) - 1) if shape[-1] % width == 0 else FLAT


def lane_reads(graph, ops, domain, width: int, flat: bool = False) -> list:
    """``(tensor, state, why)`` for every read of a tensor not computed by ``ops`` when the stage's
    domain elements are taken ``width`` at a time along the innermost dim (``flat``: along the flattened
    domain, across its rows: every read starts :data:`FLAT`)."""
    ops = set(ops)
    rank = len(domain)
    start = FLAT if flat and rank and width > 1 else \
        (CONTIG, rank - 1) if rank and width > 1 else UNIFORM if not rank else SCATTER
    seen, out, todo = set(), [], []
    for n in sorted(ops):           # in a fixed order: the first reason a read is reached by is the one it keeps
        node = graph[n]
        if tuple(node.shape) == tuple(domain):
            todo.append((n, start, ""))
        elif node.op != "reduce" and reshapes(domain, node.shape):      # computed at every element, reshaped
            todo.append((n, reshaped_state(start, node.shape, width, rank), ""))
        elif node.op == "reduce":           # a row stage: the reduced values are read at the domain's index
            half = len(node.operands) // 2
            todo.extend((o.name, start if i < half else UNIFORM, "") for i, o in enumerate(node.operands))
    while todo:
        n, st, why = todo.pop()
        if (n, st) in seen:
            continue
        seen.add((n, st))
        node = graph[n]
        if n not in ops:
            if node.op == "constant" and node.rank == 0:
                continue
            out.append((n, st, why))
            continue
        if node.opdef.is_view:
            nst, nwhy = through(node, st, width)
            todo.append((node.operands[0].name, nst, nwhy or why))
        elif node.op in ("copy", "convert") or node.kind == "elementwise":
            for o in node.operands:
                todo.append((o.name, UNIFORM if o.rank == 0 else st, why))
        elif node.op == "iota":
            continue
        else:
            for o in node.operands:
                todo.append((o.name, SCATTER, f"{o.name} is read through {node.op}"))
    return sorted(out, key=lambda r: (r[0], str(r[1])))


def accessed_dtypes(graph, ops, domain, stored, on_chip=(), flat: bool = False) -> set:
    """The dtypes of the tensors a stage stores (``stored``) or reads contiguously along its vectors from
    global memory (not ``on_chip``: values it reads from registers): what the vector width is sized by.
    ``flat``: the vectors run across rows (:func:`flat_order`), which reads more tensors as vectors (through
    a reshape or a unit-dim broadcast) than vectors inside rows do."""
    names = list(stored) + [n for n, st, _ in lane_reads(graph, ops, domain, 2, flat=flat)
                            if st not in (UNIFORM, SCATTER) and n not in on_chip]
    return {graph[n].dtype for n in names}


def widest(graph, ops, domain, stored, on_chip=(), flat: bool = False) -> tuple:
    """``(vector, why)``: the widest vector the dtypes a stage accesses contiguously allow
    (:data:`VECTOR_BYTES` for the widest of them), before any extent is asked; 1 and why where none."""
    if not domain:
        return 1, "a scalar domain"
    dtypes = accessed_dtypes(graph, ops, domain, stored, on_chip, flat=flat)
    if not dtypes:
        return 1, "nothing read or written contiguously"
    if dtypes & set(SCALAR_DTYPES):
        return 1, "pred tensors are accessed one element at a time"
    return min(MAX_VECTOR, VECTOR_BYTES // max(itemsize(d) for d in dtypes)), ""


def choose_width(graph, ops, domain, stored, on_chip=()) -> tuple:
    """``(vector, why)``: the widest vector (at most :data:`VECTOR_BYTES` for every tensor it covers)
    that divides the innermost extent; ``stored`` are the tensors the stage writes, ``on_chip`` the values
    it reads from registers (not memory accesses: they do not size the vector)."""
    want, why = widest(graph, ops, domain, stored, on_chip)
    if want == 1:
        return 1, why
    width, inner = want, domain[-1]
    while width > 1 and inner % width:
        width //= 2
    if width == 1:
        return 1, f"innermost extent {inner} is odd: scalar accesses"
    whys = [w for _, st, w in lane_reads(graph, ops, domain, width) if st == SCATTER and w]
    words = [f"{width}-element vectors: innermost extent {inner} is not a multiple of {want}"] if width < want else []
    if whys:
        words.append("scalar loads where " + "; ".join(sorted(set(whys))))
    return width, "; ".join(words)


def flat_order(graph, ops, domain, stored, width: int) -> str:
    """Why a stage's vectors of ``width`` cannot run across its rows in flat order, or "" where they can:
    every tensor it reads or writes (``stored``) is at the domain's own flat index (:data:`FLAT` through
    every view, or a scalar read uniformly), row-major, and every op is elementwise or a view: none reads
    the index itself (iota), picks a branch by it (concatenate, pad) or folds elements together (a reduce)."""
    for n in ops:
        node = graph[n]
        if not (node.kind == "elementwise" or node.opdef.is_view or node.op == "constant"):
            return f"{n} ({node.op}) depends on where an element sits in its row"
    reads = lane_reads(graph, ops, domain, width, flat=True)
    for n, st, why in reads:
        if st == SCATTER:
            return why or f"{n} is not read at the domain's flat index"
        if st == UNIFORM and graph[n].rank:
            return f"{n} is read once per vector, not at the domain's flat index"
    for n in [n for n, st, _ in reads if st == FLAT] + list(stored):
        if not graph[n].row_major:
            return f"{n} is not laid out row-major"
    return ""


def stages_width(graph, stages, m, stored, on_chip) -> tuple:
    """``(width, whys)``: the widest vector every one of ``stages`` (sharing mapping ``m``) allows, and the
    stages' reasons; ``on_chip`` values (read from registers) not counted."""
    width, whys = None, []
    for s in stages:
        w, why = choose_width(graph, s.ops, m.domain, [n for n in stored if n in s.ops],
                              on_chip=set(on_chip) - set(s.ops))
        if why:
            whys.append(why)
        width = w if width is None else min(width, w)
    return width, whys


def stages_vector_bytes(graph, stages, stored, on_chip=()) -> int:
    """Bytes of the widest element ``stages`` access in vectors (what the vector width was sized by, so
    that ``width x bytes`` is the widest access: 128 bits at most)."""
    dtypes = set().union(*(accessed_dtypes(graph, s.ops, s.mapping.domain, [n for n in stored if n in s.ops],
                                           set(on_chip) - set(s.ops)) for s in stages))
    return max((itemsize(d) for d in dtypes), default=4)


def vectorize(graph, stages, gpu, stored) -> None:
    """Give a single-stage flat kernel its vector width, elements per thread and a full block (in place);
    row stages get theirs from :func:`~astitch_sim.plan.row_vectors.vectorize_rows`.

    Several flat stages share one launch shape (and register arrays indexed by iteration): they
    keep one element per thread, and the mapping says so."""
    flat = [s for s in stages if s.mapping.kind == "flat"]
    if not flat:
        return
    if len(stages) > 1:
        made = {}
        for s in flat:
            if id(s.mapping) not in made:
                made[id(s.mapping)] = replace(s.mapping, vector_why=STITCHED)
            s.mapping = made[id(s.mapping)]
        return
    st = stages[0]
    m = st.mapping
    size = m.size
    mine = [n for n in stored if n in st.ops]
    width, why = choose_width(graph, st.ops, m.domain, mine)
    want, _ = widest(graph, st.ops, m.domain, mine, flat=True)    # sized by every tensor flat order reads
    tried = want > width and size >= want       # a wider vector, and at least one whole one
    blocked = flat_order(graph, st.ops, m.domain, mine, want) if tried else ""
    across = tried and not blocked
    if blocked:
        why = f"{why}; not across rows in flat order: {blocked}"
    if across:
        tail = size % want
        width, why = want, (f"innermost extent {m.domain[-1]} is not a multiple of {want}, but every tensor is "
                            "read and written at the domain's flat index" + (f" ({tail} left over)" if tail else ""))
    block = min(max(m.block, MIN_BLOCK) if size > m.block else m.block, gpu.max_threads_per_block)
    wave = gpu.blocks_per_wave(block, 0, 32)
    unroll = 1
    while unroll < MAX_UNROLL and ceil(size / (block * width * unroll * 2)) >= wave:
        unroll *= 2
    per_thread = width * unroll
    need = max(1, ceil(size / (block * per_thread)))
    cap = max(1, (m.grid * m.block) // block) if m.task_iterations > 1 else need   # a capped grid stays capped
    st.mapping = replace(m, block=block, grid=min(need, cap), per_thread=per_thread, vector=width, vector_why=why,
                         flat_vectors=across)
