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
    assert "check: lint test-fast" in make and '-m "not slow"' in make and "ruff check ." in make


def test_the_test_extra_brings_xdist_and_ruff():
    # (tomllib is Python 3.11+; the project supports 3.10)
    extra = re.search(r"^test = \[(.*?)\]", (ROOT / "pyproject.toml").read_text(), re.M | re.S)[1]
    assert {"pytest-xdist", "ruff"} <= set(re.findall(r'"([A-Za-z0-9_-]+)', extra)), extra
