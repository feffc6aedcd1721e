"""Import StableHLO / MHLO MLIR text (what ``jax.jit(f).lower(*args).as_text()`` prints) as a Graph.

JAX's default text is StableHLO, an MLIR dialect; XLA's HLO text (``as_text(dialect="hlo")``)
says the same computation in another syntax.  Rather than a second graph builder, this
module *translates* each MLIR op into the instruction the HLO importer reads
(:class:`astitch_sim.frontends.hlo.Instr`: an HLO opcode, operand names, attributes in HLO's
spelling) and lets the HLO importer's builder make the nodes.  So an op means the same
thing whichever text it came from: shape checks, region recognition (argmax, sort
comparators, scatter combiners), call inlining and tuple handling are the HLO importer's.

The pieces:

* :mod:`astitch_sim.frontends.mlir_text` reads MLIR syntax into functions, blocks and ops (generic
  form ``"stablehlo.sort"(%0) <{dimension = 1 : i64}> ({...})`` and the pretty forms JAX
  prints, ``stablehlo.add %0, %1 : tensor<4xf32>``); ``loc(...)`` is dropped there;
* :data:`astitch_sim.frontends.stablehlo_ops.OPS` maps each StableHLO op to its HLO opcode and an attribute reader
  that turns the pretty or generic attributes into HLO's (``dims = [0]`` ->
  ``dimensions={0}``, ``contracting_dims = [1] x [0]`` -> ``lhs_contracting_dims={1}``...), and
  :mod:`astitch_sim.frontends.stablehlo_values` reads types, integer lists and dense constants;
* a ``broadcast_in_dim`` that stretches a size-1 dimension (StableHLO allows it, HLO does not)
  gets a ``reshape`` dropping that dimension first (node ``<name>/squeeze``);
* ``func.func`` becomes an HLO computation, ``func.call`` an HLO ``call`` (inlined by the
  builder, nodes named ``<call>/<op>``), a reduce/sort/scatter/reduce_window region a
  computation of its own, and the pretty ``applies stablehlo.add`` a one-op region;
* an op with several results (``%1:2 = ...``, ``%values, %indices = chlo.top_k``) becomes
  a tuple-typed instruction and one ``get-tuple-element`` per result;
* ``chlo`` ops: ``chlo.erf`` is HLO's ``erf``, ``chlo.top_k`` its ``topk``, ``chlo.square(x)``
  is ``x * x``; ``chlo.erfc`` is imported as ``1 - erf(x)`` (within one f32 ulp of 1
  absolutely: the tail's *relative* accuracy is lower than XLA's erfc); other chlo ops are
  refused with the advice to print the HLO text, where XLA has expanded them into
  elementwise ops;
* dense constants: splats (``dense<1.0>``), nested lists, hex bit patterns
  (``dense<0xFF800000>``) and hex blobs (``dense<"0x0000803F...">``, little-endian).

Node names follow the MLIR value names: ``%5 = stablehlo.multiply`` is node
``multiply.5``, ``%cst_0`` is ``cst_0``, the function arguments ``arg0, arg1...``.
Every unsupported construct is an :class:`AStitchError` naming the op and its line, with
the fix where there is one (:mod:`astitch_sim.frontends.refusals`).
"""
from __future__ import annotations

import re
from typing import NoReturn, Optional

import numpy as np

from . import hlo
from ..ir.dtypes import cast
from ..errors import AStitchError
from ..ir.graph import Graph
from .hlo import Computation, HloType, Instr
from .mlir_text import Func, Group, Op, Tok, parse
from .stablehlo_ops import CALL_OPS, OPS, RETURN_OPS, OpView, attr, check_op, ints_attr, split_name
from .stablehlo_values import dense, tensor_type, word_texts

__all__ = ["from_stablehlo", "looks_like_mlir", "mlir_dialect"]


def _err(line, msg) -> NoReturn:
    raise AStitchError(f"line {line}: {msg}")


# -- lowering functions to HLO computations ------------------------------------------------------

class _Lowerer:
    """MLIR functions -> HLO :class:`Computation` s the HLO importer's builder can run."""

    def __init__(self, funcs: list[Func]):
        self.funcs = {f.name: f for f in funcs}
        self.comps: dict[str, Computation] = {}
        self.regions = 0

    # one computation (a function body or a region)
    def computation(self, name: str, args: list, ops: list, line: int, func: str, is_entry=False,
                    result_types=None) -> Computation:
        func_line = line
        comp = Computation(name, line, is_entry)
        saved = getattr(self, "_state", None)
        self._state = (comp, {}, {}, func)      # computation, value -> instr name, instr name -> type, func
        try:
            for i, (value, typ) in enumerate(args):
                iname = value.lstrip("%")
                self._add(Instr(iname, tensor_type(typ, line, f"argument {value} of @{func}"), "parameter", [], {},
                                line, [str(i)]), [value])
            returned = None
            for op in ops:
                if op.name in RETURN_OPS:
                    returned = op
                    break
                self.op(op)
            if returned is None:
                _err(line, f"@{func}: a block without a return")
            values = OpView(returned).values
            if result_types is not None and len(result_types) != len(values):
                _err(returned.line, f"@{func} returns {len(values)} value(s) but declares {len(result_types)}")
            names = [self._use(x, returned.line) for x in values]
            for k, (n, declared) in enumerate(zip(names, result_types or [], strict=False)):
                want, got = tensor_type(declared, func_line, f"result {k} of @{func}"), self._state[2][n]
                if (want.dtype, want.shape, want.is_tuple) != (got.dtype, got.shape, got.is_tuple):
                    _err(returned.line, f"@{func} declares result {k} as {want} but returns {values[k]}: {got}")
            if len(names) == 1:
                comp.root = names[0]
            else:
                types = [self._state[2][n] for n in names]
                self._add(Instr("(return)", HloType(elements=types), "tuple", names, {}, returned.line), [])
                comp.root = "(return)"
        finally:
            self._state = saved
        self.comps[name] = comp
        return comp

    def _add(self, ins: Instr, values: list):
        comp, scope, types, _ = self._state
        if ins.name in types:
            ins.name = f"{ins.name}.{len(comp.instrs)}"
        comp.instrs.append(ins)
        types[ins.name] = ins.type
        if len(values) == 1:
            scope[values[0]] = ins.name
        elif values:
            for k, value in enumerate(values):        # one get-tuple-element per result
                gte = Instr(f"{ins.name}#{k}", ins.type.elements[k], "get-tuple-element", [ins.name],
                            {"index": (str(k), ins.line)}, ins.line)
                comp.instrs.append(gte)
                types[gte.name] = gte.type
                scope[value] = gte.name

    def _use(self, value: str, line: int) -> str:
        scope = self._state[1]
        if value not in scope:
            _err(line, f"{value} is used before it is defined in @{self._state[3]} (a region may only use its "
                       "own arguments and values)")
        return scope[value]

    def type_of(self, value: str, line: int) -> HloType:
        return self._state[2][self._use(value, line)]

    def _types(self, op: Op) -> list[HloType]:
        what = f"{op.name}"
        types = op.result_types
        if op.name.endswith("optimization_barrier") and len(op.results) > 1 and not op.generic:
            types = op.operand_types
        if len(types) != len(op.results):
            _err(op.line, f"{op.name} defines {len(op.results)} value(s) but its signature gives "
                          f"{len(types)} result type(s)")
        return [tensor_type(t, op.line, what) for t in types]

    @staticmethod
    def _instr_name(op: Op, hlo_op: str) -> str:
        first = op.results[0].lstrip("%").split("#")[0] if op.results else hlo_op
        return f"{hlo_op}.{first}" if first.isdigit() else first

    def op(self, op: Op):
        func = self._state[3]
        if op.name in CALL_OPS:
            return self.call(op)
        check_op(op.name, op.line, word_texts(op.props.get("call_target_name", []))[0].strip('"')
                 if "call_target_name" in op.props else None, func)
        short = split_name(op.name)[1]
        hlo_op, reader = OPS[short]
        view = OpView(op)
        types = self._types(op)
        if not types:
            _err(op.line, f"{op.name} defines no value")
        typ = types[0] if len(types) == 1 else HloType(elements=types)
        name = self._instr_name(op, hlo_op)
        if short == "reduce" and not op.generic:
            return self.pretty_reduce(op, view, typ, name)
        attrs = reader(view, self)
        operands = [self._use(x, op.line) for x in view.values]
        literal = None
        if hlo_op == "constant":
            literal = dense(view.get("value") if op.generic else op.items, typ, op.line, f"{op.name}")
        if hlo_op == "erfc":
            return self.erfc(op, operands, typ, name)
        if hlo_op == "square":      # chlo.square(x) is x * x
            hlo_op, operands = "multiply", operands * 2
        if hlo_op == "broadcast":
            operands, attrs = self.broadcast(op, operands, attrs, typ, name)
        if hlo_op == "opt-barrier" and len(operands) != 1:     # HLO's barrier takes one tuple
            self._add(Instr(f"{name}/in", typ, "tuple", operands, {}, op.line), [])
            operands = [f"{name}/in"]
        self._add(Instr(name, typ, hlo_op, operands, attrs, op.line, literal), op.results)

    def pretty_reduce(self, op: Op, view: OpView, typ: HloType, name: str):
        """``stablehlo.reduce(%x init: %c), ... [applies stablehlo.add] across dimensions = [1]``."""
        inputs, inits = [], []
        for seg in view.positional:
            for it in seg:
                if isinstance(it, Group) and it.open == "(":
                    vals = [t.text for t in it.items if isinstance(t, Tok) and t.kind == "value"]
                    if len(vals) != 2:
                        _err(op.line, f"{op.name}: expected (%input init: %init), got {it}")
                    inputs.append(vals[0])
                    inits.append(vals[1])
        words = [t.text for seg in view.positional for t in seg if isinstance(t, Tok) and t.kind == "word"]
        if "applies" in words:
            if words[-1] == "applies":
                _err(op.line, f"{op.name}: 'applies' must name the reducing op, like applies stablehlo.add")
            body_op = words[words.index("applies") + 1]
            check_op(body_op, op.line, None, self._state[3])
            region = self.applies_region(op, body_op, [self.type_of(x, op.line) for x in inits])
        else:
            region = self.region(view, 0)
        operands = [self._use(x, op.line) for x in inputs + inits]
        attrs = {"dimensions": ints_attr(view.ints("dimensions"), op.line),
                 "to_apply": attr(region, op.line)}
        self._add(Instr(name, typ, "reduce", operands, attrs, op.line), op.results)

    def applies_region(self, op: Op, body_op: str, init_types: list) -> str:
        """The region of the pretty ``applies stablehlo.add``: the op applied to (acc_i, x_i)."""
        hlo_op = OPS[split_name(body_op)[1]][0]
        self.regions += 1
        name = f"{self._state[3]}/region{self.regions}"
        n = len(init_types)
        comp = Computation(name, op.line)
        for k in range(2 * n):
            comp.instrs.append(Instr(f"p{k}", init_types[k % n], "parameter", [], {}, op.line, [str(k)]))
        for k in range(n):
            comp.instrs.append(Instr(f"r{k}", init_types[k], hlo_op, [f"p{k}", f"p{n + k}"], {}, op.line))
        if n == 1:
            comp.root = "r0"
        else:
            comp.instrs.append(Instr("t", HloType(elements=list(init_types)), "tuple",
                                     [f"r{k}" for k in range(n)], {}, op.line))
            comp.root = "t"
        self.comps[name] = comp
        return name

    def region(self, view: OpView, k: int) -> str:
        op = view.op
        if len(op.regions) <= k:
            _err(op.line, f"{op.name} needs a region (its body)")
        blk = op.regions[k]
        self.regions += 1
        name = f"{self._state[3]}/region{self.regions}"
        self.computation(name, blk.args, blk.ops, blk.line, self._state[3])
        return name

    def broadcast(self, op: Op, operands: list, attrs: dict, typ: HloType, name: str):
        """StableHLO's broadcast_in_dim may stretch a size-1 dimension (4x1 -> 4x8); HLO's broadcast may
        not, so such dimensions are first reshaped away."""
        dims = tuple(int(x) for x in attrs["dimensions"][0].items)
        src = self._state[2][operands[0]] if len(operands) == 1 else None
        if src is None or src.is_tuple or typ.is_tuple or len(dims) != len(src.shape) or \
                any(not 0 <= d < len(typ.shape) for d in dims):
            return operands, attrs          # the builder's shape check reports it
        keep = [k for k, d in enumerate(dims) if not (src.shape[k] == 1 and typ.shape[d] != 1)]
        if len(keep) == len(dims):
            return operands, attrs
        squeezed = HloType(src.dtype, tuple(src.shape[k] for k in keep))
        self._add(Instr(f"{name}/squeeze", squeezed, "reshape", operands, {}, op.line), [])
        return [f"{name}/squeeze"], {"dimensions": ints_attr([dims[k] for k in keep], op.line)}

    def erfc(self, op: Op, operands: list, typ: HloType, name: str):
        """chlo.erfc(x) as 1 - erf(x) (see the module docstring on its accuracy)."""
        scalar = HloType(typ.dtype, ())
        one, bone, erf = f"{name}/one", f"{name}/one.b", f"{name}/erf"
        self._add(Instr(one, scalar, "constant", [], {}, op.line, np.asarray(cast(np.ones(()), typ.dtype))), [])
        self._add(Instr(bone, typ, "broadcast", [one], {"dimensions": ints_attr((), op.line)}, op.line), [])
        self._add(Instr(erf, typ, "erf", operands, {}, op.line), [])
        self._add(Instr(name, typ, "subtract", [bone, erf], {}, op.line), op.results)

    def call(self, op: Op):
        symbols = [t.text for t in op.props.get("callee", []) if isinstance(t, Tok) and t.kind == "symbol"]
        callee = op.callee or (symbols[0][1:].strip('"') if symbols else None)
        if callee is None:
            _err(op.line, f"{op.name} needs a callee (@name)")
        check_op(op.name, op.line, callee, self._state[3])
        func = self.funcs.get(callee)
        if func is None:
            _err(op.line, f"call to unknown function @{callee}")
        if callee not in self.comps:
            self.comps[callee] = None          # mark: being lowered (recursion is refused by the builder)
            self.function(func)
        view = OpView(op)
        operands = [self._use(x, op.line) for x in view.values]
        types = self._types(op)
        typ = types[0] if len(types) == 1 else HloType(elements=types)
        name = self._instr_name(op, "call")
        self._add(Instr(name, typ, "call", operands, {"to_apply": attr(callee, op.line)}, op.line), op.results)

    def function(self, func: Func, is_entry=False) -> Computation:
        return self.computation(func.name, func.body.args or func.args, func.body.ops, func.line, func.name,
                                is_entry, func.result_types)


# -- detection and the public entry point ---------------------------------------------------------

_MLIR_START = re.compile(r"\A(?:\s|//[^\n]*\n)*(?:module\b|func\.func\b|#\w+\s*=)")
_MLIR_OPS = re.compile(r"\b(stablehlo|mhlo|chlo)\.[a-z_]+")
_OP_NAMES = re.compile(r'(?:=\s*"?|^\s*"?)(stablehlo|mhlo)\.[a-z_]+', re.M)


def looks_like_mlir(text: str) -> bool:
    """Is ``text`` MLIR (``module @...``, ``func.func``, stablehlo./mhlo. ops) rather than HLO text?"""
    if re.search(r"^\s*HloModule\b", text, re.M):
        return False
    return bool(_MLIR_START.match(text) or _MLIR_OPS.search(text))


def mlir_dialect(text: str) -> str:
    """``"stablehlo"`` or ``"mhlo"``: the dialect most of the text's ops are in."""
    counts = {"stablehlo": 0, "mhlo": 0}
    for m in _OP_NAMES.finditer(text):         # ops only: attributes like mhlo.num_partitions do not count
        counts[m.group(1)] += 1
    return "mhlo" if counts["mhlo"] > counts["stablehlo"] else "stablehlo"


def from_stablehlo(text: str, name: Optional[str] = None) -> Graph:
    """Parse StableHLO or MHLO MLIR text (JAX's default ``as_text()``) into a :class:`Graph`.

    The entry is ``@main`` (or the only public function); graph inputs are its arguments
    in order, outputs its returned values.  ``name`` overrides the graph name (default:
    the module name, ``jit_f``).  ``graph.source`` records the dialect read.  Raises
    :class:`AStitchError` naming the op and line of anything it cannot read.
    """
    if not isinstance(text, str):
        raise AStitchError(f"from_stablehlo expects MLIR text (a str), got {type(text).__name__}")
    if name is not None and not isinstance(name, str):
        raise AStitchError(f"from_stablehlo: name must be a str (the graph name) or None, got {type(name).__name__}")
    if not text.strip():
        raise AStitchError("the StableHLO text is empty: pass the text of jax.jit(f).lower(*args).as_text()")
    funcs = parse(text, check_op)
    if not funcs:
        raise AStitchError("the MLIR text has no func.func: it looks truncated")
    entry = next((f for f in funcs if f.name == "main"), None)
    if entry is None:
        public = [f for f in funcs if f.public]
        if len(public) != 1:
            raise AStitchError(f"the MLIR text has no @main and {len(public)} public functions: cannot tell which "
                               "is the entry")
        entry = public[0]
    module = re.search(r'^\s*module\s+@(?:"([^"\n]+)"|([\w.$-]+))', text, re.M)
    lowerer = _Lowerer(funcs)
    lowerer.comps[entry.name] = None
    comp = lowerer.function(entry, is_entry=True)
    g = Graph(name or (module.group(1) or module.group(2) if module else entry.name))
    try:
        hlo.Builder(lowerer.comps, g).run(comp)
    except RecursionError:
        raise AStitchError("calls nest too deeply to inline") from None
    g.source = mlir_dialect(text)
    return g
