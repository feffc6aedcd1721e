"""Index propagation: which operand element does an op read for a given output element?

This is the element-level view of the paper.  Evaluating an op at output index
``idx`` reads each operand at an index this module computes: the same index for
elementwise ops (one-to-one), fewer dims for a broadcast (one-to-many: many
output elements read one operand element), a permuted one for a transpose, an
offset one for a slice...  The compiler uses it to check block locality, the
SIMT model to know which thread reads which address, the code generator to
write the index arithmetic.

Indices are tuples of numpy integer arrays (one per dim), so a whole stage is
propagated at once.  ``mask`` (for concatenate and pad) says which elements
really read that operand.

Indexed ops (gather, dynamic-slice, dynamic-update-slice) read some operands at
indices that are *values*: :func:`operand_index` (the compiler's view, before
any value exists) answers ``None`` -- "anywhere" -- for those, and
:func:`runtime_operand_index` computes them from the values (the SIMT model).

Each op's rule is its row's ``index`` (and ``runtime_index``) column in the op
table (``ops.py``); the rules themselves are in ``index_rules.py``.
"""
from __future__ import annotations

from typing import Optional

import numpy as np

from .index_rules import cannot_propagate


def operand_index(node, i: int, idx: tuple) -> tuple[tuple, Optional[np.ndarray]]:
    """Index into operand ``i`` of ``node`` read when ``node`` is evaluated at ``idx``.

    For a reduce, ``idx`` is an index into its *input* (the reduce is evaluated
    per input element while it accumulates); its init value is a scalar.  The
    op's row in the op table names the rule (``index_rules``); a scalar operand
    is read at ``()`` whatever the op.
    """
    if node.operands[i].rank == 0:
        return (), None
    return (node.opdef.index or cannot_propagate)(node, i, idx)


def runtime_operand_index(node, i: int, idx: tuple, fetch) -> tuple[tuple, Optional[np.ndarray]]:
    """:func:`operand_index` for the operands an indexed op reads at value-dependent indices.

    ``fetch(j, index)`` is the value of operand ``j`` at ``index`` (the index operands);
    the result is clipped into the operand (a masked-out element still needs a legal index).
    """
    rule = node.opdef.runtime_index
    read = rule(node, i, idx, fetch) if rule is not None else None
    return operand_index(node, i, idx) if read is None else read
