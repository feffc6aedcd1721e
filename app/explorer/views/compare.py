"""Compare: every strategy side by side -- kernels, launches, bytes, flops, predicted time,
speedup over xla -- as charts first and a table beside them, with the plans' own notes."""
from __future__ import annotations

import pandas as pd
import streamlit as st

from astitch_sim.plan.search_record import format_search

from .. import charts
from ..style import byte_unit, nbytes, strategy_colours


def table(ctx, runs) -> pd.DataFrame:
    """One row per strategy.  Global and shared bytes each in the unit that suits their largest value
    (``df.attrs["unit"]``, ``df.attrs["shared unit"]``): a 2 KiB tensor reads 2.0 KiB, not 0.00 MiB."""
    xla = runs.get("xla")
    unit, size = byte_unit(*(r.stats.global_bytes for r in runs.values()))
    sunit, ssize = byte_unit(*(r.stats.shared_bytes for r in runs.values()))
    rows = []
    for s, r in runs.items():
        st_ = r.stats
        rows.append({"strategy": ctx.label(s), "kernels": st_.kernel_launches,
                     "grid barriers": st_.grid_barriers,
                     f"global read {unit}": st_.global_bytes_read / size,
                     f"global written {unit}": st_.global_bytes_written / size,
                     f"global {unit}": st_.global_bytes / size, f"shared {sunit}": st_.shared_bytes / ssize,
                     "flops": st_.flops, "predicted us": st_.predicted_us,
                     "vs xla": (xla.stats.predicted_us / st_.predicted_us) if xla and st_.predicted_us else None,
                     "max error": r.max_error})
    df = pd.DataFrame(rows)
    df.attrs.update(unit=unit, **{"shared unit": sunit})
    return df


def number_format(unit: str) -> str:
    return "%d" if unit == "B" else "%.1f"


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
        u = df.attrs["unit"]
        long = []
        for _, row in df.iterrows():
            long.append({"plan": row["strategy"], "traffic": "global read", u: row[f"global read {u}"], "order": 0})
            long.append({"plan": row["strategy"], "traffic": "global write", u: row[f"global written {u}"],
                         "order": 1})
        st.altair_chart(charts.stacked_bytes(pd.DataFrame(long), "plan", f"global memory traffic ({u})",
                                             order=list(df["strategy"]), unit=u), width="stretch")
        st.altair_chart(charts.strategy_bars(df, "kernels", "kernel launches", colours, fmt="d"),
                        width="stretch")
    with right:
        verdict(ctx, runs)
        for s, r in runs.items():
            with st.expander(f"why {ctx.label(s)} plans {r.stats.kernel_launches} kernel(s)"):
                for note in r.plan.notes:
                    st.markdown(f"- {note}")
                for i, k in enumerate(r.plan.kernels):
                    for note in k.notes:
                        st.markdown(f"- kernel {i} `{k.name}`: {note}")
    # the table at the page's full width: nine columns do not fit beside the charts
    su = df.attrs["shared unit"]
    shown = df[["strategy", "kernels", "grid barriers", f"global {u}", f"shared {su}", "flops", "predicted us",
                "vs xla", "max error"]]
    st.dataframe(shown, hide_index=True, width="stretch", column_config={
        f"global {u}": st.column_config.NumberColumn(format=number_format(u)),
        f"shared {su}": st.column_config.NumberColumn(format=number_format(su)),
        "predicted us": st.column_config.NumberColumn(format="%.2f"),
        "vs xla": st.column_config.NumberColumn(format="%.2fx"),
        "max error": st.column_config.NumberColumn(format="%.1e", help="vs the numpy reference"),
        "flops": st.column_config.NumberColumn(format="%d")})
    st.caption(f"{ctx.source.label} on {ctx.gpu}. Times are **predictions of the SIMT model's cost model** "
               "(constants not yet calibrated), not measurements: GPU-measured times, where a GPU run has timed this "
               "workload, are in the Code view (*Measured vs predicted*), each beside its prediction. *max error*: "
               "simulated outputs against the numpy "
               "reference, |sim - ref| / (1 + |ref|).")
    time_per_kernel(runs, ctx)
    search_records(ctx, runs)


def time_per_kernel(runs, ctx):
    """Where each kernel's predicted time goes, term by term, as the cost model recorded it (``ks.breakdown``:
    the terms add up to the kernel's predicted time)."""
    rows = [row for s, r in runs.items() for row in charts.breakdown_rows(ctx.label(s), r.stats.kernels)]
    if not rows:
        return
    st.markdown("### Where the predicted time goes, kernel by kernel")
    st.altair_chart(charts.time_breakdown(pd.DataFrame(rows)), width="stretch")
    st.caption("Each bar is one kernel; its parts are the cost model's terms (`astitch_sim/simt/cost.py`, "
               "`KernelStats.breakdown`), which add up to its predicted time: the launch, DRAM traffic, on-chip "
               "compute and shared memory, barriers, the partly filled last wave (*wave tail*), and, left of zero, "
               "the time hidden by overlapping memory and compute. The L2 cache is not modelled: every 32-byte "
               "sector a kernel moves counts as DRAM traffic.")


def search_records(ctx, runs):
    """Each search-based strategy's record, at the page's full width: its lines are a table (time, schedule,
    ratio or *chosen*) that a narrow column cut off at the right; long lines wrap rather than hide."""
    for s, r in runs.items():
        if r.plan.search:
            with st.expander(f"how {ctx.label(s)} searched: the candidates it scored and why the winner won"):
                st.caption("A search-based strategy records every fusion pattern and schedule it priced with "
                           "the cost model (``plan.search``; ``print(plan)`` shows the same lines).")
                st.code("\n".join(format_search(r.plan.search, max_candidates=8)), language="text", wrap_lines=True)


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
