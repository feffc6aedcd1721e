"""Tests for the ``astitch`` command line (astitch_sim.cli), run in-process through ``main``."""
from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

from astitch_sim import cli
from astitch_sim.cli import load_graph, main, parse_shape
from astitch_sim.errors import AStitchError
from astitch_sim.ir.reference import reference
from astitch_sim.frontends.workloads import WORKLOADS, workload, workload_inputs
from anchor import TESTS_FILE

FIXTURES = Path(TESTS_FILE).parent / "fixtures" / "hlo"
ROOT = Path(TESTS_FILE).resolve().parent.parent


def run(capsys, *argv):
    code = main(list(argv))
    out, err = capsys.readouterr()
    return code, out, err


# ---------------------------------------------------------------------------
# astitch workloads
# ---------------------------------------------------------------------------

@pytest.mark.parametrize("columns", ["60", "80", "200"])
def test_workloads_table(capsys, monkeypatch, columns):
    # the table wraps its descriptions at the terminal's width (pytest-xdist workers have 80 columns)
    monkeypatch.setenv("COLUMNS", columns)
    code, out, err = run(capsys, "workloads")
    assert code == 0 and err == ""
    assert out.splitlines()[0].split()[:3] == ["name", "default", "shape"]
    flat = " ".join(out.split())
    for name, w in WORKLOADS.items():
        line = next(l for l in out.splitlines() if l.startswith(name + " "))
        assert w.shape_str in line
        assert w.doc in flat and "shape: " + w.source in flat
    assert "rows=750000 cols=32" in out and "rows=64 cols=30000" in out


def test_workloads_names(capsys):
    code, out, _ = run(capsys, "workloads", "--names")
    assert code == 0 and out.split() == list(WORKLOADS)


# ---------------------------------------------------------------------------
# astitch show
# ---------------------------------------------------------------------------

def test_show_workload_text(capsys):
    code, out, err = run(capsys, "show", "--workload", "paper_fig7", "--shape", "n=4", "c=6")
    assert code == 0 and err == ""
    assert out.startswith("graph paper_fig7(param.1: f32[4,6], param.2: f32[4], param.3: f32[6,4])")
    assert "power.1: f32[4] = power(divide.1, k.bcast)" in out
    assert "reduce.2: f32[4] = reduce[sum, dims=(0,)]" in out
    assert "return (multiply.1)" in out
    assert out.splitlines()[-1].startswith("# 17 nodes")


def test_show_shape_forms_agree(capsys):
    _, a, _ = run(capsys, "show", "-w", "softmax", "--shape", "rows=3", "cols=5")
    _, b, _ = run(capsys, "show", "-w", "softmax", "--shape", "rows=3,cols=5")
    _, c, _ = run(capsys, "show", "-w", "softmax", "-s", "rows=3", "-s", "cols=5")
    assert a == b == c and "x: f32[3,5]" in a


def test_show_default_shape(capsys):
    code, out, _ = run(capsys, "show", "--workload", "row_reduce")
    assert code == 0 and "x: f32[750000,32]" in out


def test_show_dot(capsys):
    code, out, _ = run(capsys, "show", "--workload", "layernorm", "--shape", "rows=2", "cols=4", "--dot")
    assert code == 0
    assert out.startswith('digraph "layernorm"') and out.rstrip().endswith("}")
    assert '"mean_sum" -> "mean";' in out


def test_show_hlo(capsys):
    code, out, err = run(capsys, "show", "--hlo", str(FIXTURES / "layernorm.hlo"))
    assert code == 0, err
    assert "f32[64,128]" in out and "reduce[sum, dims=(1,)]" in out


# ---------------------------------------------------------------------------
# astitch reference
# ---------------------------------------------------------------------------

def test_reference_prints_stats_and_saves(capsys, tmp_path):
    path = tmp_path / "out.npz"
    code, out, err = run(capsys, "reference", "--workload", "batchnorm_train", "--shape", "rows=8", "cols=3",
                         "--seed", "4", "--save", str(path))
    assert code == 0 and err == ""
    g = workload("batchnorm_train", rows=8, cols=3)
    want = reference(g, workload_inputs(g, 4))
    for line_start in ("y: f32[8,3]", "mean: f32[3]", "var: f32[3]"):
        assert any(l.startswith(line_start) for l in out.splitlines())
    assert "min " in out and "max " in out and "mean " in out and "values: [" in out
    assert "seed 4" in out and f"saved 3 output(s) to {path}" in out
    with np.load(path) as saved:
        assert sorted(saved.files) == ["mean", "var", "y"]
        for node, w in zip(g.outputs, want, strict=True):
            np.testing.assert_array_equal(saved[node.name], w)


def test_reference_scalar_output_and_value_count(capsys):
    code, out, _ = run(capsys, "reference", "-w", "cross_entropy", "-s", "rows=3", "cols=4", "--values", "2")
    assert code == 0
    assert "mean_loss: f32[]" in out
    loss_values = out.split("\nloss: f32[3]")[1].split("values:")[1].splitlines()[0]
    assert loss_values.count(",") == 2 and loss_values.rstrip().endswith("...]")


def test_reference_reports_nan(capsys, tmp_path):
    g = workload("adam_step", size=4)
    arrays = {p.name: np.full(4, -1.0 if p.name == "v" else 1.0, np.float32) for p in g.inputs}
    np.savez(tmp_path / "in.npz", **arrays)
    code, out, _ = run(capsys, "reference", "-w", "adam_step", "-s", "size=4", "--inputs", str(tmp_path / "in.npz"))
    assert code == 0 and "(4 nan)" in out and f"inputs from {tmp_path / 'in.npz'}" in out


@pytest.mark.parametrize("keys", ["names", "positional"])
def test_reference_inputs_npz(capsys, tmp_path, keys):
    g = workload("softmax", rows=2, cols=3)
    x = np.array([[0, 0, 0], [1, 2, 3]], np.float32)
    np.savez(tmp_path / "in.npz", **({"x": x} if keys == "names" else {"in0": x}))
    path = tmp_path / "out.npz"
    code, out, err = run(capsys, "reference", "-w", "softmax", "-s", "rows=2", "cols=3",
                         "--inputs", str(tmp_path / "in.npz"), "--save", str(path))
    assert code == 0, err
    with np.load(path) as saved:
        np.testing.assert_allclose(saved["out"], reference(g, [x])[0])
        np.testing.assert_allclose(saved["out"][0], 1 / 3, rtol=1e-6)


def test_reference_hlo_with_inputs(capsys, tmp_path):
    x = np.random.default_rng(0).standard_normal((64, 128)).astype(np.float32)
    ones, zeros = np.ones(128, np.float32), np.zeros(128, np.float32)
    np.savez(tmp_path / "in.npz", in0=x, in1=ones, in2=zeros)
    code, out, err = run(capsys, "reference", "--hlo", str(FIXTURES / "layernorm.hlo"),
                         "--inputs", str(tmp_path / "in.npz"), "--save", str(tmp_path / "o.npz"))
    assert code == 0, err
    with np.load(tmp_path / "o.npz") as saved:
        (y,) = [saved[k] for k in saved.files]
    np.testing.assert_allclose(y.mean(-1), 0, atol=1e-5)
    np.testing.assert_allclose(y.std(-1), 1, rtol=1e-3)


# ---------------------------------------------------------------------------
# errors: "astitch: error: ..." on stderr, exit 2, no traceback
# ---------------------------------------------------------------------------

@pytest.mark.parametrize("argv, words", [
    (["show", "--workload", "nope"], ["unknown workload 'nope'", "layernorm", "paper_fig7"]),
    (["show", "--workload", "softmax", "--shape", "row=3"], ["no shape keyword 'row'", "rows", "cols"]),
    (["show", "--workload", "softmax", "--shape", "rows=0"], ["rows=0", "positive"]),
    (["show", "--workload", "softmax", "--shape", "rows"], ["key=value"]),
    (["show", "--workload", "softmax", "--shape", "rows=abc"], ["'abc' is not an integer"]),
    (["show", "--hlo", "/no/such/file.hlo"], ["cannot read /no/such/file.hlo"]),
    (["reference", "--workload", "softmax", "--inputs", "/no/such.npz"], ["cannot read inputs from /no/such.npz"]),
])
def test_errors_exit_2_with_message(capsys, argv, words):
    code, out, err = run(capsys, *argv)
    assert code == 2 and out == ""
    assert err.startswith("astitch: error: ") and "Traceback" not in err
    for w in words:
        assert w in err


def test_shape_with_hlo_is_an_error(capsys):
    code, _, err = run(capsys, "show", "--hlo", str(FIXTURES / "layernorm.hlo"), "--shape", "rows=2")
    assert code == 2 and "--shape applies to --workload only" in err


def test_binary_hlo_file_is_an_error(capsys):
    code, _, err = run(capsys, "show", "--hlo", str(FIXTURES / "layernorm.npz"))
    assert code == 2 and err.startswith("astitch: error: ")


def test_malformed_hlo_is_an_error(capsys, tmp_path):
    bad = tmp_path / "bad.hlo"
    bad.write_text("HloModule m\n\nENTRY main {\n  ROOT x = f32[2]{0} frobnicate()\n}\n")
    code, _, err = run(capsys, "show", "--hlo", str(bad))
    assert code == 2 and err.startswith("astitch: error: ") and "Traceback" not in err


def test_inputs_npz_with_wrong_keys_or_dtype(capsys, tmp_path):
    np.savez(tmp_path / "keys.npz", y=np.zeros((2, 3), np.float32))
    code, _, err = run(capsys, "reference", "-w", "softmax", "-s", "rows=2", "cols=3",
                       "--inputs", str(tmp_path / "keys.npz"))
    assert code == 2 and "needs its parameters by name (x) or by position (in0)" in err
    np.savez(tmp_path / "f64.npz", x=np.zeros((2, 3)))
    code, _, err = run(capsys, "reference", "-w", "softmax", "-s", "rows=2", "cols=3",
                       "--inputs", str(tmp_path / "f64.npz"))
    assert code == 2 and "f64" in err and "astype" in err
    np.savez(tmp_path / "shape.npz", x=np.zeros((3, 3), np.float32))
    code, _, err = run(capsys, "reference", "-w", "softmax", "-s", "rows=2", "cols=3",
                       "--inputs", str(tmp_path / "shape.npz"))
    assert code == 2 and "shape [3, 3]" in err


def test_usage_errors_exit_2(capsys):
    with pytest.raises(SystemExit) as e:
        main(["show"])                                  # neither --workload nor --hlo
    assert e.value.code == 2
    assert "one of the arguments -w/--workload --hlo is required" in capsys.readouterr().err
    with pytest.raises(SystemExit) as e:
        main(["frobnicate"])
    assert e.value.code == 2


def test_no_command_prints_help(capsys):
    code, out, _ = run(capsys)
    assert code == 2 and "commands:" in out and "workloads" in out


# ---------------------------------------------------------------------------
# help teaches
# ---------------------------------------------------------------------------

@pytest.mark.parametrize("argv, words", [
    ([], ["AStitch", "workloads", "show", "reference", "examples:"]),
    (["workloads"], ["default", "examples:", "astitch workloads"]),
    (["show"], ["name: dtype[shape] = op[attributes](operands)", "--dot", "--hlo", "--shape", "examples:"]),
    (["reference"], ["numpy reference", "--inputs", "in0", "--seed", "--save", "examples:"]),
])
def test_help_at_every_level(capsys, argv, words):
    with pytest.raises(SystemExit) as e:
        main(argv + ["--help"])
    assert e.value.code == 0
    out = capsys.readouterr().out
    for w in words:
        assert w in out


def test_version(capsys):
    with pytest.raises(SystemExit) as e:
        main(["--version"])
    assert e.value.code == 0 and "astitch 0.1.0" in capsys.readouterr().out


# ---------------------------------------------------------------------------
# building blocks other subcommands reuse
# ---------------------------------------------------------------------------

def test_parse_shape():
    assert parse_shape(["rows=4", "cols=8,extra=1_000"]) == {"rows": 4, "cols": 8, "extra": 1000}
    assert parse_shape([]) == {}
    with pytest.raises(AStitchError):
        parse_shape(["=3"])


def test_a_new_subcommand_plugs_in(capsys, monkeypatch):
    """How `plan`/`simulate` will be added: a registrar using add_graph_arguments and load_graph."""
    def add_count_parser(sub):
        p = sub.add_parser("count", help="count nodes")
        cli.add_graph_arguments(p)
        p.set_defaults(func=lambda args: print(len(load_graph(args))) or 0)
        return p

    monkeypatch.setattr(cli, "SUBCOMMANDS", cli.SUBCOMMANDS + [add_count_parser])
    code, out, _ = run(capsys, "count", "--workload", "paper_fig7", "--shape", "n=2", "c=2")
    assert code == 0 and out.strip() == "17"
    code, _, err = run(capsys, "count", "--workload", "nope")
    assert code == 2 and "unknown workload" in err


def test_python_dash_m(tmp_path):
    proc = subprocess.run([sys.executable, "-m", "astitch_sim", "workloads"], cwd=ROOT,
                          capture_output=True, text=True, timeout=60)
    assert proc.returncode == 0, proc.stderr
    assert all(name in proc.stdout for name in WORKLOADS)
    proc = subprocess.run([sys.executable, "-m", "astitch_sim", "show", "--workload", "nope"], cwd=ROOT,
                          capture_output=True, text=True, timeout=60)
    assert proc.returncode == 2 and proc.stderr.startswith("astitch: error: unknown workload")
    assert "Traceback" not in proc.stderr
