"""What would break the GPU window (issue 29), checked without a GPU.

Each test here stands for one thing the lent GPU machine's image does differently
from this one (an older numba-cuda, CUDA 13 wheels, the toolkit in /usr/local/cuda,
no astitch_sim installed) or for a measurement mistake the runbook must not make.
They run in Numba's CUDA simulator and on the CPU; none needs a GPU.
"""
from __future__ import annotations

import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent


# -- 1. numba-cuda without numba.cuda.core.config ------------------------------------------------

def test_no_module_imports_the_recent_only_numba_config_path():
    """Only gpu_backend/numba_compat.py may name numba.cuda.core (older numba-cuda releases lack it)."""
    offenders = []
    for top in ("gpu_backend", "benchmarks", "astitch_sim", "app"):
        for p in sorted((ROOT / top).rglob("*.py")):
            if p.name == "numba_compat.py":
                continue
            for i, line in enumerate(p.read_text().splitlines(), 1):
                if "numba.cuda.core" in line and ("import" in line or "from" in line):
                    offenders.append(f"{p.relative_to(ROOT)}:{i}: {line.strip()}")
    assert not offenders, "use gpu_backend.numba_compat instead:\n" + "\n".join(offenders)


def test_simulator_flag_read_where_numba_cuda_core_config_is_missing(monkeypatch):
    """An older numba-cuda: ``numba.cuda.core.config`` cannot be imported; the flag comes from numba.core."""
    import numba.cuda.core as core

    from gpu_backend import launch, numba_compat
    monkeypatch.delattr(core, "config", raising=False)
    monkeypatch.setitem(sys.modules, "numba.cuda.core.config", None)     # import raises ImportError
    with pytest.raises(ImportError):
        from numba.cuda.core import config  # noqa: F401
    import numba.core.config
    assert numba_compat.numba_config() is numba.core.config
    assert launch.simulator() is True                 # tests run in the simulator (tests/conftest.py)
