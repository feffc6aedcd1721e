"""The strategy registry: the one table every reader of strategy names uses."""
import pytest

import astitch_sim as asim
from astitch_sim.plan.plan import Plan
from astitch_sim.planning.strategies.registry import REGISTRY, Strategy, register, strategy_named


def test_strategies_are_the_registry_in_order():
    assert asim.STRATEGIES == tuple(REGISTRY)
    assert asim.STRATEGIES == ("unfused", "xla", "tvm", "fusionstitching", "inductor", "astitch")


def test_every_row_plans_figure_7():
    g = asim.workload("paper_fig7")
    for name, row in REGISTRY.items():
        assert row.summary and row.name == name
        plan = asim.compile(g, name, "V100")
        assert isinstance(plan, Plan) and plan.strategy == name


def test_unknown_and_duplicate_names_are_refused():
    with pytest.raises(asim.AStitchError, match="unknown strategy 'nope': use one of unfused, xla"):
        strategy_named("nope")
    with pytest.raises(asim.AStitchError, match="registered twice"):
        register(Strategy("xla", "again", REGISTRY["xla"].planner))


def test_a_registered_strategy_reaches_compile_and_is_removed_again():
    """What a new strategy module does: one register() call, and compile() plans with it."""
    calls = []

    def planner(graph, gpu, options):
        calls.append((graph.name, gpu.name))
        return REGISTRY["xla"].planner(graph, gpu, options)

    register(Strategy("test-only", "xla under another name", planner))
    try:
        plan = asim.compile(asim.workload("paper_fig7"), "test-only", "V100")
        assert calls == [("paper_fig7", "V100")] and len(plan.kernels) == 4
    finally:
        del REGISTRY["test-only"]
