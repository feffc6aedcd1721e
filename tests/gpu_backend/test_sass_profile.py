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
