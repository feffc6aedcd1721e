"""What-if: the paper's AStitch against the same plan with the sidebar's switches, and every switch
alone (an ablation), so a learner sees what each decision is worth in kernels, bytes and time."""
from __future__ import annotations

import pandas as pd
import streamlit as st

import astitch_sim as asim

from .. import charts, compute, pictures, state
from ..style import byte_unit, nbytes, scheme_legend


def units(runs) -> dict:
    """The unit of the global and of the shared bytes column of a table of these runs (each from its largest
    value, :func:`style.byte_unit`)."""
    runs = list(runs)
    return {"global": byte_unit(*(r.stats.global_bytes for r in runs)),
            "shared": byte_unit(*(r.stats.shared_bytes for r in runs))}


def number_format(unit: str) -> str:
    return "%d" if unit == "B" else "%.1f"


def row(label, r, base, units) -> dict:
    s, (u, size), (su, ssize) = r.stats, units["global"], units["shared"]
    return {"plan": label, "kernels": s.kernel_launches, "grid barriers": s.grid_barriers,
            f"global {u}": s.global_bytes / size, f"shared {su}": s.shared_bytes / ssize,
            "predicted us": s.predicted_us,
            "time vs paper": s.predicted_us / base.stats.predicted_us if base.stats.predicted_us else None,
            "max error": r.max_error}


def single_switches() -> list:
    out = [(f"no {n.replace('_', ' ')}", {n: False}) for n in state.SWITCHES]
    out.append(("max 128 threads per block", {"max_block_threads": 128}))
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
    unit = units(runs.values())
    u, su = unit["global"][0], unit["shared"][0]
    df = pd.DataFrame([row(label, r, base, unit) for label, r in runs.items()])
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
        plot["bytes label"] = [nbytes(r.stats.global_bytes) for r in runs.values()]
        st.altair_chart(charts.strategy_bars(plot, f"global {u}", f"global memory traffic ({u})", colours,
                                             label="bytes label"), width="stretch")
    with right:
        st.dataframe(df.drop(columns=["label"]), hide_index=True, width="stretch",
                     column_config={f"global {u}": st.column_config.NumberColumn(format=number_format(u)),
                                    f"shared {su}": st.column_config.NumberColumn(format=number_format(su)),
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
    unit = units([base, *runs.values()])
    u = unit["global"][0]
    df = pd.DataFrame([row("astitch (paper)", base, base, unit)] + [row(label, r, base, unit) for label, r in runs.items()])
    df["effect"] = ["-"] + [_effect(r, base) for r in runs.values()]
    df["label"] = [f"{t:.2f}x" for t in df["time vs paper"]]
    colours = {p: ("#4e79a7" if p == "astitch (paper)" else "#9ecae9") for p in df["plan"]}
    left, right = st.columns([2, 3], gap="large")
    with left:
        st.altair_chart(charts.strategy_bars(df.rename(columns={"plan": "strategy"}), "time vs paper",
                                             "predicted time relative to the paper's AStitch", colours,
                                             label="label"), width="stretch")
    with right:
        st.dataframe(df[["plan", "kernels", "grid barriers", f"global {u}", "predicted us", "effect"]],
                     hide_index=True, width="stretch",
                     column_config={f"global {u}": st.column_config.NumberColumn(format=number_format(u)),
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
        words.append(f"global {nbytes(b.global_bytes)} -> {nbytes(a.global_bytes)}")
    if r.plan.to_dict()["kernels"] == base.plan.to_dict()["kernels"]:
        return "no change on this graph"
    return ", ".join(words) or "different mapping, same traffic"
