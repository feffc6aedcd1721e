"""What differs between numba-cuda releases, asked in one place.

The backend needs one fact from Numba's configuration: is the CUDA simulator on
(``NUMBA_ENABLE_CUDASIM=1`` when ``numba.cuda`` was imported)?  Recent
numba-cuda releases keep their configuration in ``numba.cuda.core.config``;
older ones (what a GPU image may ship: its version is not ours to choose) only
have Numba's own ``numba.core.config``.  Both carry ``ENABLE_CUDASIM``, so
:func:`numba_config` returns whichever exists and every module asks
:func:`cudasim_enabled` instead of importing a release-specific path.
"""
from __future__ import annotations

import importlib

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


__all__ = ["CONFIG_MODULES", "numba_config", "cudasim_enabled"]
