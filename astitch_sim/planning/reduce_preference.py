"""The ``reduce_scheme`` what-if: the reduction scheme every kernel the planners build prefers.

``asim.compile(..., reduce_scheme="tree")`` plans *with* the preferred scheme, it does not patch
a finished plan: ``compile`` runs the strategy's planner inside :func:`preferring`, and
``kernel_builder.assemble_kernel`` -- which every strategy calls to finish each kernel -- asks
:func:`preferred` which scheme to give each stage (``reduce_scheme.choose``: the preference where
the mapping allows it) **before** it places the kernel's values.  The order matters: the scheme
decides where a per-task value may live (``plan/task_registers.py``: a shuffle leaves the total
in every lane, so the value stays in registers; the tree leaves it on the task's first lane, so it
goes to shared memory behind a block barrier), and with it the barriers, the shared-memory layout,
the registers and every price the planners compare (launch search, never-behind).  So the what-if
plan is the plan the strategy would build with the paper's trees, options such as
``regional_stitching=False`` included, for every strategy alike.

A caller of ``assemble_kernel`` outside ``compile`` (a test, tutorial 8's autograder) passes
``reduce_scheme=`` to it instead, or gets the default, ``shuffle``.
"""
from __future__ import annotations

from contextlib import contextmanager
from contextvars import ContextVar
from typing import Iterator

from ..plan.vocabulary import ReduceScheme

_PREFERENCE: ContextVar = ContextVar("reduce_scheme", default=ReduceScheme.SHUFFLE)


@contextmanager
def preferring(scheme) -> Iterator[ReduceScheme]:
    """Within the ``with``, kernels assembled without an explicit ``reduce_scheme`` prefer ``scheme``."""
    prefer = ReduceScheme.parse(scheme, "reduce_scheme")
    token = _PREFERENCE.set(prefer)
    try:
        yield prefer
    finally:
        _PREFERENCE.reset(token)


def preferred() -> ReduceScheme:
    """The reduction scheme kernels assembled now prefer (``shuffle`` unless inside :func:`preferring`)."""
    return _PREFERENCE.get()
