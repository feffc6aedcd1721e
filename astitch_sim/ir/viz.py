"""Graphviz DOT for graphs (and, with the compiler, plans).

DOT text is always produced in pure Python; turning it into SVG/PNG needs the
``dot`` binary (``render_dot``), which is optional.
"""
from __future__ import annotations

import shutil
import subprocess

from ..errors import AStitchError
from .shapes import shape_str

_SHAPE = {"source": "ellipse", "reduce": "invhouse", "broadcast": "house", "library": "box3d", "indexed": "cds"}
_FILL = {"light": "#e8f4ea", "expensive": "#fde2c8", "free": "#f2f2f2", "compute": "#d9d2f0"}


def _q(s: str) -> str:
    return '"' + str(s).replace('"', '\\"') + '"'


def node_label(n) -> str:
    return f"{n.name}\\n{n.op}{n.attr_str()}\\n{shape_str(n.shape, n.dtype)}"


def graph_to_dot(graph, node_attrs=None, clusters=None) -> str:
    """DOT of ``graph``.  ``node_attrs`` maps a node name to extra DOT attributes;
    ``clusters`` maps a cluster label to the node names drawn inside it (kernels)."""
    node_attrs = node_attrs or {}
    outputs = {o.name for o in graph.outputs}
    lines = [f"digraph {_q(graph.name)} {{", "  rankdir=TB;", '  node [fontname="Helvetica", fontsize=10];']

    def node_line(n):
        attrs = {"label": node_label(n), "shape": _SHAPE.get(n.kind, "box"), "style": "filled",
                 "fillcolor": _FILL.get(n.opdef.cost, "#ffffff")}
        if n.op == "constant" and n.rank == 0:
            attrs["shape"] = "plaintext"
        if n.name in outputs:
            attrs["peripheries"] = "2"
        attrs.update(node_attrs.get(n.name, {}))
        return f"  {_q(n.name)} [" + ", ".join(f"{k}={_q(v)}" for k, v in attrs.items()) + "];"

    drawn = set()
    for i, (label, names) in enumerate((clusters or {}).items()):
        lines.append(f"  subgraph cluster_{i} {{ label={_q(label)}; style=rounded; color=\"#5577aa\";")
        for name in names:
            lines.append("  " + node_line(graph[name]))
            drawn.add(name)
        lines.append("  }")
    for n in graph:
        if n.name not in drawn:
            lines.append(node_line(n))
    for n in graph:
        for o in n.operands:
            lines.append(f"  {_q(o.name)} -> {_q(n.name)};")
    lines.append("}")
    return "\n".join(lines)


def render_dot(dot: str, fmt: str = "svg") -> bytes:
    """Render DOT with the graphviz ``dot`` binary (install graphviz to use it)."""
    exe = shutil.which("dot")
    if exe is None:
        raise AStitchError("rendering needs the graphviz 'dot' program: apt-get install graphviz "
                           "(the DOT text itself is available without it)")
    proc = subprocess.run([exe, f"-T{fmt}"], input=dot.encode(), capture_output=True, timeout=60)
    if proc.returncode != 0:
        raise AStitchError(f"dot failed: {proc.stderr.decode(errors='replace')[:500]}")
    return proc.stdout
