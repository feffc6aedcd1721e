"""Timeline: the wave schedule -- blocks on SMs over time, kernel after kernel, grid barriers drawn."""
from __future__ import annotations

import pandas as pd
import streamlit as st

from astitch_sim.simt.schedule import HEAD_WAVES

from .. import charts


def kernels_of(tl) -> list:
    return [dict(kernel=k.kernel, name=f"{k.kernel}: {k.name}", start_us=k.start_us, end_us=k.end_us,
                 waves=k.waves, grid=k.grid, block=k.block, blocks_per_wave=k.blocks_per_wave,
                 launch_gap_us=k.launch_gap_us, truncated=k.truncated) for k in tl.kernels]


def rows_drawn(tl) -> list:
    """The timeline's stored stage spans, plus one bar per SM for each kernel's *middle waves*.

    A kernel of many waves (every kernel at the paper's sizes) keeps block entries for its first
    ``HEAD_WAVES`` waves and its last wave only (``KernelSpan.truncated``); the waves between are known
    to be full, every slot busy.  Drawn from the stored entries alone, such a kernel is two slivers
    with nothing between them, and the chart looks blank; so the middle waves are drawn as one span per
    SM, from the end of the stored head waves to the start of the last wave."""
    rows = [dict(r, what=None) for r in tl.to_rows()]
    for k in tl.kernels:
        if not k.truncated:
            continue
        a, b = k.start_us + HEAD_WAVES * k.block_us, k.start_us + (k.waves - 1) * k.block_us
        what = f"waves {HEAD_WAVES + 1}-{k.waves - 1} of {k.waves}: every slot busy (not stored block by block)"
        rows += [dict(kernel=k.kernel, kernel_name=k.name, sm=sm, block=-1, stage=-2, kind="middle_waves",
                      start_us=a, end_us=b, what=what) for sm in range(tl.sms)]
    return rows


def barrier_times(tl) -> list:
    """When each grid barrier releases (the end of the barrier wait, the same for every block)."""
    times = set()
    for row in tl.to_rows():
        if row["kind"] == "grid_barrier":
            times.add(round(row["end_us"], 6))
    return sorted(times)


def render(ctx):
    st.subheader("Timeline: blocks on SMs over time (predicted)")
    shown = list(dict.fromkeys(["xla", ctx.strategy if ctx.strategy != "xla" else "astitch"]))
    runs = ctx.runs("Timeline", shown)
    if runs is None:
        return
    max_sms = st.slider("SMs drawn", 4, 80, 16, key="tl_sms")
    end = max(r.timeline.end_us for r in runs.values())
    for s in shown:
        tl = runs[s].timeline
        ks = kernels_of(tl)
        chart = charts.timeline_chart(rows_drawn(tl), ks, barrier_times(tl), max_sms,
                                      f"{ctx.label(s)}: {len(ks)} kernel(s), {tl.end_us:.1f} us", end)
        st.altair_chart(chart, width="stretch")
        df = pd.DataFrame(ks)[["name", "grid", "block", "blocks_per_wave", "waves", "launch_gap_us", "start_us",
                               "end_us"]]
        st.dataframe(df, hide_index=True, width="stretch",
                     column_config={c: st.column_config.NumberColumn(format="%.2f")
                                    for c in ("launch_gap_us", "start_us", "end_us")})
        st.caption(f"utilisation of resident-block slots: {tl.utilisation():.0%} (launch gaps count as idle)"
                   + ("; the middle waves of long kernels are drawn as one bar per SM (they are full)"
                      if tl.truncated else ""))
    st.caption("Each bar is one resident block (one stage of it); dark grey: waiting at a grid barrier; red rules: "
               "grid barriers releasing; dashed rules: kernel starts (the gap before is the launch). Same time axis "
               "for both strategies. Times come from the cost model, not a GPU.")
