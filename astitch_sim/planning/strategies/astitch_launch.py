"""AStitch's launch choice, priced: the paper's launch and a few alternatives of the same stitched kernel.

The paper's step 7 (assume-relax-apply) *assumes* 1024 threads per block, and its
task-splitting rule splits few long rows over blocks whenever a wave has room.
Both are rules, and on small stitch scopes the cost model disagrees with them:
a 16x4096 softmax split over 64 blocks of 1024 threads needs a memset and two
grid barriers (about 5.5 us on H100) that 16 rows of one block each do not; a
layer norm of 60 elements on 2 blocks of 64 threads keeps fewer loads in flight
than one block of 1024.  FusionStitching, which prices each kernel under several
block sizes, then beats AStitch on AStitch's own cost model -- although every
kernel it can draw, AStitch can draw too (same stages, same stitch schemes).

So, after the rules have decided *what* a kernel stitches (groups, stages,
schemes), its *launch* is priced:

* **Candidates.**  The paper's launch (the rule's block size, rows split by the
  task-splitting rule); the same kernel at each of :data:`BLOCK_CHOICES` threads
  per block (within the block cap of the options and of the assumed registers);
  and each of these without task splitting, when the paper's launch splits a
  row or column (then there is no combine: no memset, no atomics, and often no
  grid barrier).  Which values are Regional or Global, the one-wave cap of a grid
  barrier and the register relaxation follow from each launch exactly as for the
  paper's (the kernel is assembled and checked by the same code).
* **Price.**  The static estimate of :mod:`.fs_cost` -- the counters
  FusionStitching's search uses, given to the SIMT model's own formula
  (:func:`astitch_sim.simt.cost.predict_kernel`): microseconds per candidate.
* **Choose.**  The fastest; the paper's launch unless an alternative is
  predicted faster by more than :data:`MIN_GAIN` (a rounding-size difference
  does not replace what the paper would draw).  The kernel's notes
  (``print(plan)``, the JSON) say which launch was chosen and list every
  candidate with its predicted time.

``asim.compile(g, "astitch", gpu, launch_search=False)`` switches this off: the
paper's launch rule alone.  Like never-behind, the search runs only with the
paper's other decisions: a what-if switch shows the rule's raw effect.
"""
from __future__ import annotations

from dataclasses import dataclass, field

from .fs_cost import kernel_counters, priced

#: block sizes priced besides the rule's (FusionStitching's schedule choices, ``fs_options.BLOCK_CHOICES``)
BLOCK_CHOICES = (128, 256, 512, 1024)
#: an alternative replaces the paper's launch only if predicted faster by more than this fraction (the static
#: estimate can be off by about 1% against the SIMT model near a tie)
MIN_GAIN = 0.01
#: a scope cut at its grid barriers may move this fraction more global bytes than the barrier did: the sectors
#: its two launch shapes leave partly used (:func:`choose_cut`), not values sent through global memory
CUT_BYTE_SLACK = 1e-4
#: the prefix of the kernel note this step writes
NOTE_PREFIX = "launch search"


@dataclass(frozen=True)
class Launch:
    """One candidate launch of a stitched kernel: threads per block, and whether task splitting may apply."""
    block: int
    split: bool = True

    def describe(self, kernel) -> str:
        splits = max((s.mapping.splits for s in kernel.stages), default=1)
        how = f"rows split over {splits} blocks" if splits > 1 else ("no split" if not self.split else "unsplit")
        barriers = f", {kernel.global_barriers} grid barrier(s)" if kernel.global_barriers else ""
        # row vectors may launch fewer threads than the block the search asked for (a row's lanes, fewer
        # than the block): name both, or a user reads a block size the kernel does not run
        launched = f" (launched with {kernel.block} threads)" if kernel.block != self.block else ""
        return f"block {self.block}{launched} x grid {kernel.grid}, {how}{barriers}"


@dataclass(frozen=True)
class Search:
    """The launch search is on for a scope.  ``byte_cap``: the global bytes XLA's kernels move for the
    scope's ops (static estimate).  A launch may move more bytes than the rule's -- a smaller block re-reads
    a row's broadcast operands (layer norm's gamma and beta) once per block -- up to that cap, which
    never-behind's byte rule would allow anyway; beyond it the launch is refused.

    ``built``: the scope's kernels already assembled, per launch and inputs (``astitch._build_kernel``).
    The search builds the chosen launch again, and :func:`choose_cut` builds the stitched kernels again
    after pricing the cut ones; each of those assemblies is one the search already made."""
    byte_cap: float = 0.0
    built: dict = field(default_factory=dict, compare=False, hash=False, repr=False)


def xla_scope_bytes(graph, gpu, xla):
    """``names -> bytes``: the static estimate of the global bytes XLA's kernels computing any of ``names``
    move.  ``xla``: XLA's plan of ``graph`` (``never_behind.xla_partition``: the plan never-behind compares
    with, built once per compile)."""
    moved = []
    for k in xla.kernels:
        if k.kind == "library":
            continue
        moved.append((set(k.computed), float(kernel_counters(graph, k).global_bytes)))
    return lambda names: sum(b for ops, b in moved if ops & set(names))


def candidates(rule_block: int, cap: int, splits: bool) -> list:
    """The launches to price: the rule's first, then each block choice within ``cap``; each also without
    task splitting when the rule's kernel splits something (``splits``)."""
    blocks = [rule_block] + [b for b in BLOCK_CHOICES if b <= cap and b != rule_block]
    out = [Launch(b) for b in blocks]
    if splits:
        out += [Launch(b, split=False) for b in blocks]
    return out


def choose_launch(graph, gpu, build, rule_block: int, cap: int, byte_cap: float = 0.0):
    """The stitched kernel at its cheapest launch, with a note listing every candidate's predicted time.

    ``build(launch)`` assembles the kernel at ``launch`` and returns ``(kernel, cut)`` as
    ``astitch._build_kernel`` does (``cut`` not None: the kernel must end early; no search then).  The
    chosen launch is built last, so the planner's state (each group's split count) is the chosen one's."""
    rule = Launch(rule_block)
    first, cut = build(rule)
    if first is None or _loop_kernel(first):
        return first, cut
    splits = any(s.mapping.splits > 1 for s in first.stages)
    us, rule_bytes = _price(graph, gpu, first)
    priced = [(rule, first, us)]
    refused = []
    for launch in candidates(rule_block, cap, splits)[1:]:
        k, c = build(launch)
        if k is None or c is not None:
            continue
        us, nbytes = _price(graph, gpu, k)
        if nbytes > max(rule_bytes, byte_cap):    # never-behind judges bytes too: none beyond XLA's
            refused.append((launch, k, us))
            continue
        priced.append((launch, k, us))
    best = min(priced, key=lambda p: p[2])
    rule_us = priced[0][2]
    chosen = best if best[2] < rule_us * (1 - MIN_GAIN) else priced[0]
    kernel, cut = build(chosen[0])
    if len(priced) + len(refused) > 1:
        kernel.notes.append(_note(chosen, priced, refused))
    return kernel, cut


def _loop_kernel(kernel) -> bool:
    """One stage, no reduce, no grid barrier: the loop kernel every strategy makes of a flat graph (Adam,
    bias+GELU) stitches nothing, so it keeps the launch XLA gives it -- a faster grid found here would be a
    speedup over xla that does not come from stitching (``tests/planning/test_fairness.py``)."""
    return len(kernel.stages) == 1 and not kernel.stages[0].reduces and not kernel.global_barriers


def _price(graph, gpu, kernel) -> tuple:
    """(predicted us, global bytes less what split combines move) of ``kernel`` from the static estimate.

    The estimate counts a combine's memset in its bytes (its atomics and grid-barrier partials only as
    operations), so the memset is what comes off: the bytes left are those never-behind allows no more of."""
    [ks] = priced(graph, gpu, [kernel])
    return ks.predicted_us, ks.global_bytes - ks.memset_bytes


def _note(chosen, priced, refused=()) -> str:
    launch, k, us = chosen
    seen, rows = set(), []
    for cand, ck, cus in priced:
        text = cand.describe(ck)
        if text in seen:
            continue
        seen.add(text)
        tag = " (paper's rule)" if cand is priced[0][0] else ""
        rows.append(f"{text}{tag} {cus:.2f} us")
    why = ("the paper's rule" if launch is priced[0][0] else
           f"{priced[0][2] / us:.2f}x faster than the paper's rule")
    more = [f"{cand.describe(ck)} {cus:.2f} us" for cand, ck, cus in refused]
    return (f"{NOTE_PREFIX}: chose {launch.describe(k)} ({us:.2f} us, static estimate; {why}); priced: "
            + "; ".join(rows) + (f"; refused for more global bytes than the paper's launch and XLA's kernels move: {'; '.join(more)}"
               if more else ""))


def choose_cut(graph, gpu, build, stitched: list):
    """A stitch scope's kernels with their grid barriers, or the scope cut at them, whichever is cheaper.

    A grid barrier costs about as much as a kernel launch in the cost model (all blocks meet; a cooperative
    launch), and a Global value is written to and read from global memory either way, so where the stages
    after a barrier can share one kernel, ending the kernel there may be cheaper than the barrier.
    ``build(cut_at_barriers)`` makes the scope's kernels (as ``astitch._cut_into_kernels``); ``stitched``:
    the kernels with the barriers.  Returns ``(kernels, why)``: ``why`` (the cut's reason, for the
    kernels' ends) is None when the stitched kernels are kept.  Chosen as :func:`choose_launch` chooses:
    predicted faster by more than :data:`MIN_GAIN`, and no more global bytes than the stitched kernels move,
    within :data:`CUT_BYTE_SLACK` of them.  The cut writes and re-reads the values crossing it as the grid
    barrier did, but with another launch shape on each side their partly used sectors differ:
    ``models/xent_integer_labels``' cut moved 0.5 KiB more of 125 MiB (4e-6) and, with the barrier's 1.6x
    slower on H100 by the same estimate (49.9 against 31.2 us), was refused.  A cut that sends more values
    through global memory than the barrier did is still refused: judged by XLA's bytes instead (as a launch
    is, ``byte_cap``), the H200's GPT training step took 23 more cuts, 10% faster, and moved 2.5% more bytes
    than XLA's plan on the SIMT model (the static estimate, which never-behind trusts at that size, said
    fewer).  The first kernel's note says what both cost."""
    a_us, a_bytes = total_price(graph, gpu, stitched)
    cut = build(True)
    c_us, c_bytes = total_price(graph, gpu, cut)
    take = c_us < a_us * (1 - MIN_GAIN) and c_bytes <= a_bytes * (1 + CUT_BYTE_SLACK)
    barriers = sum(k.global_barriers for k in stitched)
    words = (f"{len(stitched)} kernel(s) with {barriers} grid barrier(s) {a_us:.2f} us, {_kib(a_bytes)}; cut at the "
             f"barriers into {len(cut)} kernel(s) {c_us:.2f} us, {_kib(c_bytes)} (static estimate)")
    kernels = cut if take else build(False)
    if take:
        why = f"the launch search: the scope cut at its grid barriers is predicted faster ({words})"
        kernels[0].notes.append(f"{NOTE_PREFIX}: cut the stitch scope at its grid barriers: {words}")
        return kernels, why
    kernels[0].notes.append(f"{NOTE_PREFIX}: kept the grid barriers: {words}")
    return kernels, None


def total_price(graph, gpu, kernels) -> tuple:
    """(predicted us, global bytes less split combines' memsets) of ``kernels`` together, from the static
    estimate (:func:`_price` summed): how a scope's kernels are priced against its cut plans."""
    us = nbytes = 0.0
    for k in kernels:
        u, b = _price(graph, gpu, k)
        us, nbytes = us + u, nbytes + b
    return us, nbytes


def _kib(nbytes: float) -> str:
    return f"{nbytes / 1024:.1f} KiB"
