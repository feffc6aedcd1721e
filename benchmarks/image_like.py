"""Run a command as if on the GPU machine's image: the packages that image lacks are hidden.

    python -m benchmarks.image_like -- python -m pytest -m gpu --collect-only -q

The lent GPU machines run their own image (Python 3.12, torch, jax, numba, numba-cuda,
cupy, triton, scipy, matplotlib, hypothesis, pytest ...; see the device notes), not this
project's virtualenv: nothing can be installed there, and the repository travels alone.
Whatever the GPU window runs must therefore work without the packages only our
``test``/``app``/``tutorials`` extras bring.  :data:`IMAGE_LACKS` names them;
:func:`hide` writes, for each, a package that raises ``ModuleNotFoundError`` on import
(what a missing package raises, so ``pytest.importorskip`` skips it as it would there),
and :func:`image_like_env` puts that folder first on ``PYTHONPATH``.
"""
from __future__ import annotations

import os
import subprocess
import sys
import tempfile
from pathlib import Path

#: importable names our extras bring that the GPU image does not have
IMAGE_LACKS = ("nbformat", "nbclient", "ipykernel", "jupytext", "otter", "graphviz", "streamlit", "playwright")

ROOT = Path(__file__).resolve().parent.parent


def hide(folder, names=IMAGE_LACKS) -> Path:
    """Write one blocking package per name into ``folder``; returns the folder."""
    folder = Path(folder)
    for name in names:
        pkg = folder / name
        pkg.mkdir(parents=True, exist_ok=True)
        message = f"No module named {name!r} (hidden by benchmarks.image_like: the GPU image does not have it)"
        (pkg / "__init__.py").write_text(f"raise ModuleNotFoundError({message!r}, name={name!r})\n")
    return folder


def image_like_env(folder, names=IMAGE_LACKS, base=None) -> dict:
    """``base`` (default: this process's environment) with the hidden packages first on PYTHONPATH and the
    checkout after them (the image has no installed astitch_sim)."""
    env = dict(os.environ if base is None else base)
    hide(folder, names)
    env["PYTHONPATH"] = os.pathsep.join([str(folder), str(ROOT)])
    return env


def main(argv=None) -> int:
    import argparse
    ap = argparse.ArgumentParser(prog="python -m benchmarks.image_like", description=__doc__.split("\n\n")[0])
    ap.add_argument("command", nargs=argparse.REMAINDER,
                    help="the command (after --); default: python -m pytest -m gpu --collect-only -q")
    argv = ap.parse_args(sys.argv[1:] if argv is None else argv).command
    if argv and argv[0] == "--":
        argv = argv[1:]
    if not argv:
        argv = [sys.executable, "-m", "pytest", "-m", "gpu", "--collect-only", "-q", "-p", "no:cacheprovider"]
    with tempfile.TemporaryDirectory(prefix="image_like_") as d:
        return subprocess.run(argv, env=image_like_env(d), cwd=ROOT).returncode


if __name__ == "__main__":
    sys.exit(main())
