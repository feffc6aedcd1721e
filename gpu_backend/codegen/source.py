"""Writing Python source: indented lines, identifiers that cannot collide, the names a kernel reserves.

Every generated function is built from :class:`Lines` (a list of source lines at
an indentation depth).  Node names become identifiers with :func:`ident`, made
unique per function by :class:`Names`, which starts out holding the names the
kernel's own structure uses (``tid``, ``bid``, the loop variables, the module's
imports: ``RESERVED_NAMES``), so a graph node called ``row`` or ``math`` never
shadows one of them.
"""
from __future__ import annotations

import keyword
import re
from contextlib import contextmanager
from typing import Iterator, Optional

#: the names a generated module imports from gpu_backend.prelude (kept here so that generating
#: source needs no numba; tests check the prelude defines exactly these)
HELPERS = ("jit", "math", "_sign", "_log", "_log1p", "_sqrt", "_rsqrt", "_cbrt", "_logistic", "_trunc", "_floor", "_ceil",
           "_round_afz", "_round_even", "_divide", "_remainder", "_power", "_max", "_min", "_not", "_invert",
           "_idivide", "_iremainder", "_ipower", "_shl", "_sra", "_srl", "_float_to_int", "_float_to_s64",
           "_float_to_u64", "_f16", "_bf16", "_bf16_bits", "_bf16_value", "_argmax_take", "_argmin_take", "_tot_less",
           "_tot_eq", "_sort_less")

#: the names a generated module imports from gpu_backend.intrinsics (every low-level Numba-CUDA construct)
INTRINSICS = ("u32", "ldg", "stg", "ldg2", "stg2", "ldg4", "stg4", "ldg8", "stg8", "shfl_xor")

#: names the kernel's own structure uses (and the module's imports): never given to a graph node
RESERVED_NAMES = {"tid", "bid", "grid", "smem", "outer", "inner", "it", "e", "row", "col", "lane", "lane_c",
               "row_in_block", "row_lane", "block_slot", "part", "within", "tile", "stride", "row_ok", "col_ok",
               "total", "rnd", "wbuf", "warp_lane", "warp_id", "warp_pos", "p", "k", "n", "h", "a", "b", "acc", "math", "np", "cuda", "range", "abs", "bool", "int", "float",
               "min", "max", "len", "print", "True", "False", "None",
               "float16", "float32", "float64", "int8", "int16", "int32", "int64", "uint8", "uint16", "uint32",
               "uint64", "bool_"} | set(HELPERS) | set(INTRINSICS)


def ident(name: str) -> str:
    """A node name as a Python identifier: ``mean.bcast`` -> ``mean_bcast``."""
    s = re.sub(r"\W", "_", name)
    if not s or s[0].isdigit():
        s = "n_" + s
    if keyword.iskeyword(s):
        s += "_"
    return s


class Names:
    """Unique identifiers within one generated function."""

    def __init__(self, reserved=()):
        self.used = set(reserved)

    def fresh(self, base: str) -> str:
        base = ident(base)
        name, k = base, 2
        sep = "_v" if base[-1].isdigit() else "_"
        while name in self.used:
            name, k = f"{base}{sep}{k}", k + 1
        self.used.add(name)
        return name


class Lines:
    """Source lines at an indentation depth: ``out("x = 1")`` writes one, ``indent``/``dedent`` nest,
    and ``with out.block(header):`` writes a header (``for ...:``, ``if ...:``) and nests what follows."""

    def __init__(self):
        self.lines: list[str] = []
        self.depth = 0

    def __call__(self, text: str = ""):
        self.lines.append(("    " * self.depth + text) if text else "")

    def indent(self):
        self.depth += 1

    def dedent(self):
        self.depth -= 1

    @contextmanager
    def block(self, header: Optional[str]) -> Iterator[None]:
        """``header`` and the lines written inside the ``with``, one level deeper.  A None header writes
        nothing and nests nothing: a loop of one iteration or a condition known to hold at generation
        time disappears from the source."""
        if header is None:
            yield
            return
        self(header)
        self.indent()
        yield
        self.dedent()
