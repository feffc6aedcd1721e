"""What the importers say when a model uses something astitch-sim does not simulate.

A refusal is only useful if it tells the user what to do next.  Both importers
(XLA HLO text, :mod:`astitch_sim.frontends.hlo`; StableHLO/MHLO MLIR, :mod:`astitch_sim.frontends.stablehlo`)
look an unsupported op up here, by its HLO opcode, and get one sentence of advice:
why the op is out of scope and how to get a graph that imports.  Ops not in the
table get the generic advice (an op astitch-sim has no row for in its op table).

The same goes for element types: ``c64`` or ``f8e4m3fn`` are well-formed XLA types,
just not simulated, so the message says so and names the types that are.
"""
from __future__ import annotations

from typing import Optional

from ..ir.dtypes import DTYPES

#: HLO opcode -> what to do instead (the fix the refusal suggests)
OP_ADVICE = {
    "rng": "random numbers are drawn inside the function: draw the random numbers outside the function and "
           "pass them in as an argument",
    "rng-bit-generator": "random numbers are drawn inside the function (jax.random in the jitted code): draw "
                         "the random numbers outside the function and pass them in as an argument",
    "rng-get-and-update-state": "random numbers are drawn inside the function: draw the random numbers outside "
                                "the function and pass them in as an argument",
    "while": "astitch-sim simulates straight-line graphs, not loops: unroll the loop (a Python for loop, or "
             "jax.lax.fori_loop(..., unroll=True)) or compile the loop body on its own",
    "conditional": "astitch-sim simulates straight-line graphs: compute both branches and pick with "
                   "jnp.where / select, or compile each branch on its own",
    "custom-call": "a custom call is an opaque library kernel astitch-sim cannot look inside: compile the part "
                   "of the model around it on its own, or write it with jax.numpy ops",
    "fft": "astitch-sim has no FFT kernel: compile the graph before or after the FFT on its own",
    "convolution": "astitch-sim has no convolution kernel: compile the graph around the convolution on its own "
                   "(the elementwise and normalisation glue is what AStitch fuses)",
    "cholesky": "a linear-algebra library call: compile the graph around it on its own",
    "triangular-solve": "a linear-algebra library call: compile the graph around it on its own",
    "all-reduce": "collectives are out of scope: compile the per-device computation (without pmap/shard_map)",
    "all-gather": "collectives are out of scope: compile the per-device computation (without pmap/shard_map)",
    "reduce-scatter": "collectives are out of scope: compile the per-device computation (without pmap/shard_map)",
    "all-to-all": "collectives are out of scope: compile the per-device computation (without pmap/shard_map)",
    "collective-permute": "collectives are out of scope: compile the per-device computation",
    "infeed": "host transfers are out of scope: pass the data in as an argument",
    "outfeed": "host transfers are out of scope: return the data as an output",
    "send": "host transfers are out of scope: pass the data in as an argument",
    "recv": "host transfers are out of scope: pass the data in as an argument",
    "bitcast-convert": "reinterpreting bits as another type is not simulated: pass the values in already "
                       "converted (this often comes from jax.random: draw the random numbers outside the "
                       "function and pass them in)",
    "reduce-precision": "reduce-precision is not simulated: cast with convert to a supported type instead",
}

GENERIC_ADVICE = ("astitch-sim's op table (astitch_sim.OPS) has no row for it: compile the part of the "
                  "model without this op, or express it with supported ops")


def unsupported_op(op: str, where: str, target: Optional[str] = None) -> str:
    """The message for op ``op`` (an HLO opcode) at ``where`` (e.g. ``in 'while.3'``), with its fix.

    ``target`` is a custom call's target name, said first: the user needs it to
    know which library routine it is.
    """
    advice = OP_ADVICE.get(op, GENERIC_ADVICE)
    if target is not None:
        advice = f"this custom call, {target}, is a library kernel: " + advice.split(": ", 1)[-1]
    return f"unsupported op {op!r} {where}: {advice}"


def supported_dtypes() -> str:
    return ", ".join(DTYPES)


def unsupported_dtype(dtype: str) -> str:
    """The message for a well-formed element type astitch-sim does not simulate (c64, f8e4m3fn, ...)."""
    return (f"element type {dtype!r} is well-formed but unsupported; supported dtypes are "
            f"{supported_dtypes()} (cast to one of them in the model, e.g. with .astype(jnp.float32))")


#: element-type spellings of XLA and MLIR that are real types, just not simulated
_KNOWN_UNSUPPORTED = ("c64", "c128", "complex", "f8", "f4", "f6", "s4", "u4", "s2", "u2", "i4", "ui4", "tf32",
                      "token", "f64e", "index")


def is_known_type(dtype: str) -> bool:
    """Is ``dtype`` a real XLA/MLIR element type (so unsupported, not malformed)?"""
    d = dtype.lower()
    return any(d.startswith(p) for p in _KNOWN_UNSUPPORTED)
