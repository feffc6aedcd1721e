"""What a search-based strategy looked at, and why its winner won (``plan.search``).

FusionStitching decides by search, not rules, so its plan carries the search
itself: every fusion pattern's schedules it scored, the partial plans its beam
kept, and the totals.  The record is plain data (a dict of lists and numbers)
so it goes through ``plan.to_json()`` unchanged; :class:`SearchRecord` is the
typed view a strategy fills in, and :func:`format_search` is what ``print(plan)``
and the explorer show.
"""
from __future__ import annotations

from dataclasses import asdict, dataclass, field


@dataclass
class ScheduleCandidate:
    """One schedule of one fusion pattern, as the cost model priced it."""
    schedule: str                      # e.g. "block 512, rows packed" or "XLA's own kernel"
    predicted_us: float | None         # None: not a legal FusionStitching kernel
    verdict: str                       # "chosen", "slower", or why it is illegal


@dataclass
class KernelSearch:
    """The search behind one kernel of the plan."""
    kernel: str                        # the plan kernel's name
    stitched: list                     # names of the XLA kernels it replaces (one: a kernel kept or re-tuned)
    candidates: list                   # ScheduleCandidate, in the order tried
    why: str                           # why the winner won, in words


@dataclass
class PartitionCandidate:
    """A whole fusion plan the beam kept: how the XLA kernels were grouped, what it costs."""
    groups: list                       # sizes of consecutive groups of XLA kernels (1: kept)
    kernels: int
    predicted_us: float


@dataclass
class SearchRecord:
    xla_kernels: int
    xla_us: float                      # XLA's generated kernels, by the same cost model
    chosen_us: float                   # the chosen plan's generated kernels
    patterns_scored: int               # fusion patterns (groups of XLA kernels) tried
    schedules_scored: int              # schedules priced by the cost model
    elapsed_ms: float
    budget_hit: bool
    kernels: list = field(default_factory=list)          # KernelSearch, per generated kernel of the plan
    alternatives: list = field(default_factory=list)     # PartitionCandidate, best first

    def to_dict(self) -> dict:
        return asdict(self)


def format_search(d: dict, max_candidates: int = 6) -> list:
    """``plan.search`` as text lines (``print(plan)`` shows them under the plan's header)."""
    if not d:
        return []
    lines = [f"search: {d['patterns_scored']} fusion patterns, {d['schedules_scored']} schedules scored in "
             f"{d['elapsed_ms']:.0f} ms" + (" (search budget spent: kept the best so far)" if d["budget_hit"] else "")
             + f"; predicted {d['chosen_us']:.2f} us vs XLA's {d['xla_kernels']} kernels {d['xla_us']:.2f} us"]
    for alt in d.get("alternatives", [])[:3]:
        lines.append(f"  beam: {alt['kernels']} kernels, groups of XLA kernels {alt['groups']}: "
                     f"{alt['predicted_us']:.2f} us")
    for ks in d.get("kernels", []):
        lines.append(f"  {ks['kernel']}: from {', '.join(ks['stitched'])} -- {ks['why']}")
        shown = ks["candidates"][:max_candidates]
        for c in shown:
            us = "   --   " if c["predicted_us"] is None else f"{c['predicted_us']:8.2f}"
            lines.append(f"      {us} us  {c['schedule']:<30} {c['verdict']}")
        if len(ks["candidates"]) > len(shown):
            lines.append(f"      ... {len(ks['candidates']) - len(shown)} more")
    return lines
