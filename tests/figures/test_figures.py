"""astitch_sim.figures: the pictures are drawn from the plan's own facts (layout tested), and every
drawing function returns a Figure or a clear AStitchError."""
from __future__ import annotations

import os

import numpy as np
import pytest

import astitch_sim as asim
from astitch_sim import figures
from astitch_sim.figures.mapping_figure import flat_indices, view_shape
from astitch_sim.figures.plan_figure import MOVE_OPS

import matplotlib  # noqa: E402  (the test extra installs it; no silent skip)
matplotlib.use("Agg")
from matplotlib.figure import Figure  # noqa: E402
from anchor import TESTS_FILE

HERE = os.path.dirname(os.path.abspath(TESTS_FILE))


def fig7(strategy):
    """Figure 7 at full size on the V100; astitch's as the paper draws it (its launch rules: the split column
    reduction and two grid barriers; the default launch search drops the split at this size)."""
    return asim.compile(asim.workload("paper_fig7"), strategy, "V100",
                        **({"launch_search": False} if strategy == "astitch" else {}))


def boxes(lay, node, role=None):
    return [b for b in lay.boxes() if b.node == node and (role is None or b.role == role)]


def test_xla_lanes_show_kernels_reloads_and_round_trips():
    lay = figures.plan_layout(fig7("xla"))
    assert len(lay.lanes) == 4
    # the paper's reloads: param.2 is read from global memory by two kernels, power.1 by two later kernels
    assert sorted(b.lane for b in boxes(lay, "param.2", "read")) == [0, 1]
    assert sorted(b.lane for b in boxes(lay, "power.1", "read")) == [2, 3]
    # a dashed global edge from each producing kernel to each later reader
    glob = {(a.node, a.lane, b.lane) for a, b, kind in lay.edges if kind == "global"}
    assert glob == {("reduce.1", 0, 1), ("power.1", 1, 2), ("power.1", 1, 3), ("reduce.2", 2, 3)}
    # data flows down: every edge goes to a lower row
    assert all(b.y > a.y for a, b, _ in lay.edges)
    # scalar constants and their broadcasts are left out by default
    assert not boxes(lay, "k") and not boxes(lay, "k.bcast")
    assert boxes(figures.plan_layout(fig7("xla"), hide_scalars=False), "k.bcast")


def test_tvm_recompute_is_marked_in_every_kernel_that_recomputes():
    lay = figures.plan_layout(fig7("tvm"))
    power = boxes(lay, "power.1", "compute")
    assert len(power) == 2 and {b.recompute for b in power} == {256}


def test_astitch_lane_has_its_grid_barriers_and_schemes():
    plan = fig7("astitch")
    lay = figures.plan_layout(plan)
    assert len(lay.lanes) == 1
    assert [kind for _, kind in lay.lanes[0].barriers] == ["grid", "grid"]
    schemes = {b.node: b.scheme for b in lay.boxes() if b.role == "compute"}
    assert schemes["power.1"] == "global" and schemes["reduce.1"] == "regional"
    assert schemes == {n: s for n, s in plan.kernels[0].schemes.items() if n in schemes}
    # stage order: every node of a later stage sits below every node of an earlier stage
    by_stage = {}
    for b in lay.boxes():
        if b.role == "compute":
            by_stage.setdefault(b.stage, []).append(b.y)
    assert max(by_stage[0]) < min(by_stage[1]) and max(by_stage[1]) < min(by_stage[2])


def test_hide_moves_wires_through_data_movement():
    g = asim.from_hlo_file(os.path.join(HERE, "fixtures", "hlo", "transformer_ffn.hlo"))
    plan = asim.compile(g, "astitch", "H100")
    full, lean = figures.plan_layout(plan), figures.plan_layout(plan, hide_moves=True)
    assert len(lean.boxes()) < len(full.boxes())
    assert not [b for b in lean.boxes() if b.role == "compute" and g[b.node].op in MOVE_OPS]
    ids = {id(b) for b in lean.boxes()}
    assert all(id(a) in ids and id(b) in ids for a, b, _ in lean.edges)
    assert all(b.y > a.y for a, b, _ in lean.edges)
    # every library kernel still reads its operands, through the hidden ops
    for lane, k in zip(lean.lanes, plan.kernels, strict=True):
        if k.kind == "library":
            assert [b.node for b in lane.boxes if b.role == "compute"] == [k.library_op]
            assert len([b for b in lane.boxes if b.role == "read"]) >= 1


def test_draw_plan_returns_a_figure_outside_pyplot(tmp_path):
    import matplotlib.pyplot as plt
    before = plt.get_fignums()
    fig = figures.draw_plan(fig7("astitch"))
    assert isinstance(fig, Figure) and plt.get_fignums() == before      # shown once in Jupyter, never leaked
    fig.savefig(tmp_path / "plan.png")
    assert (tmp_path / "plan.png").stat().st_size > 10_000


@pytest.mark.parametrize("shape, strategy", [((750000, 32), "xla"), ((750000, 32), "astitch"),
                                             ((64, 30000), "astitch"), ((5, 7), "xla"), ((750000, 32), "xla-2024")])
def test_mapping_picture_cells_match_locate(shape, strategy):
    """Each picture cell is coloured by the block ThreadMapping.locate gives for that element.  ``xla``: the
    paper's XLA (one block per row); ``xla-2024``: today's, whose packed rows the horizontal-packing check
    reads like astitch's."""
    g = asim.workload("softmax", rows=shape[0], cols=shape[1])
    rule = {"launch_search": False} if shape == (64, 30000) else {}    # the paper's split (the search drops it)
    if strategy == "xla":
        rule = {"fusion_rules": "tf-2.6"}
    m = asim.compile(g, strategy.split("-")[0], "V100", **rule).kernels[0].stages[0].mapping
    R, C = view_shape(m)
    rows, cols = np.arange(min(R, 40)), np.arange(0, C, max(1, C // 50))
    flat = flat_indices(m, rows, cols)
    assert np.array_equal(flat, rows[:, None] * C + cols[None, :])       # a [rows, cols] domain, row-major
    block, thread, _ = m.locate(flat)
    if strategy == "xla":                                                # one block per row
        assert np.array_equal(block, np.broadcast_to(rows[:, None], block.shape))
    elif shape == (750000, 32):
        # horizontal packing: the plan's rows per block share a block (row vectors: 8 lanes of 4 per
        # 32-wide row, so 128 rows of astitch's 1024-thread block, 32 of today's XLA's 256), a row's lanes
        # take vector-wide runs of columns
        assert m.rows_per_block > 1 and m.vector > 1
        assert np.array_equal(block[:, 0], rows // m.rows_per_block)
        lane = (cols // m.vector) % m.threads_per_row
        assert np.array_equal(thread, (rows[:, None] % m.rows_per_block) * m.threads_per_row + lane[None, :])
    else:                                                                # task splitting: a row over m.splits blocks
        assert m.splits > 1 and block[0, 0] != block[0, -1]
        assert np.array_equal(block, rows[:, None] * m.splits + cols[None, :] // m.chunk)
    fig = figures.draw_mapping(m)
    assert isinstance(fig, Figure)
    # the drawn cells are the blocks locate gives (the picture's window: first 32 rows, <= 64 sampled columns)
    prow = np.arange(min(R, 32))
    pcol = np.arange(0, C, max(1, -(-C // 64)))
    pblock, _, _ = m.locate(flat_indices(m, prow, pcol))
    drawn = np.asarray(fig.axes[0].images[0].get_array())
    assert np.array_equal(drawn, (pblock - pblock.min()) % 20)


def test_column_mapping_picture_samples_the_reduced_dim():
    plan = fig7("astitch")
    m = plan.kernels[0].stages[1].mapping                      # a column reduction split over the reduced dim
    assert m.kind == "columns" and m.splits > 1
    R, C = view_shape(m)
    assert (R, C) == (m.extent(1), m.extent(0) * m.extent(2))
    flat = flat_indices(m, np.array([0, R - 1]), np.array([0]))
    block, _, _ = m.locate(flat)
    assert block[0, 0] != block[1, 0]                          # top and bottom of a column: different splits
    assert isinstance(figures.draw_mapping(m, color_by="iteration"), Figure)
    with pytest.raises(asim.AStitchError, match="color_by"):
        figures.draw_mapping(m, color_by="warp")


def test_timeline_trace_and_charts_draw_from_a_simulation():
    g = asim.workload("layernorm", rows=2, cols=16)
    x = asim.random_inputs(g)
    plans = {s: asim.compile(g, s, "V100") for s in ("xla", "astitch")}
    traced = asim.simulate(plans["astitch"], x, trace=True)
    results = {s: asim.simulate(p, x) for s, p in plans.items()}
    assert isinstance(figures.draw_timeline(results["xla"].timeline), Figure)
    for stage in range(3):
        assert isinstance(figures.draw_accesses(traced.trace, stage=stage), Figure)
    assert isinstance(figures.compare_bars(results, metrics=("kernel_launches", "global_bytes")), Figure)
    assert isinstance(figures.draw_breakdown(results["xla"]), Figure)
    ks = results["xla"].stats.kernels[0]
    ks.breakdown = {**ks.breakdown, "cross_stage_us": -0.25, "new_term_us": 0.5}
    ax = figures.draw_breakdown(results["xla"]).axes[0]
    top = sum(p.get_height() for p in ax.patches if p.get_x() < 0.5)   # the first kernel's bar: its terms' sum
    assert top == pytest.approx(sum(ks.breakdown.values()))
    assert {"cross_stage", "new_term"} <= {t.get_text() for t in ax.get_legend().get_texts()}
    with pytest.raises(asim.AStitchError, match="trace=True"):
        figures.draw_accesses(results["xla"].trace)
    with pytest.raises(asim.AStitchError, match="no traced access"):
        figures.draw_accesses(traced.trace, stage=7)
    with pytest.raises(asim.AStitchError, match="unknown metric"):
        figures.compare_bars(results, metrics=("speed",))
    with pytest.raises(asim.AStitchError, match="timeline"):
        figures.draw_timeline(None)


def test_grid_barrier_timeline_and_many_wave_kernels():
    g = asim.workload("softmax", rows=64, cols=30000)       # the paper's split rows: two grid barriers
    res = asim.simulate(asim.compile(g, "astitch", "V100", launch_search=False), asim.random_inputs(g))
    assert res.timeline.kernels[0].grid_barriers == 2
    assert isinstance(figures.draw_timeline(res.timeline, max_sms=4), Figure)
    big = asim.workload("softmax", rows=20000, cols=32)        # the paper's xla: 20000 one-row blocks, many waves
    res = asim.simulate(asim.compile(big, "xla", "V100", fusion_rules="tf-2.6"), asim.random_inputs(big))
    assert any(k.truncated for k in res.timeline.kernels)
    assert isinstance(figures.draw_timeline(res.timeline), Figure)
