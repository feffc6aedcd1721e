"""The SASS profile behind ``benchmarks.sass_budget`` (gpu_backend/machine/sass_profile.py): what is counted, and the bound.

No toolchain needed: a hand-written SASS listing in nvdisasm's format, and the formula on round numbers.
"""
from __future__ import annotations

import json

import pytest

import astitch_sim as asim
from gpu_backend.machine.sass_profile import issue_bound, profile

SASS = """
        .section        .text.k,"ax",@progbits
        /*0000*/                   S2R R0, SR_TID.X ;
        /*0010*/                   IMAD.WIDE.U32 R2, R0, 0x4, R2 ;
.L_x_0:
        /*0020*/                   LDG.E.128 R4, desc[UR4][R2.64] ;
        /*0030*/                   FADD R4, R4, R5 ;
        /*0040*/              @P0  BRA `(.L_x_0) ;
        /*0050*/                   SHFL.BFLY PT, R3, R4, 0x1, 0x1f ;
        /*0060*/                   BAR.SYNC.DEFER_BLOCKING 0x0 ;
        /*0070*/                   STG.E desc[UR4][R2.64], R4 ;
        /*0080*/                   EXIT ;
.L_x_1:
        /*0090*/                   BRA `(.L_x_1);
        /*00a0*/                   NOP;
$__internal_0_$__cuda_sm3x_div_rn_noftz_f32_slowpath:
        /*00b0*/                   FCHK P0, R4, R5 ;
        /*00c0*/                   RET.REL.NODEC R2 `(k) ;
        .section        .text.other,"ax",@progbits
        /*0000*/                   LDG.E R6, desc[UR4][R4.64] ;
"""


def test_profile_counts_the_main_body_by_class_and_width():
    p = profile(SASS, "k")
    assert p.total == 9                      # the trap, the NOP, the slow-path subroutine and the other kernel: out
    assert p.classes["int_addr"] == 2 and p.classes["float"] == 1 and p.classes["control"] == 2
    assert p.loads == {128: 1} and p.stores == {32: 1}
    assert p.classes["shuffle"] == 1 and p.classes["barrier"] == 1
    assert p.loop_body == 3                  # .L_x_0 .. its backward branch
    assert p.per_thread(1) == 9 and p.per_thread(4) == 9 - 3 + 3 * 4
    assert p.widths("load") == "1x128" and p.widths("store") == "1x32"


def test_issue_bound_formula():
    """H100: 132 SMs x 4 schedulers x 1.98 GHz warp-instructions per second against 3.0 TB/s."""
    h100 = asim.gpu("H100")
    threads = 32 * 132 * 4 * 1000           # 1000 warp-instructions per scheduler per instruction of a thread
    b = issue_bound(h100, 10, threads, 3_000_000)
    assert b.issue_us == pytest.approx(10 * 1000 / 1.98e3)         # 10 instructions x 1000 clocks at 1.98 GHz
    assert b.dram_us == pytest.approx(1.0)                          # 3 MB at 3.0 TB/s
    assert b.fraction == pytest.approx(1.0 / b.issue_us)
    assert issue_bound(h100, 1, 32, 3_000_000_000).fraction == 1.0  # far more bytes than instructions: not issue-bound


def test_compare_reads_the_runs(tmp_path):
    from benchmarks.sass_budget import compare
    k = {"instr_per_element": 36.0, "loads": {"32": 2}, "stores": {"128": 1}}
    for label, bound in (("a", 0.5), ("b", 0.9)):
        rec = {"layernorm/xla/H100": {"kernels": [k], "plan_bound": bound}}
        (tmp_path / f"sass_budget_{label}.json").write_text(json.dumps({"records": rec}))
    text = compare(["a", "b"], tmp_path)
    assert "| layernorm/xla | 1, 36, 32/128-bit, 50% | 1, 36, 32/128-bit, 90% |" in text
    assert "| layernorm/astitch | - | - |" in text


# -- a kept loop's trips, from the global accesses the generated source executes --------------------------

UNROLLED = """
        .section        .text.k,"ax",@progbits
        /*0000*/                   S2R R0, SR_TID.X ;
        /*0010*/                   LDG.E R9, desc[UR4][R2.64] ;
.L_x_0:
        /*0020*/                   LDG.E R4, desc[UR4][R2.64] ;
        /*0030*/                   LDG.E R5, desc[UR4][R2.64+0x3000] ;
        /*0040*/                   LDG.E R6, desc[UR4][R2.64+0x6000] ;
        /*0050*/                   LDG.E R7, desc[UR4][R2.64+0x9000] ;
        /*0060*/                   FADD R8, R8, R4 ;
        /*0070*/                   FADD R8, R8, R5 ;
        /*0080*/                   FADD R8, R8, R6 ;
        /*0090*/                   FADD R8, R8, R7 ;
        /*00a0*/              @P0  BRA `(.L_x_0) ;
        /*00b0*/                   STG.E desc[UR4][R2.64], R8 ;
        /*00c0*/                   EXIT ;
"""


def test_an_unrolled_loop_runs_once_per_trip_not_once_per_element():
    """ptxas unrolled the source's 64-element loop 4 times: 16 trips of the 9-instruction body, not 64."""
    from gpu_backend.machine.source_counts import Accesses
    p = profile(UNROLLED, "k")
    assert p.loop_body == 9 and p.loop_accesses == 4 and p.accesses == 6
    source = Accesses(per_thread=1 + 64 + 1)              # one load before the loop, 64 in it, one store after
    assert p.loop_trips(64, source) == 16
    assert p.per_thread(64, source) == 13 - 9 + 9 * 16
    assert p.per_thread(64) == 13 - 9 + 9 * 64             # without the source's count: once per element
    # a quarter of the threads work in the loop (a small stage of a stitched kernel): a quarter of the trips
    assert p.loop_trips(64, Accesses(per_thread=66, loop_share=0.25)) == 4
    # a count that does not exceed the straight-line accesses tells nothing: once per element again
    assert p.counted_trips(Accesses(per_thread=2)) is None and p.loop_trips(64, Accesses(per_thread=2)) == 64


SOURCE = '''
def kern(g_x, g_y, g_z):
    tid = 0
    # ---- stage 0: dominant a -- rows
    v = ldg4(g_x, tid)
    for inner in range(8):  # 8 element(s) of the task per thread
        w = ldg(g_x, inner)
        if tid < 3:
            stg(g_y, inner, w)
    # ---- stage 1: dominant b -- columns
    for outer in range(2):
        for inner in range(1, 7, 2):
            acc = ldg(g_z, inner)
    n = 4
    while n > 1:
        n = n // 2
    stg4(g_y, 0, v, v, v, v)


def other(g_x):
    for i in range(g_x.size):
        x = ldg(g_x, i)
'''


def test_the_source_counts_each_access_times_the_trips_around_it():
    from gpu_backend.machine.source_counts import global_accesses
    a = global_accesses(SOURCE, "kern")
    assert a.per_thread == 1 + 8 * 2 + 2 * 3 + 1           # a guarded store counts: a predicated one issues
    assert a.loop_share == 1.0
    # stage 0 keeps every thread busy, stage 1 a tenth: the loops' accesses are 16 of stage 0, 6 of stage 1
    b = global_accesses(SOURCE, "kern", busy=[1.0, 0.1])
    assert b.per_thread == a.per_thread and b.loop_share == pytest.approx((16 * 1.0 + 6 * 0.1) / 22)
    assert global_accesses(SOURCE, "other") is None         # a loop of unstated trips around an access
    assert global_accesses(SOURCE, "missing") is None


def test_the_generated_kernels_state_every_trip_count():
    """Every kernel of a real plan is countable: its loops are ``range`` of constants (a column reduction's
    32 elements per thread in 4-element vectors of adjacent columns, 4 rows' loads per round: 8 vector loads),
    and the shares follow the stages' busy threads."""
    from gpu_backend.machine.source_counts import plan_accesses
    plan = asim.compile(asim.workload("column_reduce", rows=16384, cols=512), "xla", "H100")
    (k,) = plan.kernels
    a = plan_accesses(plan)[0]
    m = k.stages[0].mapping
    assert (m.vector, m.trips, m.load_trips, m.task_iterations) == (4, 8, 4, 1)
    assert a.per_thread == m.trips * m.task_iterations == m.elements_per_thread // m.vector
    assert 0 < a.loop_share <= 1 and a.loop_share == pytest.approx(min(1.0, m.busy_threads / (k.grid * k.block)))
