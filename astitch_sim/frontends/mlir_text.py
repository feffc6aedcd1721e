"""Read the MLIR text JAX prints (StableHLO / MHLO / CHLO) into functions of ops.

This module knows MLIR's *syntax* only, not what any op means (that is
:mod:`astitch_sim.frontends.stablehlo`).  The grammar read here is the part of MLIR that
``jax.jit(f).lower(*args).as_text()`` prints::

    file      := { alias-def } ( "module" [ "@"NAME ] [ "attributes" dict ] "{" func* "}" | func* ) { alias-def }
    alias-def := "#"NAME "=" value                      (e.g. #loc3 = loc("f.py":3:4): dropped)
    func      := "func.func" [ "public" | "private" ] "@"NAME "(" [ arg { "," arg } ] ")"
                 [ "->" ( type | "(" type [ dict ] { "," type [ dict ] } ")" ) ] [ "attributes" dict ] block
    arg       := VALUE ":" type [ dict ]
    block     := "{" [ "^"NAME "(" arg { "," arg } ")" ":" ] op* "}"
    op        := [ results "=" ] ( generic | pretty )
    results   := VALUE { "," VALUE } | VALUE ":" INT          (%1:2 defines %1#0 and %1#1)
    generic   := STRING "(" [ VALUE { "," VALUE } ] ")" [ "<" dict ">" ] [ "(" block { "," block } ")" ]
                 [ dict ] ":" signature
    pretty    := WORD items ":" signature [ "reducer" ( "(" arg "," arg ")" )+ block ]
    signature := "(" types ")" "->" results-types  |  type [ "->" results-types ]  |  type { "," type }

A *pretty* op's custom syntax (``stablehlo.compare GT, %a, %b, FLOAT``, ``dims = [0]``...)
is kept as a flat list of items (tokens and bracketed :class:`Group` s) up to the
top-level ``:`` that starts its signature; the StableHLO reader interprets the items
per op.  Locations (``loc(...)``) are dropped wherever they appear.  Every failure is an
:class:`AStitchError` starting with the line number.
"""
from __future__ import annotations

import re
from bisect import bisect_right
from dataclasses import dataclass, field
from typing import NoReturn, Optional

from ..errors import AStitchError

_TOKEN = re.compile(r"""[ \t\r\n\f\v]*(?:
    (?P<comment>//[^\n]*)
  | (?P<str>"(?:[^"\\\n]|\\.)*")
  | (?P<badstr>")
  | (?P<arrow>->)
  | (?P<filemeta>\{-\#)
  | (?P<value>%[A-Za-z0-9_$.\-]+(?:\#\d+)?)
  | (?P<symbol>@(?:[A-Za-z0-9_$.\-]+|"(?:[^"\\\n]|\\.)*"))
  | (?P<block>\^[A-Za-z0-9_$.\-]+)
  | (?P<alias>\#[A-Za-z0-9_$.\-]+)
  | (?P<bang>![A-Za-z0-9_$.\-]+)
  | (?P<typeword>(?:tensor|tuple|complex|vector|memref)<)
  | (?P<word>-?[A-Za-z0-9_$.]+(?:(?<=\d[eE])[+-]\d+)?)
  | (?P<punct>\S)
)""", re.VERBOSE)

_OPEN = {"(": ")", "[": "]", "{": "}", "<": ">"}
_CLOSE = {v: k for k, v in _OPEN.items()}


@dataclass(slots=True)
class Tok:
    kind: str      # value | symbol | block | alias | bang | type | str | word | punct | eof
    text: str
    line: int


def _err(line, msg) -> NoReturn:
    raise AStitchError(f"line {line}: {msg}")


def tokenize(text: str) -> list[Tok]:
    """Tokens of ``text``; a type like ``tensor<4x8xf32>`` is one token; ``loc(...)`` is dropped."""
    newlines = [m.start() for m in re.finditer("\n", text)]
    line_of = lambda pos: bisect_right(newlines, pos) + 1  # noqa: E731
    toks: list[Tok] = []
    pos = 0
    n = len(text)
    while True:
        m = _TOKEN.match(text, pos)
        if m is None or m.lastgroup is None:
            break
        kind = m.lastgroup
        start, pos = m.span(kind)
        line = line_of(start)
        if kind == "comment":
            continue
        if kind == "badstr":
            _err(line, "unterminated string: the MLIR text looks truncated")
        if kind == "filemeta":        # {-# dialect_resources: ... #-}: blobs of elided constants
            end = text.find("#-}", pos)
            pos = n if end < 0 else end + 3
            continue
        if kind == "typeword":        # scan the balanced <...> of a type
            depth, i = 1, pos
            while i < n and depth:
                depth += {"<": 1, ">": -1}.get(text[i], 0)
                if text[i] == "-" and i + 1 < n and text[i + 1] == ">":
                    i += 1
                i += 1
            if depth:
                _err(line, f"type {text[start:start + 20]!r}... is never closed with '>': "
                           "the MLIR text looks truncated")
            toks.append(Tok("type", re.sub(r"\s+", "", text[start:i]), line))
            pos = i
            continue
        toks.append(Tok("punct" if kind == "arrow" else kind, m.group(kind), line))
    if text[pos:].strip():
        _err(line_of(pos), f"cannot read {text[pos:pos + 20]!r}")
    toks.append(Tok("eof", "", len(newlines) + 1))
    return _drop_locations(toks)


def _drop_locations(toks: list[Tok]) -> list[Tok]:
    """Remove every ``loc(...)``: debug locations say nothing about the computation."""
    out, i = [], 0
    while i < len(toks):
        t = toks[i]
        if t.kind == "word" and t.text == "loc" and toks[i + 1].text == "(" and toks[i + 1].kind == "punct":
            depth, i = 0, i + 1
            while toks[i].kind != "eof":
                if toks[i].kind == "punct" and toks[i].text == "(":
                    depth += 1
                elif toks[i].kind == "punct" and toks[i].text == ")":
                    depth -= 1
                    if depth == 0:
                        break
                i += 1
            if toks[i].kind == "eof":
                _err(t.line, "loc( is never closed: the MLIR text looks truncated")
            i += 1
            continue
        out.append(t)
        i += 1
    return out


@dataclass
class Group:
    """A bracketed item: ``open`` is ``(``, ``[``, ``{`` or ``<``; items are :class:`Tok` s and Groups."""
    open: str
    items: list
    line: int

    def __str__(self):
        return self.open + " ".join(str(i) if isinstance(i, Group) else i.text for i in self.items) + \
            _OPEN[self.open]


@dataclass
class Op:
    name: str                 # e.g. "stablehlo.add", "func.call", "func.return"
    results: list             # value names, e.g. ["%0"] or ["%1#0", "%1#1"]
    line: int
    generic: bool = False
    operands: list = field(default_factory=list)   # value names (generic form and calls)
    items: list = field(default_factory=list)      # pretty form: tokens and Groups before the signature
    props: dict = field(default_factory=dict)      # generic form: <{...}> and {...} attributes, key -> item(s)
    regions: list = field(default_factory=list)    # Block s
    operand_types: list = field(default_factory=list)
    result_types: list = field(default_factory=list)
    callee: Optional[str] = None


@dataclass
class Block:
    args: list          # [(value name, type text)]
    ops: list
    line: int


@dataclass
class Func:
    name: str
    args: list          # [(value name, type text)]
    result_types: list  # type texts
    body: Block
    line: int
    public: bool = True


class Parser:
    """Recursive descent over the tokens, to :class:`Func` s of :class:`Op` s."""

    def __init__(self, text: str, check_op=None):
        self.toks = tokenize(text)
        self.i = 0
        #: called as check_op(name, line, target, func) on each pretty op before its custom syntax is read
        #: (the reader refuses ops it does not know there: their syntax, like a while's cond/do
        #: regions, may be beyond this grammar); target is an ``@symbol`` right after the name
        self.check_op = check_op
        self.func_name: Optional[str] = None     # the function being read, for messages

    @property
    def tok(self) -> Tok:
        return self.toks[self.i]

    def next(self) -> Tok:
        t = self.toks[self.i]
        if t.kind != "eof":
            self.i += 1
        return t

    def at(self, text: str, kind: str = "punct") -> bool:
        return self.tok.kind == kind and self.tok.text == text

    def accept(self, text: str, kind: str = "punct") -> bool:
        if self.at(text, kind):
            self.next()
            return True
        return False

    def expect(self, text: str, what: str, kind: str = "punct") -> Tok:
        if not self.at(text, kind):
            self._unexpected(f"{text!r} {what}")
        return self.next()

    def _unexpected(self, wanted: str) -> NoReturn:
        t = self.tok
        if t.kind == "eof":
            _err(t.line, f"unexpected end of text, expected {wanted}: the MLIR text looks truncated")
        _err(t.line, f"expected {wanted}, found {t.text!r}")

    def group(self) -> Group:
        """A balanced bracketed group starting at the current token."""
        open_tok = self.next()
        items = []
        while True:
            t = self.tok
            if t.kind == "eof":
                _err(open_tok.line, f"{open_tok.text!r} is never closed: the MLIR text looks truncated")
            if t.kind == "punct" and t.text in _OPEN:
                items.append(self.group())
            elif t.kind == "punct" and t.text in _CLOSE:
                if t.text != _OPEN[open_tok.text]:
                    _err(t.line, f"{t.text!r} does not match {open_tok.text!r} opened on line {open_tok.line}")
                self.next()
                return Group(open_tok.text, items, open_tok.line)
            else:
                items.append(self.next())

    def item(self):
        if self.tok.kind == "punct" and self.tok.text in _OPEN:
            return self.group()
        if self.tok.kind == "eof":
            self._unexpected("a value")
        return self.next()

    # -- file structure --------------------------------------------------------------------
    def file(self) -> list[Func]:
        funcs: list[Func] = []
        while self.tok.kind != "eof":
            if self.tok.kind == "alias":
                self._alias_def()
            elif self.at("module", "word"):
                self.next()
                if self.tok.kind == "symbol":
                    self.next()
                if self.accept("attributes", "word"):
                    self._dict()
                self.expect("{", "to open the module body")
                while not self.accept("}"):
                    if self.tok.kind == "eof":
                        self._unexpected("'}' closing the module")
                    funcs.append(self.func())
            elif self.at("func.func", "word") or self.at("func", "word"):
                funcs.append(self.func())
            elif self.tok.kind == "str" and self.tok.text in ('"builtin.module"', '"func.func"'):
                funcs += self._generic_funcs(self.op())
            else:
                _err(self.tok.line, f"expected 'module' or 'func.func', found {self.tok.text!r}")
        return funcs

    def _generic_funcs(self, op: Op) -> list[Func]:
        """The fully generic form (``print_generic_op_form``): ``"builtin.module"() ({ "func.func"() <{
        sym_name = "main", function_type = (...) -> ...}> ({^bb0(%arg0: ...): ...}) })``."""
        if op.name == "builtin.module":
            return [f for blk in op.regions for inner in blk.ops for f in self._generic_funcs(inner)]
        if op.name != "func.func":
            _err(op.line, f"expected func.func inside the module, found {op.name!r}")
        name = [t.text for t in op.props.get("sym_name", []) if isinstance(t, Tok) and t.kind == "str"]
        if not name or len(op.regions) != 1:
            _err(op.line, "a generic func.func needs sym_name and one region (its body)")
        ftype = op.props.get("function_type", [])
        arrow = next((k for k, t in enumerate(ftype) if isinstance(t, Tok) and t.text == "->"), len(ftype))
        results = [t.text for t in _flat(ftype[arrow + 1:]) if t.kind in ("type", "bang")]
        visibility = [t.text for t in op.props.get("sym_visibility", []) if isinstance(t, Tok)]
        body = op.regions[0]
        return [Func(name[0].strip('"'), body.args, results, body, op.line, visibility != ['"private"'])]

    def _alias_def(self):
        """``#loc3 = loc(...)`` (the loc already dropped) or ``#map = affine_map<...>``: skipped."""
        self.next()
        if not self.accept("="):
            _err(self.tok.line, f"expected '=' after an attribute alias, found {self.tok.text!r}")
        if self.tok.kind in ("word", "str") and not self.at("module", "word") and not self.at("func.func", "word"):
            self.next()
            if self.at("<") or self.at("("):
                self.group()

    def _dict(self) -> dict:
        """``{key = value, key, ...}``: attribute dictionaries (a bare key means true)."""
        g = self.group()
        return dict_items(g)

    def _type(self, what: str) -> str:
        t = self.tok
        if t.kind in ("type", "bang") or (t.kind == "word" and re.fullmatch(r"(i|ui|si|f|bf)\d+|index", t.text)):
            self.next()
            return t.text
        self._unexpected(what)

    def _arg_list(self) -> list:
        """``(%a: type {attrs}, ...)``: a function's or block's arguments."""
        self.expect("(", "to open an argument list")
        args = []
        if not self.accept(")"):
            while True:
                if self.tok.kind != "value":
                    self._unexpected("an argument like '%arg0: tensor<4xf32>'")
                name = self.next().text
                self.expect(":", f"after argument {name}")
                args.append((name, self._type(f"the type of argument {name}")))
                if self.at("{"):
                    self.group()
                if self.accept(")"):
                    break
                self.expect(",", "between arguments")
        return args

    def _at_attr_dict(self) -> bool:
        """Is the ``{`` here an attribute dictionary (``{jax.result_info = ...}``) rather than a body?"""
        if not self.at("{"):
            return False
        key, after = self.toks[self.i + 1], self.toks[min(self.i + 2, len(self.toks) - 1)]
        return key.kind in ("word", "str") and after.kind == "punct" and after.text in ("=", ",", "}")

    def func(self) -> Func:
        line = self.tok.line
        self.next()
        public = True
        while self.tok.kind == "word" and self.tok.text in ("public", "private", "nested"):
            public = self.next().text == "public"
        if self.tok.kind != "symbol":
            self._unexpected("a function name like @main")
        name = self.next().text[1:].strip('"')
        self.func_name = name
        args = self._arg_list()
        results = []
        if self.accept("->"):
            if self.at("("):
                self.next()
                if not self.accept(")"):
                    while True:
                        results.append(self._type("a result type"))
                        if self._at_attr_dict():
                            self.group()
                        if self.accept(")"):
                            break
                        self.expect(",", "between result types")
            else:
                results.append(self._type("a result type"))
                if self._at_attr_dict():
                    self.group()
        if self.accept("attributes", "word"):
            self._dict()
        if not self.at("{"):
            self._unexpected(f"'{{' to open the body of @{name} (a function declaration without a body "
                             "cannot be imported)")
        return Func(name, args, results, self.block(), line, public)

    def block(self) -> Block:
        open_tok = self.expect("{", "to open a block")
        args = []
        if self.tok.kind == "block":
            self.next()
            if self.at("("):
                args = self._arg_list()
            self.expect(":", "after a block label")
        ops = []
        while not self.accept("}"):
            if self.tok.kind == "eof":
                _err(open_tok.line, "'{' is never closed: the MLIR text looks truncated")
            if self.tok.kind == "block":
                _err(self.tok.line, f"a second block {self.tok.text} in one region (control flow between "
                                    "blocks) is not supported")
            ops.append(self.op())
        return Block(args, ops, open_tok.line)

    # -- ops ----------------------------------------------------------------------------------
    def op(self) -> Op:
        line = self.tok.line
        results = []
        if self.tok.kind == "value":
            while True:
                if self.tok.kind != "value":
                    self._unexpected("a result name")
                name = self.next().text
                if self.accept(":"):
                    count = self.next()
                    if count.kind != "word" or not count.text.isdigit():
                        _err(count.line, f"expected a result count after {name}:, found {count.text!r}")
                    results += [f"{name}#{k}" for k in range(int(count.text))]
                else:
                    results.append(name)
                if not self.accept(","):
                    break
            self.expect("=", "after the result names of an op")
        t = self.tok
        if t.kind == "str":
            self.next()
            op = Op(t.text[1:-1], results, t.line, generic=True)
            self._generic(op)
        elif t.kind == "word":
            self.next()
            if self.check_op is not None:
                self.check_op(t.text, t.line, self.tok.text[1:].strip('"') if self.tok.kind == "symbol" else None,
                              self.func_name)
            op = Op(t.text, results, line)
            self._pretty(op)
        else:
            self._unexpected("an op name")
        return op

    def _generic(self, op: Op):
        self.expect("(", f"after {op.name!r}")
        if not self.accept(")"):
            while True:
                if self.tok.kind != "value":
                    self._unexpected(f"an operand of {op.name!r}")
                op.operands.append(self.next().text)
                if self.accept(")"):
                    break
                self.expect(",", f"between operands of {op.name!r}")
        if self.at("<"):
            g = self.group()
            if len(g.items) != 1 or not isinstance(g.items[0], Group) or g.items[0].open != "{":
                _err(g.line, f"{op.name}: expected properties <{{...}}>, found {g}")
            op.props.update(dict_items(g.items[0]))
        if self.at("(") and self.toks[self.i + 1].text == "{":
            self.next()
            while True:
                op.regions.append(self.block())
                if self.accept(")"):
                    break
                self.expect(",", "between regions")
        if self.at("{"):
            op.props.update(self._dict())
        self._signature(op)

    def _pretty(self, op: Op):
        stop = {"return", "func.return", "stablehlo.return", "mhlo.return"}
        while not self.at(":"):
            t = self.tok
            if t.kind == "eof" or (t.kind == "punct" and t.text == "}"):
                if op.name in stop and not op.items:      # return with no values
                    return
                self._unexpected(f"':' and the type signature of {op.name!r}")
            ahead = [x.text for x in self.toks[self.i + 1:self.i + 4]]
            next_op = (t.kind == "value" and (ahead[:1] == ["="] or (ahead[:1] == [":"] and ahead[1].isdigit()
                                                                     and ahead[2:3] == ["="]))) or \
                (t.kind == "word" and t.text in stop)
            if next_op:                                   # the next op began: this one lacks its signature
                self._unexpected(f"':' and the type signature of {op.name!r}")
            if op.name in ("call", "func.call") and t.kind == "symbol" and op.callee is None:
                op.callee = self.next().text[1:].strip('"')
                continue
            op.items.append(self.item())
        self._signature(op)
        if self.at("reducer", "word"):
            self.next()
            args = []
            while self.at("("):
                args.append(self._arg_list())
            # the pretty reducer pairs (acc_i, x_i) per input; the block takes all accs, then all xs
            firsts = [a[0] for a in args if a]
            seconds = [a[1] for a in args if len(a) > 1]
            blk = self.block()
            blk.args = firsts + seconds
            op.regions.append(blk)

    def _signature(self, op: Op):
        self.expect(":", f"before the type signature of {op.name!r}")
        if self.at("("):
            self.next()
            if not self.accept(")"):
                while True:
                    op.operand_types.append(self._type("an operand type"))
                    if self.accept(")"):
                        break
                    self.expect(",", "between operand types")
            self.expect("->", f"in the type signature of {op.name!r}")
            op.result_types = self._result_types()
            return
        types = [self._type(f"the type signature of {op.name!r}")]
        if self.accept("->"):
            op.operand_types = types
            op.result_types = self._result_types()
            return
        while self.at(",") and self.toks[self.i + 1].kind in ("type", "bang"):
            self.next()
            types.append(self._type("a type"))
        op.operand_types = types
        op.result_types = [types[-1]]

    def _result_types(self) -> list:
        if self.at("("):
            self.next()
            out = []
            if not self.accept(")"):
                while True:
                    out.append(self._type("a result type"))
                    if self.accept(")"):
                        break
                    self.expect(",", "between result types")
            return out
        return [self._type("a result type")]


def _flat(items) -> list:
    """The tokens of items, bracket groups opened."""
    out = []
    for it in items:
        out += _flat(it.items) if isinstance(it, Group) else [it]
    return out


def dict_items(g: Group) -> dict:
    """``{a = 1 : i64, b = [1, 2], c}`` -> {key: [items of its value]} (a bare key -> [])."""
    out, key, value, expect_eq = {}, None, [], False
    for it in g.items + [None]:
        if it is None or (isinstance(it, Tok) and it.kind == "punct" and it.text == ","):
            if key is not None:
                out[key] = value
            key, value, expect_eq = None, [], False
            continue
        if key is None:
            if not isinstance(it, Tok) or it.kind not in ("word", "str"):
                _err(g.line, f"expected an attribute name in {g}, found {it}")
            key, expect_eq = it.text.strip('"'), True
        elif expect_eq and isinstance(it, Tok) and it.text == "=":
            expect_eq = False
        else:
            value.append(it)
    return out


def parse(text: str, check_op=None) -> list[Func]:
    """The functions of an MLIR module text, in order (``check_op``: see :class:`Parser`)."""
    try:
        return Parser(text, check_op).file()
    except RecursionError:
        raise AStitchError("the MLIR text nests brackets too deeply to parse") from None
