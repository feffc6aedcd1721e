"""The Plan's typed vocabulary (astitch_sim.plan.vocabulary), its sealing once built (astitch_sim.plan.sealed),
the changed copies a what-if edit makes, and plan.validate()'s named rules."""
from __future__ import annotations

import copy
import json
import pickle
from dataclasses import replace

import pytest

import astitch_sim as asim
from astitch_sim import AStitchError
from astitch_sim.plan.plan import Plan, Value
from astitch_sim.plan.sealed import ReadOnlyDict, ReadOnlyList
from astitch_sim.plan import validate as validate_module
from astitch_sim.plan.validate import RULES
from astitch_sim.plan.vocabulary import BARRIER_FOR_SPACE, Barrier, Combine, Scheme, Space
from astitch_sim.frontends.workloads import workload_inputs


@pytest.fixture(scope="module")
def plan():
    """The paper's tree (``reduce_scheme="tree"``): the rows' mean and rstd live in shared memory behind block
    barriers -- what the edits below break.  (Under the default shuffle they stay in registers, no barrier.)"""
    return asim.compile(asim.workload("layernorm", rows=64, cols=256), "astitch", "H100", reduce_scheme="tree")


@pytest.fixture(scope="module")
def split_plan():
    """A column reduction whose reduced dim is split over blocks (a combine mode other than none)."""
    p = asim.compile(asim.workload("column_reduce", rows=65536, cols=32), "astitch", "H100")
    assert any(s.mapping.splits > 1 for k in p.generated for s in k.stages)
    return p


# -- the vocabulary ----------------------------------------------------------------------------------------------

def test_words_are_strings_that_print_and_serialise_unchanged():
    assert Space.SHARED == "shared" and f"{Barrier.GRID}" == "grid" and str(Scheme.LOCAL) == "local"
    assert "%s|%8s|" % (Combine.ATOMIC, Space.GLOBAL) == "atomic|  global|"
    assert json.dumps({Barrier.NONE: [Space.REGISTER]}) == '{"none": ["register"]}'
    assert {"grid": 1}[Barrier.GRID] == 1 and Barrier.GRID in {"grid"}      # hashes as its string


def test_words_order_by_meaning():
    assert list(Space) == sorted(Space) == [Space.REGISTER, Space.SHARED, Space.GLOBAL]
    assert max(Barrier.BLOCK, Barrier.GRID, Barrier.NONE) is Barrier.GRID
    assert Barrier.NONE < Barrier.BLOCK < Barrier.GRID and Barrier.BLOCK < "grid"
    assert Scheme.INDEPENDENT < Scheme.LOCAL < Scheme.REGIONAL < Scheme.GLOBAL
    # a shared value needs a block barrier before a later reader, a global one a grid barrier
    assert [BARRIER_FOR_SPACE[s] for s in Space] == list(Barrier)


@pytest.mark.parametrize("word, text", [(Space, "l2"), (Scheme, "magic"), (Barrier, "maybe"),
                                        (Combine, "shuffle"), (Barrier, None), (Space, 3)])
def test_a_word_outside_the_vocabulary_is_refused_with_the_choices(word, text):
    with pytest.raises(AStitchError, match=f"unknown {word.noun()} {text!r}.*use one of {', '.join(word.words())}"):
        word.parse(text, "field")


def test_plan_fields_hold_words_and_refuse_others(plan):
    k = plan.kernels[0]
    assert all(type(v.space) is Space and type(v.scheme) is Scheme for v in k.values.values())
    assert all(type(s.barrier_after) is Barrier and type(s.mapping.combine) is Combine for s in k.stages)
    with pytest.raises(AStitchError, match=r"unknown space 'l2' \(in space='l2'\)"):
        Value("x", "l2", "local")
    with pytest.raises(AStitchError, match="unknown barrier 'maybe'"):
        replace(k.stages[0], barrier_after="maybe")
    with pytest.raises(AStitchError, match="unknown combine mode 'magic'"):
        replace(k.stages[0].mapping, combine="magic")
    v = Value("x", "shared", "regional")          # strings are parsed into words
    assert v.space is Space.SHARED and v.scheme is Scheme.REGIONAL


def test_json_round_trip_keeps_words(plan, split_plan):
    for p in (plan, split_plan):
        again = Plan.from_json(p.to_json())
        assert again.to_json() == p.to_json() and str(again) == str(p)
        assert all(type(v.space) is Space for k in again.generated for v in k.values.values())
        d = json.loads(p.to_json())
        assert {v["space"] for k in d["kernels"] for v in k["values"].values()} <= set(Space.words())


# -- immutable once built ----------------------------------------------------------------------------------------

def _mutations(p):
    k = p.kernels[0]
    s, v = k.stages[0], next(iter(k.values.values()))
    return [
        ("plan field", lambda: setattr(p, "strategy", "xla")),
        ("plan notes", lambda: p.notes.append("x")),
        ("plan kernels", lambda: p.kernels.pop()),
        ("plan options", lambda: p.options.update(a=1)),
        ("kernel field", lambda: setattr(k, "grid", 1)),
        ("kernel values", lambda: k.values.__setitem__("ghost", v)),
        ("kernel inputs", lambda: k.inputs.insert(0, "ghost")),
        ("kernel stages", lambda: k.stages.__setitem__(0, s)),
        ("kernel notes +=", lambda: k.notes.__iadd__(["x"])),
        ("stage field", lambda: setattr(s, "barrier_after", "none")),
        ("stage ops", lambda: s.ops.append("ghost")),
        ("stage recompute", lambda: s.recompute.clear()),
        ("stage mapping", lambda: setattr(s.mapping, "grid", 7)),
        ("value field", lambda: setattr(v, "space", "global")),
        ("value delete", lambda: delattr(v, "why")),
    ]


def test_compile_returns_a_sealed_plan_that_refuses_every_change(plan):
    before = plan.to_json()
    assert plan.sealed and plan.kernels[0].sealed and plan.kernels[0].stages[0].mapping.sealed
    assert isinstance(plan.kernels, ReadOnlyList) and isinstance(plan.kernels[0].values, ReadOnlyDict)
    for label, change in _mutations(plan):
        with pytest.raises(AStitchError, match="a built plan is immutable"):
            change()
    assert plan.to_json() == before


def test_from_json_seals_and_to_dict_gives_plain_editable_containers(plan):
    again = Plan.from_json(plan.to_json())
    assert again.sealed and again.kernels[0].stages[0].sealed
    d = again.to_dict()
    assert type(d["kernels"]) is list and type(d["kernels"][0]["values"]) is dict
    d["kernels"][0]["notes"].append("edited")         # the dict is the caller's to edit
    assert "edited" not in again.kernels[0].notes


def test_copies_pickles_and_equality_survive_sealing(plan):
    for other in (copy.deepcopy(plan), pickle.loads(pickle.dumps(plan))):
        assert other.sealed and other.to_json() == plan.to_json()
        assert other.kernels[0] == plan.kernels[0]
    assert plan.kernels[0].values == {n: v for n, v in plan.kernels[0].values.items()}
    assert list(plan.kernels[0].inputs) == plan.kernels[0].inputs


# -- changed copies ----------------------------------------------------------------------------------------------

def test_with_stage_makes_a_changed_copy_and_validate_says_what_broke(plan):
    racy = plan.with_stage(0, 0, barrier_after="none")
    assert racy.sealed and racy.kernels[0].stages[0].barrier_after is Barrier.NONE
    assert plan.kernels[0].stages[0].barrier_after is Barrier.BLOCK          # the original is untouched
    assert racy.kernels[0].stages[1] is plan.kernels[0].stages[1]           # the rest is shared, not copied
    with pytest.raises(AStitchError, match="no block barrier"):
        racy.validate()
    racy.validate(barriers=False)


def test_a_sealed_plan_is_checked_once_until_its_graph_changes(monkeypatch):
    """compile checks the plan, so simulate does not check it again; trace mode's check (barriers left out) is
    made once; a failed check is made again every time; a changed copy is checked anew; a graph given another
    node, or other outputs, after compiling is checked again -- and an output the plan never computes is
    refused, as before."""
    g = asim.workload("softmax", rows=8, cols=64)
    plan, x = asim.compile(g, "xla", "H100"), workload_inputs(g, 0)
    calls = []
    real = validate_module.validate_plan

    def spy(p, barriers=True):
        calls.append(barriers)
        return real(p, barriers=barriers)
    monkeypatch.setattr(validate_module, "validate_plan", spy)
    asim.simulate(plan, x)
    asim.simulate(plan, x)
    assert calls == []
    asim.simulate(plan, x, trace=True)
    asim.simulate(plan, x, trace=True)
    assert calls == [False]
    too_big = plan.with_kernel(0, block=4096)
    for _ in range(2):
        with pytest.raises(AStitchError, match="4096 threads"):
            too_big.validate()
    assert calls == [False, True, True]
    plan.with_notes("a what-if").validate()
    assert calls == [False, True, True, True]
    extra = g.add_node("exponential", [g.outputs[0]])
    plan.validate()
    assert calls[-1] is True and len(calls) == 5
    g.set_outputs(extra)
    with pytest.raises(AStitchError, match="never computes graph output"):
        asim.simulate(plan, x)


def test_with_kernel_value_and_notes(plan):
    name = plan.kernels[0].name
    bigger = plan.with_kernel(name, registers_per_thread=64)
    assert bigger.kernels[0].registers_per_thread == 64 and plan.kernels[0].registers_per_thread != 64
    node = next(n for n, v in plan.kernels[0].values.items() if v.space is Space.SHARED)
    moved = plan.with_value(0, node, offset=4096)
    assert moved.kernels[0].values[node].offset == 4096 and plan.kernels[0].values[node].offset != 4096
    noted = plan.with_notes("a", "b")
    assert list(noted.notes[-2:]) == ["a", "b"] and len(noted.notes) == len(plan.notes) + 2


@pytest.mark.parametrize("edit, match", [
    (lambda p: p.with_kernel(5, grid=1), "no kernel 5 in this plan"),
    (lambda p: p.with_kernel("ghost", grid=1), "no kernel 'ghost'"),
    (lambda p: p.with_kernel(True, grid=1), "no kernel True"),
    (lambda p: p.with_kernel(0, gird=1), "Kernel has no field 'gird'"),
    (lambda p: p.with_stage(0, 9, barrier_after="none"), "has stages 0..2; got stage 9"),
    (lambda p: p.with_stage(0, 0, barier="none"), "Stage has no field 'barier'"),
    (lambda p: p.with_stage(0, 0, barrier_after="maybe"), "unknown barrier 'maybe'"),
    (lambda p: p.with_value(0, "ghost", offset=0), "has no Value for 'ghost'"),
])
def test_bad_edits_are_astitch_errors(plan, edit, match):
    assert len(plan.kernels) == 1 and len(plan.kernels[0].stages) == 3
    with pytest.raises(AStitchError, match=match):
        edit(plan)


def test_a_planner_builds_unsealed_objects():
    """Sealing is what compile does last: a Stage or Value made by hand is still being built."""
    v = Value("x", Space.REGISTER, Scheme.LOCAL)
    v.space = "global"
    assert v.space is Space.GLOBAL and not v.sealed
    assert v.seal() is v and v.sealed


# -- named rules -------------------------------------------------------------------------------------------------

def test_validate_is_a_list_of_named_rules():
    names = [r.name for r in RULES]
    assert len(names) == len(set(names)) >= 15
    assert all(callable(r.check) and r.check.__name__ != "<lambda>" for r in RULES)
    assert {r.applies_to for r in RULES} == {(), ("library",), ("generated",)}


def test_each_kernel_rule_reports_its_own_break(plan):
    k = plan.kernels[0]
    cases = {
        "grid of 0 blocks": plan.with_kernel(0, grid=0, stages=[replace(s, mapping=replace(s.mapping, grid=0))
                                                                for s in k.stages]),
        "1025 threads per block": plan.with_kernel(0, block=1025),
        "bytes of shared memory per block": plan.with_kernel(0, shared_bytes=10**7),
        "registers per thread": plan.with_kernel(0, registers_per_thread=300),
        "at least one stage": plan.with_kernel(0, stages=[]),
        "shared values need": plan.with_kernel(0, shared_bytes=0),
        "maps onto": plan.with_stage(0, 1, mapping=replace(k.stages[1].mapping, grid=k.grid + 1)),
    }
    for match, broken in cases.items():
        with pytest.raises(AStitchError, match=match):
            broken.validate()
