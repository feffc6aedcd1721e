"""The gate of every test that needs NVIDIA's disassembler: skip where the toolchain is missing, fail in CI.

ptxas and nvdisasm come with the ``test`` extra (pip wheels), so CI (``CI`` set) always has them: a missing
tool there is a broken install, not a reason to skip.  Elsewhere (a developer's machine without the extra)
the test skips and says which tool is missing.
"""
from __future__ import annotations

import os

import pytest


def require_disassembler() -> None:
    """Skip (fail in CI) unless ptxas and nvdisasm are both available."""
    from gpu_backend.machine import toolchain
    if toolchain.available() and toolchain.find().nvdisasm:
        return
    msg = f"NVIDIA toolchain or nvdisasm missing: {toolchain.missing_reason() or 'no nvdisasm'}"
    if os.environ.get("CI"):
        pytest.fail(msg + " (CI installs the test extra, so this must not happen)")
    pytest.skip(msg)
