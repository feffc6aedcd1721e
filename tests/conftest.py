"""pytest configuration: pick a real GPU or Numba's CUDA simulator once, before anything imports numba.cuda.

Numba decides at ``import numba.cuda`` whether ``numba.cuda`` is the real
target or the CUDA simulator (``NUMBA_ENABLE_CUDASIM=1``), for the whole
process.  So the choice is made here, when pytest loads this file -- before
any test module is imported:

* ``NUMBA_ENABLE_CUDASIM`` already set (to anything but ``0``): the simulator,
  as asked.  GPU tests are skipped.
* otherwise, is there a usable GPU?  First a cheap look for the CUDA driver
  library (no driver: no GPU, and no subprocess); if one is found, a
  subprocess asks ``numba.cuda.is_available()`` -- in a subprocess so that this
  process can still choose the simulator if the answer is no.
* no GPU: ``NUMBA_ENABLE_CUDASIM=1`` is set here, the simulator suite
  (``tests/gpu_backend/test_gpu_backend.py``) runs, and tests marked ``gpu`` are skipped.
* a GPU: ``numba.cuda`` stays real; ``pytest -m gpu`` runs the device suite
  (``tests/gpu_backend/test_gpu_backend_device.py``), and ``tests/gpu_backend/test_gpu_backend.py`` runs
  on the device too, except the tests marked ``cudasim`` (they check the
  simulator itself).  ``NUMBA_ENABLE_CUDASIM=1 pytest tests/gpu_backend/test_gpu_backend.py``
  runs the simulator suite on a GPU machine.

``ASTITCH_NO_GPU=1`` forces the simulator even where a GPU is present.
"""
from __future__ import annotations

import ctypes.util
import os
import subprocess
import sys

import malloc_policy

# every test process (xdist workers load this file too), before numpy is imported: freed memory reused, not
# zeroed again (the real-size checks spent a third of their time in the kernel doing it; tests/malloc_policy.py)
malloc_policy.keep_freed_memory()

import pytest  # noqa: E402
from hypothesis import HealthCheck, settings  # noqa: E402

# Hypothesis profiles.  ``ci`` (the default) keeps the property suite (tests/test_random_graphs.py) at 100
# examples per test, a few hundred in all; ``thorough`` runs 2000 per test (thousands in all, about an hour):
#     HYPOTHESIS_PROFILE=thorough python -m pytest tests/test_random_graphs.py
# Tests that set their own max_examples keep it under either profile.  ``ci`` is derandomized: the same
# examples on every run, so a CI result is reproducible; ``thorough`` draws new ones every run (that is
# where new bugs are found: run it, and turn what it finds into regression tests).
# ``ci`` keeps no example database (derandomized runs have nothing to replay, and parallel workers must not
# write into the tree).
settings.register_profile("ci", max_examples=100, deadline=None, derandomize=True, database=None)
settings.register_profile("thorough", max_examples=2000, deadline=None,
                          suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large])
# ``fast``: what the fast tier (``-m "not slow"``) loads when no profile is asked for (pytest_configure below):
# 30 derandomized examples per test (the full tier's ``ci`` profile runs 100).
settings.register_profile("fast", max_examples=30, deadline=None, derandomize=True, database=None)
settings.load_profile(os.environ.get("HYPOTHESIS_PROFILE", "ci"))


def _gpu_present() -> bool:
    if os.environ.get("NUMBA_ENABLE_CUDASIM", "0") not in ("", "0"):
        return False
    if os.environ.get("ASTITCH_NO_GPU", "0") not in ("", "0"):
        return False
    if not (ctypes.util.find_library("cuda") or os.path.exists("/dev/nvidiactl")):
        return False
    from gpu_backend.machine.toolchain import cuda_home_for_numba     # no numba import: safe before the choice
    home = cuda_home_for_numba()           # a GPU image with its toolkit in /usr/local/cuda and no NVVM wheel
    if home:
        os.environ["CUDA_HOME"] = home     # numba-cuda (this process and the probe below) finds NVVM there
    try:
        r = subprocess.run([sys.executable, "-c", "from numba import cuda; print(cuda.is_available())"],
                           capture_output=True, text=True, timeout=300)
    except (OSError, subprocess.TimeoutExpired):
        return False
    return r.returncode == 0 and r.stdout.strip().endswith("True")


HAS_GPU = _gpu_present()
if not HAS_GPU:
    if "numba.cuda" in sys.modules and os.environ.get("NUMBA_ENABLE_CUDASIM", "0") in ("", "0"):
        raise RuntimeError("numba.cuda was imported before tests/conftest.py could select the CUDA simulator; "
                           "run with NUMBA_ENABLE_CUDASIM=1")
    os.environ["NUMBA_ENABLE_CUDASIM"] = "1"


def pytest_configure(config):
    if "HYPOTHESIS_PROFILE" not in os.environ and "not slow" in (config.getoption("markexpr", "") or ""):
        settings.load_profile("fast")          # before the test modules are imported (they read max_examples)
    config.addinivalue_line("markers", "gpu: needs a real CUDA GPU (skipped without one)")
    config.addinivalue_line("markers", "cudasim: checks Numba's CUDA simulator itself (skipped on a real GPU)")
    if hasattr(config.option, "loadscopereorder"):
        config.option.loadscopereorder = False  # pytest-xdist hands out files in the order set below


@pytest.hookimpl(trylast=True)
def pytest_runtest_teardown(item, nextitem):
    """After a module's last test (its fixtures are gone by now): the heap's free memory back to the kernel."""
    if nextitem is None or getattr(nextitem, "module", None) is not getattr(item, "module", None):
        malloc_policy.trim()


def pytest_report_header(config):
    return ("gpu_backend: real CUDA GPU (gpu tests run)" if HAS_GPU else
            "gpu_backend: no GPU -> Numba CUDA simulator (NUMBA_ENABLE_CUDASIM=1); gpu tests skipped")


#: files a process must run first: the real-size checks hold the suite's peak memory (3.3 GB at 8192x32000),
#: and a worker that ran other files before them also holds what those imported (torch, JAX, streamlit: about
#: 1 GB more, a 4.4 GB peak)
RUN_FIRST = ("tests/test_real_sizes.py",)


def _file_order(items) -> None:
    """Files in the order pytest-xdist's ``--dist loadfile`` hands them out (``loadscopereorder`` is off,
    pytest_configure): :data:`RUN_FIRST`, then the others by their count of tests, most first (xdist's own
    order); within a file, pytest's order."""
    files: dict = {}
    for item in items:
        files.setdefault(item.nodeid.split("::")[0], []).append(item)
    first = [f for f in RUN_FIRST if f in files]
    rest = sorted((f for f in files if f not in first), key=lambda f: -len(files[f]))
    items[:] = [item for f in first + rest for item in files[f]]


def pytest_collection_modifyitems(config, items):
    _file_order(items)
    sim = os.environ.get("NUMBA_ENABLE_CUDASIM", "0") not in ("", "0")
    no_gpu = pytest.mark.skip(reason="needs a CUDA GPU: numba.cuda.is_available() is False here "
                                     "(the simulator suite tests/gpu_backend/test_gpu_backend.py runs instead)")
    not_sim = pytest.mark.skip(reason="checks the CUDA simulator; set NUMBA_ENABLE_CUDASIM=1 to run it")
    for item in items:
        if item.get_closest_marker("gpu") is not None and not HAS_GPU:
            item.add_marker(no_gpu)
        if item.get_closest_marker("cudasim") is not None and not sim:
            item.add_marker(not_sim)
