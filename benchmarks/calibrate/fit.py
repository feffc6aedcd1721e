"""The fit: least squares on the logs of the parameters, with how well the data pins each one down."""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Optional

import numpy as np

from .common import DEFAULT_PARAMS, PARAM_BOUNDS
from .model import current_constants, predict_all


@dataclass
class Fit:
    params: dict                         # fitted values
    initial: dict
    sensitivity: dict                    # |d log(pred) / d log(param)| summed over points: ~0 = not identified
    residual_rms: float                  # RMS of log(pred / meas) at the fit
    points: int
    success: bool
    message: str
    at_bound: list = field(default_factory=list)
    frozen: list = field(default_factory=list)     # no effect on any timed point: kept at the initial value


def sample_points(samples):
    """(sample index, kernel index or None, measured us): per kernel where timed, else per plan."""
    pts = []
    for i, s in enumerate(samples):
        if s.measured_us and all(m is not None and m > 0 for m in s.measured_us) \
                and len(s.measured_us) == len(s.stats):
            pts += [(i, j, float(m)) for j, m in enumerate(s.measured_us)]
        elif s.measured_total_us and s.measured_total_us > 0:
            pts.append((i, None, float(s.measured_total_us)))
    return pts


def fit_constants(samples: list, params=DEFAULT_PARAMS, initial: Optional[dict] = None,
                  bounds: Optional[dict] = None) -> Fit:
    """Least squares on log(predicted / measured) over every timed kernel of every sample.

    ``bounds``: name -> (low, high) for constants :data:`PARAM_BOUNDS` does not know (default: it)."""
    bounds = {**PARAM_BOUNDS, **(bounds or {})}
    from scipy.optimize import least_squares
    if not samples:
        raise ValueError("no samples to fit")
    gpu = samples[0].gpu
    params = list(params)
    unknown = [p for p in params if p not in bounds]
    if unknown:
        raise ValueError(f"cannot fit {unknown}; fittable: {', '.join(bounds)}")
    start = current_constants(gpu)
    if initial:
        start.update(initial)
    lo = np.log([bounds[p][0] for p in params])
    hi = np.log([bounds[p][1] for p in params])
    x0 = np.clip(np.log([float(start[p]) for p in params]), lo + 1e-9, hi - 1e-9)
    pts = sample_points(samples)
    if len(pts) < len(params):
        raise ValueError(f"{len(pts)} timed points cannot fit {len(params)} parameters")
    meas = np.array([m for _, _, m in pts])

    def model(x):
        values = dict(zip(params, np.exp(x)))
        preds = predict_all(samples, values)
        out = np.array([sum(preds[i]) if j is None else preds[i][j] for i, j, _ in pts])
        return np.log(np.maximum(out, 1e-9))

    # which parameters does the data see at all?  (e.g. no kernel with a grid barrier: grid_barrier_us)
    base = model(x0)
    sens = np.zeros(len(params))
    for i in range(len(params)):
        x = x0.copy()
        x[i] += 1e-3
        sens[i] = float(np.abs(model(x) - base).sum() / 1e-3)
    free = [i for i in range(len(params)) if sens[i] > 1e-6]
    frozen = [params[i] for i in range(len(params)) if i not in free]
    x_best = x0.copy()
    res = None
    if free:
        def resid(xf):
            x = x0.copy()
            x[free] = xf
            return model(x) - np.log(meas)

        res = least_squares(resid, x0[free], bounds=(lo[free], hi[free]), x_scale=1.0, diff_step=1e-4,
                            max_nfev=400 * len(free))
        x_best[free] = res.x
    fitted = dict(zip(params, (float(v) for v in np.exp(x_best))))
    for p in frozen:
        fitted[p] = float(start[p])
    final = model(x_best) - np.log(meas)
    at_bound = [params[i] for i in free if x_best[i] - lo[i] < 1e-3 or hi[i] - x_best[i] < 1e-3]
    return Fit(params=fitted, initial={p: float(start[p]) for p in params},
               sensitivity=dict(zip(params, (float(v) for v in sens))),
               residual_rms=float(np.sqrt(np.mean(final ** 2))), points=len(pts),
               success=bool(res.success) if res is not None else False,
               message=str(res.message) if res is not None else "no parameter affects the data",
               at_bound=at_bound, frozen=frozen)
