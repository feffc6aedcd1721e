"""AStitch: stitch a whole memory-intensive subgraph into one kernel (ASPLOS'22, section 4-5).

The pass, per memory-intensive cluster (the ops between matrix products):

1. **Scope.**  Each cluster becomes one "stitch op" -- one kernel.  Clusters that
   do not depend on each other are merged ("remote stitching") as long as no
   cycle through a matrix product results.
2. **Dominant identification.**  Candidates: reduces, expensive elementwise ops
   whose result is broadcast, and the values that leave the kernel.  Everything
   else is Local (fused through registers).
3. **Dominant merging.**  A candidate reached from a reduce's result only through
   Local elementwise ops of the reduced shape joins that reduce's group as a
   sub-dominant (it runs in the group's *epilogue*, once per reduced row).
   A candidate over the same domain as an earlier group that does not need that
   group's results joins it too; sibling reduces of one domain share a group.
4. **Schedule propagation / adaptive thread mapping.**  Reduce-led groups get
   row mappings with horizontal packing (short rows share a block), task
   splitting (few long rows: split over blocks when rows < blocks per wave and a
   row is longer than 1024) or column mappings; elementwise groups *adapt
   proactively*: they take the mapping of an earlier group over the same domain,
   so the data they read was produced by their own block (Regional) or thread
   (registers).
5. **Finalisation.**  The block-locality check (kernel_builder) decides Regional
   or Global per value; Global needs a grid barrier, which needs every block
   resident: the grid is capped at one wave (vertical packing) whenever the
   kernel has one.
6. **Memory.**  Regional buffers share space when their lifetimes do not overlap;
   if shared memory exceeds the per-block budget, Regional values are demoted to
   Global one at a time (largest first) until it fits.
7. **Launch ("assume-relax-apply").**  Assume 1024-thread blocks and 32
   registers per thread, compute blocks per wave with the planned shared memory,
   then relax the register cap to the most that keeps that wave count.

Where we simplify the paper (documented, not hidden): blocks are capped at one
wave only when a grid barrier needs it (otherwise the hardware dispatches the
extra blocks itself); a Local op needed by two groups that map its element to
different threads is recomputed (cheap) or stored globally (expensive).
"""
from __future__ import annotations

from math import ceil

from ..errors import AStitchError
from ..analysis import ancestors, classify_reduce, is_compute, is_expensive, is_free, is_one_to_many_producer, \
    memory_clusters
from ..kernel_builder import assemble_kernel, task_shape
from ..mapping import ThreadMapping
from ..plan import Plan, Stage
from .common import column_mapping, has_atomic, library_kernel, next_pow2, prev_pow2

BLOCK = 1024                 # "assume": 1024 threads per block
ASSUMED_REGISTERS = 32       # "assume": 32 registers per thread


def _depends_on(graph, node, targets: set, cache: dict) -> bool:
    return bool(ancestors(node, cache) & targets)


class _Group:
    """An op group under construction: dominant, members, how its mapping is made."""

    def __init__(self, dominant, kind, domain, groups, reducer_node=None, adopt=None):
        self.dominant, self.kind, self.domain, self.groups = dominant, kind, tuple(domain), groups
        self.reducer_node, self.adopt = reducer_node, adopt
        self.ops: list = []
        self.epilogue: list = []
        self.splits = 1

    @property
    def reduces(self):
        return [n for n in self.ops if n.op == "reduce"]


def _row_threads(cols: int, block: int = BLOCK) -> int:
    """Threads per row: a power of two no wider than the row (at least a warp unless the row is tiny)."""
    if cols >= 32:
        return min(block, prev_pow2(cols))
    return min(block, next_pow2(cols))


def _block_size(groups) -> int:
    """Assume 1024 threads per block -- unless the whole problem has fewer elements (tiny shapes)."""
    biggest = max(_size(gr.domain) for gr in groups)
    return min(BLOCK, max(32, next_pow2(biggest)))


def _size(shape) -> int:
    n = 1
    for s in shape:
        n *= s
    return n


def _natural_blocks(gr: _Group, gpu, wave: int, block: int) -> int:
    if gr.adopt is not None:
        return 0
    if gr.kind == "rows":
        probe = ThreadMapping("rows", gr.domain, gr.groups, block=block, grid=1, threads_per_row=1)
        rows, cols = probe.rows, probe.cols
        rpb = block // _row_threads(cols, block)
        # task splitting: few long rows -> spread each row over several blocks (the paper's rule)
        if gr.reducer_node is not None and rows < wave and cols > block:
            gr.splits = prev_pow2(max(1, min(wave // max(rows, 1), ceil(cols / block))))
        return ceil(rows / rpb) * gr.splits
    if gr.kind == "columns":
        m = column_mapping(gr.reducer_node, gpu, block, wave, _combine(gr.reducer_node))
        gr.splits = m.splits
        return m.grid
    return ceil(_size(gr.domain) / block)


def _combine(node) -> str:
    """Split partials meet through atomics where the type has them, else through global scratch and a grid barrier."""
    return "atomic" if has_atomic(node) else "grid_barrier"


def _mapping(gr: _Group, grid: int, made: dict, block: int) -> ThreadMapping:
    if gr.adopt is not None:
        return made[id(gr.adopt)]
    if gr.kind == "rows":
        probe = ThreadMapping("rows", gr.domain, gr.groups, block=block, grid=1, threads_per_row=1)
        combine = _combine(gr.reducer_node) if gr.splits > 1 else "none"
        return ThreadMapping("rows", gr.domain, gr.groups, block=block, grid=grid,
                             threads_per_row=_row_threads(probe.cols, block), splits=gr.splits, combine=combine)
    if gr.kind == "columns":
        return ThreadMapping("columns", gr.domain, gr.groups, block=block, grid=grid, threads_per_row=min(32, block),
                             splits=gr.splits, combine=_combine(gr.reducer_node) if gr.splits > 1 else "none")
    return ThreadMapping("flat", gr.domain, gr.groups, block=block, grid=grid)


def _groups_for(graph, names: set, escapes: set) -> list:
    """Steps 2-4: candidates, dominant merging, Local ops; returns op groups in order."""
    order = [n for n in graph if n.name in names]
    cands = [n for n in order if n.op == "reduce" or n.name in escapes
             or (is_one_to_many_producer(n) and any(u.name in names for u in n.users))]
    cand_names = {n.name for n in cands}
    groups: list[_Group] = []
    home: dict = {}            # node name -> group that computes it (first copy)
    cache: dict = {}

    def local_ops(root, gr):
        """Producers of ``root`` fused into ``gr`` through registers (recomputing cheap ones when needed)."""
        out, seen = [], set()

        def visit(x):
            for o in x.operands:
                if o.name in seen or o.name not in names or o.op in ("parameter", "constant") or is_compute(o):
                    continue
                seen.add(o.name)
                if o.name in home:
                    owner = home[o.name]
                    same_map = (owner is gr or (owner.domain == gr.domain and _same_mapping(owner, gr)))
                    whole = tuple(o.shape) == owner.domain   # computed at every element of its stage
                    if owner is gr or (same_map and tuple(o.shape) == gr.domain) or o.op == "reduce" \
                            or o in owner.epilogue or (whole and (is_expensive(o) or o.name in cand_names)):
                        continue      # read its value: registers, shared or global (kernel_builder decides)
                    visit(o)          # cheap, or only computed at some elements over there: recompute it here
                    out.append(o)
                    continue
                if o.name in cand_names:
                    continue
                visit(o)
                out.append(o)
                home[o.name] = gr
        visit(root)
        return out

    def joinable(gr, d):
        """``d`` may join ``gr`` only if it reads nothing computed by a later group."""
        later = {n for g in groups[groups.index(gr) + 1:] for n in list(g.ops) + list(g.epilogue)}
        return not _depends_on(graph, d, {n.name for n in later}, cache)

    for d in cands:
        if d.name in home:
            continue
        if d.op == "reduce":
            gr = _sibling_group(graph, groups, d, cache)
            if gr is not None and not joinable(gr, d):
                gr = None
            if gr is None:
                rs = classify_reduce(d)
                gr = _Group(d, "rows" if rs.kind == "row" else "columns", d.operands[0].shape, rs.groups, d)
                groups.append(gr)
            gr.ops.extend(local_ops(d, gr))
            gr.ops.append(d)
            home[d.name] = gr
            _absorb_epilogue(graph, gr, names, home, cand_names, joinable)
            continue
        epi = _epilogue_merge(graph, groups, d, names, home)
        if epi is not None and not joinable(epi[0], d):
            epi = None
        if epi is not None:
            gr, members = epi
            gr.epilogue.extend(members)
            for m in members:
                home[m.name] = gr
            continue
        gr = _elementwise_group(graph, groups, d, cache)
        if gr in groups and not joinable(gr, d):
            base = gr.adopt or gr
            gr = _Group(d, base.kind, gr.domain, base.groups, adopt=base)
        if gr not in groups:
            groups.append(gr)
        gr.ops.extend(local_ops(d, gr))
        gr.ops.append(d)
        home[d.name] = gr
    return groups


def _same_mapping(a: _Group, b: _Group) -> bool:
    root_a = a.adopt or a
    root_b = b.adopt or b
    return root_a is root_b


def _sibling_group(graph, groups, d, cache):
    """A group with a reduce over the same domain and dims that ``d`` does not depend on."""
    for gr in groups:
        if gr.adopt is not None or not gr.reduces:
            continue
        r0 = gr.reduces[0]
        if (r0.operands[0].shape == d.operands[0].shape and r0.attrs["dimensions"] == d.attrs["dimensions"]
                and r0.operands[0].layout == d.operands[0].layout
                and not _depends_on(graph, d, {n.name for n in gr.ops} | {n.name for n in gr.epilogue}, cache)):
            return gr
    return None


def _epilogue_merge(graph, groups, d, names, home):
    """Dominant merging: ``d`` reached from a reduce group's results through Local ops of the reduced shape."""
    for gr in reversed(groups):
        if not gr.reduces or gr.adopt is not None:
            continue
        tshape = gr.reduces[0].shape
        if tuple(d.shape) != tuple(tshape):
            continue
        mine = {n.name for n in gr.reduces} | {n.name for n in gr.epilogue}
        members, ok, touches = [], True, False
        seen = set()

        def visit(x):
            nonlocal ok, touches
            for o in x.operands:
                if o.name in seen or not ok:
                    continue
                seen.add(o.name)
                if o.name in mine:
                    touches = True
                elif o.op in ("parameter", "constant") or o.name not in names or o.name in home or is_compute(o):
                    if o.rank and tuple(o.shape) != tuple(tshape):
                        ok = False
                elif o.kind in ("elementwise",) or (o.op == "broadcast" and o.operands[0].rank == 0) \
                        or (o.op in ("reshape", "bitcast") and tuple(o.shape) == tuple(tshape)):
                    if o.rank and tuple(o.shape) != tuple(tshape):
                        ok = False
                        continue
                    visit(o)
                    members.append(o)
                else:
                    ok = False
        if d.kind != "elementwise":
            continue
        visit(d)
        if ok and touches:
            return gr, members + [d]
    return None


def _absorb_epilogue(graph, gr, names, home, cand_names, joinable):
    """Local ops on a reduce's result (``mean = sum * 1/n``) run once per row in the group's epilogue.

    Only ops that read nothing a *later* group computes: a reduce that joined an earlier group as a
    sibling must not pull in an op that also reads a later group's result (that value does not exist
    yet when this group's epilogue runs)."""
    work = list(gr.reduces) + list(gr.epilogue)
    while work:
        x = work.pop(0)
        for u in x.users:
            if u.name not in names or u.name in home or u.name in cand_names or u.kind != "elementwise":
                continue
            if not joinable(gr, u):
                continue
            merged = _epilogue_merge(graph, [gr], u, names, home)
            if merged is not None:
                for m in merged[1]:
                    if m.name not in home:
                        gr.epilogue.append(m)
                        home[m.name] = gr
                        work.append(m)


def _elementwise_group(graph, groups, d, cache):
    """An elementwise dominant adapts to an earlier group over the same domain (proactive adaptation)."""
    for gr in reversed(groups):
        if gr.domain != tuple(d.shape):
            continue
        results = {n.name for n in gr.reduces} | {n.name for n in gr.epilogue}
        base = gr.adopt or gr
        if not gr.reduces and not gr.epilogue and not _depends_on(graph, d, results, cache):
            return gr                                   # same domain, no barrier needed: one group
        new = _Group(d, base.kind, gr.domain, base.groups, adopt=base)
        return new
    return _Group(d, "flat", d.shape, (tuple(range(len(d.shape))),))


def _build_kernel(graph, gpu, names: set, escapes: set, index: int):
    groups = _groups_for(graph, names, escapes)
    block = _block_size(groups)
    wave = gpu.blocks_per_wave(block, 0, ASSUMED_REGISTERS)
    natural = max(_natural_blocks(gr, gpu, wave, block) for gr in groups)
    max_split = max(gr.splits for gr in groups)
    force_global: set = set()
    cap = None
    notes = []
    for _ in range(64):
        grid = natural if cap is None else min(natural, cap)
        grid = max(max_split, grid // max_split * max_split)
        made: dict = {}
        stages = []
        for gr in groups:
            m = _mapping(gr, grid, made, block)
            made[id(gr)] = m
            ops = [n.name for n in gr.ops]
            stages.append(Stage(dominant=gr.dominant.name, ops=ops, mapping=m,
                                epilogue=[n.name for n in gr.epilogue]))
        k = assemble_kernel(graph, f"stitch.{index}:{groups[-1].dominant.name}", stages, gpu, escapes,
                            stitch=True, force_global=force_global, notes=list(notes))
        budget = gpu.shared_per_block_default
        if k.shared_bytes > budget:
            regional = sorted((v for v in k.values.values() if v.space == "shared"), key=lambda v: -v.nbytes)
            if regional:
                force_global.add(regional[0].node)
                notes.append(f"shared memory over the {budget // 1024} KiB budget: {regional[0].node} "
                             "demoted Regional -> Global")
                continue
        base_wave = gpu.blocks_per_wave(block, k.shared_bytes, ASSUMED_REGISTERS)
        if k.global_barriers and k.grid > base_wave:
            cap = base_wave
            if not any("vertical packing" in n for n in notes):
                notes.append(f"grid barrier: grid capped at one wave ({base_wave} blocks) by vertical packing")
            continue
        relaxed = ASSUMED_REGISTERS
        for r in range(ASSUMED_REGISTERS, gpu.max_registers_per_thread + 1, 8):
            try:
                if gpu.blocks_per_wave(block, k.shared_bytes, r) != base_wave:
                    break
            except AStitchError:      # no block fits any more
                break
            relaxed = r
        k.registers_per_thread = relaxed
        k.notes.append(f"assume-relax-apply: {block} threads, {ASSUMED_REGISTERS} regs -> {base_wave} blocks per "
                       f"wave; register cap relaxed to {relaxed}")
        return k
    raise AssertionError("astitch: launch configuration did not settle")


def _remote_stitch(graph, clusters: list) -> list:
    """Merge clusters that do not depend on each other (no cycle through a matrix product)."""
    cache: dict = {}

    def depends(a: set, b: set) -> bool:
        return any(ancestors(graph[x], cache) & b for x in a)

    merged: list[set] = []
    for c in clusters:
        names = {n.name for n in c}
        for m in merged:
            if not depends(names, m) and not depends(m, names):
                m |= names
                break
        else:
            merged.append(names)
    return merged


def astitch_plan(graph, gpu) -> Plan:
    position = {n.name: i for i, n in enumerate(graph)}
    clusters = sorted(memory_clusters(graph), key=lambda c: min(position[n.name] for n in c))
    scopes = _remote_stitch(graph, clusters)
    dots = [n for n in graph.live_nodes() if is_compute(n)]
    outputs = {o.name for o in graph.outputs}
    units = [("stitch", s) for s in scopes] + [("library", {d.name}) for d in dots]

    def deps(unit):
        return {o.name for n in unit[1] for o in graph[n].operands if o.name not in unit[1]}

    owner = {n: i for i, u in enumerate(units) for n in u[1]}
    ordered, done = [], set()
    while len(ordered) < len(units):
        progressed = False
        for i, u in enumerate(units):
            if i in done:
                continue
            if all(owner.get(d, i) in done or owner.get(d) is None or owner.get(d) == i for d in deps(u)):
                ordered.append(u)
                done.add(i)
                progressed = True
        if not progressed:      # pragma: no cover - remote stitching never makes cycles
            raise AssertionError("astitch: kernels depend on each other in a cycle")
    kernels = []
    for kind, names in ordered:
        if kind == "library":
            kernels.append(library_kernel(graph, graph[next(iter(names))], len(kernels)))
            continue
        escapes = {n for n in names if n in outputs or any(u.name not in names for u in graph[n].users)}
        escapes = {n for n in escapes if graph[n].op not in ("parameter", "constant")}
        kernels.append(_build_kernel(graph, gpu, names, escapes, len(kernels)))
    notes = [f"astitch: {len(scopes)} stitch scope(s) from {len(clusters)} memory-intensive cluster(s), "
             f"{len(dots)} library kernel(s)"]
    return Plan(graph, "astitch", gpu, kernels, notes)
