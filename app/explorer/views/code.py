"""Code: the generated Numba-CUDA source of the selected kernel next to the plan printout, lines
linked by node (godbolt-style), the plan JSON to download, and GPU times where any were measured."""
from __future__ import annotations

import re

import pandas as pd
import streamlit as st

import gpu_backend

from .. import compute
from ..style import esc
from . import kernel_picker, node_picker


@st.cache_data(max_entries=64, show_spinner=False)
def source_of(plan_json: str) -> str:
    import astitch_sim as asim
    return gpu_backend.generate_source(asim.Plan.from_json(plan_json))


def split_functions(src: str) -> list:
    """The module's top-level kernel functions, in order: (name, first line, text)."""
    lines = src.splitlines()
    starts = [i for i, ln in enumerate(lines) if ln.startswith("def ")]
    out = []
    for n, i in enumerate(starts):
        j = i
        while j > 0 and lines[j - 1].startswith("@"):
            j -= 1
        end = starts[n + 1] if n + 1 < len(starts) else len(lines)
        while end > i and lines[end - 1].startswith("@"):
            end -= 1
        out.append((lines[i][4:].split("(")[0], j + 1, "\n".join(lines[j:end]).rstrip()))
    return out


def kernel_source(src: str, plan, index: int) -> tuple:
    funcs = split_functions(src)
    ident = re.sub(r"\W", "_", plan.kernels[index].name)
    for name, first, text in funcs:
        if name == ident:
            return first, text
    return (funcs[index][1], funcs[index][2]) if index < len(funcs) else (1, src)


def highlighted(text: str, first: int, node: str | None) -> str:
    """HTML source with line numbers; lines that mention ``node`` highlighted."""
    pat = re.compile(rf"(?<![\w.]){re.escape(node)}(?![\w.])") if node else None
    out = []
    for n, line in enumerate(text.splitlines(), start=first):
        code, _, comment = line.partition("  #") if "  #" in line else (line, "", "")
        body = esc(code) + (f"<span class='cm'>  #{esc(comment)}</span>" if comment else "")
        cls = "row hl" if pat is not None and pat.search(line) else "row"
        out.append(f"<span class='{cls}'><span class='ln'>{n}</span>{body}</span>")
    return "<div class='srcview'>" + "".join(out) + "</div>"


def plan_text(plan, index: int, node: str | None) -> str:
    lines = str(plan).splitlines()
    start = next((i for i, ln in enumerate(lines) if ln.startswith(f"kernel {index} ")), 0)
    end = next((i for i, ln in enumerate(lines) if ln.startswith(f"kernel {index + 1} ")), len(lines))
    return highlighted("\n".join(lines[start:end]), start + 1, node)


def render(ctx):
    plan = ctx.plan()
    st.subheader(f"Code: the Numba-CUDA kernels generated from the {ctx.label(ctx.strategy)} plan")
    top = st.columns(2)
    with top[0]:
        i = kernel_picker(ctx, plan)
    with top[1]:
        node = node_picker(plan)
    src = source_of(plan.to_json())
    first, text = kernel_source(src, plan, i)
    left, right = st.columns([2, 3], gap="medium")
    with left:
        st.markdown("**the plan** (`print(plan)`)")
        st.markdown(plan_text(plan, i, node), unsafe_allow_html=True)
    with right:
        st.markdown(f"**generated source** (`gpu_backend.generate_source(plan)`, lines {first}-"
                    f"{first + len(text.splitlines()) - 1})")
        st.markdown(highlighted(text, first, node), unsafe_allow_html=True)
    if node:
        st.caption(f"Highlighted: every line that mentions `{node}` in the plan and in the kernel source.")
    c = st.columns(3)
    stem = f"{ctx.graph.name}-{ctx.strategy}-{ctx.gpu}"
    c[0].download_button("Plan JSON", plan.to_json(), file_name=f"{stem}.plan.json", mime="application/json",
                         key="dl:plan")
    c[1].download_button("Numba-CUDA source (.py)", src, file_name=f"{stem}_kernels.py", mime="text/x-python",
                         key="dl:src")
    c[2].download_button("Plan printout (.txt)", str(plan), file_name=f"{stem}.plan.txt", key="dl:txt")
    st.divider()
    timings(ctx)


def timings(ctx):
    st.markdown("### Measured vs predicted")
    rows = compute.measured_for(ctx.source, compute.gpu_measurements())
    if not rows:
        st.info("**No GPU measurements exist for this case.** No GPU has run these kernels yet (the project has "
                "had no GPU so far); `python -m benchmarks.gpu_bench` measures them when one is available and commits "
                "`benchmarks/results/.../results.json`, which this view will show here, labelled. Until then, the "
                "only times are the SIMT model's **predictions** (Compare view).")
        return
    df = pd.DataFrame(rows, columns=["device", "date", "strategy", "measured us (GPU)", "file"])
    st.dataframe(df, hide_index=True, width="stretch")
    st.caption("Measured: GPU wall time of the plan's kernels (median), from the committed results file named. "
               "Predicted times (SIMT model) are in the Compare view.")
