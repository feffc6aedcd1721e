"""The SIMT model's big-domain paths (issue 26) change host memory only: never a counter or a value.

Past a threshold the model works in blocks instead of over a stage's whole domain at once:

* a reduce folds its input per thread a block of whole tasks at a time (``reduce.lay_out_chunks``,
  ``reduce.LAYOUT_CHUNK``) and as soon as the element loop has it (``reduce.fold``); each such block is folded
  through the cache a smaller block of tasks (or of a task's parts) at a time (``reduce.FOLD_BLOCK_BYTES``);
* an elementwise op writes its result into an operand that dies with it (a temporary of the loop, or a
  global buffer no later kernel reads), a block of rows at a time (``evaluate.in_place``,
  ``evaluate.IN_PLACE_MIN``); the numpy reference does the same (``reference.IN_PLACE_MIN``).

Those thresholds keep small shapes on the one-pass path, so here they are forced down to a few elements
and every counter (each stage's, each kernel's, the per-tensor traffic, the timeline, ``predicted_us``)
and every output byte must equal the one-pass run's: on the catalog at shapes that exercise each mapping
(flat, rows, columns, split rows with atomics or a grid barrier, vertical packing, epilogues, the shuffle
and the tree), and on random graphs of every dtype.
"""
from __future__ import annotations

import dataclasses
from contextlib import ExitStack, contextmanager
from unittest import mock

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings

import astitch_sim as asim
from astitch_sim.frontends.workloads import workload_inputs
from astitch_sim.ir import reference as ir_reference
from astitch_sim.plan.mapping import ThreadMapping
from astitch_sim.simt import evaluate, executor, geometry as geometry_module, reduce
from astitch_sim.simt.geometry import Geometry
from random_graphs import cases

#: forced thresholds: odd sizes, so blocks never line up with rows, warps or tasks
FORCED = {"LAYOUT_CHUNK": 37, "IN_PLACE_MIN": 0, "IN_PLACE_BLOCK": 53, "FOLD_BLOCK_BYTES": 41}


@contextmanager
def blocked(counts=None):
    """Run the model with its big-domain paths forced on (and, given ``counts``, count how often they ran)."""
    real_in_place, real_chunks = evaluate.in_place, reduce.lay_out_chunks

    def in_place(*a, **k):
        counts["in_place"] += 1
        return real_in_place(*a, **k)

    def chunks(*a, **k):
        n = 0
        for block in real_chunks(*a, **k):
            n += 1
            yield block
        counts["blocks"] = max(counts["blocks"], n)

    with mock.patch.object(reduce, "LAYOUT_CHUNK", FORCED["LAYOUT_CHUNK"]), \
            mock.patch.object(evaluate, "IN_PLACE_MIN", FORCED["IN_PLACE_MIN"]), \
            mock.patch.object(evaluate, "IN_PLACE_BLOCK", FORCED["IN_PLACE_BLOCK"]), \
            mock.patch.object(reduce, "FOLD_BLOCK_BYTES", FORCED["FOLD_BLOCK_BYTES"]):
        if counts is None:
            yield
        else:
            with mock.patch.object(evaluate, "in_place", in_place), mock.patch.object(reduce, "lay_out_chunks", chunks):
                yield


def record(res) -> dict:
    """Everything ``simulate`` reports that a test or a user reads: counters, timeline, outputs (as bytes)."""
    return {"kernels": [dataclasses.asdict(k) for k in res.stats.kernels], "totals": res.stats.as_dict(),
            "predicted_us": res.stats.predicted_us, "timeline": repr(res.timeline),
            "blocks": [dataclasses.astuple(e) for e in res.timeline.entries],
            "outputs": [(o.dtype.str, o.shape, np.ascontiguousarray(o).tobytes()) for o in res.outputs]}


def assert_same(plan, inputs, counts=None, where=""):
    one_pass = record(asim.simulate(plan, inputs))
    with blocked(counts):
        in_blocks = record(asim.simulate(plan, inputs))
    assert len(in_blocks["outputs"]) == len(one_pass["outputs"]) == len(plan.graph.outputs)
    for key in one_pass:
        assert in_blocks[key] == one_pass[key], f"{where} {plan.strategy}: {key} differs in blocks"


#: (workload, shape, gpu, compile options, what the astitch plan shows)
SHAPES = [
    ("log_softmax", dict(rows=64, cols=600), "H100", {}, "rows, shuffle, epilogue"),
    ("log_softmax", dict(rows=64, cols=600), "H100", {"reduce_scheme": "tree"}, "rows, tree"),
    ("cross_entropy", dict(rows=6000, cols=40), "V100", {}, "vertical packing, two reduces in a stage"),
    ("softmax", dict(rows=12, cols=8000), "H100", {"launch_search": False}, "split rows, atomic"),
    ("global_norm", dict(rows=256, cols=256), "H100", {"launch_search": False}, "split rows, atomic"),
    ("batchnorm_train", dict(rows=2048, cols=64), "H100", {}, "columns, split"),
    ("layernorm", dict(rows=256, cols=768), "H100", {}, "separable rows"),
    ("bias_gelu", dict(rows=64, cols=1024), "H100", {}, "flat"),
    ("layernorm_backward", dict(rows=64, cols=768), "H100", {}, "rows and columns"),
    ("adam_step", dict(size=5000), "H100", {}, "flat, exact ops"),
]


@pytest.mark.parametrize("strategy", asim.STRATEGIES)
@pytest.mark.parametrize("name,shape,gpu,opts,what", SHAPES, ids=[f"{s[0]}-{s[4]}" for s in SHAPES])
def test_blocked_paths_change_no_counter_and_no_value(name, shape, gpu, opts, what, strategy):
    g = asim.workload(name, **shape)
    counts = {"in_place": 0, "blocks": 0}
    options = opts if strategy == "astitch" or "reduce_scheme" in opts else {}
    plan = asim.compile(g, strategy, gpu, **options)
    # column reductions fold across their tasks without a layout (tested below); this test is the layout's blocks'
    with mock.patch.object(reduce, "fold_across_tasks", lambda *a: None):
        assert_same(plan, workload_inputs(g, 0), counts, f"{name} {shape}")
    if any(s.reduces and _blocks_of_tasks(s.mapping) for k in plan.generated for s in k.stages):
        assert counts["blocks"] > 1, "no reduce was folded in blocks: the test would pass vacuously"


#: rows whose lanes take vectors in turn (DIEN's 8 lanes per row, full warps), rows they tile raggedly (600 over
#: 128-element trips, a split row of 8000 over 32768) and a plan with no vectors
DEALT = [("softmax", dict(rows=2001, cols=32), {}), ("log_softmax", dict(rows=64, cols=600), {}),
         ("softmax", dict(rows=12, cols=8000), {"launch_search": False}), ("cross_entropy", dict(rows=300, cols=96), {}),
         ("layernorm", dict(rows=64, cols=768), {})]


def on_and_off(plan, ins, module, *watched: str) -> list:
    """``plan`` simulated with a shortcut on, and off (``module.<watched>``, the shortcut's tests -- one, or the
    several that take it on different paths -- answering no: None, which every such test answers for "not
    here"): every counter, the timeline and every output byte equal.  Returns what the tests answered when on,
    call by call."""
    answers = []

    def spy(real):
        def asked(*a):
            answers.append(real(*a))
            return answers[-1]
        return asked
    with ExitStack() as on_stack:
        for name in watched:
            on_stack.enter_context(mock.patch.object(module, name, spy(getattr(module, name))))
        on = record(asim.simulate(plan, ins))
    with ExitStack() as off_stack:
        for name in watched:
            off_stack.enter_context(mock.patch.object(module, name, lambda *a: None))
        off = record(asim.simulate(plan, ins))
    assert len(on["outputs"]) == len(plan.graph.outputs)
    assert on == off
    return answers


@pytest.mark.parametrize("strategy", asim.STRATEGIES)
@pytest.mark.parametrize("name,shape,opts", DEALT, ids=[f"{n}-{s['rows']}x{s['cols']}" for n, s, _ in DEALT])
def test_folding_dealt_vectors_through_a_view_changes_no_counter_and_no_value(name, shape, opts, strategy):
    """A row's vectors dealt to its lanes are folded through a strided view of the row (``reduce.dealt_vectors``)
    instead of a gathered copy -- padded with the identity where the vectors leave the lanes' last trip part empty
    (a ragged row: 600 columns are 150 vectors over 32 lanes) -- every counter and output byte equal, and the view is
    really taken, holes or none."""
    g = asim.workload(name, **shape)
    plan = asim.compile(g, strategy, "H100", **(opts if strategy == "astitch" else {}))
    # (a split row's dealt parts are found from one part's positions: ``reduce.dealt_split_row``)
    taken = on_and_off(plan, workload_inputs(g, 0), reduce, "dealt_vectors", "dealt_split_row")
    dealt = [s for k in plan.generated for s in k.stages if s.reduces and s.mapping.kind == "rows"
             and s.mapping.vector > 1]
    # (a domain below the separable size is laid out densely, no row view: unfused cross-entropy's one stage with
    # vectors is its 300-element loss sum; its [300, 96] rows are scalar, and the view is asked for and refused)
    dealt = [s for s in dealt if s.mapping.size >= geometry_module.SEPARABLE_MIN]
    assert taken and any(t is not None for t in taken) == bool(dealt), (dealt, taken)
    holes = [t for t in taken if t is not None and t[0] * t[1] * t[2] > t[3]]
    ragged = [s for s in dealt if s.mapping.domain[-1] % (s.mapping.splits * s.mapping.threads_per_row * s.mapping.vector)]
    assert bool(holes) == bool(ragged), (ragged, taken)


@pytest.mark.parametrize("cols", [7996, 7900])
def test_a_ragged_split_row_pads_its_view_with_the_identity(cols):
    """Rows split 8 ways into parts of 1000 (988) columns, the last part shorter (996, 984), each part's 250
    vectors over 1024 lanes: the row view is padded where the lanes' trip has no element, with the reduce's
    identity (``-inf`` for the row max: the inputs are all negative, so a pad of 0 would win) -- every counter
    and output byte as the gathered layout gives them."""
    g = asim.workload("softmax", rows=12, cols=cols)
    plan = asim.compile(g, "astitch", "H100", launch_search=False)
    ins = [-np.abs(x) - 1 for x in workload_inputs(g, 0)]
    taken = on_and_off(plan, ins, reduce, "dealt_vectors", "dealt_split_row")
    splits = {s.mapping.splits for k in plan.generated for s in k.stages if s.reduces}
    assert splits == {8} and taken and all(t is not None and t[3] * 8 > cols for t in taken), (splits, taken)


@pytest.mark.parametrize("gpu", ["H100", "V100"])
def test_shared_reads_through_a_table_of_split_blocks_change_no_counter_and_no_value(gpu):
    """A stitched batch norm reads its per-column statistics from shared memory at every row.  Its block id is a
    column part plus a row part (the split block a row falls in), so the slots are read through a table of the
    few split blocks (``executor.gather_shared``), not through one index pair per element: every counter and
    output byte equal with the split withheld (``Geometry.block_split`` answering None), and the table really
    made (its distinct split blocks listed).  Every block holds the same statistics here, so the table's values are
    held to their definition on random shared memory by the test below."""
    g = asim.workload("batchnorm_train", rows=4096, cols=64)
    plan = asim.compile(g, "astitch", gpu)
    tables = []
    real = executor.distinct
    with mock.patch.object(executor, "distinct", lambda a: tables.append(real(a)) or tables[-1]):
        answers = on_and_off(plan, workload_inputs(g, 0), Geometry, "block_split")
    assert any(a is not None for a in answers)
    assert tables and all(1 < t.size < 4096 for t in tables), [t.size for t in tables]


@pytest.mark.parametrize("kind,domain,groups,grid", [
    ("rows", (8, 4096), ((0,), (1,)), 32),                # tasks before the reduced dim
    ("rows", (4096, 8), ((1,), (0,)), 32),                # tasks after it (a strided row)
    ("columns", (4096, 64), ((), (0,), (1,)), 8),         # column tasks
    ("rows", (8, 1, 4096), ((0, 1), (2,)), 32)])          # a dim nothing varies along
def test_gather_shared_reads_each_elements_block_and_slot(kind, domain, groups, grid):
    """``gather_shared`` against its definition ``view[block, slot]`` on mappings split over 4 blocks whose task dims
    come before, after or around the reduced ones, a slot per task: the same values, shaped alike."""
    m = ThreadMapping(kind, domain, groups, block=256, grid=grid, threads_per_row=32 if kind == "columns" else 256,
                      splits=4, combine="atomic")
    m.check()
    with mock.patch.object(geometry_module, "SEPARABLE_MIN", 1):
        geom = Geometry(m)
    assert geom.block_split() is not None, "not separable: the table is not exercised"
    view = np.random.default_rng(0).standard_normal((m.grid, 64)).astype(np.float32)
    slot = m.task_of(np.arange(geom.size)).reshape(geom.shape) % 64
    for k in groups[1]:                                  # a per-task value: its slot varies over the task dims only
        slot = slot.take([0], axis=k)
    got, want = executor.gather_shared(view, geom, slot), view[geom.block, slot]
    assert got.shape == want.shape and np.array_equal(got, want)


#: column reductions: plain, split over blocks, Inductor's [blocks, rows, columns] view, beside row reductions
ACROSS = [("column_reduce", dict(rows=4096, cols=384)), ("batchnorm_train", dict(rows=2048, cols=64)),
          ("layernorm_backward", dict(rows=256, cols=768))]


@pytest.mark.parametrize("strategy", asim.STRATEGIES)
@pytest.mark.parametrize("name,shape", ACROSS, ids=[f"{n}-{s['rows']}x{s['cols']}" for n, s in ACROSS])
def test_folding_column_reductions_across_their_tasks_changes_no_counter_and_no_value(name, shape, strategy):
    """A reduction whose tasks run along the input's innermost dims folds whole rows of tasks per iteration
    (``reduce.fold_across_tasks``) instead of through a transposed layout: every counter and output byte equal,
    and the shortcut is taken under every strategy (each plan has a column reduction over the input itself)."""
    g = asim.workload(name, **shape)
    taken = on_and_off(asim.compile(g, strategy, "H100"), workload_inputs(g, 0), reduce, "fold_across_tasks")
    assert any(t is not None for t in taken), taken


@pytest.mark.parametrize("strategy", asim.STRATEGIES)
def test_reading_a_reshaped_tensor_in_order_changes_no_counter_and_no_value(strategy):
    """A stage whose domain is a tensor reshaped (Inductor's ``[blocks, rows, columns]`` view of a column sum, a
    group norm's 5-D view of x, a PyTorch group norm's affine over ``[N, C, H, W]`` in a stage over ``[N, G, rest]``)
    reads the tensor at its own index reshaped: where a root of the tensor's shape made that index
    (``Evaluator.own_index``), ``Evaluator.is_identity`` knows it and the tensor is taken as it is; where a
    reshape read in order handed the index to its operand, ``Evaluator.walks_in_order`` knows it; otherwise
    ``flatindex.walks_in_order`` finds the same from the index arrays; without any, the read is a gather
    through the index.  Every counter, the timeline and every output byte are the same four ways, and each
    shortcut is really taken."""
    from pathlib import Path

    from anchor import TESTS_FILE
    from test_data_reuse import group_norm_nchw
    hlo = (Path(TESTS_FILE).parent / "fixtures" / "hlo" / "groupnorm.hlo").read_text()
    real, own, handed, in_order = evaluate.Evaluator.is_identity, [], [], []

    def spy(ev, idx, node):                      # the own index of a tensor of another shape than the domain
        got = real(ev, idx, node)
        own.append(got and ev.geom.kind == "element" and tuple(node.shape) != tuple(ev.geom.shape))
        return got

    def same_shape_only(ev, idx, node):
        return (ev.geom.kind != "element" or tuple(node.shape) == tuple(ev.geom.shape)) and real(ev, idx, node)
    for g in (asim.workload("column_reduce", rows=4096, cols=384), asim.from_hlo(hlo),
              group_norm_nchw(n=2, c=64, h=16, w=16, groups=8), _centred_times_x()):
        plan, ins = asim.compile(g, strategy, "H100"), workload_inputs(g, 0)
        with mock.patch.object(evaluate.Evaluator, "is_identity", spy):
            first = record(asim.simulate(plan, ins))
        with mock.patch.object(evaluate.Evaluator, "is_identity", same_shape_only):
            handed += on_and_off(plan, ins, evaluate.Evaluator, "walks_in_order")
            assert record(asim.simulate(plan, ins)) == first
            with mock.patch.object(evaluate.Evaluator, "walks_in_order", lambda *a: False):
                in_order += on_and_off(plan, ins, executor, "walks_in_order")
                assert record(asim.simulate(plan, ins)) == first
    assert any(handed), "no reshape handed its in-order index to its operand: the comparison would be vacuous"
    assert any(in_order), "no read took the reshaped memory: the comparison would be vacuous"
    assert any(own) == (strategy == "astitch"), "astitch's last stage reads x at its own index reshaped"


def _centred_times_x():
    """``x`` less its group maxima over a ``[2, 4, 128]`` view, reshaped back and times ``x`` itself: astitch's last
    stage runs over the view and reads ``x`` (``[2, 8, 8, 8]``) at its own index reshaped."""
    g = asim.Graph("centred_times_x")
    x = g.parameter("x", (2, 8, 8, 8))
    v = g.reshape(x, (2, 4, 128), name="v")
    r = g.reduce(v, (2,), reducer="max", name="r")
    c = g.subtract(v, g.broadcast(r, (2, 4, 128), (0, 1), name="rb"), name="c")
    g.set_outputs(g.multiply(g.reshape(c, x.shape, name="back"), x, name="out"))
    return g


def _blocks_of_tasks(mapping) -> bool:
    """Can this stage's reduces fold in blocks (a separable domain whose first task dim has several rows)?"""
    geom = Geometry(mapping)
    return geom.separable and bool(geom.parts[0]) and geom.shape[geom.parts[0][0]] > 1


def test_the_forced_paths_run_in_place_and_in_blocks():
    """Non-vacuous: xla's log-softmax writes exp(x - max) into x - max, unfused writes its last kernel's
    output into the dead buffer ``shifted`` (astitch keeps x - max in registers for its last stage: nothing to
    overwrite), and all fold their reduces in blocks."""
    g = asim.workload("log_softmax", rows=64, cols=600)
    for strategy, in_place in (("xla", True), ("unfused", True), ("astitch", False)):
        counts = {"in_place": 0, "blocks": 0}
        assert_same(asim.compile(g, strategy, "H100"), workload_inputs(g, 0), counts, "log_softmax")
        assert (counts["in_place"] > 0) == in_place and counts["blocks"] > 1, (strategy, counts)


def test_the_grid_barrier_split_in_blocks():
    from test_simt_executor import split_prod_graph
    g, x = split_prod_graph(4, 16384, 1e-4)
    plan = asim.compile(g, "astitch", "H100", never_behind=False, launch_search=False)
    assert plan.kernels[0].stages[0].mapping.combine == "grid_barrier"
    counts = {"in_place": 0, "blocks": 0}
    assert_same(plan, x, counts, "split prod")
    assert counts["blocks"] > 1


PROPERTY = settings(deadline=None, max_examples=25, suppress_health_check=[
    HealthCheck.too_slow, HealthCheck.data_too_large, HealthCheck.filter_too_much])


@PROPERTY
@given(case=cases("mixed", max_ops=6))
def test_random_graphs_in_blocks(case):
    for strategy in asim.STRATEGIES:
        assert_same(asim.compile(case.graph, strategy, "H100"), case.inputs, where=case.note)


@settings(PROPERTY, max_examples=12)      # each example plans and simulates six strategies twice (~0.6 s)
@given(case=cases("shared", max_ops=5))
def test_random_graphs_sharing_producers_across_reductions_in_blocks(case):
    for strategy in asim.STRATEGIES:
        assert_same(asim.compile(case.graph, strategy, "H100"), case.inputs, where=case.note)


@pytest.mark.slow
@settings(PROPERTY, max_examples=10)
@given(case=cases("long_rows", max_ops=4))
def test_random_graphs_with_long_rows_in_blocks(case):
    for strategy in asim.STRATEGIES:
        assert_same(asim.compile(case.graph, strategy, "H100"), case.inputs, where=case.note)



@contextmanager
def reference_in_place():
    """The numpy reference with its in-place path forced on (``reference.IN_PLACE_MIN``), counting its uses."""
    counts = {"in_place": 0}
    real = ir_reference.compute_into

    def compute_into(*a, **k):
        counts["in_place"] += 1
        return real(*a, **k)

    with mock.patch.object(ir_reference, "IN_PLACE_MIN", 0), mock.patch.object(ir_reference, "IN_PLACE_BLOCK", 53), \
            mock.patch.object(ir_reference, "compute_into", compute_into):
        yield counts


def assert_reference_same(g, inputs):
    keep = [np.array(x, copy=True) for x in inputs]
    one_pass = asim.reference(g, inputs)
    with reference_in_place() as counts:
        in_blocks = asim.reference(g, inputs)
    for a, b in zip(one_pass, in_blocks, strict=True):
        assert a.dtype == b.dtype and a.shape == b.shape and a.tobytes() == b.tobytes()
    for x, k in zip(inputs, keep, strict=True):               # the caller's arrays are never written
        assert np.asarray(x).tobytes() == k.tobytes()
    return counts


@pytest.mark.parametrize("name,shape", [("log_softmax", dict(rows=64, cols=600)),
                                        ("cross_entropy", dict(rows=60, cols=40)), ("bias_gelu", dict(rows=64, cols=99)),
                                        ("adam_step", dict(size=5000)), ("layernorm_backward", dict(rows=32, cols=96))])
def test_the_reference_in_place_changes_no_value(name, shape):
    g = asim.workload(name, **shape)
    counts = assert_reference_same(g, workload_inputs(g, 0))
    if name in ("log_softmax", "cross_entropy"):
        assert counts["in_place"] > 0          # exp(shifted) is written into shifted


@PROPERTY
@given(case=cases("mixed", max_ops=8))
def test_the_reference_in_place_on_random_graphs(case):
    assert_reference_same(case.graph, case.inputs)


@pytest.mark.parametrize("strategy", ["inductor", "astitch"])
@pytest.mark.parametrize("name,shape,opts", [("softmax", dict(rows=2001, cols=32), {}),
                                             ("global_norm", dict(rows=256, cols=256), {"launch_search": False}),
                                             ("softmax", dict(rows=12, cols=8000), {"launch_search": False})],
                         ids=["dealt rows", "one split row", "ragged split rows"])
def test_folding_through_the_cache_in_blocks_changes_no_counter_and_no_value(name, shape, opts, strategy):
    """A thread's fold in blocks of tasks (DIEN's rows dealt 4-element vectors) or, for one task, of the blocks
    its row is split over (``reduce.FOLD_BLOCK_BYTES`` forced to 41 bytes: a handful of threads per block): the
    same counters and output bytes as folding the whole layout at once, and really in several blocks."""
    g = asim.workload(name, **shape)
    plan = asim.compile(g, strategy, "H100", **(opts if strategy == "astitch" else {}))
    with mock.patch.object(reduce, "fold_across_tasks", lambda *a: None):
        one_pass = record(asim.simulate(plan, workload_inputs(g, 0)))
        folds = []
        with mock.patch.object(reduce, "FOLD_BLOCK_BYTES", FORCED["FOLD_BLOCK_BYTES"]), \
                mock.patch.object(reduce, "fold_steps", lambda *a, real=reduce.fold_steps: folds.append(1) or real(*a)):
            in_blocks = record(asim.simulate(plan, workload_inputs(g, 0)))
    assert in_blocks == one_pass
    layouts = sum(1 for k in plan.generated for s in k.stages for _ in s.reduces)
    assert len(folds) > layouts, f"{len(folds)} folds for {layouts} reduces: none was folded in blocks"


def test_tasks_no_block_reaches_fold_the_identity():
    """A separable domain's blocks reach every task, but the fold does not rely on it: were a block of tasks
    missing (here dropped on purpose), those tasks' threads hold the identity -- a row sum of 0 -- and every
    other task's result is the one the whole run gives."""
    g = asim.workload("row_reduce", rows=300, cols=64)
    plan = asim.compile(g, "xla", "H100")
    x = workload_inputs(g, 0)
    with mock.patch.object(reduce, "LAYOUT_CHUNK", 1000):
        whole = asim.simulate(plan, x).outputs[0]
        real, dropped = reduce.lay_out_chunks, []

        def without_the_second(*a, **k):
            for n, (rows, dense) in enumerate(real(*a, **k)):
                if n == 1:
                    dropped.append(rows)
                    continue
                yield rows, dense
        with mock.patch.object(reduce, "lay_out_chunks", without_the_second):
            partial = asim.simulate(plan, x).outputs[0]
    (rows,) = dropped
    missed = np.zeros(whole.shape[0], dtype=bool)
    missed[rows] = True
    assert 0 < missed.sum() < missed.size
    assert (partial[missed] == 0).all() and (whole[missed] != 0).all()
    assert np.array_equal(partial[~missed], whole[~missed])
