"""One stage of a trace as arrows between memory and threads (GPU-Puzzles style).

``asim.simulate(plan, inputs, trace=True)`` records every access of every
thread.  For one block and one stage this draws:

* at the top, the global-memory tensors the stage *reads*, one row of cells per
  tensor (only the elements this block touches);
* in the middle, the block's threads;
* below them, the shared-memory values the stage writes or reads (Regional
  stitching: the one-to-many hand-over between threads of a block);
* at the bottom, the global-memory tensors the stage *writes* (outputs, Global
  values, atomics);

with an arrow per access: memory -> thread for a read, thread -> memory for a
write.  Register traffic (Local stitching) never leaves the thread, so it has no
arrow; the panel counts it.  Reduction-tree scratch traffic is not traced (see
``simt/trace.py``).
"""
from __future__ import annotations

from ..errors import AStitchError
from .backend import figure_and_axes
from ..plan.vocabulary import Space

KIND_COLOURS = {"read": "#1f5fbf", "write": "#e07b00", "atomic": "#c62828"}
PHASE_NAMES = ("elements", "combine", "epilogue")


def _rows(events):
    """Ordered memory rows: (band, space, node) -> sorted element list."""
    rows: dict = {}
    for e in events:
        if e.space == Space.REGISTER:
            continue
        if e.space == Space.GLOBAL:
            band = 0 if e.kind == "read" else 3
        else:
            band = 2
        rows.setdefault((band, e.space, e.node), set()).add(e.element)
    return {k: sorted(v) for k, v in sorted(rows.items(), key=lambda kv: (kv[0][0], kv[0][2]))}


def draw_accesses(trace, stage: int = 0, kernel: int = 0, block: int = 0, threads=None, ax=None,
                  max_threads: int = 64, title: str | None = None):
    """Draw the memory accesses of ``block``'s threads in ``stage`` of ``kernel``; returns the Figure.

    ``trace`` is ``res.trace`` of ``asim.simulate(plan, inputs, trace=True)``; ``threads``
    optionally limits the drawing to some thread numbers (default: every thread with an access,
    at most ``max_threads``).
    """
    if trace is None:
        raise AStitchError("draw_accesses needs a trace: res = asim.simulate(plan, inputs, trace=True); "
                           "draw_accesses(res.trace, stage=...)")
    sel = trace.filter(kernel=kernel, stage=stage, block=block)
    events = sel.events
    if threads is not None:
        wanted = set(int(t) for t in threads)
        events = [e for e in events if e.thread in wanted]
    if not events:
        raise AStitchError(f"no traced access in kernel {kernel}, stage {stage}, block {block}"
                           + (f" by threads {sorted(threads)}" if threads is not None else "")
                           + ": pick a stage, block and threads that exist (see print(plan))")
    tids = sorted({e.thread for e in events})[:max_threads]
    keep = set(tids)
    events = [e for e in events if e.thread in keep]
    rows = _rows(events)
    fig, ax = figure_and_axes(ax, (11.0, 1.2 + 0.75 * (len(rows) + 1)))
    from matplotlib.patches import Rectangle
    width = 100.0
    # vertical positions: global reads on top, threads, shared, global writes at the bottom
    order = [k for k in rows if k[0] == 0] + ["threads"] + [k for k in rows if k[0] == 2] + \
            [k for k in rows if k[0] == 3]
    ypos = {k: i * 1.6 for i, k in enumerate(order)}
    cell = {}
    for key, elems in rows.items():
        band, space, node = key
        w = width / len(elems)
        y = ypos[key]
        face = {"global": "#eeeeee", "shared": "#cfe0fa"}[space]
        for j, el in enumerate(elems):
            ax.add_patch(Rectangle((j * w, y - 0.3), w * 0.95, 0.6, facecolor=face, edgecolor="#777777", lw=0.5))
            cell[(key, el)] = (j * w + w * 0.475, y)
            if len(elems) <= 40:
                ax.text(j * w + w * 0.475, y, ",".join(map(str, el)), ha="center", va="center", fontsize=5)
        ax.text(-1.5, y, f"{node}\n({space})", ha="right", va="center", fontsize=7.5)
    ty = ypos["threads"]
    tw = width / len(tids)
    tx = {t: i * tw + tw * 0.475 for i, t in enumerate(tids)}
    ax.scatter(list(tx.values()), [ty] * len(tx), s=28 if len(tids) <= 32 else 12, color="#444444", zorder=3)
    if len(tids) <= 64:
        for t, x in tx.items():
            ax.text(x + tw * 0.3, ty - 0.12, str(t), ha="left", va="bottom", fontsize=5, zorder=4)
    ax.text(-1.5, ty, f"threads of\nblock {block}", ha="right", va="center", fontsize=7.5)
    registers = 0
    for e in events:
        if e.space == Space.REGISTER:
            registers += 1
            continue
        band = 0 if (e.space == Space.GLOBAL and e.kind == "read") else (2 if e.space == Space.SHARED else 3)
        key = (band, e.space, e.node)
        mx, my = cell[(key, e.element)]
        x = tx[e.thread]
        if e.kind == "read":
            start, end = (mx, my + (0.3 if my < ty else -0.3)), (x, ty + (-0.3 if my < ty else 0.3))
        else:
            start, end = (x, ty + 0.3), (mx, my - 0.3)
        ax.annotate("", xy=end, xytext=start, zorder=2,
                    arrowprops=dict(arrowstyle="-|>,head_length=0.3,head_width=0.15", lw=0.6,
                                    color=KIND_COLOURS[e.kind], alpha=0.7, shrinkA=0, shrinkB=0))
    ax.set_xlim(-14, width + 1)
    ax.set_ylim(max(ypos.values()) + 0.9, -0.9)
    ax.set_axis_off()
    phases = sorted({e.phase for e in events}, key=PHASE_NAMES.index)
    counts = {k: sum(1 for e in events if e.kind == k and e.space != Space.REGISTER) for k in KIND_COLOURS}
    summary = ", ".join(f"{v} {k}s" for k, v in counts.items() if v)
    ax.set_title(title or f"kernel {kernel}, stage {stage}, block {block} ({'/'.join(phases)}): {summary} to "
                 f"memory; {registers} register accesses stay in their thread", fontsize=9)
    from matplotlib.lines import Line2D
    ax.legend(handles=[Line2D([], [], color=c, label=k) for k, c in KIND_COLOURS.items()], fontsize=7,
              loc="lower right", bbox_to_anchor=(1.0, 1.02), ncol=3, frameon=False)
    fig.tight_layout()
    return fig
