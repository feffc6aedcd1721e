"""Data movement: bytes per stage and memory space, an Nsight-style memory chart per strategy,
and for tiny shapes a step-through of one thread's loads, stores and barriers (trace mode)."""
from __future__ import annotations

import pandas as pd
import streamlit as st

from .. import charts, compute, pictures, state
import astitch_sim as asim

from ..style import SPACE_WORD, byte_unit, esc, nbytes as byte_text
from . import plan_choice


def l2_share(s) -> float:
    """The part of a stage's global reads the L2 served, as the cost model recorded it (``simt/l2.py``):
    its L2-hit bytes over its read sectors' bytes."""
    sector_bytes = 32 * s.global_sectors_read
    return min(1.0, s.l2_read_bytes / sector_bytes) if sector_bytes else 0.0


def per_stage(stats) -> pd.DataFrame:
    """Bytes per stage and traffic kind, in the unit that suits the largest (``df.attrs["unit"]``).  Global
    reads are split into those DRAM served (``global read``) and those the L2 served (``L2 hit read``)."""
    rows = []
    for i, k in enumerate(stats.kernels):
        for s in k.stages:
            label = f"k{i} s{s.stage} {s.dominant}"
            hit = l2_share(s) * s.global_bytes_read
            for order, (kind, v) in enumerate((("global read", s.global_bytes_read - hit),
                                               ("L2 hit read", hit),
                                               ("global write", s.global_bytes_written),
                                               ("shared read", s.shared_bytes_read),
                                               ("shared write", s.shared_bytes_written))):
                rows.append({"stage": label, "traffic": kind, "bytes": v, "order": order})
        if k.kind == "library":
            rows.append({"stage": f"k{i} {k.name}", "traffic": "global read", "bytes": k.global_bytes_read,
                         "order": 0})
            rows.append({"stage": f"k{i} {k.name}", "traffic": "global write", "bytes": k.global_bytes_written,
                         "order": 2})
    df = pd.DataFrame(rows)
    unit, size = byte_unit(*df["bytes"]) if len(df) else ("B", 1)
    if len(df):
        df[unit] = df["bytes"] / size
    df.attrs["unit"] = unit
    return df


def _since(stats, since: str) -> str:
    """``TensorTraffic.resident_since`` in words: ``k3`` -> the kernel, ``s0`` -> a stage of the same kernel."""
    if since.startswith("k"):
        i = int(since[1:])
        return f"k{i} {stats.kernels[i].name}"
    if since == "r":
        return "this stage's first read (a broadcast operand read again)"
    return f"stage {since[1:]} of this kernel" if since.startswith("s") else "-"


def l2_hits(stats) -> pd.DataFrame:
    """Every global read of every stage and where the cost model says its bytes came from: read sectors' bytes,
    the part the L2 served, and the earlier touch that left the tensor there (``simt/l2.py`` decided; this
    only lists it).  Sorted as the plan runs."""
    rows = []
    for i, k in enumerate(stats.kernels):
        for s in k.stages:
            for name, t in s.tensors.items():
                if not t.read_sectors:
                    continue
                l1 = t.l1_read_bytes
                rows.append({"stage": f"k{i} s{s.stage} {s.dominant}", "tensor": name, "read bytes": t.read_bytes,
                             "from L1": round(l1), "from L2": round(t.l2_read_bytes),
                             "from DRAM": round(t.read_bytes - t.l2_read_bytes - l1),
                             "L2 %": round(100 * t.l2_read_bytes / t.read_bytes) if t.read_bytes else 0,
                             "resident since": _since(stats, t.resident_since)})
    return pd.DataFrame(rows, columns=["stage", "tensor", "read bytes", "from L1", "from L2", "from DRAM", "L2 %",
                                       "resident since"])


def render(ctx):
    st.subheader("Data movement: where the bytes go")
    shown = list(dict.fromkeys(["xla", ctx.strategy if ctx.strategy != "xla" else "astitch"]))
    runs = ctx.runs("Data movement", shown)
    if runs is None:
        return
    scale = max(max(r.stats.global_bytes_read, r.stats.global_bytes_written, r.stats.shared_bytes)
                for r in runs.values())
    panes = st.columns(len(shown), gap="large")
    for pane, s in zip(panes, shown):
        with pane:
            st.graphviz_chart(pictures.memory_dot(ctx.label(s), runs[s].stats, scale), width="stretch")
    st.caption("Arrow width grows with the bytes moved (log scale, the same for both pictures): switch the strategy "
               "in the sidebar and watch the global-memory arrows shrink.")
    st.markdown(f"**Bytes per stage, {ctx.label(ctx.strategy)}**")
    df = per_stage(runs[ctx.strategy if ctx.strategy in runs else shown[-1]].stats)
    u = df.attrs["unit"]
    st.altair_chart(charts.stacked_bytes(df, "stage", f"{u} moved per stage", unit=u), width="stretch")
    wide = df.pivot_table(index="stage", columns="traffic", values=u, sort=False).reset_index()
    wide.columns = [c if c == "stage" else f"{c} ({u})" for c in wide.columns]
    st.dataframe(wide, hide_index=True, width="stretch")
    shown_stats = runs[ctx.strategy if ctx.strategy in runs else shown[-1]].stats
    render_l2(ctx, shown_stats)
    st.divider()
    step_through(ctx)


def render_l2(ctx, stats):
    """Which global reads the L2 served, and since when: what the cost model recorded (``simt/l2.py``)."""
    gpu = asim.gpu(ctx.gpu)
    st.markdown(f"**L2 hits, {ctx.label(ctx.strategy)}** on {gpu.name} ({byte_text(gpu.l2_bytes)} of L2, "
                f"{gpu.l2_bandwidth_gbs:g} GB/s on hits)")
    hits = l2_hits(stats)
    total = float(hits["read bytes"].sum()) if len(hits) else 0.0
    served = float(hits["from L2"].sum()) if len(hits) else 0.0
    st.caption(f"{byte_text(served)} of {byte_text(total)} read ({served / total:.0%} of the sectors' bytes) came "
               "from the L2: tensors an earlier kernel (or stage) wrote or read and that no more than the L2's "
               "capacity of other traffic pushed out since. Graph inputs start in DRAM. Writes still go to DRAM "
               "(write-back). The cost model charges L2 hits at the L2's bandwidth (the 'L2 hits' term of the "
               "Compare view's time breakdown)." if total else "no global reads")
    if len(hits):
        st.dataframe(hits, hide_index=True, width="stretch")


def structure(plan) -> list:
    """What the step-through can show of a plan: per kernel, its stages and its block and grid barriers."""
    return [(len(k.stages), k.block_barriers, k.global_barriers) for k in plan.kernels]


def tiny_shape(ctx, plan) -> tuple:
    """``(shape, same)``: the largest traceable shape got by halving every dim of this one, and whether its plan
    has this plan's structure (kernels, stages, barriers).  Halving keeps the proportions, so the paper's
    Figure 7 (128x256 here) steps through at 64x128, where AStitch still stitches ``power.1`` through global
    memory with a grid barrier -- at 4x8 one block does everything and there is no grid barrier to show.
    ``(None, False)`` for HLO input (no shape to change)."""
    if ctx.source.kind != "workload":
        return None, False
    shape = dict(ctx.source.shape)
    for _ in range(64):
        if all(v == 1 for v in shape.values()):
            break
        shape = {k: max(1, v // 2) for k, v in shape.items()}
        small = compute.plan_of(compute.Source("workload", ctx.source.name, tuple(shape.items())), plan.strategy,
                                ctx.gpu, ctx.opts_for(plan.strategy))
        if compute.traceable(small):
            return shape, structure(small) == structure(plan)
    return None, False


def barrier_note(plan) -> str:
    """What the step-through can show of this plan's synchronisation, in words."""
    grid = sum(k.global_barriers for k in plan.kernels)
    block = sum(k.block_barriers for k in plan.kernels)
    if grid:
        return (f"This plan has **{grid} grid barrier(s)** (Global stitching): a thread stores its part of a value "
                "to global memory, waits at the grid barrier (the red rule in the list) until every block has, "
                "then loads values other blocks wrote.")
    if block:
        return (f"This plan has {block} block barrier(s) and no grid barrier at this shape: values travel between "
                "threads through shared memory (Regional stitching), not through global memory.")
    return "This plan has no barrier at this shape: every thread works on its own elements."


def step_through(ctx):
    st.markdown("### Step through one thread (trace mode, tiny shapes)")
    plan = ctx.plan()
    if not compute.traceable(plan):
        tiny, same = tiny_shape(ctx, plan)
        st.info(f"The step-through records every thread's accesses, so it needs a tiny shape (at most "
                f"{compute.TRACE_ELEMENTS:,} elements per stage); this one is bigger.")
        if tiny:
            st.caption("Half of every dimension until it fits: " + (
                "the plan there has this plan's kernels, stages and barriers." if same else
                "**the plan there differs from this one** (fewer blocks change what is stitched how)."))
            st.button(f"Use a tiny shape: {', '.join(f'{k}={v}' for k, v in tiny.items())}",
                      on_click=state.set_shape, args=(ctx.source.name, tiny), key="btn:tiny")
        return
    st.markdown(barrier_note(plan))
    res = compute.trace_of(ctx.source, ctx.strategy, ctx.gpu, ctx.opts_for(ctx.strategy))
    trace = res.trace
    c = st.columns(4)
    ki = plan_choice("kernel", range(len(plan.kernels)), [f"{i}: {k.name}" for i, k in enumerate(plan.kernels)],
                     "st_kernel", default=0, where=c[0])
    k = plan.kernels[ki]
    if k.kind == "library":
        st.info("a library GEMM kernel: not traced per thread")
        return
    block = c[1].number_input("block", 0, max(0, k.grid - 1), 0, key="st_block")
    thread = c[2].number_input("thread", 0, max(0, k.block - 1), 0, key="st_thread")
    mine = trace.filter(kernel=ki, block=int(block), thread=int(thread))
    events = mine.events
    if not events:
        st.warning(f"thread {thread} of block {block} touches no memory in this kernel (no element maps to it)")
        return
    steps = list(dict.fromkeys((e.stage, e.phase, e.iteration) for e in events))
    n = c[3].slider("step", 1, len(steps), 1, key="st_step") if len(steps) > 1 else 1
    stage, phase, it = steps[n - 1]
    now = [e for e in events if (e.stage, e.phase, e.iteration) == (stage, phase, it)]
    st.markdown(f"**step {n} of {len(steps)}: stage {stage} ({esc(phase)}), loop trip {it}**  --  "
                f"block {block}, thread {thread}")
    left, right = st.columns([3, 2], gap="large")
    with left:
        st.altair_chart(charts.step_picture(_cells(plan, events, now), "this step's loads and stores"),
                        width="stretch")
    with right:
        lines = []
        prev = None
        for e in events:
            if prev is not None and (e.block_epoch, e.grid_epoch) != (prev.block_epoch, prev.grid_epoch):
                kind = "grid barrier (every block)" if e.grid_epoch != prev.grid_epoch else "block barrier"
                lines.append(f"<div style='border-top:3px solid #c62828;margin:2px 0;color:#c62828'>"
                             f"--- waits at a {kind} ---</div>")
            verb = {"read": "loads", "write": "stores", "atomic": "atomically adds"}[e.kind]
            where = f"@{e.address}" if e.address >= 0 else ""
            elem = ",".join(map(str, e.element))
            txt = f"s{e.stage} {e.phase} trip {e.iteration}: {verb} {e.node}[{elem}] {SPACE_WORD[e.space]} {where}"
            hot = (e.stage, e.phase, e.iteration) == (stage, phase, it)
            style = "background:#ffe6b3;font-weight:600" if hot else "color:#555"
            lines.append(f"<div style='{style}'>{esc(txt)}</div>")
            prev = e
        st.markdown("<div class='srcview' style='white-space:normal;padding:0.4rem'>" + "".join(lines) + "</div>",
                    unsafe_allow_html=True)
    if res.races:
        st.error(f"{len(res.races)} race(s): " + "; ".join(map(str, res.races[:3])))


def _cells(plan, events, now) -> pd.DataFrame:
    """64 elements of each tensor this thread touches (from its first), coloured by this step's accesses."""
    g = plan.graph
    rows = []
    hit = {}
    for e in now:
        hit.setdefault((e.node, e.flat), f"{e.kind} {e.space}")
    for name in dict.fromkeys(e.node for e in events):
        size = 1
        for d in g[name].shape:
            size *= d
        touched = [e.flat for e in events if e.node == name]
        start = max(0, min(min(touched) // 16 * 16, size - 64))
        for i in range(start, min(size, start + 64)):
            rows.append({"tensor": f"{name} {list(g[name].shape)}", "i": i, "element": i,
                         "access": hit.get((name, i), "-")})
    return pd.DataFrame(rows)
