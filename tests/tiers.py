"""Which share of a wide test matrix the fast tier runs (README, "Testing").

The full tier (CI, ``.ci/run``) runs every case of every matrix.  The fast tier (``-m "not slow"``) must still
exercise every module and every strategy, in about three minutes on two cores, so the widest matrices -- each
strategy's plans run in Numba's CUDA simulator (every CUDA thread run as Python), each real-size model fixture
simulated under three strategies -- keep one share in the fast tier, chosen to cover every strategy and every
kind of kernel, and mark the rest ``slow``.  ``tests/test_test_tiers.py`` checks that each share still covers
what it claims.
"""
from __future__ import annotations

import pytest


def fast_share(cases, in_fast) -> list:
    """``cases`` as parametrize arguments: those ``in_fast(case)`` accepts run in both tiers, the others are
    marked ``slow`` (full tier only).  A case that is a tuple fills several arguments, as in parametrize."""
    out = []
    for case in cases:
        if in_fast(case):
            out.append(case)
        else:
            out.append(pytest.param(*(case if isinstance(case, tuple) else (case,)), marks=pytest.mark.slow))
    return out


def is_fast(param) -> bool:
    """Whether a parametrize argument built by :func:`fast_share` runs in the fast tier."""
    return not any(m.name == "slow" for m in getattr(param, "marks", ()))


def values(param) -> tuple:
    """The argument values of a parametrize argument (plain, or a ``pytest.param``)."""
    v = getattr(param, "values", param)
    return v if isinstance(v, tuple) else (v,)
