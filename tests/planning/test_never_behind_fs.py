"""Never behind FusionStitching (issue 28): astitch is predicted no slower than fusionstitching on the cost model's
own terms -- every kernel FusionStitching draws, AStitch can draw too (same stages and schemes, no grid barrier).

Before the launch search (``strategies/astitch_launch.py``) astitch lost on small scopes: its 1024-thread blocks,
its task splitting over blocks with a memset and grid barriers (cumsum_positions on H100: 19.3 us against 14.7),
and its grid barriers where a kernel boundary is cheaper (hlo/bool_ops).  Now every stitched kernel's launch is
priced -- the paper's, other block sizes, no split, the scope cut at its grid barriers -- and the fastest kept.

Checked on the SIMT model (``asim.simulate``) with each fixture's own inputs: every HLO fixture
(tests/fixtures/{hlo,ops,models}), every StableHLO family fixture, and the catalog at test sizes, on V100, A100 and
H100; the catalog at paper sizes (slow: on H100 every workload, in tests/test_real_sizes.py on its runs; on V100 and
A100 the cheap ones here).  A model fixture's H100 comparison runs in tests/frontends/test_models.py, on its
every-strategy runs.  :data:`KNOWN_BEHIND` lists what is still behind, each with its reason,
and the reason is checked too: a case that falls further behind, or for another reason, fails.
"""
from __future__ import annotations

import re
from pathlib import Path

import pytest

import astitch_sim as asim
from astitch_sim.frontends import seeded
from astitch_sim.plan.vocabulary import Space
from astitch_sim.planning.strategies.astitch_launch import CUT_BYTE_SLACK
from astitch_sim.frontends.workloads import WORKLOADS, workload_inputs
from anchor import TESTS_FILE
from test_never_behind import PAPER_CHEAP, TIME_SLACK, fixture_matrix, hlo_fixtures, load_fixture
from test_workloads import SMALL

FIXTURES = Path(TESTS_FILE).parent / "fixtures"
GPUS = ("V100", "A100", "H100")


def _bytes_trade(ratio=1.03):
    """fusionstitching's faster plan moves more global bytes than astitch's (it re-reads an input its stages
    could share); astitch's stitcher keeps the plan with fewer bytes, within ``ratio`` of fusionstitching's time
    (3% where first recorded; per-row values kept in registers after a shuffle, issue 27, made
    fusionstitching's re-reading plans cheaper: the larger ratios below are what was measured then).  The search
    inside the scope (``strategies/astitch_cuts.py``) does not reach it: fusionstitching's plan is the same one
    kernel, re-reading the input in a later stage where astitch's keeps it in registers, not a cut."""
    def check(where, stats, plans):
        a, f = stats["astitch"], stats["fusionstitching"]
        assert a.global_bytes < f.global_bytes, where
        assert a.predicted_us <= ratio * f.predicted_us, \
            f"{where}: astitch {a.predicted_us / f.predicted_us:.3f}x fusionstitching's time, recorded {ratio}x"
    check.__doc__ = _bytes_trade.__doc__
    return check


def _stages_reload_an_input(where, stats, plans):
    """astitch's stitched kernel has no grid barrier, but never-behind refuses it for its global bytes: its
    stages map the same input differently (a flat stage for the elementwise outputs, row stages for the
    reductions), and each stage loads the input again, more bytes than XLA's kernels move.  The raw kernel is
    also a little slower than fusionstitching's (at most 1.08x; it was within TIME_SLACK until the cost model
    stopped counting idle warps as loads in flight): one busy warp, whose three row stages each reload the
    input and store in turn.  Since the search inside the scope (``strategies/astitch_cuts.py``) never-behind
    takes the scope cut into two kernels instead of XLA's four (about 1.5x fusionstitching's time, from 2.5x),
    but a cut still loads the input in each kernel.  Left for issue 28: stages reading one tensor under
    compatible mappings should share the load (then the one stitched kernel is admitted)."""
    notes = plans["astitch"].notes
    assert any("cut before" in n and "chosen" in n and "more global bytes" in n for n in notes), where
    k = next(k for k in plans["raw"].generated if len(k.stages) > 1)
    assert not k.global_barriers, where
    g = plans["raw"].graph
    kst = next(ks for ks in stats["raw"].kernels if ks.name == k.name)
    assert kst.global_bytes_read >= 2 * sum(g[n].nbytes for n in k.inputs), where
    assert stats["raw"].global_bytes > stats["astitch"].global_bytes, where
    raw = stats["raw"].predicted_us / stats["fusionstitching"].predicted_us
    assert raw <= 1.08, f"{where}: the raw stitched kernel {raw:.3f}x fusionstitching's time, recorded 1.08x"
    got = stats["astitch"].predicted_us / stats["fusionstitching"].predicted_us
    assert got <= 1.50, f"{where}: astitch {got:.3f}x fusionstitching's time, recorded 1.50x (measured 1.48-1.49x)"


def _faster_launch_refused_for_bytes(where, stats, plans):
    """astitch's launch search priced a faster launch of its stitched kernel but refused it: a smaller block
    re-reads the row's broadcast operands (a layer norm's scale and bias) once per block, more global bytes than
    the paper's launch and XLA's kernels move, which never-behind does not allow; fusionstitching, with no byte
    rule, takes such a launch."""
    notes = [n for k in plans["astitch"].generated for n in k.notes if n.startswith("launch search: chose")]
    assert any("refused for more global bytes" in n for n in notes), where
    assert stats["fusionstitching"].global_bytes > stats["astitch"].global_bytes, where


def _loop_kernels_keep_xlas_launch(where, stats, plans):
    """Nothing stitched: astitch's plan is loop kernels (one stage, no reduce, no grid barrier), each launched as
    XLA launches it, with XLA's code -- fairness (tests/planning/test_fairness.py): a flat graph is the same kernel
    under xla and astitch, so any ratio between them is stitching's.  fusionstitching's own launch search (its
    design) picks another grid for the same code and is faster by that alone."""
    launches = _xla_launches(plans["astitch"])
    assert all((k.grid, k.block, k.registers_per_thread) in launches for k in plans["astitch"].generated), where
    assert any("fastest of" in n for k in plans["fusionstitching"].generated for n in k.notes), where


def _loop_kernel_launches(where, stats, plans):
    """The gap lies in kernels astitch does not stitch: loop kernels (one stage, no reduce, no grid barrier), which
    astitch launches as XLA launches them (fairness: the same kernel gets the same code and launch under xla and
    astitch), where fusionstitching's own launch search (its design) prices other block sizes for the same
    kernel (a transpose of gqa_attention: 28.0 us at XLA's 1024 x 256 against 19.7 at 256 x 1024).  Checked:
    those kernels have XLA's launches, and with each taking the faster of its own time and fusionstitching's for
    the kernel with the same outputs, astitch's plan is no slower than fusionstitching's."""
    _with_their_launches(where, stats, plans, warp_per_row=False)


def _loop_and_warp_per_row_launches(where, stats, plans):
    """:func:`_loop_kernel_launches`, and a stitched softmax that fusionstitching launches a warp per row (32-thread
    blocks, its three passes over each row re-read from the SM's L1), a launch astitch's search does not price
    (``astitch_launch.BLOCK_CHOICES``: 128 to 1024 threads, the paper's adaptive mapping): gqa_attention on H100,
    16.8 against astitch's 20.1 us since the L1 serves the re-reads (simt/l2.py).  Checked: the loop kernels
    have XLA's launches; the stitched kernel fusionstitching launches with smaller blocks than any astitch
    prices; with those kernels at fusionstitching's time, astitch's plan is no slower than fusionstitching's."""
    _with_their_launches(where, stats, plans, warp_per_row=True)


def _with_their_launches(where, stats, plans, warp_per_row: bool):
    """The check of :func:`_loop_kernel_launches` (``warp_per_row``: and of :func:`_loop_and_warp_per_row_launches`):
    astitch's loop kernels have XLA's launches, and with each taking the faster of its own time and
    fusionstitching's kernel with the same outputs (and, with ``warp_per_row``, a stitched kernel taking
    fusionstitching's time where fusionstitching launches it with smaller blocks than any astitch prices),
    astitch's plan is no slower than fusionstitching's."""
    from astitch_sim.planning.strategies.astitch_launch import BLOCK_CHOICES
    launches = _xla_launches(plans["astitch"])
    theirs = {frozenset(k.outputs): (k, ks.predicted_us)
              for k, ks in zip(plans["fusionstitching"].kernels, stats["fusionstitching"].kernels, strict=True)}
    total, loops, small = 0.0, 0, 0
    for k, ks in zip(plans["astitch"].kernels, stats["astitch"].kernels, strict=True):
        us = ks.predicted_us
        if k.kind != "library" and _is_loop_kernel(k):
            assert (k.grid, k.block, k.registers_per_thread) in launches, f"{where}: {k.name} is not XLA's launch"
            other = theirs.get(frozenset(k.outputs))
            us, loops = min(us, other[1]) if other else us, loops + 1
        elif warp_per_row and k.kind != "library":
            # a stitched kernel: fusionstitching's kernel ending at the same output (one may write more outputs)
            root = k.name.split(":")[-1]
            other = next(((fk, fus) for outs, (fk, fus) in theirs.items() if root in outs), None)
            if other is not None and other[0].block < min(BLOCK_CHOICES) and other[1] < us:
                us, small = other[1], small + 1
        total += us
    assert loops, f"{where}: no loop kernel to explain the gap"
    assert small or not warp_per_row, f"{where}: no warp-per-row kernel to explain the gap"
    assert total <= stats["fusionstitching"].predicted_us * TIME_SLACK, \
        f"{where}: {total:.2f} us with fusionstitching's launches, fusionstitching {stats['fusionstitching'].predicted_us:.2f}"


def keepdims_stages(plan) -> list:
    """``(kernel, stage, domain, Global values)`` of each flat stage over a reduce result with unit dims added
    (``[rows, 1]`` beside a ``[rows]`` reduce of the same kernel) that stores values to global memory."""
    out = []
    for k in plan.generated:
        reduced = {tuple(plan.graph[r].shape) for s in k.stages for r in s.reduces}
        for i, s in enumerate(k.stages):
            dom = tuple(s.mapping.domain)
            if s.mapping.kind == "flat" and 1 in dom and tuple(d for d in dom if d != 1) in reduced:
                stored = [n for n, v in k.values.items() if v.stage == i and v.space == Space.GLOBAL]
                if stored:
                    out.append((k.name, i, dom, stored))
    return out


def _is_loop_kernel(k) -> bool:
    """One stage, no reduce, no grid barrier: nothing stitched."""
    return len(k.stages) == 1 and not k.stages[0].reduces and not k.global_barriers


def _all_loop_kernels(plan) -> bool:
    return all(_is_loop_kernel(k) for k in plan.generated)


def _xla_launches(plan) -> set:
    """``(grid, block, registers)`` of every generated kernel of XLA's plan of ``plan``'s graph on its GPU."""
    xla = asim.compile(plan.graph, "xla", plan.gpu.name)
    return {(k.grid, k.block, k.registers_per_thread) for k in xla.generated}


def small_case(name: str) -> str:
    """How a catalog workload at its test size is named in the comparisons (and in KNOWN_BEHIND)."""
    return f"{name} {SMALL[name]}"


def paper_case(name: str) -> str:
    """How a catalog workload at its paper size is named in the comparisons (and in KNOWN_BEHIND)."""
    return f"{name} at its default (paper) size"


#: cases astitch is still predicted behind fusionstitching on (beyond TIME_SLACK), keyed (case, gpu) -> the check of
#: the recorded reason
KNOWN_BEHIND = {
    # hlo/layernorm (every GPU) was here, a faster launch refused for bytes, until a stage's reads the SM's L1
    # serves stopped counting as bytes in flight (simt/cost.warp_bytes_in_flight): fusionstitching's last pass
    # re-reads its row only to store beside it, and its stores wait on DRAM as astitch's do
    # back since a block's re-read of its earlier stage's row comes from its SM's L1 (simt/l2.py): the faster
    # 32-thread launch fusionstitching takes, refused to astitch for re-reading gamma and beta once per block,
    # now costs less than the re-reads of the row it also does (72.88 against 70.79 us)
    ("models/flax_layernorm_16k", "A100"): _faster_launch_refused_for_bytes,
    # models/flax_layernorm_16k on A100 was here (a faster launch refused for bytes) until the cost model served a
    # stage's re-reads of gamma and beta from the L1 (simt/l2.py): its stitched kernel is no longer behind
    # measured after per-row registers (astitch / fusionstitching predicted us and global bytes): llama_rmsnorm
    # 95.93/81.70 us, 100.7/134.2 MB.  Recovered when a stage storing more than it loads was priced with its
    # stores in flight (simt/cost.py warp_bytes_in_flight; astitch's register-resident last stage had been
    # charged the one-load floor, 4x the time fusionstitching's re-reading stage took to store the same bytes):
    # the Transformer softmax <64,30000> on A100 (was 23.42/23.07 us), hlo/softmax on V100 (8.30/6.97) and A100,
    # softmax_attention_4d, whole_tensor_normalize, rmsnorm and convert_bf16_layernorm on V100
    ("models/llama_rmsnorm", "A100"): _bytes_trade(1.18),
    **{("stablehlo/chlo", gpu): _stages_reload_an_input for gpu in GPUS},
    # the gaps once recorded as not yet explained (astitch / fusionstitching predicted us, now): bool_ops A100
    # 6.63/6.54, transformer_ffn 22.09/21.66, 14.11/13.65, 13.92/13.30, gqa_attention H100 84.00/77.18 (slow tier):
    # loop-kernel launches.  convert_bf16_layernorm A100 (3.61/3.57) recovered when values carried in registers
    # stopped narrowing the row vectors (plan/row_vectors.py: 3.42 us, 8 bf16 lanes as fusionstitching's);
    # bool_ops A100 when the cost model stopped counting idle warps as loads in flight (busy_warps_per_block)
    ("models/gqa_attention", "H100"): _loop_and_warp_per_row_launches,
    # behind since FusionStitching's fused softmax re-reads its rows from the L1 (simt/l2.py): its stitched kernel
    # is level with astitch's (71.71 against 70.98 us) and its loop kernel's own launch is faster (20.1 against
    # XLA's 27.5 us)
    ("models/dot_product_attention", "V100"): _loop_kernel_launches,
    # models/xent_integer_labels on H100 was here (a one-wave kernel whose grid barrier was not cut, 49.95 against
    # fusionstitching's 40.39 us; on A100 too once one stage's exp hid behind another's loads, cost.py
    # cross_stage_overlap) until the launch search's cut at the barriers was allowed the sectors its launch shapes
    # leave partly used (astitch_launch.CUT_BYTE_SLACK): the cut, 1.6x faster by the estimate, moved 0.5 KiB (4e-6)
    # more than the barrier
    # behind since idle warps stopped counting as loads in flight (simt/cost.busy_warps_per_block)
    # (astitch / fusionstitching predicted time then: rmsnorm 1.016, 1.014, 1.019; convert_bf16_layernorm 1.016 on
    # V100, 1.025 on H100; transformer_ffn 1.010, 1.017, 1.019, whose A100 and H100 gaps had been its loop-kernel
    # launches; layernorm_backward at its test size 1.014 on V100)
    # (convert_bf16_layernorm on V100 recovered when the static estimate took the L1/L2 model, fs_cost.priced: the
    # launch search priced the row's re-read gamma and beta as the simulation does and chose a faster launch.)
    # All of these recovered when reads served on chip (the SM's L1, the L2) stopped counting as a warp's bytes
    # in flight (simt/cost.warp_bytes_in_flight), as did stablehlo/constants on V100 (a faster launch refused
    # for bytes): hlo/rmsnorm and hlo/transformer_ffn on every GPU, convert_bf16_layernorm on H100,
    # layernorm_backward at its test size on V100
}


def compare(where, g, inputs, gpu, plans=None, stats=None):
    """astitch no slower than fusionstitching on ``gpu``, or known behind with its check.  ``plans`` and
    ``stats`` (per strategy, astitch and fusionstitching among them): runs already made on ``gpu``."""
    if plans is None:
        plans = {s: asim.compile(g, s, gpu) for s in ("astitch", "fusionstitching")}
        stats = {s: asim.simulate(p, inputs).stats for s, p in plans.items()}
    plans, stats = dict(plans), dict(stats)
    a, f = stats["astitch"], stats["fusionstitching"]
    if a.predicted_us <= f.predicted_us * TIME_SLACK:
        assert (where, gpu) not in KNOWN_BEHIND, f"{where} on {gpu} is no longer behind: drop it from KNOWN_BEHIND"
        return
    check = _loop_kernels_keep_xlas_launch if _all_loop_kernels(plans["astitch"]) else KNOWN_BEHIND.get((where, gpu))
    assert check is not None, \
        f"{where} on {gpu}: astitch predicted {a.predicted_us:.2f} us, fusionstitching {f.predicted_us:.2f} us"
    plans["raw"] = asim.compile(g, "astitch", gpu, never_behind=False)
    stats["raw"] = asim.simulate(plans["raw"], inputs).stats
    check(f"{where} on {gpu}", stats, plans)


@pytest.mark.parametrize("sub,name", fixture_matrix())
def test_every_hlo_fixture_is_never_behind_fusionstitching(sub, name):
    """Every fixture on every GPU; a model fixture's H100 comparison runs in tests/frontends/test_models.py
    (:func:`check_model_fixture`), on the runs it makes there under every strategy."""
    g, inputs = load_fixture(sub, name)
    for gpu in GPUS:
        if not (sub == "models" and gpu == "H100"):
            compare(f"{sub}/{name}", g, inputs, gpu)


def check_model_fixture(name: str, g, inputs, plans: dict, stats: dict) -> None:
    """A model fixture on H100, from its plans and SIMT stats under every strategy (tests/frontends/test_models)."""
    compare(f"models/{name}", g, inputs, "H100", plans, stats)


def stablehlo_families():
    return sorted(p.stem for p in (FIXTURES / "stablehlo" / "families").glob("*.mlir") if p.suffixes == [".mlir"])


@pytest.mark.parametrize("name", stablehlo_families())
def test_every_stablehlo_fixture_is_never_behind_fusionstitching(name):
    path = FIXTURES / "stablehlo" / "families" / f"{name}.mlir"
    g = asim.from_stablehlo(path.read_text())
    inputs = seeded.fixture_inputs(path)
    for gpu in GPUS:
        compare(f"stablehlo/{name}", g, inputs, gpu)


@pytest.mark.parametrize("name", list(WORKLOADS))
def test_catalog_at_test_sizes_is_never_behind_fusionstitching(name):
    g = asim.workload(name, **SMALL[name])
    for gpu in GPUS:
        compare(small_case(name), g, workload_inputs(g, 0), gpu)


@pytest.mark.slow
@pytest.mark.parametrize("name", PAPER_CHEAP)
def test_catalog_at_paper_sizes_is_never_behind_fusionstitching(name):
    """On the GPUs other than H100; on H100 every catalog workload at its paper size is compared in
    tests/test_real_sizes.py (:func:`check_paper_size`), on the runs it makes there."""
    g = asim.workload(name)
    for gpu in GPUS:
        if gpu != "H100":
            compare(paper_case(name), g, workload_inputs(g, 0), gpu)


def check_paper_size(name: str, g, inputs, plans: dict, stats: dict) -> None:
    """A catalog workload at its paper size on H100, from its plans and SIMT stats under every strategy."""
    compare(paper_case(name), g, inputs, "H100", plans, stats)


def test_known_behind_cases_exist():
    """Every KNOWN_BEHIND entry names a fixture this file runs (a renamed fixture must not leave a dead entry)."""
    known = {f"{s}/{n}" for s, n in hlo_fixtures()} | {f"stablehlo/{n}" for n in stablehlo_families()} | \
        {paper_case(n) for n in PAPER_CHEAP} | {small_case(n) for n in WORKLOADS}
    assert {case for case, _ in KNOWN_BEHIND} <= known


@pytest.mark.parametrize("gpu", GPUS)
def test_stablehlo_layernorm_per_row_values_are_epilogues_again(gpu):
    """Was 2.25x behind fusionstitching (7.34 against 3.28 us on H100): JAX's StableHLO text computes mean,
    variance and rsqrt over ``[rows, 1]`` (keepdims), which astitch's epilogue merge does not take, so they were
    flat stages storing Global values behind grid barriers.  XLA's canonicalization before planning
    (``passes/unit_dims``: a broadcast adding only unit dims is a reshape, and the reshape sinks below the
    elementwise ops) computes them over ``[rows]``: reduce epilogues, no keepdims stage, no grid barrier."""
    path = FIXTURES / "stablehlo" / "families" / "layernorm.mlir"
    g = asim.from_stablehlo(path.read_text())
    raw = asim.compile(g, "astitch", gpu, never_behind=False)
    assert keepdims_stages(raw) == [] and not any(k.global_barriers for k in raw.kernels), str(raw)
    assert {"divide.3", "rsqrt.9"} <= {n for k in raw.kernels for s in k.stages for n in s.epilogue}, str(raw)
    compare("stablehlo/layernorm", g, seeded.fixture_inputs(path), gpu)
    assert ("stablehlo/layernorm", gpu) not in KNOWN_BEHIND


@pytest.mark.parametrize("name", stablehlo_families())
def test_no_stablehlo_fixture_keeps_a_keepdims_stage(name):
    """No StableHLO family fixture leaves a per-row value over ``[rows, 1]`` as a flat stage storing to global
    memory (``keepdims_stages``), on any GPU."""
    g = asim.from_stablehlo((FIXTURES / "stablehlo" / "families" / f"{name}.mlir").read_text())
    for gpu in GPUS:
        assert keepdims_stages(asim.compile(g, "astitch", gpu, never_behind=False)) == [], (name, gpu)


@pytest.mark.parametrize("gpu", GPUS)
def test_cumsum_positions_no_longer_splits_a_small_softmax_over_grid_barriers(gpu):
    """The case issue 28 named (19.3 us against 14.7 on H100): 16 rows of 4096 split over 64 blocks of 1024
    threads, a memset and two grid barriers.  The launch search prices it without splitting, keeps the faster, and
    the kernel's note lists the paper's launch with its predicted time."""
    g, inputs = load_fixture("models", "cumsum_positions")
    plan = asim.compile(g, "astitch", gpu)
    k = next(k for k in plan.generated if len(k.stages) > 2)
    assert k.global_barriers == 0 and all(s.mapping.splits == 1 for s in k.stages), str(plan)
    note = next(n for n in k.notes if n.startswith("launch search: chose"))
    assert "(paper's rule)" in note and "rows split over" in note
    paper = asim.compile(g, "astitch", gpu, launch_search=False)
    assert any(k.global_barriers == 2 for k in paper.kernels)     # the rule's launch, still what the switch shows
    a = asim.simulate(plan, inputs).stats.predicted_us
    assert a < asim.simulate(paper, inputs).stats.predicted_us
    assert a <= asim.simulate(asim.compile(g, "fusionstitching", gpu), inputs).stats.predicted_us * TIME_SLACK


def test_adam_at_paper_size_on_h100_keeps_xlas_launch_as_every_loop_kernel_does():
    """The Adam step over 1M parameters on H100 is one loop kernel under every strategy.  fusionstitching's launch
    search gives it 256 blocks of 1024 threads (13.3 us); astitch keeps XLA's launch (18.4 us, XLA's exactly): the
    launch search prices only kernels that stitch something, so the astitch-vs-xla ratio of a flat graph stays
    1.00x and every other ratio is stitching's (the merge of issues 27 and 28 had it 1.38x from a grid alone)."""
    g = asim.workload("adam_step")
    inputs = workload_inputs(g, 0)
    us = {s: asim.simulate(asim.compile(g, s, "H100"), inputs).stats.predicted_us
          for s in ("xla", "astitch", "fusionstitching")}
    assert us["astitch"] == pytest.approx(us["xla"], rel=1e-9)
    assert us["fusionstitching"] < us["astitch"] / TIME_SLACK
    compare("adam_step at its default (paper) size", g, inputs, "H100")


@pytest.mark.parametrize("gpu", ["A100", "H100"])
def test_a_cut_at_the_barrier_moving_a_few_bytes_more_than_it_but_fewer_than_xla_is_taken(gpu):
    """models/xent_integer_labels: the stitched kernel's last stage sums every row's loss behind a grid barrier,
    which caps its grid at one wave; cut there, the rows get a block each and the sum a kernel of its own
    (fusionstitching's plan).  The cut's two launch shapes leave other sectors partly used (0.5 KiB more of
    125 MiB): held to the barrier's bytes exactly it was refused, 1.6x faster on H100; within
    ``CUT_BYTE_SLACK`` of them it is taken, and never-behind admits it."""
    g, inputs = load_fixture("models", "xent_integer_labels")
    plan = asim.compile(g, "astitch", gpu)
    assert len(plan.generated) == 2 and not any(k.global_barriers for k in plan.kernels), str(plan)
    (note,) = [n for n in plan.kernels[0].notes if n.startswith("launch search: cut the stitch scope")]
    barrier_kib, cut_kib = (float(x) for x in re.findall(r"([0-9.]+) KiB", note))
    assert barrier_kib < cut_kib <= barrier_kib * (1 + CUT_BYTE_SLACK)
    a, x = (asim.simulate(p, inputs).stats for p in (plan, asim.compile(g, "xla", gpu)))
    assert a.global_bytes < x.global_bytes and a.predicted_us < x.predicted_us
    compare("models/xent_integer_labels", g, inputs, gpu)


def test_a_scope_cut_at_its_grid_barriers_where_a_kernel_boundary_is_cheaper():
    """hlo/bool_ops: an elementwise stage whose values three reductions read under other mappings.  Stitched, each
    read is a Global value behind a grid barrier (3 barriers); cut there, the reductions share a second kernel, as
    fusionstitching draws it.  The first kernel's note gives both prices."""
    g, inputs = load_fixture("hlo", "bool_ops")
    plan = asim.compile(g, "astitch", "H100")
    assert len(plan.generated) == 2 and not any(k.global_barriers for k in plan.kernels), str(plan)
    assert any(n.startswith("launch search: cut the stitch scope at its grid barriers") for n in plan.kernels[0].notes)
    assert any(e.rule == "global_cut" and "launch search" in e.why for e in plan.kernels[0].ends)
    raw = asim.compile(g, "astitch", "H100", launch_search=False)
    assert len(raw.generated) == 1 and raw.generated[0].global_barriers == 3
    for got, want in zip(asim.simulate(plan, inputs).outputs, asim.reference(g, inputs), strict=True):
        assert (got == want).all()


@pytest.mark.parametrize("cut_bytes, taken", [(1000.05, True), (1000.2, False), (999.0, True)])
def test_a_cut_may_move_only_a_sectors_slack_more_than_the_barrier(monkeypatch, cut_bytes, taken):
    """``choose_cut`` takes the faster cut within ``CUT_BYTE_SLACK`` (1e-4) of the barrier's bytes and no more: a
    cut that sends values through global memory the barrier kept on chip moves more, however fast (the H200's
    GPT training step: 23 such cuts, 2.5% more bytes than XLA's plan on the SIMT model)."""
    from types import SimpleNamespace
    from astitch_sim.planning.strategies import astitch_launch
    stitched = [SimpleNamespace(notes=[], global_barriers=1)]
    cut = [SimpleNamespace(notes=[], global_barriers=0), SimpleNamespace(notes=[], global_barriers=0)]
    monkeypatch.setattr(astitch_launch, "total_price", lambda g, gpu, ks: (100.0, 1000.0) if ks is stitched
                        else (50.0, cut_bytes))
    kernels, why = astitch_launch.choose_cut(None, None, lambda at_barriers: cut if at_barriers else stitched, stitched)
    assert (kernels is cut) == taken and (why is not None) == taken
    assert kernels[0].notes[0].startswith("launch search: cut the stitch scope" if taken else
                                          "launch search: kept the grid barriers")
