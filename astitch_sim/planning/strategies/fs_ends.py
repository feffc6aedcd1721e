"""Why a FusionStitching kernel ends: what the search saw at the cut it chose (``astitch_sim/plan/kernel_end.py``).

The search covers each run of XLA kernels (between library kernels) with fusion patterns
(``fusionstitching._Search.run``); a chosen pattern ``run[i:j]`` ends before XLA kernel
``run[j]``.  Why, from the search's own table ``info`` of priced patterns:

* ``j`` is the end of the run: the next kernel is a library kernel, or the graph ends (``scope_end``);
* the pattern ``run[i:j+1]`` was priced and is illegal: no schedule keeps every value crossing
  its stages in registers or shared memory (``search_illegal``, with the builder's reason);
* it was priced and legal, but the cheapest cover cuts here (``search_choice``, with both prices);
* it was never priced because a shorter pattern ending at ``run[j]`` is already illegal (the search
  does not extend an illegal pattern further back): ``search_illegal``;
* it was never priced otherwise: longer than ``max_merge``, or the ``search_budget`` was spent
  (``search_limit``).
"""
from __future__ import annotations

from ...plan.kernel_end import EndRule, end

TITLE = "FusionStitching"


def search_end(base, run: list, info: dict, i: int, j: int, opts, budget_hit: bool):
    """The :class:`~astitch_sim.plan.kernel_end.KernelEnd` of the chosen pattern ``run[i:j]`` (module docstring)."""
    last = base.kernels[run[j - 1]]
    node = last.stages[-1].dominant
    if j == len(run):
        after = next((k for k in base.kernels[run[-1] + 1:]), None)
        what = f"the library kernel {after.name}" if after is not None else "the end of the graph"
        return end(TITLE, node, EndRule.SCOPE_END, f"the run of XLA kernels it may stitch ends here: next is {what}")
    nxt = base.kernels[run[j]].name
    grown = info.get((i, j + 1))
    if grown is None:
        shorter = next((k for k in range(i + 1, j + 1) if info.get((k, j + 1), (0,))[0] is None), None)
        if shorter is not None:         # the search does not extend an illegal pattern further back
            inner = info[(shorter, j + 1)][2]
            why = next((c.verdict for c in inner if c.predicted_us is None and c.verdict), "no legal schedule")
            return end(TITLE, node, EndRule.SEARCH_ILLEGAL,
                       f"stitching in {nxt} is illegal: already its pattern with "
                       f"{base.kernels[run[shorter]].name} is ({why})")
        limit = (f"a pattern of {j + 1 - i} XLA kernels exceeds max_merge={opts.max_merge}"
                 if j + 1 - i > opts.max_merge else f"the search_budget of {opts.search_budget} schedules was spent")
        return end(TITLE, node, EndRule.SEARCH_LIMIT, f"stitching in {nxt} was not explored: {limit}")
    us, _, cands = grown
    if us is None:
        why = next((c.verdict for c in cands if c.predicted_us is None and c.verdict), "no legal schedule")
        return end(TITLE, node, EndRule.SEARCH_ILLEGAL, f"stitching in {nxt} is illegal: {why}")
    mine = info[(i, j)][0]
    return end(TITLE, node, EndRule.SEARCH_CHOICE,
               f"stitching in {nxt} is legal ({us:.2f} us for the pattern) but the search's cheapest cover cuts "
               f"here ({mine:.2f} us for this kernel, then the rest of the run priced on its own)")
