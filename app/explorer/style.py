"""Colours and fonts: one palette for every picture, readable on a projector.

Stitch schemes (node fill) and memory spaces (edges) share hues, because they
are the same idea seen from two sides: Local values travel in registers (green),
Regional ones through shared memory (blue), Global ones through global memory (red).
"""
from __future__ import annotations

import html

SCHEME_FILL = {"independent": "#f2f2f2", "local": "#b9e3b0", "regional": "#a9cdf7", "global": "#f7b2a8"}
SCHEME_WORDS = {
    "independent": "no consumer in the kernel",
    "local": "registers, same thread",
    "regional": "shared memory + block barrier",
    "global": "global memory + grid barrier",
}
SPACE_COLOUR = {"register": "#2e7d32", "shared": "#1565c0", "global": "#c62828"}
SPACE_WORD = {"register": "registers", "shared": "shared memory", "global": "global memory"}
INPUT_FILL = "#ffffff"
HIGHLIGHT = "#ff8f00"

STRATEGY_COLOUR = {"unfused": "#9e9e9e", "xla": "#f28e2b", "tvm": "#b07aa1", "astitch": "#4e79a7",
                   "fusionstitching": "#59a14f", "inductor": "#e15759", "astitch (what-if)": "#76b7b2"}
FALLBACK_COLOURS = ["#edc948", "#ff9da7", "#9c755f", "#bab0ac"]

CSS = """
<style>
html, body, [class*="css"] { font-size: 17px; }
.block-container { padding-top: 2.2rem; max-width: 1500px; }
h1 { font-size: 2.0rem !important; }
.legend { display: flex; flex-wrap: wrap; gap: 0.6rem 1.2rem; align-items: center; margin: 0.2rem 0 0.6rem 0;
          font-size: 1rem; }
.legend .chip { display: inline-block; width: 1.3rem; height: 1.0rem; border: 1px solid #555; border-radius: 3px;
                vertical-align: middle; margin-right: 0.35rem; }
.legend .line { display: inline-block; width: 2.0rem; height: 0; vertical-align: middle; margin-right: 0.35rem; }
.srcview { font-family: "DejaVu Sans Mono", Menlo, Consolas, monospace; font-size: 0.86rem; line-height: 1.35;
           background: #fafafa; border: 1px solid #ddd; border-radius: 6px; padding: 0.5rem 0; overflow: auto;
           max-height: 640px; white-space: pre; }
.srcview .ln { color: #999; display: inline-block; width: 3.2em; text-align: right; padding-right: 0.8em;
               user-select: none; }
.srcview .hl { background: #ffe6b3; display: block; }
.srcview .row { display: block; padding-right: 1em; }
.srcview .cm { color: #6a737d; }
.why { color: #444; font-size: 0.95rem; }
</style>
"""


def scheme_legend() -> str:
    """HTML: the four stitch schemes (node colours) and the three memory spaces (edge colours)."""
    parts = ['<div class="legend"><b>stitch scheme:</b>']
    for s, c in SCHEME_FILL.items():
        parts.append(f'<span><span class="chip" style="background:{c}"></span><b>{s}</b> '
                     f'<span style="color:#555">({SCHEME_WORDS[s]})</span></span>')
    parts.append('</div><div class="legend"><b>edge = where the value travels:</b>')
    for s, c in SPACE_COLOUR.items():
        style = {"register": "solid", "shared": "dashed", "global": "solid"}[s]
        width = {"register": 2, "shared": 3, "global": 4}[s]
        parts.append(f'<span><span class="line" style="border-top:{width}px {style} {c}"></span>{SPACE_WORD[s]}</span>')
    parts.append('<span><span class="chip" style="background:#fff"></span>input / kernel input</span></div>')
    return "".join(parts)


def strategy_colours(names) -> dict:
    """A colour per strategy name, stable across views (new strategies get a spare colour)."""
    out, spare = {}, iter(FALLBACK_COLOURS)
    for n in names:
        out[n] = STRATEGY_COLOUR.get(n) or next(spare, "#888888")
    return out


def esc(text) -> str:
    return html.escape(str(text))


#: byte units, largest first: every table and chart picks one from its own largest value
BYTE_UNITS = (("GiB", 1 << 30), ("MiB", 1 << 20), ("KiB", 1 << 10), ("B", 1))


def byte_unit(*values) -> tuple:
    """``(unit, bytes per unit)`` for showing ``values`` side by side: the largest unit in which the biggest
    value is at least 1 (a 2 KiB tensor reads ``2.0 KiB``, not ``0.00 MiB``; a 0-byte column reads in B)."""
    top = max((abs(float(v)) for v in values), default=0.0)
    return next(((u, size) for u, size in BYTE_UNITS if top >= size), BYTE_UNITS[-1])


def nbytes(n: float) -> str:
    n = float(n)
    for unit, size in (("GiB", 1 << 30), ("MiB", 1 << 20), ("KiB", 1 << 10)):
        if abs(n) >= size:
            return f"{n / size:.1f} {unit}"
    return f"{int(n)} B"
