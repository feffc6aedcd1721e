"""The op table is the one place that defines an op: its shape rule and index rule included.

``shapes.infer`` and ``indexing.operand_index`` are lookups in the table (no if-chain over
op names), and the op sets other modules need are derived from the table's columns.
"""
from __future__ import annotations

import ast
import inspect
from pathlib import Path

import numpy as np
import pytest

import astitch_sim as asim
from astitch_sim.ir import index_rules, shape_rules
from astitch_sim.passes.analysis import VIEW_OPS
from astitch_sim.figures.plan_figure import MOVE_OPS
from astitch_sim.ir.indexing import operand_index
from astitch_sim.ir.ops import OPS
from anchor import TESTS_FILE

ROOT = Path(TESTS_FILE).resolve().parent.parent


@pytest.mark.parametrize("name", sorted(OPS))
def test_every_row_names_a_documented_shape_rule(name):
    rule = OPS[name].shape
    assert inspect.getmodule(rule) is shape_rules, f"{name}'s shape rule {rule} is not in shape_rules"
    assert (rule.__doc__ or "").strip(), f"shape rule {rule.__name__} has no docstring saying what it checks"


@pytest.mark.parametrize("name", sorted(OPS))
def test_fusible_rows_name_an_index_rule_and_library_rows_none(name):
    row = OPS[name]
    if row.kind in ("source", "library"):
        assert row.index is None          # sources read nothing; library ops are not fused
    else:
        assert inspect.getmodule(row.index) is index_rules and (row.index.__doc__ or "").strip()
    assert (row.runtime_index is not None) == (row.kind == "indexed")


@pytest.mark.parametrize("module", ["astitch_sim/ir/shapes.py", "astitch_sim/ir/indexing.py"])
def test_lookups_have_no_chain_over_op_names(module):
    """No ``op == "..."`` or ``op in (...)`` with op-name strings: the rule comes from the row."""
    tree = ast.parse((ROOT / module).read_text())
    found = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Compare):
            for c in [node.left, *node.comparators]:
                elts = c.elts if isinstance(c, (ast.Tuple, ast.List, ast.Set)) else [c]
                found += [e.value for e in elts if isinstance(e, ast.Constant) and e.value in OPS]
    assert not found, f"{module} compares against op names {found}; name the rule in the op table instead"


def test_derived_op_sets_follow_the_table():
    # the sets are derived, so a new row lands in them without a second edit; these are today's members
    assert set(VIEW_OPS) == {"reshape", "bitcast"}
    assert set(MOVE_OPS) == {"copy", "broadcast", "reshape", "bitcast", "transpose", "slice", "concatenate",
                             "reverse", "pad"}
    assert {n for n, r in OPS.items() if r.tuple_result} == {"reduce", "sort", "topk"}
    for name in MOVE_OPS:     # no arithmetic: the interpreter's value is one operand element per output element
        assert OPS[name].flops == 0


def test_a_shape_rule_is_what_infer_calls():
    """The row's rule decides: the shape of a built node is its rule's answer."""
    g = asim.Graph("t")
    x = g.parameter("x", (2, 3, 4))
    t = g.add_node("transpose", (x,), permutation=(2, 0, 1))
    assert t.shape == (4, 2, 3)
    r = g.add_node("reduce", (x, g.constant(0.0)), dimensions=(2, 0), reducer="sum")
    assert r.shape == (3,) and r.attrs["dimensions"] == (0, 2)     # the rule sorts the dimensions
    with pytest.raises(asim.AStitchError, match=r"permutation \(0, 1\) must list all 3 dims"):
        g.add_node("transpose", (x,), permutation=(0, 1))


@pytest.mark.parametrize("op, attrs, shape", [
    ("transpose", {"permutation": (1, 0)}, None),
    ("reverse", {"dimensions": (1,)}, None),
    ("slice", {"starts": (1, 0), "limits": (3, 6), "strides": (1, 2)}, None),
    ("reshape", {}, (6, 3)),
    ("broadcast", {"dimensions": (0, 2)}, (3, 5, 6)),
])
def test_index_rules_read_the_element_numpy_moves(op, attrs, shape):
    """Every output element's index rule points at the operand element numpy's meaning puts there."""
    g = asim.Graph("t")
    x = g.parameter("x", (3, 6), "s32")
    y = g.add_node(op, (x,), shape=shape, **attrs)
    xs = np.arange(18, dtype=np.int32).reshape(3, 6)
    want = OPS[op].numpy(y, xs)
    idx = tuple(np.indices(y.shape).reshape(len(y.shape), -1))
    got, mask = operand_index(y, 0, idx)
    assert mask is None
    np.testing.assert_array_equal(xs[got].reshape(y.shape), want)


def test_library_ops_have_no_element_level_reading():
    g = asim.Graph("t")
    a, b = g.parameter("a", (4, 8)), g.parameter("b", (8, 2))
    d = g.add_node("dot", (a, b))
    with pytest.raises(asim.AStitchError, match="cannot propagate an index through dot"):
        operand_index(d, 0, (np.arange(4), np.arange(2)))
