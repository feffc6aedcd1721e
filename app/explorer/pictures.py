"""Graphviz DOT drawn from a Plan: the graph with kernels and stitch schemes, one kernel's stages,
and an Nsight-style memory chart.  DOT text only: Streamlit draws it in the browser
(no ``dot`` binary needed); SVG/PNG downloads use the binary when it is installed."""
from __future__ import annotations

import math
import shutil
import subprocess

from astitch_sim.plan.vocabulary import Barrier, Space

from .why import end_label
from .style import HIGHLIGHT, INPUT_FILL, SCHEME_FILL, SPACE_COLOUR, SPACE_WORD, nbytes

EDGE_STYLE = {"register": 'color="{c}", penwidth=1.6',
              "shared": 'color="{c}", penwidth=2.6, style=dashed',
              "global": 'color="{c}", penwidth=3.2'}
EDGE_TAG = {"register": "reg", "shared": "smem", "global": "global"}


def q(s) -> str:
    return '"' + str(s).replace('"', '\\"') + '"'


def short_shape(node) -> str:
    dims = ",".join(str(d) for d in node.shape)
    return f"{node.dtype}[{dims}]"


def _drawn(graph):
    """Nodes worth drawing: everything but scalar constants (folded into the code)."""
    return [n for n in graph if not (n.op == "constant" and n.rank == 0)]


def plan_dot(plan, kernel: int | None = None, node: str | None = None, rankdir: str = "TB") -> str:
    """The graph, kernels as clusters, nodes filled by stitch scheme, edges coloured by memory space.

    ``kernel`` / ``node``: highlight that kernel's cluster / that node and its edges."""
    g = plan.graph
    edges: dict = {}
    for prod, cons, _, space in plan.transfers():
        edges.setdefault((prod, cons), set()).add(space)
    owner, copies = {}, {}
    for i, k in enumerate(plan.kernels):
        names = k.computed
        for n in dict.fromkeys(names):
            owner.setdefault(n, i)
            copies[n] = copies.get(n, 0) + 1
    lines = [f"digraph {q(g.name)} {{", f"  rankdir={rankdir}; nodesep=0.25; ranksep=0.45; bgcolor=transparent;",
             '  node [fontname="Helvetica", fontsize=16, style="filled,rounded", shape=box, penwidth=1.2, margin="0.12,0.04"];',
             '  edge [fontname="Helvetica", fontsize=14, arrowsize=0.8];']
    outputs = {o.name for o in g.outputs}

    def node_line(n):
        scheme = None
        if n.name in owner:
            k = plan.kernels[owner[n.name]]
            scheme = k.schemes.get(n.name, "independent") if k.kind == "generated" else "independent"
        label = f"{n.name}\\n{short_shape(n)}" if n.op == "parameter" else f"{n.name}\\n{n.op}  {short_shape(n)}"
        if copies.get(n.name, 0) > 1:
            label += f"\\n(computed in {copies[n.name]} kernels)"
        attrs = {"label": label, "fillcolor": SCHEME_FILL[scheme] if scheme else INPUT_FILL}
        if n.op == "parameter":
            attrs["shape"] = "ellipse"
        if n.name in outputs:
            attrs["peripheries"] = "2"
        if n.name == node:
            attrs.update(color=HIGHLIGHT, penwidth="5")
        return f"    {q(n.name)} [" + ", ".join(f"{a}={q(v)}" for a, v in attrs.items()) + "];"

    placed = set()
    for i, k in enumerate(plan.kernels):
        members = [n for n in g if owner.get(n.name) == i and not (n.op == "constant" and n.rank == 0)]
        if not members:
            continue
        hot = kernel == i
        label = f"kernel {i}: {k.name}   grid {k.grid} x block {k.block}"
        if k.kind == "generated" and k.global_barriers:
            label += f"   {k.global_barriers} grid barrier(s)"
        if k.ends:
            label += "\\n" + end_label(k)          # why it ends, as the strategy recorded it
        lines.append(f"  subgraph cluster_{i} {{ label={q(label)}; fontname=\"Helvetica\"; fontsize=14; "
                     f"style=\"rounded,filled\"; fillcolor=\"{'#fff3e0' if hot else '#f8f9fb'}\"; "
                     f"color=\"{HIGHLIGHT if hot else '#7a8aa6'}\"; penwidth={4 if hot else 1.4};")
        for n in members:
            lines.append(node_line(n))
            placed.add(n.name)
        lines.append("  }")
    for n in _drawn(g):
        if n.name not in placed:
            lines.append(node_line(n))
    for (a, b), spaces in edges.items():
        if a not in placed and not any(x.name == a for x in _drawn(g)):
            continue
        worst = max(map(Space.parse, spaces))       # spaces order nearest first: the farthest is the worst
        style = EDGE_STYLE[worst].format(c=SPACE_COLOUR[worst])
        tag = "/".join(EDGE_TAG[s] for s in sorted(map(Space.parse, spaces)))
        if node is not None and node in (a, b):
            style += ", penwidth=5"
        lines.append(f"  {q(a)} -> {q(b)} [{style}, label={q(' ' + tag)}, fontcolor=\"{SPACE_COLOUR[worst]}\"];")
    lines.append("}")
    return "\n".join(lines)


def kernel_dot(plan, index: int, node: str | None = None) -> str:
    """One kernel as the paper draws it: stages top to bottom, barriers between them, values that
    cross stages on the side (in the colour of the space they live in)."""
    k = plan.kernels[index]
    g = plan.graph
    lines = ["digraph kernel {", "  rankdir=TB; nodesep=0.3; ranksep=0.35; bgcolor=transparent;",
             '  node [fontname="Helvetica", fontsize=13, shape=box, style="filled,rounded"];',
             '  edge [fontname="Helvetica", fontsize=11];']
    if k.kind == "library":
        what = k.notes[0] if k.notes else "library kernel"
        lines.append(f'  lib [label={q(", ".join(k.computed) + chr(10) + what)}, fillcolor="#e0e0e0"];')
        lines.append("}")
        return "\n".join(lines)
    ins = ", ".join(k.inputs) or "(none)"
    lines.append(f'  in [label={q("global memory reads: " + ins)}, shape=note, fillcolor="#ffffff"];')
    prev = "in"
    for i, s in enumerate(k.stages):
        head = (f"<tr><td align='left' colspan='2'><b>stage {i}</b>: dominant <b>{_html(s.dominant)}</b><br/>"
                f"<font point-size='11'>{_html(s.mapping.describe())}</font></td></tr>")
        body = []
        for n in list(s.ops) + list(s.epilogue):
            v = k.values.get(n)
            sc = v.scheme if v else "local"
            mark = " bgcolor='#ffd27f'" if n == node else ""
            where = "epilogue: " if n in s.epilogue else ""
            rc = s.recompute.get(n)
            extra = f"  (x{rc} per value)" if rc and rc > 1 else ""
            body.append(f"<tr><td align='left'{mark}>{where}{_html(n)}  <i>{_html(g[n].op)}</i>{extra}</td>"
                        f"<td bgcolor='{SCHEME_FILL[sc]}'>{sc}</td></tr>")
        table = head + "".join(body)
        lines.append(f"  s{i} [shape=plaintext, style=\"\", label=<<table border='1' cellborder='0' "
                     f"cellspacing='0' cellpadding='4' bgcolor='#f8f9fb'>{table}</table>>];")
        lines.append(f"  {prev} -> s{i};")
        prev = f"s{i}"
        if s.sync_after_combine:
            lines.append(f'  c{i} [label="grid barrier (split reduce combined)", shape=box, style=filled, '
                         f'fillcolor="{SCHEME_FILL["global"]}", fontsize=12, height=0.3];')
            lines.append(f"  {prev} -> c{i};")
            prev = f"c{i}"
        if s.barrier_after != Barrier.NONE:
            colour = SCHEME_FILL["global"] if s.barrier_after == Barrier.GRID else SCHEME_FILL["regional"]
            lines.append(f'  b{i} [label={q(s.barrier_after + " barrier" + (" (all blocks)" if s.barrier_after == Barrier.GRID else " (__syncthreads)"))}, '
                         f'shape=box, style=filled, fillcolor="{colour}", fontsize=12, height=0.3, width=4];')
            lines.append(f"  {prev} -> b{i};")
            prev = f"b{i}"
    outs = ", ".join(k.outputs) or "(none)"
    lines.append(f'  out [label={q("global memory writes: " + outs)}, shape=note, fillcolor="#ffffff"];')
    lines.append(f"  {prev} -> out;")
    # values crossing stages, drawn as side edges in their space's colour
    for n, v in k.values.items():              # the plan records which later stages read each value
        for j in v.read_later:
            lines.append(f"  s{v.stage} -> s{j} [color=\"{SPACE_COLOUR[v.space]}\", penwidth=2.5, style=dashed, "
                         f"constraint=false, label={q(' ' + n + ' via ' + SPACE_WORD[v.space])}, "
                         f"fontcolor=\"{SPACE_COLOUR[v.space]}\"];")
    lines.append("}")
    return "\n".join(dict.fromkeys(lines))


def _html(s) -> str:
    return str(s).replace("&", "&amp;").replace("<", "&lt;").replace(">", "&gt;")


def memory_dot(title: str, stats, scale: float) -> str:
    """Nsight-Compute-style memory chart of one plan: threads in the middle, arrows to registers,
    shared memory and global memory labelled with the bytes moved (arrow width ~ log bytes)."""
    rd = stats.global_bytes_read
    wr = stats.global_bytes_written
    sh = stats.shared_bytes
    reuse = sum(s.register_reuse for k in stats.kernels for s in k.stages)

    def width(b):
        return 1.0 + 7.0 * (math.log10(1 + b) / max(1.0, math.log10(1 + scale)))

    lines = ["digraph mem {", "  rankdir=LR; bgcolor=transparent; nodesep=0.5;",
             '  node [fontname="Helvetica", fontsize=14, style="filled,rounded", shape=box];',
             '  edge [fontname="Helvetica", fontsize=13];',
             f'  t [label={q(title + chr(10) + str(stats.kernel_launches) + " kernel launch(es)")}, '
             f'fillcolor="#eef2f8", width=2.2, height=1.2];',
             f'  r [label="registers", fillcolor="{SCHEME_FILL["local"]}"];',
             f'  s [label="shared memory\\n(per block, on chip)", fillcolor="{SCHEME_FILL["regional"]}"];',
             f'  g [label="global memory\\n(HBM, off chip)", fillcolor="{SCHEME_FILL["global"]}", height=1.2];',
             f'  g -> t [label={q("read " + nbytes(rd))}, penwidth={width(rd):.2f}, color="{SPACE_COLOUR["global"]}"];',
             f'  t -> g [label={q("write " + nbytes(wr))}, penwidth={width(wr):.2f}, color="{SPACE_COLOUR["global"]}"];',
             f'  t -> s [label={q(nbytes(sh) + " moved")}, penwidth={width(sh):.2f}, dir=both, '
             f'color="{SPACE_COLOUR["shared"]}"];',
             f'  r -> t [label={q(f"{reuse:,} values reused")}, dir=both, color="{SPACE_COLOUR["register"]}", '
             f'penwidth=2];',
             "  {rank=same; r; s;}", "}"]
    return "\n".join(lines)


def render(dot: str, fmt: str) -> bytes | None:
    """SVG/PNG bytes from the graphviz ``dot`` program, or None when it is not installed."""
    exe = shutil.which("dot")
    if exe is None:
        return None
    proc = subprocess.run([exe, f"-T{fmt}"], input=dot.encode(), capture_output=True, timeout=60)
    return proc.stdout if proc.returncode == 0 else None
