"""What every part of gpu_bench shares: the checkout's root, the results format, the simulator's label,
the validation tolerance, and progress on stderr."""
from __future__ import annotations

import os
import sys


#: the checkout: its git commit and a digest of its sources go into the provenance
ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


SIM_NOTE = "CUDA simulator, not GPU timing"
FORMAT = "astitch-sim gpu_bench 1"
REL_TOL = 1e-4            # relative L2 error per output (float32: far below this when right)


def log(msg: str) -> None:
    print(msg, file=sys.stderr, flush=True)
