"""Bar charts of simulation counters: strategies side by side, cost terms stacked."""
from __future__ import annotations

from ..errors import AStitchError
from .backend import figure_and_axes, new_figure, pyplot

#: metric -> (axis label, scale divisor)
METRICS = {
    "kernel_launches": ("kernel launches", 1),
    "global_bytes": ("global memory traffic (MiB)", 2**20),
    "global_bytes_read": ("global reads (MiB)", 2**20),
    "global_bytes_written": ("global writes (MiB)", 2**20),
    "shared_bytes": ("shared memory traffic (MiB)", 2**20),
    "flops": ("flops (M)", 1e6),
    "predicted_us": ("predicted time (us)", 1),
    "waves": ("waves (all kernels)", 1),
    "grid_barriers": ("grid barriers", 1),
}
STRATEGY_COLOURS = {"unfused": "#9e9e9e", "xla": "#4c72b0", "tvm": "#dd8452", "astitch": "#55a868",
                    "fusionstitching": "#8172b3", "inductor": "#c44e52"}


def compare_bars(results: dict, metrics=("kernel_launches", "global_bytes", "predicted_us"), title=None,
                 reference: dict | None = None):
    """One panel per metric, one bar per entry of ``results`` ({label: SimResult or SimStats}).

    ``reference`` optionally maps a metric to ``(value, label)`` drawn as a horizontal line
    (a paper's number, a lower bound...).  Returns the Figure.
    """
    if not results:
        raise AStitchError("compare_bars needs at least one result: {label: asim.simulate(...)}")
    unknown = [m for m in metrics if m not in METRICS]
    if unknown:
        raise AStitchError(f"unknown metric(s) {unknown}; choose from {', '.join(METRICS)}")
    fig = new_figure((3.3 * len(metrics), 3.2))
    axes = fig.subplots(1, len(metrics), squeeze=False)
    labels = list(results)
    for ax, m in zip(axes[0], metrics):
        name, div = METRICS[m]
        vals = [getattr(getattr(r, "stats", r), m) / div for r in results.values()]
        colours = [STRATEGY_COLOURS.get(lbl.split()[0], "#4c72b0") for lbl in labels]
        bars = ax.bar(labels, vals, color=colours)
        for b, v in zip(bars, vals):
            ax.annotate(f"{v:.3g}", (b.get_x() + b.get_width() / 2, b.get_height()), ha="center", va="bottom",
                        fontsize=8)
        if reference and m in reference:
            value, lbl = reference[m]
            ax.axhline(value / div, color="#c62828", linestyle="--", linewidth=1)
            ax.text(len(labels) - 0.5, value / div, lbl, color="#c62828", ha="right", va="bottom", fontsize=7)
        ax.set_title(name, fontsize=9)
        ax.tick_params(axis="x", labelrotation=30, labelsize=8)
        ax.margins(y=0.15)
    if title:
        fig.suptitle(title, fontsize=10)
    fig.tight_layout()
    return fig


BREAKDOWN_ORDER = ("launch_us", "memset_us", "memory_us", "l2_us", "compute_us", "recompute_us", "shared_us",
                   "block_barrier_us", "atomic_us", "block_start_us", "tail_us", "grid_barrier_us", "library_us",
                   "spill_us", "issue_us", "dispatch_us", "imbalance_us", "overlap_us", "cross_stage_us")


def draw_breakdown(result, ax=None, title=None):
    """The cost model's terms (``ks.breakdown``) of every kernel of one SimResult, stacked per kernel.

    The negative terms (``overlap`` and ``cross_stage``: time hidden by overlapping memory and compute, within a
    stage and across stages) are drawn below zero, so each bar's top minus its bottom part is the kernel's
    predicted time.  Every term the kernels carry is drawn, those of :data:`BREAKDOWN_ORDER` first.
    """
    stats = getattr(result, "stats", result)
    fig, ax = figure_and_axes(ax, (max(4.0, 0.9 * len(stats.kernels) + 3), 3.4))
    plt = pyplot()
    cmap = plt.get_cmap("tab20")
    xs = range(len(stats.kernels))
    pos_base = [0.0] * len(stats.kernels)
    neg_base = [0.0] * len(stats.kernels)
    others = sorted({t for k in stats.kernels for t in k.breakdown} - set(BREAKDOWN_ORDER))
    for j, term in enumerate(BREAKDOWN_ORDER + tuple(others)):
        vals = [k.breakdown.get(term, 0.0) for k in stats.kernels]
        if not any(abs(v) > 1e-9 for v in vals):
            continue
        bottoms = [neg_base[i] if v < 0 else pos_base[i] for i, v in enumerate(vals)]
        ax.bar(xs, vals, bottom=bottoms, label=term[:-3], color=cmap(j % 20), width=0.7)
        for i, v in enumerate(vals):
            if v < 0:
                neg_base[i] += v
            else:
                pos_base[i] += v
    for i, k in enumerate(stats.kernels):
        ax.annotate(f"{k.predicted_us:.1f}", (i, pos_base[i]), ha="center", va="bottom", fontsize=8)
    ax.axhline(0, color="black", linewidth=0.6)
    ax.set_xticks(list(xs))
    ax.set_xticklabels([f"{i}: {k.name}" for i, k in enumerate(stats.kernels)], rotation=30, ha="right",
                       fontsize=7)
    ax.set_ylabel("predicted us")
    ax.legend(fontsize=7, ncol=2, frameon=False, loc="upper left", bbox_to_anchor=(1.0, 1.0))
    ax.set_title(title or f"cost-model terms per kernel (total {stats.predicted_us:.1f} us)", fontsize=9)
    fig.tight_layout()
    return fig
