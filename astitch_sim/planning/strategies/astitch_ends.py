"""Why an AStitch kernel ends (``astitch_sim/plan/kernel_end.py``): the stitch scope ends, or a cut inside it.

AStitch stitches a whole memory-intensive cluster into one kernel, so a kernel normally ends
where its *scope* ends (``scope_end``): each value it writes to global memory is a graph output,
is read by a library kernel (a matrix product, a sort: the compute-intensive ops that bound
the clusters), or is read by another stitch scope.  Inside a scope a kernel ends only where
Global stitching is not allowed (``global_cut``): the what-if ``global_stitching=False``, or a grid
barrier over more blocks than one wave when vertical packing is off; the kernel then ends
before the first stage that would read a Global value (``astitch._cut_into_kernels``).  A scope is also
cut before a group that reads from memory a value a later group of the same kernel would compute its own
copy of (``read_before_computed``, ``astitch._reads_before_computed``), and where never-behind's search
inside the scope chose a cut plan (``stitch_cut``, ``astitch_cuts.py``).
:func:`record_scope_ends` is called on the kernels of one scope, as ``astitch._build_kernels``
makes them; the never-behind step records its own reason when it puts XLA's kernels back.
"""
from __future__ import annotations

from ...passes.analysis import is_boundary
from ...plan.kernel_end import EndRule, end

TITLE = "AStitch"


def _last_op(k) -> str:
    computed = k.computed
    return k.stages[-1].dominant if k.stages and k.stages[-1].dominant in computed else computed[-1]


def _why_escapes(graph, n: str, scope: set) -> str:
    node = graph[n]
    if any(o.name == n for o in graph.outputs):
        return f"{n} is a graph output"
    libs = [u.name for u in node.users if is_boundary(u)]
    if libs:
        return f"{n} is read by the library kernel of {', '.join(libs)} (a compute-intensive op ends the scope)"
    others = [u.name for u in node.users if u.name not in scope]
    return f"{n} is read by {', '.join(others) or 'another kernel'} in another stitch scope"


def record_scope_ends(graph, kernels: list, scope: set, escapes: set, cuts: list, no_global: str) -> None:
    """Set ``ends`` on the kernels one stitch scope became (in order): the scope's escaping values where they
    are written, and after each kernel but the last the cut ``cuts`` names (``astitch._cut_into_kernels``);
    ``no_global`` says why Global stitching was off for a ``global_cut``."""
    for i, k in enumerate(kernels):
        ends = [end(TITLE, n, EndRule.SCOPE_END, _why_escapes(graph, n, scope) + ": the stitch scope ends here")
                for n in k.outputs if n in escapes]
        if i + 1 < len(kernels):
            nxt = kernels[i + 1]
            if cuts[i] is EndRule.GLOBAL_CUT:
                why = (f"no Global stitching ({no_global}): the next stage (dominant {nxt.stages[0].dominant}, now "
                       f"{nxt.name}) would read a value of this kernel across blocks after a grid barrier, so the "
                       "kernel ends here")
            elif cuts[i] is EndRule.STITCH_CUT:
                why = (f"the stitch scope cut before the next stage (dominant {nxt.stages[0].dominant}, now "
                       f"{nxt.name}): never-behind's search inside the scope priced this cut plan against the "
                       "stitched kernels and XLA's and kept it (the plan notes give the prices)")
            else:
                why = (f"the next stage (dominant {nxt.stages[0].dominant}, now {nxt.name}) reads from memory a "
                       "value a stage of this kernel would compute its own copy of after it")
            ends.append(end(TITLE, _last_op(k), cuts[i], why))
        k.ends = ends


def never_behind_end(k, stitched: str, why: str):
    """The reason an XLA kernel the never-behind step put back ends where XLA ends it: XLA's own reasons follow."""
    return end(TITLE, _last_op(k), EndRule.NEVER_BEHIND,
               f"XLA's kernel kept in place of {stitched}: stitching these ops would cost {why}; XLA's reasons follow")
