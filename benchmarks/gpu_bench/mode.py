"""GPU or Numba's CUDA simulator: decided before ``numba.cuda`` is imported (it picks once per process)."""
from __future__ import annotations

import os
import subprocess
import sys
from typing import Optional

from .common import SIM_NOTE, log


def gpu_present() -> bool:
    """Is a CUDA GPU usable by numba?  Probed in a subprocess so this process can still pick the simulator."""
    if os.environ.get("NUMBA_ENABLE_CUDASIM") == "1":
        return False
    code = "from numba import cuda; import sys; sys.exit(0 if cuda.is_available() else 3)"
    try:
        return subprocess.run([sys.executable, "-c", code], capture_output=True, timeout=120).returncode == 0
    except (OSError, subprocess.TimeoutExpired):
        return False


def choose_mode(simulator: Optional[bool]) -> str:
    """'simulator' or 'gpu'; sets NUMBA_ENABLE_CUDASIM accordingly if numba.cuda is not imported yet."""
    if "numba.cuda" in sys.modules:          # too late to choose: use what this process has
        from numba import config
        sim = bool(getattr(config, "ENABLE_CUDASIM", 0))
        if simulator is False and sim:
            raise SystemExit("numba.cuda was imported in simulator mode; cannot switch to the GPU")
        if simulator and not sim:
            raise SystemExit("numba.cuda was imported without the simulator in this process; set "
                             "NUMBA_ENABLE_CUDASIM=1 before anything imports numba.cuda to use the simulator")
        return "simulator" if sim else "gpu"
    if simulator is None:
        simulator = not gpu_present()
        if simulator:
            log("no CUDA GPU found: running in Numba's CUDA simulator at tiny shapes (" + SIM_NOTE + ")")
    if simulator:
        os.environ["NUMBA_ENABLE_CUDASIM"] = "1"
    return "simulator" if simulator else "gpu"
