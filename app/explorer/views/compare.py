"""Compare: every strategy side by side -- kernels, launches, bytes, flops, predicted time,
speedup over xla -- as charts first and a table beside them, with the plans' own notes."""
from __future__ import annotations

import pandas as pd
import streamlit as st

from astitch_sim.search_record import format_search

from .. import charts
from ..style import nbytes, strategy_colours


def table(ctx, runs) -> pd.DataFrame:
    xla = runs.get("xla")
    rows = []
    for s, r in runs.items():
        st_ = r.stats
        rows.append({"strategy": ctx.label(s), "kernels": st_.kernel_launches,
                     "grid barriers": st_.grid_barriers,
                     "global read MiB": st_.global_bytes_read / 2**20,
                     "global written MiB": st_.global_bytes_written / 2**20,
                     "global MiB": st_.global_bytes / 2**20, "shared MiB": st_.shared_bytes / 2**20,
                     "flops": st_.flops, "predicted us": st_.predicted_us,
                     "vs xla": (xla.stats.predicted_us / st_.predicted_us) if xla and st_.predicted_us else None,
                     "max error": r.max_error})
    return pd.DataFrame(rows)


def render(ctx):
    st.subheader("Compare the strategies")
    runs = ctx.runs("Compare")
    if runs is None:
        return
    df = table(ctx, runs)
    colours = strategy_colours(df["strategy"])
    df["time label"] = [f"{t:.1f} us" + (f"  ({v:.2f}x vs xla)" if v else "") for t, v in
                        zip(df["predicted us"], df["vs xla"])]
    left, right = st.columns([3, 2], gap="large")
    with left:
        st.altair_chart(charts.strategy_bars(df, "predicted us", "predicted time (us, SIMT model)", colours,
                                             label="time label"), width="stretch")
        long = []
        for _, row in df.iterrows():
            long.append({"plan": row["strategy"], "traffic": "global read", "MiB": row["global read MiB"], "order": 0})
            long.append({"plan": row["strategy"], "traffic": "global write", "MiB": row["global written MiB"],
                         "order": 1})
        st.altair_chart(charts.stacked_bytes(pd.DataFrame(long), "plan", "global memory traffic (MiB)",
                                             order=list(df["strategy"])), width="stretch")
        st.altair_chart(charts.strategy_bars(df, "kernels", "kernel launches", colours, fmt="d"),
                        width="stretch")
    with right:
        shown = df[["strategy", "kernels", "grid barriers", "global MiB", "shared MiB", "flops", "predicted us",
                    "vs xla", "max error"]]
        st.dataframe(shown, hide_index=True, width="stretch", column_config={
            "global MiB": st.column_config.NumberColumn(format="%.3f"),
            "shared MiB": st.column_config.NumberColumn(format="%.3f"),
            "predicted us": st.column_config.NumberColumn(format="%.2f"),
            "vs xla": st.column_config.NumberColumn(format="%.2fx"),
            "max error": st.column_config.NumberColumn(format="%.1e", help="vs the numpy reference"),
            "flops": st.column_config.NumberColumn(format="%d")})
        st.caption(f"{ctx.source.label} on {ctx.gpu}. Times are **predictions of the SIMT model's cost model** "
                   "(uncalibrated; no GPU measurement). *max error*: simulated outputs against the numpy "
                   "reference, |sim - ref| / (1 + |ref|).")
        verdict(ctx, runs)
        for s, r in runs.items():
            with st.expander(f"why {ctx.label(s)} plans {r.stats.kernel_launches} kernel(s)"):
                for note in r.plan.notes:
                    st.markdown(f"- {note}")
                for i, k in enumerate(r.plan.kernels):
                    for note in k.notes:
                        st.markdown(f"- kernel {i} `{k.name}`: {note}")
            if r.plan.search:
                with st.expander(f"how {ctx.label(s)} searched: the candidates it scored and why the winner won"):
                    st.caption("A search-based strategy records every fusion pattern and schedule it priced with "
                               "the cost model (``plan.search``; ``print(plan)`` shows the same lines).")
                    st.code("\n".join(format_search(r.plan.search, max_candidates=8)), language="text")


def verdict(ctx, runs):
    """Where astitch wins or does not, in words, from the numbers above."""
    a, x = runs.get("astitch"), runs.get("xla")
    if not a or not x:
        return
    sa, sx = a.stats, x.stats
    speed = sx.predicted_us / sa.predicted_us if sa.predicted_us else 0
    words = [f"**astitch vs xla: {speed:.2f}x** predicted."]
    if sx.kernel_launches > sa.kernel_launches:
        words.append(f"It launches {sa.kernel_launches} kernel(s) instead of {sx.kernel_launches}: "
                     f"{sx.kernel_launches - sa.kernel_launches} fewer launches.")
    saved = sx.global_bytes - sa.global_bytes
    if saved > 0:
        words.append(f"It moves {nbytes(saved)} less through global memory "
                     f"({nbytes(sx.global_bytes)} -> {nbytes(sa.global_bytes)}): intermediates stay on chip.")
    elif saved < 0:
        words.append(f"It moves {nbytes(-saved)} *more* through global memory (Global stitching, atomics).")
    if speed < 1.05:
        words.append("Little or nothing to win here: xla already fuses this graph well (pure elementwise, or one "
                     "pass over a large input dominates).")
    if sa.grid_barriers:
        words.append(f"It pays {sa.grid_barriers} grid barrier(s) for Global stitching.")
    st.info(" ".join(words))
