"""A plan as a picture: one lane per kernel, launch order left to right, data flowing down.

Why lanes and not one graph with clusters (``plan.to_dot()``): the lessons of
the paper are about *kernels* -- how many, what each one reads back from global
memory, what is computed twice.  So every kernel gets its own lane and shows
everything it touches:

* the nodes it computes, filled with the colour of their stitch scheme
  (independent / local / regional / global), stage by stage, with the barrier
  between two stages drawn across the lane (block barrier dashed blue, grid
  barrier solid red);
* the tensors it *reads from global memory* as grey dashed boxes at the top of
  the lane: a parameter read by three kernels appears three times (XLA's
  reloads), and a value another kernel wrote arrives by a dashed arrow from that
  kernel's lane (the round trip through global memory);
* a node computed by several kernels appears in each of them, marked with its
  recompute factor when the plan recomputes it per broadcast element (TVM).

Scalar constants and their broadcasts (``k = 2.0; k.bcast = broadcast(k)``)
are left out by default: they are free and only clutter the picture.  With
``hide_moves=True`` every data-movement op (broadcast, reshape, transpose...,
the op table's ``free`` class) inside a kernel is left out too, its operands
wired straight to its users: HLO from JAX has many of them, and the picture of
a real model is then about the ops that compute.

:func:`plan_layout` computes the positions (pure Python, testable);
:func:`draw_plan` draws them with matplotlib.
"""
from __future__ import annotations

from dataclasses import dataclass, field

from ..ir.ops import OPS
from .backend import BARRIER_STYLE, SCHEME_COLOURS, SCHEME_EDGE, figure_and_axes
from ..plan.vocabulary import Barrier


@dataclass
class Box:
    """One node drawn in one lane."""
    lane: int
    node: str
    role: str                 # compute | read
    y: int = 0                # row, 0 at the top
    x: float = 0.0
    scheme: str = ""
    stage: int = -1
    output: bool = False
    recompute: int = 1


@dataclass
class Lane:
    kernel: int
    title: str
    subtitle: str
    boxes: list = field(default_factory=list)
    barriers: list = field(default_factory=list)   # (row above which the line is drawn, kind, label)
    x0: float = 0.0
    width: float = 1.0


@dataclass
class Layout:
    lanes: list
    edges: list               # (from Box, to Box, kind: local | read | global)
    rows: int

    def boxes(self) -> list:
        return [b for lane in self.lanes for b in lane.boxes]

    def find(self, node: str, lane=None) -> list:
        return [b for b in self.boxes() if b.node == node and (lane is None or b.lane == lane)]


#: ops that only move data (no arithmetic): the op table's free ops that are not sources
MOVE_OPS = tuple(name for name, row in OPS.items() if row.cost == "free" and row.kind != "source")


def _hidden(graph, hide_scalars: bool, hide_moves: bool = False) -> set:
    out = set()
    if hide_moves:
        keep = {o.name for o in graph.outputs}
        out |= {n.name for n in graph if n.op in MOVE_OPS and n.name not in keep}
    if not hide_scalars:
        return out
    for n in graph:
        if n.op == "constant" and n.rank == 0:
            out.add(n.name)
        elif n.op == "broadcast" and n.operands and n.operands[0].op == "constant" and n.operands[0].rank == 0:
            out.add(n.name)
    return out


def _lane_nodes(kernel) -> list:
    """(node, stage) computed by the kernel, in stage order."""
    if kernel.kind == "library":
        return [(n, 0) for n in kernel.computed]
    return [(n, i) for i, s in enumerate(kernel.stages) for n in list(s.ops) + list(s.epilogue)]


def _lane_title(plan, i, k):
    if k.kind == "library":
        return f"kernel {i} [library]", f"{k.grid}x{k.block}"
    extra = f", {k.global_barriers} grid barrier(s)" if k.global_barriers else ""
    return f"kernel {i}", f"{k.grid} x {k.block} thr{extra}"


def plan_layout(plan, hide_scalars: bool = True, hide_moves: bool = False) -> Layout:
    """Positions of every box of :func:`draw_plan` (rows top-down, x in box widths)."""
    g = plan.graph
    hidden = _hidden(g, hide_scalars, hide_moves)
    cache: dict = {}

    def sources(name):
        """The visible nodes a value comes from, looking through hidden data-movement ops."""
        if name not in hidden:
            return [name]
        if name not in cache:
            node = g[name]
            cache[name] = [] if (node.op == "constant" and node.rank == 0) else \
                list(dict.fromkeys(v for o in node.operands for v in sources(o.name)))
        return cache[name]

    outputs = {o.name for o in g.outputs}
    lanes, edges = [], []
    producer: dict = {}                      # node -> its compute Box in the lane that wrote it to global memory
    for i, k in enumerate(plan.kernels):
        title, subtitle = _lane_title(plan, i, k)
        lane = Lane(i, title, subtitle)
        here: dict = {}                      # node -> Box in this lane
        computed = [(n, s) for n, s in _lane_nodes(k) if n not in hidden]
        computed_names = {n for n, _ in computed}
        # reads from global memory (through hidden moves: a broadcast parameter shows as the parameter)
        reads = list(dict.fromkeys(v for n in k.inputs for v in sources(n) if v not in computed_names))
        for n in reads:
            src = producer.get(n)
            b = Box(i, n, "read", y=(src.y + 1) if src is not None else 0)
            here[n] = b
            lane.boxes.append(b)
        # computed nodes, stage by stage (a stage starts below everything of the previous one)
        floor, stage_rows = 0, {}
        current = None
        for n, s in computed:
            if s != current:
                if current is not None and k.kind == "generated":
                    floor = max([b.y for b in lane.boxes if b.role == "compute"] + [floor - 1]) + 1
                    st = k.stages[current]
                    kind = st.barrier_after if st.barrier_after != Barrier.NONE else ("grid" if st.sync_after_combine
                                                                               else "none")
                    if kind != "none":
                        lane.barriers.append((floor, kind))
                current = s
            node = g[n]
            preds = list(dict.fromkeys(v for o in node.operands for v in sources(o.name)))
            for v in preds:                    # an operand reached through a hidden move is read too
                if v not in here and v not in computed_names and (g[v].op == "parameter" or v in producer):
                    src = producer.get(v)
                    rb = Box(i, v, "read", y=(src.y + 1) if src is not None else 0)
                    here[v] = rb
                    lane.boxes.append(rb)
            ys = [floor]
            for v in preds:
                if v in here:
                    ys.append(here[v].y + 1)
            v = k.values.get(n)
            rc = k.stages[s].recompute.get(n, 1) if k.kind == "generated" else 1
            b = Box(i, n, "compute", y=max(ys), scheme=v.scheme if v else "independent", stage=s,
                    output=n in outputs or n in k.outputs, recompute=rc)
            here[n] = b
            lane.boxes.append(b)
            stage_rows.setdefault(s, []).append(b.y)
            for v in preds:
                if v in here:
                    edges.append((here[v], b, "read" if here[v].role == "read" else "local"))
        # a read box sits just above its first reader
        for b in lane.boxes:
            if b.role == "read":
                users = [e[1].y for e in edges if e[0] is b]
                if users:
                    b.y = max(b.y, min(users) - 1)
        for n in k.outputs:
            if n in here and here[n].role == "compute":
                producer[n] = here[n]
        lanes.append(lane)
    # dashed arrows: a value written by one kernel and read by a later one
    for lane in lanes:
        for b in lane.boxes:
            if b.role == "read":
                src = [p for p in (lanes[j] for j in range(lane.kernel)) for p in p.boxes
                       if p.node == b.node and p.role == "compute"]
                if src:
                    edges.append((src[-1], b, "global"))
    _place_x(lanes, edges)
    rows = max((b.y for lane in lanes for b in lane.boxes), default=0) + 1
    return Layout(lanes, edges, rows)


def _place_x(lanes, edges) -> None:
    """Order boxes within each row of a lane by the mean x of their operands (two sweeps)."""
    preds: dict = {}
    for a, b, _ in edges:
        preds.setdefault(id(b), []).append(a)
    x0 = 0.0
    for lane in lanes:
        rows: dict = {}
        for b in lane.boxes:
            rows.setdefault(b.y, []).append(b)
        width = max((len(r) for r in rows.values()), default=1)
        lane_x0 = x0
        for _ in range(2):
            for y in sorted(rows):
                row = rows[y]
                before = {id(b): j for j, b in enumerate(row)}

                def key(b, before=before):
                    ps = [p.x - lane_x0 for p in preds.get(id(b), []) if p.lane == lane.kernel]
                    return sum(ps) / len(ps) if ps else before[id(b)]
                row.sort(key=key)
                offset = (width - len(row)) / 2
                for j, b in enumerate(row):
                    b.x = x0 + offset + j
        lane.x0, lane.width = x0, width
        x0 += width + 0.6


def draw_plan(plan, ax=None, hide_scalars: bool = True, hide_moves: bool = False, title: str | None = None,
              box_width: float = 1.55):
    """Draw ``plan`` in kernel lanes (see the module docstring); returns the Figure."""
    lay = plan_layout(plan, hide_scalars, hide_moves)
    total_w = sum(l.width for l in lay.lanes) + 0.6 * (len(lay.lanes) - 1)
    fig, ax = figure_and_axes(ax, (max(5.0, 1.7 * total_w + 0.5), max(3.0, 0.75 * lay.rows + 1.6)))
    from matplotlib.patches import FancyBboxPatch, Patch
    from matplotlib.lines import Line2D
    g = plan.graph
    sx = box_width                                   # horizontal unit, in data coordinates
    bw, bh = 0.86 * sx, 0.56
    pos = {}
    for lane in lay.lanes:
        left, right = lane.x0 * sx - 0.55 * sx, (lane.x0 + lane.width - 1) * sx + 0.55 * sx
        ax.add_patch(FancyBboxPatch((left, -0.75), right - left, lay.rows + 0.6,
                                    boxstyle="round,pad=0.02,rounding_size=0.15", facecolor="#f6f8fc",
                                    edgecolor="#5577aa", linewidth=1.0, zorder=0))
        ax.text((left + right) / 2, -1.05, f"{lane.title}\n{lane.subtitle}", ha="center", va="bottom",
                fontsize=8.5, color="#223355")
        for row, kind in lane.barriers:
            ax.plot([left + 0.05, right - 0.05], [row - 0.5, row - 0.5], zorder=1, **BARRIER_STYLE[kind])
            ax.text(right - 0.08, row - 0.56, f"{kind} barrier", ha="right", va="bottom", fontsize=6.5,
                    color=BARRIER_STYLE[kind]["color"])
        for b in lane.boxes:
            cx, cy = b.x * sx, b.y
            pos[id(b)] = (cx, cy)
            node = g[b.node]
            if b.role == "read":
                face, edge, style, lw = "#eeeeee", "#888888", "--", 1.0
                label = f"{b.node}\n(global)"
            else:
                face, edge, style = SCHEME_COLOURS.get(b.scheme, "#ffffff"), SCHEME_EDGE.get(b.scheme, "#555"), "-"
                lw = 2.2 if b.output else 1.0
                label = f"{b.node}\n{node.op}"
            ax.add_patch(FancyBboxPatch((cx - bw / 2, cy - bh / 2), bw, bh, boxstyle="round,pad=0.02",
                                        facecolor=face, edgecolor=edge, linestyle=style, linewidth=lw, zorder=3))
            ax.text(cx, cy, label, ha="center", va="center", fontsize=6.8, zorder=4)
            if b.recompute > 1:
                ax.text(cx + bw / 2, cy - bh / 2, f"x{b.recompute}", ha="right", va="bottom", fontsize=7,
                        color="#c62828", fontweight="bold", zorder=5)
    for a, b, kind in lay.edges:
        (x1, y1), (x2, y2) = pos[id(a)], pos[id(b)]
        if kind == "global":                       # leave the producer's side, enter the reader's top
            x1 += bw / 2 if x2 > x1 else -bw / 2
            y2 -= bh / 2
        else:                                      # bottom of the producer to the top of the consumer
            y1, y2 = y1 + bh / 2, y2 - bh / 2
        style = dict(arrowstyle="-|>,head_length=0.35,head_width=0.18", color="#444444", lw=0.9,
                     shrinkA=0, shrinkB=0)
        if kind == "global":
            style.update(color="#c62828", lw=0.9, linestyle=(0, (3, 2)), connectionstyle="arc3,rad=-0.15")
        else:
            if kind == "read":
                style.update(color="#888888")
            if b.y - a.y > 1:                      # a long edge bows out so it does not run through boxes
                bend = 0.45 / (b.y - a.y) ** 0.5 + 0.1
                side = 1 if (x2 > x1 or (x2 == x1 and a.node < b.node)) else -1
                style["connectionstyle"] = f"arc3,rad={side * bend:.2f}"
        ax.annotate("", xy=(x2, y2), xytext=(x1, y1), arrowprops=style, zorder=3.5)
    ax.set_xlim(-0.75 * sx, (total_w - 1) * sx + 0.75 * sx)
    ax.set_ylim(lay.rows + 0.1, -1.9)
    ax.set_axis_off()
    handles = [Patch(facecolor=SCHEME_COLOURS[s], edgecolor=SCHEME_EDGE[s], label=s) for s in SCHEME_COLOURS]
    handles += [Patch(facecolor="#eeeeee", edgecolor="#888888", linestyle="--", label="read from global"),
                Line2D([], [], color="#c62828", linestyle=(0, (3, 2)), label="round trip via global memory"),
                Line2D([], [], **BARRIER_STYLE["block"], label="block barrier"),
                Line2D([], [], **BARRIER_STYLE["grid"], label="grid barrier")]
    ax.legend(handles=handles, loc="upper center", bbox_to_anchor=(0.5, -0.01), ncol=4, fontsize=7,
              frameon=False)
    counts = plan.scheme_counts()
    import textwrap
    text = title or (f"{plan.strategy} plan for {g.name} on {plan.gpu.name}: {len(plan.kernels)} kernel(s); "
                     + ", ".join(f"{k} {v}" for k, v in counts.items() if v))
    ax.set_title(textwrap.fill(text, max(30, int(fig.get_figwidth() * 11))), fontsize=10)
    fig.tight_layout()
    return fig
