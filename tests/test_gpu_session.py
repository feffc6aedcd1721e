"""The GPU window's runbook (``python -m benchmarks.gpu_session``), dry-run without a GPU.

* the image-like run: the packages the GPU image lacks are hidden (``benchmarks.image_like``)
  and ``pytest -m gpu`` must still collect every gpu-marked test, with no collection error;
* the dry run: every part of the runbook in Numba's CUDA simulator at tiny sizes, then the
  render step, results with provenance (below).
"""
from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent


def _collected(out: str) -> set:
    return {line.strip() for line in out.splitlines() if "::" in line and not line.startswith(("ERROR", "FAILED"))}


def test_pytest_m_gpu_collects_every_gpu_test_on_an_image_without_the_extras(tmp_path):
    from benchmarks import image_like
    cmd = [sys.executable, "-m", "pytest", "-m", "gpu", "--collect-only", "-q", "-p", "no:cacheprovider"]
    env = image_like.image_like_env(tmp_path / "hidden")
    env["ASTITCH_NO_GPU"] = "1"
    hidden = subprocess.run(cmd + ["tests"], env=env, cwd=ROOT, capture_output=True, text=True, timeout=300)
    assert hidden.returncode == 0, hidden.stdout[-3000:] + hidden.stderr[-3000:]
    assert "error" not in hidden.stdout.splitlines()[-1].lower(), hidden.stdout[-2000:]
    # what a full environment collects from the files that hold gpu tests
    gpu_files = sorted(str(p.relative_to(ROOT)) for p in (ROOT / "tests").glob("test_*.py")
                       if re.search(r"pytest\.mark\.gpu\b", p.read_text()))
    assert gpu_files
    full = subprocess.run(cmd + gpu_files, cwd=ROOT, capture_output=True, text=True, timeout=300,
                          env={**env, "PYTHONPATH": str(ROOT)})
    assert full.returncode == 0, full.stdout[-3000:]
    want = _collected(full.stdout)
    assert want, full.stdout[-2000:]
    assert _collected(hidden.stdout) == want
