"""Import XLA HLO text (what ``jax.jit(f).lower(*args).as_text(dialect="hlo")`` prints) as a Graph.

(JAX's *default* text, StableHLO MLIR, is read by :mod:`astitch_sim.frontends.stablehlo`, which translates
it into this module's instructions; :func:`astitch_sim.from_hlo` sends MLIR text there.)

The grammar accepted here (a practical subset of XLA's HLO text format)::

    module       := [ "HloModule" NAME { "," KEY "=" value } ] computation+ [ stack-frame tables ]
    computation  := [ "ENTRY" ] NAME [ "(" ... ")" "->" type ] "{" instruction+ "}"
    instruction  := [ "ROOT" ] NAME "=" type OPCODE "(" operands ")" { "," KEY "=" value }
    operands     := [ operand { "," operand } ]        operand := [ type ] NAME
    type         := DTYPE "[" [ INT { "," INT } ] "]" [ "{" minor_to_major [ ":" tiling ] "}" ]
                  | "(" [ type { "," type } ] ")"               (a tuple)
    value        := WORD | STRING | "{" ... "}" | "[" ... "]" | "(" ... ")"   (brackets nest)

Names may carry XLA's old ``%`` prefix (``%add.3``); ``/*index=5*/`` comments and
``// line comments`` are skipped.  ``parameter(N)`` holds the parameter number and
``constant(...)`` a literal: ``1``, ``-inf``, ``nan``, ``true``, or nested braces
``{ {1, 2}, {3, 4} }``, or an empty one for a shape with a 0-length dimension
(``f32[0,64] constant({  })``, as JAX lowers an empty batch).  Attributes the
simulator does not need (``metadata``, ``sharding``, ``frontend_attributes``,
``backend_config``, ``origin``, anything unknown) are parsed as balanced values
and dropped.

How HLO maps onto the Graph:

* every opcode of the op table (:data:`astitch_sim.ir.ops.OPS`) becomes one node with
  the instruction's name, its declared shape and dtype (checked by shape inference)
  and its layout as attr ``layout`` (minor-to-major, HLO's ``{1,0}``);
* ``reduce(x, init), to_apply=R`` becomes a reduce node whose ``reducer`` is read off
  region ``R``: its root must be one ``add | maximum | minimum | multiply | and | or``
  of its two parameters (sum, max, min, prod, and, or); ``reduce-window`` likewise;
* the variadic ``reduce(x, iota, init, init)`` of ``jnp.argmax``/``argmin``, ``sort``
  (its comparator) and ``scatter`` (its combiner: a reducer, or ``assign`` when the
  region returns the update) are identified by what their region *computes*: it is
  run on probe values (NaNs, signed zeros, ties) and must agree with argmax/argmin,
  a lexicographic order or a combiner exactly (:mod:`astitch_sim.frontends.regions`);
* an instruction whose result is a tuple (variadic reduce, sort of several operands,
  ``topk``) becomes one node per element, named ``<name>#<i>``, with attr ``result=i``;
* ``gather``, ``scatter``, ``dynamic-slice`` (``dynamic_slice_sizes``), ``topk``
  (``k``, ``largest``) and ``reduce-window`` (``window={size=.. stride=.. pad=..}``)
  keep their attributes under HLO's names; each opcode's attribute parser is one
  entry of the ``_ATTRS`` table;
* ``call(args), to_apply=C`` (and ``fusion(args), calls=C``) is inlined: ``C``'s
  nodes are added under the name ``<call name>/<instruction name>``;
* ``tuple(...)`` is a python list of values, ``get-tuple-element`` picks from it and
  ``opt-barrier`` (a rematerialisation fence) passes it through; an entry ROOT tuple
  gives several graph outputs, in order.

Not supported (an AStitchError says so): reducer regions other than one binary op of
the two parameters or argmax/argmin, sort comparators other than lexicographic orders,
variadic scatters and reduce-windows, window dilation, ops outside the table (while,
conditional, custom-call, rng...), dynamic shapes, and elided constants ``{...}``.

Every failure is an :class:`~astitch_sim.errors.AStitchError`; messages about a place
in the text start with its line number: ``line 7: unsupported op 'while' in 'while.3' ...``.
"""
from __future__ import annotations

import re
from bisect import bisect_right
from dataclasses import dataclass, field
from typing import NoReturn, Optional, Union

import numpy as np

from ..ir.dtypes import DTYPES, cast
from ..errors import AStitchError
from ..ir.graph import Graph, Node, shape_str
from ..ir.indexed import GATHER_ATTRS
from ..ir.ops import OPS
from ..ir.reducers import REDUCER_OF_OP
from .refusals import is_known_type, unsupported_dtype, unsupported_op
from .regions import identify_pair_reducer, identify_sort_orders
from ..ir.scatter import SCATTER_ATTRS

__all__ = ["parse_hlo_module"]

# -- tokens ---------------------------------------------------------------------

_TOKEN = re.compile(r"""[ \t\r\n\f\v]*(?:
    (?P<comment>/\*.*?\*/|//[^\n]*)
  | (?P<badcomment>/\*)
  | (?P<str>"(?:[^"\\\n]|\\.)*")
  | (?P<badstr>")
  | (?P<arrow>->)
  | (?P<word>(?:[A-Za-z0-9_.%$+]|-(?!>))+)
  | (?P<punct>\S)
)""", re.VERBOSE | re.DOTALL)

_OPEN = {"{": "}", "[": "]", "(": ")"}
_CLOSE = {v: k for k, v in _OPEN.items()}


@dataclass(slots=True)
class Tok:
    kind: str      # word | str | punct | eof
    text: str
    line: int
    start: int     # character offsets, to tell ``f32[4]{0}`` (a layout) from ``f32[4] {`` (a body)
    end: int


def _tokenize(text: str) -> list[Tok]:
    newlines = [m.start() for m in re.finditer("\n", text)]
    toks = []
    for m in _TOKEN.finditer(text):
        kind = m.lastgroup
        start, end = m.span(kind)
        if kind == "comment":
            continue
        line = bisect_right(newlines, start) + 1
        if kind == "badcomment":
            raise AStitchError(f"line {line}: unterminated /* comment: the HLO text looks truncated")
        if kind == "badstr":
            raise AStitchError(f"line {line}: unterminated string: the HLO text looks truncated")
        toks.append(Tok("punct" if kind == "arrow" else kind, m.group(kind), line, start, end))
    toks.append(Tok("eof", "", len(newlines) + 1, len(text), len(text)))
    return toks


@dataclass
class Group:
    """A bracketed attribute value: ``open`` is ``{``, ``[`` or ``(``; items are str tokens or Groups."""
    open: str
    items: list
    line: int

    def __str__(self):
        return self.open + " ".join(str(i) for i in self.items) + _OPEN.get(self.open, "")


# -- parsed module ----------------------------------------------------------------

@dataclass
class HloType:
    dtype: Optional[str] = None          # None for a tuple
    shape: tuple = ()
    layout: Optional[tuple] = None
    elements: Optional[list] = None      # tuple element types

    @property
    def is_tuple(self) -> bool:
        return self.elements is not None

    def __str__(self):
        if self.is_tuple:
            return "(" + ", ".join(str(e) for e in self.elements) + ")"
        return shape_str(self.shape, self.dtype)


@dataclass
class Instr:
    name: str
    type: HloType
    opcode: str
    operands: list          # operand names
    attrs: dict             # key -> str token or Group
    line: int
    literal: object = None  # parameter / constant: the items between the parentheses (or, from the
    #                         StableHLO importer, a constant's value already as a numpy array)


@dataclass
class Computation:
    name: str
    line: int
    is_entry: bool = False
    instrs: list = field(default_factory=list)
    root: Optional[str] = None


_STACK_FRAME_SECTIONS = {"FileNames", "FunctionNames", "FileLocations", "StackFrames"}


class _Parser:
    """Recursive-descent parser from tokens to :class:`Computation` objects."""

    def __init__(self, text: str):
        self.toks = _tokenize(text)
        self.i = 0

    # token helpers
    @property
    def tok(self) -> Tok:
        return self.toks[self.i]

    def peek(self, k: int = 1) -> Tok:
        return self.toks[min(self.i + k, len(self.toks) - 1)]

    def next(self) -> Tok:
        t = self.toks[self.i]
        if t.kind != "eof":
            self.i += 1
        return t

    def error(self, msg: str, line: Optional[int] = None):
        raise AStitchError(f"line {line if line is not None else self.tok.line}: {msg}")

    def expect(self, text: str, what: str) -> Tok:
        t = self.tok
        if t.kind == "eof":
            self.error(f"unexpected end of text, expected {text!r} {what}: the HLO text looks truncated")
        if t.text != text or t.kind == "str":
            self.error(f"expected {text!r} {what}, found {t.text!r}")
        return self.next()

    def accept(self, text: str) -> bool:
        if self.tok.kind != "str" and self.tok.text == text and self.tok.kind != "eof":
            self.next()
            return True
        return False

    def word(self, what: str) -> str:
        t = self.tok
        if t.kind == "eof":
            self.error(f"unexpected end of text, expected {what}: the HLO text looks truncated")
        if t.kind != "word":
            self.error(f"expected {what}, found {t.text!r}")
        self.next()
        return t.text

    def name(self, what: str) -> str:
        return self.word(what).lstrip("%")

    # generic values
    def group(self) -> Group:
        open_tok = self.next()
        items = []
        while True:
            t = self.tok
            if t.kind == "eof":
                self.error(f"{open_tok.text!r} opened on line {open_tok.line} is never closed: "
                           "the HLO text looks truncated")
            if t.kind == "punct" and t.text in _OPEN:
                items.append(self.group())
            elif t.kind == "punct" and t.text in _CLOSE:
                if t.text != _OPEN[open_tok.text]:
                    self.error(f"{t.text!r} does not match {open_tok.text!r} opened on line {open_tok.line}")
                self.next()
                return Group(open_tok.text, items, open_tok.line)
            else:
                items.append(self.next().text)

    def item(self):
        t = self.tok
        if t.kind == "eof":
            self.error("unexpected end of text, expected a value: the HLO text looks truncated")
        if t.kind == "punct" and t.text in _OPEN:
            return self.group()
        if t.kind == "punct" and t.text in _CLOSE:
            self.error(f"unexpected {t.text!r}")
        return self.next().text

    def value(self):
        """An attribute value: one item, plus any further items on the same line (``a->b``)."""
        first = self.item()
        extra = []
        while True:
            t, prev = self.tok, self.toks[self.i - 1]
            if (t.kind == "eof" or t.line != prev.line or t.text in (",", "}", ")", "]", "ROOT")
                    or (t.kind == "word" and self.peek().text == "=")):
                break
            extra.append(self.item())
        return first if not extra else Group("", [first] + extra, prev.line)

    def attributes(self) -> dict:
        attrs = {}
        while self.accept(","):
            line = self.tok.line
            key = self.word("an attribute name after ','")
            self.expect("=", f"after attribute {key!r}")
            attrs[key] = (self.value(), line)
        return attrs

    # types
    def type(self) -> HloType:
        t = self.tok
        if t.kind == "punct" and t.text == "(":
            self.next()
            elements = []
            if not self.accept(")"):
                while True:
                    elements.append(self.type())
                    if self.accept(")"):
                        break
                    self.expect(",", "between tuple element types")
            return HloType(elements=elements)
        if t.kind == "eof":
            self.error("unexpected end of text, expected a type: the HLO text looks truncated")
        if t.kind != "word":
            self.error(f"malformed type: expected an element type like f32[4,8], found {t.text!r}")
        dtype = self.next().text
        if dtype not in DTYPES:
            if is_known_type(dtype):
                self.error(unsupported_dtype(dtype), t.line)
            self.error(f"malformed type: unknown element type {dtype!r} (astitch-sim knows "
                       f"{', '.join(DTYPES)})", t.line)
        if not (self.tok.kind == "punct" and self.tok.text == "["):
            self.error(f"malformed type: expected '[' after element type {dtype!r}, found {self.tok.text!r}")
        bracket = self.next()
        dims = []
        if not self.accept("]"):
            while True:
                d = self.tok
                if d.kind == "eof":
                    self.error("unexpected end of text inside a type: the HLO text looks truncated")
                if d.kind != "word" or not d.text.isdigit():
                    self.error(f"malformed type: dimension sizes must be non-negative integers, found {d.text!r}"
                               + (" (dynamic shapes are not supported)" if d.text in ("<", "?") else ""))
                dims.append(int(self.next().text))
                if self.accept("]"):
                    break
                self.expect(",", "between dimension sizes of a type")
        layout = None
        end = self.toks[self.i - 1].end
        if self.tok.text == "{" and self.tok.kind == "punct" and self.tok.start == end:
            layout = self._layout(self.group(), len(dims), bracket.line)
        return HloType(dtype, tuple(dims), layout)

    def _layout(self, g: Group, rank: int, line: int) -> tuple:
        order = []
        for it in g.items:
            if it == ":":       # tiling / memory space follow the dimension order
                break
            if it == ",":
                continue
            if not isinstance(it, str) or not it.isdigit():
                self.error(f"malformed layout {g}: expected minor-to-major dimension numbers", line)
            order.append(int(it))
        if sorted(order) != list(range(rank)):
            self.error(f"malformed layout {g}: it must order all {rank} dimensions", line)
        return tuple(order)

    # module structure
    def module(self) -> tuple[str, list[Computation]]:
        name = None
        if self.tok.text == "HloModule":
            self.next()
            name = self.name("the module name after HloModule")
            self.attributes()
        comps = []
        while self.tok.kind != "eof":
            if self.tok.text in _STACK_FRAME_SECTIONS:
                self._skip_section()
                continue
            comps.append(self.computation())
        return name, comps

    def _skip_section(self):
        """XLA's stack-frame tables (``FileNames`` / ``1 "f.py"``...): debug info, skipped."""
        self.next()
        while self.tok.kind != "eof" and self.tok.text not in _STACK_FRAME_SECTIONS:
            if self.tok.kind == "word" and self.tok.text.isdigit():
                self.next()
                self.item()
            else:
                break

    def computation(self) -> Computation:
        start = self.tok
        is_entry = self.accept("ENTRY")
        name = self.name("a computation name (like 'ENTRY main.4 {')")
        if self.tok.text == "(" and self.tok.kind == "punct":   # old style: (p: f32[4]) -> f32[4]
            self.group()
            if self.accept("->"):
                self.type()
        self.attributes()
        self.expect("{", f"to open computation {name!r}")
        comp = Computation(name, start.line, is_entry)
        seen = set()
        while not self.accept("}"):
            if self.tok.kind == "eof":
                self.error(f"computation {name!r} (line {start.line}) is never closed with '}}': "
                           "the HLO text looks truncated")
            ins, is_root = self.instruction()
            if ins.name in seen:
                self.error(f"instruction name {ins.name!r} is defined twice in {name!r}", ins.line)
            seen.add(ins.name)
            comp.instrs.append(ins)
            if is_root:
                if comp.root is not None:
                    self.error(f"computation {name!r} has two ROOT instructions", ins.line)
                comp.root = ins.name
        if comp.root is None:
            self.error(f"computation {name!r} (line {start.line}) has no ROOT instruction: "
                       "the HLO text looks truncated or hand-edited", start.line)
        return comp

    def instruction(self) -> tuple[Instr, bool]:
        is_root = self.accept("ROOT")
        line = self.tok.line
        name = self.name("an instruction name (like 'add.3 = f32[4] add(x, y)')")
        self.expect("=", f"after instruction name {name!r}")
        typ = self.type()
        opcode = self.word(f"the opcode of {name!r}")
        self.expect("(", f"after opcode {opcode!r} of {name!r}")
        operands, literal = [], None
        if opcode in ("parameter", "constant"):
            items = []
            while not (self.tok.kind == "punct" and self.tok.text == ")"):
                if self.tok.kind == "eof":
                    self.error(f"'(' of {name!r} is never closed: the HLO text looks truncated")
                items.append(self.item())
            literal = items
            self.expect(")", f"to close {opcode} {name!r}")
        elif not self.accept(")"):
            while True:
                if (self.tok.kind == "punct" and self.tok.text == "(") or \
                        (self.tok.kind == "word" and self.peek().text == "[" and self.peek().kind == "punct"):
                    self.type()         # typed operand: f32[4]{0} %x
                operands.append(self.name(f"an operand of {name!r}"))
                if self.tok.kind == "punct" and self.tok.text == ")":
                    break
                self.expect(",", f"between operands of {name!r}")
            self.expect(")", f"to close the operands of {name!r}")
        attrs = self.attributes()
        return Instr(name, typ, opcode, operands, attrs, line, literal), is_root


# -- attribute readers ---------------------------------------------------------------

def _err(line, msg) -> NoReturn:
    raise AStitchError(f"line {line}: {msg}")


def _attr(ins: Instr, key: str, default=None, required=False):
    if key not in ins.attrs:
        if required:
            _err(ins.line, f"{ins.opcode} {ins.name!r} needs attribute {key}=")
        return default
    return ins.attrs[key][0]


def _int(text, ins: Instr, what: str) -> int:
    if isinstance(text, str) and re.fullmatch(r"-?\d+", text):
        return int(text)
    _err(ins.line, f"{ins.name!r}: {what} must be an integer, got {text}")


def _int_list(ins: Instr, key: str, default=()) -> tuple:
    v = _attr(ins, key)
    if v is None:
        return tuple(default)
    if not isinstance(v, Group) or v.open != "{":
        _err(ins.line, f"{ins.name!r}: {key}= must be a list like {{0,1}}, got {v}")
    return tuple(_int(x, ins, key) for x in v.items if x != ",")


def _word_attr(ins: Instr, key: str, required=True) -> Optional[str]:
    v = _attr(ins, key, required=required)
    if v is not None and not isinstance(v, str):
        _err(ins.line, f"{ins.name!r}: {key}= must be a single word, got {v}")
    return v.lstrip("%") if v is not None else None


def _slice_attrs(ins: Instr) -> dict:
    v = _attr(ins, "slice", required=True)
    starts, limits, strides = [], [], []
    parts = v.items if isinstance(v, Group) and v.open == "{" else None
    if parts is None:
        _err(ins.line, f"{ins.name!r}: slice= must look like {{[0:4], [2:8:2]}}, got {v}")
    for p in parts:
        if p == ",":
            continue
        nums = [x for x in p.items if x != ":"] if isinstance(p, Group) and p.open == "[" else None
        if not nums or len(nums) not in (2, 3):
            _err(ins.line, f"{ins.name!r}: slice= must look like {{[0:4], [2:8:2]}}, got {v}")
        nums = [_int(x, ins, "a slice bound") for x in nums]
        starts.append(nums[0])
        limits.append(nums[1])
        strides.append(nums[2] if len(nums) == 3 else 1)
    return dict(starts=tuple(starts), limits=tuple(limits), strides=tuple(strides))


def _pad_attrs(ins: Instr) -> dict:
    v = _word_attr(ins, "padding")
    low, high, interior = [], [], []
    for dim in v.split("x") if v else []:
        parts = dim.split("_")
        if len(parts) not in (2, 3):
            _err(ins.line, f"{ins.name!r}: padding={v} must be low_high[_interior] per dim, joined by 'x'")
        nums = [_int(p, ins, "a padding amount") for p in parts]
        low.append(nums[0])
        high.append(nums[1])
        interior.append(nums[2] if len(nums) == 3 else 0)
    return dict(low=tuple(low), high=tuple(high), interior=tuple(interior))


def _literal(ins: Instr) -> np.ndarray:
    """The value of ``constant(...)``: a scalar word or nested ``{...}`` matching the declared shape."""
    items = list(ins.literal)
    if len(items) >= 2 and isinstance(items[0], str) and items[0] in DTYPES and isinstance(items[1], Group) \
            and items[1].open == "[":          # old style: constant(f32[2] {1, 2})
        items = items[2:]
        if items and isinstance(items[0], Group) and items[0].open == "{" and len(items) > 1:
            items = items[1:]                 # its layout
    items = [it for it in items if not (isinstance(it, Group) and it.open == "(")]   # nan(0x7fc00000)
    if len(items) != 1:
        _err(ins.line, f"constant {ins.name!r}: cannot read literal {' '.join(map(str, ins.literal)) or '()'}")
    flat, shape = [], []

    def walk(node, depth):
        if isinstance(node, Group):
            if node.open != "{":
                _err(ins.line, f"constant {ins.name!r}: unexpected {node} in literal")
            elems, cur = [], []
            for it in node.items:
                if it == ",":
                    elems.append(cur)
                    cur = []
                elif isinstance(it, Group) and it.open == "(":
                    continue
                else:
                    cur.append(it)
            if cur or elems:
                elems.append(cur)
            if len(shape) <= depth:
                shape.append(len(elems))
            elif shape[depth] != len(elems):
                _err(ins.line, f"constant {ins.name!r}: ragged literal (rows of {shape[depth]} and {len(elems)})")
            for e in elems:
                if len(e) != 1:
                    _err(ins.line, f"constant {ins.name!r}: cannot read literal element {' '.join(map(str, e))!r}")
                walk(e[0], depth + 1)
        else:
            if len(shape) > depth:
                _err(ins.line, f"constant {ins.name!r}: ragged literal")
            flat.append(node)

    walk(items[0], 0)
    want = ins.type.shape
    if not flat and 0 in shape and tuple(shape) == tuple(want[:len(shape)]) and shape[-1] == 0:
        # an empty literal: XLA prints f32[0,64] as {  } and f32[3,0] as { {}, {}, {} } (no inner sizes)
        return cast(np.zeros(want), ins.type.dtype)
    if tuple(shape) != tuple(want) and not (not want and not shape):
        if "..." in flat:
            _err(ins.line, f"constant {ins.name!r} was printed elided ({{...}}): print the HLO with large "
                           "constants included")
        _err(ins.line, f"constant {ins.name!r}: literal has shape {list(shape)} but the type says "
                       f"{shape_str(want, ins.type.dtype)}")
    dtype = ins.type.dtype
    values = []
    for s in flat:
        try:
            if dtype == "pred":
                if s not in ("true", "false", "0", "1"):
                    raise ValueError(s)
                values.append(s in ("true", "1"))
            elif DTYPES[dtype][2]:
                values.append(float(s))
            else:
                values.append(int(s))
        except (ValueError, TypeError):
            hint = " (printed elided: include large constants)" if s == "..." else ""
            _err(ins.line, f"constant {ins.name!r}: {s!r} is not a {dtype} value{hint}")
    if dtype == "pred":
        arr = np.array(values, dtype=np.bool_)
    elif DTYPES[dtype][2]:
        arr = np.array(values, dtype=np.float64)
    else:
        try:
            arr = np.array(values, dtype=DTYPES[dtype][0])
        except OverflowError:
            _err(ins.line, f"constant {ins.name!r}: a value does not fit in {dtype}")
    return cast(arr.reshape(want), dtype)


# -- building the graph ------------------------------------------------------------

_STRUCTURAL = {"call", "fusion", "tuple", "get-tuple-element", "opt-barrier"}
Value = Union[Node, list]


class Builder:
    """Computations of :class:`Instr` s -> graph nodes (inlining calls, reading regions, checking types).

    The one place instructions become nodes: the StableHLO importer translates MLIR ops into
    these same instructions and runs this builder, so both texts mean the same graph."""

    def __init__(self, comps: dict[str, Computation], graph: Graph):
        self.comps, self.g = comps, graph

    def run(self, entry: Computation):
        params = {}
        for ins in entry.instrs:
            if ins.opcode == "parameter":
                n = self._param_number(ins)
                if n in params:
                    _err(ins.line, f"parameter number {n} is used by both {params[n]!r} and {ins.name!r}")
                params[n] = ins.name
        if sorted(params) != list(range(len(params))):
            _err(entry.line, f"ENTRY parameters must be numbered 0..{len(params) - 1}, got {sorted(params)}")
        root = self.emit(entry, None, "", [entry.name])
        outs = root if isinstance(root, list) else [root]
        flat = []

        def flatten(v):
            for x in v:
                flatten(x) if isinstance(x, list) else flat.append(x)
        flatten(outs)
        if not flat:
            _err(entry.line, f"ENTRY {entry.name!r} returns an empty tuple: nothing to compute")
        self.g.set_outputs(flat)

    @staticmethod
    def _param_number(ins: Instr) -> int:
        lit = ins.literal or []
        if len(lit) != 1 or not isinstance(lit[0], str) or not lit[0].isdigit():
            _err(ins.line, f"parameter {ins.name!r} needs its number, like parameter(0)")
        return int(lit[0])

    def emit(self, comp: Computation, args: Optional[list], prefix: str, stack: list) -> Value:
        env: dict[str, Value] = {}
        for ins in comp.instrs:
            env[ins.name] = self.instr(ins, env, args, prefix, comp, stack)
        return env[comp.root]

    def _check_type(self, ins: Instr, v: Value, typ: HloType, what: str):
        if typ.is_tuple:
            if not isinstance(v, list) or len(v) != len(typ.elements):
                _err(ins.line, f"{what} is declared as tuple {typ} but gets {self._describe(v)}")
            for x, t in zip(v, typ.elements):
                self._check_type(ins, x, t, what)
        elif isinstance(v, list) or (tuple(v.shape), v.dtype) != (typ.shape, typ.dtype):
            _err(ins.line, f"{what} is declared as {typ} but gets {self._describe(v)}")

    def _describe(self, v: Value) -> str:
        if isinstance(v, list):
            return "(" + ", ".join(self._describe(x) for x in v) + ")"
        return shape_str(v.shape, v.dtype)

    def instr(self, ins: Instr, env, args, prefix, comp, stack) -> Value:
        op = ins.opcode
        if op not in OPS and op not in _STRUCTURAL:
            target = _attr(ins, "custom_call_target") if op == "custom-call" else None
            _err(ins.line, unsupported_op(op, f"in {ins.name!r}", str(target).strip('"') if target else None))
        ops = []
        for o in ins.operands:
            if o not in env:
                _err(ins.line, f"{ins.name!r} uses undefined operand {o!r} (not defined earlier in "
                               f"computation {comp.name!r})")
            ops.append(env[o])
        if op == "tuple":
            if ins.type.is_tuple:
                self._check_type(ins, ops, ins.type, f"tuple {ins.name!r}")
            return ops
        if op == "get-tuple-element":
            index = _int(_attr(ins, "index", required=True), ins, "index=")
            if len(ops) != 1 or not isinstance(ops[0], list):
                _err(ins.line, f"get-tuple-element {ins.name!r} needs one tuple operand")
            if not 0 <= index < len(ops[0]):
                _err(ins.line, f"get-tuple-element {ins.name!r}: index {index} is out of range for a "
                               f"{len(ops[0])}-tuple")
            v = ops[0][index]
            self._check_type(ins, v, ins.type, f"get-tuple-element {ins.name!r}")
            return v
        if op in ("call", "fusion"):
            return self._inline(ins, ops, prefix, stack)
        if op == "opt-barrier":      # a scheduling fence for rematerialisation: the value passes through
            if len(ops) != 1:
                _err(ins.line, f"opt-barrier {ins.name!r} takes one operand, got {len(ops)}")
            self._check_type(ins, ops[0], ins.type, f"opt-barrier {ins.name!r}")
            return ops[0]
        if op == "parameter" and args is not None:
            n = self._param_number(ins)
            if n >= len(args):
                _err(ins.line, f"{ins.name!r} is parameter({n}) but {comp.name!r} was called with "
                               f"{len(args)} argument(s)")
            self._check_type(ins, args[n], ins.type, f"parameter {ins.name!r} of {comp.name!r}")
            return args[n]
        for o, v in zip(ins.operands, ops):
            if isinstance(v, list):
                _err(ins.line, f"{op} {ins.name!r}: operand {o!r} is a tuple; pick an element with "
                               "get-tuple-element")
        parse = _ATTRS.get(op, _no_attrs)
        if ins.type.is_tuple:
            if op not in _MULTI_RESULT:
                _err(ins.line, f"{op} {ins.name!r} has tuple type {ins.type}; only tuple, call, get-tuple-element "
                               f"and {', '.join(sorted(_MULTI_RESULT))} may produce tuples")
            if any(e.is_tuple for e in ins.type.elements):
                _err(ins.line, f"{op} {ins.name!r}: nested tuple type {ins.type} is not supported")
            attrs = parse(self, ins, ops)
            return [self._node(ins, op, ops, dict(attrs, result=i), t, f"{prefix}{ins.name}#{i}")
                    for i, t in enumerate(ins.type.elements)]
        return self._node(ins, op, ops, parse(self, ins, ops), ins.type, prefix + ins.name)

    def _node(self, ins: Instr, op: str, ops: list, attrs: dict, typ: HloType, name: str) -> Node:
        layout = typ.layout if typ.layout is not None else tuple(range(len(typ.shape) - 1, -1, -1))
        try:
            return self.g.add_node(op, ops, shape=typ.shape, dtype=typ.dtype, name=name, layout=layout, **attrs)
        except AStitchError as e:
            raise AStitchError(f"line {ins.line}: {e}") from None

    # -- attribute parsers, one per opcode (the _ATTRS table below) ----------------------------
    def _region(self, ins: Instr, key: str = "to_apply") -> Computation:
        region_name = _word_attr(ins, key)
        region = self.comps.get(region_name)
        if region is None:
            _err(ins.line, f"{ins.opcode} {ins.name!r} applies unknown computation {region_name!r}")
        return region

    def _region_graph(self, ins: Instr, region: Computation) -> Graph:
        """The region as a small Graph of its own (parameters in, ROOT out), to run on probe values."""
        g = Graph(region.name)
        try:
            Builder(self.comps, g).run(region)
        except AStitchError as e:
            _err(ins.line, f"{ins.opcode} {ins.name!r}: cannot read its region {region.name!r}: {e}")
        return g

    def _reduce_attrs(self, ins: Instr, ops: list) -> dict:
        dims = _int_list(ins, "dimensions")
        if len(ops) == 2:
            return {"dimensions": dims, "reducer": self._reducer(ins, ops[0])}
        if len(ops) != 4 or not ins.type.is_tuple:
            _err(ins.line, f"reduce {ins.name!r} has {len(ops)} operands: astitch-sim reads reduce(input, init) "
                           "and the two-input argmax/argmin reduce(values, indices, init, init); a variadic reduce "
                           "of more inputs is not supported")
        region = self._region(ins)
        found = identify_pair_reducer(self._region_graph(ins, region), ops[0].dtype, ops[1].dtype)
        if found is None:
            _err(ins.line, f"reduce {ins.name!r}: its two-value region {region.name!r} is not argmax or argmin "
                           "(checked on probe values: NaN first, then the larger/smaller value, ties to the lower "
                           "index); other variadic reducers are not supported")
        return {"dimensions": dims, "reducer": found}

    def _reducer(self, ins: Instr, x: Node) -> str:
        region = self._region(ins)
        params = [i for i in region.instrs if i.opcode == "parameter"]
        body = [i for i in region.instrs if i.opcode != "parameter"]
        root = next(i for i in region.instrs if i.name == region.root)
        names = sorted(p.name for p in params)
        ok = (len(params) == 2 and len(body) == 1 and root is body[0] and root.opcode in REDUCER_OF_OP
              and sorted(root.operands) == names and len(set(names)) == 2
              and all(p.type.shape == () and not p.type.is_tuple for p in params))
        if not ok:
            found = ", ".join(f"{i.opcode}" for i in body) or "no operation"
            _err(ins.line, f"{ins.opcode} {ins.name!r}: region {region.name!r} is not a recognised reducer "
                           f"(it has {len(params)} parameter(s) and computes {found}); astitch-sim reduces with "
                           "one add/maximum/minimum/multiply/and/or of the region's two parameters")
        reducer = REDUCER_OF_OP[root.opcode]
        if reducer in ("and", "or") and x.dtype != "pred":
            _err(ins.line, f"{ins.opcode} {ins.name!r}: a bitwise {reducer} reduce over {x.dtype} is not "
                           "supported, only over pred")
        return reducer

    def _combiner(self, ins: Instr, x: Node) -> str:
        """A scatter's region: returns the update (assign), or one binary op of old and new (a reducer)."""
        region = self._region(ins)
        params = sorted((i for i in region.instrs if i.opcode == "parameter"), key=self._param_number)
        root = next(i for i in region.instrs if i.name == region.root)
        if len(params) == 2 and root is params[1]:
            return "assign"
        return self._reducer(ins, x)

    def _sort_attrs(self, ins: Instr, ops: list) -> dict:
        dims = _int_list(ins, "dimensions")
        if len(dims) != 1:
            _err(ins.line, f"sort {ins.name!r} needs dimensions={{d}} with one dimension, got {dims}")
        region = self._region(ins)
        orders = identify_sort_orders(self._region_graph(ins, region), [o.dtype for o in ops])
        if orders is None:
            _err(ins.line, f"sort {ins.name!r}: comparator {region.name!r} is not a lexicographic order over its "
                           "keys (ascending or descending, with JAX's NaN-last order or IEEE total order; checked on "
                           "probe values); other comparators are not supported")
        stable = _word_attr(ins, "is_stable", required=False)
        return {"dimension": dims[0], "orders": orders, "is_stable": stable == "true"}

    def _topk_attrs(self, ins: Instr, ops: list) -> dict:
        largest = _word_attr(ins, "largest", required=False)
        if largest not in (None, "true", "false"):
            _err(ins.line, f"topk {ins.name!r}: largest= must be true or false, got {largest}")
        return {"k": _int(_attr(ins, "k", required=True), ins, "k="), "largest": largest != "false"}

    def _scatter_attrs(self, ins: Instr, ops: list) -> dict:
        if len(ops) != 3 or ins.type.is_tuple:
            _err(ins.line, f"scatter {ins.name!r} has {len(ops)} operands: only scatter(operand, indices, updates) "
                           "of one array is supported")
        attrs = {k: _int_list(ins, k) for k in SCATTER_ATTRS if k != "index_vector_dim"}
        attrs["index_vector_dim"] = _int(_attr(ins, "index_vector_dim", required=True), ins, "index_vector_dim=")
        attrs["combiner"] = self._combiner(ins, ops[0])
        return attrs

    def _window_attrs(self, ins: Instr, ops: list) -> dict:
        if len(ops) != 2 or ins.type.is_tuple:
            _err(ins.line, f"reduce-window {ins.name!r} has {len(ops)} operands: only reduce-window(input, init) "
                           "of one array is supported")
        attrs = _window(ins, len(ins.type.shape))
        attrs["reducer"] = self._reducer(ins, ops[0])
        return attrs

    def _inline(self, ins: Instr, ops: list, prefix: str, stack: list) -> Value:
        key = "calls" if ins.opcode == "fusion" else "to_apply"
        callee_name = _word_attr(ins, key)
        callee = self.comps.get(callee_name)
        if callee is None:
            _err(ins.line, f"{ins.opcode} {ins.name!r} calls unknown computation {callee_name!r}")
        if callee_name in stack:
            _err(ins.line, f"{ins.opcode} {ins.name!r}: computation {callee_name!r} calls itself "
                           f"({' -> '.join(stack + [callee_name])})")
        n_params = sum(1 for i in callee.instrs if i.opcode == "parameter")
        if n_params != len(ops):
            _err(ins.line, f"{ins.opcode} {ins.name!r} passes {len(ops)} argument(s) to {callee_name!r}, "
                           f"which has {n_params} parameter(s)")
        result = self.emit(callee, ops, f"{prefix}{ins.name}/", stack + [callee_name])
        self._check_type(ins, result, ins.type, f"{ins.opcode} {ins.name!r}")
        return result


def _no_attrs(builder, ins: Instr, ops: list) -> dict:
    return {}


def _ints_attrs(*keys, rename=None):
    """A parser reading integer-list attributes ``keys`` (``rename`` maps an HLO key to the attr name)."""
    rename = rename or {}

    def parse(builder, ins, ops):
        return {rename.get(k, k): _int_list(ins, k) for k in keys}
    return parse


def _concatenate_attrs(builder, ins, ops):
    dims = _int_list(ins, "dimensions")
    if len(dims) != 1:
        _err(ins.line, f"concatenate {ins.name!r} needs dimensions={{d}} with one dimension, got {dims}")
    return {"dimension": dims[0]}


def _compare_attrs(builder, ins, ops):
    attrs = {"direction": _word_attr(ins, "direction")}
    kind = _word_attr(ins, "type", required=False)
    if kind is not None:
        attrs["type"] = kind
    return attrs


def _gather_attrs(builder, ins, ops):
    attrs = {k: _int_list(ins, k) for k in GATHER_ATTRS if k != "index_vector_dim"}
    attrs["index_vector_dim"] = _int(_attr(ins, "index_vector_dim", required=True), ins, "index_vector_dim=")
    return attrs


def _window(ins: Instr, rank: int) -> dict:
    """``window={size=1x16 stride=1x2 pad=0_0x15_0}`` -> window_dimensions, window_strides, padding_low/high."""
    v = _attr(ins, "window", required=True)
    items = v.items if isinstance(v, Group) and v.open == "{" else None
    if items is None:
        _err(ins.line, f"{ins.name!r}: window= must look like {{size=1x16 pad=0_0x15_0}}, got {v}")
    fields = {}
    if len(items) % 3 or any(not isinstance(it, str) for it in items) or any(items[i + 1] != "=" for i in
                                                                            range(0, len(items), 3)):
        _err(ins.line, f"{ins.name!r}: window= must be key=value fields like {{size=1x16 pad=0_0x15_0}}, got {v}")
    for i in range(0, len(items), 3):
        fields[items[i]] = items[i + 2]
    unknown = set(fields) - {"size", "stride", "pad", "lhs_dilate", "rhs_dilate"}
    if unknown:
        _err(ins.line, f"{ins.name!r}: unknown window field(s) {sorted(unknown)} in window={v}")
    for key in ("lhs_dilate", "rhs_dilate"):
        if key in fields and any(x != "1" for x in fields[key].split("x")):
            _err(ins.line, f"{ins.name!r}: a window with {key}={fields[key]} (dilation) is not supported")

    def nums(text, what):
        return tuple(_int(x, ins, what) for x in text.split("x")) if text else ()
    size = nums(fields.get("size", ""), "a window size")
    pads = [p.split("_") for p in fields["pad"].split("x")] if "pad" in fields else [("0", "0")] * rank
    if any(len(p) != 2 for p in pads):
        _err(ins.line, f"{ins.name!r}: window pad= must be low_high per dim, joined by 'x'")
    return {"window_dimensions": size, "window_strides": nums(fields.get("stride", ""), "a window stride") or
            (1,) * rank, "padding_low": tuple(_int(p[0], ins, "a padding") for p in pads),
            "padding_high": tuple(_int(p[1], ins, "a padding") for p in pads)}


def _dynamic_slice_attrs(builder, ins, ops):
    return {"slice_sizes": _int_list(ins, "dynamic_slice_sizes")}


#: opcode -> parser of its attributes (ops not listed have none the simulator needs)
_ATTRS = {
    "parameter": lambda b, ins, ops: {"index": b._param_number(ins)},
    "constant": lambda b, ins, ops: {"value": ins.literal if isinstance(ins.literal, np.ndarray) else _literal(ins)},
    "iota": lambda b, ins, ops: {"iota_dimension": _int(_attr(ins, "iota_dimension", "0"), ins, "iota_dimension=")},
    "broadcast": _ints_attrs("dimensions"),
    "reverse": _ints_attrs("dimensions"),
    "transpose": _ints_attrs("dimensions", rename={"dimensions": "permutation"}),
    "concatenate": _concatenate_attrs,
    "compare": _compare_attrs,
    "slice": lambda b, ins, ops: _slice_attrs(ins),
    "pad": lambda b, ins, ops: _pad_attrs(ins),
    "dot": _ints_attrs("lhs_batch_dims", "lhs_contracting_dims", "rhs_batch_dims", "rhs_contracting_dims"),
    "reduce": Builder._reduce_attrs,
    "gather": _gather_attrs,
    "dynamic-slice": _dynamic_slice_attrs,
    "scatter": Builder._scatter_attrs,
    "sort": Builder._sort_attrs,
    "topk": Builder._topk_attrs,
    "reduce-window": Builder._window_attrs,
}
#: ops whose result may be a tuple: one node per element, attr ``result`` = its position
_MULTI_RESULT = {name for name, row in OPS.items() if row.tuple_result}


def parse_hlo_module(text: str, name: Optional[str] = None) -> Graph:
    """Parse XLA HLO module text (already checked to be a non-empty str that is not MLIR) into a Graph.

    The HLO half of :func:`astitch_sim.frontends.from_text.from_hlo`, which checks its arguments and sends
    StableHLO/MHLO text to :mod:`astitch_sim.frontends.stablehlo` (which builds on this module) instead.
    """
    try:
        module_name, comps = _Parser(text).module()
    except RecursionError:
        raise AStitchError("the HLO text nests brackets too deeply to parse") from None
    by_name: dict[str, Computation] = {}
    for c in comps:
        if c.name in by_name:
            _err(c.line, f"computation {c.name!r} is defined twice")
        by_name[c.name] = c
    entries = [c for c in comps if c.is_entry]
    if not entries:
        raise AStitchError("the HLO text has no ENTRY computation (a line like 'ENTRY main.4 {'): "
                           "it looks truncated or is not an HloModule")
    if len(entries) > 1:
        _err(entries[1].line, f"a second ENTRY computation {entries[1].name!r}; a module has one")
    g = Graph(name or module_name or entries[0].name)
    try:
        Builder(by_name, g).run(entries[0])
    except RecursionError:
        raise AStitchError("calls nest too deeply to inline") from None
    g.source = "hlo"
    return g
