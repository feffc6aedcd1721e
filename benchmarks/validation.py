"""Checking outputs against the reference: prepared once per case, computed in chunks or on the GPU.

A case's reference is checked against every plan and every baseline (nine runs per
case in the full suite).  Converting a 110M-element reference to float64, finding
its NaNs and its largest magnitude for every run cost minutes of a 2-core host
per suite (the Adam step alone 23 s per run).  :class:`Validator` does the
reference's part once per case, and each :meth:`Validator.check` one pass over
the output in chunks of :data:`CHUNK` elements (float64 arithmetic, no
whole-array float64 temporaries), or, where PyTorch sees a CUDA GPU, on the GPU
(the reference uploaded once, the arithmetic in float64 there).

The verdict per output is the same as ever: relative L2 error over the elements
where neither side is NaN, at most ``tol``; no NaN the reference does not have;
the largest element-wise relative error is reported beside it.
"""
from __future__ import annotations

import math

import numpy as np

#: elements per chunk of the CPU pass (32 MB of float64 per side)
CHUNK = 1 << 22
REL_TOL = 1e-4


class _NumpyPass:
    """Per output: sum of squared differences and of squared reference values, NaN counts, max relative error."""

    name = "numpy, float64 in chunks of %d elements" % CHUNK

    def __init__(self, refs):
        self.refs = [np.ascontiguousarray(r).reshape(-1) for r in refs]
        self.absmax = []
        for r in self.refs:
            m = 0.0
            for i in range(0, r.size, CHUNK):
                c = np.abs(r[i:i + CHUNK].astype(np.float64))
                c = c[~np.isnan(c)]
                if c.size:
                    m = max(m, float(c.max()))
            self.absmax.append(m)

    def stats(self, k: int, out) -> tuple:
        r, o = self.refs[k], np.ascontiguousarray(out).reshape(-1)
        floor = 1e-6 * (self.absmax[k] or 1.0)
        num = den = 0.0
        nan_o = nan_r = 0
        max_rel = 0.0
        for i in range(0, r.size, CHUNK):
            o64, r64 = o[i:i + CHUNK].astype(np.float64), r[i:i + CHUNK].astype(np.float64)
            no, nr = np.isnan(o64), np.isnan(r64)
            nan_o, nan_r = nan_o + int(no.sum()), nan_r + int(nr.sum())
            both = ~(no | nr)
            d, rr = o64[both] - r64[both], r64[both]
            num += float(np.dot(d, d))
            den += float(np.dot(rr, rr))
            if d.size:
                with np.errstate(divide="ignore", invalid="ignore"):
                    max_rel = max(max_rel, float(np.max(np.abs(d) / np.maximum(np.abs(rr), floor))))
        return num, den, nan_o, nan_r, max_rel


class _TorchCudaPass:
    """The same sums on the GPU through PyTorch (reference uploaded once; float64 arithmetic there)."""

    name = "torch on the GPU, float64"

    def __init__(self, refs, torch):
        self.torch = torch
        self.refs = [torch.from_numpy(np.ascontiguousarray(r).reshape(-1)).cuda() for r in refs]
        self.absmax = []
        for r in self.refs:
            r64 = r.double()
            fin = r64[~torch.isnan(r64)]
            self.absmax.append(float(fin.abs().max()) if fin.numel() else 0.0)

    def stats(self, k: int, out) -> tuple:
        torch = self.torch
        r64 = self.refs[k].double()
        o64 = torch.from_numpy(np.ascontiguousarray(out).reshape(-1)).cuda().double()
        no, nr = torch.isnan(o64), torch.isnan(r64)
        both = ~(no | nr)
        d, rr = o64[both] - r64[both], r64[both]
        floor = 1e-6 * (self.absmax[k] or 1.0)
        max_rel = float((d.abs() / rr.abs().clamp(min=floor)).max()) if d.numel() else 0.0
        return float((d * d).sum()), float((rr * rr).sum()), int(no.sum()), int(nr.sum()), max_rel

    def close(self):
        self.refs = []


def _torch_cuda():
    try:
        import torch
        return torch if torch.cuda.is_available() else None
    except Exception:            # noqa: BLE001 - no torch, or a torch without CUDA: the CPU pass
        return None


class Validator:
    """``Validator(reference, names).check(outputs)``: the verdict dict gpu_bench records per run.

    ``on_gpu``: use PyTorch's CUDA device when there is one (the runbook's default on a GPU)."""

    def __init__(self, reference: list, names: list, tol: float = REL_TOL, on_gpu: bool = False):
        self.names, self.tol = list(names), tol
        self.shapes = [tuple(np.shape(r)) for r in reference]
        torch = _torch_cuda() if on_gpu else None
        self.pass_ = _TorchCudaPass(reference, torch) if torch is not None else _NumpyPass(reference)
        self.checks = 0

    @property
    def method(self) -> str:
        return self.pass_.name

    def check(self, outputs: list) -> dict:
        self.checks += 1
        per = []
        ok = len(outputs) == len(self.shapes)
        for k, (name, out, shape) in enumerate(zip(self.names, outputs, self.shapes)):
            entry = {"output": name, "shape": list(shape)}
            if tuple(np.shape(out)) != shape:
                entry.update(ok=False, error=f"shape {list(np.shape(out))} != {list(shape)}")
            else:
                num, den, nan_o, nan_r, max_rel = self.pass_.stats(k, out)
                rel = math.sqrt(num) / (math.sqrt(den) or 1.0)
                entry.update(rel_l2=rel, max_rel=max_rel, nan=nan_o, nan_reference=nan_r,
                             ok=bool(rel <= self.tol and nan_o <= nan_r and math.isfinite(rel)))
            ok = ok and entry["ok"]
            per.append(entry)
        return {"ok": bool(ok), "tolerance_rel_l2": self.tol, "outputs": per, "method": self.method,
                "max_rel_l2": max((e.get("rel_l2", float("inf")) for e in per), default=0.0)}

    def close(self):
        getattr(self.pass_, "close", lambda: None)()


__all__ = ["Validator", "CHUNK", "REL_TOL"]
