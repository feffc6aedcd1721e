"""Vector width and elements per thread: planned once for every strategy, recorded, followed by the readers."""
from __future__ import annotations

import json

import numpy as np
import pytest

import astitch_sim as asim
from astitch_sim.plan.mapping import ThreadMapping
from astitch_sim.frontends.workloads import workload_inputs
from anchor import TESTS_FILE


def _flat(plan):
    return [st.mapping for k in plan.kernels if k.kind == "generated" for st in k.stages if st.mapping.kind == "flat"]


def _graph(shape, dtype="f32", sliced=None):
    g = asim.Graph("v")
    x = g.parameter("x", shape if sliced is None else sliced[0], dtype)
    if sliced is not None:
        x = g.slice(x, sliced[1], [s + n for s, n in zip(sliced[1], shape, strict=True)], name="xs")
    y = g.parameter("y", shape, dtype)
    g.set_outputs(g.add(x, y, name="z"))
    return g


@pytest.mark.parametrize("strategy", asim.STRATEGIES)
def test_every_strategy_gets_the_same_vectors(strategy):
    g = asim.workload("bias_gelu", rows=64, cols=256)
    ms = _flat(asim.compile(g, strategy, "H100"))
    assert ms and all((m.vector, m.block) == (4, 256) and m.per_thread % 4 == 0 for m in ms)


def test_focal_loss_sized_elementwise_work_gets_full_blocks():
    """f32[256,12500]: full blocks with several elements per thread, not millions of one-warp blocks."""
    g = _graph((256, 12500))
    for strategy in asim.STRATEGIES:
        (m,) = _flat(asim.compile(g, strategy, "H100"))
        assert m.block >= 128 and m.vector == 4 and m.grid * m.block * m.per_thread >= m.size
        assert m.grid < 256 * 12500 // 32 // 4


def _row_added(shape):
    """``x + b`` with ``b`` a row broadcast down the rows: ``b`` is not read at the domain's flat index."""
    g = asim.Graph("r")
    x, b = g.parameter("x", shape), g.parameter("b", shape[-1:])
    g.set_outputs(g.add(x, g.broadcast(b, shape, [len(shape) - 1]), name="z"))
    return g


@pytest.mark.parametrize("shape,want,why", [((6, 10), 2, "not a multiple of 4"), ((3, 7), 1, "is odd")])
def test_an_extent_the_vector_does_not_divide_narrows_it_and_says_why(shape, want, why):
    (m,) = _flat(asim.compile(_row_added(shape), "xla", "H100"))
    assert m.vector == want and why in m.vector_why and not m.flat_vectors
    assert why in m.describe() and "not across rows in flat order: b is read through broadcast" in m.describe()


def _flat_order_graph(kind):
    """Stages whose every tensor is at the domain's flat index, whatever its innermost extent."""
    g = asim.Graph(kind)
    if kind == "scaled":                    # a scalar broadcast, and 999 columns
        x, y = g.parameter("x", (1001, 999)), g.parameter("y", (1001, 999))
        g.set_outputs(g.multiply(g.add(x, y), g.broadcast(g.parameter("s", ()), (1001, 999)), name="z"))
    elif kind == "unit_dim":                # a per-row value with a unit innermost dim: [8,5] -> [8,5,1]
        x = g.parameter("x", (8, 5))
        g.set_outputs(g.exp(g.broadcast(x, (8, 5, 1), [0, 1]), name="z"))
    elif kind == "reshaped":                # read through a reshape: [4,15] as [6,10]
        x, y = g.parameter("x", (4, 15)), g.parameter("y", (6, 10))
        g.set_outputs(g.add(g.reshape(x, (6, 10)), y, name="z"))
    elif kind == "mixed":                   # f16 out of f32 read through a reshape: the f32 sizes the vector
        x = g.parameter("x", (4, 15))
        g.set_outputs(g.convert(g.reshape(x, (6, 10)), "f16", name="z"))
    else:                                   # f16: 8-element vectors over 5 x 13
        x, y = g.parameter("x", (5, 13), "f16"), g.parameter("y", (5, 13), "f16")
        g.set_outputs(g.add(x, y, name="z"))
    return g


@pytest.mark.parametrize("kind,vector,tail", [("scaled", 4, 3), ("unit_dim", 4, 0), ("reshaped", 4, 0),
                                              ("f16", 8, 1), ("mixed", 4, 0)])
def test_work_at_the_flat_index_runs_vectors_across_rows_with_a_scalar_tail(kind, vector, tail):
    g = _flat_order_graph(kind)
    for strategy in asim.STRATEGIES:
        plan = asim.compile(g, strategy, "H100")
        ms = _flat(plan)                    # unfused: a kernel per op, every one at the flat index
        assert ms and all((m.vector, m.flat_vectors, m.size % m.vector) == (vector, True, tail) for m in ms), strategy
        assert "vectors across rows in flat order" in str(plan)
        assert (f"a scalar tail of {tail}" in str(plan)) == (tail > 0)
        assert _flat(asim.Plan.from_json(plan.to_json())) == ms


def _clamped(shape=(7, 9)):
    """clamp with rank-0 bounds: each bound is one element, loaded as a scalar inside every vector."""
    g = asim.Graph("c")
    lo, x, hi = g.parameter("lo", ()), g.parameter("x", shape), g.parameter("hi", ())
    g.set_outputs(g.clamp(lo, x, hi, name="z"))
    return g


def test_vectors_across_rows_where_flat_order_does_not_hold_are_refused():
    """A hand-edited plan (or JSON) that claims flat_vectors where a row is broadcast, or wider than 16 bytes,
    fails validation by name instead of reading another row's elements."""
    plan = asim.compile(_row_added((6, 10)), "xla", "H100")
    d = json.loads(plan.to_json())
    d["kernels"][0]["stages"][0]["mapping"].update(vector=4, per_thread=4, flat_vectors=True)
    with pytest.raises(asim.AStitchError, match="flat_vectors.*b is read through broadcast, not at the domain"):
        asim.Plan.from_json(json.dumps(d)).validate()
    plan = asim.compile(_flat_order_graph("mixed"), "xla", "H100")
    d = json.loads(plan.to_json())
    d["kernels"][0]["stages"][0]["mapping"].update(vector=8, per_thread=8)
    with pytest.raises(asim.AStitchError, match="its tensors allow vectors of 4"):
        asim.Plan.from_json(json.dumps(d)).validate()
    d["kernels"][0]["stages"][0]["mapping"].update(vector=4, per_thread=4, flat_vectors="false")
    with pytest.raises(asim.AStitchError, match="flat_vectors='false' must be true or false"):
        asim.Plan.from_json(json.dumps(d)).validate()


def _concatenated_constants():
    """x + concatenate(3 columns of 1.0, 4 columns of 100.0): no tensor but x is read, yet which constant an
    element gets depends on its column."""
    g = asim.Graph("cc")
    x = g.parameter("x", (3, 7))
    ones = g.broadcast(g.constant(1.0, "f32", name="one"), (3, 3), (), name="ones")
    hundreds = g.broadcast(g.constant(100.0, "f32", name="hundred"), (3, 4), (), name="hundreds")
    g.set_outputs(g.add(x, g.concatenate([ones, hundreds], 1, name="cat"), name="z"))
    return g


def test_a_read_off_the_flat_index_keeps_vectors_inside_rows():
    """An iota, a transpose, a concatenate: where an element sits in its row matters, so the vectors stay in
    rows (and the generated code reads each element's own branch)."""
    g = asim.Graph("i")
    x = g.parameter("x", (6, 10))
    g.set_outputs(g.add(x, g.convert(g.iota((6, 10), 1), "f32"), name="z"))
    (m,) = _flat(asim.compile(g, "xla", "H100"))
    assert (m.vector, m.flat_vectors) == (2, False) and "(iota) depends on where an element sits" in m.vector_why
    g = asim.Graph("t")
    x, y = g.parameter("x", (10, 6)), g.parameter("y", (6, 10))
    g.set_outputs(g.add(g.transpose(x, (1, 0)), y, name="z"))
    (m,) = _flat(asim.compile(g, "xla", "H100"))
    assert not m.flat_vectors and "x is read through transpose, not at the domain's flat index" in m.vector_why
    g = _concatenated_constants()
    for strategy in ("unfused", "xla", "astitch"):
        plan = asim.compile(g, strategy, "H100")
        (m,) = [st.mapping for k in plan.kernels for st in k.stages if "cat" in st.ops]
        assert not m.flat_vectors and "cat (concatenate) depends on where an element sits" in m.vector_why, strategy


def test_a_slice_from_an_odd_offset_is_read_one_element_at_a_time():
    g = _graph((4, 16), sliced=((4, 20), (0, 3)))
    (m,) = _flat(asim.compile(g, "xla", "H100"))
    assert m.vector == 4 and "x is sliced from offset 3, not a multiple of 4" in m.vector_why


def test_dtype_sets_the_width():
    """16 bytes per vector: f16 8 elements, int8 8 (the widest planned), f64 2; pred stays scalar."""
    for dtype, want in (("f16", 8), ("bf16", 8), ("s8", 8), ("f64", 2), ("s32", 4)):
        (m,) = _flat(asim.compile(_graph((4, 64), dtype), "xla", "H100"))
        assert m.vector == want, dtype
    g = asim.Graph("p")
    a, b = g.parameter("a", (4, 64), "pred"), g.parameter("b", (4, 64), "pred")
    g.set_outputs(g.add_node("and", (a, b), name="c"))
    (m,) = _flat(asim.compile(g, "xla", "H100"))
    assert m.vector == 1 and "pred" in m.vector_why


def test_locate_puts_a_vector_on_one_thread_and_warps_side_by_side():
    m = ThreadMapping("flat", (8, 64), ((0, 1),), block=64, grid=1, per_thread=8, vector=4)
    b, t, it = m.locate(np.arange(512))
    assert (t[:4] == 0).all() and list(it[:4]) == [0, 1, 2, 3] and t[4] == 1
    assert t[256] == 0 and it[256] == 4                    # the thread's second vector: one block-width on
    assert m.elements_per_thread == 8 and m.task_iterations == 1
    pairs = set(zip(b.tolist(), t.tolist(), it.tolist(), strict=True))
    assert len(pairs) == 512                               # every element once


def test_bad_vectors_are_refused():
    with pytest.raises(asim.AStitchError, match="per_thread a positive multiple"):
        ThreadMapping("flat", (8, 64), ((0, 1),), block=64, grid=1, per_thread=6, vector=4).check()
    with pytest.raises(asim.AStitchError, match="straddle two rows"):
        ThreadMapping("flat", (8, 6), ((0, 1),), block=64, grid=1, per_thread=4, vector=4).check()
    ThreadMapping("flat", (8, 6), ((0, 1),), block=64, grid=1, per_thread=4, vector=4, flat_vectors=True).check()
    with pytest.raises(asim.AStitchError, match="only a flat mapping with vectors"):
        ThreadMapping("flat", (8, 6), ((0, 1),), block=64, grid=1, flat_vectors=True).check()
    with pytest.raises(asim.AStitchError, match="only a flat mapping with vectors"):
        ThreadMapping("rows", (8, 6), ((0,), (1,)), block=64, grid=1, threads_per_row=2, per_thread=2, vector=2,
                      flat_vectors=True).check()
    with pytest.raises(asim.AStitchError, match="must equal vector"):       # a column lane: one vector per trip
        ThreadMapping("columns", (8, 64), ((), (0,), (1,)), block=64, grid=1, threads_per_row=32, per_thread=8,
                      vector=4).check()
    ThreadMapping("columns", (8, 64), ((), (0,), (1,)), block=64, grid=1, threads_per_row=16, per_thread=4,
                  vector=4).check()


def test_the_plan_prints_serializes_and_loads_old_json():
    g = asim.workload("layernorm", rows=64, cols=768)
    plan = asim.compile(g, "xla", "H100")
    text = str(plan)
    assert "4 per thread per round (1 x 4-element vectors)" in text or "x 4-element vectors" in text
    s = plan.to_json()
    back = asim.Plan.from_json(s)
    assert [st.mapping for k in back.kernels for st in k.stages] == [st.mapping for k in plan.kernels for st in k.stages]
    d = json.loads(s)                                     # a plan written before the fields existed
    for k in d["kernels"]:
        for st in k.get("stages", []):
            for f in ("per_thread", "vector", "vector_why"):
                st["mapping"].pop(f, None)
    old = asim.Plan.from_json(json.dumps(d))
    assert all(st.mapping.per_thread == 1 and st.mapping.vector == 1 for k in old.kernels for st in k.stages)
    x = workload_inputs(g, 0)
    for got, want in zip(asim.simulate(old, x).outputs, asim.reference(g, x), strict=True):
        np.testing.assert_allclose(got, want, rtol=1e-4, atol=1e-4)


def test_simt_counts_a_vector_access_as_one_request_per_warp():
    """f32[4,256] + f32[4,256]: 1024 elements, 4-element vectors: 8 warp instructions per access
    (32 threads x 4 elements each), 128 sectors per access as with scalar accesses."""
    g = _graph((4, 256))
    res = asim.simulate(asim.compile(g, "xla", "H100"), workload_inputs(g, 0))
    st = res.stats.kernels[0].stages[0]
    assert (st.global_sectors_read, st.global_sectors_written, st.global_requests) == (256, 128, 3 * 8)


# -- the code generator follows the plan (CUDA simulator) ---------------------------------------------

@pytest.mark.parametrize("shape,dtype,sliced", [
    ((6, 10), "f32", None),                 # 4-element vectors across rows: 10 is not a multiple of 4
    ((4, 16), "f32", ((4, 20), (0, 3))),    # a slice from offset 3: scalar loads of x, vector loads of y
    ((5, 64), "f16", None), ((5, 64), "bf16", None), ((5, 64), "s8", None), ((3, 8), "f64", None),
    ((1000, 12), "f32", None),              # several vectors per thread, a guarded last round
])
def test_generated_vectors_match_the_reference(shape, dtype, sliced):
    pytest.importorskip("numba")
    import gpu_backend
    g = _graph(shape, dtype, sliced)
    x = workload_inputs(g, 0)
    want = asim.reference(g, x)
    for strategy in ("xla", "astitch"):
        plan = asim.compile(g, strategy, "H100")
        src = gpu_backend.generate_source(plan)
        (m,) = _flat(plan)
        if m.vector > 1:
            assert f"stg{m.vector}(g_z" in src and ("ldg(g_x" in src) == (sliced is not None)
        else:
            assert "stg(g_z" in src
        for got, ref in zip(gpu_backend.run(plan, x), want, strict=True):
            np.testing.assert_array_equal(got, ref)


@pytest.mark.parametrize("kind", ["scaled", "unit_dim", "reshaped", "f16", "mixed", "row_added", "odd", "rounds",
                                  "clamped", "clamped_in_rows", "concatenated"])
def test_vectors_across_rows_and_their_tail_match_the_reference(kind):
    """The code generator and the SIMT model follow ``flat_vectors``: whole vectors across rows (one
    vector access each), then the scalar tail in the one thread locate gives it; outputs exact."""
    pytest.importorskip("numba")
    import gpu_backend
    g = {"row_added": lambda: _row_added((6, 10)), "odd": lambda: _graph((3, 7)),
         "rounds": lambda: _graph((997, 1001)), "clamped": _clamped, "clamped_in_rows": lambda: _clamped((7, 8)),
         "concatenated": _concatenated_constants}.get(kind, lambda: _flat_order_graph(kind))()
    x = workload_inputs(g, 0)
    want = asim.reference(g, x)
    tol = dict(rtol=1e-6) if kind == "unit_dim" else dict(rtol=0)   # exp: a few ulps apart; the rest exact
    for strategy in ("unfused", "xla", "astitch"):
        plan = asim.compile(g, strategy, "H100")
        ms = _flat(plan)
        src = gpu_backend.generate_source(plan)
        assert ("# scalar tail" in src) == any(m.flat_vectors and m.size % m.vector for m in ms)
        assert all(f"ldg{m.vector}(" in src for m in ms if m.vector > 1)
        assert kind == "concatenated" or all(m.vector > 1 for m in ms)
        if kind.startswith("clamped"):       # each bound: one scalar load, issued with the vector's loads
            assert "ldg4(g_lo" not in src and src.index("lo = ldg(g_lo, 0)") < src.index("x_v = ldg4(g_x")
        for got, ref in zip(gpu_backend.run(plan, x), want, strict=True):
            np.testing.assert_allclose(got, ref, **tol)
        for got, ref in zip(asim.simulate(plan, x).outputs, want, strict=True):
            np.testing.assert_allclose(got, ref, **tol)


def test_simt_counts_whole_vectors_then_the_scalar_tail():
    """f32[3,7] + f32[3,7]: 5 whole vectors in one warp row (one instruction per access, its 80 bytes in 3
    sectors), then element 20 alone (one instruction, one sector): 2 requests and 4 sectors per access."""
    g = _graph((3, 7))
    plan = asim.compile(g, "xla", "H100")
    (m,) = _flat(plan)
    assert m.flat_vectors and m.size % m.vector == 1
    st = asim.simulate(plan, workload_inputs(g, 0)).stats.kernels[0].stages[0]
    assert (st.global_sectors_read, st.global_sectors_written, st.global_requests) == (8, 4, 3 * 2)


def test_vector_kernels_type_check_with_the_real_compiler(tmp_path):
    """Every dtype's vector intrinsics (and a 64-bit index kernel's) pass Numba's real type inference and
    lowering (no GPU: ``gpu_backend.machine.typecheck`` in a subprocess without the simulator)."""
    pytest.importorskip("numba")
    args = []
    cases = [((5, 64), d, None) for d in ("f32", "f16", "bf16", "s8", "f64")] + [((4, 16), "f32", ((4, 20), (0, 3))),
                                                                              ((3, 7), "f32", None)]   # a tail
    for i, (shape, dtype, sliced) in enumerate(cases):
        plan = asim.compile(_graph(shape, dtype, sliced), "xla", "H100")
        text = plan.to_json()
        if i == 0:                                         # the 64-bit index path, same vectors
            assert '"index_bits": 32' in text
            text = text.replace('"index_bits": 32', '"index_bits": 64')
        path = tmp_path / f"p{i}.json"
        path.write_text(text)
        args.append(str(path))
    assert_typecheck(args, tmp_path)


def assert_plans_typecheck(plans: list, tmp_path) -> None:
    """:func:`assert_typecheck` on ``plans``, each written to a JSON file in ``tmp_path`` first."""
    paths = []
    for i, plan in enumerate(plans):
        path = tmp_path / f"p{i}.json"
        path.write_text(plan.to_json())
        paths.append(str(path))
    assert_typecheck(paths, tmp_path)


def assert_typecheck(paths: list, tmp_path) -> None:
    """``gpu_backend.machine.typecheck`` on the plan JSON files ``paths``, in a subprocess without Numba's CUDA
    simulator (its real type inference and lowering, no GPU): every plan must say ok."""
    import os
    import subprocess
    import sys
    from pathlib import Path
    env = {k: v for k, v in os.environ.items() if k != "NUMBA_ENABLE_CUDASIM"}
    env["ASTITCH_GPU_CACHE"] = str(tmp_path / "cache")
    root = Path(TESTS_FILE).resolve().parent.parent
    r = subprocess.run([sys.executable, "-m", "gpu_backend.machine.typecheck", *paths], capture_output=True, text=True,
                       env=env, cwd=root, timeout=900)
    assert r.returncode == 0, r.stdout[-4000:] + r.stderr[-4000:]
    assert r.stdout.count("ok ") == len(paths)


def test_vectors_across_rows_at_twelve_million_elements():
    """f32[4099,3001] * scalar + f32[4099,3001] (12.3M elements, a tail of 3) at real size: every output
    exact, and each tensor's requests one per warp row of whole vectors plus one per tail address."""
    shape = (4099, 3001)
    g = asim.Graph("big")
    x, y, s = g.parameter("x", shape), g.parameter("y", shape), g.parameter("s", ())
    g.set_outputs(g.add(g.multiply(x, g.broadcast(s, shape)), y, name="z"))
    plan = asim.compile(g, "xla", "H100")
    (m,) = _flat(plan)
    n = 4099 * 3001
    assert m.flat_vectors and (m.vector, n % m.vector) == (4, 3)
    inputs = workload_inputs(g, 0)
    res = asim.simulate(plan, inputs)
    np.testing.assert_array_equal(res.outputs[0], asim.reference(g, inputs)[0])
    rows = -(-(n // 4) // 32)                       # warp rows of whole vectors
    st = res.stats.kernels[0].stages[0]
    # x, y and z: a request per warp row and per tail element; s: one per warp row, one in the tail
    assert st.global_requests == 3 * (rows + 3) + (rows + 1)
    assert st.global_bytes_written == 4 * n


def test_a_vector_through_an_op_of_another_shape_stays_one_where_the_ops_rows_allow():
    """``reshaped_state``: a stage over ``[2, 32, 10240]`` computing an op of ``[2, 320, 32, 32]`` (its index the
    domain's reshaped) sees a 4-element vector along the domain's rows as 4 neighbours along the op's innermost dim
    when 4 divides that dim, as 4 neighbours in flat order across the op's rows when it does not; a vector along
    another dim than the domain's innermost is scattered."""
    from astitch_sim.plan.vector_width import CONTIG, FLAT, SCATTER, UNIFORM, reshaped_state
    assert reshaped_state((CONTIG, 2), (2, 320, 32, 32), 4, 3) == (CONTIG, 3)
    assert reshaped_state((CONTIG, 2), (2, 320, 1024), 4, 3) == (CONTIG, 2)
    assert reshaped_state((CONTIG, 2), (2, 3, 2, 5), 4, 3) == FLAT              # 4 does not divide 5: flat order
    assert reshaped_state((CONTIG, 1), (2, 320, 32, 32), 4, 3) == SCATTER       # not along the domain's innermost
    assert reshaped_state(FLAT, (7, 3), 4, 2) == FLAT and reshaped_state(UNIFORM, (7, 3), 4, 2) == UNIFORM
