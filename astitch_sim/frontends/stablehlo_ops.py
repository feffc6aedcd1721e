"""The StableHLO ops astitch-sim reads, one row each: its HLO opcode and how to read its attributes.

Each row maps a StableHLO op (``stablehlo.broadcast_in_dim``; ``mhlo.`` spellings are the
same ops) to the HLO opcode of :data:`astitch_sim.ir.ops.OPS` it is, and to a reader that turns
its attributes, written in the pretty form (``dims = [0]``, ``contracting_dims = [1] x [0]``)
or the generic one (``broadcast_dimensions = array<i64: 0>``, ``#stablehlo.dot<...>``), into
the attributes the HLO importer reads (``dimensions={0}``, ``lhs_contracting_dims={1}``).
:func:`check_op` refuses every other op, naming it, its line and the fix.
"""
from __future__ import annotations

import re
from typing import NoReturn, Optional

from . import hlo
from ..errors import AStitchError
from .mlir_text import Group, Op, Tok
from .refusals import unsupported_op
from .stablehlo_values import enum_word, int_list, one_int, struct_fields, word_texts


def _err(line, msg) -> NoReturn:
    raise AStitchError(f"line {line}: {msg}")


# -- the op table ----------------------------------------------------------------------------

class OpView:
    """One MLIR op's operands and attributes, read the same way from the pretty and the generic form."""

    def __init__(self, op: Op):
        self.op, self.line = op, op.line
        self.values: list[str] = []       # operand value names, in order
        self.positional: list[list] = []  # pretty: comma-separated segments before any key = value
        self.kw: dict[str, list] = {}
        if op.generic:
            self.values = list(op.operands)
            self.kw = dict(op.props)
            return
        items = op.items
        if len(items) == 1 and isinstance(items[0], Group) and items[0].open == "(":
            items = items[0].items       # chlo.top_k(%x, k = 3), call @f(%a, %b)
        seg: list = []
        for it in items + [None]:
            if it is None or (isinstance(it, Tok) and it.kind == "punct" and it.text == ","):
                self._segment(seg)
                seg = []
            else:
                seg.append(it)

    def _segment(self, seg):
        for k in range(len(seg) - 1):
            if isinstance(seg[k], Tok) and seg[k].kind == "word" and isinstance(seg[k + 1], Tok) \
                    and seg[k + 1].text == "=":
                self.kw[seg[k].text] = seg[k + 2:]
                seg = seg[:k]
                break
        if seg:
            self.positional.append(seg)
            self.values += [t.text for t in seg if isinstance(t, Tok) and t.kind == "value"]

    def get(self, *keys, required=True):
        for k in keys:
            if k in self.kw:
                return self.kw[k]
        if required:
            _err(self.line, f"{self.op.name} needs attribute {keys[0]}")
        return None

    def ints(self, *keys, required=True, default=()):
        v = self.get(*keys, required=required)
        return default if v is None else int_list(v, self.line, f"{self.op.name}'s {keys[0]}")


def hlo_list(ints, line) -> hlo.Group:
    """An HLO ``{1,2}`` list attribute."""
    return hlo.Group("{", [str(int(i)) for i in ints], line)


def ints_attr(ints, line) -> tuple:
    """An HLO ``{1,2}`` list attribute with its line, as the HLO importer keeps attributes."""
    return (hlo_list(ints, line), line)


def attr(value, line):
    return (value, line)


def _none(v: OpView, lo) -> dict:
    return {}


def _broadcast(v, lo):
    return {"dimensions": ints_attr(v.ints("dims", "broadcast_dimensions"), v.line)}


def _iota(v, lo):
    return {"iota_dimension": attr(str(one_int(v.get("dim", "iota_dimension"), v.line, "iota's dim")), v.line)}


def _transpose(v, lo):
    return {"dimensions": ints_attr(v.ints("dims", "permutation"), v.line)}


def _reverse(v, lo):
    return {"dimensions": ints_attr(v.ints("dims", "dimensions"), v.line)}


def _concatenate(v, lo):
    return {"dimensions": ints_attr([one_int(v.get("dim", "dimension"), v.line, "concatenate's dim")], v.line)}


def _compare(v, lo):
    if v.op.generic:
        direction = enum_word(v.get("comparison_direction"))
        kind = enum_word(v.get("compare_type", required=False) or [])
    else:
        words = [seg[0].text for seg in v.positional if isinstance(seg[0], Tok) and seg[0].kind == "word"]
        direction = words[0] if words else None
        kind = words[1] if len(words) > 1 else None
    if direction is None:
        _err(v.line, f"{v.op.name} needs a direction (EQ, NE, LT, LE, GT, GE)")
    attrs = {"direction": attr(direction, v.line)}
    if kind is not None:
        attrs["type"] = attr(kind, v.line)
    return attrs


def _slice(v, lo):
    if v.op.generic:
        starts, limits = v.ints("start_indices"), v.ints("limit_indices")
        strides = v.ints("strides", required=False, default=(1,) * len(starts))
    else:
        g = next((it for seg in v.positional for it in seg if isinstance(it, Group) and it.open == "["), None)
        if g is None:
            _err(v.line, f"{v.op.name} needs its bounds, like [0:4, 0:8:2]")
        starts, limits, strides = [], [], []
        for dim in " ".join(str(it) if isinstance(it, Group) else it.text for it in g.items).split(","):
            nums = [x.strip() for x in dim.split(":")]
            if dim.strip() == "":
                continue
            if len(nums) not in (2, 3) or not all(re.fullmatch(r"-?\d+", x) for x in nums):
                _err(v.line, f"{v.op.name}: cannot read slice bounds {g}")
            starts.append(int(nums[0]))
            limits.append(int(nums[1]))
            strides.append(int(nums[2]) if len(nums) == 3 else 1)
    if not len(starts) == len(limits) == len(strides):
        _err(v.line, f"{v.op.name}: start_indices, limit_indices and strides need one entry per dimension")
    bounds = [hlo.Group("[", [str(s), str(e), str(k)], v.line) for s, e, k in zip(starts, limits, strides,
                                                                                    strict=True)]
    return {"slice": attr(hlo.Group("{", bounds, v.line), v.line)}


def _pad(v, lo):
    low, high = v.ints("low", "edge_padding_low"), v.ints("high", "edge_padding_high")
    interior = v.ints("interior", "interior_padding", required=False, default=(0,) * len(low))
    if not (len(low) == len(high) == len(interior)):
        _err(v.line, f"{v.op.name}: low, high and interior padding must have one entry per dimension")
    text = "x".join(f"{a}_{b}_{c}" for a, b, c in zip(low, high, interior, strict=True))
    return {"padding": attr(text, v.line)}


def _dot_general(v, lo):
    if v.op.generic or "dot_dimension_numbers" in v.kw:
        dn = struct_fields(v.get("dot_dimension_numbers"), v.line, v.op.name)
        get = lambda k: int_list(dn[k], v.line, k) if k in dn else ()  # noqa: E731
        lb, rb = get("lhs_batching_dimensions"), get("rhs_batching_dimensions")
        lc, rc = get("lhs_contracting_dimensions"), get("rhs_contracting_dimensions")
    else:
        def pair(key):
            items = v.get(key, required=False)
            if items is None:
                return (), ()
            groups = [it for it in items if isinstance(it, Group) and it.open == "["]
            if len(groups) != 2:
                _err(v.line, f"{v.op.name}: {key} must look like [0] x [0]")
            return int_list([groups[0]], v.line, key), int_list([groups[1]], v.line, key)
        lb, rb = pair("batching_dims")
        lc, rc = pair("contracting_dims")
    if v.get("algorithm", required=False) is not None:
        _err(v.line, f"{v.op.name}: a dot algorithm (lower-precision accumulation) is not supported")
    return {"lhs_batch_dims": ints_attr(lb, v.line), "rhs_batch_dims": ints_attr(rb, v.line),
            "lhs_contracting_dims": ints_attr(lc, v.line), "rhs_contracting_dims": ints_attr(rc, v.line)}


def _dot(v, lo):
    """The old ``stablehlo.dot``: a matrix/vector product contracting lhs's last with rhs's first dim."""
    lhs_rank = len(lo.type_of(v.values[0], v.line).shape)
    return {"lhs_batch_dims": ints_attr((), v.line), "rhs_batch_dims": ints_attr((), v.line),
            "lhs_contracting_dims": ints_attr([lhs_rank - 1], v.line),
            "rhs_contracting_dims": ints_attr([0], v.line)}


def _dynamic_slice(v, lo):
    return {"dynamic_slice_sizes": ints_attr(v.ints("sizes", "slice_sizes"), v.line)}


#: a field MLIR leaves out when it holds its default, 0 (index_vector_dim of a gather/scatter)
_ZERO = [Tok("word", "0", 0)]


def _gather(v, lo):
    dn = struct_fields(v.get("dimension_numbers"), v.line, v.op.name)
    attrs = {}
    for hk, mk in (("offset_dims", "offset_dims"), ("collapsed_slice_dims", "collapsed_slice_dims"),
                   ("start_index_map", "start_index_map"), ("operand_batching_dims", "operand_batching_dims"),
                   ("start_indices_batching_dims", "start_indices_batching_dims")):
        attrs[hk] = ints_attr(int_list(dn.get(mk, []), v.line, mk), v.line)
    attrs["index_vector_dim"] = attr(str(one_int(dn.get("index_vector_dim", _ZERO), v.line, "index_vector_dim")),
                                     v.line)
    attrs["slice_sizes"] = ints_attr(v.ints("slice_sizes"), v.line)
    return attrs


def _scatter(v, lo):
    dn = struct_fields(v.get("scatter_dimension_numbers"), v.line, v.op.name)
    attrs = {}
    for k in ("update_window_dims", "inserted_window_dims", "scatter_dims_to_operand_dims", "input_batching_dims",
              "scatter_indices_batching_dims"):
        attrs[k] = ints_attr(int_list(dn.get(k, []), v.line, k), v.line)
    attrs["index_vector_dim"] = attr(str(one_int(dn.get("index_vector_dim", _ZERO), v.line, "index_vector_dim")),
                                     v.line)
    attrs["to_apply"] = attr(lo.region(v, 0), v.line)
    return attrs


def _sort(v, lo):
    dim = one_int(v.get("dimension", required=False) or [Tok("word", "-1", v.line)], v.line, "sort's dimension")
    if dim < 0:
        dim += len(lo.type_of(v.values[0], v.line).shape)
    stable = word_texts(v.get("is_stable", required=False) or [Tok("word", "false", v.line)])
    return {"dimensions": ints_attr([dim], v.line), "is_stable": attr(stable[0] if stable else "true", v.line),
            "to_apply": attr(lo.region(v, 0), v.line)}


def _top_k(v, lo):
    return {"k": attr(str(one_int(v.get("k"), v.line, "top_k's k")), v.line), "largest": attr("true", v.line)}


def _reduce(v, lo):
    return {"dimensions": ints_attr(v.ints("dimensions"), v.line), "to_apply": attr(lo.region(v, 0), v.line)}


def _reduce_window(v, lo):
    size = v.ints("window_dimensions")
    rank = len(size)
    strides = v.ints("window_strides", required=False, default=(1,) * rank)
    pad = v.ints("padding", required=False, default=(0,) * (2 * rank))
    if len(strides) != rank or len(pad) != 2 * rank:
        _err(v.line, f"{v.op.name}: window_strides and padding need one entry (padding: two) per dimension")
    fields = ["size", "=", "x".join(map(str, size)) or "1", "stride", "=", "x".join(map(str, strides)) or "1",
              "pad", "=", "x".join(f"{pad[2 * k]}_{pad[2 * k + 1]}" for k in range(rank)) or "0_0"]
    for mk, hk in (("base_dilations", "lhs_dilate"), ("window_dilations", "rhs_dilate")):
        d = v.ints(mk, required=False)
        if d is not None and any(x != 1 for x in d):
            fields += [hk, "=", "x".join(map(str, d))]
    return {"window": attr(hlo.Group("{", fields, v.line), v.line), "to_apply": attr(lo.region(v, 0), v.line)}


#: elementwise and shape ops whose HLO opcode is their StableHLO name with '-' for '_', and no attributes
_PLAIN = ["abs", "add", "and", "atan2", "cbrt", "ceil", "clamp", "convert", "cosine", "divide", "exponential",
          "exponential_minus_one", "floor", "is_finite", "log", "log_plus_one", "logistic", "maximum", "minimum",
          "multiply", "negate", "not", "or", "power", "remainder", "reshape", "round_nearest_afz",
          "round_nearest_even", "rsqrt", "select", "shift_left", "shift_right_arithmetic", "shift_right_logical",
          "sign", "sine", "sqrt", "subtract", "tan", "tanh", "xor", "dynamic_update_slice"]

#: StableHLO op (without its dialect) -> (HLO opcode, attribute reader(view, lowerer) -> HLO attrs)
OPS: dict = {name: (name.replace("_", "-"), _none) for name in _PLAIN}
OPS.update({
    "constant": ("constant", _none),
    "broadcast_in_dim": ("broadcast", _broadcast),
    "iota": ("iota", _iota),
    "transpose": ("transpose", _transpose),
    "reverse": ("reverse", _reverse),
    "concatenate": ("concatenate", _concatenate),
    "compare": ("compare", _compare),
    "slice": ("slice", _slice),
    "pad": ("pad", _pad),
    "dot_general": ("dot", _dot_general),
    "dot": ("dot", _dot),
    "dynamic_slice": ("dynamic-slice", _dynamic_slice),
    "gather": ("gather", _gather),
    "scatter": ("scatter", _scatter),
    "sort": ("sort", _sort),
    "reduce": ("reduce", _reduce),
    "reduce_window": ("reduce-window", _reduce_window),
    "optimization_barrier": ("opt-barrier", _none),
    "erf": ("erf", _none),          # chlo.erf
    "top_k": ("topk", _top_k),      # chlo.top_k
    "erfc": ("erfc", _none),        # chlo.erfc: 1 - erf(x), see _Lowerer.erfc
    "square": ("square", _none),    # chlo.square: x * x, see _Lowerer.square
})
#: the chlo ops read above; any other chlo op is refused with the advice to print HLO text
_CHLO = {"erf", "top_k", "erfc", "square"}
#: StableHLO spellings of ops whose refusal advice is filed under another HLO name
_REFUSAL_NAME = {"case": "conditional", "if": "conditional", "rng_bit_generator": "rng-bit-generator",
                 "custom_call": "custom-call"}
RETURN_OPS = {"return", "func.return", "stablehlo.return", "mhlo.return"}
CALL_OPS = {"call", "func.call"}
_RNG_FUNCS = re.compile(r"threefry|_random_bits|_uniform|_normal|_bernoulli|_gumbel|_randint|_truncated_normal")


def split_name(name: str) -> tuple[str, str]:
    dialect, _, op = name.partition(".")
    return (dialect, op) if op else ("", name)


def check_op(name: str, line: int, target: Optional[str] = None, func: Optional[str] = None):
    """Refuse an op this importer does not read, naming it, its line and the fix."""
    if name in RETURN_OPS or name in CALL_OPS:
        if name in CALL_OPS and target and _RNG_FUNCS.search(target):
            _err(line, f"call to @{target} in @{func or '?'}: this is jax.random's generator inside the jitted "
                       "function: draw the random numbers outside the function and pass them in")
        return
    dialect, op = split_name(name)
    where = f"in @{func}" if func else ""
    if dialect in ("stablehlo", "mhlo") and op in OPS and op not in _CHLO:
        return
    if dialect == "chlo" and op in _CHLO:
        return
    if dialect == "chlo":
        _err(line, f"unsupported op {name!r} {where}: astitch-sim has no op for it; print the HLO text instead "
                   f"(jax.jit(f).lower(*args).as_text(dialect='hlo')), where XLA expands {name} into "
                   "elementwise ops astitch-sim imports")
    if dialect not in ("stablehlo", "mhlo"):
        _err(line, f"unsupported op {name!r} {where}: astitch-sim reads the stablehlo, mhlo and chlo dialects "
                   "and func.func/func.call/return")
    hlo_name = _REFUSAL_NAME.get(op, op.replace("_", "-"))
    msg = unsupported_op(hlo_name, where, target if op == "custom_call" else None).replace(
        f"unsupported op {hlo_name!r}", f"unsupported op {name!r}", 1)
    if func and _RNG_FUNCS.search(func) and "random" not in msg:
        msg += " (it is part of jax.random inside the jitted function: draw the random numbers outside the " \
               "function and pass them in)"
    _err(line, msg)
