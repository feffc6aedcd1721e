"""Checks for 08_write_the_pass: the students' AStitch pass and kernel puzzles against the project's own.

Every check runs the student's functions on graphs, mappings and shapes the notebook never shows -- random
row-normalisation chains (:func:`chain`, seeded), the model zoo at other shapes, random pairs of thread
mappings -- and compares what they decide with what astitch-sim decides on the same input: the planner's
dominant candidates (``strategies.astitch.dominant_candidates``), the op groups of its plans (each stage's
dominant), the stitch scheme it recorded for every value a later stage reads (``Kernel.values``), the
kernel builder's block-locality check, the SIMT model's thread mapping (``ThreadMapping.locate``) and the
float32 result the SIMT model computes for a shuffle reduction, bit for bit.  The hints say where the
student's pass went wrong (which graph, which node, which rule), never the code that is right.
"""
from __future__ import annotations

import random
from dataclasses import replace
from functools import lru_cache

import numpy as np

import astitch_sim as asim
from astitch_sim.planning.kernel_builder import assemble_kernel, is_block_local as project_block_local
from astitch_sim.plan.reduce_scheme import butterfly
from astitch_sim.planning.strategies.astitch import dominant_candidates

from checks.core import Wrong, answered, exercise

GPU = "V100"
#: the hidden graphs: seeds of :func:`chain` (the notebook draws none of them) and model-zoo shapes it never uses
SEEDS = range(100, 124)
ZOO = [("layernorm", {"rows": 96, "cols": 384}), ("softmax", {"rows": 48, "cols": 1000}),
       ("rmsnorm", {"rows": 40, "cols": 640}), ("log_softmax", {"rows": 72, "cols": 300}),
       ("cross_entropy", {"rows": 40, "cols": 500}), ("attention_softmax", {"batch": 2, "heads": 3, "seq": 48}),
       ("global_norm", {"rows": 48, "cols": 96}), ("paper_fig7", {"n": 24, "c": 40}),
       ("layernorm_backward", {"rows": 48, "cols": 160}), ("bias_gelu", {"rows": 24, "cols": 200}),
       ("adam_step", {"size": 3000}), ("softmax", {"rows": 8, "cols": 20000}),
       ("column_reduce", {"rows": 500, "cols": 96}), ("batchnorm_train", {"rows": 640, "cols": 24}),
       ("swiglu", {"rows": 40, "cols": 300})]


def chain(seed: int) -> asim.Graph:
    """A random row-normalisation chain: 1-3 rounds of "reduce a row, maybe scale / shift / rsqrt the
    result, broadcast it back, combine it with the running value, maybe apply exp or tanh", some of the
    per-row results also graph outputs.  Reduce kind, shapes and every maybe are drawn from ``seed``."""
    rng = random.Random(seed)
    rows, cols = rng.choice([8, 33, 64, 256, 1000]), rng.choice([32, 100, 128, 512, 2048])
    g = asim.Graph(f"chain{seed}")
    cur = g.parameter("x", (rows, cols))
    outs = []
    for i in range(rng.randint(1, 3)):
        t = r = g.reduce(cur, dims=(1,), reducer=rng.choice(["sum", "max"]), name=f"r{i}")
        if rng.random() < 0.6:
            t = g.multiply(r, g.broadcast(g.constant(1.0 / cols), (rows,)), name=f"s{i}")
        if rng.random() < 0.4:
            t = g.add(t, g.broadcast(g.constant(1.0), (rows,)), name=f"e{i}")
            if rng.random() < 0.5:
                t = g.rsqrt(t, name=f"rs{i}")
        b = g.broadcast(t, (rows, cols), dimensions=(0,), name=f"b{i}")
        op = rng.choice(["subtract", "multiply", "divide"])
        cur = getattr(g, op)(cur, b, name=f"y{i}")
        if rng.random() < 0.3:
            cur = g.exp(cur, name=f"x{i}") if op == "subtract" else g.tanh(cur, name=f"t{i}")
        if rng.random() < 0.25:
            outs.append(t)
    g.set_outputs(cur, *outs)
    return g


def row_then_column(rows: int, cols: int) -> asim.Graph:
    """A row-normalised ``exp(x)`` whose elements a column reduction reads again: the one family here where
    a value over every element crosses into a stage with another mapping (rows, then columns)."""
    g = asim.Graph(f"row_then_column_{rows}x{cols}")
    x = g.parameter("x", (rows, cols))
    t = g.exp(x, name="t")
    r = g.reduce(t, dims=(1,), name="r")
    y = g.divide(t, g.broadcast(r, (rows, cols), dimensions=(0,)), name="y")
    g.set_outputs(y, g.reduce(g.multiply(y, t, name="yt"), dims=(0,), name="c"))
    return g


#: the families of :func:`mixed`, one per seed in turn
MIXED = ("column", "row_and_column", "elementwise", "broadcast")
#: seeds of :func:`mixed` (each family four times)
MIXED_SEEDS = range(200, 216)


def mixed(seed: int) -> asim.Graph:
    """A random graph of another family than :func:`chain`'s row reductions (``MIXED[seed % 4]``):

    * ``column``: a column reduction (over dim 0) of ``x`` or of an elementwise function of it, maybe scaled
      and broadcast back along the columns (a bias gradient, batch norm's mean);
    * ``row_and_column``: the paper's Figure 7 pattern -- a row reduction broadcast back, then a column
      reduction of what it produced (reductions over different dims joined in one scope);
    * ``elementwise``: two to five elementwise ops over two inputs, some intermediate results also outputs;
    * ``broadcast``: a ``[cols]`` bias and a ``[rows]`` scale broadcast over ``[rows, cols]``, maybe an
      expensive op of the scale broadcast to every element, maybe a row reduction at the end."""
    rng = random.Random(seed)
    family = MIXED[seed % len(MIXED)]
    rows, cols = rng.choice([16, 48, 96, 300]), rng.choice([24, 64, 200, 700])
    g = asim.Graph(f"{family}{seed}")
    x = g.parameter("x", (rows, cols))
    outs = []

    def unary(t, name):
        op = rng.choice(["exp", "tanh", "square", "none"])
        if op == "square":
            return g.multiply(t, t, name=name)
        return t if op == "none" else getattr(g, op)(t, name=name)

    if family == "column":
        t = unary(x, "t")
        c = g.reduce(t, dims=(0,), reducer=rng.choice(["sum", "max"]), name="c")
        if rng.random() < 0.6:
            c = g.multiply(c, g.broadcast(g.constant(1.0 / rows), (cols,)), name="m")
        outs.append(c)
        if rng.random() < 0.6:
            outs.append(g.subtract(x, g.broadcast(c, (rows, cols), dimensions=(1,), name="cb"), name="y"))
    elif family == "row_and_column":
        r = g.reduce(x, dims=(1,), reducer=rng.choice(["sum", "max"]), name="r")
        if rng.random() < 0.5:
            r = g.exp(g.multiply(r, g.broadcast(g.constant(-1.0 / cols), (rows,))), name="p")
        y = getattr(g, rng.choice(["subtract", "multiply"]))(x, g.broadcast(r, (rows, cols), dimensions=(0,),
                                                                                name="rb"), name="y")
        y = unary(y, "u")
        outs.append(g.reduce(y, dims=(0,), name="c"))
        if rng.random() < 0.5:
            outs.append(y)
    elif family == "elementwise":
        w = g.parameter("w", (rows, cols))
        t = x
        for i in range(rng.randint(2, 5)):
            op = rng.choice(["add", "multiply", "subtract", "exp", "tanh"])
            t = getattr(g, op)(t, w, name=f"e{i}") if op in ("add", "multiply", "subtract") else \
                getattr(g, op)(t, name=f"e{i}")
            if rng.random() < 0.3:
                outs.append(t)
        outs.append(t)
    else:
        bias, scale = g.parameter("bias", (cols,)), g.parameter("scale", (rows,))
        s = g.tanh(scale, name="ts") if rng.random() < 0.5 else scale
        t = g.add(x, g.broadcast(bias, (rows, cols), dimensions=(1,), name="bb"), name="h")
        t = g.multiply(t, g.broadcast(s, (rows, cols), dimensions=(0,), name="sb"), name="y")
        if rng.random() < 0.5:
            outs.append(g.reduce(t, dims=(1,), name="r"))
            if rng.random() < 0.5:
                outs.append(t)
        else:
            outs.append(t)
    g.set_outputs(*dict.fromkeys(outs))
    return g


def hidden_graphs() -> list:
    """Every hidden graph: the row chains, the other families, the zoo at unseen shapes, row-then-column."""
    return [chain(s) for s in SEEDS] + [mixed(s) for s in MIXED_SEEDS] + \
        [asim.workload(w, **shape) for w, shape in ZOO] + [row_then_column(r, c) for r, c in ((64, 128), (40, 1000))]


@lru_cache(maxsize=None)
def hidden_plans() -> tuple:
    """The astitch plans (the raw stitch plans: ``never_behind=False``, with the paper's launch rules:
    ``launch_search=False``, so long rows are split as the paper splits them) of every hidden graph, with the
    paper's reduction trees (``reduce_scheme="tree"``), whose per-row values cross stages as the notebook's
    scheme rules say (after a shuffle the planner keeps them in registers instead: ``plan/task_registers.py``)."""
    return tuple(asim.compile(g, "astitch", GPU, never_behind=False, launch_search=False, reduce_scheme="tree")
                 for g in hidden_graphs())


def stitch_kernels(plans=None):
    """``(plan, kernel, scope, outputs)`` for every stitch kernel of ``plans`` (default: the hidden plans)."""
    for plan in hidden_plans() if plans is None else plans:
        for k in plan.kernels:
            if k.name.startswith("stitch."):
                scope = {n for s in k.stages for n in list(s.ops) + list(s.epilogue)}
                yield plan, k, scope, set(k.outputs)


# -- the student's decisions assembled into a plan, priced by the SIMT model ------------------------------------

def grouped_stages(plan, k, leaders: dict) -> list:
    """The stages of stitch kernel ``k`` regrouped as ``leaders`` ({candidate: its group's dominant}) says.

    Each candidate brings the ops the planner computes with it: itself and the non-candidate ops of its
    planner stage that it reads through other non-candidates (its Local ops; one no candidate of its stage
    reads goes with the stage's first candidate; the ops of a stage left without any candidate -- a
    candidate the student missed -- become Local ops of the candidates that read them, recomputed there,
    as the pass would fuse a non-candidate).  A group becomes one stage, in the order of its
    dominant's planner stage, with that stage's thread mapping -- or, when everything it computes has one
    other shape (a per-row value in a group of its own), a flat mapping over that shape on the kernel's
    launch.  An epilogue part (per task) stays an epilogue in a group with a reduce and becomes ordinary
    ops in one without.  A cheap Local op two groups read is computed by each (as the planner recomputes
    it); an epilogue op only by the first group that reads it (the later one reads its value)."""
    g = plan.graph
    pos = {n.name: i for i, n in enumerate(g)}
    cands, where, bundles, orphans = set(leaders), {}, {}, {}
    for i, s in enumerate(k.stages):
        part = {n: ("ops" if n in s.ops else "epilogue") for n in list(s.ops) + list(s.epilogue)}
        local = [c for c in part if c in cands and c not in where]
        owners: dict = {}

        def visit(n, c):
            for o in g[n].operands:
                if o.name in part and o.name not in cands and c not in owners.setdefault(o.name, set()):
                    owners[o.name].add(c)
                    visit(o.name, c)
        for c in local:
            where[c] = i
            bundles[c] = {"ops": set(), "epilogue": set()}
            bundles[c][part[c]].add(c)
            visit(c, c)
        fallback = {s.dominant} if s.dominant in local else set(local[:1])
        for n, side in part.items():
            if n in cands:
                continue
            got = owners.get(n) or fallback
            if not got:
                orphans.setdefault(n, side)
            for c in ({min(got, key=pos.get)} if side == "epilogue" and got else got):
                bundles[c][side].add(n)
    for c, bundle in bundles.items():          # a stage left without candidates: its ops become Local ops
        side = "ops" if c in bundle["ops"] else "epilogue"     # of the candidates that read them (recomputed)
        work = list(bundle["ops"] | bundle["epilogue"])
        while work:
            for o in g[work.pop()].operands:
                if o.name in orphans and o.name not in bundle[side]:
                    bundle[side].add(o.name)
                    work.append(o.name)
    missing = sorted(set(leaders.values()) - set(where), key=lambda n: pos.get(n, -1))
    if missing:
        raise asim.AStitchError(f"{missing[0]} leads a group but is none of the candidates")
    stages = []
    for lead in sorted(set(leaders.values()), key=lambda n: (where[n], pos[n])):
        ops, epi = set(), set()
        for c, own in leaders.items():
            if own == lead:
                ops |= bundles[c]["ops"]
                epi |= bundles[c]["epilogue"]
        m = k.stages[where[lead]].mapping
        if epi and not any(g[n].op == "reduce" for n in ops):
            ops, epi = ops | epi, set()
        shapes = {tuple(g[n].operands[0].shape if g[n].op == "reduce" else g[n].shape) for n in ops}
        if len(shapes) == 1 and tuple(m.domain) not in shapes:
            (shape,) = shapes
            m = asim.ThreadMapping("flat", shape, (tuple(range(len(shape))),), block=m.block, grid=m.grid)
        stages.append(asim.Stage(lead, sorted(ops, key=pos.get), m, sorted(epi, key=pos.get)))
    if not stages:
        raise asim.AStitchError("no candidate, so no stage: the kernel computes nothing")
    return stages


def rebuilt(plan, index: int, stages: list, schemes=None):
    """``plan`` with kernel ``index`` assembled again by the kernel builder from ``stages`` (stripped of
    everything the builder decides), the schemes in ``schemes`` imposed (``assemble_kernel(schemes=...)``).
    The launch (grid, block, registers) is the planner's: the student decides no launch here."""
    from dataclasses import fields
    k = plan.kernels[index]
    new = assemble_kernel(plan.graph, k.name, [_stripped(s) for s in stages], plan.gpu, set(k.outputs),
                          stitch=True, keep_inputs=True, schemes=schemes,
                          reduce_scheme=plan.options.get("reduce_scheme", "shuffle"))
    changes = {f.name: getattr(new, f.name) for f in fields(new)}
    computed = {n for st in new.stages for n in list(st.ops) + list(st.epilogue)}
    changes.update(registers_per_thread=k.registers_per_thread, notes=list(k.notes),
                   ends=[e for e in k.ends if e.node in computed])     # why it ends, where it still computes that op
    return plan.with_kernel(index, **changes)


_PLANNER_RUNS: dict = {}


def _run(plan, cache: bool = False):
    """The SIMT model's run of ``plan`` on fixed random inputs: (outputs, predicted us); ``cache``: keep it
    (a hidden plan, run once however many passes are graded)."""
    if id(plan) in _PLANNER_RUNS:
        return _PLANNER_RUNS[id(plan)][1]
    res = asim.simulate(plan, asim.random_inputs(plan.graph, seed=0))
    out = [np.asarray(o) for o in res.outputs], res.stats.predicted_us
    if cache:
        _PLANNER_RUNS[id(plan)] = (plan, out)
    return out


def judge_plan(planner, yours) -> str:
    """Why the plan ``yours`` (a student's decisions assembled) loses against the planner's, or "" if it
    does not: the validator or the SIMT model refuses it, it computes other values, or the SIMT model
    predicts it slower."""
    try:
        yours.validate()
        got, t_yours = _run(yours)
    except asim.AStitchError as e:
        return f"the plan your decisions make is refused: {e}"
    want, t_planner = _run(planner, cache=True)
    for name, a, b in zip([o.name for o in planner.graph.outputs], got, want, strict=True):
        if a.shape != b.shape or not np.allclose(a.astype(float), b.astype(float), rtol=1e-5, atol=1e-6,
                                                 equal_nan=True):
            return f"the plan your decisions make computes output {name} wrong (the SIMT model ran it)"
    if t_yours > t_planner * (1 + 1e-9):
        return (f"the plan your decisions make is predicted {t_yours:.3f} us on {GPU} (SIMT model), the planner's "
                f"{t_planner:.3f} us: {t_yours / t_planner - 1:.2%} slower")
    return ""


def _where(plan, k) -> str:
    return f"graph {plan.graph.name!r}, kernel {k.name}"


def _call(fn, what: str, *args):
    try:
        return fn(*args)
    except Wrong:
        raise
    except Exception as e:
        raise Wrong(f"{what} raised {type(e).__name__}: {e}") from None


def _callable(fn, what: str) -> None:
    answered(fn, what)
    if not callable(fn):
        raise Wrong(f"{what} should be a function")


def _names(value, what: str) -> list:
    if value is None:
        raise Wrong(f"{what} returned None: return a list of node names (did you forget the return?)")
    if isinstance(value, str) or not all(isinstance(x, str) for x in value):
        raise Wrong(f"{what} should return a list of node names (strings)")
    return list(value)


def _why_candidate(g, name: str, outputs: set) -> str:
    node = g[name]
    if node.op == "reduce":
        return "a reduce"
    if name in outputs:
        return "a value that leaves the kernel"
    return "an expensive op whose result is broadcast"


# -- question 1: dominant identification and merging ----------------------------------------------------------

def _check_find(find_dominants, plans=None) -> None:
    for plan, k, scope, outputs in stitch_kernels(plans):
        g = plan.graph
        truth = dominant_candidates(g, scope, outputs)
        got = _names(_call(find_dominants, "find_dominants", g, set(scope), set(outputs)), "find_dominants")
        if got == truth:
            continue
        where = _where(plan, k)
        missing = [n for n in truth if n not in got]
        extra = [n for n in got if n not in truth]
        if missing:
            raise Wrong(f"find_dominants on {where}: you miss {missing[0]} ({g[missing[0]].op}), "
                        f"{_why_candidate(g, missing[0], outputs)}")
        if extra:
            n = extra[0]
            why = ("it is not in the scope" if n not in scope else
                   f"an op {g[n].op!r} that neither reduces, nor leaves the kernel, nor is an expensive op broadcast "
                   "to a user in the scope: it is Local")
            raise Wrong(f"find_dominants on {where}: {n} is no candidate: {why}")
        raise Wrong(f"find_dominants on {where}: the right candidates, but not in graph order (iterate over the "
                    "graph, which is in topological order)")


def _leaders(k) -> dict:
    first = {}
    for s in k.stages:
        for n in list(s.ops) + list(s.epilogue):
            first.setdefault(n, s.dominant)
    return first


def _check_merge(merge_dominants, plans=None) -> None:
    for plan, k, scope, outputs in stitch_kernels(plans):
        g = plan.graph
        cands = dominant_candidates(g, scope, outputs)
        first = _leaders(k)
        truth = {c: first[c] for c in cands}
        got = _call(merge_dominants, "merge_dominants", g, list(cands))
        if not isinstance(got, dict):
            raise Wrong(f"merge_dominants should return a dict {{candidate: the dominant of its group}}, got "
                        f"{type(got).__name__}")
        if set(got) != set(truth):
            raise Wrong(f"merge_dominants on {_where(plan, k)}: give every candidate it was passed a group "
                        f"leader (keys: the candidates, values: their groups' dominants)")
        for c in cands:
            if got[c] == truth[c]:
                continue
            node, where = g[c], _where(plan, k)
            if truth[c] == c:
                raise Wrong(f"merge_dominants on {where}: {c} ({node.op}) starts a group of its own: "
                            "which rule merged it?")
            lead = g[truth[c]]
            if node.op == "reduce":
                raise Wrong(f"merge_dominants on {where}: {c} is a sibling reduce of an earlier group's "
                            "reduce (same input shape and dimensions, and it does not depend on that group's "
                            "results): it joins that group")
            if lead.op == "reduce" and tuple(node.shape) == tuple(lead.shape):
                raise Wrong(f"merge_dominants on {where}: {c} has the reduced shape and is computed from a "
                            "reduce group's results: a sub-dominant in that group's epilogue")
            raise Wrong(f"merge_dominants on {where}: {c} is elementwise over the domain of an earlier group "
                        "without a reduce: it joins that group (what it reads there, it reads at its own element)")


# The plausible wrong passes CI feeds to the checks: the notebook's rules with one of them left out.

def _depends(node, targets: set) -> bool:
    seen, stack = set(), [node]
    while stack:
        for o in stack.pop().operands:
            if o.name in targets:
                return True
            if o.name not in seen:
                seen.add(o.name)
                stack.append(o)
    return False


def _find(graph, scope, outputs, *, leaving=True, broadcast=True, expensive_only=True):
    out = []
    for n in graph:
        if n.name not in scope:
            continue
        fans_out = bool(asim.passes.analysis.broadcast_users(n)) and any(u.name in scope for u in n.users)
        if n.op == "reduce" or (leaving and n.name in outputs) or (
                broadcast and asim.passes.analysis.is_expensive(n) and (fans_out or not expensive_only)):
            out.append(n.name)
    return out


def _merge(graph, dominants, *, siblings=True, independent=True, epilogue=True, elementwise=True):
    groups, leader = [], {}
    for name in dominants:
        d = graph[name]
        if d.op == "reduce":
            home = next((gr for gr in groups if siblings and gr["reduces"]
                         and gr["reduces"][0].operands[0].shape == d.operands[0].shape
                         and gr["reduces"][0].attrs["dimensions"] == d.attrs["dimensions"]
                         and not (independent and _depends(d, gr["results"]))), None)
            if home is None:
                home = {"leader": name, "domain": tuple(d.operands[0].shape), "reduces": [], "results": set()}
                groups.append(home)
            home["reduces"].append(d)
        else:
            home = next((gr for gr in reversed(groups) if epilogue and gr["reduces"]
                         and tuple(d.shape) == tuple(gr["reduces"][0].shape) and _depends(d, gr["results"])), None)
            if home is None:
                same = [gr for gr in groups if gr["domain"] == tuple(d.shape)]
                if elementwise and same and not same[-1]["reduces"]:
                    home = same[-1]
                else:
                    home = {"leader": name, "domain": tuple(d.shape), "reduces": [], "results": set()}
                    groups.append(home)
        home["results"].add(name)
        leader[name] = home["leader"]
    return leader


def _variant(fn, label: str, **flags):
    def wrong(*args):
        return fn(*args, **flags)
    wrong.__name__ = wrong.__qualname__ = label
    return wrong


@exercise(wrong=[{"find_dominants": _variant(_find, "find_without_outputs", leaving=False)},
                 {"find_dominants": _variant(_find, "find_without_broadcast_producers", broadcast=False)},
                 {"find_dominants": _variant(_find, "find_every_expensive_op", expensive_only=False)},
                 {"merge_dominants": _variant(_merge, "merge_without_siblings", siblings=False)},
                 {"merge_dominants": _variant(_merge, "merge_dependent_siblings", independent=False)},
                 {"merge_dominants": _variant(_merge, "merge_without_epilogues", epilogue=False)},
                 {"merge_dominants": _variant(_merge, "merge_without_elementwise_groups", elementwise=False)},
                 {"merge_dominants": lambda graph, dominants: {d: d for d in dominants}}])
def q1_dominants(find_dominants, merge_dominants):
    _callable(find_dominants, "find_dominants")
    _callable(merge_dominants, "merge_dominants")
    _check_plans(_plans_of_pass(find_dominants, merge_dominants),
                 lambda plan: (_check_find(find_dominants, [plan]), _check_merge(merge_dominants, [plan])))
    _check_find(find_dominants)
    _check_merge(merge_dominants)


def _plans_of_pass(find_dominants, merge_dominants):
    """``(planner's plan, the plan of the student's grouping)`` for every hidden graph where the student's
    candidates and groups differ from the planner's (their own candidates, merged by their own merge)."""
    for plan in hidden_plans():
        yours = plan
        for i, k in enumerate(plan.kernels):
            if not k.name.startswith("stitch."):
                continue
            g, scope, outputs = plan.graph, {n for s in k.stages for n in list(s.ops) + list(s.epilogue)}, \
                set(k.outputs)
            cands = _call(find_dominants, "find_dominants", g, set(scope), set(outputs))
            if cands is None or isinstance(cands, str) or not all(isinstance(c, str) and c in scope for c in cands):
                return                   # not a list of the scope's names: the decision checks say so
            leaders = _call(merge_dominants, "merge_dominants", g, list(cands))
            if not isinstance(leaders, dict) or set(leaders) != set(cands) or not set(leaders.values()) <= set(cands):
                return                   # not a grouping of the candidates: the decision checks say so
            first = _leaders(k)
            if leaders == {c: first[c] for c in dominant_candidates(g, scope, outputs)}:
                continue                 # the planner's groups: the planner's kernel
            try:
                yours = rebuilt(yours, i, grouped_stages(plan, k, leaders))
            except asim.AStitchError as e:
                yield plan, e
                break
        else:
            if yours is not plan:
                yield plan, yours


def _check_plans(pairs, decisions) -> None:
    """The first hidden graph whose student plan loses (refused, wrong values or slower) fails the
    question; the hint adds the first decision there that differs from the planner's (``decisions(plan)``)."""
    for plan, yours in pairs:
        why = f"the plan your decisions make is refused: {yours}" if isinstance(yours, Exception) else \
            judge_plan(plan, yours)
        if not why:
            continue
        try:
            decisions(plan)
        except Wrong as w:
            raise Wrong(f"graph {plan.graph.name!r}: {why}. The first decision that differs: {w}") from None
        raise Wrong(f"graph {plan.graph.name!r}: {why}")


# -- question 2: the block-locality check and the stitch scheme of every edge ------------------------------------

@lru_cache(maxsize=None)
def _locality_graph(rows: int, cols: int):
    """x[rows, cols] -> r = sum over each row -> y = x * broadcast(r) (a consumer over [rows, cols]) and
    z = r * w (one over [rows]): the two shapes a per-row value is read in."""
    g = asim.Graph(f"locality_{rows}x{cols}")
    x, w = g.parameter("x", (rows, cols)), g.parameter("w", (rows,))
    r = g.reduce(x, dims=(1,), name="r")
    y = g.multiply(x, g.broadcast(r, (rows, cols), dimensions=(0,), name="rb"), name="y")
    z = g.multiply(r, w, name="z")
    g.set_outputs(y, z)
    return g


def _pow2s(lo: int, hi: int) -> list:
    return [1 << i for i in range(lo.bit_length() - 1, hi.bit_length())]


def mapping_pairs(seed: int = 2024, count: int = 60) -> list:
    """``(producer, consumer, rows, project's answer)``: a row reduction's mapping (horizontal packing,
    maybe split, maybe capped at a wave) and a mapping of a later stage over ``[rows, cols]`` or ``[rows]``
    (the same, another packing, another grid, a flat loop), drawn from ``seed``."""
    rng = random.Random(seed)
    out = []
    while len(out) < count:
        rows, cols = rng.choice([6, 16, 40, 64, 100]), rng.choice([8, 32, 48, 256, 1000])
        block = rng.choice([64, 128, 256, 1024])
        tpr = rng.choice([t for t in _pow2s(1, block) if t <= max(1, cols) * 2 and t <= block] or [1])
        splits = rng.choice([1, 1, 2]) if cols >= 2 * tpr else 1
        natural = -(-rows // (block // tpr)) * splits
        grid = max(splits, rng.choice([natural, natural, max(1, natural // 2)]) // splits * splits)
        combine = asim.Combine.ATOMIC if splits > 1 else asim.Combine.NONE
        prod = asim.ThreadMapping("rows", (rows, cols), ((0,), (1,)), block=block, grid=grid, threads_per_row=tpr,
                                  splits=splits, combine=combine)
        kind = rng.choice(["same", "rows", "rows", "flat", "flat_rows"])
        if kind == "same":
            cons, node = prod, "y"
        elif kind == "rows":
            t2 = rng.choice([t for t in _pow2s(1, block) if t <= block])
            n2 = -(-rows // (block // t2))
            cons, node = asim.ThreadMapping("rows", (rows, cols), ((0,), (1,)), block=block,
                                            grid=rng.choice([n2, max(1, grid // splits)]), threads_per_row=t2), "y"
        elif kind == "flat":
            cons, node = asim.ThreadMapping("flat", (rows, cols), ((0, 1),), block=block,
                                            grid=rng.choice([grid, max(1, rows * cols // block)])), "y"
        else:
            cons, node = asim.ThreadMapping("flat", (rows,), ((0,),), block=block, grid=grid), "z"
        g = _locality_graph(rows, cols)
        p_stage = asim.Stage("r", ["r"], prod)
        c_stage = asim.Stage(node, ["rb", "y"] if node == "y" else ["z"], cons)
        truth = project_block_local(g, p_stage, c_stage, "r", {"r"})
        out.append((prod, cons, rows, truth))
    return out


def _describe(m) -> str:
    extra = f", {m.threads_per_row} threads per row" if m.kind == "rows" else ""
    split = f", each row split over {m.splits} blocks" if m.splits > 1 else ""
    return f"a {m.kind} mapping over {list(m.domain)} ({m.grid} blocks of {m.block}{extra}{split})"


def _check_block_local(is_block_local) -> None:
    pairs = mapping_pairs()
    assert any(t for *_, t in pairs) and not all(t for *_, t in pairs)      # both answers occur
    for prod, cons, rows, truth in pairs:
        got = _call(is_block_local, "is_block_local", prod, cons, rows)
        if not isinstance(got, (bool, np.bool_)):
            raise Wrong(f"is_block_local should return True or False, got {type(got).__name__}")
        if bool(got) == truth:
            continue
        case = f"producer {_describe(prod)}, consumer {_describe(cons)}"
        if truth:
            hint = ("every consumer block reads only rows its own block reduced" +
                    ("; a split row is held by all the blocks it is split over" if prod.splits > 1 else ""))
            raise Wrong(f"is_block_local({case}): you say no, but {hint}")
        raise Wrong(f"is_block_local({case}): you say yes, but some consumer block reads a row another block "
                    "reduced (compare, element by element, the consumer's block with the blocks holding its row)")


def _stripped(stage):
    """A stage as the student's pass sees it: its ops, epilogue and mapping (nothing the builder decided)."""
    return asim.Stage(stage.dominant, list(stage.ops), stage.mapping, list(stage.epilogue))


SCHEMES = ("local", "regional", "global")


def _check_schemes(choose_scheme, plans=None) -> None:
    seen = set()
    for plan, k, _, _ in stitch_kernels(plans):
        g = plan.graph
        for name, v in k.values.items():
            later = [j for j in v.read_by if j > v.stage]
            if v.stage < 0 or not later:
                continue
            truth = v.scheme.value
            seen.add(truth)
            got = _call(choose_scheme, "choose_scheme", g, name, _stripped(k.stages[v.stage]),
                        [_stripped(k.stages[j]) for j in later])
            if not isinstance(got, str) or got.strip().lower() not in SCHEMES:
                raise Wrong(f"choose_scheme should return one of the strings {SCHEMES}, got {got!r}")
            if got.strip().lower() == truth:
                continue
            node, where = g[name], _where(plan, k)
            per_task = node.op == "reduce" or name in k.stages[v.stage].epilogue
            if not per_task:
                raise Wrong(f"choose_scheme on {where}: {name} ({node.op}) is computed at every element of "
                            f"stage {v.stage}: registers if every reader maps its elements to the same threads "
                            "(and a thread holds few enough of them), global memory otherwise -- never shared")
            if node.op == "reduce" and k.stages[v.stage].mapping.splits > 1:
                raise Wrong(f"choose_scheme on {where}: {name} is reduced over blocks (task splitting): its parts "
                            "meet in global memory")
            raise Wrong(f"choose_scheme on {where}: {name} is one value per row; does every reader block read "
                        "only rows it reduced itself? (your is_block_local, per reader)")
    assert plans is not None or seen == set(SCHEMES), seen       # the hidden plans exercise every scheme


def _wrong_local_always(producer, consumer, rows):
    return producer == consumer


def _wrong_ignores_splits(producer, consumer, rows):
    e = np.arange(consumer.size)
    row = e // max(1, consumer.size // rows)
    return bool(np.all(consumer.locate(e)[0] == producer.locate(producer.first_element_of_task(row))[0]))


def _wrong_first_element_only(producer, consumer, rows):
    e = np.arange(consumer.size)
    row = e // max(1, consumer.size // rows)
    first = producer.locate(producer.first_element_of_task(row))[0]
    mine = consumer.locate(e)[0]
    return bool(mine[0] >= first[0])


def _scheme_variant(label: str, *, shared_for_elements=False, split_global=True, register_same=True):
    def wrong(graph, name, producer, readers):
        node = graph[name]
        per_task = node.op == "reduce" or name in producer.epilogue
        same = all(r.mapping == producer.mapping for r in readers)
        if not per_task:
            if same and (register_same or tuple(node.shape) == producer.mapping.domain):
                return "local"
            return "regional" if shared_for_elements else "global"
        if split_global and node.op == "reduce" and producer.mapping.splits > 1:
            return "global"
        rows = max(1, node.size)
        return "regional" if all(_ref_block_local(producer.mapping, r.mapping, rows) for r in readers) else "global"
    wrong.__name__ = wrong.__qualname__ = label
    return wrong


def _ref_block_local(producer, consumer, rows):
    e = np.arange(consumer.size)
    row = e // max(1, consumer.size // rows)
    first = producer.locate(producer.first_element_of_task(row))[0]
    mine = consumer.locate(e)[0]
    return bool(np.all((mine >= first) & (mine < first + producer.splits)))


@exercise(wrong=[{"is_block_local": _wrong_local_always}, {"is_block_local": _wrong_ignores_splits},
                 {"is_block_local": _wrong_first_element_only},
                 {"is_block_local": lambda producer, consumer, rows: True},
                 {"choose_scheme": _scheme_variant("shared_for_elements", shared_for_elements=True)},
                 {"choose_scheme": _scheme_variant("split_reduce_in_shared", split_global=False)},
                 {"choose_scheme": lambda graph, name, producer, readers: "regional"}])
def q2_schemes(is_block_local, choose_scheme):
    _callable(is_block_local, "is_block_local")
    _callable(choose_scheme, "choose_scheme")
    _check_block_local(is_block_local)
    _check_plans(_plans_of_schemes(choose_scheme), lambda plan: _check_schemes(choose_scheme, [plan]))
    _check_schemes(choose_scheme)


def _plans_of_schemes(choose_scheme):
    """``(planner's plan, the plan with the student's schemes)`` for every hidden graph where a value that
    crosses stages gets another scheme from ``choose_scheme`` than from the planner."""
    for plan in hidden_plans():
        yours = plan
        for i, k in enumerate(plan.kernels):
            if not k.name.startswith("stitch."):
                continue
            schemes = {}
            for name, v in k.values.items():
                later = [j for j in v.read_by if j > v.stage]
                if v.stage < 0 or not later:
                    continue
                got = _call(choose_scheme, "choose_scheme", plan.graph, name, _stripped(k.stages[v.stage]),
                            [_stripped(k.stages[j]) for j in later])
                if not isinstance(got, str) or got.strip().lower() not in SCHEMES:
                    return               # not a scheme: the decision checks say so
                schemes[name] = got.strip().lower()
            if all(k.values[n].scheme.value == sc for n, sc in schemes.items()):
                continue
            try:
                yours = rebuilt(yours, i, k.stages, schemes)
            except asim.AStitchError as e:
                yield plan, e
                break
        else:
            if yours is not plan:
                yield plan, yours


# -- questions 3 and 4: kernel puzzles on the SIMT model -------------------------------------------------------

#: hidden shapes of the row reduction (rows, cols): packed short rows, a row per warp, rows over several warps
#: (none is split over blocks: that is task splitting, notebook 4)
#: odd widths: rows of even width are read in vectors (astitch_sim/plan/row_vectors.py), whose lanes hold
#: neighbouring columns; the puzzles are about the one-column-per-lane mapping
PUZZLE_SHAPES = [(70, 21), (33, 49), (400, 97), (9, 5), (50, 201), (128, 701), (12, 1023), (300, 1501), (3, 3)]


@lru_cache(maxsize=None)
def _row_reduce(rows: int, cols: int):
    """The astitch plan of ``row_reduce`` (sum of x*x per row), an input, and the SIMT model's result."""
    g = asim.workload("row_reduce", rows=rows, cols=cols)
    plan = asim.compile(g, "astitch", GPU, never_behind=False)
    rng = np.random.default_rng(rows * 7919 + cols)
    x = (rng.standard_normal((rows, cols)) * 10.0 ** rng.integers(-3, 3, (rows, cols))).astype(np.float32)
    out = np.asarray(asim.simulate(plan, {"x": x}).outputs[0], dtype=np.float32)
    assert plan.kernels[0].stages[0].mapping.splits == 1
    return plan, x, out


@exercise(wrong=[lambda rows, cols, block=1024: (np.zeros((rows, cols), int), np.zeros((rows, cols), int)),
                 lambda rows, cols, block=1024: (np.broadcast_to(np.arange(rows)[:, None], (rows, cols)),
                                                  np.broadcast_to(np.arange(cols)[None, :], (rows, cols))),
                 lambda rows, cols, block=1024: _packed(rows, cols, block, round_up=True),
                 lambda rows, cols, block=1024: _packed(rows, cols, block, contiguous=True),
                 lambda rows, cols, block=1024: _packed(rows, cols, block, narrow=True)])
def q3_packing(packed_owner):
    _callable(packed_owner, "packed_owner")
    for rows, cols in PUZZLE_SHAPES:
        plan, _, _ = _row_reduce(rows, cols)
        k = plan.kernels[0]
        blocks, threads, _ = k.stages[0].mapping.locate(np.arange(rows * cols))
        got = _call(packed_owner, "packed_owner", rows, cols, k.block)
        try:
            b, t = (np.asarray(a) for a in got)
        except (TypeError, ValueError):
            raise Wrong("packed_owner should return two arrays (blocks, threads), each of shape (rows, cols)") from None
        if b.shape != (rows, cols) or t.shape != (rows, cols):
            raise Wrong(f"packed_owner({rows}, {cols}, {k.block}): each array should have shape ({rows}, {cols}), "
                        f"got {b.shape} and {t.shape}")
        case = f"packed_owner({rows}, {cols}, block={k.block})"
        wrong = None
        if not np.array_equal(b.reshape(-1), blocks):
            wrong = ("some elements are in the wrong block: how many rows share a block when each row gets a "
                     "power of two of threads?")
        elif not np.array_equal(t.reshape(-1), threads):
            bad = np.flatnonzero(t.reshape(-1) != threads)[0]
            r, c = divmod(int(bad), cols)
            wrong = (f"element ({r}, {c}) is in its block but on the wrong thread: a row's threads take its "
                     "columns in turn (a strided loop), and rows sit side by side in the block")
        if wrong is None:
            continue
        yours = _rows_mapping_like(plan, b.reshape(-1), t.reshape(-1))
        why = judge_plan(plan, rebuilt(plan, 0, [replace(k.stages[0], mapping=yours)])) if yours else ""
        raise Wrong(f"{case}: {why + ': ' if why else ''}{wrong}")


def _rows_mapping_like(plan, blocks, threads):
    """The row mapping (a power of two of threads per row, rows packed side by side, a strided loop) that
    places every element on the student's block and thread, or None if none does: the plan the student's
    packing makes, for the SIMT model to price (fewer threads per row than the planner's: more loop trips)."""
    k = plan.kernels[0]
    m0 = k.stages[0].mapping
    for tpr in (1 << i for i in range(k.block.bit_length())):
        m = asim.ThreadMapping("rows", m0.domain, m0.groups, block=k.block, grid=-(-m0.rows // (k.block // tpr)),
                               threads_per_row=tpr)
        b, t, _ = m.locate(np.arange(m.size))
        if np.array_equal(b, blocks) and np.array_equal(t, threads):
            return m
    return None


def _packed(rows, cols, block, round_up=False, contiguous=False, narrow=False):
    tpr = 1 << ((cols - 1).bit_length() if (round_up or cols < 32) else cols.bit_length() - 1)
    tpr = min(block, tpr)
    if narrow:                      # half the threads a row gets: twice the loop trips
        tpr = max(1, tpr // 2)
    rpb = block // tpr
    r, c = np.arange(rows)[:, None], np.arange(cols)[None, :]
    lane = (c * tpr) // cols if contiguous else c % tpr
    return np.broadcast_to(r // rpb, (rows, cols)), (r % rpb) * tpr + lane


class _Warp:
    """The ``shfl_xor`` a check hands the student's reduction: a warp's exchange (at most 32 lanes, an xor
    offset inside them), recording every offset so the butterfly can be compared with the SIMT model's."""

    def __init__(self):
        self.offsets = []

    def __call__(self, values, offset):
        values = np.asarray(values)
        lanes = values.shape[-1] if values.ndim else 0
        if not 0 < lanes <= 32 or lanes & (lanes - 1):
            raise Wrong("shfl_xor exchanges registers between the lanes of one warp: the last axis of its "
                        f"argument must be a power of two of at most 32 lanes, got {lanes}")
        if not 0 < offset < lanes:
            raise Wrong(f"shfl_xor: offset {offset} outside the {lanes} lanes")
        self.offsets.append(int(offset))
        return values[..., np.arange(lanes) ^ offset]


def _wrong_numpy_sum(x, threads_per_row, shfl_xor):
    return x.sum(axis=1, dtype=np.float32)


def _wrong_contiguous(x, threads_per_row, shfl_xor):
    rows, cols = x.shape
    per = -(-cols // threads_per_row)
    pad = np.zeros((rows, per * threads_per_row), np.float32)
    pad[:, :cols] = x
    return _butterflies(pad.reshape(rows, threads_per_row, per).sum(axis=2, dtype=np.float32), shfl_xor)


def _wrong_tree(x, threads_per_row, shfl_xor):
    rows, cols = x.shape
    acc = np.zeros((rows, threads_per_row), np.float32)
    for i in range(0, cols, threads_per_row):
        part = x[:, i:i + threads_per_row]
        acc[:, :part.shape[1]] += part
    n = threads_per_row
    while n > 1:
        n //= 2
        acc = acc[:, :n] + acc[:, n:2 * n]
    return acc[:, 0]


def _butterflies(acc, shfl_xor):
    rows, lanes = acc.shape
    warp = min(lanes, 32)
    v = acc.reshape(rows, lanes // warp, warp)
    h = warp // 2
    while h:
        v = v + shfl_xor(v, h)
        h //= 2
    if lanes <= 32:
        return v[:, 0, 0]
    w = lanes // 32
    p = 1 << (w - 1).bit_length()
    t = np.zeros((rows, p), np.float32)
    t[:, :w] = v[:, :, 0]
    h = p // 2
    while h:
        t = t + shfl_xor(t, h)
        h //= 2
    return t[:, 0]


@exercise(wrong=[_wrong_numpy_sum, _wrong_contiguous, _wrong_tree])
def q4_shuffle(warp_row_sum):
    _callable(warp_row_sum, "warp_row_sum")
    for rows, cols in PUZZLE_SHAPES:
        plan, x, truth = _row_reduce(rows, cols)
        stage = plan.kernels[0].stages[0]
        lanes = stage.mapping.threads_per_row
        warp = _Warp()
        got = _call(warp_row_sum, "warp_row_sum", x * x, lanes, warp)
        got = np.asarray(got)
        case = f"warp_row_sum on a ({rows}, {cols}) input with {lanes} threads per row"
        if got.shape != (rows,):
            raise Wrong(f"{case}: return one total per row, shape ({rows},); got shape {got.shape}")
        expected = list(butterfly(min(lanes, 32))) + (list(butterfly(lanes // 32)) if lanes > 32 else [])
        if stage.reduce_scheme.value != "shuffle":           # pragma: no cover - the planner shuffles these rows
            raise AssertionError(f"{case}: the plan does not shuffle ({stage.reduce_why})")
        if warp.offsets != expected:
            raise Wrong(f"{case}: your shfl_xor offsets differ from the SIMT model's butterfly: a warp's 32 (or "
                        "fewer) lanes fold with offsets halving down to 1, then, for a row of several warps, "
                        "the warp totals fold the same way")
        if got.dtype != np.float32 or not np.array_equal(got.view(np.int32), truth.view(np.int32)):
            close = np.allclose(got, truth, rtol=1e-4)
            raise Wrong(f"{case}: the totals are {'close to' if close else 'not'} the SIMT model's but not bit "
                        "for bit: float32 sums depend on their order. Each lane folds its columns in loop "
                        "order (lane, lane + lanes, ...) from 0 before the butterfly, all in float32")
