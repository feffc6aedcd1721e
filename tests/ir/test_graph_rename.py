"""Graph.rename: an importer names a node after the source op it completes (asim.from_torch does)."""
from __future__ import annotations

import numpy as np
import pytest

import astitch_sim as asim


def test_rename_keeps_the_node_its_place_and_its_users():
    g = asim.Graph("g")
    x = g.parameter("x", (4,))
    e = g.exponential(x, name="tmp")
    y = g.add(e, x)
    g.set_outputs(y)
    assert g.rename(e, "exp") is e and e.name == "exp"
    assert list(g.nodes) == ["x", "exp", y.name] and g["exp"] is e and "tmp" not in g
    assert g.users(e) == [y] and y.operands[0] is e
    v = np.arange(4, dtype=np.float32)
    np.testing.assert_allclose(asim.reference(g, [v])[0], np.exp(v) + v, rtol=1e-6)


@pytest.mark.parametrize("new", ["x", "", 3])
def test_rename_to_a_taken_or_bad_name_is_an_astitch_error(new):
    g = asim.Graph("g")
    x = g.parameter("x", (4,))
    e = g.exponential(x)
    with pytest.raises(asim.AStitchError, match="cannot rename"):
        g.rename(e, new)
    other = asim.Graph("h").parameter("x", (4,))
    with pytest.raises(asim.AStitchError, match="must be a node of graph 'g'"):
        g.rename(other, "y")
