"""Provenance of a run: versions, the git commit, a digest of the sources, nvidia-smi, the device's preset."""
from __future__ import annotations

import datetime as _dt
import hashlib
import os
import platform
import socket
import subprocess
import sys
from typing import Optional

from .common import ROOT, SIM_NOTE


def _version(dist: str) -> Optional[str]:
    try:
        from importlib.metadata import version
        return version(dist)
    except Exception:
        return None


def _git_commit() -> Optional[str]:
    if os.environ.get("ASTITCH_GIT_COMMIT"):
        return os.environ["ASTITCH_GIT_COMMIT"]
    try:
        out = subprocess.run(["git", "-C", ROOT, "rev-parse", "HEAD"], capture_output=True, text=True, timeout=10)
        if out.returncode == 0:
            dirty = subprocess.run(["git", "-C", ROOT, "status", "--porcelain", "--untracked-files=no"],
                                   capture_output=True, text=True, timeout=10).stdout.strip()
            return out.stdout.strip() + ("+dirty" if dirty else "")
    except (OSError, subprocess.TimeoutExpired):
        pass
    return None


def source_digest() -> str:
    """sha256 over the sources that decide what ran (works where there is no .git, e.g. a device machine)."""
    h = hashlib.sha256()
    for top in ("astitch_sim", "gpu_backend", "benchmarks"):
        base = os.path.join(ROOT, top)
        for dirpath, dirnames, files in sorted(os.walk(base)):
            dirnames[:] = sorted(d for d in dirnames if d not in ("__pycache__", "results"))
            for f in sorted(files):
                if f.endswith(".py"):
                    p = os.path.join(dirpath, f)
                    h.update(os.path.relpath(p, ROOT).encode())
                    with open(p, "rb") as fh:
                        h.update(fh.read())
    return h.hexdigest()[:16]


def _nvidia_smi() -> dict:
    try:
        out = subprocess.run(["nvidia-smi", "--query-gpu=name,driver_version,memory.total,clocks.max.sm,"
                              "clocks.max.mem,power.limit", "--format=csv,noheader"],
                             capture_output=True, text=True, timeout=30)
        if out.returncode == 0 and out.stdout.strip():
            keys = ["name", "driver_version", "memory_total", "max_sm_clock", "max_mem_clock", "power_limit"]
            return dict(zip(keys, (v.strip() for v in out.stdout.strip().splitlines()[0].split(","))))
    except (OSError, subprocess.TimeoutExpired):
        pass
    return {}


def provenance(mode: str, argv: list, commit: Optional[str]) -> dict:
    from numba import cuda
    p = {"date": _dt.datetime.now(_dt.timezone.utc).isoformat(timespec="seconds"),
         "command": " ".join([os.path.basename(sys.executable)] + list(argv)),
         "git_commit": commit or _git_commit() or "unknown (no git here; pass --commit)",
         "source_digest": source_digest(),
         "host": socket.gethostname(), "platform": platform.platform(), "python": platform.python_version(),
         "versions": {d: _version(d) for d in ("numpy", "scipy", "numba", "numba-cuda", "cuda-python",
                                               "cuda-bindings", "jax", "jaxlib", "torch", "triton",
                                               "matplotlib", "astitch-sim")}}
    if mode == "simulator":
        p.update(device=f"none ({SIM_NOTE})", driver=None, cuda_driver_version=None, cuda_runtime_version=None)
        return p
    dev = cuda.get_current_device()
    name = dev.name.decode() if isinstance(dev.name, bytes) else str(dev.name)
    p["device"] = name
    p["compute_capability"] = list(dev.compute_capability)
    for attr, key in (("MULTIPROCESSOR_COUNT", "sms"), ("L2_CACHE_SIZE", "l2_bytes"),
                      ("CLOCK_RATE", "sm_clock_khz"), ("MEMORY_CLOCK_RATE", "mem_clock_khz"),
                      ("GLOBAL_MEMORY_BUS_WIDTH", "bus_width_bits")):
        try:
            p[key] = int(getattr(dev, attr))
        except Exception:
            p[key] = None
    try:
        from numba.cuda.cudadrv.driver import driver
        p["cuda_driver_version"] = ".".join(map(str, driver.get_version()))
    except Exception:
        p["cuda_driver_version"] = None
    try:
        p["cuda_runtime_version"] = ".".join(map(str, cuda.runtime.get_version()))
    except Exception:
        p["cuda_runtime_version"] = None
    smi = _nvidia_smi()
    p["driver"] = smi.get("driver_version")
    p["nvidia_smi"] = smi
    return p


def detect_preset(device_name: str) -> Optional[str]:
    name = device_name.upper()
    for preset in ("H200", "H100", "A100", "V100"):
        if preset in name:
            return preset
    return None

