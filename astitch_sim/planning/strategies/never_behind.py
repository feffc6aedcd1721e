"""Never behind XLA: keep XLA's kernel boundaries wherever stitching would not pay.

AStitch's search space contains XLA's fusion -- a kernel boundary is always
allowed -- so an AStitch plan should never move more global memory, or take
longer, than the XLA plan of the same graph.  The stitching rules of
:mod:`.astitch` are heuristics, and on some graphs they lose: a stitched kernel
that re-reads a big input in each of its stages, or stores a value to global
memory for a grid barrier, can cost more than XLA's kernels over the same ops.
This step, run after the stitch plan is built, puts XLA's kernels back there.

1. **Parts.**  Each stitch scope of the AStitch plan (the memory-intensive ops
   between library ops) is a part.  XLA's plan is made for the same graph and
   each of its generated kernels is assigned to the scopes of the ops it
   computes; an XLA kernel that computes ops of two scopes (it recomputes a
   residual ``x`` after a matrix product, say) ties them into one part.  Library
   kernels (matrix products, sorts...) are the same in both plans.
2. **Price.**  Each part is priced both ways -- global bytes, predicted time,
   launches -- with the SIMT model's own formula
   (:func:`astitch_sim.simt.cost.predict_kernel`).  For a graph of at most
   :data:`MEASURE_UP_TO` elements (all the values its kernels compute) both plans are
   *run* on the SIMT model with seeded inputs and the exact counters of each
   kernel are used: a few milliseconds to a few tenths of a second, and exact
   in the terms the invariant below is stated in.  A bigger graph would take
   seconds to minutes to run, so its counters come from the static estimate of
   :mod:`.fs_cost` (the one FusionStitching's search uses; microseconds).  The
   estimate follows the SIMT model's time closely but can be off by 10-20% in
   bytes on a near tie, so at big sizes the choice is as good as the estimate
   (``tests/planning/test_never_behind.py`` checks the catalog at paper sizes and the
   real-size model fixtures against the SIMT model).
3. **Choose.**  Time is what the user pays.  A part keeps its stitched kernels
   only if they are predicted no slower and launch no more kernels than XLA's
   kernels for the same ops, and move no more global bytes than XLA's plus
   their *combine allowance*: the bytes their split reductions' combines move
   (:func:`combine_bytes`: the memset of an atomic result and its atomics, or
   the partials a grid-barrier combine writes and re-reads), so task
   splitting is not refused for the few hundred bytes that make it possible,
   and nothing else (a stitched kernel that re-reads a tensor is refused
   however fast).  On a tie in time, bytes decide with no allowance.
   Otherwise its scopes' *cut plans* are priced (:mod:`.astitch_cuts`: the
   scope cut at a stage boundary -- the best stitch inside the scope), under
   the same rule, and the fastest admitted one is kept: its kernels end with
   ``stitch_cut`` and the plan note names the cut, its price, and what the
   stitched kernels and XLA's cost.  Only when none is admitted XLA's kernels
   replace them, and the plan's notes
   (``print(plan)``, ``plan.notes``, the JSON) say why, with the numbers;
   a kept part's note says how many bytes the allowance admitted.  Plan
   totals are sums over kernels, so choosing per part makes the whole plan
   never behind: time(astitch) <= time(xla), launches(astitch) <=
   launches(xla), bytes(astitch) <= bytes(xla) + the combine bytes of the
   plan's kept kernels (:func:`plan_combine_bytes`).
4. **Order.**  The chosen kernels are put in dependency order (a kernel runs
   after every kernel whose results it reads).  If a replaced part would read a
   value the kept parts never write to memory, the parts are not separable and
   the whole plan is decided as one part (the coarse fallback: all stitched, or
   XLA's plan).
5. **The whole.**  Each part is priced in its own plan's kernel order, but the L2
   sees the whole plan: XLA may run a library kernel (a cumsum of ``x``) before
   a fused kernel that reads ``x`` again, and find ``x`` resident, where the
   chosen plan runs that kernel first, before the library.  So where the plan was
   measured and has library kernels or several parts, the chosen plan is run
   whole beside XLA's, and if it is slower, XLA's plan is kept whole (a note
   gives both times).

``asim.compile(g, "astitch", gpu, never_behind=False)`` switches the step off:
the raw stitch plan, as the rules of :mod:`.astitch` make it.  The step runs only
with the paper's decisions: when another what-if switch is changed (say
``global_stitching=False``) the plan shows what that switch does to the stitch
plan itself, not XLA's kernels in its place (a plan note says so).
"""
from __future__ import annotations

from dataclasses import dataclass, field

from ...plan import notes
from ...ir.dtypes import itemsize
from ...errors import AStitchError
from ...plan.plan import Plan
from ...plan.vocabulary import Combine
from .astitch_ends import never_behind_end
from .common import dependency_order
from .fs_cost import priced

#: graphs with at most this many elements in all their values are decided on the SIMT model's exact counters
MEASURE_UP_TO = 1 << 21
#: the prefix of the plan notes this step writes (print(plan) shows them)
NOTE_PREFIX = notes.NEVER_BEHIND


@dataclass
class Cost:
    """What a set of kernels costs: global bytes, predicted time (us), kernel launches, and the bytes of those
    that their split combines move (:func:`combine_bytes`: the allowance)."""
    bytes: float = 0.0
    us: float = 0.0
    launches: int = 0
    allowance: float = 0.0

    def __add__(self, other: "Cost") -> "Cost":
        return Cost(self.bytes + other.bytes, self.us + other.us, self.launches + other.launches,
                    self.allowance + other.allowance)

    def more_bytes_than(self, other: "Cost") -> bool:
        """More global bytes than ``other``'s plus this side's combine allowance (and nothing else)."""
        return self.bytes > other.bytes + self.allowance

    def no_worse_than(self, other: "Cost") -> bool:
        """Time first: no slower, no more launches, and no more bytes than ``other``'s plus the bytes this side's
        split combines move (on a tie in time, no more bytes at all: the allowance buys time, not a tie)."""
        if self.launches > other.launches or self.us > other.us:
            return False
        if self.us == other.us:
            return self.bytes <= other.bytes
        return not self.more_bytes_than(other)

    def describe(self) -> str:
        return f"{self.launches} kernel(s), {_mib(self.bytes)}, {self.us:.1f} us"


def combine_bytes(graph, kernel) -> int:
    """Global bytes the split combines of ``kernel`` move, read from its plan: for each reduce of a stage whose
    rows are split over ``S`` blocks, ``combine=atomic``: the memset of the result buffer and one atomic per
    block and row; ``combine=grid_barrier``: the partials each block writes and every split block of the row
    reads back after the barrier.  The SIMT model counts exactly these (``simt/executor.py``); an unsplit
    kernel (and a library kernel) has none."""
    if kernel.kind == "library":
        return 0
    total = 0
    for s in kernel.stages:
        m = s.mapping
        if m.splits <= 1:
            continue
        for n in s.ops:
            node = graph[n]
            if node.op != "reduce":
                continue
            partials = node.size * m.splits * itemsize(node.dtype)
            if m.combine == Combine.ATOMIC:
                total += node.nbytes + partials
            else:
                total += partials + partials * m.splits
    return total


def plan_combine_bytes(plan: Plan) -> int:
    """The combine allowance of a whole plan: :func:`combine_bytes` summed over its kernels."""
    return sum(combine_bytes(plan.graph, k) for k in plan.kernels)


def _allowed(a: Cost, x: Cost) -> str:
    """What the combine allowance admitted, for a kept part's note ('' when it admitted nothing)."""
    if a.bytes <= x.bytes:
        return ""
    return (f"; allowed: {_mib(a.bytes - x.bytes)} more than XLA's, within the {_mib(a.allowance)} its split "
            f"combines move")


def _mib(nbytes: float) -> str:
    return f"{nbytes / 2**20:.2f} MiB" if nbytes >= 2**16 else f"{nbytes / 1024:.1f} KiB"


@dataclass
class Part:
    """Stitch scopes decided together, and the kernels of each plan that compute their ops."""
    scopes: set
    stitched: list          # indices into the AStitch plan's kernels
    xla: list               # indices into the XLA plan's kernels


def _estimated(plan: Plan) -> list:
    """Per-kernel cost from the static estimate (library kernels: identical in both plans, priced 0)."""
    return _estimated_kernels(plan.graph, plan.gpu, plan.kernels)


def _estimated_kernels(graph, gpu, kernels) -> list:
    return [Cost(0.0, 0.0, 1) if ks is None else
            Cost(float(ks.global_bytes), ks.predicted_us, 1, combine_bytes(graph, k))
            for k, ks in zip(kernels, priced(graph, gpu, kernels), strict=True)]


def _measured(plan: Plan, inputs) -> list:
    """Per-kernel cost from running ``plan`` on the SIMT model (exact counters for these inputs)."""
    from ...simt.executor import simulate
    res = simulate(plan, inputs)
    return [Cost(float(ks.global_bytes), ks.predicted_us, 1, combine_bytes(plan.graph, k))
            for ks, k in zip(res.stats.kernels, plan.kernels, strict=True)]


def _cut_costs(stitch: Plan, scope_index: list, alternatives: list, inputs) -> list:
    """Per scope, per cut plan: the per-kernel costs of its kernels (``[[ [Cost] ]]``, as ``alternatives``).

    ``inputs`` None: the static estimate.  Else measured on the SIMT model: trial ``t`` is the stitched plan
    with every scope that has a ``t``-th cut plan cut so, run once (each cut kernel priced beside the others'
    kernels, as :func:`_measured` prices the stitched ones)."""
    graph, gpu = stitch.graph, stitch.gpu
    if inputs is None:
        return [[_estimated_kernels(graph, gpu, c.kernels) for c in cuts] for cuts in alternatives]
    out = [[None] * len(cuts) for cuts in alternatives]
    for t in range(max((len(c) for c in alternatives), default=0)):
        kernels, where = [], []
        for i, k in enumerate(stitch.kernels):
            s = scope_index[i]
            cut = alternatives[s][t] if s is not None and t < len(alternatives[s]) else None
            if cut is None:
                kernels.append(k)
            elif i == scope_index.index(s):        # the scope's first kernel: its cut plan in its place
                where.append((s, len(kernels), len(cut.kernels)))
                kernels.extend(cut.kernels)
        costs = _measured(Plan(graph, stitch.strategy, gpu, kernels, []), inputs)
        for s, at, n in where:
            out[s][t] = costs[at:at + n]
    return out


def _parts(stitch: Plan, scope_index: list, scopes: list, xla: Plan):
    """The parts (see the module docstring), or None when some XLA kernel computes no op of any scope."""
    scope_of = {n: i for i, s in enumerate(scopes) for n in s}
    parent = list(range(len(scopes)))

    def find(a):
        while parent[a] != a:
            parent[a] = parent[parent[a]]
            a = parent[a]
        return a

    assigned = []
    for j, k in enumerate(xla.kernels):
        if k.kind == "library":
            continue
        mine = {scope_of[n] for n in k.computed if n in scope_of}
        if not mine:
            return None
        first = min(mine)
        for s in mine:
            parent[find(s)] = find(first)
        assigned.append((j, first))
    parts: dict = {}
    for s in range(len(scopes)):
        parts.setdefault(find(s), Part(set(), [], [])).scopes.add(s)
    for i, s in enumerate(scope_index):
        if s is not None:
            parts[find(s)].stitched.append(i)
    for j, s in assigned:
        parts[find(s)].xla.append(j)
    return [p for p in parts.values() if p.stitched or p.xla]


def _ordered(graph, kernels: list):
    """``kernels`` (each with a provisional position) in dependency order, or None if some kernel reads a
    value no kernel writes (the parts were not separable)."""
    available = {p.name for p in graph.inputs} | {n.name for n in graph if n.op == "constant"}
    writers: dict = {}
    for i, (_, k) in enumerate(kernels):
        for o in k.outputs:
            writers.setdefault(o, i)
    needs = []
    for _, k in kernels:
        deps = set()
        for n in k.inputs:
            if n in available:
                continue
            if n not in writers:
                return None
            deps.add(writers[n])
        needs.append(deps)
    order = dependency_order(needs, first=lambda i: kernels[i][0])
    return None if order is None else [kernels[i][1] for i in order]


@dataclass
class Decision:
    """One part's choice: the stitched kernels' price, XLA's, whether XLA's replace them, and the cut plan
    chosen in their place (``(scope, ScopeCut, Cost of the part with it)``, or None); ``tried``: every cut
    plan priced for the part, ``(scope, ScopeCut, Cost of the part with it)``."""
    part: Part
    stitched: Cost
    xla: Cost
    replaced: bool
    cut: tuple | None = None
    tried: list = field(default_factory=list)


def _decisions(parts, stitch: Plan, xla: Plan, scope_index: list, alternatives: list, inputs) -> list:
    """Each part decided (:func:`_decide`): first between its stitched kernels and XLA's; then, for the parts that
    would take XLA's, with their scopes' cut plans too (searched only for them: on every fixture and catalog
    graph a cut was chosen only where the stitched kernels were refused, and a search for every scope of the GPT
    training step tripled its planning time).  ``inputs`` None: the static estimate; else the SIMT model."""
    if inputs is None:
        sc, xc = _estimated(stitch), _estimated(xla)
    else:
        sc, xc = _measured(stitch, inputs), _measured(xla, inputs)
    first = _decide(parts, sc, xc)
    wanted = {s for d in first if d.replaced for s in d.part.scopes}
    cuts = [a() if a is not None and s in wanted else [] for s, a in enumerate(alternatives)]
    if not any(cuts):
        return first
    return _decide(parts, sc, xc, scope_index, cuts, _cut_costs(stitch, scope_index, cuts, inputs))


def _decide(parts, stitched_cost, xla_cost, scope_index=(), alternatives=(), cut_cost=()):
    """Per part (module docstring, step 3): its stitched kernels if admitted; else the fastest admitted of its
    scopes' cut plans (``alternatives[s]``, per-kernel costs ``cut_cost[s]``); else XLA's kernels."""
    out = []
    for p in parts:
        a = sum((stitched_cost[i] for i in p.stitched), Cost())
        x = sum((xla_cost[j] for j in p.xla), Cost())
        if a.no_worse_than(x):
            out.append(Decision(p, a, x, False))
            continue
        tried = []
        for s in sorted(p.scopes):
            if s >= len(alternatives):
                continue
            rest = sum((stitched_cost[i] for i in p.stitched if scope_index[i] != s), Cost())
            for c, costs in zip(alternatives[s], cut_cost[s], strict=True):
                tried.append((s, c, rest + sum(costs, Cost())))
        best = min((t for t in tried if t[2].no_worse_than(x)), key=lambda t: (t[2].us, t[2].bytes), default=None)
        out.append(Decision(p, a, x, best is None, best, tried))
    return out


def xla_partition(graph, gpu) -> Plan:
    """XLA's plan of ``graph`` (the xla strategy's fusion rules): what never-behind compares stitch scopes with."""
    from .fusion import partition_plan
    from .register_only import XLA
    return partition_plan(graph, gpu, XLA)


def _graph_elements(graph) -> int:
    """Elements of the values the plans compute: dead code (no kernel computes it) costs the SIMT model nothing,
    and counted, four unused copies of a column sum's subtract put a 600,000-element graph over
    :data:`MEASURE_UP_TO`, on the estimate, which chose a stitched kernel 15% slower than XLA's two."""
    return sum(n.size for n in graph.live_nodes())


def keep_xla_where_cheaper(stitch: Plan, scope_index: list, scopes: list, inputs=None, xla=None,
                           alternatives=None) -> Plan:
    """``stitch`` with XLA's kernels wherever they cost less than the stitched ones (module docstring), or a
    scope's cut plan where that is the fastest admitted.

    ``scope_index[i]``: the stitch scope kernel ``i`` was built for (None for a library kernel);
    ``scopes``: the scopes' op names.  ``inputs`` (parameter order): what the SIMT model runs
    on when counters must be exact (default: seeded inputs from :func:`~astitch_sim.frontends.workloads.workload_inputs`).
    ``xla``: XLA's plan of the graph, when the caller has built it already (the launch search's byte cap).
    ``alternatives[s]``: a function giving scope ``s``'s cut plans (:class:`.astitch_cuts.ScopeCut`,
    ``astitch._build_kernels``), or None.
    """
    graph, gpu = stitch.graph, stitch.gpu
    alternatives = alternatives or [None] * len(scopes)
    if xla is None:
        xla = xla_partition(graph, gpu)
    parts = _parts(stitch, scope_index, scopes, xla)
    if parts is None or not stitch.kernels:
        parts = [Part(set(range(len(scopes))), [i for i, s in enumerate(scope_index) if s is not None],
                      [j for j, k in enumerate(xla.kernels) if k.kind != "library"])]
    decisions, how, measured = None, "estimated by the static cost model", None
    if _graph_elements(graph) <= MEASURE_UP_TO:
        try:
            if inputs is None:
                from ...frontends.workloads import workload_inputs
                inputs = workload_inputs(graph, 0)
            decisions = _decisions(parts, stitch, xla, scope_index, alternatives, inputs)
            how, measured = "simulated on the SIMT model", inputs
        except AStitchError:      # a plan the SIMT model cannot run on seeded inputs: use the estimate
            decisions = None
    if decisions is None:
        decisions = _decisions(parts, stitch, xla, scope_index, alternatives, None)
    if not any(d.replaced or d.cut for d in decisions):
        total_a = sum((d.stitched for d in decisions), Cost())
        total_x = sum((d.xla for d in decisions), Cost())
        stitch.notes.append(f"{NOTE_PREFIX}: kept every stitched kernel ({how}: {total_a.describe()} where XLA's "
                            f"kernels for the same ops need {total_x.describe()}){_allowed(total_a, total_x)}")
        return _whole_not_behind(stitch, xla, measured, len(parts))
    chosen = _mixed(stitch, xla, decisions, scope_index)
    if chosen is None:                # parts not separable: decide the whole plan at once
        whole = Part(set(range(len(scopes))), [i for i, s in enumerate(scope_index) if s is not None],
                     [j for j, k in enumerate(xla.kernels) if k.kind != "library"])
        a = sum((d.stitched for d in decisions), Cost())
        x = sum((d.xla for d in decisions), Cost())
        decisions = [Decision(whole, a, x, True)]
        chosen = _mixed(stitch, xla, decisions, scope_index)
        if chosen is None:            # pragma: no cover - XLA's own plan is always in dependency order
            raise AssertionError("never behind: XLA's plan is not in dependency order")
    notes = list(stitch.notes)
    for d in decisions:
        p, a, x = d.part, d.stitched, d.xla
        names = ", ".join(xla.kernels[j].name for j in p.xla)
        stitched = ", ".join(stitch.kernels[i].name for i in p.stitched) or "no kernel"
        if d.replaced:
            for j in p.xla:
                xla.kernels[j].notes.insert(0, f"{NOTE_PREFIX}: XLA's kernel, kept because stitching these ops "
                                               f"would cost more (stitched {a.describe()}; XLA {x.describe()})")
            worse = _worse(a, x)
            for j in p.xla:              # why each kernel ends: this step's reason, then XLA's (kernel_end.py)
                xla.kernels[j].ends.insert(0, never_behind_end(xla.kernels[j], stitched, worse))
            notes.append(f"{NOTE_PREFIX}: XLA's boundaries kept for {names}: stitching them ({stitched}) would "
                         f"cost {worse} ({how}: stitched {a.describe()}; XLA {x.describe()})" + _tried([d]))
        elif d.cut is not None:
            s, c, cost = d.cut
            now = ", ".join(k.name for k in c.kernels)
            text = (f"{c.describe()} ({now}) chosen: {how}, {cost.describe()}, over the stitched {stitched} "
                    f"({a.describe()}: {_worse(a, x)}) and XLA's {names or 'no kernels'} ({x.describe()})"
                    f"{_allowed(cost, x)}")
            c.kernels[0].notes.append(f"{NOTE_PREFIX}: {text}")
            notes.append(f"{NOTE_PREFIX}: {text}" + _tried([d], skip=c))
        elif p.stitched:
            notes.append(f"{NOTE_PREFIX}: {stitched} kept ({how}: {a.describe()}; XLA's {names or 'no kernels'}: "
                         f"{x.describe()}){_allowed(a, x)}")
    return _whole_not_behind(Plan(graph, stitch.strategy, gpu, chosen, notes, options=dict(stitch.options),
                                  search=stitch.search), xla, measured, len(parts))


def _whole_not_behind(plan: Plan, xla: Plan, inputs, parts: int) -> Plan:
    """Step 5 (module docstring): ``plan``, or XLA's plan kept whole where ``plan``, run whole on ``inputs`` (None:
    not measured, nothing to run), is slower.  One part and no library kernel: the part was the whole plan."""
    if inputs is None or (parts < 2 and not any(k.kind == "library" for k in plan.kernels)):
        return plan
    from ...simt.executor import simulate
    ours, theirs = (simulate(p, inputs).stats.predicted_us for p in (plan, xla))
    if ours <= theirs:
        return plan
    note = (f"{NOTE_PREFIX}: XLA's plan kept whole: the chosen kernels, each part no slower than XLA's kernels "
            f"for it, take {ours:.2f} us together where XLA's plan takes {theirs:.2f} us (simulated on the SIMT "
            "model: the kernels' order beside the library kernels changes what the L2 holds)")
    return Plan(plan.graph, plan.strategy, plan.gpu, list(xla.kernels), list(plan.notes) + [note],
                options=dict(plan.options), search=plan.search)


def _worse(a: Cost, x: Cost) -> str:
    """What makes ``a`` not admitted against XLA's ``x``: 'more global bytes and more time'..."""
    more_bytes = a.bytes > x.bytes if a.us == x.us else a.more_bytes_than(x)
    bytes_word = f"more global bytes ({_mib(a.bytes - x.bytes)} over XLA's)"      # MiB totals can hide a few KiB
    return " and ".join(w for w, bad in ((bytes_word, more_bytes), ("more time", a.us > x.us),
                                         ("more launches", a.launches > x.launches)) if bad)


def _tried(decisions, skip=None) -> str:
    """The cut plans priced and not chosen, for a note: '; also priced: the scope cut before ... (1 kernel(s),
    ...; not admitted: more time)'."""
    rows = []
    for d in decisions:
        for _, c, cost in d.tried:
            if c is skip:
                continue
            verdict = "" if cost.no_worse_than(d.xla) else f"; not admitted: {_worse(cost, d.xla)}"
            rows.append(f"{c.describe()}: {cost.describe()}{verdict}")
    return f"; also priced: {'; '.join(rows)}" if rows else ""


def _mixed(stitch: Plan, xla: Plan, decisions, scope_index=()) -> list | None:
    """The kernels of the mixed plan in dependency order (None: a replaced part reads what no kernel writes).
    A chosen cut plan takes its scope's place; XLA's kernels take their part's."""
    drop = {i for d in decisions if d.replaced for i in d.part.stitched}
    placed = []
    for d in decisions:
        if d.cut is None:
            continue
        s, c, _ = d.cut
        mine = [i for i in d.part.stitched if scope_index[i] == s]
        drop |= set(mine)
        for n, k in enumerate(c.kernels):
            placed.append((min(mine) - 0.5 + n / (2 * len(c.kernels) + 1), k))
    for i, k in enumerate(stitch.kernels):
        if i not in drop:
            placed.append((float(i), k))
    for d in decisions:
        if not d.replaced:
            continue
        p = d.part
        at = min(p.stitched) if p.stitched else 0
        for n, j in enumerate(p.xla):
            placed.append((at - 0.5 + n / (2 * len(p.xla) + 1), xla.kernels[j]))
    return _ordered(stitch.graph, placed)
