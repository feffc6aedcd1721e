"""Geometries kept from one kernel to the next (``simt/kept_geometries.py``): a later kernel of the same mapping
takes the earlier one's geometry, which changes no counter and no value, and what is kept stays in its budget."""
from __future__ import annotations

import dataclasses
from unittest import mock

import numpy as np
import pytest

import astitch_sim as asim
from astitch_sim.frontends.workloads import workload_inputs
from astitch_sim.plan.mapping import ThreadMapping
from astitch_sim.simt import executor
from astitch_sim.simt.count_memo import KeptCounts
from astitch_sim.simt.geometry import Geometry
from astitch_sim.simt import kept_geometries
from astitch_sim.simt.kept_geometries import KeptGeometries, held_bytes, mapping_key, needed_after
from test_simt_blocked_paths import record


@pytest.mark.parametrize("name,shape,strategy", [("softmax", dict(rows=64, cols=3000), "xla"),
                                                 ("layernorm", dict(rows=256, cols=768), "unfused"),
                                                 ("adam_step", dict(size=65536), "unfused")])
def test_a_kept_geometry_changes_no_counter_and_no_value(name, shape, strategy):
    """Every counter, the timeline and every output byte are the same with each kernel making its own
    geometries, and the kept ones really are taken (xla's two row reductions of one shape, an unfused graph's
    elementwise kernels)."""
    g = asim.workload(name, **shape)
    plan, x = asim.compile(g, strategy, "H100"), workload_inputs(g, 0)
    taken = []
    real = KeptGeometries.get

    def spy(self, key):
        taken.append(real(self, key))
        return taken[-1]
    with mock.patch.object(KeptGeometries, "get", spy):
        kept = record(asim.simulate(plan, x))
    with mock.patch.object(KeptGeometries, "get", lambda self, key: None):
        own = record(asim.simulate(plan, x))
    assert kept == own
    assert any(t is not None for t in taken), "no kernel took a kept geometry: the comparison would be vacuous"


def _geometry(rows: int, cols: int) -> Geometry:
    return Geometry(ThreadMapping("rows", (rows, cols), ((0,), (1,)), block=32, grid=rows, threads_per_row=32),
                    dense=True)


def test_what_is_kept_stays_in_the_budget():
    """A geometry holding more than the budget is not kept; past the budget together, the longest kept goes
    first; a kept geometry that cached more since is measured again when its kernel ends."""
    small, other, big = _geometry(4, 64), _geometry(8, 64), _geometry(64, 1024)
    assert 0 < held_bytes(small) < held_bytes(other) < held_bytes(big)
    kept = KeptGeometries(budget=held_bytes(small) + held_bytes(other))
    kept.keep({"small": small, "big": big})
    assert kept.get("small") is small and kept.get("big") is None
    kept.keep({"other": other})
    assert kept.get("small") is small and kept.get("other") is other and kept.total <= kept.budget
    small.__dict__["_cache"]["W"] = np.zeros(held_bytes(other), dtype=np.uint8)     # small grows past the room left
    kept.keep({"small": small})
    assert kept.get("other") is None and kept.get("small") is small, "the longest kept goes first"
    assert kept.total == held_bytes(small) <= kept.budget


def test_a_trace_run_keeps_its_own_dense_geometries():
    """``trace=True`` makes every geometry dense; a kept one is a dense one of the same run (the cache lives one
    simulation), and the traced run still counts what the untraced one does."""
    g = asim.workload("softmax", rows=4, cols=256)
    plan, x = asim.compile(g, "xla", "H100"), workload_inputs(g, 0)
    made = []
    real = executor.KernelRun.geometry

    def spy(self, m):
        made.append(real(self, m))
        return made[-1]
    with mock.patch.object(executor.KernelRun, "geometry", spy):
        traced = asim.simulate(plan, x, trace=True)
    assert made and not any(geom.separable or geom.flat for geom in made)
    plain = asim.simulate(plan, x)
    assert [k.stages for k in traced.stats.kernels] == [k.stages for k in plain.stats.kernels]


def test_held_bytes_counts_each_array_once_through_containers():
    """Views count the array they view, once; arrays inside tuples, lists, dicts, dataclasses and geometries
    count; an object that measures itself is believed; numbers and strings weigh nothing."""
    @dataclasses.dataclass
    class Form:
        a: np.ndarray
        n: int

    base = np.zeros(1000, dtype=np.int64)                 # 8000 bytes
    other = np.zeros(10, dtype=np.float32)                # 40 bytes
    counts = KeptCounts()
    counts.nbytes = 123
    nested = {"views": (base[:10], base.reshape(10, 100)[3]), "form": Form(other, 7), "more": [base, 1, 2.5, "s", None],
              "counts": counts}
    assert held_bytes(nested) == 8000 + 40 + 123
    geom = _geometry(4, 64)
    alone = held_bytes(geom)
    geom.__dict__["_cache"]["extra"] = [other, other[2:]]
    assert held_bytes(geom) == alone + 40


def test_only_a_mapping_a_later_kernel_runs_is_kept_and_weighed():
    """xla's softmax runs two row kernels of one mapping, then a flat one: the row geometry is kept after the
    first kernel only (the second takes it), nothing after the last; a one-kernel plan weighs nothing."""
    g = asim.workload("softmax", rows=64, cols=3000)
    x = workload_inputs(g, 0)
    xla, stitched = asim.compile(g, "xla", "H100"), asim.compile(g, "astitch", "H100")
    keys = [{mapping_key(s.mapping) for s in k.stages} for k in xla.kernels]
    assert keys[0] == keys[1] and keys[1].isdisjoint(keys[2]), "the premise: two row kernels, then another mapping"
    after = needed_after(xla.kernels)
    assert after[0] == keys[1] | keys[2] and after[1] == keys[2] and after[2] == frozenset()
    weighed = []
    real = kept_geometries.held_bytes

    def spy(obj):
        weighed.append(obj)
        return real(obj)
    with mock.patch.object(kept_geometries, "held_bytes", spy):
        asim.simulate(xla, x)
        assert len(weighed) == 1 and isinstance(weighed[0], Geometry) and weighed[0].mapping.kind == "rows"
        asim.simulate(stitched, x)
        assert len(weighed) == 1
    kept = KeptGeometries()
    kept.keep({"a": _geometry(4, 64), "b": _geometry(8, 64)}, wanted={"a"})
    assert kept.get("a") is not None and kept.get("b") is None
    kept.keep({}, wanted=set())
    assert kept.get("a") is None and kept.total == 0
