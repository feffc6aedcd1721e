"""The ATen op table: ATen overload -> builder, and the ops refused with the fix for each.

A builder is ``f(b, *args, **kwargs) -> Node | tuple``: ``b`` is the :class:`~.context.Builder` (the graph,
the recorded result shape and type), the arguments are torch.export's with every tensor replaced by its
Graph node.  Keys are ATen overload names without the namespace (``add.Tensor``, ``sum.dim_IntList``);
rows live next to their kind (``ops_elementwise``, ``ops_layout``, ``ops_reduce``, ``ops_indexed``,
``ops_library``).  ``REFUSED`` says, for ops a static dataflow graph cannot hold, what to change in the
model; any other op is refused with the list of what is supported.
"""
from __future__ import annotations

from . import ops_elementwise, ops_indexed, ops_layout, ops_library, ops_reduce

ATEN = {**ops_elementwise.ROWS, **ops_layout.ROWS, **ops_reduce.ROWS, **ops_indexed.ROWS, **ops_library.ROWS}

_EVAL = ("is training-mode behaviour: export in eval mode (call module.eval() before asim.from_torch), so "
         "dropout is the identity and batch norm reads its running statistics")
_RANDOM = ("draws random numbers: export in eval mode (module.eval()) if it is dropout, else draw them "
           "outside the model and pass them in as an argument")
_DATA_SHAPE = ("gives a shape that depends on the data, which a static graph cannot hold: use a fixed-shape "
               "form (torch.where(mask, x, 0) instead of x[mask], a fixed k for top-k)")

REFUSED = {
    "native_dropout.default": _EVAL, "dropout.default": _EVAL, "_native_batch_norm_legit_functional.default": _EVAL,
    "_native_batch_norm_legit.default": _EVAL, "native_batch_norm.default": _EVAL,
    "bernoulli.p": _RANDOM, "bernoulli.default": _RANDOM, "rand.default": _RANDOM, "randn.default": _RANDOM,
    "rand_like.default": _RANDOM, "randn_like.default": _RANDOM, "randint.low": _RANDOM, "randint.default": _RANDOM,
    "randperm.default": _RANDOM, "multinomial.default": _RANDOM, "normal.Tensor_float": _RANDOM,
    "uniform.default": _RANDOM,
    "nonzero.default": _DATA_SHAPE, "masked_select.default": _DATA_SHAPE, "unique.default": _DATA_SHAPE,
    "_unique2.default": _DATA_SHAPE, "repeat_interleave.Tensor": _DATA_SHAPE,
    "_local_scalar_dense.default": ("reads a tensor's value into Python (.item(), int(t), a Python `if` on a "
                                    "tensor): keep the value a tensor and use torch.where"),
    "cond": ("is data-dependent control flow (torch.cond): compute both branches and select with torch.where, "
             "or move the branch out of the model"),
    "while_loop": ("is a data-dependent loop (torch.while_loop): move the loop out of the model and import its "
                   "body, or unroll it with a Python for over a fixed count"),
    "scan": "is a loop (torch.scan): move the loop out of the model and import its body",
    "map_impl": "is a loop (torch.map): move the loop out of the model and import its body",
    "convolution.default": ("is a convolution, which astitch-sim does not model (it plans the memory-intensive ops "
                            "between library kernels): import the glue around it, e.g. the part after the conv"),
}
