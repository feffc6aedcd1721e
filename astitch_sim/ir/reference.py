"""The numpy reference: a Graph interpreter, the ground truth every test compares with.

It walks the nodes in topological order and applies each op's ``numpy`` row
from the op table, casting every result to the node's dtype so float32 math
stays float32 (and bf16 is rounded after every op) the way XLA computes it.
"""
from __future__ import annotations

from typing import Iterable, Mapping, Sequence, Union

import numpy as np

from .dtypes import bf16_bits_to_f32, cast, numpy_dtype, xla_name
from ..errors import AStitchError
from .graph import Graph, Node, shape_str

Inputs = Union[Sequence, Mapping[str, object]]


def bind_inputs(graph: Graph, inputs: Inputs) -> dict[str, np.ndarray]:
    """Match caller inputs to the graph's parameters and check shape and dtype.

    ``inputs`` is a sequence in parameter order or a ``{name: array}`` dict.
    numpy arrays must already have the parameter's dtype (a float64 array for an
    f32 parameter is a mistake worth hearing about); python lists and scalars are
    converted.  bf16 parameters accept float32 arrays and raw bfloat16 storage.
    """
    _check_graph(graph, "inputs")
    params = graph.inputs
    if inputs is None or isinstance(inputs, (str, bytes, np.ndarray)) or not isinstance(inputs, Iterable):
        raise AStitchError(f"inputs must be a list of arrays in parameter order "
                           f"({', '.join(p.name for p in params) or 'none'}) or a {{name: array}} dict, "
                           f"got {type(inputs).__name__}; asim.random_inputs(graph) makes some")
    if isinstance(inputs, Mapping):
        unknown = sorted(set(inputs) - {p.name for p in params})
        missing = [p.name for p in params if p.name not in inputs]
        if unknown or missing:
            raise AStitchError(f"inputs do not match parameters {[p.name for p in params]}: "
                               + (f"missing {missing}" if missing else "")
                               + ("; " if missing and unknown else "") + (f"unknown {unknown}" if unknown else ""))
        values = [inputs[p.name] for p in params]
    else:
        values = list(inputs)
        if len(values) != len(params):
            raise AStitchError(f"graph {graph.name!r} takes {len(params)} input(s) "
                               f"({', '.join(p.name for p in params)}), got {len(values)}")
    return {p.name: _coerce(p, v) for p, v in zip(params, values)}


def _check_graph(graph, what: str) -> None:
    if not isinstance(graph, Graph):
        raise AStitchError(f"{what}: expected a Graph (from asim.workload or asim.from_hlo), "
                           f"got {type(graph).__name__}")


def _coerce(param: Node, value) -> np.ndarray:
    want = f"{shape_str(param.shape, param.dtype)}"
    if not isinstance(value, np.ndarray):
        try:
            raw = np.asarray(value)
        except (TypeError, ValueError) as e:
            raise AStitchError(f"input {param.name!r}: cannot convert {type(value).__name__} to {want}: {e}") from None
        if raw.dtype.kind not in "biuf":
            raise AStitchError(f"input {param.name!r}: cannot convert {type(value).__name__} of {raw.dtype} values "
                               f"(None, strings or nested objects?) to {want}; pass numbers")
        value = cast(raw, param.dtype)
        if param.dtype == "pred" and not np.isin(raw, (0, 1)).all():
            raise AStitchError(f"input {param.name!r} is pred but holds values other than 0/1/True/False: "
                               "pass booleans (e.g. x != 0)")
        if param.dtype != "pred" and value.dtype.kind in "iu":
            with np.errstate(invalid="ignore"):
                exact = np.array_equal(value.astype(np.float64), raw.astype(np.float64))
            if not exact:
                raise AStitchError(f"input {param.name!r}: values do not fit {want} exactly (fractions, or out "
                                   f"of range for {param.dtype}); pass whole numbers in range")
    elif param.dtype == "bf16":
        if value.dtype.kind == "V" or value.dtype.name == "bfloat16" or value.dtype == np.uint16:
            value = bf16_bits_to_f32(value)
        elif value.dtype != np.float32:
            raise AStitchError(f"input {param.name!r} is {value.dtype} but the parameter is {want}: "
                               "pass float32 (rounded to bf16) or bfloat16 storage")
        value = cast(value, "bf16")
    elif value.dtype != numpy_dtype(param.dtype):
        try:
            got = xla_name(value.dtype)
        except AStitchError:
            got = str(value.dtype)
        raise AStitchError(f"input {param.name!r} has dtype {got} but the parameter is {want}: "
                           f"convert it with .astype(np.{numpy_dtype(param.dtype).name})")
    if tuple(value.shape) != tuple(param.shape):
        raise AStitchError(f"input {param.name!r} has shape {list(value.shape)} but the parameter is {want}")
    return value


#: ops that may read an operand through a read-only view (a broadcast: stride 0) instead of a contiguous copy:
#: their numpy results are correctly rounded element by element, so the bits are the same whichever loop numpy
#: picks for the layout (a math-library function like exp may not be: its SIMD and scalar loops can differ in
#: the last bit, and a reduction's order follows the layout).  At 8192x32000 a log-softmax's two broadcasts
#: stay views instead of two more gigabytes; a value read by anything else, or an output, is made contiguous
VIEW_READERS = frozenset({"add", "subtract", "multiply", "divide", "maximum", "minimum", "compare", "select",
                          "negate", "abs"})


def evaluate(graph: Graph, inputs: Inputs, keep: bool = False) -> dict[str, np.ndarray]:
    """Value of every node (``keep=True``) or of the outputs only, by node name."""
    _check_graph(graph, "reference")
    graph.validate()
    env = bind_inputs(graph, inputs)
    needed = {n.name for n in graph.live_nodes()}
    remaining_uses = {name: 0 for name in needed}
    for n in graph:
        if n.name in needed:
            for o in dict.fromkeys(n.operands):
                remaining_uses[o.name] += 1
    outputs = {o.name for o in graph.outputs}
    readers: dict = {}
    for n in graph:
        if n.name in needed:
            for o in n.operands:
                readers.setdefault(o.name, set()).add(n.op)
    for n in graph:
        if n.name not in needed or n.op == "parameter":
            continue
        args = [env[o.name] for o in n.operands]
        donor = None if keep else _donor(n, args, env, remaining_uses, outputs)
        value = compute_into(n, args, donor) if donor is not None else cast(n.opdef.numpy(n, *args), n.dtype)
        if value.ndim and not value.flags.writeable and (n.name in outputs
                                                         or not readers.get(n.name, set()) <= VIEW_READERS):
            value = np.ascontiguousarray(value)
        env[n.name] = value
        if not keep:   # free values nobody reads any more: BERT-size graphs stay small
            for o in dict.fromkeys(n.operands):
                remaining_uses[o.name] -= 1
                if remaining_uses[o.name] == 0 and o.name not in outputs:
                    env.pop(o.name, None)
    return env


#: an elementwise result over more elements than this is written into an operand it is the last reader of
#: (:func:`_donor`): at 8192x32000 ``exp(shifted)`` then holds one gigabyte instead of two; below it numpy's one
#: call is cheaper than blocks, and a few MB come and go cheaply
IN_PLACE_MIN = 1 << 22
#: elements of one block of rows computed at a time in place (a few MB: the block's temporaries stay in cache)
IN_PLACE_BLOCK = 1 << 20


def compute_into(node: Node, args: list, donor: np.ndarray, block: int = IN_PLACE_BLOCK) -> np.ndarray:
    """Elementwise ``node``'s result written into ``donor`` (one of ``args``, of the result's shape and dtype), a
    block of leading rows at a time: an element depends only on its operands' same element, so each block
    reads its rows of ``donor`` before overwriting them, and no other block reads them.  Blocks of a
    contiguous array are contiguous: numpy runs the same loops on them (the bits are those of one call)."""
    shape = donor.shape
    step = max(1, block // max(1, donor.size // shape[0]))
    for lo in range(0, shape[0], step):
        part = [np.broadcast_to(a, shape)[lo:lo + step] if np.ndim(a) else a for a in args]
        donor[lo:lo + step] = cast(node.opdef.numpy(node, *part), node.dtype)
    return donor


def result_dtype(node: Node) -> np.dtype:
    """The numpy dtype ``cast`` gives ``node``'s values (bf16 values are float32 arrays)."""
    return cast(np.zeros(1, np.float32), node.dtype).dtype


def _donor(n: Node, args: list, env: dict, remaining_uses: dict, outputs: set):
    """An operand of elementwise ``n`` whose array ``n`` may overwrite: a big array an elementwise op of this
    interpreter computed (no input, no constant: the caller's and the graph's arrays are never written), read by
    nothing after ``n``, no output, of ``n``'s shape and dtype, sharing memory with no other value.  None:
    compute into a new array."""
    if n.kind != "elementwise" or not n.operands:
        return None
    for o, a in zip(n.operands, args, strict=True):
        if (o.kind == "elementwise" and remaining_uses.get(o.name) == 1 and o.name not in outputs
                and isinstance(a, np.ndarray) and a.ndim and a.size > IN_PLACE_MIN and a.base is None
                and a.flags.writeable and a.flags.c_contiguous and a.shape == tuple(n.shape)
                and a.dtype == result_dtype(n)
                and not any(np.may_share_memory(a, b) for k, b in env.items() if k != o.name)):
            return a
    return None


def reference(graph: Graph, inputs: Inputs) -> list[np.ndarray]:
    """Run ``graph`` on ``inputs`` with numpy; returns the outputs in result order."""
    try:
        env = evaluate(graph, inputs)
    except MemoryError:
        raise AStitchError(f"graph {graph.name!r} is too big for this machine's memory to run with numpy: "
                           "use a smaller shape") from None
    return hand_over(graph, env)


def hand_over(graph: Graph, env: Mapping) -> list[np.ndarray]:
    """The outputs, each an array of its own: a value computed here is handed over as is (nothing else holds
    it: a real-size output is not copied); an input returned unchanged, a constant, or an output listed twice
    is copied, so the caller's arrays are never the result's.  ``env``: every output's value and the inputs'
    (the SIMT model calls this with its global memory's buffers)."""
    theirs = {id(env[p.name]) for p in graph.inputs if p.name in env}
    outs, taken = [], set()
    for o in graph.outputs:
        v = env[o.name]
        if (not isinstance(v, np.ndarray) or v.base is not None or id(v) in theirs or id(v) in taken
                or o.op == "constant"):
            outs.append(np.array(v, copy=True))
        else:
            outs.append(v)
            taken.add(id(v))
    return outs


def random_inputs(graph: Graph, seed: int = 0) -> list[np.ndarray]:
    """Random inputs for every parameter: normal floats, small ints, random bools."""
    _check_graph(graph, "random_inputs")
    if seed is not None and (isinstance(seed, bool) or not isinstance(seed, (int, np.integer)) or seed < 0):
        raise AStitchError(f"random_inputs: seed must be a non-negative integer, got {seed!r}")
    rng = np.random.default_rng(seed)
    try:
        return _random_values(graph, rng)
    except MemoryError:
        elems = sum(p.size for p in graph.inputs)
        raise AStitchError(f"graph {graph.name!r} has {elems} input elements: too many to hold in this machine's "
                           "memory; use a smaller shape") from None


#: elements drawn per call when filling an input: numpy draws doubles and int64s, so drawing a 1 GB float32
#: input in one call would hold 2 GB of doubles; drawing in chunks fills the same values (a Generator's
#: stream does not depend on how the draws are split) with a few MB on the side
DRAW_CHUNK = 1 << 22

#: per kind of dtype: what one element is drawn as (the stream every seed has always given), and its holder
_DRAWS = {
    "float": (lambda rng, n: rng.standard_normal(n).astype(np.float32), np.float32),
    "pred": (lambda rng, n: rng.random(n) < 0.5, np.bool_),
    "int": (lambda rng, n: rng.integers(0, 8, size=n), np.int64),
}


def _random_values(graph: Graph, rng) -> list[np.ndarray]:
    out = []
    for p in graph.inputs:
        kind = "float" if p.dtype in ("f32", "f64", "f16", "bf16") else "pred" if p.dtype == "pred" else "int"
        draw, holder = _DRAWS[kind]
        flat = np.empty(int(p.size), holder)
        for start in range(0, flat.size, DRAW_CHUNK):
            stop = min(start + DRAW_CHUNK, flat.size)
            flat[start:stop] = draw(rng, stop - start)
        v = flat.reshape(p.shape)
        out.append(np.asarray(v if kind == "pred" else cast(v, p.dtype)))
    return out
