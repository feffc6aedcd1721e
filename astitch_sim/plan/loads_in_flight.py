"""How many of a lane's row trips load together: a decision that registers, not bytes, limit.

A row read in vectors in at most :data:`~astitch_sim.plan.row_vectors.MAX_TRIPS` trips per lane is
written out trip by trip, and the lane issues its trips' loads before it computes any of them
(``gpu_backend/codegen/task_loops.write_vector_trips``): its whole share of the row in flight at once,
which is what keeps DRAM busy (``astitch_sim/simt/cost.elements_in_flight``).  But a load in flight
holds its registers until it is used, and a big block leaves each thread few: a block of 1024 threads
may use at most 64 registers per thread on every preset.  Cross-entropy's first XLA kernel over
32000 columns gives each row 1024 lanes of 8 trips, and each trip loads a 4-element vector of the
logits and one of the labels: 64 registers of loads alone.  ptxas (sm_90, capped at 64) spilled 64
bytes per thread; the stitched kernel, which also keeps the logits in registers for its next stage,
spilled 124.  Loading 4 trips at a time (their loads, their computation, then the next 4 trips' loads),
neither spills.

How many registers a kernel's code takes only the compiler knows (ptxas reorders loads where it can,
and a warp-per-row layer norm keeps 6 trips of two vectors in flight in 44 registers), so the decision
is the compiler's, as the paper's assume-relax-apply makes the register cap: the planner writes every
trip's loads first (``load_trips`` 0), and where ptxas says the kernel still spills at the most
registers its block may hold, ``gpu_backend.apply_compiler`` halves the trips loaded together until it
does not (:func:`groups_to_try`), keeps the largest group that spills least, and records it on each
row stage's :class:`~astitch_sim.plan.mapping.ThreadMapping` (``load_trips``) with a note saying why.
``print(plan)`` shows it ("loads 4 trip(s) at a time"), the code generator writes the trips in those
groups, and the cost model counts that many trips' elements in flight (:func:`trips_in_flight`).  The
same rule for every strategy's kernels.
"""
from __future__ import annotations

from dataclasses import replace

from .row_vectors import MAX_TRIPS


def trips_in_flight(m) -> int:
    """Trips whose loads a lane of ``m`` issues together: ``load_trips`` (every trip where 0) for a row
    read in vectors in at most ``MAX_TRIPS`` trips (written out); one trip per loop round beyond that;
    for a column lane with vectors, ``load_trips`` reduced rows per loop round (one where 0:
    ``plan/column_vectors.py`` sets it); 0 for a mapping without vectors along its tasks."""
    if m.kind not in ("rows", "columns") or m.vector < 2:
        return 0
    if m.kind == "columns":
        return max(1, min(m.load_trips or 1, m.trips))
    if m.trips > MAX_TRIPS:
        return 1
    return min(m.load_trips or m.trips, m.trips)


def groups_to_try(kernel) -> list:
    """Fewer trips loaded together, largest first (half, a quarter, ... one), for a kernel whose row stages
    load more than one trip at a time; [] where none does."""
    most = max((trips_in_flight(s.mapping) for s in kernel.stages), default=0)
    out, g = [], most // 2
    while g >= 1:
        out.append(g)
        g //= 2
    return out


def with_load_trips(kernel, group: int):
    """A copy of ``kernel`` whose row (and column-vector) stages load at most ``group`` trips at a time."""
    stages = [replace(s, mapping=replace(s.mapping, load_trips=group)) if trips_in_flight(s.mapping) > group
              else s for s in kernel.stages]
    return replace(kernel, stages=stages)
