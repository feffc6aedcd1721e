"""``from_hlo``: read XLA HLO text, or the StableHLO/MHLO MLIR text JAX prints by default.

The one entry point for text: it checks its arguments, recognises MLIR text and hands it
to the StableHLO importer (:mod:`astitch_sim.frontends.stablehlo`), and anything else to the HLO
parser (:mod:`astitch_sim.frontends.hlo`).  It lives above both because the StableHLO importer builds
on the HLO importer (it translates MLIR ops into HLO instructions and runs the HLO builder),
so the HLO module cannot dispatch to it without an import circle.
"""
from __future__ import annotations

from pathlib import Path
from typing import Optional

from ..errors import AStitchError
from ..ir.graph import Graph
from .hlo import parse_hlo_module
from .stablehlo import from_stablehlo, looks_like_mlir


def from_hlo(text: str, name: Optional[str] = None) -> Graph:
    """Parse XLA HLO module text into a :class:`Graph` (:mod:`astitch_sim.frontends.hlo` documents the grammar).

    StableHLO or MHLO MLIR text (JAX's default ``as_text()``: ``module @jit_f {...}``,
    ``func.func``, ``stablehlo.`` ops) is recognised and imported by
    :func:`astitch_sim.frontends.stablehlo.from_stablehlo`; ``graph.source`` says which was read
    (``"hlo"``, ``"stablehlo"`` or ``"mhlo"``).

    ``name`` overrides the graph name (default: the ``HloModule`` name).  Graph inputs
    are the ENTRY parameters in parameter-number order; outputs are the ROOT (or the
    elements of a ROOT tuple).  Raises :class:`AStitchError` on anything it cannot read.
    """
    if not isinstance(text, str):
        raise AStitchError(f"from_hlo expects HLO text (a str), got {type(text).__name__}")
    if name is not None and not isinstance(name, str):
        raise AStitchError(f"from_hlo: name must be a str (the graph name) or None, got {type(name).__name__}")
    if not text.strip():
        raise AStitchError("the HLO text is empty: pass the text of jax.jit(f).lower(*args).as_text('hlo')")
    if looks_like_mlir(text):      # JAX's default as_text(): StableHLO (or MHLO) MLIR
        return from_stablehlo(text, name=name)
    return parse_hlo_module(text, name)


def from_hlo_file(path, name: Optional[str] = None) -> Graph:
    """Read an ``.hlo`` (or StableHLO ``.mlir``) text file and import it with :func:`from_hlo`."""
    if not isinstance(path, (str, Path)) or (isinstance(path, str) and not path.strip()):
        raise AStitchError(f"from_hlo_file needs a file path (str or pathlib.Path), got {path!r}; "
                           "for HLO text already in memory use from_hlo(text)")
    p = Path(path)
    try:
        text = p.read_text()
    except OSError as e:
        raise AStitchError(f"cannot read HLO file {str(p)!r}: {e.strerror or e}") from None
    except UnicodeDecodeError:
        raise AStitchError(f"HLO file {str(p)!r} is not UTF-8 text (a binary file?): pass the text that "
                           "jax.jit(f).lower(*args).as_text('hlo') prints") from None
    return from_hlo(text, name=name)
