"""Graph: the graph drawn with Graphviz, kernels as boxes, nodes coloured by stitch scheme,
edges by the memory space their value travels through; pick a kernel or a node to highlight it."""
from __future__ import annotations

import streamlit as st

from .. import pictures, why
from ..style import SPACE_WORD, esc, scheme_legend
from . import node_picker, plan_choice


def downloads(dot: str, stem: str, key: str) -> None:
    """DOT always; SVG and PNG when the graphviz ``dot`` program is installed."""
    cols = st.columns(3)
    cols[0].download_button("DOT", dot, file_name=f"{stem}.dot", mime="text/vnd.graphviz", key=f"dl:{key}:dot")
    svg = pictures.render(dot, "svg")
    if svg is None:
        cols[1].caption("SVG/PNG downloads need the graphviz `dot` program (`apt-get install graphviz`).")
        return
    cols[1].download_button("SVG", svg, file_name=f"{stem}.svg", mime="image/svg+xml", key=f"dl:{key}:svg")
    cols[2].download_button("PNG", pictures.render(dot, "png") or b"", file_name=f"{stem}.png", mime="image/png",
                            key=f"dl:{key}:png")


def render(ctx):
    plan = ctx.plan()
    st.subheader(f"Graph: {ctx.graph.name} under {ctx.label(ctx.strategy)} -- {len(plan.kernels)} kernel(s)")
    st.markdown(scheme_legend(), unsafe_allow_html=True)
    top = st.columns([2, 2, 1], gap="medium")
    with top[0]:
        opts = [None] + list(range(len(plan.kernels)))
        k = plan_choice("Highlight a kernel", opts,
                        ["(none)"] + [f"kernel {i}: {kern.name}" for i, kern in enumerate(plan.kernels)],
                        "graph_kernel", default=None)
    with top[1]:
        node = node_picker(plan)
    with top[2]:
        rankdir = "LR" if st.toggle("left to right", key="graph_lr") else "TB"
    left, right = st.columns([4, 1], gap="medium")
    with right:
        if node:
            node_facts(plan, node)
        elif k is not None:
            kern = plan.kernels[k]
            st.markdown(f"**kernel {k}** `{kern.name}`: grid {kern.grid} x block {kern.block}, "
                        f"{len(kern.stages)} stage(s), {why.barrier_text(plan, k)}")
            for e in kern.ends:
                st.markdown(why.end_html(e), unsafe_allow_html=True)
            for n in kern.notes:
                st.markdown(f"<div class='why'>- {esc(n)}</div>", unsafe_allow_html=True)
    dot = pictures.plan_dot(plan, kernel=k, node=node, rankdir=rankdir)
    with left:
        st.graphviz_chart(dot, width="stretch")
        downloads(dot, f"{ctx.graph.name}-{ctx.strategy}", "graph")
    if any(kern.ends for kern in plan.kernels):
        st.markdown("**Why each kernel ends** (the strategy's rule, as the plan records it)")
        for i, kern in enumerate(plan.kernels):
            for e in kern.ends:
                st.markdown(why.end_html(e, f"{i}: {kern.name}"), unsafe_allow_html=True)
    st.caption("Scalar constants are folded into the code and not drawn. A double border marks a graph output; "
               "an ellipse a parameter. Edge labels: reg = registers, smem = shared memory, global = global memory.")


def node_facts(plan, node: str) -> None:
    """What the plan says about one node: its kernel(s), scheme, space and why."""
    g = plan.graph
    n = g[node]
    st.markdown(f"**{esc(node)}** `{n.op}` {n.dtype}{list(n.shape)}")
    ks = plan.kernel_of(node)
    if not ks:
        st.markdown("an input of the graph (read from global memory by the kernels that use it)")
    for k in ks:
        i = plan.kernels.index(k)
        v = k.values.get(node)
        if k.kind == "library":
            st.markdown(f"- kernel {i} (library GEMM)")
            continue
        later = (f"; read again by stage{'s' if len(v.read_later) > 1 else ''} "
                 f"{', '.join(map(str, v.read_later))}") if v.read_later else ""
        st.markdown(f"- kernel {i}, stage {v.stage}: **{v.scheme}**, lives in {SPACE_WORD[v.space]}{later}")
        if v.why:
            st.markdown(f"<div class='why'>why: {esc(v.why)}</div>", unsafe_allow_html=True)
