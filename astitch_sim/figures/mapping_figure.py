"""A thread mapping as a picture: the tensor, each element coloured by who computes it.

The question a thread mapping answers is "which block, which thread, which loop
trip computes element (r, c)?" (:meth:`~astitch_sim.plan.mapping.ThreadMapping.locate`).
Drawn over the tensor -- as triton-viz draws a Triton program's loads -- the
paper's schedules become visible at a glance:

* one block per row (the paper-era XLA's row reduction): one colour per row;
* horizontal packing (AStitch on <750000,32>): the block's rows share one colour (128 rows of
  8 lanes x 4-element vectors on the V100);
* task splitting (AStitch on <64,30000>): the colour changes at each split along a row;
* row vectors: with ``color_by="thread"``, a lane's ``vector`` consecutive elements share its colour;
  column vectors likewise, across the ``vector`` adjacent columns a column lane holds;
* vertical packing and vector trips: with ``color_by="iteration"``, later loop trips get darker.

Every cell is what :meth:`~astitch_sim.plan.mapping.ThreadMapping.locate` says, so the picture follows
the plan's ``vector``, ``threads_per_row`` and trips exactly.

Big tensors are shown through a window: the first ``max_rows`` rows, and at most
``max_cols`` columns sampled evenly over the whole row (so a split row still
shows both halves).  The axes say which rows and columns are drawn.
"""
from __future__ import annotations

from math import ceil, prod

import numpy as np

from ..errors import AStitchError
from ..ir.flatindex import ravel, unravel
from .backend import block_colours, figure_and_axes

COLOR_BY = ("block", "thread", "iteration")


def view_shape(mapping) -> tuple:
    """``(rows, cols)`` of the 2-D picture of ``mapping``'s domain."""
    if mapping.kind == "rows":
        return mapping.extent(0), mapping.extent(1)
    if mapping.kind == "columns":
        return mapping.extent(1), mapping.extent(0) * mapping.extent(2)
    d = mapping.domain
    if len(d) <= 1:
        n = int(prod(d)) if d else 1
        width = min(n, 64)
        return ceil(n / width), width
    return int(prod(d[:-1])), int(d[-1])


def _from_groups(mapping, coords) -> np.ndarray:
    """Flat domain index from one coordinate per dim group (each the row-major number within its group)."""
    multi = [None] * len(mapping.domain)
    for g, c in zip(mapping.groups, coords):
        parts = unravel(c, [mapping.domain[d] for d in g])
        for d, p in zip(g, parts):
            multi[d] = p
    return ravel(multi, mapping.domain)


def flat_indices(mapping, rows: np.ndarray, cols: np.ndarray) -> np.ndarray:
    """Flat domain indices of picture cells ``(rows[:, None], cols[None, :])``; -1 outside the domain."""
    r = np.asarray(rows, dtype=np.int64)[:, None]
    c = np.asarray(cols, dtype=np.int64)[None, :]
    if mapping.kind == "rows":
        return _from_groups(mapping, (r, c))
    if mapping.kind == "columns":
        outer, cc = np.divmod(c, mapping.extent(2))
        return _from_groups(mapping, (outer, r, cc))
    R, C = view_shape(mapping)
    flat = r * C + c
    return np.where(flat < mapping.size, flat, -1)


def _outline(ax, mask) -> None:
    """Black line around the cells where ``mask`` is true (its edges to cells outside it)."""
    from matplotlib.collections import LineCollection
    m = np.pad(mask, 1)
    segs = []
    for i, j in zip(*np.nonzero(mask)):
        y, x = i - 0.5, j - 0.5
        if not m[i, j + 1]:
            segs.append([(x, y), (x + 1, y)])            # top
        if not m[i + 2, j + 1]:
            segs.append([(x, y + 1), (x + 1, y + 1)])    # bottom
        if not m[i + 1, j]:
            segs.append([(x, y), (x, y + 1)])            # left
        if not m[i + 1, j + 2]:
            segs.append([(x + 1, y), (x + 1, y + 1)])    # right
    ax.add_collection(LineCollection(segs, colors="black", linewidths=1.8))


def draw_mapping(mapping, ax=None, max_rows: int = 32, max_cols: int = 64, color_by: str = "block",
                 highlight_block: int | None = 0, title: str | None = None, row_label: str = "row",
                 col_label: str = "column"):
    """Draw which block (or thread, or loop trip) computes each element of ``mapping``'s domain.

    ``highlight_block`` outlines that block's elements and, when the window is
    small enough to read, writes its thread numbers in them.  Returns the Figure.
    """
    if color_by not in COLOR_BY:
        raise AStitchError(f"color_by={color_by!r}: use one of {COLOR_BY}")
    if max_rows < 1 or max_cols < 1:
        raise AStitchError(f"max_rows={max_rows}, max_cols={max_cols}: both must be >= 1")
    R, C = view_shape(mapping)
    # rows: the first ones (packing is about neighbouring rows); a column reduction's reduced
    # dim is sampled over its whole length instead, so a split along it shows
    row_step = max(1, ceil(R / max_rows)) if mapping.kind == "columns" else 1
    rows = np.arange(0, R, row_step)[:max_rows]
    step = max(1, ceil(C / max_cols))
    cols = np.arange(0, C, step)
    flat = flat_indices(mapping, rows, cols)
    valid = flat >= 0
    block, thread, it = (np.where(valid, a, -1) for a in mapping.locate(np.where(valid, flat, 0)))
    fig, ax = figure_and_axes(ax, (min(14.0, 2.0 + 0.17 * len(cols)), min(9.0, 1.6 + 0.2 * len(rows))))
    from matplotlib.colors import ListedColormap
    if color_by == "block":
        first = int(block[valid].min()) if valid.any() else 0
        nblocks = int(block[valid].max()) - first + 1 if valid.any() else 1
        cmap = ListedColormap(block_colours(min(nblocks, 20)))
        img = np.where(valid, (block - first) % 20, np.nan)
        ax.imshow(img, cmap=cmap, vmin=-0.5, vmax=min(nblocks, 20) - 0.5, aspect="auto", interpolation="nearest")
    else:
        values = thread if color_by == "thread" else it
        img = np.where(valid, values, np.nan).astype(float)
        im = ax.imshow(img, cmap="viridis" if color_by == "thread" else "magma_r", aspect="auto",
                       interpolation="nearest")
        fig.colorbar(im, ax=ax, label=color_by, fraction=0.04)
    if highlight_block is not None and valid.any():
        mask = block == highlight_block
        if mask.any():
            _outline(ax, mask)
            if mask.sum() <= 400 and len(cols) <= 48:
                for (i, j) in zip(*np.nonzero(mask)):
                    ax.text(j, i, str(int(thread[i, j])), ha="center", va="center", fontsize=5.5, color="white")
    shown_cols = f"{len(cols)} of {C}" + (f" (every {step}th)" if step > 1 else "")
    ax.set_xlabel(f"{col_label}: {shown_cols}", fontsize=8)
    shown_rows = (f"{len(rows)} of {R} (every {row_step}th)" if row_step > 1 else f"first {len(rows)} of {R}")
    ax.set_ylabel(f"{row_label}: {shown_rows}", fontsize=8)
    xt = np.linspace(0, len(cols) - 1, min(len(cols), 6)).astype(int)
    ax.set_xticks(xt)
    ax.set_xticklabels([str(int(cols[i])) for i in xt], fontsize=7)
    yt = np.linspace(0, len(rows) - 1, min(len(rows), 8)).astype(int)
    ax.set_yticks(yt)
    ax.set_yticklabels([str(int(rows[i])) for i in yt], fontsize=7)
    import textwrap
    head = title or mapping.describe()
    note = {"block": f"colour: block (highlighted: block {highlight_block})" if highlight_block is not None
            else "colour: block", "thread": "colour: thread in block", "iteration": "colour: loop trip"}[color_by]
    ax.set_title(textwrap.fill(head, 90) + f"\n{note}", fontsize=8.5)
    fig.tight_layout()
    return fig
