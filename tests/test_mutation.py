"""The mutation check runs (tests/mutation.py): with ``simulate`` spoiled -- no outputs, or every value 10%
off -- every test that reads its outputs fails, in suites that compare them with the reference, with
JAX's outputs and with what the command line prints.  The fast tier runs it on two quick files, the full
tier on the SIMT model's own suite too."""
from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
QUICK = ["tests/cli/test_cli_simulate.py", "tests/planning/test_whatif.py"]
BROAD = ["tests/simt/test_simt_executor.py", "tests/planning/test_fusion_rules.py", "tests/passes/test_empty_tensors.py",
         "tests/test_indexed_and_library_ops.py"]


def mutation_run(mode: str, files: list) -> tuple:
    env = {k: v for k, v in os.environ.items() if not k.startswith(("PYTEST_", "COLUMNS"))}
    r = subprocess.run([sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", "-p", "tests.mutation",
                        f"--mutate-simulate={mode}", "-m", "not slow", *files],
                       cwd=ROOT, env=env, capture_output=True, text=True, timeout=1800)
    m = re.search(r"(\d+) tests read the spoiled outputs; (\d+) failed, (\d+) survived", r.stdout)
    assert m, r.stdout[-3000:] + r.stderr[-3000:]
    return r.returncode, int(m[1]), int(m[3]), r.stdout


@pytest.mark.parametrize("files", [pytest.param(QUICK, id="quick"), pytest.param(BROAD, id="broad", marks=pytest.mark.slow)])
@pytest.mark.parametrize("mode", ["empty", "off10"])
def test_every_test_that_reads_spoiled_outputs_fails(mode, files):
    code, read, survived, out = mutation_run(mode, files)
    assert read >= 10, out[-2000:]                     # the check judged something
    assert survived == 0 and code == 0, "\n".join(l for l in out.splitlines() if "SURVIVED" in l)
