"""matplotlib, imported on first use, with a clear error when it is missing."""
from __future__ import annotations

from ..errors import AStitchError

#: one colour per stitch scheme, the same as ``plan.to_dot()`` uses
from ..plan.plan_print import SCHEME_COLOURS  # noqa: F401  (re-exported for the figure modules)

SCHEME_EDGE = {"independent": "#555555", "local": "#2e7d32", "regional": "#1f5fbf", "global": "#c62828"}
BARRIER_STYLE = {"block": dict(color="#1f5fbf", linestyle="--", linewidth=1.2),
                 "grid": dict(color="#c62828", linestyle="-", linewidth=2.0)}


def pyplot():
    """``matplotlib.pyplot``, or an AStitchError saying how to install it."""
    try:
        import matplotlib
        import matplotlib.pyplot as plt
    except ImportError:
        raise AStitchError("pictures need matplotlib: pip install 'astitch-sim[tutorials]' "
                           "(or pip install matplotlib)") from None
    del matplotlib
    return plt


def show_in_ipython() -> None:
    """Make IPython/Jupyter render a returned Figure as a PNG (what ``%matplotlib inline`` sets up for
    pyplot figures; our figures do not go through pyplot, so we register the formatter ourselves)."""
    try:
        from IPython import get_ipython
    except ImportError:
        return
    shell = get_ipython()
    if shell is None or not hasattr(shell, "display_formatter"):
        return
    from IPython.core.pylabtools import print_figure
    from matplotlib.figure import Figure
    png = shell.display_formatter.formatters["image/png"]
    png.for_type(Figure, lambda fig: print_figure(fig, "png", bbox_inches="tight"))


def new_figure(size):
    """A Figure not registered with pyplot: Jupyter shows it once, as the cell's value, and it is
    freed when dropped (pyplot would keep every figure open and show it a second time)."""
    pyplot()
    from matplotlib.figure import Figure
    show_in_ipython()
    return Figure(figsize=size)


def figure_and_axes(ax, size):
    """``(fig, ax)``: the caller's axes, or a new figure of ``size`` inches."""
    if ax is not None:
        return ax.figure, ax
    fig = new_figure(size)
    return fig, fig.subplots()


def block_colours(n: int):
    """``n`` distinguishable colours for consecutive block numbers (tab20, cycled)."""
    plt = pyplot()
    cmap = plt.get_cmap("tab20")
    order = [0, 2, 4, 6, 8, 10, 12, 14, 16, 18, 1, 3, 5, 7, 9, 11, 13, 15, 17, 19]   # dark, then light
    return [cmap(order[i % 20]) for i in range(n)]
