"""Validation: every output against the numpy reference (relative L2 error, NaN check)."""
from __future__ import annotations

from benchmarks.validation import Validator

from .common import REL_TOL


def compare(outputs: list, reference: list, names: list) -> dict:
    """Relative L2 error per output (float64 arithmetic), NaN/shape checks; ok if all <= REL_TOL.

    One-off form of :class:`benchmarks.validation.Validator` (a case prepares one and checks every run)."""
    return Validator(reference, names, REL_TOL).check(outputs)
