"""The values of StableHLO text: tensor types, attribute values and dense constants.

MLIR spells the same thing several ways, and JAX prints all of them: an integer list is
``[1, 2]`` (pretty form), ``array<i64: 1, 2>`` (generic properties) or ``dense<[1, 2]> :
tensor<2xi64>`` (MHLO); a constant is a splat ``dense<1.0>``, a nested list, a float's bit
pattern ``dense<0xFF800000>`` or a hex blob of the whole tensor ``dense<"0x0000803F...">``
(little-endian).  This module reads each into Python/numpy; :mod:`astitch_sim.frontends.stablehlo_ops`
uses it to read an op's attributes.
"""
from __future__ import annotations

import re
from typing import NoReturn, Optional

import numpy as np

from ..ir.dtypes import DTYPES, bf16_bits_to_f32, cast
from ..errors import AStitchError
from .hlo import HloType
from .mlir_text import Group, Tok, dict_items
from .refusals import is_known_type, unsupported_dtype


def _err(line, msg) -> NoReturn:
    raise AStitchError(f"line {line}: {msg}")


# -- types ------------------------------------------------------------------------------------

#: MLIR element type -> XLA dtype name
MLIR_DTYPES = {"f64": "f64", "f32": "f32", "f16": "f16", "bf16": "bf16", "i1": "pred",
               "i8": "s8", "i16": "s16", "i32": "s32", "i64": "s64", "si8": "s8", "si16": "s16",
               "si32": "s32", "si64": "s64", "ui8": "u8", "ui16": "u16", "ui32": "u32", "ui64": "u64"}


def tensor_type(text: str, line: int, what: str) -> HloType:
    """``tensor<4x8xf32>`` -> HloType("f32", (4, 8)); ``tuple<...>`` -> a tuple HloType."""
    if text.startswith("tuple<"):
        inner = text[len("tuple<"):-1]
        parts, depth, cur = [], 0, ""
        for ch in inner:
            depth += {"<": 1, ">": -1}.get(ch, 0)
            if ch == "," and depth == 0:
                parts.append(cur)
                cur = ""
            else:
                cur += ch
        if cur:
            parts.append(cur)
        return HloType(elements=[tensor_type(p, line, what) for p in parts])
    m = re.fullmatch(r"tensor<((?:(?:\d+|\?)x)*)([^,]+?)(,.*)?>", text)
    if m is None:
        if text.startswith("!") or text.startswith(("vector<", "memref<", "complex<")) or text in MLIR_DTYPES:
            _err(line, f"{what}: type {text} is well-formed but unsupported: astitch-sim imports tensors "
                       f"(tensor<...>) of the dtypes {', '.join(DTYPES)}")
        _err(line, f"{what}: malformed type {text!r}: expected a tensor type like tensor<4x8xf32>")
    dims = [d for d in m.group(1).split("x") if d]
    if "?" in dims:
        _err(line, f"{what}: dynamic shape {text}: astitch-sim needs static shapes (lower with concrete "
                   "arrays, not symbolic dimensions)")
    element = m.group(2)
    dtype = MLIR_DTYPES.get(element)
    if dtype is None:
        if is_known_type(element) or re.fullmatch(r"(f\d+E\w+|complex<.*>|[su]?i\d+|ui\d+)", element):
            _err(line, f"{what}: {unsupported_dtype(element)}")
        _err(line, f"{what}: malformed type {text!r}: unknown element type {element!r}")
    return HloType(dtype, tuple(int(d) for d in dims))


# -- reading attribute values -----------------------------------------------------------------

def word_texts(items) -> list[str]:
    """The word tokens of items (bracket groups flattened), without punctuation."""
    out = []
    for it in items:
        if isinstance(it, Group):
            out += word_texts(it.items)
        elif it.kind in ("word", "str") or (it.kind == "alias"):
            out.append(it.text)
    return out


def int_list(items, line: int, what: str) -> tuple:
    """An integer list in any spelling JAX prints: ``[1, 2]``, ``array<i64: 1, 2>``, ``dense<[1, 2]>``,
    ``dense<1>`` (or one integer, ``1 : i64``)."""
    items = list(items)
    splat_size = None
    if items and isinstance(items[-1], Tok) and items[-1].kind == "type":   # dense<...> : tensor<2xi64>
        splat_size = int(np.prod(tensor_type(items[-1].text, line, what).shape, dtype=np.int64))
        items = items[:-2]
    if len(items) == 3 and isinstance(items[1], Tok) and items[1].text == ":":   # 1 : i64
        items = items[:1]
    if len(items) == 2 and isinstance(items[0], Tok) and items[0].text == "array" and isinstance(items[1], Group):
        inner = items[1].items
        colon = next((k for k, t in enumerate(inner) if isinstance(t, Tok) and t.text == ":"), None)
        words = word_texts(inner[colon + 1:]) if colon is not None else []
    elif len(items) == 2 and isinstance(items[0], Tok) and items[0].text == "dense":
        words = word_texts([items[1]])
    else:
        words = word_texts(items)
    try:
        values = tuple(int(w) for w in words)
    except ValueError:
        _err(line, f"{what} must be integers, got {' '.join(words)}")
    if splat_size is not None and len(values) == 1 and not any(isinstance(it, Group) and it.open == "["
                                                                 for it in _groups(items)):
        return values * splat_size          # dense<0> : tensor<2x2xi64>, a splat
    return values


def _groups(items) -> list:
    return [g for it in items if isinstance(it, Group) for g in [it, *_groups(it.items)]]


def one_int(items, line, what) -> int:
    vals = int_list(items, line, what)
    if len(vals) != 1:
        _err(line, f"{what} must be one integer, got {list(vals)}")
    return vals[0]


def struct_fields(items, line: int, what: str) -> dict:
    """``#stablehlo.gather<offset_dims = [1], index_vector_dim = 1>`` -> {key: items}."""
    group = next((it for it in items if isinstance(it, Group) and it.open == "<"), None)
    if group is None:
        _err(line, f"{what}: expected a #stablehlo.<...> structure, got {' '.join(word_texts(items))}")
    return dict_items(Group("{", group.items, group.line))


def enum_word(items) -> Optional[str]:
    """``#stablehlo<comparison_direction GT>`` or ``GT`` -> "GT"."""
    words = word_texts(items)
    return words[-1] if words else None


_FLOAT_BITS = {"f32": np.uint32, "f64": np.uint64, "f16": np.uint16, "bf16": np.uint16}
_FLOAT_VIEW = {"f32": np.float32, "f64": np.float64, "f16": np.float16}


def _scalar(text: str, dtype: str, line: int, what: str):
    try:
        if dtype == "pred":
            if text in ("true", "false"):
                return text == "true"
            return int(text, 16 if text.lower().startswith("0x") else 10) != 0
        if DTYPES[dtype][2]:
            if text.lower().startswith("0x"):
                bits = np.array([int(text, 16)], dtype=_FLOAT_BITS[dtype])
                return float(bf16_bits_to_f32(bits)[0] if dtype == "bf16" else bits.view(_FLOAT_VIEW[dtype])[0])
            return float(text)
        return int(text, 16 if text.lower().startswith("0x") else 10)
    except (ValueError, OverflowError):
        _err(line, f"{what}: {text!r} is not a {dtype} value")


def dense(items, typ: HloType, line: int, what: str) -> np.ndarray:
    """A ``dense<...>`` literal as a numpy array of ``typ`` (splat, nested list or hex blob)."""
    items = [it for it in items if not (isinstance(it, Tok) and it.kind == "type")]
    if items and isinstance(items[-1], Tok) and items[-1].text == ":":
        items = items[:-1]
    if not items or not isinstance(items[0], Tok):
        _err(line, f"{what}: expected a dense<...> literal")
    if items[0].text in ("dense_resource", "__elided__") or "__elided__" in word_texts(items):
        _err(line, f"{what}: the constant was printed elided (dense_resource): print the text without "
                   "eliding large constants")
    if items[0].text != "dense" or len(items) != 2 or not isinstance(items[1], Group) or items[1].open != "<":
        _err(line, f"{what}: expected a dense<...> literal, got {' '.join(word_texts(items))}")
    body = items[1].items
    dtype, shape = typ.dtype, typ.shape
    size = int(np.prod(shape, dtype=np.int64))
    if len(body) == 1 and isinstance(body[0], Tok) and body[0].kind == "str":       # hex blob
        hexs = body[0].text[1:-1]
        if not hexs.lower().startswith("0x"):
            _err(line, f"{what}: a quoted dense literal must be hex (\"0x...\"), got {hexs[:20]!r}")
        try:
            raw = bytes.fromhex(hexs[2:])
        except ValueError:
            _err(line, f"{what}: the hex literal has a character that is not a hex digit: the text looks damaged")
        width = 1 if dtype == "pred" else DTYPES[dtype][1]
        storage = {"pred": np.uint8, "bf16": np.uint16}.get(dtype, DTYPES[dtype][0])
        if len(raw) % width:
            _err(line, f"{what}: hex literal of {len(raw)} bytes is not a whole number of {dtype} elements")
        flat = np.frombuffer(raw, dtype=np.dtype(storage).newbyteorder("<"))
        if len(flat) not in (1, size):
            _err(line, f"{what}: hex literal of {len(raw)} bytes does not fill {size} {dtype} elements")
        flat = bf16_bits_to_f32(flat) if dtype == "bf16" else (flat != 0 if dtype == "pred" else flat)
        arr = np.broadcast_to(flat, (size,)).reshape(shape) if len(flat) == 1 else flat.reshape(shape)
        return np.asarray(cast(np.array(arr), dtype))
    words = word_texts(body)
    listed = any(isinstance(it, Group) for it in body)
    values = [_scalar(w, dtype, line, what) for w in words]
    storage = np.float64 if DTYPES[dtype][2] else DTYPES[dtype][0]
    if len(values) == 1 and not listed:
        arr = np.full(shape, values[0], dtype=storage)
    else:
        if len(values) != size:
            _err(line, f"{what}: literal has {len(values)} values but the type {typ} needs {size}")
        arr = np.array(values, dtype=storage).reshape(shape)
    return np.asarray(cast(arr, dtype))
