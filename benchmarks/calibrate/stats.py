"""Statistics, small and exact so the tests can check them by hand: ranks, Spearman, relative errors."""
from __future__ import annotations

import math

import numpy as np


def ranks(values) -> np.ndarray:
    """1-based ranks, ties given their average rank (as Spearman's rho wants)."""
    v = np.asarray(values, dtype=float)
    order = np.argsort(v, kind="mergesort")
    r = np.empty(len(v))
    i = 0
    while i < len(v):
        j = i
        while j + 1 < len(v) and v[order[j + 1]] == v[order[i]]:
            j += 1
        r[order[i:j + 1]] = (i + j) / 2 + 1
        i = j + 1
    return r


def spearman(x, y) -> float:
    """Spearman's rank correlation: Pearson's r of the ranks (NaN with < 2 points or a constant side)."""
    x, y = np.asarray(x, float), np.asarray(y, float)
    if len(x) != len(y):
        raise ValueError(f"spearman: {len(x)} vs {len(y)} values")
    if len(x) < 2:
        return float("nan")
    rx, ry = ranks(x), ranks(y)
    rx, ry = rx - rx.mean(), ry - ry.mean()
    den = math.sqrt(float((rx * rx).sum() * (ry * ry).sum()))
    return float((rx * ry).sum() / den) if den else float("nan")


def relative_errors(pred, meas) -> np.ndarray:
    """|pred - meas| / meas, element by element."""
    pred, meas = np.asarray(pred, float), np.asarray(meas, float)
    return np.abs(pred - meas) / meas


def median_abs_rel_error(pred, meas) -> float:
    e = relative_errors(pred, meas)
    return float(np.median(e)) if len(e) else float("nan")


def same_fastest(groups: dict) -> tuple[int, int]:
    """``groups``: case -> {strategy: (predicted, measured)}; (cases where the argmins agree, cases)."""
    agree = total = 0
    for rows in groups.values():
        if len(rows) < 2:
            continue
        total += 1
        best_pred = min(rows, key=lambda s: rows[s][0])
        best_meas = min(rows, key=lambda s: rows[s][1])
        agree += best_pred == best_meas
    return agree, total
