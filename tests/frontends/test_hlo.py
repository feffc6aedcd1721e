"""Tests for astitch_sim.frontends.hlo: importing XLA HLO text as a Graph.

The fixture test runs every module in tests/fixtures/hlo/ (written by JAX, see
tests/fixtures/make_fixtures.py) through the numpy reference and compares with
the outputs JAX computed.  The rest are small hand-written modules, one per
feature of the grammar and one per kind of bad input.
"""
from __future__ import annotations

import random
import re
from pathlib import Path

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import astitch_sim as asim
from astitch_sim import AStitchError, from_hlo, from_hlo_file
from astitch_sim.ir.dtypes import bf16_bits_to_f32, round_to_bf16
from anchor import TESTS_FILE

FIXTURES = Path(TESTS_FILE).parent / "fixtures" / "hlo"
FIXTURE_NAMES = sorted(p.stem for p in FIXTURES.glob("*.hlo"))

#: fixtures whose HLO uses something astitch-sim deliberately does not support:
#: importing them must fail with an AStitchError whose message matches
UNSUPPORTED: dict = {}

# Tolerances, |got - want| <= atol + rtol * |want|, with atol scaled by the output's magnitude:
#  * f32 graphs: rtol 2e-5, atol 2e-6 * max(1, max|want|).  XLA's CPU backend and numpy may use different
#    (but correctly rounded to ~1 ulp) exp/tanh/log and a different summation order in reduce and dot, so
#    a few ulps (1 ulp = 6e-8 relative) of drift per op accumulate over ~100 ops;
#  * graphs with an f16 node: rtol = atol factor 2e-3 (f16 has 11 significant bits: 1 ulp = 1e-3);
#  * graphs with a bf16 node: rtol = atol factor 1.6e-2 (bf16 has 8 bits: 1 ulp = 7.8e-3), because XLA may
#    keep bf16 intermediates in f32 where the reference rounds after every op;
#  * integer and pred outputs: exact.
F32_TOL = (2e-5, 2e-6)
F16_TOL = (2e-3, 2e-3)
BF16_TOL = (1.6e-2, 1.6e-2)


def _npz_list(z, prefix):
    keys = sorted((k for k in z.files if re.fullmatch(prefix + r"\d+", k)), key=lambda k: int(k[len(prefix):]))
    assert [int(k[len(prefix):]) for k in keys] == list(range(len(keys))), f"gap in the {prefix}N arrays: {keys}"
    return [z[k] for k in keys]


def _tolerance(g):
    dtypes = {n.dtype for n in g}
    if "bf16" in dtypes:
        return BF16_TOL
    if "f16" in dtypes:
        return F16_TOL
    return F32_TOL


def _assert_close(got, want, node, tol, where):
    if want.dtype.kind == "V" or (node.dtype == "bf16" and want.dtype == np.uint16):
        want = bf16_bits_to_f32(want)            # raw bfloat16 storage
    assert tuple(got.shape) == tuple(node.shape) == tuple(want.shape), where
    if node.dtype in ("f32", "f64", "f16", "bf16"):
        got64, want64 = got.astype(np.float64), want.astype(np.float64)
        rtol, atol = tol
        finite = np.isfinite(want64)
        scale = max(1.0, float(np.max(np.abs(want64[finite]))) if finite.any() else 1.0)
        np.testing.assert_allclose(got64, want64, rtol=rtol, atol=atol * scale, equal_nan=True, err_msg=where)
    else:
        np.testing.assert_array_equal(got, want.astype(got.dtype), err_msg=where)


def test_fixture_folder_is_there():
    assert len(FIXTURE_NAMES) >= 6, f"expected the HLO fixtures in {FIXTURES}"


@pytest.mark.parametrize("fixture", FIXTURE_NAMES)
def test_fixture_matches_jax(fixture):
    text = (FIXTURES / f"{fixture}.hlo").read_text()
    if fixture in UNSUPPORTED:
        with pytest.raises(AStitchError, match=UNSUPPORTED[fixture]):
            from_hlo(text)
        return
    g = from_hlo(text)
    with np.load(FIXTURES / f"{fixture}.npz") as z:
        inputs, wants = _npz_list(z, "in"), _npz_list(z, "out")
    assert len(g.inputs) == len(inputs)
    assert len(g.outputs) == len(wants), f"{fixture}: {len(g.outputs)} outputs, npz has {len(wants)}"
    outs = asim.reference(g, inputs)
    tol = _tolerance(g)
    for i, (got, want, node) in enumerate(zip(outs, wants, g.outputs, strict=True)):
        _assert_close(got, want, node, tol, f"{fixture} out{i} ({node})")


@pytest.mark.parametrize("fixture", FIXTURE_NAMES[:3] + ["softmax", "constants_arrays"])
def test_fixture_from_file_and_dict_inputs(fixture):
    assert fixture not in UNSUPPORTED and (FIXTURES / f"{fixture}.hlo").exists()
    g = from_hlo_file(FIXTURES / f"{fixture}.hlo", name="renamed")
    assert g.name == "renamed"
    with np.load(FIXTURES / f"{fixture}.npz") as z:
        inputs = _npz_list(z, "in")
    by_list = asim.reference(g, inputs)
    by_dict = asim.reference(g, {p.name: v for p, v in zip(g.inputs, inputs, strict=True)})
    for a, b in zip(by_list, by_dict, strict=True):
        np.testing.assert_array_equal(a, b)


def test_package_exports():
    assert asim.from_hlo is from_hlo and asim.from_hlo_file is from_hlo_file
    assert "from_hlo" in asim.__all__ and "from_hlo_file" in asim.__all__


# -- hand-written modules ------------------------------------------------------------

SCALE_ADD = """HloModule scale_add, entry_computation_layout={(f32[2,3]{1,0}, f32[3]{0})->f32[2,3]{1,0}}

ENTRY main.5 {
  x.1 = f32[2,3]{1,0} parameter(0)
  b.2 = f32[3]{0} parameter(1)
  bb.3 = f32[2,3]{1,0} broadcast(b.2), dimensions={1}
  ROOT add.4 = f32[2,3]{1,0} add(x.1, bb.3)
}
"""

SCALE_ADD_TYPED = """HloModule scale_add, entry_computation_layout={(f32[2,3]{1,0}, f32[3]{0})->f32[2,3]{1,0}}

ENTRY %main.5 (x.1: f32[2,3], b.2: f32[3]) -> f32[2,3] {
  %x.1 = f32[2,3]{1,0} parameter(0)
  %b.2 = f32[3]{0} parameter(1)
  %bb.3 = f32[2,3]{1,0} broadcast(f32[3]{0} %b.2), dimensions={1}
  ROOT %add.4 = f32[2,3]{1,0} add(f32[2,3]{1,0} %x.1, f32[2,3]{1,0} %bb.3)
}
"""

X23 = np.arange(6, dtype=np.float32).reshape(2, 3)
B3 = np.array([10, 20, 30], np.float32)


def _run(text, *inputs):
    return asim.reference(from_hlo(text), list(inputs))


def test_typed_and_untyped_operands_agree():
    g1, g2 = from_hlo(SCALE_ADD), from_hlo(SCALE_ADD_TYPED)
    assert [(n.name, n.op, n.shape, n.dtype, [o.name for o in n.operands]) for n in g1] == \
           [(n.name, n.op, n.shape, n.dtype, [o.name for o in n.operands]) for n in g2]
    assert g1.name == "scale_add"
    for g in (g1, g2):
        np.testing.assert_array_equal(asim.reference(g, [X23, B3])[0], X23 + B3)


def test_old_style_syntax_and_ignored_attributes():
    text = r"""HloModule m, is_scheduled=true, entry_computation_layout={(f32[2,3]{1,0})->f32[2]{0}}, num_partitions=1

%region_0.1 (a: f32[], b: f32[]) -> f32[] {
  %a = f32[] parameter(0)
  %b = f32[] parameter(1)
  ROOT %m = f32[] maximum(f32[] %a, f32[] %b), metadata={op_name="jit(f)/reduce_max" source_file="f.py" source_line=3}
}

ENTRY %main (x: f32[2,3]) -> f32[2] {
  %x = f32[2,3]{1,0} parameter(0), sharding={replicated}, frontend_attributes={_xla_a="{1}"}
  %c = f32[] constant(-inf), backend_config="{\"k\": [1, 2]}", origin={{"x"}}
  %e = f32[2,3]{1,0} exponential(%x), result_accuracy={mode=highest}, control-predecessors={%c}
  /* a comment */ %r = f32[2]{0} reduce(%e, %c), dimensions={1}, to_apply=%region_0.1 // trailing comment
  ROOT %out = f32[2]{0} copy(%r), statistics={visualizing_index=1,stat-0=0.5}, dim_labels=b01f_01io->b01f
}

FileNames
1 "f.py"

FunctionNames
1 "f"

FileLocations
1 {file_name_id=1 function_name_id=1 line=3 end_line=3 column=5 end_column=10}

StackFrames
1 {file_location_id=1 parent_frame_id=1}
"""
    g = from_hlo(text)
    assert g["r"].attrs["reducer"] == "max"
    np.testing.assert_allclose(asim.reference(g, [X23])[0], np.exp(X23).max(axis=1), rtol=1e-6)


def test_tuple_root_gives_outputs_in_order():
    text = """HloModule two
ENTRY main {
  x = f32[4]{0} parameter(0)
  y = s32[] parameter(1)
  n = f32[4]{0} negate(x)
  c = s32[2]{0} constant({7, -8})
  ROOT t = (f32[4]{0}, f32[4]{0}, /*index=2*/s32[], s32[2]{0}) tuple(n, x, y, c)
}
"""
    g = from_hlo(text)
    assert [o.name for o in g.outputs] == ["n", "x", "y", "c"]
    x = np.array([1, -2, 3, 4], np.float32)
    outs = asim.reference(g, [x, np.int32(5)])
    np.testing.assert_array_equal(outs[0], -x)
    np.testing.assert_array_equal(outs[1], x)
    assert outs[2] == 5 and outs[2].dtype == np.int32
    np.testing.assert_array_equal(outs[3], np.array([7, -8], np.int32))


def test_non_tuple_root_is_one_output():
    g = from_hlo(SCALE_ADD)
    assert [o.name for o in g.outputs] == ["add.4"]


CALLS = """HloModule calls

inner.1 {
  p0 = f32[4]{0} parameter(0)
  ROOT t = f32[4]{0} tanh(p0)
}

pair.2 {
  a = f32[4]{0} parameter(0)
  b = f32[4]{0} parameter(1)
  s = f32[4]{0} add(a, b)
  th = f32[4]{0} call(s), to_apply=inner.1
  d = f32[4]{0} subtract(a, b)
  ROOT r = (f32[4]{0}, f32[4]{0}) tuple(th, d)
}

ENTRY main.3 {
  y = f32[4]{0} parameter(1)
  x = f32[4]{0} parameter(0)
  c1 = (f32[4]{0}, f32[4]{0}) call(x, y), to_apply=pair.2
  c2 = (f32[4]{0}, f32[4]{0}) call(y, x), to_apply=pair.2
  g0 = f32[4]{0} get-tuple-element(c1), index=0
  g1 = f32[4]{0} get-tuple-element(c1), index=1
  g2 = f32[4]{0} get-tuple-element(c2), index=1
  m = f32[4]{0} multiply(g0, g1)
  ROOT out = (f32[4]{0}, f32[4]{0}) tuple(m, g2)
}
"""


def test_call_inlining_with_tuple_returning_callee():
    g = from_hlo(CALLS)
    assert [p.name for p in g.inputs] == ["x", "y"]          # parameter-number order, not text order
    names = {n.name for n in g}
    # each call's nodes are renamed under the call's name, nested calls too; no call node remains
    assert {"c1/s", "c1/d", "c1/th/t", "c2/s", "c2/d", "c2/th/t"} <= names
    assert not any(n.op == "call" for n in g)
    assert g["c1/th/t"].operands[0] is g["c1/s"]
    assert g["c1/s"].operands == (g["x"], g["y"])
    x = np.array([0.1, -0.2, 0.3, 1.0], np.float32)
    y = np.array([0.5, 0.5, -1.0, 2.0], np.float32)
    m, g2 = asim.reference(g, [x, y])
    np.testing.assert_allclose(m, np.tanh(x + y) * (x - y), rtol=1e-6)
    np.testing.assert_array_equal(g2, y - x)


def test_fusion_and_opt_barrier_pass_values_through():
    text = """HloModule f
fused.1 {
  p = f32[3]{0} parameter(0)
  ROOT n = f32[3]{0} negate(p)
}
ENTRY main {
  x = f32[3]{0} parameter(0)
  t = (f32[3]{0}, f32[3]{0}) tuple(x, x)
  ob = (f32[3]{0}, f32[3]{0}) opt-barrier(t)
  g = f32[3]{0} get-tuple-element(ob), index=1
  ROOT f = f32[3]{0} fusion(g), kind=kLoop, calls=fused.1
}
"""
    x = np.array([1, 2, 3], np.float32)
    np.testing.assert_array_equal(_run(text, x)[0], -x)


def test_layouts_are_recorded_on_every_node():
    text = """HloModule lay
ENTRY main {
  x = f32[2,3]{0,1} parameter(0)
  s = f32[] constant(2)
  b = f32[2,3]{0,1} broadcast(s), dimensions={}
  m = f32[2,3]{0,1} multiply(x, b)
  ROOT t = f32[3,2]{1,0} transpose(m), dimensions={1,0}
}
"""
    g = from_hlo(text)
    assert all(isinstance(n.attrs["layout"], tuple) for n in g)
    assert g["x"].attrs["layout"] == (0, 1) and g["x"].layout == (0, 1)
    assert g["m"].layout == (0, 1)
    assert g["t"].layout == (1, 0)
    assert g["s"].attrs["layout"] == ()
    assert g["t"].attrs["permutation"] == (1, 0)
    np.testing.assert_array_equal(asim.reference(g, [X23])[0], (2 * X23).T)   # layouts are physical only


def test_missing_layout_defaults_to_row_major():
    g = from_hlo("HloModule m\nENTRY e {\n  ROOT x = f32[2,3,4] parameter(0)\n}\n")
    assert g["x"].attrs["layout"] == (2, 1, 0)


def test_constants_scalars_nonfinite_and_arrays():
    text = """HloModule consts
ENTRY main {
  pinf = f32[] constant(inf)
  ninf = f32[] constant(-inf)
  qnan = f32[] constant(nan)
  big = f32[] constant(3.40282347e+38)
  small = f32[] constant(1e-06)
  t = pred[] constant(true)
  f = pred[] constant(false)
  i = s32[] constant(-2147483648)
  v = f32[4]{0} constant({-inf, -0.5, inf, 0})
  m = f32[2,3]{1,0} constant({ { 1, 2, 3 }, { 4, 5, 6 } })
  one = f32[1,1]{1,0} constant({ {2} })
  p = pred[2,2]{1,0} constant({ { 1, 0 }, { 0, 1 } })
  h = bf16[3]{0} constant({1, 1.00390625, 3.14159274})
  e = f32[0]{0} constant({})
  ROOT r = (f32[], f32[], f32[], f32[], f32[], pred[], pred[], s32[], f32[4]{0}, f32[2,3]{1,0}, f32[1,1]{1,0},
            pred[2,2]{1,0}, bf16[3]{0}, f32[0]{0}) tuple(pinf, ninf, qnan, big, small, t, f, i, v, m, one, p, h, e)
}
"""
    outs = _run(text)
    assert outs[0] == np.inf and outs[1] == -np.inf and np.isnan(outs[2])
    assert outs[3] == np.finfo(np.float32).max and outs[3].dtype == np.float32
    assert outs[4] == np.float32(1e-6)
    assert outs[5].dtype == np.bool_ and outs[5] and not outs[6]
    assert outs[7] == np.iinfo(np.int32).min and outs[7].dtype == np.int32
    np.testing.assert_array_equal(outs[8], np.array([-np.inf, -0.5, np.inf, 0], np.float32))
    np.testing.assert_array_equal(outs[9], np.arange(1, 7, dtype=np.float32).reshape(2, 3))
    np.testing.assert_array_equal(outs[10], [[2.0]])
    np.testing.assert_array_equal(outs[11], np.array([[True, False], [False, True]]))
    # bf16 constants are rounded to bf16 (1.00390625 is a tie between 1 and 1.0078125: ties to even -> 1)
    np.testing.assert_array_equal(outs[12], round_to_bf16(np.array([1, 1.00390625, 3.14159274], np.float32)))
    assert outs[12][1] == 1.0
    assert outs[13].shape == (0,)


def test_ops_attributes_are_read():
    text = """HloModule attrs
region_0 {
  a = f32[] parameter(0)
  b = f32[] parameter(1)
  ROOT s = f32[] add(b, a)
}
ENTRY main {
  x = f32[4,6]{1,0} parameter(0)
  y = f32[6,5]{1,0} parameter(1)
  sl = f32[2,3]{1,0} slice(x), slice={[1:3], [0:6:2]}
  cc = f32[4,12]{1,0} concatenate(x, x), dimensions={1}
  io = s32[4,6]{1,0} iota(), iota_dimension=1
  cv = f32[4,6]{1,0} convert(io)
  lt = pred[4,6]{1,0} compare(x, cv), direction=LT, type=TOTALORDER
  z = f32[] constant(0)
  pd = f32[7,7]{1,0} pad(x, z), padding=1_2x0_1
  rv = f32[4,6]{1,0} reverse(x), dimensions={0,1}
  dt = f32[4,5]{1,0} dot(x, y), lhs_contracting_dims={1}, rhs_contracting_dims={0}, operand_precision={highest,highest}
  rd = f32[6]{0} reduce(x, z), dimensions={0}, to_apply=region_0
  bc = f32[4,3,4]{2,1,0} bitcast(cc)
  ROOT t = (f32[2,3]{1,0}, f32[4,12]{1,0}, pred[4,6]{1,0}, f32[7,7]{1,0}, f32[4,6]{1,0}, f32[4,5]{1,0}, f32[6]{0},
            f32[4,3,4]{2,1,0}) tuple(sl, cc, lt, pd, rv, dt, rd, bc)
}
"""
    g = from_hlo(text)
    assert (g["sl"].attrs["starts"], g["sl"].attrs["limits"], g["sl"].attrs["strides"]) == ((1, 0), (3, 6), (1, 2))
    assert g["cc"].attrs["dimension"] == 1
    assert g["lt"].attrs["direction"] == "LT"
    assert (g["pd"].attrs["low"], g["pd"].attrs["high"], g["pd"].attrs["interior"]) == ((1, 0), (2, 1), (0, 0))
    assert g["rd"].attrs["reducer"] == "sum"
    assert g["dt"].attrs["lhs_batch_dims"] == () and g["dt"].attrs["rhs_contracting_dims"] == (0,)
    rng = np.random.default_rng(0)
    x = rng.standard_normal((4, 6)).astype(np.float32)
    y = rng.standard_normal((6, 5)).astype(np.float32)
    sl, cc, lt, pd, rv, dt, rd, bc = asim.reference(g, [x, y])
    np.testing.assert_array_equal(sl, x[1:3, 0:6:2])
    np.testing.assert_array_equal(cc, np.concatenate([x, x], axis=1))
    np.testing.assert_array_equal(lt, x < np.arange(6, dtype=np.float32)[None, :])
    np.testing.assert_array_equal(pd, np.pad(x, ((1, 2), (0, 1))))
    np.testing.assert_array_equal(rv, x[::-1, ::-1])
    np.testing.assert_allclose(dt, x.astype(np.float64) @ y, rtol=1e-5, atol=1e-6)
    np.testing.assert_allclose(rd, x.sum(axis=0), rtol=1e-5, atol=1e-6)
    np.testing.assert_array_equal(bc, np.concatenate([x, x], axis=1).reshape(4, 3, 4))


REGION = """HloModule r
region {{
  a = {t}[] parameter(0)
  b = {t}[] parameter(1)
  ROOT c = {t}[] {op}({args})
}}
ENTRY main {{
  x = {t}[3,4]{{1,0}} parameter(0)
  i = {t}[] constant({init})
  ROOT r = {t}[3]{{0}} reduce(x, i), dimensions={{1}}, to_apply=region
}}
"""


@pytest.mark.parametrize("op,reducer,t,init,args", [
    ("add", "sum", "f32", "0", "a, b"), ("add", "sum", "s32", "0", "b, a"),
    ("maximum", "max", "f32", "-inf", "a, b"), ("minimum", "min", "f32", "inf", "b, a"),
    ("multiply", "prod", "f32", "1", "a, b"), ("and", "and", "pred", "true", "a, b"),
    ("or", "or", "pred", "false", "b, a")])
def test_reducer_regions_are_recognised(op, reducer, t, init, args):
    g = from_hlo(REGION.format(op=op, t=t, init=init, args=args))
    assert g["r"].attrs["reducer"] == reducer
    x = (np.arange(12).reshape(3, 4) % 3 == 0) if t == "pred" else (np.arange(12).reshape(3, 4) - 5)
    x = x.astype({"f32": np.float32, "s32": np.int32, "pred": np.bool_}[t])
    want = {"sum": np.sum, "max": np.max, "min": np.min, "prod": np.prod, "and": np.all, "or": np.any}[reducer]
    np.testing.assert_array_equal(asim.reference(g, [x])[0], want(x, axis=1).astype(x.dtype))


def test_dead_code_is_kept_but_not_live():
    text = """HloModule dead
ENTRY main {
  x = f32[3]{0} parameter(0)
  unused = f32[3]{0} exponential(x)
  ROOT n = f32[3]{0} negate(x)
}
"""
    g = from_hlo(text)
    assert "unused" in g and "unused" not in {n.name for n in g.live_nodes()}
    np.testing.assert_array_equal(asim.reference(g, [np.ones(3, np.float32)])[0], -np.ones(3, np.float32))


# -- bad input ---------------------------------------------------------------------------

def _entry(body: str, extra: str = "") -> str:
    return f"HloModule bad\n{extra}\nENTRY main {{\n{body}\n}}\n"


BAD = [
    ("", r"empty"),
    ("   \n\t\n", r"empty"),
    ("HloModule m\n", r"no ENTRY computation"),
    ("HloModule m\nregion {\n  ROOT a = f32[] parameter(0)\n}\n", r"no ENTRY computation"),
    # truncated: unbalanced braces and parens, missing ROOT
    ("HloModule m\nENTRY main {\n  ROOT x = f32[4]{0} parameter(0)\n", r"never closed.*truncated"),
    ("HloModule m\nENTRY main {\n  ROOT x = f32[4]{0} negate(y\n}\n",
     r"line 4: expected ',' between operands of 'x', found '}'"),
    ("HloModule m, entry_computation_layout={(f32[4]{0})->f32[4]{0}\nENTRY main {\n ROOT x = f32[4] parameter(0)\n}",
     r"'\{' opened on line 1 is never closed"),
    ("HloModule m\nENTRY main {\n  x = f32[4]{0} parameter(0)\n  y = f32[4]{0} negate(x)\n}\n", r"no ROOT"),
    ("HloModule m\nENTRY main {\n  ROOT x = f32[4]{0] parameter(0)\n}\n", r"does not match"),
    ("HloModule m\nENTRY main {\n  ROOT c = f32[] constant(1), metadata={op_name=\"abc\n}\n", r"unterminated string"),
    ("HloModule m /* comment\nENTRY main {\n}\n", r"unterminated /\* comment"),
    # unknown opcode: names the op, the instruction and the line
    (_entry("  x = f32[4]{0} parameter(0)\n  ROOT fft.3 = f32[4]{0} fft(x), fft_type=FFT"),
     r"line 5: unsupported op 'fft' in 'fft\.3'"),
    # undefined operand: names it and the line
    (_entry("  x = f32[4]{0} parameter(0)\n  ROOT a = f32[4]{0} add(x, nope.7)"),
     r"line 5: 'a' uses undefined operand 'nope\.7'"),
    # malformed types
    (_entry("  ROOT x = f32[4,x]{1,0} parameter(0)"), r"line 4: malformed type"),
    (_entry("  ROOT x = q7[4]{0} parameter(0)"), r"line 4: malformed type: unknown element type 'q7'"),
    (_entry("  ROOT x = f32[4,4]{0,0} parameter(0)"), r"line 4: malformed layout"),
    (_entry("  ROOT x = f32 parameter(0)"), r"line 4: malformed type: expected '\['"),
    (_entry("  ROOT x = f32[<=4]{0} parameter(0)"), r"line 4: malformed type.*dynamic"),
    # declared shape / dtype disagree with shape inference
    (_entry("  x = f32[4]{0} parameter(0)\n  ROOT n = f32[5]{0} negate(x)"), r"line 5: n: declared shape"),
    (_entry("  x = f32[4]{0} parameter(0)\n  ROOT n = s32[4]{0} negate(x)"), r"line 5: n: declared dtype"),
    # reducers
    (_entry("  x = f32[4]{0} parameter(0)\n  z = f32[] constant(0)\n"
            "  ROOT r = f32[] reduce(x, z), dimensions={0}, to_apply=region",
            "region {\n  a = f32[] parameter(0)\n  b = f32[] parameter(1)\n  ROOT s = f32[] subtract(a, b)\n}"),
     r"line 10: reduce 'r': region 'region' is not a recognised reducer .*computes subtract"),
    (_entry("  x = f32[4]{0} parameter(0)\n  z = f32[] constant(0)\n"
            "  ROOT r = f32[] reduce(x, z), dimensions={0}, to_apply=region",
            "region {\n  a = f32[] parameter(0)\n  b = f32[] parameter(1)\n  s = f32[] add(a, b)\n"
            "  ROOT e = f32[] exponential(s)\n}"),
     r"not a recognised reducer .*computes add, exponential"),
    (_entry("  x = f32[4]{0} parameter(0)\n  z = f32[] constant(0)\n"
            "  ROOT r = f32[] reduce(x, z), dimensions={0}, to_apply=nowhere"),
     r"line 6: reduce 'r' applies unknown computation 'nowhere'"),
    (_entry("  x = f32[4]{0} parameter(0)\n  y = s32[4]{0} parameter(1)\n  z = f32[] constant(0)\n"
            "  w = s32[] constant(0)\n  ROOT r = f32[] reduce(x, y, z, w), dimensions={0}, to_apply=region",
            "region {\n  a = f32[] parameter(0)\n  b = f32[] parameter(1)\n  ROOT s = f32[] add(a, b)\n}"),
     r"reduce 'r' has 4 operands: .*argmax/argmin"),
    (_entry("  x = s32[4]{0} parameter(0)\n  z = s32[] constant(0)\n"
            "  ROOT r = s32[] reduce(x, z), dimensions={0}, to_apply=region",
            "region {\n  a = s32[] parameter(0)\n  b = s32[] parameter(1)\n  ROOT s = s32[] and(a, b)\n}"),
     r"bitwise and reduce over s32"),
    # calls
    (_entry("  x = f32[4]{0} parameter(0)\n  ROOT c = f32[4]{0} call(x), to_apply=missing.1"),
     r"line 5: call 'c' calls unknown computation 'missing\.1'"),
    (_entry("  x = f32[4]{0} parameter(0)\n  ROOT c = f32[4]{0} call(x, x), to_apply=f",
            "f {\n  ROOT p = f32[4]{0} parameter(0)\n}"),
     r"passes 2 argument\(s\) to 'f', which has 1 parameter"),
    (_entry("  x = f32[4]{0} parameter(0)\n  ROOT c = f32[4]{0} call(x), to_apply=f",
            "f {\n  p = f32[4]{0} parameter(0)\n  ROOT c = f32[4]{0} call(p), to_apply=f\n}"),
     r"calls itself"),
    (_entry("  x = f32[4]{0} parameter(0)\n  ROOT c = f32[5]{0} call(x), to_apply=f",
            "f {\n  ROOT p = f32[4]{0} parameter(0)\n}"),
     r"call 'c' is declared as f32\[5\] but gets f32\[4\]"),
    # tuples
    (_entry("  x = f32[4]{0} parameter(0)\n  t = (f32[4]{0}) tuple(x)\n"
            "  ROOT g = f32[4]{0} get-tuple-element(t), index=3"), r"index 3 is out of range"),
    (_entry("  x = f32[4]{0} parameter(0)\n  ROOT g = f32[4]{0} get-tuple-element(x), index=0"),
     r"needs one tuple operand"),
    (_entry("  x = f32[4]{0} parameter(0)\n  t = (f32[4]{0}) tuple(x)\n  ROOT n = f32[4]{0} negate(t)"),
     r"operand 't' is a tuple"),
    # parameters and structure
    (_entry("  x = f32[4]{0} parameter(0)\n  ROOT y = f32[4]{0} parameter(2)"), r"numbered 0\.\.1"),
    (_entry("  x = f32[4]{0} parameter(0)\n  ROOT y = f32[4]{0} parameter(0)"), r"parameter number 0 is used by both"),
    (_entry("  x = f32[4]{0} parameter(0)\n  ROOT x = f32[4]{0} negate(x)"), r"'x' is defined twice"),
    (_entry("  ROOT x = f32[4]{0} parameter(0)") + "ENTRY other {\n  ROOT y = f32[] parameter(0)\n}\n",
     r"second ENTRY"),
    ("HloModule m\nf {\n ROOT a = f32[] parameter(0)\n}\nf {\n ROOT a = f32[] parameter(0)\n}\n"
     "ENTRY e {\n ROOT a = f32[] parameter(0)\n}", r"'f' is defined twice"),
    (_entry("  x = f32[4]{0} parameter(0)\n  ROOT y = f32[4]{0} = negate(x)"), r"line 5: expected the opcode"),
    (_entry("  ROOT x f32[4]{0} parameter(0)"), r"line 4: expected '='"),
    # constants
    (_entry("  ROOT c = f32[3]{0} constant({1, 2})"), r"literal has shape \[2\] but the type says f32\[3\]"),
    (_entry("  ROOT c = f32[2,2]{1,0} constant({ {1, 2}, {3} })"), r"ragged literal"),
    (_entry("  ROOT c = f32[] constant(one)"), r"'one' is not a f32 value"),
    (_entry("  ROOT c = s32[] constant(1.5)"), r"'1\.5' is not a s32 value"),
    (_entry("  ROOT c = pred[] constant(maybe)"), r"'maybe' is not a pred value"),
    (_entry("  ROOT c = f32[100]{0} constant({...})"), r"elided"),
    # attributes
    (_entry("  x = f32[4]{0} parameter(0)\n  ROOT b = f32[4,4]{1,0} broadcast(x), dimensions=oops"),
     r"line 5: 'b': dimensions= must be a list"),
    (_entry("  x = f32[4]{0} parameter(0)\n  ROOT s = f32[2]{0} slice(x), slice={0:2}"), r"slice= must look like"),
    (_entry("  x = f32[4]{0} parameter(0)\n  z = f32[] constant(0)\n"
            "  ROOT p = f32[5]{0} pad(x, z), padding=1"), r"padding=1 must be low_high"),
    (_entry("  x = f32[4]{0} parameter(0)\n  ROOT c = pred[4]{0} compare(x, x)"),
     r"compare 'c' needs attribute direction="),
    (_entry("  x = f32[4]{0} parameter(0)\n  ROOT c = f32[8]{0} concatenate(x, x), dimensions={0,1}"),
     r"with one dimension"),
]


@pytest.mark.parametrize("text,match", BAD, ids=[f"bad{i}" for i in range(len(BAD))])
def test_bad_input_raises_astitch_error(text, match):
    with pytest.raises(AStitchError, match=match):
        from_hlo(text)


def test_not_text_and_missing_file():
    with pytest.raises(AStitchError, match="expects HLO text"):
        from_hlo(b"HloModule m")
    with pytest.raises(AStitchError, match="cannot read HLO file"):
        from_hlo_file(FIXTURES / "does_not_exist.hlo")


def test_fixture_with_unsupported_op_names_it():
    text = (FIXTURES / "softmax.hlo").read_text() if (FIXTURES / "softmax.hlo").exists() else SCALE_ADD
    lines = text.splitlines()
    entry = next(k for k, ln in enumerate(lines) if ln.startswith("ENTRY"))
    i = next(k for k, ln in enumerate(lines) if k > entry and (" exponential(" in ln or " add(" in ln))
    name = lines[i].split("=")[0].replace("ROOT", "").strip()
    lines[i] = re.sub(r" (exponential|add)\(", " cholesky(", lines[i])
    with pytest.raises(AStitchError, match=rf"line {i + 1}: unsupported op 'cholesky' in '{re.escape(name)}'"):
        from_hlo("\n".join(lines))


# -- fuzz: truncated or damaged modules fail cleanly --------------------------------------

_FUZZ_SOURCES = [SCALE_ADD_TYPED, CALLS] + [
    (FIXTURES / f"{n}.hlo").read_text() for n in ("constants_arrays", "softmax", "grad_checkpoint", "int32_ops")
    if (FIXTURES / f"{n}.hlo").exists()]


def _parse_or_astitch_error(text):
    try:
        from_hlo(text)
        return True
    except AStitchError:
        return False


def test_truncation_at_every_line_end_fails_cleanly():
    for src in _FUZZ_SOURCES:
        stop = src.rstrip().rfind("}")
        for m in re.finditer("\n", src[:stop]):
            assert not _parse_or_astitch_error(src[:m.start()]), f"parsed a module truncated at {m.start()}"


@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.integers(0, len(_FUZZ_SOURCES) - 1), st.floats(0, 1))
def test_truncation_at_random_points_fails_cleanly(which, where):
    src = _FUZZ_SOURCES[which]
    cut = int(where * len(src))
    parsed = _parse_or_astitch_error(src[:cut])
    if parsed:   # only a cut after the final '}' may still parse
        assert src[cut:].strip() == ""


@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.integers(0, len(_FUZZ_SOURCES) - 1), st.floats(0, 1), st.sampled_from(list("{}[]()=,:%\"x0 \n/*-")))
def test_damaged_text_fails_cleanly(which, where, char):
    """Deleting, inserting or replacing one character gives a graph or an AStitchError, never another error."""
    src = _FUZZ_SOURCES[which]
    i = int(where * (len(src) - 1))
    for text in (src[:i] + src[i + 1:], src[:i] + char + src[i:], src[:i] + char + src[i + 1:]):
        _parse_or_astitch_error(text)


def test_random_line_shuffles_fail_cleanly():
    rng = random.Random(7)
    for src in _FUZZ_SOURCES:
        lines = src.splitlines()
        for _ in range(20):
            a, b = rng.randrange(len(lines)), rng.randrange(len(lines))
            lines2 = list(lines)
            lines2[a], lines2[b] = lines2[b], lines2[a]
            _parse_or_astitch_error("\n".join(lines2))
