"""What the generator hands the runtime: each kernel's function, launch shape and array arguments.

The runtime (:mod:`gpu_backend.launch.plans`) decides nothing: it allocates exactly the
arrays a :class:`KernelSpec` lists (``ParamSpec.role`` says how: an uploaded input,
an output it copies back, scratch, split-reduction partials, a buffer pre-filled
with a reduce's init value) and launches with the spec's ``(grid, block)``.
"""
from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np

from .dtypes import STORAGE


@dataclass
class ParamSpec:
    """One array argument of a generated kernel, and how the runtime provides it."""
    name: str                 # identifier in the kernel's signature
    node: str                 # graph node whose elements it holds ('' for partials)
    role: str                 # input | output | scratch | partials
    shape: tuple
    dtype: str                # XLA dtype of the elements
    fill_from: str = ""       # pre-fill with this reduce's init value before launch (split atomic results)
    comment: str = ""

    @property
    def storage(self) -> np.dtype:
        return np.dtype(STORAGE[self.dtype])


@dataclass
class KernelSpec:
    """A generated kernel: its Python function name, launch shape and arguments."""
    index: int
    name: str                 # the plan's kernel name
    func: str                 # Python function name in the generated module
    kind: str                 # generated | library
    grid: int
    block: int
    cooperative: bool
    shared_bytes: int
    params: list = field(default_factory=list)


@dataclass
class GeneratedModule:
    source: str
    kernels: list             # KernelSpec, in plan order
