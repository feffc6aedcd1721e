"""What the explorer says about a kernel's boundaries and barriers, read from the plan and the cost model.

The explorer decides nothing: why a kernel ends is what the strategy recorded in the plan
(``Kernel.ends``, ``astitch_sim/plan/kernel_end.py``); how many block barriers a kernel has is the
count the SIMT model counts and the cost model charges, worked out from the plan alone
(``simt.cost.block_barriers_per_block``: instant at any size; ``tests/simt/test_cost.py`` checks it
against simulated counters).  Stage boundaries are only part of it: a reduction tree synchronises
once per fold, a shuffle reduction once when its tasks span warps.
"""
from __future__ import annotations

import html

from astitch_sim.simt.cost import block_barriers_per_block


def block_barriers(plan, index: int) -> int:
    """Block barriers each block of kernel ``index`` executes, as the cost model charges them."""
    k = plan.kernels[index]
    if k.kind != "generated":
        return 0
    return block_barriers_per_block(k)


def barrier_text(plan, index: int) -> str:
    """'N block barrier(s) per block (...), M grid barrier(s)' for kernel ``index``."""
    k = plan.kernels[index]
    n = block_barriers(plan, index)
    between = k.block_barriers
    parts = [f"{between} between stages"] if between else []
    if n > between:
        parts.append("the rest in reductions (tree folds, shuffle steps across warps)")
    detail = f" ({'; '.join(parts)}; as the cost model charges)" if parts else " (as the cost model charges)"
    return f"{n:g} block barrier(s) per block{detail}, {k.global_barriers} grid barrier(s)"


def end_label(k) -> str:
    """Short, for the kernel's box in the picture: 'ends at power.1 (expensive_reused)'."""
    seen = list(dict.fromkeys(f"{e.node} ({e.rule})" for e in k.ends))
    return "ends at " + ", ".join(seen) if seen else ""


def end_html(e, kernel: str = "") -> str:
    """One recorded reason as a line of the page (text escaped, quotes kept readable)."""
    def t(x):
        return html.escape(str(x), quote=False)
    where = f"kernel {t(kernel)} " if kernel else ""
    src = f" <i>[{t(e.source)}]</i>" if e.source else ""
    return f"<div class='why'>{where}<b>ends at {t(e.node)}</b> ({t(e.rule)}): {t(e.why)}{src}</div>"
