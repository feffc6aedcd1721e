"""Never behind XLA, nor fusionstitching: keep their kernels wherever stitching would not pay.

AStitch's search space contains XLA's fusion -- a kernel boundary is always
allowed -- and FusionStitching's partial merges (stitching through shared
memory is AStitch's Regional scheme), so an AStitch plan should never move more
global memory, or take longer, than the XLA plan of the same graph, and never
take longer than the fusionstitching plan.  The stitching rules of
:mod:`.astitch` are heuristics, and on some graphs they lose: a stitched kernel
that re-reads a big input in each of its stages, or stores a value to global
memory for a grid barrier, can cost more than XLA's kernels over the same ops,
and one launch shape for a whole scope (1024 threads, grid barriers between
stages) can be slower than fusionstitching's merge of a few XLA kernels with
small blocks and block barriers (a 16-row softmax next to a scan, a RMSNorm
beside a SwiGLU).  This step, run after the stitch plan is built, puts XLA's
or fusionstitching's kernels back there.

1. **Parts.**  Each stitch scope of the AStitch plan (the memory-intensive ops
   between library ops) is a part.  XLA's plan and fusionstitching's are made
   for the same graph and each of their generated kernels is assigned to the
   scopes of the ops it computes; a kernel that computes ops of two scopes (an
   XLA kernel recomputes a residual ``x`` after a matrix product; a
   fusionstitching merge spans a scan) ties them into one part.  Library
   kernels (matrix products, sorts...) are the same in every plan.
2. **Price.**  Each part is priced every way -- global bytes, predicted time,
   launches -- with the SIMT model's own formula
   (:func:`astitch_sim.simt.cost.predict_kernel`).  For a graph of at most
   :data:`MEASURE_UP_TO` elements (all its values together) the plans are
   *run* on the SIMT model with seeded inputs and the exact counters of each
   kernel are used: a few milliseconds to a few tenths of a second, and exact
   in the terms the invariant below is stated in.  A bigger graph would take
   seconds to minutes to run, so its counters come from the static estimate of
   :mod:`.fs_cost` (the one FusionStitching's search uses; microseconds).  The
   estimate follows the SIMT model's time closely but can be off by 10-20% in
   bytes on a near tie, so at big sizes the choice is as good as the estimate
   (``tests/test_never_behind.py`` checks the catalog at paper sizes and the
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
   fusionstitching's kernels for the part are a candidate where they beat
   XLA's by the same rule, and replace stitched kernels that pass XLA's floor
   only where those are more than :data:`FS_MIN_GAIN` slower (1%:
   :func:`choose`).  Otherwise the candidate's kernels, or
   XLA's, replace them, and the plan's notes (``print(plan)``, ``plan.notes``,
   the JSON) say why, with the numbers; a kept part's note says how many
   bytes the allowance admitted.  Plan
   totals are sums over kernels, so choosing per part makes the whole plan
   never behind: time(astitch) <= time(xla), launches(astitch) <=
   launches(xla), bytes(astitch) <= bytes(xla) + the combine bytes of the
   plan's kept kernels (:func:`plan_combine_bytes`), and time(astitch) <=
   time(fusionstitching) wherever fusionstitching's merges beat XLA's kernels
   (where they move more bytes than XLA's, XLA's floor wins and
   fusionstitching may stay faster: the bytes rule is the invariant).
4. **Order.**  The chosen kernels are put in dependency order (a kernel runs
   after every kernel whose results it reads).  If a replaced part would read a
   value the kept parts never write to memory, the parts are not separable and
   the whole plan is decided as one part (the coarse fallback: all stitched,
   fusionstitching's plan, or XLA's).

``asim.compile(g, "astitch", gpu, never_behind=False)`` switches the step off:
the raw stitch plan, as the rules of :mod:`.astitch` make it.  The step runs only
with the paper's decisions: when another what-if switch is changed (say
``global_stitching=False``) the plan shows what that switch does to the stitch
plan itself, not XLA's kernels in its place (a plan note says so).
"""
from __future__ import annotations

from dataclasses import dataclass
from types import SimpleNamespace

from ..dtypes import itemsize
from ..errors import AStitchError
from ..plan import Plan
from ..simt.cost import predict_kernel
from ..vocabulary import Combine
from .common import dependency_order
from .fs_cost import kernel_counters

#: graphs with at most this many elements in all their values are decided on the SIMT model's exact counters
MEASURE_UP_TO = 1 << 21
#: how much slower (a fraction of fusionstitching's predicted time) stitched kernels that pass XLA's floor must be for
#: fusionstitching's kernels to replace them: below it the difference is the cost model's rounding (a block size, a
#: launch-dominated tiny graph), not a reason to give up AStitch's plan; the invariant tests allow the same 1%
FS_MIN_GAIN = 0.01
#: the prefix of the plan notes this step writes (print(plan) shows them)
NOTE_PREFIX = "never behind XLA"


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


#: the plans a part may take its kernels from instead of the stitched ones, in order of preference on a tie
ALTERNATIVES = ("XLA", "fusionstitching")


@dataclass
class Part:
    """Stitch scopes decided together, and the kernels of each plan that compute their ops."""
    scopes: set
    stitched: list          # indices into the AStitch plan's kernels
    alt: dict               # {alternative: indices into its plan's kernels}


@dataclass
class Decision:
    """One part's prices and what it keeps: ``"stitched"`` or one of :data:`ALTERNATIVES`."""
    part: Part
    cost: dict              # {"stitched" | alternative: Cost}
    chosen: str

    @property
    def replaced(self) -> bool:
        return self.chosen != "stitched"


def _estimated(plan: Plan) -> list:
    """Per-kernel cost from the static estimate (library kernels: identical in both plans, priced 0)."""
    out = []
    for k in plan.kernels:
        if k.kind == "library":
            out.append(Cost(0.0, 0.0, 1))
            continue
        ks = kernel_counters(plan.graph, k)
        predict_kernel(SimpleNamespace(gpu=plan.gpu), k, ks)
        out.append(Cost(float(ks.global_bytes), ks.predicted_us, 1, combine_bytes(plan.graph, k)))
    return out


def _measured(plan: Plan, inputs) -> list:
    """Per-kernel cost from running ``plan`` on the SIMT model (exact counters for these inputs)."""
    from ..simt.executor import simulate
    res = simulate(plan, inputs)
    return [Cost(float(ks.global_bytes), ks.predicted_us, 1, combine_bytes(plan.graph, k))
            for ks, k in zip(res.stats.kernels, plan.kernels, strict=True)]


def _whole(scopes: list, scope_index: list, alts: dict) -> list:
    """One part holding every scope (the coarse fallback)."""
    return [Part(set(range(len(scopes))), [i for i, s in enumerate(scope_index) if s is not None],
                 {name: [j for j, k in enumerate(p.kernels) if k.kind != "library"] for name, p in alts.items()})]


def _parts(scope_index: list, scopes: list, alts: dict):
    """The parts (see the module docstring), or None when some alternative kernel computes no op of any scope."""
    scope_of = {n: i for i, s in enumerate(scopes) for n in s}
    parent = list(range(len(scopes)))

    def find(a):
        while parent[a] != a:
            parent[a] = parent[parent[a]]
            a = parent[a]
        return a

    assigned = []
    for name, plan in alts.items():
        for j, k in enumerate(plan.kernels):
            if k.kind == "library":
                continue
            mine = {scope_of[n] for n in k.computed if n in scope_of}
            if not mine:
                return None
            first = min(mine)
            for s in mine:
                parent[find(s)] = find(first)
            assigned.append((name, j, first))
    parts: dict = {}
    for s in range(len(scopes)):
        parts.setdefault(find(s), Part(set(), [], {name: [] for name in alts})).scopes.add(s)
    for i, s in enumerate(scope_index):
        if s is not None:
            parts[find(s)].stitched.append(i)
    for name, j, s in assigned:
        parts[find(s)].alt[name].append(j)
    return [p for p in parts.values() if p.stitched or any(p.alt.values())]


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


def choose(cost: dict) -> str:
    """What a part keeps, from its prices (``{"stitched": Cost, "XLA": Cost, "fusionstitching": Cost}``, the
    last optional).  XLA's kernels are the floor: the stitched kernels must be no worse than them (time first,
    bytes within the combine allowance).  fusionstitching's partial merges are a candidate only where they beat
    XLA's kernels by the same rule (no worse, and XLA's not as good); they replace stitched kernels that pass the
    floor only when those are more than :data:`FS_MIN_GAIN` slower -- AStitch's search space
    holds both (a kernel boundary is always allowed, and shared-memory stitching is its Regional scheme)."""
    a, x, f = cost["stitched"], cost["XLA"], cost.get("fusionstitching")
    fs_better = f is not None and f.no_worse_than(x) and not x.no_worse_than(f)
    if not a.no_worse_than(x):
        return "fusionstitching" if fs_better else "XLA"
    if fs_better and a.us > f.us * (1.0 + FS_MIN_GAIN):
        return "fusionstitching"
    return "stitched"


def _decide(parts, stitched_cost, alt_cost: dict) -> list:
    """Each part's prices and choice (:func:`choose`)."""
    out = []
    for p in parts:
        cost = {"stitched": sum((stitched_cost[i] for i in p.stitched), Cost())}
        for name, idx in p.alt.items():
            cost[name] = sum((alt_cost[name][j] for j in idx), Cost())
        out.append(Decision(p, cost, choose(cost)))
    return out


def _graph_elements(graph) -> int:
    return sum(n.size for n in graph)


def _alternatives(graph, gpu) -> dict:
    """XLA's plan and fusionstitching's (when it plans this graph) for the same graph."""
    from .fs_options import FusionStitchingOptions
    from .fusion import partition_plan
    from .fusionstitching import fusionstitching_plan
    from .register_only import XLA
    alts = {"XLA": partition_plan(graph, gpu, XLA)}
    try:
        alts["fusionstitching"] = fusionstitching_plan(graph, gpu, FusionStitchingOptions())
    except AStitchError:          # a graph fusionstitching does not plan: XLA's kernels are the only alternative
        pass
    return alts


def keep_xla_where_cheaper(stitch: Plan, scope_index: list, scopes: list, inputs=None) -> Plan:
    """``stitch`` with XLA's (or fusionstitching's) kernels wherever they cost less than the stitched ones
    (module docstring).

    ``scope_index[i]``: the stitch scope kernel ``i`` was built for (None for a library kernel);
    ``scopes``: the scopes' op names.  ``inputs`` (parameter order): what the SIMT model runs
    on when counters must be exact (default: seeded inputs from :func:`~astitch_sim.workloads.workload_inputs`).
    """
    graph, gpu = stitch.graph, stitch.gpu
    alts = _alternatives(graph, gpu)
    parts = _parts(scope_index, scopes, alts)
    if parts is None or not stitch.kernels:
        parts = _whole(scopes, scope_index, alts)
    costs, how = None, "estimated by the static cost model"
    if _graph_elements(graph) <= MEASURE_UP_TO:
        try:
            if inputs is None:
                from ..workloads import workload_inputs
                inputs = workload_inputs(graph, 0)
            costs = (_measured(stitch, inputs), {name: _measured(p, inputs) for name, p in alts.items()})
            how = "simulated on the SIMT model"
        except AStitchError:      # a plan the SIMT model cannot run on seeded inputs: use the estimate
            costs = None
    if costs is None:
        costs = (_estimated(stitch), {name: _estimated(p) for name, p in alts.items()})
    decisions = _decide(parts, *costs)
    chosen = _mixed(stitch, alts, decisions) if any(d.replaced for d in decisions) else None
    if chosen is None and any(d.replaced for d in decisions):     # parts not separable: decide the whole plan
        whole = _whole(scopes, scope_index, alts)[0]
        cost = {name: sum((d.cost[name] for d in decisions), Cost()) for name in decisions[0].cost}
        decisions = [Decision(whole, cost, choose(cost))]
        if decisions[0].replaced:
            chosen = _mixed(stitch, alts, decisions)
            if chosen is None and decisions[0].chosen != "XLA":   # the other plan's kernels read across parts
                decisions = [Decision(whole, cost, "XLA")]
                chosen = _mixed(stitch, alts, decisions)
            if chosen is None:        # pragma: no cover - XLA's own plan is always in dependency order
                raise AssertionError("never behind: XLA's plan is not in dependency order")
    if chosen is None:
        total_a = sum((d.cost["stitched"] for d in decisions), Cost())
        total_x = sum((d.cost["XLA"] for d in decisions), Cost())
        stitch.notes.append(f"{NOTE_PREFIX}: kept every stitched kernel ({how}: {total_a.describe()} where XLA's "
                            f"kernels for the same ops need {total_x.describe()}){_allowed(total_a, total_x)}")
        return stitch
    notes = list(stitch.notes)
    for d in decisions:
        p, a, x = d.part, d.cost["stitched"], d.cost["XLA"]
        names = ", ".join(alts["XLA"].kernels[j].name for j in p.alt["XLA"])
        stitched = ", ".join(stitch.kernels[i].name for i in p.stitched) or "no kernel"
        if d.chosen == "fusionstitching":
            f = d.cost["fusionstitching"]
            mine = ", ".join(alts["fusionstitching"].kernels[j].name for j in p.alt["fusionstitching"])
            for j in p.alt["fusionstitching"]:
                alts["fusionstitching"].kernels[j].notes.insert(
                    0, f"{NOTE_PREFIX} and fusionstitching: fusionstitching's kernel, kept because it costs less "
                       f"than the stitched kernels and XLA's (stitched {a.describe()}; fusionstitching "
                       f"{f.describe()}; XLA {x.describe()})")
            notes.append(f"{NOTE_PREFIX} and fusionstitching: fusionstitching's partial merge ({mine}) kept for "
                         f"the ops of {stitched} ({how}: stitched {a.describe()}; fusionstitching {f.describe()}; "
                         f"XLA's {names}: {x.describe()})")
        elif d.chosen == "XLA":
            for j in p.alt["XLA"]:
                alts["XLA"].kernels[j].notes.insert(0, f"{NOTE_PREFIX}: XLA's kernel, kept because stitching these "
                                                       f"ops would cost more (stitched {a.describe()}; XLA "
                                                       f"{x.describe()})")
            more_bytes = a.bytes > x.bytes if a.us == x.us else a.more_bytes_than(x)
            worse = [w for w, bad in (("more global bytes", more_bytes), ("more time", a.us > x.us),
                                      ("more launches", a.launches > x.launches)) if bad] or ["as much"]
            notes.append(f"{NOTE_PREFIX}: XLA's boundaries kept for {names}: stitching them ({stitched}) would "
                         f"cost {' and '.join(worse)} ({how}: stitched {a.describe()}; XLA {x.describe()})")
        elif p.stitched:
            notes.append(f"{NOTE_PREFIX}: {stitched} kept ({how}: {a.describe()}; XLA's {names or 'no kernels'}: "
                         f"{x.describe()}){_allowed(a, x)}")
    return Plan(graph, stitch.strategy, gpu, chosen, notes, options=dict(stitch.options), search=stitch.search)


def _mixed(stitch: Plan, alts: dict, decisions) -> list | None:
    """The kernels of the mixed plan in dependency order (None: a replaced part reads what no kernel writes)."""
    drop = {i for d in decisions if d.replaced for i in d.part.stitched}
    placed = []
    for i, k in enumerate(stitch.kernels):
        if i not in drop:
            placed.append((float(i), k))
    for d in decisions:
        if not d.replaced:
            continue
        idx = d.part.alt[d.chosen]
        at = min(d.part.stitched) if d.part.stitched else 0
        for n, j in enumerate(idx):
            placed.append((at - 0.5 + n / (2 * len(idx) + 1), alts[d.chosen].kernels[j]))
    return _ordered(stitch.graph, placed)
