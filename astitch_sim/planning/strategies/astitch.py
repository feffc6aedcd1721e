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
   group's results joins it too; sibling reduces of one domain share a group
   (group norm's sum and sum of squares: one stage, the input read once for both).
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
6. **Memory.**  Hierarchical data reuse: a value -- computed, or an input a thread
   loaded -- that a later stage reads at the same elements under the same mapping
   stays in registers, within a per-thread budget (over it, the input is read again
   and the kernel's notes say so).  Regional buffers share space when their lifetimes do not overlap;
   if shared memory exceeds the per-block budget, Regional values are demoted to
   Global one at a time (largest first) until it fits.
7. **Launch ("assume-relax-apply").**  Assume 1024-thread blocks and 32
   registers per thread (``assumed_registers``; more when
   ``gpu_backend.apply_compiler`` re-plans with ptxas's count, and then smaller
   blocks if 1024 threads cannot hold them), compute blocks per wave with the
   planned shared memory, then relax the register cap to the most that keeps
   that wave count.  A kernel that stitches nothing (one stage, no grid
   barrier: a loop kernel launched as XLA launches it) has nothing resting on
   the assumed wave and keeps the registers its code needs, as every
   strategy's kernel does: the same kernel gets the same registers, occupancy
   and predicted time whichever strategy made it.
   **Launch search** (:mod:`.astitch_launch`, not the paper's): the rules'
   launch is then priced against the same kernel at other block sizes and
   without task splitting, and a scope with grid barriers against the scope cut
   at them; the fastest is kept (by the static cost model FusionStitching's
   search uses, moving no more global bytes than the rules' launch or XLA's
   kernels for the scope's ops), and the kernel's notes list every
   candidate's predicted time.  ``launch_search=False``: the rules alone.
8. **Never behind XLA** (:mod:`.never_behind`).  Each stitch scope is priced
   against XLA's kernels for the same ops; where stitching would move more
   global bytes, take longer or launch more kernels, the scope cut at a stage
   boundary is priced (:mod:`.astitch_cuts`, the best stitch inside the scope;
   not the paper's) and the fastest cut never-behind admits is used, else XLA's
   kernels, and the plan's notes say why.  Only with the paper's decisions:
   under a what-if switch the raw stitch plan is shown (``launch_search=False``:
   never-behind without cut plans).

What-if switches (``asim.compile(g, "astitch", gpu, **options)``, see
:mod:`.options`): each step above that is a *decision* can be switched off --
horizontal packing, vertical packing, task splitting, Regional and Global
stitching, register reuse -- and the block size capped.  Without Global
stitching (or when a grid barrier would need vertical packing that is off) a
stitch scope becomes several kernels: it is cut before the first stage that
would read a Global value, and each part is planned again on its own.

Where we simplify the paper (documented, not hidden): blocks are capped at one
wave only when a grid barrier needs it (otherwise the hardware dispatches the
extra blocks itself); a Local op needed by two groups that map its element to
different threads is recomputed (cheap) or stored globally (expensive).
"""
from __future__ import annotations

from copy import copy, deepcopy
from dataclasses import replace
from math import ceil

from ...errors import AStitchError
from ...passes.analysis import VIEW_OPS, ancestors, boundary_source, classify_reduce, is_boundary, is_expensive, \
    is_one_to_many_producer, is_rematerialisable, is_scalar_of_inputs, memory_clusters, read_directly, \
    with_rematerialised
from ...plan.boundary import library_groups
from ...ir.reducers import has_atomic, reducer
from ...ir.flatindex import reshapes
from ...ir.graph import shape_str
from ..kernel_builder import assemble_kernel
from ...plan.mapping import ThreadMapping, lanes_contiguous
from ...plan.plan import Kernel, Plan, Stage
from ...plan.kernel_end import EndRule
from .astitch_ends import record_scope_ends
from .astitch_cuts import rule_launch, scope_cuts
from .astitch_launch import Launch, Search, choose_cut, choose_launch, xla_scope_bytes
from .never_behind import NOTE_PREFIX as NEVER_BEHIND_NOTE, keep_xla_where_cheaper, xla_partition
from .common import LOOP_BLOCK, column_mapping, dependency_order, in_passes, library_kernel, max_reduction_slots, next_pow2, prev_pow2, reduction_values
from .options import AStitchOptions
from ...plan.vocabulary import Barrier, Combine, Space

BLOCK = 1024                 # "assume": 1024 threads per block


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


def _block_size(groups, opts: AStitchOptions, gpu) -> int:
    """Assume 1024 threads per block (or the what-if cap) -- unless the whole problem has fewer elements,
    or the kernel reduces nothing (then XLA's loop block, :data:`~.common.LOOP_BLOCK` threads), or a block
    that big could not hold the assumed registers on one SM (then the largest one that can).

    Without horizontal packing a block is as wide as the widest row: one row per block."""
    cap = min(BLOCK, opts.max_block_threads, _largest_block(gpu, opts.assumed_registers))
    rows = [_row_cols(gr.adopt or gr) for gr in groups if (gr.adopt or gr).kind == "rows"]
    if not opts.horizontal_packing and rows:
        return min(cap, max(32, max(_row_threads(c, cap) for c in rows)))
    if all((gr.adopt or gr).kind == "flat" for gr in groups):
        # nothing to reduce: a loop over elements, launched as XLA launches one (never behind it)
        return min(cap, LOOP_BLOCK)
    biggest = max(_size(gr.domain) for gr in groups)
    return min(cap, max(32, next_pow2(biggest)))


def _largest_block(gpu, registers: int) -> int:
    """The most threads (a power of two) a block may have when each uses ``registers`` registers: with
    the paper's 32, 1024; assume-relax-apply's re-plan may assume more (``gpu_backend.apply_compiler``)."""
    block = BLOCK
    while block > 32:
        try:
            gpu.blocks_per_wave(block, 0, registers)
            return block
        except AStitchError:          # no block this big fits on an SM with these registers
            block //= 2
    return block


def _row_cols(gr) -> int:
    return ThreadMapping("rows", gr.domain, gr.groups, block=1, grid=1, threads_per_row=1).cols


def _may_split(gr, opts: AStitchOptions) -> bool:
    """Task splitting is on, and (without Global stitching) needs no grid barrier: an atomic
    combine whose result no epilogue of the same stage reads."""
    if not opts.task_splitting or not _splittable(gr):
        return False
    return opts.global_stitching or (_combine(gr) is Combine.ATOMIC and not gr.epilogue)


def _size(shape) -> int:
    n = 1
    for s in shape:
        n *= s
    return n


def _natural_blocks(gr: _Group, gpu, wave: int, block: int, opts: AStitchOptions, present=()) -> int:
    if gr.adopt is not None:
        if gr.adopt in present:
            return 0
        return _natural_blocks(gr.adopt, gpu, wave, block, opts)   # its base is in an earlier kernel
    if gr.kind == "rows":
        probe = ThreadMapping("rows", gr.domain, gr.groups, block=block, grid=1, threads_per_row=1)
        rows, cols = probe.rows, probe.cols
        rpb = block // _threads_per_row(cols, block, opts)
        # task splitting: few long rows -> spread each row over several blocks (the paper's rule)
        gr.splits = 1
        if gr.reducer_node is not None and rows < wave and cols > block and _may_split(gr, opts):
            gr.splits = prev_pow2(max(1, min(wave // max(rows, 1), ceil(cols / block))))
        return ceil(rows / rpb) * gr.splits
    if gr.kind == "columns":
        fill = wave if _may_split(gr, opts) else 1
        m = column_mapping(gr.reducer_node, gpu, block, fill, _combine(gr))
        gr.splits = m.splits
        return m.grid
    return ceil(_size(gr.domain) / block)


def _threads_per_row(cols: int, block: int, opts: AStitchOptions) -> int:
    """Horizontal packing gives a row a power of two of threads (several rows per block); without it, the block."""
    return _row_threads(cols, block) if opts.horizontal_packing else block


def _splittable(gr: _Group) -> bool:
    """May the group's tasks be split over blocks? Not if one of its reduces is an argmax/argmin."""
    return all(reducer(r).splittable for r in gr.reduces) if gr.reduces else reducer(gr.reducer_node).splittable


def _combine(gr: _Group) -> Combine:
    """Split partials meet by atomics if every reduce of the group has one, else through a grid barrier."""
    nodes = gr.reduces or [gr.reducer_node]
    return Combine.ATOMIC if all(has_atomic(r) for r in nodes) else Combine.GRID_BARRIER


def _mapping(gr: _Group, grid: int, made: dict, block: int, opts: AStitchOptions) -> ThreadMapping:
    if gr.adopt is not None:
        if id(gr.adopt) not in made:       # its base is in an earlier kernel: make the same mapping here
            made[id(gr.adopt)] = _mapping(gr.adopt, grid, made, block, opts)
        return made[id(gr.adopt)]
    if gr.kind == "rows":
        probe = ThreadMapping("rows", gr.domain, gr.groups, block=block, grid=1, threads_per_row=1)
        combine = _combine(gr) if gr.splits > 1 else Combine.NONE
        return ThreadMapping("rows", gr.domain, gr.groups, block=block, grid=grid,
                             threads_per_row=_threads_per_row(probe.cols, block, opts), splits=gr.splits,
                             combine=combine)
    if gr.kind == "columns":
        return ThreadMapping("columns", gr.domain, gr.groups, block=block, grid=grid, threads_per_row=min(32, block),
                             splits=gr.splits, combine=_combine(gr) if gr.splits > 1 else Combine.NONE)
    return ThreadMapping("flat", gr.domain, gr.groups, block=block, grid=grid)


def _groups_for(graph, names: set, escapes: set, max_slots: int = 1 << 30) -> list:
    """Steps 2-4: candidates, dominant merging, Local ops; returns op groups in order.

    Each candidate dominant (a reduce, an output, a one-to-many producer), in graph order, lands in
    exactly one of three places: a reduce joins a sibling reduce's group or starts its own; anything
    else joins a group as its epilogue (it runs once per reduction task), or joins (or starts) an
    elementwise group over its own domain.  Each brings its Local ops along."""
    b = _GroupBuilder(graph, names, escapes, max_slots)
    for d in b.candidates:
        if d.name in b.home:
            continue                  # already computed as a Local op or an epilogue of a group
        if d.op == "reduce":
            b.add_reduce(d)
        elif not b.join_as_epilogue(d):
            b.add_elementwise(d)
    return b.groups


def dominant_candidates(graph, names, escapes) -> list:
    """Step 2, dominant identification: the names of a stitch scope's candidate dominants, in graph order.

    A candidate is a reduce, a value that leaves the scope (``escapes``: a graph output or read by another
    kernel), or an expensive elementwise op whose result is broadcast to a user in the scope (the paper's
    one-to-many pattern: recomputing it per broadcast element would cost more than storing it).  Every other
    op of the scope is Local: fused through registers into a candidate's group.  Public (tutorial 8 has
    students write this rule and compares theirs with it on graphs they have not seen)."""
    names = set(names)
    return [n.name for n in graph if n.name in names and (
        n.op == "reduce" or n.name in escapes
        or (is_one_to_many_producer(n) and any(u.name in names for u in n.users)))]


class _GroupBuilder:
    """The op groups of one stitch scope as they grow, and where each node is computed."""

    def __init__(self, graph, names: set, escapes: set, max_slots: int):
        self.graph, self.names, self.max_slots = graph, names, max_slots
        self.candidates = [graph[n] for n in dominant_candidates(graph, names, escapes)]
        self.cand_names = {n.name for n in self.candidates}
        self.groups: list[_Group] = []
        self.home: dict = {}            # node name -> group that computes it (first copy)
        self.cache: dict = {}

    def local_ops(self, root, gr) -> list:
        """Producers of ``root`` fused into ``gr`` through registers (recomputing cheap ones when needed)."""
        names, home, cand_names = self.names, self.home, self.cand_names
        out, seen = [], set()

        def visit(x):
            for o in x.operands:
                if o.name in seen or o.name not in names or o.op in ("parameter", "constant") or is_boundary(o):
                    continue
                seen.add(o.name)
                if o.name in home:
                    owner = home[o.name]
                    same_map = (owner is gr or (owner.domain == gr.domain and _same_mapping(owner, gr)))
                    # computed at every element of its stage: of its domain's shape, or the dominant of a stage
                    # over a view (the domain reshaped: its own index at each element; an op reached through a
                    # transpose there has the domain's size but not its elements' places)
                    whole = tuple(o.shape) == owner.domain or (o is owner.dominant and reshapes(owner.domain, o.shape))
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

    def joinable(self, gr, d) -> bool:
        """``d`` may join ``gr`` only if it reads nothing computed by a later group."""
        later = {n for g in self.groups[self.groups.index(gr) + 1:] for n in list(g.ops) + list(g.epilogue)}
        return not _depends_on(self.graph, d, {n.name for n in later}, self.cache)

    def _compute(self, d, gr) -> None:
        """``d`` and its Local ops go into ``gr``."""
        gr.ops.extend(self.local_ops(d, gr))
        gr.ops.append(d)
        self.home[d.name] = gr

    def add_reduce(self, d) -> None:
        """A reduce joins a sibling reduce's group (same input rows, same mapping), or starts its own."""
        gr = _sibling_group(self.graph, self.groups, d, self.cache, self.max_slots)
        if gr is not None and not self.joinable(gr, d):
            gr = None
        if gr is None:
            rs = classify_reduce(d)
            gr = _Group(d, "rows" if rs.kind == "row" else "columns", d.operands[0].shape, rs.groups, d)
            self.groups.append(gr)
        self._compute(d, gr)
        _absorb_epilogue(self.graph, gr, self.names, self.home, self.cand_names, self.joinable)

    def join_as_epilogue(self, d) -> bool:
        """A value over a group's reduction results runs once per task, after the reduces: True if it joined."""
        epi = _epilogue_merge(self.graph, self.groups, d, self.names, self.home)
        if epi is None or not self.joinable(epi[0], d):
            return False
        gr, members = epi
        for m in members:
            if m not in gr.epilogue:
                gr.epilogue.append(m)
            self.home.setdefault(m.name, gr)
        return True

    def add_elementwise(self, d) -> None:
        """Anything else joins an elementwise group over its domain (or starts one with the same mapping).

        ``d`` may read a value a group *after* that group computes (an embedding's gradient reads indices
        a later stage stores for a grid barrier).  Then, if no group in between reads what the elementwise
        group computes, the group moves down to run after them and ``d`` joins it: the two share one stage
        and load their common inputs once, as XLA's multi-output fusion computes siblings in one kernel
        (otherwise a gather and its twin each read the same table rows, in two stages)."""
        gr = _elementwise_group(self.graph, self.groups, d, self.cache)
        if gr in self.groups and not self.joinable(gr, d):
            if self.postponable(gr):
                self.groups.remove(gr)
                self.groups.append(gr)
            else:
                base = gr.adopt or gr
                gr = _Group(d, base.kind, gr.domain, base.groups, adopt=base)
        if gr not in self.groups:
            self.groups.append(gr)
        self._compute(d, gr)

    def postponable(self, gr) -> bool:
        """May elementwise group ``gr`` run after every later group?  Only if none of them reads a value
        ``gr`` computes (a Local op a later group recomputes itself is its own copy, not a read).  A group
        that reads ``gr`` indirectly reads another later group that reads ``gr``: checked there."""
        if gr.reduces or gr.epilogue:
            return False
        mine = {n.name for n in gr.ops}
        for later in self.groups[self.groups.index(gr) + 1:]:
            members = list(later.ops) + list(later.epilogue)
            own = {n.name for n in members}
            if any(o.name in mine and o.name not in own for n in members for o in n.operands):
                return False
        return True


def _same_mapping(a: _Group, b: _Group) -> bool:
    root_a = a.adopt or a
    root_b = b.adopt or b
    return root_a is root_b


def _sibling_group(graph, groups, d, cache, max_slots):
    """A group with a reduce over the same domain and dims that ``d`` does not depend on (and room for
    ``d``'s reduction tree in shared memory: :func:`~astitch_sim.planning.strategies.common.max_reduction_slots`).

    Sibling reductions (group norm's sum and sum of squares, a mean and a mean of squares) then run in
    one stage, as XLA's multi-output fusion runs them in one kernel: the input is read once for all of
    them.  ``d`` may read the group's *element* values (the shared ``reshape(x)`` both sums read, or
    ``x * x`` of the same ``x``): they exist at every element before any reduce folds them in.  Only
    the group's reduce results and its epilogue (per-task values, complete after the reduction) are
    out of reach for a sibling."""
    for gr in groups:
        if gr.adopt is not None or not gr.reduces:
            continue
        if sum(reduction_values(r) for r in gr.reduces) + reduction_values(d) > max_slots:
            continue
        r0 = gr.reduces[0]
        per_task = {n.name for n in gr.reduces} | {n.name for n in gr.epilogue}
        if (r0.operands[0].shape == d.operands[0].shape and r0.attrs["dimensions"] == d.attrs["dimensions"]
                and r0.operands[0].layout == d.operands[0].layout
                and not _depends_on(graph, d, per_task, cache)):
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
                if is_scalar_of_inputs(o) and o.name in names:     # recomputed per task, never stored
                    if o not in gr.epilogue:
                        visit(o)
                        members.append(o)
                elif o.name in mine:
                    touches = True
                elif o.op in ("parameter", "constant") or o.name not in names or o.name in home or is_boundary(o):
                    if o.rank and tuple(o.shape) != tuple(tshape):
                        ok = False
                elif o.kind in ("elementwise",) or (o.op == "broadcast" and o.operands[0].rank == 0) \
                        or (o.op in VIEW_OPS and tuple(o.shape) == tuple(tshape)):
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
                    if m not in gr.epilogue and (m.name not in home or is_scalar_of_inputs(m)):
                        gr.epilogue.append(m)
                        home.setdefault(m.name, gr)
                        work.append(m)


def _elementwise_group(graph, groups, d, cache):
    """An elementwise dominant adapts to an earlier group over the same domain (proactive adaptation), or over
    a domain it is a reshape of (``flatindex.reshapes``) whose lanes take neighbouring elements
    (:func:`~astitch_sim.plan.mapping.lanes_contiguous`): a PyTorch group norm's statistics over ``x`` viewed
    as ``[N, G, C/G * H * W]`` and its affine over ``[N, C, H, W]`` then share one mapping, and the threads that
    loaded ``x`` for the one still hold it for the other (not the paper's rule, which adopts equal domains
    only).  A strided mapping made for a reduction (a JAX NHWC group norm's columns over ``(n, g)``, 40 bytes
    apart) is not adopted: it would make the elementwise stage's loads and stores strided too."""
    for gr in reversed(groups):
        base = gr.adopt or gr
        if gr.domain != tuple(d.shape) and not (reshapes(gr.domain, d.shape)
                                                and lanes_contiguous(base.kind, gr.domain, base.groups)):
            continue
        results = {n.name for n in gr.reduces} | {n.name for n in gr.epilogue}
        if not gr.reduces and not gr.epilogue and not _depends_on(graph, d, results, cache):
            return gr                                   # same domain, no barrier needed: one group
        new = _Group(d, base.kind, gr.domain, base.groups, adopt=base)
        return new
    return _Group(d, "flat", d.shape, (tuple(range(len(d.shape))),))


class _GridExceedsWave(Exception):
    """Vertical packing is off and a kernel with a grid barrier has more blocks than one wave."""

    def __init__(self, grid: int, wave: int):
        super().__init__(grid, wave)
        self.grid, self.wave = grid, wave


def _build_kernels(graph, gpu, names: set, escapes: set, index: int, opts: AStitchOptions, xla_bytes=None,
                   cut_search: bool = False):
    """One stitch scope -> ``(kernels, cut_plans)``: one kernel (or several, where a what-if switch forbids Global
    stitching), and with ``cut_search`` a function giving the scope's best cut plans
    (:func:`.astitch_cuts.scope_cuts`, searched when first asked: the candidates never-behind prices besides the
    stitched kernels and XLA's, with the stitched kernels at the paper's launch where the launch search chose
    another, :func:`.astitch_cuts.rule_launch`; None without it).
    ``xla_bytes`` (names -> bytes, :func:`.astitch_launch.xla_scope_bytes`): the launch search's byte cap."""
    groups = _groups_for(graph, names, escapes, max_reduction_slots(gpu))
    cuts: list = []                       # why each kernel but the last ends (astitch_ends.py)
    no_global = "the what-if global_stitching=False"
    search = Search(xla_bytes(names) if xla_bytes else 0.0) if _searches(opts) else None
    try:
        kernels = _cut_into_kernels(graph, gpu, groups, names, escapes, index, opts, cuts, search)
        if search and any(k.global_barriers for k in kernels):
            def build(cut_at_barriers):
                cuts.clear()
                o = replace(opts, global_stitching=False) if cut_at_barriers else opts
                return _cut_into_kernels(graph, gpu, groups, names, escapes, index, o, cuts, search)
            kernels, why = choose_cut(graph, gpu, build, kernels)
            if why is not None:
                no_global = why
    except _GridExceedsWave as e:
        cuts.clear()
        no_global = f"vertical packing off: a grid barrier over {e.grid} blocks (> {e.wave} per wave) would deadlock"
        kernels = _cut_into_kernels(graph, gpu, groups, names, escapes, index,
                                    replace(opts, global_stitching=False), cuts)
        kernels[0].notes.insert(0, f"vertical packing off: a grid barrier over {e.grid} blocks (> {e.wave} per "
                                   "wave) would deadlock, so no Global stitching: the kernel ends at each "
                                   "Global value")
    record_scope_ends(graph, kernels, names, escapes, cuts, no_global)     # why each kernel ends (astitch_ends.py)
    if not (cut_search and search):
        return kernels, None

    moved: dict = {}                      # down -> the groups with those epilogues moved (kept alive: the
                                          # launch search's cache is keyed by the groups' ids)

    def build_cut(at, down=frozenset(), launches=False):
        """The cut plan; ``launches``: each kernel's launch searched (else the rules' launch: a quick price)."""
        if down not in moved:
            moved[down] = _epilogues_moved_down(groups, down, escapes)
        ends: list = []
        ks = _cut_into_kernels(graph, gpu, moved[down], names, escapes, index, opts, ends,
                               search if launches else None, at)
        record_scope_ends(graph, ks, names, escapes, ends, no_global)
        return ks
    movable = {j for j in range(1, len(groups)) if _movable_epilogue(groups, j, escapes)}
    found: list = []

    def cut_plans() -> list:
        """The scope's cut plans, searched on first call (never-behind asks only for parts it would otherwise
        hand to XLA's kernels)."""
        if not found:
            found.append(scope_cuts(graph, gpu, groups, kernels, build_cut, search.byte_cap, movable)
                         + rule_launch(graph, gpu, kernels, build_cut))
        return found[0]
    return kernels, cut_plans


def _movable_epilogue(groups: list, j: int, escapes: set) -> list:
    """The epilogue ops of ``groups[j - 1]`` that only the ops of ``groups[j]``'s stage read (none an escape, none
    read by its epilogue), in order: cut before group ``j``, they may run there as Local ops of its stage instead
    of being stored by the kernel before the cut and read back (``models/argmax_accuracy``: the compare and
    convert of each row's argmax, summed by the next stage)."""
    prev, nxt = groups[j - 1], groups[j]
    theirs = {n.name for n in nxt.ops}
    out: list = []
    for n in reversed(prev.epilogue):
        users = {u.name for u in n.users}
        if n.name in escapes or not users or not users <= theirs | {m.name for m in out}:
            continue
        out.insert(0, n)
    return out


def _epilogues_moved_down(groups: list, down: frozenset, escapes: set) -> list:
    """``groups`` with, before each group index of ``down``, the movable epilogue of the group before it
    (:func:`_movable_epilogue`) moved into it as Local ops (copies of the two groups; the rest shared)."""
    out = list(groups)
    for j in sorted(down):
        ops = _movable_epilogue(out, j, escapes)
        prev, nxt = copy(out[j - 1]), copy(out[j])
        prev.epilogue = [n for n in prev.epilogue if n not in ops]
        nxt.ops = ops + list(nxt.ops)
        out[j - 1], out[j] = prev, nxt
    return out


def _cut_into_kernels(graph, gpu, groups: list, names: set, escapes: set, index: int, opts, cuts=None,
                      search=None, at=frozenset()) -> list:
    """Kernels over consecutive runs of ``groups``; without Global stitching a run ends before the first
    stage that would read a Global value of an earlier stage (the kernel boundary is the grid barrier).
    ``cuts`` (a list) gets, per kernel, the :class:`~astitch_sim.plan.kernel_end.EndRule` word of the cut after it;
    ``search`` (a :class:`.astitch_launch.Search`, or None): each kernel's launch is priced (:mod:`.astitch_launch`);
    ``at``: group indices that start a new kernel besides those (a cut plan, :mod:`.astitch_cuts`)."""
    kernels, start = [], 0
    cuts = [] if cuts is None else cuts
    while start < len(groups):
        end = start + _reads_before_computed(groups[start:])
        rule = EndRule.READ_BEFORE_COMPUTED
        forced = min((j for j in at if start < j < end), default=None)
        if forced is not None:
            end, rule = forced, EndRule.STITCH_CUT
        while True:
            part = groups[start:end]
            k, cut = _build_kernel(graph, gpu, part, _part_escapes(graph, groups, part, names, escapes),
                                   index + len(kernels), opts, search)
            if k is not None:
                break
            end, rule = start + cut, EndRule.GLOBAL_CUT
        cuts.append(rule)
        kernels.append(k)
        start = end
    return kernels


def _reads_before_computed(part: list) -> int:
    """How many groups of ``part`` can share a kernel: a group that reads a value an earlier kernel made
    cannot sit before a group of the same kernel that computes its own copy of that value."""
    made, wanted = set(), set()
    for j, g in enumerate(part):
        mine = {n.name for n in list(g.ops) + list(g.epilogue)}
        if j and mine & wanted:
            return j
        wanted |= {o.name for n in list(g.ops) + list(g.epilogue) for o in n.operands} - mine - made
        made |= mine
    return len(part)


def _part_escapes(graph, groups: list, part: list, names: set, escapes: set) -> set:
    """Values of ``part`` written to global memory: the scope's escapes, and what the scope's other
    groups read without computing it themselves -- including through a cheap op both parts compute (a
    recomputed Local op of the other part reads ``n`` from memory even though this part computes it too)."""
    if len(part) == len(groups):
        return escapes
    computes = {id(g): {n.name for n in list(g.ops) + list(g.epilogue)} for g in groups}
    mine = set().union(*(computes[id(g)] for g in part))
    others = [g for g in groups if g not in part]
    out = {n for n in mine if n in escapes}
    for n in mine:
        for u in graph[n].users:
            if u.name in names and any(u.name in computes[id(g)] and n not in computes[id(g)] for g in others):
                out.add(n)
    return out


def _build_kernel(graph, gpu, groups: list, escapes: set, index: int, opts: AStitchOptions, search=None):
    """``(kernel, None)``, or ``(None, cut)``: without Global stitching, stage ``cut`` must start a new kernel.

    The paper's launch (:func:`_block_size`, task splitting by its rule) -- or, with the paper's decisions,
    when ``search``, the cheapest of it and a few alternatives of the same kernel priced by the cost model
    (:mod:`.astitch_launch`: other block sizes, no task splitting; the kernel's notes list them)."""
    rule = _block_size(groups, opts, gpu)

    def build(launch):
        o = opts if launch.split else replace(opts, task_splitting=False)
        if not search:
            return _build_at(graph, gpu, groups, escapes, index, o, launch.block)
        # the same launch of the same groups, with the same split counts adopted from earlier kernels, gives
        # the same kernel: keep a copy, and the split counts the build leaves on the groups (planner state)
        key = (launch.block, o, tuple(map(id, groups)), frozenset(escapes), index,
               tuple(None if gr.adopt is None else gr.adopt.splits for gr in groups))
        if key not in search.built:
            k, cut = _build_at(graph, gpu, groups, escapes, index, o, launch.block)
            search.built[key] = (deepcopy(k), cut, [gr.splits for gr in groups])
            return k, cut
        k, cut, splits = search.built[key]
        for gr, n in zip(groups, splits):
            gr.splits = n
        return deepcopy(k), cut

    if not search:
        return build(Launch(rule))
    cap = min(BLOCK, opts.max_block_threads, _largest_block(gpu, opts.assumed_registers))
    return choose_launch(graph, gpu, build, rule, cap, search.byte_cap)


def _searches(opts: AStitchOptions) -> bool:
    """Is the launch search on (``launch_search`` and no stitching switch changed)?"""
    return opts.launch_search and not _switched(opts)


def _switched(opts: AStitchOptions) -> bool:
    """Is a what-if switch of a stitching decision changed?  (Planning inputs such as ``assumed_registers``
    are not, nor the two steps that price the rules' plan: never-behind and the launch search itself.)"""
    return any(k not in AStitchOptions.INPUTS + ("never_behind", "launch_search") for k in opts.changed())


def _build_at(graph, gpu, groups: list, escapes: set, index: int, opts: AStitchOptions, block: int):
    """The kernel at ``block`` threads per block: ``(kernel, None)`` or ``(None, cut)`` (:func:`_build_kernel`).

    Assemble the kernel, then check it; each check either accepts it or changes one input and assembles
    again: a Regional value over the shared-memory budget is demoted to Global; a grid barrier over a
    grid wider than one wave caps the grid (vertical packing).  Without Global stitching, a stage after
    a grid barrier ends the kernel instead.  Accepted: registers relaxed to what keeps the wave."""
    wave = gpu.blocks_per_wave(block, 0, opts.assumed_registers)
    natural = max(_natural_blocks(gr, gpu, wave, block, opts, set(groups)) for gr in groups)
    # Regional stitching off: no value may live in shared memory across stages
    force_global: set = set() if opts.regional_stitching else {n.name for gr in groups for n in gr.ops + gr.epilogue}
    notes = [_split_note(gr, wave, block) for gr in groups if gr.adopt is None and gr.splits > 1]
    notes += [_view_note(i, gr) for i, gr in enumerate(groups)
              if gr.dominant.op != "reduce" and tuple(gr.dominant.shape) != gr.domain]
    cap = None
    for _ in range(64):
        k = _assemble(graph, gpu, groups, escapes, index, opts, block, _grid(groups, natural, cap), force_global,
                      notes)
        if _demote_largest_regional(gpu, k, force_global, notes):
            continue                                    # retry: one value fewer in shared memory
        cut = _global_cut(k, groups, opts)
        if cut is not None:
            return None, cut                            # exit: the stage after a grid barrier starts a new kernel
        wave_cap = _grid_over_one_wave(gpu, k, block, opts, notes)
        if wave_cap is not None:
            cap = wave_cap
            continue                                    # retry: the grid capped at one wave
        return _relax_registers(gpu, k, block, opts.assumed_registers), None      # exit: accepted
    raise AssertionError("astitch: launch configuration did not settle")


def _view_note(i: int, gr) -> str:
    """Why stage ``i`` iterates over a domain its dominant is a reshape of (:func:`_elementwise_group`)."""
    d = gr.dominant
    return (f"adaptive thread mapping over a view: stage {i} computes {d.name} {shape_str(d.shape, d.dtype)} over "
            f"{'x'.join(map(str, gr.domain))}, the domain of the stage whose mapping it takes, element for element "
            "(the same row-major positions; that mapping's lanes run along memory): each thread computes the "
            "elements whose inputs the earlier stage gave it [not the paper's rule: it adapts equal domains only]")


def _grid(groups: list, natural: int, cap) -> int:
    """Blocks to launch: the groups' natural grid, capped (at one wave), a multiple of the largest split."""
    max_split = max((gr.adopt or gr).splits for gr in groups)
    grid = natural if cap is None else min(natural, cap)
    return max(max_split, grid // max_split * max_split)


def _assemble(graph, gpu, groups, escapes, index, opts, block, grid, force_global, notes) -> Kernel:
    """One try: every group's mapping at this launch shape, the stages, and the kernel builder's bookkeeping."""
    made: dict = {}
    stages = []
    for gr in groups:
        m = _mapping(gr, grid, made, block, opts)
        made[id(gr)] = m
        stages.append(Stage(dominant=gr.dominant.name, ops=[n.name for n in gr.ops], mapping=m,
                            epilogue=[n.name for n in gr.epilogue]))
    return assemble_kernel(graph, f"stitch.{index}:{groups[-1].dominant.name}", stages, gpu, escapes,
                           stitch=True, force_global=force_global, notes=list(notes),
                           register_values_cap=None if opts.register_reuse else 0, keep_inputs=True)


def _demote_largest_regional(gpu, k: Kernel, force_global: set, notes: list) -> bool:
    """Over the default shared-memory budget: the largest Regional value goes to global memory next try."""
    budget = gpu.shared_per_block_default
    if k.shared_bytes <= budget:
        return False
    regional = sorted((v for v in k.values.values() if v.space is Space.SHARED), key=lambda v: -v.nbytes)
    if not regional:
        return False
    force_global.add(regional[0].node)
    notes.append(f"shared memory over the {budget // 1024} KiB budget: {regional[0].node} demoted Regional -> Global")
    return True


def _global_cut(k: Kernel, groups: list, opts: AStitchOptions):
    """Without Global stitching: the first stage after a grid barrier, where a new kernel must start."""
    if opts.global_stitching:
        return None
    cut = next((i + 1 for i, s in enumerate(k.stages) if s.barrier_after is Barrier.GRID or s.sync_after_combine),
               None)
    if cut is not None and cut < len(groups):
        return cut
    if k.global_barriers:      # pragma: no cover - _may_split keeps grid barriers out of one stage
        raise AssertionError(f"astitch: {k.name} kept a grid barrier without Global stitching")
    return None


def _grid_over_one_wave(gpu, k: Kernel, block: int, opts: AStitchOptions, notes: list):
    """A grid barrier needs every block resident: the one-wave cap to retry with, or None if the grid fits.
    Without vertical packing the grid cannot be capped: :class:`_GridExceedsWave`."""
    base_wave = gpu.blocks_per_wave(block, k.shared_bytes, opts.assumed_registers)
    if not (k.global_barriers and k.grid > base_wave):
        return None
    if not opts.vertical_packing:
        raise _GridExceedsWave(k.grid, base_wave)
    if not any("vertical packing" in n for n in notes):
        notes.append(f"grid barrier: grid capped at one wave ({base_wave} blocks) by vertical packing")
    return base_wave


def _relax_registers(gpu, k: Kernel, block: int, assumed: int) -> Kernel:
    """Assume-relax: the most registers per thread (in steps of 8) that keep the assumed blocks per wave.

    The cap exists for what stitching rests on -- a grid barrier's one-wave grid, the tasks packed
    into the blocks of a stitched kernel.  A kernel that stitches nothing (one stage, no grid barrier:
    bias+GELU's or Adam's loop kernel, launched as XLA launches it) has nothing resting on the assumed
    wave, so it keeps the registers its code needs (the kernel builder's estimate, the same for every
    strategy): capping it below them would make it spill under ptxas (bias+GELU: 24 B per thread at 32)
    and would make the SIMT model credit astitch with a better occupancy for a kernel identical to XLA's.
    """
    if len(k.stages) == 1 and not k.cooperative:
        return _keep_estimate(gpu, k, block, assumed)
    base_wave = gpu.blocks_per_wave(block, k.shared_bytes, assumed)
    relaxed = assumed
    for r in range(assumed, gpu.max_registers_per_thread + 1, 8):
        try:
            if gpu.blocks_per_wave(block, k.shared_bytes, r) != base_wave:
                break
        except AStitchError:      # no block fits any more
            break
        relaxed = r
    k.registers_per_thread = relaxed
    k.notes.append(f"assume-relax-apply: {block} threads, {assumed} regs -> {base_wave} blocks per "
                   f"wave; register cap relaxed to {relaxed}")
    return k


def _keep_estimate(gpu, k: Kernel, block: int, assumed: int) -> Kernel:
    """A kernel that stitches nothing keeps the registers its code needs (no cap below them): the note says
    so, with the waves it would have had at the assumed count."""
    need = k.registers_per_thread
    if need > assumed:
        k.notes.append(f"assume-relax-apply: nothing stitched (one stage, no grid barrier), so no launch decision "
                       f"rests on the {assumed} assumed registers: the kernel keeps the {need} its code needs, as "
                       f"every strategy's kernel does ({gpu.blocks_per_wave(block, k.shared_bytes, assumed)} -> "
                       f"{gpu.blocks_per_wave(block, k.shared_bytes, need)} blocks per wave)")
    else:
        k.notes.append(f"assume-relax-apply: nothing stitched (one stage, no grid barrier): the kernel keeps the "
                       f"{need} registers its code needs, within the {assumed} assumed")
    return k


def _split_note(gr: _Group, wave: int, block: int) -> str:
    """Why a task is split over blocks (the paper's rule, with this kernel's numbers)."""
    if gr.kind == "rows":
        m = ThreadMapping("rows", gr.domain, gr.groups, block=block, grid=1, threads_per_row=1)
        rows = f"{m.rows} row" + ("s" if m.rows != 1 else "")
        return (f"task splitting: {gr.dominant.name} has {rows} (< {wave} blocks per wave) of {m.cols} "
                f"elements (> {block} threads): each row split over {gr.splits} blocks")
    return (f"task splitting: {gr.dominant.name}'s reduced dim split over {gr.splits} blocks to fill the "
            f"{wave} blocks of a wave")


def _remote_stitch(graph, clusters: list) -> list:
    """Merge clusters that do not depend on each other (no cycle through a matrix product).

    Two clusters independent node by node may still depend on each other through a scope merged
    earlier, which runs as one unit: in HF attention (tests/torch_models.py) the softmax and the value
    weight's transpose are independent, but the transpose feeds the value projection, whose bias add
    was merged with the query weight's transpose, which feeds the query projection the softmax reads.
    So dependence is judged with every merged scope taken as one node: what a value needs is its
    ancestors, plus everything a merged scope among them needs, until nothing is added."""
    cache: dict = {}
    merged: list[set] = []
    needs: list[set] = []                          # per merged scope: its members' ancestors

    def ancestors_of(names) -> set:
        return set().union(*(ancestors(graph[x], cache) for x in names))

    def needed(start: set, own: int) -> set:
        """``start`` (ancestors of one unit) grown through every other merged scope it touches."""
        out, pending, grown = set(start), [i for i in range(len(merged)) if i != own], True
        while grown:
            grown = False
            for i in list(pending):
                if not out.isdisjoint(merged[i]):
                    out |= needs[i]
                    pending.remove(i)
                    grown = True
        return out

    for c in clusters:
        names = {n.name for n in c}
        mine = ancestors_of(names)
        for i, m in enumerate(merged):
            if needed(mine, i).isdisjoint(m) and needed(needs[i], i).isdisjoint(names):
                m |= names
                needs[i] |= mine
                break
        else:
            merged.append(names)
            needs.append(mine)
    return merged


def astitch_plan(graph, gpu, opts: AStitchOptions = AStitchOptions()) -> Plan:
    """The AStitch plan of ``graph``; ``opts`` switches single decisions off (see :mod:`.options`)."""
    position = {n.name: i for i, n in enumerate(graph)}
    clusters = sorted(memory_clusters(graph), key=lambda c: min(position[n.name] for n in c))
    scopes = _remote_stitch(graph, clusters)
    libs = library_groups(graph.live_nodes())
    outputs = {o.name for o in graph.outputs}
    live = {n.name for n in graph.live_nodes()}
    # in the graph's order (a unit's first op): a library kernel runs where the graph has it, so a kernel
    # reading what it read or wrote runs after it, while the L2 may still hold it (XLA's order too)
    units = sorted([("stitch", s) for s in scopes] + [("library", {n.name for n in group}) for group in libs],
                   key=lambda u: min(position[n] for n in u[1]))

    def deps(unit):
        srcs = (boundary_source(o) if unit[0] == "library" else o for n in unit[1] for o in graph[n].operands)
        return {o.name for o in srcs if o.name not in unit[1]}

    owner = {n: i for i, u in enumerate(units) for n in u[1]}
    needs = [{owner[d] for d in deps(u) if d in owner} for u in units]
    order = dependency_order(needs, first=in_passes(needs))
    if order is None:           # pragma: no cover - remote stitching never makes cycles
        raise AssertionError("astitch: kernels depend on each other in a cycle")
    ordered = [units[i] for i in order]
    kernels, scope_index, stitch_scopes = [], [], []
    xla_bytes = None                      # the launch search's byte cap, XLA's kernels priced once
    xla = None                            # XLA's plan of the graph: the byte cap's and never-behind's
    alternatives = []                     # per stitch scope: its cut plans, on demand (astitch_cuts.py)
    changed = opts.changed()
    switched = {k: v for k, v in changed.items() if k not in AStitchOptions.INPUTS}
    # step 8 runs for the paper's decisions only: a what-if switch shows what the decision it turns off is
    # worth, not XLA's plan (or a cut of the scope) in its place
    apply_never_behind = opts.never_behind and not (switched.keys() - AStitchOptions.PRICED_WITH)
    for kind, names in ordered:
        if kind == "library":
            kernels.append(library_kernel(graph, [n for n in graph if n.name in names], len(kernels)))
            scope_index.append(None)
            continue
        stitch_scopes.append(set(names))
        scope = with_rematerialised(names, graph)
        # dead code (users no output depends on) reads nothing: it forces no value into memory
        escapes = {n for n in names if n in outputs or any(u.name in live and u.name not in names
                                                           and read_directly(graph[n], u)
                                                           and (is_boundary(u) or not is_rematerialisable(graph[n]))
                                                           for u in graph[n].users)}
        names = scope
        escapes = {n for n in escapes if graph[n].op not in ("parameter", "constant")}
        if xla_bytes is None and _searches(opts):
            xla = xla_partition(graph, gpu)             # built once: never-behind compares with it too
            xla_bytes = xla_scope_bytes(graph, gpu, xla)
        built, scope_cut_plans = _build_kernels(graph, gpu, names, escapes, len(kernels), opts, xla_bytes,
                                                cut_search=apply_never_behind)
        kernels.extend(built)
        scope_index.extend([len(stitch_scopes) - 1] * len(built))
        alternatives.append(scope_cut_plans)
    notes = [f"astitch: {len(scopes)} stitch scope(s) from {len(clusters)} memory-intensive cluster(s), "
             f"{len(libs)} library kernel(s)"]
    if switched:
        notes.append("what-if: " + ", ".join(f"{k}={v}" for k, v in switched.items()))
    if "assumed_registers" in changed:
        notes.append(f"assumed {opts.assumed_registers} registers per thread (not the paper's 32) when sizing waves")
    plan = Plan(graph, "astitch", gpu, kernels, notes, options=changed)
    # step 8: per part, the fastest of the stitched kernels, their cut plans and XLA's kernels (never_behind.py)
    if apply_never_behind:
        plan = keep_xla_where_cheaper(plan, scope_index, stitch_scopes, xla=xla, alternatives=alternatives)
    elif opts.never_behind:
        plan.notes.append(f"{NEVER_BEHIND_NOTE}: not applied -- what-if switches show the raw stitch plan of "
                          "the decisions they leave on")
    return plan
