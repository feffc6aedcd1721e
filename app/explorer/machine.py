"""The Code view's machine code: each kernel's PTX and SASS with ptxas's numbers, compiled in a fresh
process (``explorer.machine_worker``) and cached per plan.  Compiler Explorer's idea -- the source and
what the compiler made of it side by side -- with NVIDIA's real compiler and no GPU."""
from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import streamlit as st

APP = Path(__file__).resolve().parents[1]
#: how to get the compiler chain the pane needs (it is not part of the ``app`` extra)
INSTALL = ("pip install 'numba-cuda[cu12]' nvidia-cuda-nvdisasm (NVIDIA's NVVM, ptxas, nvJitLink and nvdisasm from "
           "the package index; no GPU), or pip install -e '.[test]'")


@st.cache_data(max_entries=32, show_spinner=False)
def machine_code(plan_json: str) -> dict:
    """``{"arch", "kernels": [...]}`` from the worker, or ``{"error": why}``."""
    env = {k: v for k, v in os.environ.items() if k != "NUMBA_ENABLE_CUDASIM"}    # the real numba.cuda
    env["PYTHONPATH"] = os.pathsep.join([str(APP), str(APP.parent), env.get("PYTHONPATH", "")])
    try:
        r = subprocess.run([sys.executable, "-m", "explorer.machine_worker"], input=plan_json, text=True,
                           capture_output=True, env=env, cwd=APP, timeout=600)
    except subprocess.TimeoutExpired:
        return {"error": "compiling took more than 10 minutes"}
    lines = r.stdout.strip().splitlines()
    if r.returncode != 0 or not lines:
        return {"error": (r.stderr.strip().splitlines() or ["the compiler process failed"])[-1]}
    return json.loads(lines[-1])
