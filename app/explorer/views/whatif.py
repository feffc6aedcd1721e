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


def term_totals(stats) -> dict:
    """The cost model's terms summed over a plan's kernels (``KernelStats.breakdown``, in us)."""
    out: dict = {}
    for ks in stats.kernels:
        for term, us in ks.breakdown.items():
            out[term] = out.get(term, 0.0) + us
    return out


def time_deltas(r, base, at_least: float = 0.005) -> list:
    """``[(term as the charts name it, us)]``: how each cost-model term of ``r`` differs from ``base``'s,
    largest change first (terms that moved by less than ``at_least`` us left out)."""
    a, b = term_totals(r.stats), term_totals(base.stats)
    deltas = [(charts.TERMS.get(t, t), a.get(t, 0.0) - b.get(t, 0.0)) for t in dict.fromkeys([*b, *a])]
    return sorted([d for d in deltas if abs(d[1]) >= at_least], key=lambda d: -abs(d[1]))


def why_time(r, base, most: int = 3) -> str:
    """Why a what-if is faster or slower than the paper's plan, from the cost model's own terms:
    ``1.47x faster: grid barriers -2.60, memset -2.00, DRAM traffic -0.60, 3 other terms +0.05 us``
    (the figures add up to the difference in predicted time)."""
    t, t0 = r.stats.predicted_us, base.stats.predicted_us
    if not t or abs(t - t0) < 0.005:
        return "same predicted time"
    deltas = time_deltas(r, base)
    verdict = f"{t0 / t:.2f}x faster" if t < t0 else f"{t / t0:.2f}x slower"
    shown = deltas[:most]
    if len(deltas) > most:                     # the rest in one figure, so the numbers add up to the difference
        shown.append((f"{len(deltas) - most} other terms", sum(us for _, us in deltas[most:])))
    return f"{verdict}: " + ", ".join(f"{name} {us:+.2f}" for name, us in shown) + " us"


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
    xla = ctx.label("xla")
    variants = [(xla, "xla", dict(ctx.opts_for("xla"))), ("astitch (paper)", "astitch", {})]
    if opts:
        variants.append(("astitch (what-if)", "astitch", opts))
    runs = compute.runs(ctx.source, ctx.gpu, variants, "What-if")
    if runs is None:
        return
    base = runs["astitch (paper)"]
    unit = units(runs.values())
    u, su = unit["global"][0], unit["shared"][0]
    df = pd.DataFrame([row(label, r, base, unit) for label, r in runs.items()])
    colours = {xla: "#f28e2b", "astitch (paper)": "#4e79a7", "astitch (what-if)": "#76b7b2"}
    if opts:
        st.markdown("**switched off:** " + ", ".join(f"`{k}={v}`" for k, v in opts.items()))
        for k in opts:
            st.caption(f"{k}: {asim.AStitchOptions.HELP[k]}")
    left, right = st.columns(2, gap="large")
    df["label"] = [f"{t:.1f} us" for t in df["predicted us"]]
    plot = df.rename(columns={"plan": "strategy"})
    with left:
        st.altair_chart(charts.strategy_bars(plot, "predicted us", "predicted time (us)", colours, label="label"),
                        width="stretch")
    with right:
        plot["bytes label"] = [nbytes(r.stats.global_bytes) for r in runs.values()]
        st.altair_chart(charts.strategy_bars(plot, f"global {u}", f"global memory traffic ({u})", colours,
                                             label="bytes label"), width="stretch")
    st.dataframe(df.drop(columns=["label"]), hide_index=True, width="stretch",
                 column_config={f"global {u}": st.column_config.NumberColumn(format=number_format(u)),
                                f"shared {su}": st.column_config.NumberColumn(format=number_format(su)),
                                "predicted us": st.column_config.NumberColumn(format="%.2f"),
                                "time vs paper": st.column_config.NumberColumn(format="%.2fx"),
                                "max error": st.column_config.NumberColumn(format="%.1e")})
    st.caption("Every switched plan still computes the reference (max error). Times: SIMT-model predictions.")
    if opts:
        st.info(f"**astitch (what-if)** against the paper's plan: {why_time(runs['astitch (what-if)'], base)}.")
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
    df["why (predicted time, by cost-model term)"] = ["-"] + [why_time(r, base) for r in runs.values()]
    df["label"] = [f"{t:.2f}x" for t in df["time vs paper"]]
    colours = {p: ("#4e79a7" if p == "astitch (paper)" else "#9ecae9") for p in df["plan"]}
    # the chart, then the table at the page's full width: its *effect* and *why* columns are sentences
    st.altair_chart(charts.strategy_bars(df.rename(columns={"plan": "strategy"}), "time vs paper",
                                         "predicted time relative to the paper's AStitch", colours,
                                         label="label"), width="stretch")
    st.dataframe(df[["plan", "kernels", "grid barriers", f"global {u}", "predicted us", "effect",
                     "why (predicted time, by cost-model term)"]],
                 hide_index=True, width="stretch",
                 column_config={f"global {u}": st.column_config.NumberColumn(format=number_format(u)),
                                "predicted us": st.column_config.NumberColumn(format="%.2f"),
                                "effect": st.column_config.TextColumn(width="medium"),
                                "why (predicted time, by cost-model term)": st.column_config.TextColumn(
                                    width="large")})
    st.caption("A switch with no effect on this graph leaves the plan unchanged (e.g. vertical packing when the "
               "grid already fits one wave). *why*: the cost model's terms (Compare view, *where the predicted time "
               "goes*) that changed most against the paper's plan, in us; negative is time saved.")
    winners = df[(df["time vs paper"] < 0.98) & (df["plan"] != "astitch (paper)")]
    for _, w in winners.iterrows():
        st.warning(f"**{w['plan']}** is predicted faster than the paper's AStitch on this shape "
                   f"({w['why (predicted time, by cost-model term)']}): here the decision it switches off costs "
                   "more than it saves, by the cost model's terms above.")


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
