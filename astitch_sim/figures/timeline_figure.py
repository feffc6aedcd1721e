"""The SIMT model's timeline as a Gantt chart: SMs down, time across.

Each SM row is split into as many lanes as the running kernel keeps blocks
resident per SM (``blocks_per_sm``), so occupancy is visible as how much of the
row is filled.  Blocks are coloured by kernel; a kernel's stages alternate in
shade; waits at a grid barrier are hatched; the grey bands between kernels are
launch gaps (launch overhead, plus the memset of atomic result buffers).  A
kernel of many waves keeps only its first and last waves in the timeline
(``KernelSpan.truncated``); its middle waves, known to be full, are drawn as one
full span.  Same data as ``res.timeline.render_ascii()``, drawn.
"""
from __future__ import annotations

from ..errors import AStitchError
from .backend import figure_and_axes, pyplot

BARRIER = -1      # stage index of a grid-barrier wait (astitch_sim.simt.schedule.BARRIER)


def _lanes(entries, blocks_per_sm):
    """Sub-lane of each block entry on its SM: the first lane free at its start."""
    free: dict = {}
    out = []
    for e in sorted(entries, key=lambda e: (e.start_us, e.block)):
        lanes = free.setdefault(e.sm, [float("-inf")] * blocks_per_sm)
        j = next((i for i, t in enumerate(lanes) if t <= e.start_us + 1e-9), 0)
        lanes[j] = e.end_us
        out.append((e, j))
    return out


def draw_timeline(timeline, ax=None, max_sms: int = 16, title: str | None = None):
    """Draw ``res.timeline`` for the first ``max_sms`` SMs; returns the Figure."""
    if timeline is None or not getattr(timeline, "kernels", None):
        raise AStitchError("draw_timeline needs the timeline of a simulation: asim.simulate(plan, inputs).timeline")
    nsm = min(timeline.sms, max(1, int(max_sms)))
    fig, ax = figure_and_axes(ax, (10.0, 1.2 + 0.28 * nsm))
    plt = pyplot()
    from matplotlib.collections import PatchCollection
    from matplotlib.colors import to_rgba
    from matplotlib.patches import Patch, Rectangle
    colours = plt.get_cmap("tab10")
    rects, faces, hatched = [], [], []
    for k in timeline.kernels:
        base = colours(k.kernel % 10)
        h = 0.8 / k.blocks_per_sm
        ax.axvspan(k.start_us - k.launch_gap_us, k.start_us, color="#dddddd", alpha=0.6, lw=0)
        if k.truncated:                       # full middle waves, not stored entry by entry
            last = k.start_us + (k.waves - 1) * k.block_us
            for sm in range(nsm):
                rects.append(Rectangle((k.start_us, sm - 0.4), last - k.start_us, 0.8))
                faces.append(to_rgba(base, 0.85))
        mine = [e for e in timeline.entries if e.kernel == k.kernel and e.sm < nsm]
        for e, lane in _lanes(mine, k.blocks_per_sm):
            y = e.sm - 0.4 + lane * h
            for stage, a, b in e.stages:
                if b <= a:
                    continue
                if stage == BARRIER:
                    hatched.append(Rectangle((a, y), b - a, h * 0.95, fill=False, hatch="////",
                                             edgecolor="#c62828", linewidth=0))
                else:
                    rects.append(Rectangle((a, y), b - a, h * 0.95))
                    faces.append(to_rgba(base, 0.95 if stage % 2 == 0 else 0.6))
        ax.text((k.start_us + k.end_us) / 2, -0.75, f"k{k.kernel}", ha="center", va="bottom", fontsize=7,
                color=base)
    ax.add_collection(PatchCollection(rects, facecolors=faces, edgecolors="none"))
    for r in hatched:
        ax.add_patch(r)
    ax.set_xlim(0, timeline.end_us * 1.01)
    ax.set_ylim(nsm - 0.5, -1.0)
    ax.set_yticks(range(nsm))
    ax.set_yticklabels([f"SM{i}" for i in range(nsm)], fontsize=6.5)
    ax.set_xlabel("time (us, predicted)")
    more = f" (first {nsm} of {timeline.sms} SMs)" if nsm < timeline.sms else ""
    ax.set_title(title or f"timeline on {timeline.gpu}{more}: {len(timeline.kernels)} kernel(s), "
                 f"{timeline.end_us:.1f} us, SM-slot utilisation {timeline.utilisation():.0%}", fontsize=9)
    handles = [Patch(color=colours(k.kernel % 10), label=f"k{k.kernel} {k.name} ({k.waves} wave(s))")
               for k in timeline.kernels[:10]]
    handles += [Patch(color="#dddddd", label="launch gap"),
                Patch(facecolor="white", edgecolor="#c62828", hatch="////", label="grid-barrier wait")]
    ax.legend(handles=handles, fontsize=6.5, loc="upper left", bbox_to_anchor=(1.0, 1.0), frameon=False)
    fig.tight_layout()
    return fig
