"""Element types, named as XLA names them, and how numpy holds each one.

XLA computes float32 math in float32; so do we: every result is cast back to
its node's dtype after each op.  numpy has no bfloat16, so a ``bf16`` value
is held as a float32 array whose values are rounded to bfloat16 (8 bits of
mantissa, round-to-nearest-even) after every op -- the same numbers XLA's CPU
backend produces when it upcasts bf16 math to f32 and rounds each result.
"""
from __future__ import annotations

import numpy as np

from ..errors import AStitchError

#: XLA name -> (numpy storage dtype, bytes per element on the GPU, is floating point)
DTYPES: dict[str, tuple[np.dtype, int, bool]] = {
    "f64": (np.dtype(np.float64), 8, True),
    "f32": (np.dtype(np.float32), 4, True),
    "f16": (np.dtype(np.float16), 2, True),
    "bf16": (np.dtype(np.float32), 2, True),   # stored as f32, rounded to bf16
    "s64": (np.dtype(np.int64), 8, False),
    "s32": (np.dtype(np.int32), 4, False),
    "s16": (np.dtype(np.int16), 2, False),
    "s8": (np.dtype(np.int8), 1, False),
    "u64": (np.dtype(np.uint64), 8, False),
    "u32": (np.dtype(np.uint32), 4, False),
    "u16": (np.dtype(np.uint16), 2, False),
    "u8": (np.dtype(np.uint8), 1, False),
    "pred": (np.dtype(np.bool_), 1, False),
}

_NUMPY_TO_XLA = {np.dtype(np.float64): "f64", np.dtype(np.float32): "f32", np.dtype(np.float16): "f16",
                 np.dtype(np.int64): "s64", np.dtype(np.int32): "s32", np.dtype(np.int16): "s16",
                 np.dtype(np.int8): "s8", np.dtype(np.uint64): "u64", np.dtype(np.uint32): "u32",
                 np.dtype(np.uint16): "u16", np.dtype(np.uint8): "u8", np.dtype(np.bool_): "pred"}

ALIASES = {"float32": "f32", "float64": "f64", "float16": "f16", "bfloat16": "bf16", "int32": "s32",
           "int64": "s64", "int8": "s8", "int16": "s16", "uint8": "u8", "uint32": "u32", "bool": "pred"}


#: every name :func:`check_dtype` accepts -> its entry in DTYPES (the simulator asks about dtypes thousands of
#: times a run: one lookup each)
_ENTRY = {**{n: DTYPES[n] for n in DTYPES}, **{a: DTYPES[n] for a, n in ALIASES.items()}}


def check_dtype(name: str) -> str:
    """Return the canonical XLA dtype name, or raise AStitchError naming the known ones."""
    name = ALIASES.get(str(name), str(name))
    if name not in DTYPES:
        raise AStitchError(f"unsupported dtype {name!r}: use one of {', '.join(DTYPES)}")
    return name


def _entry(name) -> tuple:
    """DTYPES' entry for ``name`` (canonical or an alias), or check_dtype's error."""
    e = _ENTRY.get(name) if isinstance(name, str) else None
    return e if e is not None else DTYPES[check_dtype(name)]


def numpy_dtype(name: str) -> np.dtype:
    """The numpy dtype that holds values of XLA dtype ``name``."""
    return _entry(name)[0]


def itemsize(name: str) -> int:
    """Bytes per element on the device (bf16 is 2 even though we hold it as f32)."""
    return _entry(name)[1]


def is_float(name: str) -> bool:
    return _entry(name)[2]


def xla_name(np_dtype) -> str:
    """XLA name of a numpy dtype (float32 -> f32); bfloat16 arrays from ml_dtypes map to bf16."""
    dt = np.dtype(np_dtype)
    if dt.name == "bfloat16":
        return "bf16"
    if dt in _NUMPY_TO_XLA:
        return _NUMPY_TO_XLA[dt]
    raise AStitchError(f"numpy dtype {dt} has no XLA counterpart here; cast it to float32 or int32")


def round_to_bf16(a: np.ndarray) -> np.ndarray:
    """Round float32 values to the nearest bfloat16 (ties to even), kept as float32."""
    a = np.asarray(a, dtype=np.float32)
    shape = a.shape
    flat = np.ascontiguousarray(a).reshape(-1)
    bits = flat.view(np.uint32).astype(np.uint64)
    rounding = ((bits >> 16) & 1) + 0x7FFF
    rounded = ((bits + rounding) >> 16 << 16).astype(np.uint32).view(np.float32)
    return np.where(np.isnan(flat), flat, rounded).reshape(shape)


def bf16_bits_to_f32(a: np.ndarray) -> np.ndarray:
    """Decode raw bfloat16 storage (ml_dtypes arrays, or 2-byte void/uint16 from an .npz) to float32."""
    raw = np.ascontiguousarray(a).view(np.uint16)
    return (raw.astype(np.uint32) << 16).view(np.float32)


def cast(a, dtype: str) -> np.ndarray:
    """Convert ``a`` to XLA dtype ``dtype`` the way XLA's ``convert`` does.

    float -> int truncates toward zero and saturates (NaN becomes 0); anything
    -> pred is ``!= 0``; -> bf16 rounds to nearest even.
    """
    dtype = check_dtype(dtype)
    a = np.asarray(a)
    target = numpy_dtype(dtype)
    if a.dtype == target and dtype != "bf16" and dtype != "pred":
        return a                                    # already held as the dtype holds it (the usual case)
    if dtype == "bf16":
        return round_to_bf16(a.astype(np.float32))
    if dtype == "pred":
        return a != 0
    if not is_float(dtype) and a.dtype.kind == "f":
        info = np.iinfo(target)
        with np.errstate(invalid="ignore"):
            t = np.trunc(np.nan_to_num(a.astype(np.float64), nan=0.0))
        # saturate in the float domain first: float(2**63 - 1) is 2**63, which no longer fits an int64
        high, low = t >= float(info.max), t <= float(info.min)
        out = np.where(high | low, 0.0, t).astype(target)
        out[high] = info.max
        out[low] = info.min
        return out
    if a.dtype == target:
        return a
    with np.errstate(over="ignore", invalid="ignore"):
        return a.astype(target)
