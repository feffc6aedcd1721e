"""Altair charts: strategy bars, thread-mapping grids, the wave timeline, bytes per stage,
and the step-through picture.  Fonts are set large enough to read on a projector."""
from __future__ import annotations

import altair as alt
import numpy as np
import pandas as pd

from astitch_sim.ir.flatindex import unravel

from .style import SPACE_COLOUR

FONT = 15
PALETTE20 = ["#4e79a7", "#f28e2b", "#e15759", "#76b7b2", "#59a14f", "#edc948", "#b07aa1", "#ff9da7", "#9c755f",
             "#bab0ac", "#1f77b4", "#aec7e8", "#ff7f0e", "#ffbb78", "#2ca02c", "#98df8a", "#d62728", "#ff9896",
             "#9467bd", "#c5b0d5"]


def big_fonts(chart):
    """The chart with the explorer's font sizes (axis, legend, title, facet headers)."""
    return chart.configure_axis(labelFontSize=FONT - 1, titleFontSize=FONT).configure_legend(
        labelFontSize=FONT - 1, titleFontSize=FONT).configure_title(fontSize=FONT + 2).configure_header(
        labelFontSize=FONT, titleFontSize=FONT)


#: pixels per bar, and for the axis, its title and padding: Streamlit fits the *whole* chart (axis included)
#: into the height it is given, so a height of bars alone squeezed a 2-3 bar chart to a few pixels
BAR_PX, AXIS_PX = 40, 80


def bars_height(n: int) -> int:
    """The height of a horizontal bar chart of ``n`` bars, its x axis included."""
    return BAR_PX * max(1, n) + AXIS_PX


def strategy_bars(df: pd.DataFrame, value: str, title: str, colours: dict, fmt: str = ",.1f",
                  label: str | None = None) -> alt.Chart:
    """One bar per strategy, value written on the bar (integer values get integer ticks)."""
    order = list(df["strategy"])
    scale = alt.Scale(domain=order, range=[colours[s] for s in order])
    axis = alt.Axis(format="d", tickMinStep=1) if fmt == "d" else alt.Axis()
    base = alt.Chart(df).encode(y=alt.Y("strategy:N", sort=order, title=None, axis=alt.Axis(labelOverlap=False,
                                                                                       labelLimit=260)),
                                x=alt.X(f"{value}:Q", title=title, axis=axis))
    bars = base.mark_bar().encode(color=alt.Color("strategy:N", scale=scale, legend=None),
                                  tooltip=list(df.columns))
    text = base.mark_text(align="left", dx=4, fontSize=FONT - 1).encode(
        text=alt.Text(f"{label or value}:{'N' if label else 'Q'}", **({} if label else {"format": fmt})))
    return big_fonts((bars + text).properties(height=bars_height(len(order))))


def stacked_bytes(df: pd.DataFrame, y: str, title: str, order=None, unit: str = "MiB") -> alt.Chart:
    """Bytes per (row, memory traffic kind), stacked; columns: ``y``, ``traffic``, ``unit`` (the amount in that
    unit, see :func:`style.byte_unit`), ``order``."""
    every = {"global read": SPACE_COLOUR["global"], "L2 hit read": "#81c784", "global write": "#ef9a9a",
             "shared read": SPACE_COLOUR["shared"], "shared write": "#90caf9"}
    present = set(df["traffic"]) if len(df) else set()
    kinds = [k for k in every if k in present or k != "L2 hit read"]
    colours = [every[k] for k in kinds]
    chart = alt.Chart(df).mark_bar().encode(
        y=alt.Y(f"{y}:N", sort=order or list(dict.fromkeys(df[y])), title=None,
                axis=alt.Axis(labelOverlap=False, labelLimit=320)),
        x=alt.X(f"{unit}:Q", title=title),
        color=alt.Color("traffic:N", scale=alt.Scale(domain=kinds, range=colours), legend=alt.Legend(title=None)),
        order=alt.Order("order:Q"),
        tooltip=[y, "traffic", alt.Tooltip(f"{unit}:Q", format=",.3f")])
    return big_fonts(chart.properties(height=max(120, bars_height(len(set(df[y]))))))


#: the cost model's terms (``KernelStats.breakdown``, astitch_sim/simt/cost.py) as the chart names them, in order
TERMS = {"launch_us": "launch", "memset_us": "memset", "memory_us": "DRAM traffic", "l2_us": "L2 hits",
         "compute_us": "compute",
         "recompute_us": "recompute", "shared_us": "shared memory", "block_barrier_us": "block barriers",
         "atomic_us": "atomics", "block_start_us": "block start", "tail_us": "wave tail",
         "grid_barrier_us": "grid barriers", "library_us": "library (matmul)",
         "spill_us": "spills (local memory)", "issue_us": "instruction issue", "dispatch_us": "block dispatch",
         "imbalance_us": "imbalance (idle blocks)", "overlap_us": "overlap (hidden)",
         "cross_stage_us": "overlap across stages (hidden)"}
TERM_COLOURS = ["#bdbdbd", "#8d6e63", SPACE_COLOUR["global"], "#81c784", "#ffb74d", "#ce93d8", SPACE_COLOUR["shared"],
                "#64b5f6", "#6d4c41", "#a1887f", "#e0e0e0", "#880e4f", "#4db6ac", "#e57373", "#9575cd", "#f06292",
                "#ff8a65", "#212121", "#616161"]


def breakdown_rows(label: str, kernels) -> list:
    """One row per (kernel, term) of the cost model's breakdown; terms the model did not record are absent
    (an unknown term keeps its own name, so a new term in cost.py still shows)."""
    rows = []
    for i, ks in enumerate(kernels):
        for order, (term, us) in enumerate(ks.breakdown.items()):
            if us:
                rows.append({"plan": label, "kernel": f"{label} · k{i} {ks.name}", "term": TERMS.get(term, term),
                             "us": float(us), "order": order})
    return rows


def time_breakdown(df: pd.DataFrame) -> alt.Chart:
    """Predicted time per kernel, stacked by cost-model term (the overlap, negative, left of zero)."""
    names = list(TERMS.values()) + sorted(set(df["term"]) - set(TERMS.values()))
    chart = alt.Chart(df).mark_bar().encode(
        y=alt.Y("kernel:N", sort=list(dict.fromkeys(df["kernel"])), title=None,
                axis=alt.Axis(labelOverlap=False, labelLimit=360)),
        x=alt.X("sum(us):Q", title="predicted time (us), by cost-model term"),
        color=alt.Color("term:N", scale=alt.Scale(domain=names, range=(TERM_COLOURS * 2)[:len(names)]),
                        legend=alt.Legend(title=None, orient="bottom", columns=4, labelLimit=300)),
        order=alt.Order("order:Q"),
        tooltip=["kernel", "term", alt.Tooltip("us:Q", format=",.3f")])
    return big_fonts(chart.properties(height=bars_height(df["kernel"].nunique()) + 60))


def mapping_cells(mapping, max_rows: int = 64, max_cols: int = 64):
    """The stage's domain drawn as a 2-D tensor ``[leading dims, last dim]`` (a window of it):
    for each drawn element, the block, thread and loop iteration the mapping gives it."""
    dom = mapping.domain or (1,)
    cols = dom[-1]
    rows = int(np.prod(dom[:-1])) if len(dom) > 1 else 1
    r_idx = np.arange(min(rows, max_rows))
    c_step = max(1, -(-cols // max_cols))
    c_idx = np.arange(0, cols, c_step)
    rr, cc = np.meshgrid(r_idx, c_idx, indexing="ij")
    flat = (rr * cols + cc).ravel()
    block, thread, it = mapping.locate(flat)
    df = pd.DataFrame({"row": rr.ravel(), "col": cc.ravel(), "flat": flat, "block": block, "thread": thread,
                       "iteration": it, "element": [",".join(map(str, e)) for e in
                                                    zip(*[np.asarray(a) for a in unravel(flat, dom)])]})
    return df, rows, cols, c_step


def mapping_grid(df: pd.DataFrame, colour_by: str, title: str, focus_block: int | None = None,
                 width: int = 560, height: int = 360) -> alt.Chart:
    """The tensor coloured by block (cyclic palette), or one block's lanes (others grey)."""
    data = df.copy()
    if colour_by == "thread" and focus_block is not None:
        data["lane"] = np.where(data["block"] == focus_block, data["thread"], -1)
        colour = alt.Color("lane:Q", scale=alt.Scale(scheme="viridis", domainMin=0), title=f"thread in block {focus_block}")
        chart = alt.Chart(data).mark_rect().encode(
            color=alt.condition(alt.datum.lane >= 0, colour, alt.value("#e6e6e6")))
    elif colour_by == "iteration":
        chart = alt.Chart(data).mark_rect().encode(color=alt.Color("iteration:O", scale=alt.Scale(scheme="tableau10"),
                                                                   title="loop trip"))
    else:
        data["block mod 20"] = data["block"] % 20
        chart = alt.Chart(data).mark_rect().encode(
            color=alt.Color("block mod 20:N", scale=alt.Scale(domain=list(range(20)), range=PALETTE20), legend=None))
    x = alt.X("col:O", title="column (last dim)", axis=alt.Axis(labelOverlap=True, values=_ticks(data["col"])))
    y = alt.Y("row:O", title="row", axis=alt.Axis(labelOverlap=True, values=_ticks(data["row"])))
    chart = chart.mark_rect(stroke="white", strokeWidth=0.4).encode(
        x=x, y=y, tooltip=["element", "block", "thread", "iteration"])
    # name each block where it starts in a row (when there are few enough to read)
    firsts = data.loc[data.groupby("block")["flat"].idxmin()] if colour_by == "block" else data.iloc[:0]
    layers = [chart]
    if 0 < len(firsts) <= 24:
        layers.append(alt.Chart(firsts).mark_text(align="left", baseline="top", dx=2, dy=1, fontSize=13,
                                                  fontWeight="bold", color="black").encode(
            x=x, y=y, text=alt.Text("label:N")).transform_calculate(label="'b' + datum.block"))
    return big_fonts(alt.layer(*layers).properties(title=title, width=width, height=height))


def _ticks(values) -> list:
    u = sorted(set(int(v) for v in values))
    if len(u) <= 12:
        return u
    step = len(u) // 8
    return u[::step]


def timeline_chart(rows: list, kernels: list, barrier_times: list, max_sms: int, title: str,
                   end_us: float, height: int = 320) -> alt.Chart:
    """Blocks on SMs over time: a bar per resident block and stage (rows may carry their own ``what``, as
    the full middle waves of a long kernel do); grid barriers as red rules."""
    df = pd.DataFrame(rows)
    df = df[df["sm"] < max_sms].copy()
    named = "kernel " + df["kernel"].astype(str) + " stage " + df["stage"].astype(str)
    given = df["what"] if "what" in df else pd.Series(None, index=df.index, dtype=object)
    df["what"] = np.select([df["kind"] == "grid_barrier", given.notna()],
                           ["waiting at grid barrier", given.astype(str)], named.astype(object))
    df["slot"] = df["sm"].astype(str).str.zfill(3)
    kernel_names = {k["kernel"]: k["name"] for k in kernels}
    df["kernel name"] = df["kernel"].map(kernel_names)
    x = alt.X("start_us:Q", title="time (us, predicted)", scale=alt.Scale(domain=[0, end_us]))
    bars = alt.Chart(df).mark_bar(opacity=0.85, stroke="white", strokeWidth=0.3).encode(
        y=alt.Y("slot:N", title="SM", axis=alt.Axis(labelExpr="toNumber(datum.value)")),
        x=x, x2="end_us:Q",
        color=alt.Color("kernel name:N", legend=alt.Legend(orient="bottom", title="kernel", columns=2,
                                                           labelLimit=400)),
        tooltip=["kernel name", "what", "block", "sm", alt.Tooltip("start_us:Q", format=".2f"),
                 alt.Tooltip("end_us:Q", format=".2f")])
    waits = alt.Chart(df[df["kind"] == "grid_barrier"]).mark_bar(color="#555", opacity=0.7).encode(
        y="slot:N", x=x, x2="end_us:Q")
    layers = [bars, waits]
    if barrier_times:
        layers.append(alt.Chart(pd.DataFrame({"t": barrier_times})).mark_rule(color=SPACE_COLOUR["global"],
                                                                               strokeWidth=2.5).encode(x="t:Q"))
    starts = pd.DataFrame({"t": [k["start_us"] for k in kernels], "name": [k["name"] for k in kernels]})
    layers.append(alt.Chart(starts).mark_rule(color="#333", strokeDash=[4, 3]).encode(x="t:Q", tooltip=["name"]))
    return big_fonts(alt.layer(*layers).properties(title=title, height=height))


#: the trace's access kinds (``kind space``) as the step picture's legend says them
ACCESS_WORDS = {"read global": "load from global memory", "write global": "store to global memory",
                "atomic global": "atomic add to global memory", "read shared": "load from shared memory",
                "write shared": "store to shared memory", "read register": "read a register",
                "write register": "write a register", "-": "not touched in this step"}


def step_picture(cells: pd.DataFrame, title: str) -> alt.Chart:
    """GPU-Puzzles style: each tensor a strip of cells; this step's loads and stores highlighted.  Every access
    kind is in the legend (a step shows few of them), and the height leaves room for the axis and the legend
    under the strips (Streamlit fits the whole chart into it)."""
    colours = {"read global": SPACE_COLOUR["global"], "write global": "#ef5350", "atomic global": "#8e0000",
               "read shared": SPACE_COLOUR["shared"], "write shared": "#64b5f6", "read register": SPACE_COLOUR["register"],
               "write register": "#81c784", "-": "#eeeeee"}
    names = ACCESS_WORDS
    data = cells.assign(what=cells["access"].map(names))
    tensors = list(dict.fromkeys(cells["tensor"]))
    chart = alt.Chart(data).mark_rect(stroke="white", strokeWidth=0.6).encode(
        x=alt.X("i:O", title="element (row-major flat index)",
                axis=alt.Axis(labelOverlap=True, values=_ticks(cells["i"]))),
        y=alt.Y("tensor:N", title="tensor", sort=tensors, axis=alt.Axis(labelLimit=260)),
        color=alt.Color("what:N", scale=alt.Scale(domain=[names[k] for k in colours], range=list(colours.values())),
                        legend=alt.Legend(orient="bottom", title="this step", columns=3, labelLimit=260)),
        tooltip=["tensor", "element", "what"])
    return big_fonts(chart.properties(title=title, height=STEP_ROW_PX * len(tensors) + STEP_EXTRA_PX))


#: the step picture: pixels per tensor strip, and for the title, the x axis and the three-row legend below
STEP_ROW_PX, STEP_EXTRA_PX = 44, 190
