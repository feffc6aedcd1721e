"""Thread mapping: the tensor coloured by thread block, xla next to astitch, showing horizontal
packing (several rows per block), task splitting (a row over several blocks) and lanes."""
from __future__ import annotations

import streamlit as st

from .. import charts, state
from . import plan_choice

PAPER_SHAPES = [("softmax <750000,32> (DIEN)", "softmax", {"rows": 750000, "cols": 32}),
                ("softmax <64,30000> (Transformer)", "softmax", {"rows": 64, "cols": 30000}),
                ("row_reduce <750000,32>", "row_reduce", {"rows": 750000, "cols": 32})]


def default_stage(plan) -> tuple:
    """The first stage led by a reduce (the mapping decision that matters), else the first stage."""
    first = None
    for i, k in enumerate(plan.kernels):
        for j, s in enumerate(k.stages):
            if first is None:
                first = (i, j)
            if plan.graph[s.dominant].op == "reduce":
                return i, j
    return first


def stages_of(plan) -> list:
    return [(i, j) for i, k in enumerate(plan.kernels) for j, _ in enumerate(k.stages)]


def render(ctx):
    st.subheader("Thread mapping: which block computes which element")
    cols = st.columns(len(PAPER_SHAPES) + 1)
    cols[0].markdown("**The paper's shapes, one click:**")
    for c, (label, name, shape) in zip(cols[1:], PAPER_SHAPES):
        c.button(label, on_click=state.set_shape, args=(name, shape), key=f"btn:{label}")
    shown = list(dict.fromkeys(["xla", "astitch", ctx.strategy]))
    opts = st.columns(3)
    colour_by = opts[0].radio("Colour by", ["block", "thread", "iteration"], horizontal=True, key="map_colour",
                              help="block: each block its colour (cycling through 20); thread: the lanes of one "
                                   "block; iteration: the loop trip (vertical packing)")
    focus = opts[1].number_input("block (for lanes)", min_value=0, value=0, step=1, key="map_block")
    panes = st.columns(len(shown), gap="large")
    for pane, s in zip(panes, shown):
        with pane:
            plan = ctx.plan(s)
            generated = [(i, j) for i, j in stages_of(plan) if plan.kernels[i].kind == "generated"]
            if not generated:
                st.info(f"{s}: no generated kernel (only library GEMMs)")
                continue
            default = default_stage(plan)
            i, j = plan_choice(f"{ctx.label(s)}: stage", generated,
                               [f"kernel {a} stage {b}: {plan.kernels[a].stages[b].dominant}" for a, b in generated],
                               f"map_stage:{s}", default=default)
            m = plan.kernels[i].stages[j].mapping
            df, rows, ncols, step = charts.mapping_cells(m)
            title = f"{ctx.label(s)}: grid {m.grid} x block {m.block}"
            st.altair_chart(charts.mapping_grid(df, colour_by, title, focus_block=int(focus)),
                            width="stretch")
            facts = [f"`{m.describe()}`"]
            if m.kind == "rows":
                facts.append(f"**{m.rows_per_block} row(s) per block** (horizontal packing)" if m.rows_per_block > 1
                             else "**one row per block** (no horizontal packing)")
                if m.splits > 1:
                    facts.append(f"**each row split over {m.splits} blocks** (task splitting, {m.combine})")
                facts.append(f"{m.threads_per_row} threads per row, {m.inner_iterations} element(s) per thread per row"
                             + (f" in {m.trips} vector(s) of {m.vector} (one 64/128-bit access each)" if m.vector > 1
                                else ""))
            if m.kind == "flat" and m.flat_vectors:
                tail = m.size % m.vector
                facts.append(f"**vectors of {m.vector} run across rows** in flat order (every tensor is read at the "
                             "domain's flat index)" + (f"; the last {tail} element(s), a scalar tail, by one thread"
                                                       if tail else ""))
            if m.task_iterations > 1:
                facts.append(f"each block loops over {m.task_iterations} tasks (vertical packing)")
            facts.append(f"drawn: rows 0-{min(rows, 64) - 1} of {rows:,}, "
                         + (f"every {step}-th of {ncols:,} columns" if step > 1 else f"all {ncols:,} columns"))
            st.markdown("  \n".join(facts))
    st.caption("Hover a cell for its element, block, thread and loop iteration. Colours cycle every 20 blocks. "
               "The same ThreadMapping.locate the simulator and the code generator use draws this picture.")
    if "xla" in shown:
        st.caption("Which XLA: today's XLA (the default rules, openxla-2024) packs a reduction's short rows "
                   "into 256-thread blocks; the XLA the paper measured gave every row a block of its own "
                   "(<750000,32>: 750000 blocks of 32 threads). Pick tf-2.6 under *Which XLA* in the sidebar "
                   "to see the paper's.")
