"""The best stitch inside a scope: the stitch scope cut at a stage boundary, priced (issue 28, not the paper's).

AStitch stitches a whole scope into one kernel, and never-behind (:mod:`.never_behind`)
used to weigh that kernel only against XLA's kernels for the same ops: all stitched,
or all XLA.  Between the two lie the scope's *cuts*: the same stages, the same
schemes, the kernel ended before one stage and a new one started there.  A cut
costs a launch and sends the values crossing it through global memory; it saves
what the boundary cost inside the kernel -- a grid barrier, a grid capped at one
wave so that every block is resident for it, one launch shape for stages that
want different ones (a 512-row argmax and the 1-row sum of its results) -- and a
Global value written and read back across a grid barrier may cost more bytes than
XLA's kernels move, which never-behind refuses however fast.  FusionStitching,
which stitches runs of XLA's kernels, draws such cut plans, so without them AStitch
lost to it on the cost model's own terms (``models/argmax_accuracy``: 1.21x).

* **Where.**  The boundaries that cost (:func:`boundaries`): between two stages
  that map their work differently (another kind or domain: what crosses goes
  through shared or global memory, never registers), those with a grid barrier
  first; at most :data:`MAX_BOUNDARIES` per scope.
* **What moves.**  A plain cut keeps every stage where it was; where the stage
  before the cut ends in an epilogue only the stage after reads (the compare
  and convert of each row's argmax, summed by the next stage), a second cut
  moves that epilogue down, to run as Local ops of the stage after: the kernel
  before the cut then stores the reduce's result alone, not the epilogue's
  values as well.
* **Which cuts.**  Each single cut, then greedily one more cut added to the
  fastest set while that is faster, for at most :data:`GREEDY_ROUNDS` rounds: a
  scope of ``n`` boundaries builds at most ``2n (1 + GREEDY_ROUNDS)`` cut plans, and
  each kernel is assembled at the rules' launch only (:mod:`.astitch_launch`'s
  alternatives are priced for the kept ones alone).
* **Price.**  The static estimate of :mod:`.fs_cost` (microseconds per plan), each
  kernel at the rules' launch while searching (one assembly per kernel); the
  :data:`KEEP` fastest cuts, their launches then searched as every stitched
  kernel's are, that move no more global bytes than XLA's kernels for the
  scope's ops are handed to never-behind as candidates (then the fastest others,
  up to :data:`KEEP` in all), which prices them with the stitched kernels and XLA's,
  on the SIMT model where the graph is small, and keeps the fastest its rules admit
  (its plan notes name the cut, its prices and what it was chosen over).

Runs with the launch search and never-behind, that is with the paper's decisions
only: a what-if switch shows the rules' raw plan.
"""
from __future__ import annotations

from dataclasses import dataclass

from ...plan.vocabulary import Barrier
from .astitch_launch import total_price

#: at most this many stage boundaries of a scope are tried as cuts (grid barriers first, then in stage order)
MAX_BOUNDARIES = 8
#: rounds of the greedy search adding one more cut to the fastest set found
GREEDY_ROUNDS = 2
#: how many cut plans of a scope never-behind prices besides the stitched kernels and XLA's
KEEP = 2


@dataclass
class ScopeCut:
    """One candidate: the scope's kernels with a new kernel started at each group index of ``at`` (``starts``:
    the dominants of the stages there), and their static estimate (predicted us; global bytes less what split
    combines' memsets move).  No cut (``at`` empty): the stitched kernels at the rules' launch
    (:func:`rule_launch`)."""
    at: tuple
    starts: tuple
    kernels: list
    us: float
    bytes: float

    def describe(self) -> str:
        """'the scope cut before reduce_sum.7 into 2 kernel(s)', or 'the stitched kernel(s) at the paper's
        launch, block 512 x grid 1'."""
        if not self.at:
            launches = ", ".join(f"block {k.block} x grid {k.grid}" for k in self.kernels)
            return f"the stitched kernel(s) at the paper's launch, {launches}"
        return f"the scope cut before {', '.join(self.starts)} into {len(self.kernels)} kernel(s)"


def rule_launch(graph, gpu, kernels: list, build) -> list:
    """The scope's stitched kernels at the rules' launch, as a candidate for never-behind (``[ScopeCut]``), or
    ``[]`` where the launch search kept that launch for every kernel (``kernels``).

    The launch search ranks launches by the static estimate, and never-behind judges them on the SIMT model
    (small graphs) or the estimate; the two count bytes differently.  On a gathered table (``t / sum(t)`` read
    at run-time rows) the search took four blocks of 128, 1% faster by the estimate, each of which reads the
    sums and the token ids: 0.3 KiB more than XLA's kernels move on the SIMT model, where the paper's one
    block of 512 reads them once.  Never-behind, which admits no stitched kernel that moves more bytes than
    XLA's, fell back to XLA's two kernels (7.8 us on H100) though the paper's launch (5.6 us, XLA's bytes) was
    admissible.  So never-behind prices the paper's launch too, where it would refuse the searched one.
    ``build(at)``: the scope's kernels, a new kernel at each group index of ``at``, each at the rules'
    launch."""
    ks = build(frozenset())
    if [_launch(k) for k in ks] == [_launch(k) for k in kernels]:
        return []
    us, nbytes = total_price(graph, gpu, ks)
    return [ScopeCut((), (), ks, us, nbytes)]


def _launch(k) -> tuple:
    """What a launch decides: the block, the grid and each stage's task splitting."""
    return k.block, k.grid, tuple(s.mapping.splits for s in k.stages)


def boundaries(groups: list, kernels: list) -> list:
    """The group indices where a cut may start a new kernel: stages that map their work differently from the
    stage before (another kind or domain), the ones behind a grid barrier of ``kernels`` (the stitched
    kernels, stages in group order) first; at most :data:`MAX_BOUNDARIES`."""
    behind_barrier, i = set(), 0
    for k in kernels:
        for s in k.stages:
            i += 1
            if s.barrier_after is Barrier.GRID or s.sync_after_combine:
                behind_barrier.add(i)
    starts, i = set(), 0
    for k in kernels:
        starts.add(i)
        i += len(k.stages)

    def shape(gr):
        base = gr.adopt or gr
        return base.kind, base.domain

    out = [j for j in range(1, len(groups)) if j not in starts and shape(groups[j]) != shape(groups[j - 1])]
    out.sort(key=lambda j: (j not in behind_barrier, j))
    return out[:MAX_BOUNDARIES]


def scope_cuts(graph, gpu, groups: list, kernels: list, build, byte_cap: float, movable=frozenset()) -> list:
    """The :data:`KEEP` best cut plans of a scope (module docstring), fastest admissible first.

    ``kernels``: the scope's stitched kernels; ``build(at, down)``: the scope's kernels with a new kernel started
    at each group index of ``at``, and at each of ``down`` (a subset) the epilogue of the stage before moved into
    the stage after (``astitch._cut_into_kernels``); ``movable``: the boundaries where that can be done;
    ``byte_cap``: the global bytes XLA's kernels move for the scope's ops (static estimate), which never-behind
    admits no more of."""
    where = boundaries(groups, kernels)
    if not where:
        return []
    options = [(j, False) for j in where] + [(j, True) for j in where if j in movable]
    quick: dict = {}

    def price(chosen: frozenset) -> tuple:
        """(over the byte cap, us) of a cut plan at the rules' launches: the search's ranking."""
        if chosen not in quick:
            at, down = _split(chosen)
            us, nbytes = total_price(graph, gpu, build(at, down))
            quick[chosen] = (nbytes > byte_cap, us)
        return quick[chosen]

    best = min((frozenset({o}) for o in options), key=price)
    for _ in range(GREEDY_ROUNDS):
        used = {j for j, _ in best}
        better = min((best | {o} for o in options if o[0] not in used), key=price, default=None)
        if better is None or price(better) >= price(best):
            break
        best = better
    out = []
    for chosen in sorted(quick, key=price)[:KEEP]:           # the kept ones, each launch searched
        at, down = _split(chosen)
        ks = build(at, down, launches=True)
        us, nbytes = total_price(graph, gpu, ks)
        order = tuple(sorted(at))
        starts = tuple(groups[j].dominant.name + (" (with the epilogue before it)" if j in down else "")
                       for j in order)
        out.append(ScopeCut(order, starts, ks, us, nbytes))
    return sorted(out, key=lambda c: (c.bytes > byte_cap, c.us))


def _split(chosen: frozenset) -> tuple:
    """``{(boundary, move the epilogue down)}`` -> (the boundaries, those where the epilogue moves down)."""
    return frozenset(j for j, _ in chosen), frozenset(j for j, d in chosen if d)
