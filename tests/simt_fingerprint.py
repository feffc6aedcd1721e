"""Everything ``simulate`` reports, as compact JSON: the fingerprint the SIMT model's speed work must not move.

``fingerprint(result)`` keeps, readable, the plan-wide totals (``SimStats.as_dict``) and
each kernel's name and predicted time; and, as SHA-256 digests, everything else to the
bit: every counter of every stage of every kernel with the kernel's fields (grid, block,
waves, memset and library bytes, the cost model's breakdown), the timeline's kernel spans
and block entries; and each output: its dtype, shape, integer bytes and non-finite positions
digested, its float values as per-chunk sums compared within a stated tolerance (``RTOL``), so
that the fixture holds on any CPU (numpy's transcendental functions differ in the last bit
between its AVX2 and baseline code paths).  A digest changes when any value in it moves
(numbers are digested as JSON text, whose floats round-trip exactly; a Python float and a
numpy float64 of one value read the same), and the readable part shows roughly where.

``CASES`` are the catalog at test sizes, every strategy, plus bigger shapes (the paper's
among them) and every model fixture, marked ``slow``.  ``tests/make_simt_stats.py`` records them into
``tests/fixtures/simt_stats.json`` (one line per case) from a known-good version of the
model; ``tests/simt/test_simt_stats_fixture.py`` checks the current model reproduces them exactly.
"""
from __future__ import annotations

import hashlib
import json
from dataclasses import asdict
from pathlib import Path

import numpy as np

import astitch_sim as asim
from astitch_sim.frontends.workloads import workload_inputs

#: (workload, shape) at test sizes: odd extents, partial warps and blocks, one of each catalog entry
SMALL = [
    ("layernorm", dict(rows=64, cols=96)),
    ("layernorm", dict(rows=9000, cols=33)),
    ("rmsnorm", dict(rows=32, cols=256)),
    ("batchnorm_train", dict(rows=1000, cols=64)),
    ("layernorm_backward", dict(rows=33, cols=768)),
    ("global_norm", dict(rows=16, cols=1000)),
    ("softmax", dict(rows=64, cols=3000)),
    ("softmax", dict(rows=37, cols=33)),
    ("softmax", dict(rows=5000, cols=32)),
    ("attention_softmax", dict(batch=2, heads=3, seq=128)),
    ("log_softmax", dict(rows=8, cols=3200)),
    ("cross_entropy", dict(rows=8, cols=3200)),
    ("bias_gelu", dict(rows=16, cols=3072)),
    ("swiglu", dict(rows=8, cols=1100)),
    ("adam_step", dict(size=100003)),
    ("paper_fig7", dict(n=128, c=256)),
    ("row_reduce", dict(rows=7500, cols=32)),
    ("column_reduce", dict(rows=100, cols=3072)),
    ("global_norm", dict(rows=256, cols=1024)),     # one row split over blocks, counted over its parts
]

#: bigger shapes (``slow``): the paper's three speed shapes and a few past the sizes small tests reach
BIG = [
    ("layernorm", dict(rows=16384, cols=768)),
    ("softmax", dict(rows=750000, cols=32)),
    ("softmax", dict(rows=64, cols=30000)),
    ("row_reduce", dict(rows=200000, cols=32)),
    ("column_reduce", dict(rows=2048, cols=3072)),
    ("batchnorm_train", dict(rows=65536, cols=64)),
]


#: real models (``tests/fixtures/models``, with their seeded inputs; ``slow``): graphs that mix every op and
#: mapping -- gathers through slices and transposes, a dynamic-update-slice, whole-tensor sums split over blocks
MODELS = sorted(p.stem for p in (Path(__file__).parent / "fixtures" / "models").glob("*.hlo"))
MODEL = "model:"


def case_id(name: str, shape: dict, strategy: str) -> str:
    return f"{name}[{','.join(f'{k}={v}' for k, v in shape.items())}]:{strategy}"


def cases(big: bool = False):
    """``(id, workload, shape, strategy, slow)`` for every case."""
    out = []
    for group, slow in ((SMALL, False), (BIG, True)):
        if slow and not big:
            continue
        for name, shape in group:
            for strategy in asim.STRATEGIES:
                out.append((case_id(name, shape, strategy), name, shape, strategy, slow))
    if big:
        out += [(case_id(MODEL + m, {}, s), MODEL + m, {}, s, True) for m in MODELS for s in asim.STRATEGIES]
    return out


#: per strategy, compile options for the fingerprint (none: fusionstitching's search is budgeted in schedules
#: priced, not wall-clock time, and every case finishes its search under the default budget)
UNBOUNDED: dict = {}


def run_case(name: str, shape: dict, strategy: str, gpu: str = "H100"):
    if name.startswith(MODEL):
        from astitch_sim.frontends.seeded import fixture_inputs
        path = Path(__file__).parent / "fixtures" / "models" / f"{name[len(MODEL):]}.hlo"
        g, inputs = asim.from_hlo_file(path), fixture_inputs(path)
    else:
        g = asim.workload(name, **shape)
        inputs = workload_inputs(g, 0)
    plan = asim.compile(g, strategy, gpu, **UNBOUNDED.get(strategy, {}))
    return asim.simulate(plan, inputs)


def _sha(text: str) -> str:
    return hashlib.sha256(text.encode()).hexdigest()[:32]


def _digest_json(obj) -> str:
    return _sha(json.dumps(obj, sort_keys=True))


#: float outputs are compared, not digested: numpy's exp, log, tanh... give results that differ in the last
#: bit between CPUs (its AVX2/AVX-512 code paths against the baseline ones), so raw bytes are not portable.
#: Each float output is cut into up to ``CHUNKS`` pieces of its flat order; each piece's sum and sum of
#: magnitudes must agree within ``RTOL`` of that piece's sum of magnitudes (float32 results a few ulps apart
#: agree to ~1e-7; a wrong or misplaced element moves its piece by its own size).
CHUNKS = 16
RTOL = 1e-5


def _digest_array(a):
    """Exact things digested (dtype, shape, integer and bool bytes, where the NaNs and infinities are);
    float values as per-chunk sums, compared within ``RTOL`` by :func:`output_diffs`."""
    a = np.ascontiguousarray(a)
    head = f"{a.dtype.str}{list(a.shape)}:"
    if a.dtype.kind not in "fc":
        return head + hashlib.sha256(a.tobytes()).hexdigest()[:32]
    flat = a.ravel()
    finite = np.isfinite(flat)
    masks = np.packbits(np.stack([np.isnan(flat), flat == np.inf, flat == -np.inf]), axis=-1)
    x = np.where(finite, flat, 0).astype(np.float64)
    pieces = np.array_split(x, min(CHUNKS, max(1, x.size)))
    return {"exact": head + hashlib.sha256(masks.tobytes()).hexdigest()[:32],
            "chunks": [[float(c.sum()), float(np.abs(c).sum())] for c in pieces]}


def output_diffs(want, got, path: str) -> list:
    """Where a recorded output and a new one differ: exact parts exactly, float chunks within RTOL."""
    if isinstance(want, str) or isinstance(got, str):
        return [] if want == got else [f"{path}: recorded {want!r}, now {got!r}"]
    if want["exact"] != got["exact"]:
        return [f"{path}: dtype, shape or non-finite positions changed: {want['exact']} -> {got['exact']}"]
    if len(want["chunks"]) != len(got["chunks"]):
        return [f"{path}: {len(want['chunks'])} chunks recorded, {len(got['chunks'])} now"]
    out = []
    for i, ((ws, wa), (gs, ga)) in enumerate(zip(want["chunks"], got["chunks"], strict=True)):
        tol = RTOL * max(wa, ga) + 1e-30
        if abs(ws - gs) > tol or abs(wa - ga) > tol:
            out.append(f"{path} chunk {i}: sum {ws!r} -> {gs!r}, sum|x| {wa!r} -> {ga!r} (tolerance {tol:.3g})")
    return out


def _span(k) -> dict:
    """A kernel span's fields; ``imbalance_us`` (added after the fixture was recorded) only where it is
    not 0, so the spans of kernels without an imbalanced stage keep their recorded digests."""
    d = asdict(k)
    if not d.get("imbalance_us"):
        d.pop("imbalance_us", None)
    return d


def fingerprint(res) -> dict:
    """The result as JSON: readable totals and per-kernel predicted times, digests of the rest."""
    kernels = [asdict(ks) for ks in res.stats.kernels]
    tl = res.timeline
    timeline = None
    if tl is not None:
        timeline = {"kernels": _digest_json([_span(k) for k in tl.kernels]),
                    "entries": _digest_json([asdict(e) for e in tl.entries]),
                    "n_entries": len(tl.entries)}
    return {"totals": res.stats.as_dict(),
            "kernels": [[k["name"], k["predicted_us"], _digest_json(k)] for k in kernels],
            "timeline": timeline,
            "outputs": [_digest_array(o) for o in res.outputs]}
