"""``compare``: its directions, their numpy meaning, IEEE total order, and the scalar template.

Kept apart from the op table so that both the table (``ops.py``: the numpy column and
the backend's template) and the shape rule that checks ``direction=`` (``shape_rules.py``)
read the one list of directions.
"""
from __future__ import annotations

import numpy as np

from .sorting import total_order_key

#: direction -> numpy comparison; its keys are the directions HLO may name
COMPARISONS = {"EQ": np.equal, "NE": np.not_equal, "LT": np.less, "LE": np.less_equal,
               "GT": np.greater, "GE": np.greater_equal}
COMPARE_SYMBOLS = {"EQ": "==", "NE": "!=", "LT": "<", "LE": "<=", "GT": ">", "GE": ">="}
COMPARE_DIRECTIONS = tuple(COMPARISONS)
#: ``compare``'s ``type=`` values: how to order the operands (None: by their dtype)
COMPARE_TYPES = (None, "FLOAT", "TOTALORDER", "SIGNED", "UNSIGNED")


def np_compare(node, a, b):
    """``compare`` in numpy; ``type=TOTALORDER`` on floats compares in IEEE total order."""
    if node.attrs.get("type") == "TOTALORDER" and a.dtype.kind == "f":
        return compare_total(node, a, b)
    return COMPARISONS[node.attrs["direction"]](a, b)


def compare_total(node, a, b):
    """compare with ``type=TOTALORDER``: IEEE total order (-NaN < -inf < -0 < +0 < inf < +NaN)."""
    return COMPARISONS[node.attrs["direction"]](total_order_key(a, False), total_order_key(b, False))


def compare_scalar(direction: str) -> str:
    """Scalar template of ``compare`` for a direction: ``({0} < {1})``."""
    return "({0} %s {1})" % COMPARE_SYMBOLS[direction]
