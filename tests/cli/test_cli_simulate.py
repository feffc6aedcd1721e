"""Tests for the ``astitch plan`` and ``astitch simulate`` subcommands."""
from __future__ import annotations

import json
import re

import numpy as np
import pytest

import astitch_sim as asim
from astitch_sim.cli import main


def max_errors(out) -> list:
    """The "max error vs reference" each strategy's section prints (the SIMT model's outputs against numpy)."""
    return [float(v) for v in re.findall(r"max error vs reference (\S+)", out)]


def run(capsys, *argv):
    code = main(list(argv))
    out, err = capsys.readouterr()
    return code, out, err


# ---------------------------------------------------------------------------
# astitch plan
# ---------------------------------------------------------------------------

def test_plan_text_matches_print_plan(capsys):
    code, out, err = run(capsys, "plan", "--workload", "paper_fig7", "--strategy", "xla", "--gpu", "v100")
    assert code == 0 and err == ""
    assert out.strip() == str(asim.compile(asim.workload("paper_fig7"), "xla", "V100")).strip()
    assert out.startswith("plan xla for paper_fig7 on V100: 4 generated")


def test_plan_xla_rules_flag(capsys):
    """``--xla-rules`` is the xla option fusion_rules: softmax's f32 exp is cheap under today's rules
    (recomputed by the sum and the divide: 3 kernels), expensive in the paper's era (its own kernel: 4)."""
    g = asim.workload("softmax", rows=64, cols=1024)
    for rules, kernels in (("openxla-2024", 3), ("tf-2.6", 4)):
        code, out, err = run(capsys, "plan", "-w", "softmax", "--shape", "rows=64", "cols=1024", "--strategy", "xla",
                             "--xla-rules", rules)
        assert code == 0 and err == ""
        assert out.strip() == str(asim.compile(g, "xla", "V100", fusion_rules=rules)).strip()
        assert out.startswith(f"plan xla for softmax on V100: {kernels} generated")
    code, out, _ = run(capsys, "plan", "-w", "softmax", "--shape", "rows=64", "cols=1024", "--strategy", "xla",
                       "--xla-rules", "tf-2.6", "--json")
    assert code == 0 and json.loads(out)["options"] == {"fusion_rules": "tf-2.6"}
    code, out, err = run(capsys, "simulate", "-w", "softmax", "--shape", "rows=64", "cols=1024", "--compare",
                         "--xla-rules", "tf-2.6")
    assert code == 0, err
    xla_row = next(l for l in out.splitlines() if l.startswith("xla ")).split()
    assert xla_row[1] == "4" and float(xla_row[-1]) < 1e-5       # kernels, and the max error vs the reference
    with pytest.raises(SystemExit) as e:
        main(["plan", "-w", "softmax", "--strategy", "xla", "--xla-rules", "tf-1.15"])
    assert e.value.code == 2


def test_plan_json_round_trips(capsys):
    code, out, _ = run(capsys, "plan", "-w", "softmax", "--shape", "rows=4", "cols=8", "--json")
    assert code == 0
    plan = asim.Plan.from_json(out)
    assert plan.strategy == "astitch" and json.loads(out)["gpu"] == "V100"


def test_plan_dot(capsys):
    code, out, _ = run(capsys, "plan", "-w", "layernorm", "--shape", "rows=4", "cols=8", "--dot", "--gpu", "H100")
    assert code == 0 and out.startswith("digraph")


def test_plan_bad_gpu_and_strategy_exit_2(capsys):
    with pytest.raises(SystemExit) as e:
        main(["plan", "-w", "softmax", "--gpu", "B200"])
    assert e.value.code == 2
    assert "unknown GPU 'B200'" in capsys.readouterr().err
    with pytest.raises(SystemExit):
        main(["plan", "-w", "softmax", "--strategy", "magic"])


# ---------------------------------------------------------------------------
# astitch simulate
# ---------------------------------------------------------------------------

def test_simulate_trace_refuses_big_shapes(capsys):
    code, out, err = run(capsys, "simulate", "-w", "softmax", "--trace")
    assert code == 2 and err.startswith("astitch: error: --trace") and "--shape rows=4 cols=8" in err


def test_simulate_bad_shape_is_an_error(capsys):
    code, _, err = run(capsys, "simulate", "-w", "softmax", "--shape", "rows=x")
    assert code == 2 and "not an integer" in err


def test_simulate_one_strategy(capsys):
    code, out, err = run(capsys, "simulate", "-w", "paper_fig7", "--gpu", "V100")
    assert code == 0, err
    assert "== astitch: 1 kernel(s)" in out and "over xla" in out and "launch 5.00" in out
    errs = max_errors(out)
    assert len(errs) == 1 and errs[0] < 1e-5, errs


def test_simulate_compare_table(capsys):
    code, out, err = run(capsys, "simulate", "-w", "softmax", "--shape", "rows=64", "cols=1024", "--compare")
    assert code == 0, err
    head = next(l for l in out.splitlines() if l.startswith("strategy"))
    assert "predicted us" in head and "vs xla" in head
    for s in ("unfused", "xla", "tvm", "astitch"):
        row = next(l for l in out.splitlines() if l.startswith(s + " "))
        assert float(row.split()[-1]) < 1e-5, row                  # the "max err" column
    errs = max_errors(out)
    assert len(errs) == len(asim.STRATEGIES) and max(errs) < 1e-5, errs


def test_simulate_timeline_and_trace(capsys):
    code, out, err = run(capsys, "simulate", "-w", "softmax", "--shape", "rows=4", "cols=8", "--trace",
                         "--timeline", "--events", "5")
    assert code == 0, err
    assert "# trace:" in out and "# races:" in out
    assert "SM0 " in out and "utilisation" in out
    errs = max_errors(out)
    assert len(errs) == 1 and errs[0] < 1e-5, errs


def test_simulate_no_l2_prices_every_sector_at_dram(capsys):
    """Issue 28: ``--no-l2`` is ``simulate(..., l2=False)``: the unfused layernorm's reloads of the intermediates
    earlier kernels wrote are L2 hits by default and DRAM traffic with the flag, and the predictions are the API's;
    the outputs are the reference's either way (the flag prices traffic, it changes no value)."""
    from astitch_sim.frontends.workloads import workload_inputs
    argv = ["simulate", "-w", "layernorm", "--shape", "rows=64", "cols=128", "--strategy", "unfused", "--gpu", "H100"]
    g = asim.workload("layernorm", rows=64, cols=128)
    plan = asim.compile(g, "unfused", "H100")
    inputs = workload_inputs(g, 0)
    want = asim.reference(g, inputs)
    for flags, l2 in (((), True), (("--no-l2",), False)):
        code, out, err = run(capsys, *argv, *flags)
        assert code == 0 and err == ""
        errs = max_errors(out)
        assert len(errs) == 1 and errs[0] < 1e-5, errs
        result = asim.simulate(plan, inputs, l2=l2)
        for a, b in zip(result.outputs, want, strict=True):
            assert a.shape == b.shape and np.allclose(a, b, rtol=1e-5, atol=1e-5)
        st = result.stats
        assert f"predicted {st.predicted_us:.2f} us" in out
        hits = re.search(r"DRAM, (\S+ \S+) L2 hits", out).group(1)
        assert (hits == "0 B") is (not l2)
        assert ("L2 off (--no-l2)" in out) is (not l2)
