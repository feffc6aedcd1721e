"""The two test tiers as documented (README, "Testing"): CI runs exactly the README's test command, the fast
tier's one-line command is there, and both use the pytest-xdist the test extra installs."""
from __future__ import annotations

import re
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
README = (ROOT / "README.md").read_text()


def test_ci_runs_exactly_the_readme_test_command():
    ci = [l for l in (ROOT / ".ci" / "run").read_text().splitlines() if l.strip() and not l.startswith("#")]
    assert ci[-1] in README.splitlines(), ci[-1]
    assert ci[-1].endswith("-m pytest -q -n auto --dist loadfile")


def test_the_fast_tier_is_one_documented_line_and_make_check_runs_it():
    fast = re.findall(r'^\s*(python -m pytest .*-m "not slow".*)$', README, re.M)
    assert fast == ['python -m pytest -q -m "not slow" -n auto --dist loadfile'], fast
    make = (ROOT / "Makefile").read_text()
    assert "check: lint typecheck test-fast" in make and '-m "not slow"' in make and "ruff check ." in make
    assert "-m mypy" in make


def test_the_public_api_type_checks():
    """``make typecheck``: mypy on the public API (pyproject's ``[tool.mypy]``), possibly-undefined names on."""
    import subprocess
    import sys
    r = subprocess.run([sys.executable, "-m", "mypy", "--cache-dir", "/dev/null"], cwd=ROOT, capture_output=True,
                       text=True, timeout=600)
    assert r.returncode == 0 and "Success" in r.stdout, r.stdout[-3000:] + r.stderr[-2000:]
    assert '"possibly-undefined"' in (ROOT / "pyproject.toml").read_text()


def test_the_test_extra_brings_xdist_and_ruff():
    # (tomllib is Python 3.11+; the project supports 3.10)
    extra = re.search(r"^test = \[(.*?)\]", (ROOT / "pyproject.toml").read_text(), re.M | re.S)[1]
    assert {"pytest-xdist", "ruff", "mypy"} <= set(re.findall(r'"([A-Za-z0-9_-]+)', extra)), extra


def test_the_fast_shares_cover_every_strategy_workload_and_fixture():
    """The wide matrices keep a share in the fast tier (tests/tiers.py): every strategy still runs in Numba's CUDA
    simulator, every catalog workload and every HLO fixture still runs there under astitch, every op fixture
    under xla and astitch; and the full tier still has every case."""
    import astitch_sim as asim
    import test_gpu_backend as gb
    import test_indexed_and_library_ops as ops
    import test_never_behind as nb
    from tiers import is_fast, values

    def share(matrix):
        return [values(p) for p in matrix if is_fast(p)], [values(p) for p in matrix]

    fast, full = share(gb.WORKLOAD_MATRIX)
    assert sorted(full) == sorted((n, s) for n in gb.TINY for s in asim.STRATEGIES)
    assert {s for _, s in fast} == set(asim.STRATEGIES)
    assert {n for n, s in fast if s == "astitch"} == set(gb.TINY)
    assert len(fast) < len(full)
    (fixtures,), (op_cases,) = ([m.args[1] for m in f.pytestmark if m.name == "parametrize"]
                                for f in (gb.test_hlo_fixture_matches_reference,
                                          ops.test_every_strategy_in_the_numba_backend))
    fast, full = share(fixtures)
    assert sorted(full) == sorted((f, s) for f in gb.HLO_FIXTURES for s in asim.STRATEGIES)
    assert {f for f, s in fast if s == "astitch"} == set(gb.HLO_FIXTURES)
    fast, full = share(op_cases)
    assert sorted(full) == sorted((n, s) for n in ops.OP_FIXTURES for s in asim.STRATEGIES)
    assert {(n, s) for n, s in fast} == {(n, s) for n in ops.OP_FIXTURES for s in ("xla", "astitch")}
    fast, full = share(nb.fixture_matrix())
    assert full == nb.hlo_fixtures()
    # the model fixtures' never-behind checks on H100 run inside test_models' every-strategy runs: all of them
    import test_models
    assert set(test_models.MODELS) == {name for sub, name in nb.hlo_fixtures() if sub == "models"}
    assert {sub for sub, _ in fast} == {"hlo", "ops"} and not any(sub == "models" for sub, _ in fast)
