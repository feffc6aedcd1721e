"""Kernel: one kernel's stages, dominants, barriers, launch shape, registers and shared memory
against the GPU's limits, occupancy (blocks per SM, waves) and the assume-relax-apply notes."""
from __future__ import annotations

import math

import altair as alt
import pandas as pd
import streamlit as st

import astitch_sim as asim

from .. import charts, pictures, why
from ..style import esc, scheme_legend
from . import kernel_picker, node_picker


def resources(plan, k) -> pd.DataFrame:
    gpu = asim.gpu(plan.gpu.name)
    return pd.DataFrame([
        {"resource": "threads per block", "used": k.block, "limit": gpu.max_threads_per_block},
        {"resource": "registers per thread", "used": k.registers_per_thread, "limit": gpu.max_registers_per_thread},
        {"resource": "shared KiB per block", "used": k.shared_bytes / 1024, "limit": gpu.shared_per_block_optin / 1024},
        {"resource": "blocks per wave (grid)", "used": k.grid,
         "limit": gpu.blocks_per_wave(k.block, k.shared_bytes, k.registers_per_thread)},
    ])


def render(ctx):
    plan = ctx.plan()
    st.subheader(f"Kernel anatomy ({ctx.label(ctx.strategy)} on {ctx.gpu})")
    top = st.columns([2, 2])
    with top[0]:
        i = kernel_picker(ctx, plan)
    with top[1]:
        node = node_picker(plan, "Highlight a node")
    k = plan.kernels[i]
    gpu = asim.gpu(plan.gpu.name)
    st.markdown(scheme_legend(), unsafe_allow_html=True)
    left, right = st.columns([5, 3], gap="large")
    with left:
        st.graphviz_chart(pictures.kernel_dot(plan, i, node=node), width="stretch")
    with right:
        occ = gpu.occupancy(k.block, k.shared_bytes, k.registers_per_thread)
        waves = math.ceil(k.grid / occ.blocks_per_wave)
        st.markdown(f"### launch: grid **{k.grid}** x block **{k.block}**")
        c = st.columns(3)
        c[0].metric("blocks per SM", occ.blocks_per_sm, help=f"limited by {occ.limiting_factor}")
        c[1].metric("blocks per wave", occ.blocks_per_wave, help=f"{gpu.sms} SMs x {occ.blocks_per_sm}")
        c[2].metric("waves", waves)
        st.caption(f"Occupancy limited by **{occ.limiting_factor}**; "
                   f"{occ.active_warps} warps resident per SM. "
                   + ("Grid barrier(s): every block must be resident (one wave), or the barrier deadlocks."
                      if k.global_barriers else ""))
        df = resources(plan, k)
        df["share"] = df["used"] / df["limit"]
        df["text"] = [f"{u:g} / {l:g}" for u, l in zip(df["used"].round(1), df["limit"].round(1))]
        bars = alt.Chart(df).mark_bar(color="#4e79a7").encode(
            y=alt.Y("resource:N", title=None, sort=list(df["resource"]), axis=alt.Axis(labelLimit=260)),
            x=alt.X("share:Q", title="share of the GPU's limit", scale=alt.Scale(domain=[0, 1]),
                    axis=alt.Axis(format="%")),
            color=alt.condition(alt.datum.share > 1, alt.value("#c62828"), alt.value("#4e79a7")),
            tooltip=["resource", "used", "limit"])
        text = alt.Chart(df).mark_text(align="left", dx=4, fontSize=14).encode(
            y=alt.Y("resource:N", sort=list(df["resource"])), x="share:Q", text="text:N")
        st.altair_chart(charts.big_fonts((bars + text).properties(height=170)), width="stretch")
        schemes = ", ".join(f"stage {i}: {s.reduce_scheme}" for i, s in enumerate(k.stages)
                            if s.reduce_scheme != "none")
        st.markdown(f"**{len(k.stages)} stage(s)**, {why.barrier_text(plan, i)}"
                    + (f"; reductions by {schemes}" if schemes else "") +
                    f"; reads {', '.join(k.inputs) or '-'}; "
                    f"writes {', '.join(k.outputs) or '-'}")
        for e in k.ends:                       # why the kernel ends, as the strategy recorded it
            st.markdown(why.end_html(e), unsafe_allow_html=True)
        st.markdown("**The compiler's notes**")
        for n in k.notes or ["(none)"]:
            st.markdown(f"<div class='why'>- {esc(n)}</div>", unsafe_allow_html=True)
        if k.kind == "generated":
            with st.expander("why each value lives where it does"):
                rows = [{"value": v.node, "scheme": v.scheme, "space": v.space, "why": v.why}
                        for v in k.values.values() if v.stage >= 0]
                st.dataframe(pd.DataFrame(rows), hide_index=True, width="stretch")
