"""What differs between numba-cuda releases, asked in one place.

The backend needs one fact from Numba's configuration: is the CUDA simulator on
(``NUMBA_ENABLE_CUDASIM=1`` when ``numba.cuda`` was imported)?  Recent
numba-cuda releases keep their configuration in ``numba.cuda.core.config``;
older ones (what a GPU image may ship: its version is not ours to choose) only
have Numba's own ``numba.core.config``.  Both carry ``ENABLE_CUDASIM``, so
:func:`numba_config` returns whichever exists and every module asks
:func:`cudasim_enabled` instead of importing a release-specific path.

The other way round, a numba-cuda release can name NumPy functions that a newer
NumPy has removed: numba-cuda 0.30.4 on the GPU image (NumPy 2.5.2) looks up
``np.row_stack`` (removed in NumPy 2.5; it was always ``np.vstack``) the first
time it compiles a kernel, and every compilation fails with an AttributeError.
:func:`restore_numpy_aliases` puts such removed aliases back, naming the very
function they always were; it runs when this module is imported, which the
backend and the benchmarks do before any kernel is compiled.
"""
from __future__ import annotations

import importlib

#: NumPy aliases removed in newer releases that some numba-cuda releases still look up: name -> what it was
REMOVED_NUMPY_ALIASES = {"row_stack": "vstack"}


def restore_numpy_aliases() -> list:
    """Put back the removed NumPy aliases of :data:`REMOVED_NUMPY_ALIASES`; returns the names restored."""
    import numpy as np
    restored = []
    for alias, target in REMOVED_NUMPY_ALIASES.items():
        if not hasattr(np, alias):
            setattr(np, alias, getattr(np, target))
            restored.append(alias)
    return restored


restore_numpy_aliases()

#: where the configuration lives, newest layout first
CONFIG_MODULES = ("numba.cuda.core.config", "numba.core.config")


def numba_config():
    """Numba's configuration module (the first of :data:`CONFIG_MODULES` that imports)."""
    for name in CONFIG_MODULES:
        try:
            module = importlib.import_module(name)
        except ImportError:
            continue
        if hasattr(module, "ENABLE_CUDASIM"):
            return module
    from astitch_sim.errors import AStitchError
    raise AStitchError(f"no Numba configuration module found (tried {', '.join(CONFIG_MODULES)}): "
                       "install numba and numba-cuda (pip install 'astitch-sim[gpu]')")


def cudasim_enabled() -> bool:
    """Is Numba's CUDA simulator active in this process?"""
    return bool(numba_config().ENABLE_CUDASIM)


__all__ = ["CONFIG_MODULES", "REMOVED_NUMPY_ALIASES", "numba_config", "cudasim_enabled", "restore_numpy_aliases"]
