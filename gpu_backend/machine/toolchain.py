"""Finding NVIDIA's compiler tools (no GPU needed) and caching what they produce.

Everything comes from the package index, in the ``test`` extra
(``pip install 'numba-cuda[cu12]' nvidia-cuda-nvdisasm``):

=============  =========================================  ============================================
tool           wheel                                      what it does here
=============  =========================================  ============================================
NVVM           ``nvidia-cuda-nvcc-cu12`` (numba-cuda)     Numba's LLVM IR -> PTX (``compile_ptx``)
``ptxas``      ``nvidia-cuda-nvcc-cu12``                  PTX -> machine code (SASS) for one ``sm_XX``;
                                                          ``-v`` reports registers, spills, stack, shared
nvJitLink      ``nvidia-nvjitlink-cu12``                  links a kernel with a grid barrier to CUDA's
                                                          device runtime (``libcudadevrt.a``), as Numba
                                                          does before a cooperative launch
``nvdisasm``   ``nvidia-cuda-nvdisasm``                   machine code -> SASS text (the instruction
                                                          mix); CUDA 13's, which reads sm_75 and newer
                                                          (it refuses Volta's sm_70)
=============  =========================================  ============================================

The same files are found in CUDA 13's wheel layout (one ``nvidia/cu13`` folder), in a CUDA
toolkit (``$CUDA_HOME``, ``$CUDA_PATH``, ``/usr/local/cuda``: what a GPU machine's image has with
nvcc) and on ``PATH``, in that order (:data:`WHEEL_LAYOUT`, :data:`TOOLKIT_LAYOUT`; :func:`where` says
which file came from where).  :func:`cuda_home_for_numba` says which toolkit to export as
``CUDA_HOME`` where no wheel brings NVVM (numba-cuda looks for it there).

:func:`find` returns a :class:`Toolchain` or raises :class:`ToolchainMissing`
(an :class:`~astitch_sim.AStitchError`) naming what is missing and the command
that installs it; :func:`available` answers yes/no for tests and front doors.

Results are cached on disk (:func:`cache_dir`: ``$ASTITCH_MACHINE_CACHE``, default
``<tmp>/astitch_machine_code``), keyed by the input text, the target, the flags
and the tool's version, so a second run of the explorer or of CI costs a file read.
"""
from __future__ import annotations

import functools
import hashlib
import json
import os
import re
import shutil
import subprocess
import tempfile
from dataclasses import dataclass
from pathlib import Path
from typing import Optional

from astitch_sim.errors import AStitchError

INSTALL = "pip install 'numba-cuda[cu12]' nvidia-cuda-nvdisasm   (or: pip install -e '.[test]')"


class ToolchainMissing(AStitchError):
    """NVIDIA's compiler tools are not installed (they come from the package index; no GPU needed)."""


@dataclass(frozen=True)
class Toolchain:
    ptxas: str                   # path of the ptxas binary
    ptxas_version: str           # e.g. "CUDA 12.9.86"
    cudadevrt: str               # libcudadevrt.a, linked into kernels with a grid barrier
    nvjitlink_version: str       # e.g. "nvJitLink 12.9"
    nvdisasm: Optional[str]      # None: no disassembler (the instruction mix is skipped, saying so)
    nvdisasm_version: str = ""

    @property
    def describe(self) -> str:
        dis = f"nvdisasm {self.nvdisasm_version}" if self.nvdisasm else "no nvdisasm"
        return f"ptxas {self.ptxas_version}, {self.nvjitlink_version}, {dis}"


def _first(candidates) -> Optional[str]:
    for c in candidates:
        if c and Path(c).is_file() and os.access(c, os.R_OK):
            return str(c)
    return None


def _nvidia_dirs() -> list:
    """``site-packages/nvidia`` of every importable ``nvidia`` namespace package."""
    try:
        import nvidia
    except ImportError:
        return []
    return [Path(p) for p in getattr(nvidia, "__path__", [])]


#: where each file lives, relative to a ``site-packages/nvidia`` folder: CUDA 12 wheels give every component
#: its own folder (``cuda_nvcc``, ``cuda_runtime``), CUDA 13 wheels share one ``cu13`` folder
WHEEL_LAYOUT = {
    "ptxas": ("cuda_nvcc/bin/ptxas", "cu13/bin/ptxas"),
    "cudadevrt": ("cuda_runtime/lib/libcudadevrt.a", "cu13/lib/libcudadevrt.a", "cu13/lib64/libcudadevrt.a"),
    "nvvm": ("cuda_nvcc/nvvm/lib64/libnvvm.so", "cu13/nvvm/lib64/libnvvm.so", "cu13/lib/libnvvm.so"),
    "libdevice": ("cuda_nvcc/nvvm/libdevice/libdevice.10.bc", "cu13/nvvm/libdevice/libdevice.10.bc"),
    "nvdisasm": ("cu13/bin/nvdisasm", "cuda_nvdisasm/bin/nvdisasm"),
}
#: the same files relative to a CUDA toolkit folder (``$CUDA_HOME``, ``/usr/local/cuda``: what nvcc comes with)
TOOLKIT_LAYOUT = {
    "ptxas": ("bin/ptxas",),
    "cudadevrt": ("lib64/libcudadevrt.a", "targets/x86_64-linux/lib/libcudadevrt.a", "lib/libcudadevrt.a"),
    "nvvm": ("nvvm/lib64/libnvvm.so",),
    "libdevice": ("nvvm/libdevice/libdevice.10.bc",),
    "nvdisasm": ("bin/nvdisasm",),
}
#: found on ``PATH`` as a last resort
ON_PATH = ("ptxas", "nvdisasm")
#: where a CUDA toolkit is usually installed when no variable names one
DEFAULT_TOOLKITS = ("/usr/local/cuda",)


def toolkit_dirs() -> list:
    """CUDA toolkit folders to search, in order: ``$CUDA_HOME``, ``$CUDA_PATH``, :data:`DEFAULT_TOOLKITS`."""
    named = [os.environ.get("CUDA_HOME"), os.environ.get("CUDA_PATH"), *DEFAULT_TOOLKITS]
    out = []
    for d in named:
        if d and Path(d) not in out:
            out.append(Path(d))
    return out


def locate(what: str, roots=None, toolkits=None) -> Optional[str]:
    """The path of ``what`` (a key of :data:`WHEEL_LAYOUT`): pip wheels first, then toolkit folders, then PATH.

    ``roots`` (``site-packages/nvidia`` folders) and ``toolkits`` default to this machine's."""
    roots = _nvidia_dirs() if roots is None else [Path(r) for r in roots]
    toolkits = toolkit_dirs() if toolkits is None else [Path(t) for t in toolkits]
    found = _first([r / rel for r in roots for rel in WHEEL_LAYOUT[what]] +
                   [t / rel for t in toolkits for rel in TOOLKIT_LAYOUT[what]])
    if found is None and what in ON_PATH:
        found = shutil.which(what)
    return found


def where(roots=None, toolkits=None) -> dict:
    """Every file of the toolchain and where it was found (None: nowhere): what the GPU probe reports."""
    return {what: locate(what, roots, toolkits) for what in WHEEL_LAYOUT}


def cuda_home_for_numba(roots=None, toolkits=None) -> Optional[str]:
    """The toolkit folder to export as ``CUDA_HOME`` before ``numba.cuda`` is imported, or None.

    numba-cuda finds NVVM and libdevice in a pip wheel or under ``CUDA_HOME``; an image whose toolkit
    lives in ``/usr/local/cuda`` and that has no NVVM wheel (nvrtc and nvJitLink come as wheels) must
    name it.  None when ``CUDA_HOME`` is already set or a wheel has NVVM."""
    if os.environ.get("CUDA_HOME"):
        return None
    roots = _nvidia_dirs() if roots is None else [Path(r) for r in roots]
    if locate("nvvm", roots, toolkits=[]):
        return None
    toolkits = toolkit_dirs() if toolkits is None else [Path(t) for t in toolkits]
    for t in toolkits:
        if locate("nvvm", [], [t]) and locate("libdevice", [], [t]):
            return str(t)
    return None


def _version(binary: str) -> str:
    out = subprocess.run([binary, "--version"], capture_output=True, text=True, timeout=60).stdout
    m = re.search(r"release [\d.]+, V([\d.]+)", out)
    return f"CUDA {m.group(1)}" if m else out.strip().splitlines()[-1] if out.strip() else "unknown"


@functools.lru_cache(maxsize=1)
def _find() -> Toolchain:
    ptxas = locate("ptxas")
    if ptxas is None:
        raise ToolchainMissing(f"ptxas (NVIDIA's PTX assembler) not found in a pip wheel, $CUDA_HOME, "
                               f"/usr/local/cuda or PATH; install it: {INSTALL}")
    devrt = locate("cudadevrt")
    if devrt is None:
        raise ToolchainMissing(f"libcudadevrt.a (CUDA's device runtime, needed to link grid barriers) not found; "
                               f"install it: {INSTALL}")
    try:
        from cuda.bindings import nvjitlink
        major, minor = nvjitlink.version()
    except Exception as e:          # noqa: BLE001 - any failure to load the library means "missing"
        raise ToolchainMissing(f"nvJitLink (links grid barriers to the device runtime) cannot be loaded "
                               f"({type(e).__name__}: {e}); install it: {INSTALL}") from None
    nvdisasm = locate("nvdisasm")
    return Toolchain(ptxas=ptxas, ptxas_version=_version(ptxas), cudadevrt=devrt,
                     nvjitlink_version=f"nvJitLink {major}.{minor}", nvdisasm=nvdisasm,
                     nvdisasm_version=_version(nvdisasm) if nvdisasm else "")


def find() -> Toolchain:
    """The installed toolchain; raises :class:`ToolchainMissing` (saying how to install it) if absent."""
    return _find()


def available() -> bool:
    """True when :func:`find` succeeds (ptxas, nvJitLink and the device runtime are installed; NVVM comes
    in the same wheel set)."""
    try:
        find()
    except ToolchainMissing:
        return False
    return True


def missing_reason() -> str:
    """Why :func:`available` is False ('' when it is True): the message tests print when they skip."""
    try:
        find()
    except ToolchainMissing as e:
        return str(e)
    return ""


# -- the disk cache ----------------------------------------------------------------------

def cache_dir() -> Path:
    d = Path(os.environ.get("ASTITCH_MACHINE_CACHE") or Path(tempfile.gettempdir()) / "astitch_machine_code")
    d.mkdir(parents=True, exist_ok=True)
    return d


def cache_key(*parts) -> str:
    h = hashlib.sha256()
    for p in parts:
        h.update(p if isinstance(p, bytes) else str(p).encode())
        h.update(b"\0")
    return h.hexdigest()[:40]


def cache_get(key: str) -> Optional[dict]:
    f = cache_dir() / f"{key}.json"
    try:
        return json.loads(f.read_text())
    except (OSError, ValueError):
        return None


def cache_put(key: str, value: dict) -> None:
    d = cache_dir()
    tmp = d / f".{key}.{os.getpid()}.tmp"
    tmp.write_text(json.dumps(value))
    os.replace(tmp, d / f"{key}.json")        # atomic: concurrent runs never read half a file
