"""Values under a mask that is a box (``simt/boxes.py``): the box found exactly where the mask is one, and a
concatenate's operands (rotary embedding's two halves) and a pad's operand loaded, and a concatenate
assembled, inside their boxes only -- every counter, the timeline and every output byte the same as with the
whole domain computed, and the box really taken."""
from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings, strategies as st

import astitch_sim as asim
from anchor import TESTS_FILE
from astitch_sim.frontends.seeded import fixture_inputs
from astitch_sim.frontends.workloads import workload_inputs
from astitch_sim.simt import evaluate
from astitch_sim.simt.boxes import BOX_CHECK_MAX, cut, inside, mask_box, placed
from random_graphs import cases
from test_simt_blocked_paths import on_and_off


def test_a_mask_is_a_box_only_where_it_is_on_on_a_range_of_each_dim():
    line = np.arange(128)[None, None, :]
    assert mask_box((line >= 64) & (line < 128)) == (slice(None), slice(None), slice(64, 128))
    two = (np.arange(6)[:, None] >= 2) & (np.arange(5)[None, :] < 3)
    assert mask_box(two) == (slice(2, 6), slice(0, 3))
    assert mask_box(two | (np.arange(6)[:, None] == 0)) is None           # a gap along dim 0
    assert mask_box(np.ones((4, 4), bool)) is None                        # on everywhere: nothing to skip
    assert mask_box(np.zeros((4, 4), bool)) is None                       # on nowhere
    assert mask_box(np.eye(3, dtype=bool)) is None                        # on a range of each dim, not a box
    diagonal = np.zeros((4, 4), bool)
    diagonal[1, 1] = diagonal[2, 2] = True
    assert mask_box(diagonal) is None                                     # rows 1-2 and columns 1-2, not all of them
    assert mask_box(np.arange(8) < 3) == (slice(0, 3),)
    assert mask_box(np.arange(8)) is None                                 # no bool mask
    assert mask_box(np.arange(BOX_CHECK_MAX + 1) < 5) is None            # too big to check


def test_a_value_inside_a_box_and_placed_back():
    full = np.arange(2 * 3 * 8).reshape(2, 3, 8)
    shape, sl = inside((slice(None), slice(2, 6)), [(2, 3, 8), (1, 1, 8)])
    assert shape == (2, 3, 8) and sl == (slice(None), slice(None), slice(2, 6))
    assert np.array_equal(cut(full, sl), full[..., 2:6])
    assert np.array_equal(cut(full[:1, :1], sl), full[:1, :1, 2:6])      # a broadcast value: its dims of 1 whole
    back = placed(shape, sl, cut(full, sl))
    assert np.array_equal(back[..., 2:6], full[..., 2:6]) and not back[..., :2].any() and not back[..., 6:].any()
    assert inside((slice(2, 6),), [(2, 3, 1)]) is None                    # the value does not vary along the box
    assert inside((slice(None), slice(None), slice(None), slice(1, 2)), [(3, 8)]) is None   # fewer dims


def _rotary(seq: int = 64, heads: int = 4, dim: int = 32):
    """Rotary embedding's rotate-half: ``x`` split in two halves, each half times cos/sin, joined back."""
    g = asim.Graph("rotary")
    x = g.parameter("x", (seq, heads, dim))
    c = g.parameter("cos", (seq, dim // 2))
    lo = g.slice(x, (0, 0, 0), (seq, heads, dim // 2), name="lo")
    hi = g.slice(x, (0, 0, dim // 2), (seq, heads, dim), name="hi")
    cb = g.broadcast(c, (seq, heads, dim // 2), dimensions=(0, 2), name="cb")
    a = g.subtract(g.multiply(lo, cb, name="lo_c"), hi, name="a")
    b = g.add(g.multiply(hi, cb, name="hi_c"), lo, name="b")
    g.set_outputs(g.concatenate([a, b], 2, name="out"))
    return g


def _padded():
    g = asim.Graph("padded")
    x = g.parameter("x", (64, 48))
    y = g.exp(x, name="y")
    g.set_outputs(g.add_node("pad", (y, g.constant(0.0)), name="p", low=(0, 8), high=(0, 8), interior=(0, 0)))
    return g


@pytest.mark.parametrize("strategy", asim.STRATEGIES)
def test_boxes_change_no_counter_and_no_value(strategy):
    """Rotary's halves and a pad, simulated with boxes and without: the same in everything; the box is taken."""
    taken = []
    for g in (_rotary(), _padded()):
        plan = asim.compile(g, strategy, "H100")
        taken += on_and_off(plan, workload_inputs(g, 0), evaluate, "mask_box")
    assert any(t is not None for t in taken), "no mask was a box: the comparison would be vacuous"


@pytest.mark.slow
def test_the_llama_rotary_fixture_the_same_with_boxes():
    path = Path(TESTS_FILE).parent / "fixtures" / "models" / "llama_rotary.hlo"
    g = asim.from_hlo_file(path)
    taken = on_and_off(asim.compile(g, "astitch", "H100"), fixture_inputs(path), evaluate, "mask_box")
    assert any(t is not None for t in taken)


@settings(max_examples=30, deadline=None, suppress_health_check=list(HealthCheck))
@given(case=cases("mixed"), strategy=st.sampled_from(["astitch", "xla", "unfused", "inductor"]))
def test_random_graphs_the_same_with_boxes(case, strategy):
    """Random graphs (concatenates of permuted operands, pads, gathers over them, every dtype)."""
    try:
        plan = asim.compile(case.graph, strategy, "H100")
    except asim.AStitchError:
        return
    on_and_off(plan, case.inputs, evaluate, "mask_box")
