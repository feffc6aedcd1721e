"""PyTorch's dtypes under XLA's names, and PyTorch's type promotion, written out.

PyTorch promotes the operands of an elementwise op by *category* (bool < integer < floating) and by *kind
of operand*: a tensor with dimensions outranks a zero-dimensional tensor, which outranks a Python number.
Within the highest-ranked kind that holds the highest category, the widest type wins; a lower-ranked
operand of a higher category lifts the result to that category (a zero-dim tensor's own type; a Python
number to the default type of its category: float32 for a float, int64 for an int).  So ``x_f16 * 2.5``
stays f16, ``x_f16 * torch.tensor(2.5)`` stays f16, ``x_int * 2.5`` is f32 and ``x_int * t0_f64`` is f64.
(https://pytorch.org/docs/stable/tensor_attributes.html#type-promotion-doc.)

The importer computes every op's type with these rules and then checks it against the type torch.export
recorded on the node (``meta["val"]``): a difference is a bug here, reported as one.
"""
from __future__ import annotations

from ...errors import AStitchError

#: torch dtype name (``str(torch.float32)`` without ``torch.``) -> XLA name
TORCH_TO_XLA = {"float32": "f32", "float64": "f64", "float16": "f16", "bfloat16": "bf16", "int64": "s64",
                "int32": "s32", "int16": "s16", "int8": "s8", "uint8": "u8", "uint16": "u16", "uint32": "u32",
                "uint64": "u64", "bool": "pred"}
XLA_TO_TORCH = {v: k for k, v in TORCH_TO_XLA.items()}

_CATEGORY = {"pred": 0, "u8": 1, "u16": 1, "u32": 1, "u64": 1, "s8": 1, "s16": 1, "s32": 1, "s64": 1,
             "f16": 2, "bf16": 2, "f32": 2, "f64": 2}
#: the smallest type holding both (torch.promote_types, for the types here)
_ORDER = {"pred": 0, "u8": 1, "s8": 1, "s16": 2, "s32": 3, "s64": 4, "f16": 5, "bf16": 5, "f32": 6, "f64": 7}


def xla_dtype(torch_dtype) -> str:
    """The XLA name of a torch dtype; an unsupported one (complex, float8...) is an AStitchError naming them."""
    name = str(torch_dtype).replace("torch.", "")
    if name not in TORCH_TO_XLA:
        raise AStitchError(f"torch dtype {name} is not supported: astitch-sim holds "
                           f"{', '.join(TORCH_TO_XLA)}; cast the tensor (x.float()) before the model sees it")
    return TORCH_TO_XLA[name]


def category(dtype: str) -> int:
    return _CATEGORY[dtype]


def promote_types(a: str, b: str) -> str:
    """``torch.promote_types`` for two XLA-named types (f16 with bf16 is f32, u8 with s8 is s16)."""
    if a == b:
        return a
    if {a, b} == {"f16", "bf16"}:
        return "f32"
    if {a, b} == {"u8", "s8"}:
        return "s16"
    return a if _ORDER.get(a, 0) >= _ORDER.get(b, 0) else b


def scalar_dtype(value) -> str:
    """The type a Python number stands for when it meets no tensor of its category: bool, s64, f32."""
    if isinstance(value, bool):
        return "pred"
    return "s64" if isinstance(value, int) else "f32"


def result_type(operands) -> str:
    """PyTorch's result type of ``operands``: ``(dtype, rank)`` pairs for tensors, Python numbers as they are."""
    kinds = [[], [], []]                      # dimensioned tensors, zero-dim tensors, Python numbers
    for op in operands:
        if isinstance(op, tuple):
            dtype, rank = op
            kinds[0 if rank else 1].append(dtype)
        else:
            kinds[2].append(scalar_dtype(op))
    best = None
    for rank_kind, dtypes in enumerate(kinds):
        if not dtypes:
            continue
        top = max(category(d) for d in dtypes)
        if best is None:
            best = _widest([d for d in dtypes if category(d) == top])
        elif top > category(best):
            if rank_kind == 2:                # a Python number lifts to its category's default type
                best = {1: "s64", 2: "f32"}[top]
            else:
                best = _widest([d for d in dtypes if category(d) == top])
    if best is None:
        raise AStitchError("an elementwise op needs at least one operand")
    return best


def _widest(dtypes):
    out = dtypes[0]
    for d in dtypes[1:]:
        out = promote_types(out, d)
    return out


def to_float(dtype: str) -> str:
    """INT_TO_FLOAT promotion (``/``, ``exp``, ``mean``...): integers and bool compute in float32."""
    return dtype if category(dtype) == 2 else "f32"
