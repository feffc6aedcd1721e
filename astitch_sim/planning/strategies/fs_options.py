"""Options of the FusionStitching strategy: how hard the search may look.

FusionStitching (Zheng et al., 2020: AStitch's predecessor) does not decide by
rules; it *searches* fusion patterns and schedules and keeps what a cost model
says is fastest.  A search needs bounds, so these are its knobs::

    asim.compile(g, strategy="fusionstitching", gpu="V100", beam_width=4, search_budget=500)

The plan records the options it was compiled with in ``plan.options`` (only
those that differ from the defaults), and what the search looked at in
``plan.search``.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import ClassVar

from ...errors import AStitchError
from .option_set import OptionSet

#: block sizes a schedule may use (threads per block)
BLOCK_CHOICES = (128, 256, 512, 1024)
#: schedules the search may price per graph (XLA's kernels included).  The search is budgeted in work, not
#: in wall-clock time, so one input gives one plan on every machine, loaded or not.  The GPT training step,
#: the largest fixture, needs 670 (139 fusion patterns over XLA's kernels; 906 before the xla strategy took
#: XLA's GPU rules, issue 28); every catalog workload and test fixture finishes its search under this default.
SEARCH_BUDGET = 2000


@dataclass(frozen=True)
class FusionStitchingOptions(OptionSet):
    """Bounds and knobs of the FusionStitching search."""

    STRATEGY: ClassVar[str] = "fusionstitching"
    KIND: ClassVar[str] = "search options"

    search_budget: int = SEARCH_BUDGET
    beam_width: int = 3
    max_merge: int = 8
    block_sizes: tuple = BLOCK_CHOICES
    min_gain: float = 0.02

    HELP: ClassVar[dict] = {
        "search_budget": "schedules the search may price per graph (a count of work, so the plan is the same on "
                         "every machine); when it is spent, no new merges are explored and the best plan found so "
                         "far is kept (XLA's boundaries are always there)",
        "beam_width": "partial fusion plans kept per position of the kernel sequence (the beam); the plan "
                      "records these alternatives",
        "max_merge": "most XLA kernels one fusion pattern may stitch together (the exploration window)",
        "block_sizes": "threads per block the schedule tuner tries for every fused kernel",
        "min_gain": "a fused kernel or re-tuned schedule replaces XLA's only if the cost model predicts it "
                    "at least this fraction faster (guards against the model's own error)",
    }

    def __post_init__(self):
        budget = self.search_budget
        if isinstance(budget, bool) or not isinstance(budget, int) or budget < 1:
            raise AStitchError(f"fusionstitching option search_budget must be a positive number of schedules "
                               f"to price, got {budget!r}")
        for name, low in (("beam_width", 1), ("max_merge", 1)):
            v = getattr(self, name)
            if isinstance(v, bool) or not isinstance(v, int) or v < low:
                raise AStitchError(f"fusionstitching option {name} must be an integer >= {low}, got {v!r}")
        sizes = self.block_sizes
        if not isinstance(sizes, (tuple, list)) or not sizes or any(
                isinstance(b, bool) or not isinstance(b, int) or b < 32 or b > 1024 or b & (b - 1) for b in sizes):
            raise AStitchError(f"fusionstitching option block_sizes must be a non-empty list of powers of two "
                               f"from 32 to 1024, got {sizes!r}")
        object.__setattr__(self, "block_sizes", tuple(sorted(set(sizes))))
        gain = self.min_gain
        if isinstance(gain, bool) or not isinstance(gain, (int, float)) or not 0 <= gain < 1:
            raise AStitchError(f"fusionstitching option min_gain must be a fraction in [0, 1), got {gain!r}")
