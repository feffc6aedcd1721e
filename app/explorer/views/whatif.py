"""What-if: the paper's AStitch against the same plan with the sidebar's switches, and every switch
alone (an ablation), so a learner sees what each decision is worth in kernels, bytes and time."""
from __future__ import annotations

import pandas as pd
import streamlit as st

import astitch_sim as asim

from .. import charts, compute, pictures, state
from ..style import scheme_legend


def row(label, r, base) -> dict:
    s = r.stats
    return {"plan": label, "kernels": s.kernel_launches, "grid barriers": s.grid_barriers,
            "global MiB": s.global_bytes / 2**20, "shared MiB": s.shared_bytes / 2**20,
            "predicted us": s.predicted_us,
            "time vs paper": s.predicted_us / base.stats.predicted_us if base.stats.predicted_us else None,
            "max error": r.max_error}


def single_switches() -> list:
    out = [(f"no {n.replace('_', ' ')}", {n: False}) for n in state.SWITCHES]
    out.append(("max 128 threads per block", {"max_block_threads": 128}))
    out.append(("reductions as shared-memory trees", {"reduce_scheme": "tree"}))
    return out


def render(ctx):
    st.subheader("What-if: switch one AStitch decision off")
    opts = ctx.options
    if not opts:
        st.info("All switches are on: this is the paper's AStitch. Turn decisions off in the sidebar "
                "(**What-if switches**); every view then shows the changed plan. Below: each switch alone.")
    variants = [("xla", "xla", {}), ("astitch (paper)", "astitch", {})]
    if opts:
        variants.append(("astitch (what-if)", "astitch", opts))
    runs = compute.runs(ctx.source, ctx.gpu, variants, "What-if")
    if runs is None:
        return
    base = runs["astitch (paper)"]
    df = pd.DataFrame([row(label, r, base) for label, r in runs.items()])
    colours = {"xla": "#f28e2b", "astitch (paper)": "#4e79a7", "astitch (what-if)": "#76b7b2"}
    if opts:
        st.markdown("**switched off:** " + ", ".join(f"`{k}={v}`" for k, v in opts.items()))
        for k in opts:
            st.caption(f"{k}: {asim.AStitchOptions.HELP[k]}")
    left, right = st.columns([3, 2], gap="large")
    df["label"] = [f"{t:.1f} us" for t in df["predicted us"]]
    plot = df.rename(columns={"plan": "strategy"})
    with left:
        st.altair_chart(charts.strategy_bars(plot, "predicted us", "predicted time (us)", colours, label="label"),
                        width="stretch")
        st.altair_chart(charts.strategy_bars(plot, "global MiB", "global memory traffic (MiB)", colours, fmt=",.2f"),
                        width="stretch")
    with right:
        st.dataframe(df.drop(columns=["label"]), hide_index=True, width="stretch",
                     column_config={"global MiB": st.column_config.NumberColumn(format="%.3f"),
                                    "shared MiB": st.column_config.NumberColumn(format="%.3f"),
                                    "predicted us": st.column_config.NumberColumn(format="%.2f"),
                                    "time vs paper": st.column_config.NumberColumn(format="%.2fx"),
                                    "max error": st.column_config.NumberColumn(format="%.1e")})
        st.caption("Every switched plan still computes the reference (max error). Times: SIMT-model predictions.")
    if opts:
        st.markdown("**The switched plan** (the sidebar's strategy picker does not matter here)")
        st.markdown(scheme_legend(), unsafe_allow_html=True)
        st.graphviz_chart(pictures.plan_dot(runs["astitch (what-if)"].plan), width="stretch")
    st.divider()
    ablation(ctx, base)


def ablation(ctx, base):
    st.markdown("### Each decision alone")
    variants = [(label, "astitch", o) for label, o in single_switches()]
    runs = compute.runs(ctx.source, ctx.gpu, variants, "the ablation")
    if runs is None:
        return
    df = pd.DataFrame([row("astitch (paper)", base, base)] + [row(label, r, base) for label, r in runs.items()])
    df["effect"] = ["-"] + [_effect(r, base) for r in runs.values()]
    df["label"] = [f"{t:.2f}x" for t in df["time vs paper"]]
    colours = {p: ("#4e79a7" if p == "astitch (paper)" else "#9ecae9") for p in df["plan"]}
    left, right = st.columns([2, 3], gap="large")
    with left:
        st.altair_chart(charts.strategy_bars(df.rename(columns={"plan": "strategy"}), "time vs paper",
                                             "predicted time relative to the paper's AStitch", colours,
                                             label="label"), width="stretch")
    with right:
        st.dataframe(df[["plan", "kernels", "grid barriers", "global MiB", "predicted us", "effect"]],
                     hide_index=True, width="stretch",
                     column_config={"global MiB": st.column_config.NumberColumn(format="%.3f"),
                                    "predicted us": st.column_config.NumberColumn(format="%.2f")})
    st.caption("A switch with no effect on this graph leaves the plan unchanged (e.g. vertical packing when the "
               "grid already fits one wave).")


def _effect(r, base) -> str:
    a, b = r.stats, base.stats
    words = []
    if a.kernel_launches != b.kernel_launches:
        words.append(f"{b.kernel_launches} -> {a.kernel_launches} kernels")
    if a.grid_barriers != b.grid_barriers:
        words.append(f"{b.grid_barriers} -> {a.grid_barriers} grid barriers")
    if a.global_bytes != b.global_bytes:
        words.append(f"global {b.global_bytes / 2**20:.2f} -> {a.global_bytes / 2**20:.2f} MiB")
    if r.plan.to_dict()["kernels"] == base.plan.to_dict()["kernels"]:
        return "no change on this graph"
    return ", ".join(words) or "different mapping, same traffic"
