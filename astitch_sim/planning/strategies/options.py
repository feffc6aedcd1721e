"""What-if switches of the AStitch strategy: turn off one decision at a time and see what it was worth.

The paper's AStitch is a bundle of decisions -- pack short rows into one block,
split long rows over blocks, pass values through shared memory (Regional) or
global memory behind a grid barrier (Global), keep values in registers between
stages, 1024-thread blocks.  Each switch below turns one of them off, so a
learner (or the explorer's What-if view) can see what that decision buys in
kernels, bytes and predicted time::

    asim.compile(g, strategy="astitch", gpu="V100", global_stitching=False)

Every switched plan is still a correct plan: it simulates to the numpy
reference and passes ``plan.validate()``.  The switches a plan was compiled
with are recorded in ``plan.options`` (only those that differ from the
default; ``{}`` is the paper's AStitch).
"""
from __future__ import annotations

from dataclasses import dataclass, fields
from typing import ClassVar

from ...errors import AStitchError
from .option_set import OptionSet


@dataclass(frozen=True)
class AStitchOptions(OptionSet):
    """The decisions of the AStitch strategy that can be switched off (all on by default)."""

    STRATEGY: ClassVar[str] = "astitch"
    KIND: ClassVar[str] = "what-if options"

    horizontal_packing: bool = True
    vertical_packing: bool = True
    task_splitting: bool = True
    regional_stitching: bool = True
    global_stitching: bool = True
    register_reuse: bool = True
    max_block_threads: int = 1024
    never_behind: bool = True
    launch_search: bool = True
    assumed_registers: int = 32

    #: what each switch does when turned off (or, for the cap, lowered); the explorer shows these words
    HELP: ClassVar[dict] = {
        "horizontal_packing": "off: one row per block (a block as wide as the row), as the paper's XLA mapped row "
                              "reductions -- <750000,32> becomes 750000 blocks of 32 threads",
        "vertical_packing": "off: the grid is never capped at one wave by looping blocks over several "
                            "tasks; a kernel whose grid does not fit one wave cannot hold a grid barrier "
                            "(it would deadlock), so it ends at each Global value instead",
        "task_splitting": "off: a row (or column) is never split over several blocks -- <64,30000> runs "
                          "on 64 blocks while the GPU could hold more",
        "regional_stitching": "off: no value crosses stages through shared memory; values that would "
                              "be Regional go through global memory behind a grid barrier",
        "global_stitching": "off: no value crosses stages through global memory and no grid barrier: "
                            "the kernel ends where a Global value would be needed (more kernels)",
        "register_reuse": "off: no value is kept in registers from one stage to a later one; the "
                          "later stage recomputes it (cheap ops) or reads it from memory",
        "max_block_threads": "a cap on threads per block (a power of two, 32..1024) instead of "
                             "AStitch's assumed 1024",
        "never_behind": "off: the raw stitch plan, even where stitching part of the graph moves more global "
                        "bytes or is predicted slower than XLA's kernels for the same ops (on: XLA's "
                        "boundaries are kept there, and the plan's notes say why; applied only when no "
                        "other switch is changed, so a switch shows the raw effect of its decision)",
        "launch_search": "off: every stitched kernel is launched by the paper's rules alone (1024-thread blocks "
                         "assumed, long rows split over blocks when a wave has room, Global values behind grid "
                         "barriers); on: the same kernel is also priced at other block sizes and without task "
                         "splitting, and a scope with grid barriers also cut at them, and the fastest kept (kernel "
                         "notes list the candidates; applied only when no stitching switch is changed; never-behind "
                         "still applies with it off)",
        "assumed_registers": "the registers per thread AStitch assumes when it sizes one wave (the 'assume' "
                             "of assume-relax-apply; 32 in the paper): more registers, fewer resident blocks, "
                             "so a grid-barrier kernel gets a smaller grid with more tasks per block. "
                             "gpu_backend.apply_compiler re-plans with ptxas's count when a cooperative "
                             "kernel would spill at 32",
    }

    #: options that are planning inputs, not decisions switched off: never_behind still applies with them
    INPUTS: ClassVar[tuple] = ("assumed_registers",)
    #: switches never_behind still applies with: ``launch_search=False`` is the paper's launch rules, priced
    #: against XLA's kernels as the paper's plan always was
    PRICED_WITH: ClassVar[frozenset] = frozenset({"launch_search"})

    def __post_init__(self):
        for f in fields(self):
            v = getattr(self, f.name)
            if f.type in (bool, "bool") and not isinstance(v, bool):
                raise AStitchError(f"astitch option {f.name} must be True or False, got {v!r}")
        cap = self.max_block_threads
        if isinstance(cap, bool) or not isinstance(cap, int) or cap < 32 or cap > 1024 or cap & (cap - 1):
            raise AStitchError(f"astitch option max_block_threads must be a power of two from 32 to 1024, "
                               f"got {cap!r}")
        regs = self.assumed_registers
        if isinstance(regs, bool) or not isinstance(regs, int) or not 16 <= regs <= 255:
            raise AStitchError(f"astitch option assumed_registers must be an integer from 16 to 255 (registers "
                               f"per thread), got {regs!r}")
