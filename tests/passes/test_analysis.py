"""Dependency analysis: edge classes, light/expensive, row vs column reductions, clusters."""
import os

import astitch_sim as asim
from astitch_sim.passes.analysis import (classify_reduce, edge_class, fan_out, is_expensive, is_one_to_many_producer,
                                  memory_clusters)
from anchor import TESTS_FILE

HERE = os.path.dirname(TESTS_FILE)


def test_fig7_edge_classes_and_candidates():
    g = asim.workload("paper_fig7")
    assert edge_class(g["param.2"], g["broadcast.1"]) == "one-to-many"
    assert edge_class(g["add.1"], g["reduce.1"]) == "many-to-one"
    assert edge_class(g["reduce.1"], g["divide.1"]) == "one-to-one"
    assert is_expensive(g["power.1"]) and is_one_to_many_producer(g["power.1"])
    assert is_expensive(g["divide.1"]) and not is_one_to_many_producer(g["divide.1"])
    assert not is_expensive(g["add.1"])
    assert fan_out(g)["broadcast.2"] == 2          # B.2 feeds divide.2 and multiply.1
    assert classify_reduce(g["reduce.1"]).kind == "row"
    assert classify_reduce(g["reduce.2"]).kind == "column"


def test_layout_decides_row_versus_column():
    hlo = """HloModule m
region_0 {
  a = f32[] parameter(0)
  b = f32[] parameter(1)
  ROOT s = f32[] add(a, b)
}
ENTRY main {
  x = f32[8,16]{0,1} parameter(0)
  y = f32[8,16]{1,0} parameter(1)
  z = f32[] constant(0)
  rx = f32[8]{0} reduce(x, z), dimensions={1}, to_apply=region_0
  ry = f32[8]{0} reduce(y, z), dimensions={1}, to_apply=region_0
  ROOT t = (f32[8]{0}, f32[8]{0}) tuple(rx, ry)
}
"""
    g = asim.from_hlo(hlo)
    assert classify_reduce(g["rx"]).kind == "column"   # dim 1 is major in a {0,1} layout
    assert classify_reduce(g["ry"]).kind == "row"


def test_middle_axis_reduction_is_a_batched_column_reduction():
    g = asim.Graph("mid")
    x = g.parameter("x", (4, 5, 6))
    r = g.reduce(x, 1, "sum")
    g.set_outputs(r)
    rs = classify_reduce(r)
    assert rs.kind == "column" and rs.groups == ((0,), (1,), (2,))


def test_clusters_split_at_matrix_products():
    g = asim.from_hlo_file(os.path.join(HERE, "fixtures", "hlo", "transformer_ffn.hlo"))
    clusters = memory_clusters(g)
    dots = {n.name for n in g if n.op == "dot"}
    assert len(clusters) >= 2
    for c in clusters:
        assert not {n.name for n in c} & dots
