"""Plans' resource claims against NVIDIA's real compiler (ptxas), no GPU needed: the test matrix.

Every plan below is compiled to machine code by ``gpu_backend.apply_compiler`` (in a
subprocess, ``gpu_backend.machine.resource_check``: this process runs Numba's CUDA simulator,
machine code needs the real ``numba.cuda``) and every kernel is checked against the
plan's claims:

* registers per thread <= the plan's cap, with no spills -- or, where the code
  spilled at the assumed cap, the cap relaxed and the relaxation written in the
  kernel's notes (and, for a cooperative kernel whose grid forbids relaxing further,
  the remaining spill written there too);
* static shared memory equal to the plan's (generated kernels);
* for every cooperative kernel, the blocks CUDA keeps resident per SM with the real
  registers and shared memory (the device runtime's included) hold the whole grid
  in one wave (else its grid barriers would deadlock).

The matrix.  CI (the default) runs, for the H100 preset (sm_90): every catalog
workload at its default size under every strategy, every HLO fixture under
``astitch`` (the strategy whose register assumption a cooperative grid rests on)
and a sample of random graphs (``tests/random_graphs.py``) under every strategy --
207 plans, about 430 kernels.  Measured cold (empty disk cache) on the shared 2-core
development machine at load ~35: 3 min 52 s of CPU (7 min wall; on CI's 2 free cores with
2 jobs that CPU time is about 2-2.5 min of wall, not measured there); with the cache warm,
25 s of CPU (56 s wall).
Two switches widen it:

* ``ASTITCH_PTXAS_MATRIX=full``: every fixture under every strategy too (about 4,500
  kernels: an hour of ptxas on 2 cores, cached afterwards);
* ``ASTITCH_PTXAS_ARCHS=all`` (or ``V100,A100``): the other presets' architectures
  (V100 sm_70, A100 sm_80) as well (``V100,A100``: 414 plans, 7 min 46 s of CPU cold here,
  all passing).

Identical kernels are assembled once (the disk cache is keyed by the kernel's PTX
without its name) and plans compile two at a time.

Without the toolchain the tests skip saying so -- except in CI (``CI`` set), where
the test extra installs it and a missing toolchain is a failure.
"""
from __future__ import annotations

import json
import os
import re
import subprocess
import sys
import time
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings

import astitch_sim as asim
from astitch_sim.frontends.workloads import list_workloads
from gpu_backend.machine import toolchain
from random_graphs import cases as random_cases
from anchor import TESTS_FILE
from toolchain_gate import require_disassembler

FIXTURES = Path(TESTS_FILE).parent / "fixtures"
CI_GPUS = ("H100",)
ALL_GPUS = ("V100", "A100", "H100")
RANDOM_SAMPLE = 6
JOBS = max(1, min(2, os.cpu_count() or 1))


def gpus() -> tuple:
    asked = os.environ.get("ASTITCH_PTXAS_ARCHS", "")
    if not asked:
        return CI_GPUS
    if asked == "all":
        return ALL_GPUS
    return tuple(g.strip() for g in asked.split(",") if g.strip())


def fixture_strategies() -> tuple:
    return asim.STRATEGIES if os.environ.get("ASTITCH_PTXAS_MATRIX") == "full" else ("astitch",)


def fixture_files() -> list:
    return sorted(str(p) for p in FIXTURES.rglob("*.hlo") if "real_hlo" not in p.parts)


def random_graphs(n: int) -> list:
    """``n`` random graphs, the same ones every run (derandomized draws of the property suite's generator)."""
    out = []

    @settings(max_examples=n, derandomize=True, database=None, deadline=None,
              suppress_health_check=list(HealthCheck))
    @given(case=random_cases("float", max_ops=8))
    def draw(case):
        out.append(case.graph)
    draw()
    return out[:n]


def matrix(tmp: Path) -> list:
    """The cases for ``gpu_backend.machine.resource_check``: (catalog + fixtures + random graphs) x strategies x GPUs."""
    cases = []
    plans = tmp / "plans"
    plans.mkdir(exist_ok=True)
    randoms = random_graphs(RANDOM_SAMPLE)
    for gpu in gpus():
        for s in asim.STRATEGIES:
            for w in list_workloads():
                cases.append({"id": f"catalog:{w.name}/{s}/{gpu}", "graph": w.name, "strategy": s, "gpu": gpu})
            for f in fixture_files() if s in fixture_strategies() else ():
                rel = os.path.relpath(f, FIXTURES)
                cases.append({"id": f"fixture:{rel}/{s}/{gpu}", "graph": f, "strategy": s, "gpu": gpu})
            for i, g in enumerate(randoms):
                try:
                    plan = asim.compile(g, s, gpu)
                except asim.AStitchError as e:      # a graph a strategy refuses is the property suite's business
                    cases.append({"id": f"random:{i}/{s}/{gpu}", "skip": str(e)})
                    continue
                path = plans / f"random_{i}_{s}_{gpu}.json"
                path.write_text(plan.to_json())
                cases.append({"id": f"random:{i}/{s}/{gpu}", "graph": str(path), "strategy": s, "gpu": gpu})
    return cases


def case_ids() -> list:
    ids = []
    for gpu in gpus():
        for s in asim.STRATEGIES:
            ids += [f"catalog:{w.name}/{s}/{gpu}" for w in list_workloads()]
            ids += [f"fixture:{os.path.relpath(f, FIXTURES)}/{s}/{gpu}" for f in fixture_files()
                    if s in fixture_strategies()]
            ids += [f"random:{i}/{s}/{gpu}" for i in range(RANDOM_SAMPLE)]
    return ids


@pytest.fixture(scope="module")
def records(tmp_path_factory):
    if not toolchain.available():
        msg = f"NVIDIA toolchain missing: {toolchain.missing_reason()}"
        if os.environ.get("CI"):
            pytest.fail(msg + " (CI installs the test extra, so this must not happen)")
        pytest.skip(msg)
    d = tmp_path_factory.mktemp("machine")
    cases = matrix(d)
    skipped = {c["id"]: {"skip": c["skip"]} for c in cases if "skip" in c}
    run = [c for c in cases if "skip" not in c]
    (d / "cases.json").write_text(json.dumps(run))
    env = {k: v for k, v in os.environ.items() if k != "NUMBA_ENABLE_CUDASIM"}
    t0 = time.monotonic()
    r = subprocess.run([sys.executable, "-m", "gpu_backend.machine.resource_check", "--jobs", str(JOBS), str(d / "cases.json")],
                       capture_output=True, text=True, env=env, timeout=3000)
    assert r.returncode == 0, r.stderr[-3000:]
    print(f"\nptxas matrix: {len(run)} plans on {', '.join(gpus())} in {time.monotonic() - t0:.0f} s "
          f"({JOBS} jobs, cache {toolchain.cache_dir()})")
    return {**json.loads(r.stdout), **skipped}


def check_kernel(k: dict) -> None:
    """One kernel's record against the plan's claims (see the module docstring)."""
    m = k["machine"]
    assert m is not None, f"{k['name']}: not compiled"
    assert m["registers"] <= k["applied_registers"], k
    spills = m["spill_stores"] + m["spill_loads"]
    if k["applied_registers"] != k["plan_registers"]:
        assert any("cap relaxed" in n or "still spill" in n for n in k["notes"]), \
            f"{k['name']}: cap changed {k['plan_registers']} -> {k['applied_registers']} without a note: {k}"
    if spills:
        # only two things stop relaxing: a cooperative grid that must stay one wave, or a block too big for the
        # registers the code needs (its size is the plan's); the note must say which
        assert any(f"{spills} B per thread still spill" in n for n in k["notes"]), \
            f"{k['name']}: spills {spills} B per thread and no note records it: {k}"
        assert k["cooperative"] or any("cannot hold" in n for n in k["notes"]), \
            f"{k['name']}: spills {spills} B with nothing stopping the cap from relaxing: {k}"
    assert not any(re.search(r"\b0 B per thread still spill", n) for n in k["notes"]), \
        f"{k['name']}: a note says 0 B still spill (it fits: say so): {k['notes']}"
    if k["kind"] == "generated":
        assert m["shared_static"] == k["plan_shared"], k
    if k["cooperative"]:
        assert k["grid"] <= k["wave_real"], k


@pytest.mark.slow
@pytest.mark.parametrize("case", case_ids())
def test_ptxas_confirms_the_plan(records, case):
    rec = records[case]
    if "skip" in rec:
        pytest.skip(f"the strategy refuses this random graph: {rec['skip'][:200]}")
    assert "error" not in rec, rec.get("error")
    assert len(rec["kernels"]) == rec["plan_kernels"], rec      # (a plan of empty tensors has no kernels at all)
    for k in rec["kernels"]:
        check_kernel(k)


@pytest.mark.slow
def test_fig7_register_assumption_relaxed(records):
    """Under the paper's launch rule (``launch_search=False``: 1024-thread blocks) the stitched Figure 7 kernel
    with warp-shuffle reductions fits the assumed 32 registers without spilling and keeps them; with the
    paper's reduction trees (``reduce_scheme="tree"``) it spills at 32: the cap is relaxed, the grid still fits.
    The default launch search packs two rows per 512-thread block, whose code may need more than 32
    registers: then the cap is relaxed with a note, nothing spills, and the cooperative grid still fits."""
    gpu = gpus()[-1]
    (k,) = records[f"catalog:paper_fig7/astitch/{gpu}"]["kernels"]
    assert k["machine"]["spill_stores"] + k["machine"]["spill_loads"] == 0, k
    assert k["grid"] <= k["wave_real"], k
    if k["applied_registers"] != k["plan_registers"]:
        assert any("cap relaxed to" in n for n in k["notes"]), k
    code = ("import json, astitch_sim as asim, gpu_backend as gb\n"
            "out = {}\n"
            "for scheme in ('shuffle', 'tree'):\n"
            f"    p = gb.apply_compiler(asim.compile(asim.workload('paper_fig7'), 'astitch', {gpu!r}, "
            "launch_search=False, reduce_scheme=scheme))\n"
            "    (k,) = p.generated\n"
            "    out[scheme] = dict(regs=k.registers_per_thread, spills=k.machine.spill_stores + k.machine.spill_loads,"
            " notes=k.notes, grid=k.grid, block=k.block,"
            " wave=p.gpu.blocks_per_wave(k.block, k.shared_bytes, k.registers_per_thread))\n"
            "print(json.dumps(out))")
    env = {k: v for k, v in os.environ.items() if k != "NUMBA_ENABLE_CUDASIM"}
    r = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=env, timeout=900,
                       cwd=Path(TESTS_FILE).resolve().parent.parent)
    assert r.returncode == 0, r.stderr[-3000:]
    out = json.loads(r.stdout.splitlines()[-1])
    shuffle, tree = out["shuffle"], out["tree"]
    assert shuffle["block"] == tree["block"] == 1024, out
    assert shuffle["regs"] == 32 and shuffle["spills"] == 0, shuffle
    assert tree["regs"] > 32 and tree["spills"] == 0 and tree["grid"] <= tree["wave"], tree
    assert any("cap relaxed to" in n and "spilled" in n for n in tree["notes"]), tree


@pytest.mark.slow
def test_a_stuck_cooperative_kernel_is_replanned(records):
    """Batchnorm training's stitched kernel spills at 32 registers, and its one-wave grid of 1024-thread blocks
    leaves no room to relax: the graph is planned again assuming what ptxas needs (a smaller grid, more
    tasks per block), and the re-planned kernel does not spill.  (Before 32-bit index math cross-entropy's
    kernel was stuck too; it now fits in 28 registers.)"""
    if "H100" not in gpus():
        pytest.skip("the H100 preset is not in this run's matrix (ASTITCH_PTXAS_ARCHS)")
    rec = records["catalog:batchnorm_train/astitch/H100"]
    assert rec["replanned"] and rec["assumed_registers"] > 32, rec
    (k,) = rec["kernels"]
    assert k["cooperative"] and k["machine"]["spill_stores"] + k["machine"]["spill_loads"] == 0, k
    assert k["grid"] <= k["wave_real"], k


@pytest.mark.slow
@pytest.mark.parametrize("workload", ["bias_gelu", "swiglu", "adam_step"])
def test_a_kernel_that_stitches_nothing_compiles_the_same_under_xla_and_astitch(records, workload):
    """Fairness, checked by ptxas: a flat graph is one identical loop kernel under xla and astitch, so the plans
    claim the same registers, ptxas compiles both under the same cap to the same registers with no spill,
    and occupancy (the registers used) is the same.  Before the fix astitch capped bias+GELU's kernel at
    32 and ptxas spilled 24 B per thread there."""
    for gpu in gpus():
        (x,) = records[f"catalog:{workload}/xla/{gpu}"]["kernels"]
        (a,) = records[f"catalog:{workload}/astitch/{gpu}"]["kernels"]
        for key in ("plan_registers", "applied_registers", "grid", "block", "wave_real"):
            assert x[key] == a[key], (gpu, key, x, a)
        assert x["machine"]["registers"] == a["machine"]["registers"], (gpu, x, a)
        assert x["machine"]["spill_stores"] + x["machine"]["spill_loads"] == 0, x
        assert a["machine"]["spill_stores"] + a["machine"]["spill_loads"] == 0, a
        assert not any("cap relaxed" in n for n in a["notes"]), a


def test_check_kernel_catches_a_wrong_claim():
    """The checker itself: a spill nobody recorded, wrong shared memory, a grid past the wave all fail."""
    good = {"name": "k", "kind": "generated", "cooperative": True, "grid": 100, "block": 256, "plan_shared": 1024,
            "plan_registers": 32, "applied_registers": 32, "wave_estimate": 264, "wave_real": 132, "notes": [],
            "machine": {"registers": 32, "spill_stores": 0, "spill_loads": 0, "stack": 0, "shared_static": 1024,
                        "shared_runtime": 1024}}
    check_kernel(good)
    bad_cases = [
        {**good, "machine": {**good["machine"], "spill_stores": 8, "spill_loads": 8}},          # unrecorded spill
        {**good, "machine": {**good["machine"], "shared_static": 2048}},                       # shared differs
        {**good, "grid": 133},                                                                  # past the wave
        {**good, "applied_registers": 40, "machine": {**good["machine"], "registers": 40}},   # silent relax
        {**good, "machine": {**good["machine"], "registers": 33}},                             # over the cap
        {**good, "cooperative": False, "machine": {**good["machine"], "spill_stores": 4, "spill_loads": 4},
         "notes": ["... so the cap is 32 and 8 B per thread still spill"]},        # spills where it could relax
        {**good, "applied_registers": 40, "machine": {**good["machine"], "registers": 40},
         "notes": ["... so the cap is 40 and 0 B per thread still spill"]},        # a spill note with nothing spilled
    ]
    big_block = {**good, "cooperative": False, "block": 1024, "machine": {**good["machine"], "spill_stores": 4,
                 "spill_loads": 4}, "notes": ["...: a block of 1024 threads cannot hold 86 registers per thread on "
                                              "one SM ..., so the cap is 32 and 8 B per thread still spill"]}
    check_kernel(big_block)                                                    # recorded, and nothing else possible
    for bad in bad_cases:
        with pytest.raises(AssertionError):
            check_kernel(bad)


@pytest.mark.slow
def test_sass_budget_counts_an_unrolled_column_loop_per_trip(tmp_path):
    """The paper-size column reduction (16384 x 3072, 256 elements per thread): ptxas unrolls its loop, and
    the trips come from the source's accesses -- about 14 instructions per element, not the 228 the kept
    body counted once per element gave.  Layer-norm backward's stitched kernel runs its column stage on a
    tenth of its threads: counted for them, the kernel is not issue-bound either."""
    require_disassembler()
    env = {k: v for k, v in os.environ.items() if k != "NUMBA_ENABLE_CUDASIM"}
    r = subprocess.run([sys.executable, "-m", "benchmarks.sass_budget", "--gpus", "H100", "--strategies", "xla",
                        "astitch", "--only", "column_reduce", "layernorm_backward", "--label", "t", "--out",
                        str(tmp_path)], capture_output=True, text=True, env=env, cwd=Path(TESTS_FILE).resolve().parent.parent, timeout=900)
    assert r.returncode == 0, r.stdout[-3000:] + r.stderr[-3000:]
    records = json.loads((tmp_path / "sass_budget_t.json").read_text())["records"]
    (col,) = records["column_reduce/xla/H100"]["kernels"]
    assert col["loop_instructions"] and col["elements_per_thread"] == 256
    assert 1 < col["loop_trips"] < 256                        # several elements per trip: unrolled
    assert col["instr_per_element"] < 30 and col["bound"] == 1.0
    (stitched,) = records["layernorm_backward/astitch/H100"]["kernels"]
    assert stitched["loop_instructions"] and stitched["loop_trips"] < 8     # 8 trips, made by 9% of the threads
    assert records["layernorm_backward/astitch/H100"]["plan_bound"] == 1.0


def test_cached_ptxas_records_are_keyed_by_the_fields_they_hold(monkeypatch):
    """A cached ``MachineResources`` record is found only by a version of the project with the same fields:
    one that adds a field (``sass_loop_trips``) must not hand its records to one that cannot read them."""
    require_disassembler()
    from gpu_backend.machine import machine_code as mc
    keys = []
    monkeypatch.setattr(toolchain, "cache_get", lambda key: keys.append(key) or {"resources": {}})
    ptx = ".visible .entry k(\n)\n{\n}\n"
    mc.assemble(ptx, "sm_90", 32, False)
    monkeypatch.setattr(mc, "RESOURCE_FIELDS", mc.RESOURCE_FIELDS + ",a_field_added_later")
    mc.assemble(ptx, "sm_90", 32, False)
    assert len(keys) == 2 and keys[0] != keys[1]
    assert "sass_loop_trips" in mc.RESOURCE_FIELDS


# -- the instruction mix --------------------------------------------------------------------------

SASS_SNIPPET = """
        .section        .text.k,"ax",@progbits
        /*0000*/                   LDC R1, c[0x0][0x28] ;
.L_x_0:
        /*0010*/                   LDG.E.64 R2, desc[UR4][R4.64] ;
        /*0020*/                   LDG.E R6, desc[UR4][R4.64+0x4] ;
        /*0030*/                   STS [R0], R3 ;
        /*0040*/                   BAR.SYNC.DEFER_BLOCKING 0x0 ;
        /*0050*/                   LDS.U16 R7, [R0+0x2] ;
        /*0060*/                   REDG.E.ADD.F32.FTZ.RN.STRONG.GPU desc[UR6][R2.64], R11 ;
        /*0070*/              @P0  BRA `(.L_x_0) ;
        /*0080*/                   SHFL.BFLY PT, R3, R2, 0x1, 0x1f ;
        /*0090*/                   CALL.ABS.NOINC `(cudaCGSynchronize) ;
        /*00a0*/                   STG.E.128 desc[UR4][R8.64], R12 ;
.L_x_1:
        /*00b0*/                   BRA `(.L_x_1);
        .section        .text.other,"ax",@progbits
        /*0000*/                   LDG.E R6, desc[UR4][R4.64] ;
"""


def test_instruction_mix_counts_classes_widths_and_loops():
    from gpu_backend.machine.machine_code import instruction_mix
    mix = instruction_mix(SASS_SNIPPET, "k")
    assert mix["global_load"] == 2 and mix["global_load.64"] == 1 and mix["global_load.32"] == 1
    assert mix["shared_store"] == 1 and mix["shared_load.16"] == 1
    assert mix["barrier"] == 1 and mix["shuffle"] == 1 and mix["grid_sync"] == 1
    assert mix["global_atomic"] == 1                       # Hopper's REDG: an atomic with no return value
    assert mix["global_store.128"] == 1
    assert mix["backward_branch"] == 1                     # the loop to .L_x_0; the trap BRA to itself is not one
    assert mix["total"] == 12                              # the other kernel's section is not counted


@pytest.mark.slow
def test_instruction_mix_against_the_simt_model():
    """A stitched layernorm on sm_90: the compiler's straight-line SASS makes exactly the model's accesses.

    Global loads and stores agree element for element with the busiest thread's counts (the plan's rows are
    read in 4-element vectors: one 128-bit instruction per vector, the rest 32-bit); shared stores,
    barriers, grid barriers and warp shuffles agree one for one; shared loads too, up to the Regional
    broadcast re-reads ptxas hoists (the model counts one per element, ``mix_vs_model.explain`` names them).
    """
    require_disassembler()
    env = {k: v for k, v in os.environ.items() if k != "NUMBA_ENABLE_CUDASIM"}
    r = subprocess.run([sys.executable, "-m", "gpu_backend.machine.mix_vs_model", "layernorm", "astitch", "H100",
                        "rows=64", "cols=768"], capture_output=True, text=True, env=env, timeout=900)
    assert r.returncode == 0, r.stderr[-3000:]
    rows = {row["class"]: row for row in json.loads(r.stdout)}
    assert rows["global_load"]["loops"] == 0
    for cls in ("global_load", "global_store"):
        assert rows[cls]["model"] == rows[cls]["sass_elements"], rows[cls]
        assert rows[cls]["sass_widths"].get(f"{cls}.128", 0) > 0, rows[cls]   # the plan's vectors reach the code
        assert rows[cls]["why"].startswith("agree"), rows[cls]
    for cls in ("shared_store", "barrier", "grid_sync", "shuffle", "global_atomic"):
        assert rows[cls]["model"] == rows[cls]["sass"], rows[cls]
    # shared loads: the model counts a Regional broadcast once per element, ptxas hoists the re-read
    load = rows["shared_load"]
    hoisted = re.search(r"re-reads (\d+) element", load["why"])
    assert load["model"] == load["sass"] or (hoisted and load["model"] - load["sass"] == int(hoisted.group(1))), load
    # two reductions over 32 lanes (a warp per row, 2 rows per 64-thread block: the launch search's choice since
    # a lane's 6 vector trips count as loads in flight): 5 shfl_xor steps each, no block barrier at all
    assert (rows["shuffle"]["sass"], rows["barrier"]["sass"]) == (10, 0)
