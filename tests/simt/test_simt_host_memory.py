"""The SIMT model's host memory (issue 26): what it holds while it runs, and whose arrays it returns.

At the sizes users run (a 262-million-element log-softmax is a gigabyte per float32 array) every array
the model keeps is a gigabyte of the machine's memory.  Three rules keep it to what the plan needs:

* an element-loop value read once is not memoised (``evaluate.element_uses``): an elementwise chain
  holds its operand and its result, not every intermediate;
* a kernel's result buffer is reserved, not filled (``memory.GlobalMemory.reserve``): a stage that
  computes every element hands its array over instead of copying it into a poisoned buffer, and a
  buffer read before anything wrote it still reads poison;
* the outputs are handed over at the end, not copied -- except an input or constant returned as is, or an
  output listed twice, which are copied so that no result is the caller's array or another result.

The memory bound is measured with ``tracemalloc`` (numpy reports its allocations to it), in arrays of the
graph's element size, on a graph small enough for the fast tier and big enough that arrays dominate.
"""
from __future__ import annotations

import tracemalloc

import numpy as np
import pytest

import astitch_sim as asim
from astitch_sim.simt.memory import GlobalMemory

ROWS, COLS = 512, 2048                      # 4 MiB per float32 array
ARRAY = ROWS * COLS * 4

CHAIN = f"""HloModule chain
ENTRY e {{
  x = f32[{ROWS},{COLS}] parameter(0)
  a = f32[{ROWS},{COLS}] exponential(x)
  b = f32[{ROWS},{COLS}] multiply(a, x)
  c = f32[{ROWS},{COLS}] tanh(b)
  d = f32[{ROWS},{COLS}] add(c, x)
  ROOT y = f32[{ROWS},{COLS}] negate(d)
}}
"""

ONE_OP = f"""HloModule one
ENTRY e {{
  x = f32[{ROWS},{COLS}] parameter(0)
  ROOT y = f32[{ROWS},{COLS}] exponential(x)
}}
"""

ALIASES = """HloModule aliases
ENTRY e {
  x = f32[4,8] parameter(0)
  c = f32[4,8] convert(x)
  e = f32[4,8] exponential(x)
  ROOT t = (f32[4,8], f32[4,8], f32[4,8], f32[4,8]) tuple(x, c, e, e)
}
"""


def _peak_arrays(fn) -> float:
    """Peak memory ``fn`` allocates beyond what is already held, in arrays of :data:`ARRAY` bytes."""
    tracemalloc.start()
    try:
        base = tracemalloc.get_traced_memory()[0]
        tracemalloc.reset_peak()
        kept = fn()
        peak = tracemalloc.get_traced_memory()[1]
        del kept
    finally:
        tracemalloc.stop()
    return (peak - base) / ARRAY


@pytest.mark.parametrize("strategy", asim.STRATEGIES)
def test_an_elementwise_chain_holds_its_operand_and_result_not_every_intermediate(strategy):
    """One fused kernel used to keep all four intermediates memoised (6 arrays at the peak), an unfused chain
    a poisoned buffer beside each result (3); now every strategy peaks at two arrays (an op's operand and its
    result, which becomes the output).  The values are still the reference's."""
    g = asim.from_hlo(CHAIN)
    x = asim.random_inputs(g, 0)
    plan = asim.compile(g, strategy, "H100")
    want = asim.reference(g, x)[0]
    got = []
    peak = _peak_arrays(lambda: got.append(asim.simulate(plan, x).outputs[0]))
    assert peak <= 2.5, f"{strategy}: simulate peaked at {peak:.2f} arrays of the graph's size"
    np.testing.assert_allclose(got[0], want, rtol=1e-6, atol=1e-6)


@pytest.mark.parametrize("run", ["simulate", "reference"])
def test_the_output_is_handed_over_not_copied(run):
    """exp(x): the result is the only array made (a copy at the end made it 2)."""
    g = asim.from_hlo(ONE_OP)
    x = asim.random_inputs(g, 0)
    plan = asim.compile(g, "xla", "H100")
    got = []
    fn = (lambda: asim.simulate(plan, x).outputs) if run == "simulate" else (lambda: asim.reference(g, x))
    assert _peak_arrays(lambda: got.extend(fn())) <= 1.2
    (y,) = got
    np.testing.assert_allclose(y, np.exp(x[0]), rtol=1e-6)


@pytest.mark.parametrize("strategy", asim.STRATEGIES)
def test_no_output_is_an_input_or_another_output(strategy):
    g = asim.from_hlo(ALIASES)
    x = asim.random_inputs(g, 0)
    keep = x[0].copy()
    for outs in (asim.simulate(asim.compile(g, strategy, "H100"), x).outputs, asim.reference(g, x)):
        assert [o.shape for o in outs] == [(4, 8)] * 4
        for i, o in enumerate(outs):
            assert not np.shares_memory(o, x[0]), f"{strategy}: output {i} is the input's array"
            for j in range(i):
                assert not np.shares_memory(o, outs[j]), f"{strategy}: outputs {j} and {i} share memory"
        np.testing.assert_array_equal(outs[0], keep)
        np.testing.assert_array_equal(outs[1], keep)
        np.testing.assert_array_equal(outs[2], outs[3])
        for o in outs:
            o[...] = 7.0
        np.testing.assert_array_equal(x[0], keep)


def test_a_reserved_buffer_reads_poison_until_written_and_adopts_only_a_fresh_whole_array():
    mem = GlobalMemory()
    x = np.arange(6, dtype=np.float32).reshape(2, 3)
    mem.place("x", x, x.nbytes)
    mem.reserve("y", (2, 3), np.float32, 24)
    mem.reserve("z", (2, 3), np.float32, 24)
    assert "y" in mem and mem.base["y"] != mem.base["z"]
    assert not mem.adopt("y", x)                                   # an input's array stays the input's
    assert not mem.adopt("y", np.ones((3, 2), np.float32))         # wrong shape
    assert not mem.adopt("y", np.ones((2, 3), np.float64))         # wrong dtype
    assert not mem.adopt("y", np.ones((2, 6), np.float32)[:, ::2])  # a view, not its own data
    assert np.isnan(mem["y"]).all()                                # read before written: poison
    assert not mem.adopt("y", np.ones((2, 3), np.float32))         # touched: copy into it instead
    fresh = np.full((2, 3), 2.0, np.float32)
    assert mem.adopt("z", fresh) and mem["z"] is fresh
