"""Inputs stored as a seed: the same arrays on every machine and every numpy version.

The model fixtures (``tests/fixtures/models``) run at real sizes -- a 16k-token
layernorm, 32000-word logits -- whose inputs would take hundreds of MB to
commit.  Instead each fixture stores a *spec* per input (shape, dtype, kind,
seed) and the fixture maker (``tests/fixtures/make_model_fixtures.py``, which
feeds JAX), the tests and the benchmarks all rebuild the arrays from it::

    from astitch_sim import seeded
    inputs = seeded.fixture_inputs("tests/fixtures/models/gpt_forward.hlo")

numpy's random generators may change their streams between versions, so the
values come from a fixed integer hash (splitmix64 of the element's position
and the seed) in plain uint64 arithmetic: bit-for-bit reproducible anywhere.

Kinds: ``normal`` (approximately N(0, scale^2): the sum of four uniforms,
centred and scaled), ``uniform`` (in [lo, hi)), ``int`` (integers in [lo, hi)),
``bool`` (probability ``p`` of True), ``causal`` (a [..., T, T] lower-triangular
pred mask), ``ones``.
"""
from __future__ import annotations

import numpy as np

# absolute, not relative: benchmarks/before_after.py loads this file by its path (no package) to rebuild
# today's inputs under an old commit's astitch_sim
from astitch_sim.errors import AStitchError

_M1 = np.uint64(0xBF58476D1CE4E5B9)
_M2 = np.uint64(0x94D049BB133111EB)
_GOLD = np.uint64(0x9E3779B97F4A7C15)


def _splitmix(x: np.ndarray) -> np.ndarray:
    with np.errstate(over="ignore"):
        z = x + _GOLD
        z = (z ^ (z >> np.uint64(30))) * _M1
        z = (z ^ (z >> np.uint64(27))) * _M2
        return z ^ (z >> np.uint64(31))


def uniform01(n: int, seed: int, stream: int = 0) -> np.ndarray:
    """``n`` float64 values in [0, 1), a pure function of (seed, stream, position)."""
    with np.errstate(over="ignore"):
        key = np.uint64(seed) * np.uint64(0x100000001B3) + np.uint64(stream) * np.uint64(0xD6E8FEB86659FD93)
        bits = _splitmix(np.arange(n, dtype=np.uint64) + _splitmix(np.array([key], dtype=np.uint64))[0])
    return (bits >> np.uint64(11)).astype(np.float64) * (1.0 / (1 << 53))


_NP = {"f32": np.float32, "f16": np.float16, "bf16": np.float32, "s32": np.int32, "s64": np.int64, "pred": np.bool_,
       "u32": np.uint32, "u8": np.uint8}


KINDS = ("normal", "uniform", "int", "bool", "causal", "ones")


def make(spec: dict) -> np.ndarray:
    """The array a spec describes (bf16 as float32 values already rounded to bf16)."""
    missing = [k for k in ("shape", "dtype", "kind", "seed") if not isinstance(spec, dict) or k not in spec]
    if missing:
        raise AStitchError(f"a seeded-input spec needs shape, dtype, kind and seed; {spec!r} lacks "
                           f"{', '.join(missing)} (make one with seeded.spec(shape, dtype, kind, seed))")
    if spec["kind"] not in KINDS or spec["dtype"] not in _NP:
        raise AStitchError(f"seeded-input spec {spec!r}: kind must be one of {', '.join(KINDS)} and dtype one "
                           f"of {', '.join(_NP)}")
    if spec["kind"] == "int" and not ("lo" in spec and "hi" in spec):
        raise AStitchError(f"seeded-input spec {spec!r}: kind 'int' needs its range, lo and hi")
    shape = tuple(spec["shape"])
    n = int(np.prod(shape)) if shape else 1
    dtype, kind, seed = spec["dtype"], spec["kind"], int(spec["seed"])
    if kind == "normal":
        u = sum(uniform01(n, seed, s) for s in range(4))
        v = (u - 2.0) * np.sqrt(3.0) * spec.get("scale", 1.0) + spec.get("mean", 0.0)
    elif kind == "uniform":
        v = spec.get("lo", 0.0) + uniform01(n, seed) * (spec.get("hi", 1.0) - spec.get("lo", 0.0))
    elif kind == "int":
        v = spec["lo"] + np.floor(uniform01(n, seed) * (spec["hi"] - spec["lo"]))
    elif kind == "bool":
        v = uniform01(n, seed) < spec.get("p", 0.5)
    elif kind == "causal":
        t = shape[-1]
        v = np.broadcast_to(np.tril(np.ones((t, t), bool)), shape).reshape(-1)
    else:                   # "ones"
        v = np.ones(n)
    arr = np.asarray(v).reshape(shape).astype(_NP[dtype])
    if dtype == "bf16":
        from astitch_sim.ir.dtypes import round_to_bf16
        arr = round_to_bf16(arr)
    return arr


def spec(shape, dtype="f32", kind="normal", seed=0, **kw) -> dict:
    return {"shape": list(shape), "dtype": dtype, "kind": kind, "seed": seed, **kw}


def fixture_inputs(hlo_path) -> list:
    """The inputs of an HLO fixture (``tests/fixtures/<dir>/<name>.hlo``): for a model fixture the arrays
    rebuilt from its seeded spec, otherwise the arrays ``in0``, ``in1``... saved beside it (``<name>.npz``)."""
    import json
    from pathlib import Path

    path = Path(hlo_path)
    z = np.load(path.with_suffix(".npz"))
    if path.parent.name == "models" and "spec" in z.files:
        return [make(s) for s in json.loads(str(z["spec"]))["inputs"]]
    keys = sorted((k for k in z.files if k.startswith("in") and k[2:].isdigit()), key=lambda k: int(k[2:]))
    return [z[k] for k in keys]
