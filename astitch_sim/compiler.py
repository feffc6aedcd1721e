"""``compile(graph, strategy, gpu, **options)``: the one entry point to every strategy; ``estimate(plan)``: the
cost model's static estimate of a compiled plan (what the strategies' searches price candidates with)."""
from __future__ import annotations

from .errors import AStitchError
from .ir.graph import Graph
from .hardware.gpus import gpu as get_gpu
from .planning.reduce_preference import preferring
from .passes.trivial_reduce import eliminate_trivial_reduces
from .passes.unit_dims import canonicalize_unit_dims
from .plan.plan import Plan
from .plan.vocabulary import ReduceScheme
from .passes.zero_size import eliminate_zero_size

from .planning.strategies.fs_cost import priced
from .planning.strategies.registry import REGISTRY, strategy_named

#: the names of the registered strategies, in the order comparisons show them (strategies/registry.py)
STRATEGIES = tuple(REGISTRY)


def compile(graph: Graph, strategy: str = "astitch", gpu="H100", **options):
    """Plan ``graph`` with ``strategy`` (one of ``STRATEGIES``: unfused, xla, tvm, fusionstitching, inductor, astitch) for ``gpu`` (V100, A100, H100, H200).

    The returned Plan holds every decision; it is validated and sealed (read-only,
    ``astitch_sim.plan.sealed``) before it is returned: readers follow it, none edits it.

    Values with no elements (a 0-length dimension) are removed first, as XLA does
    (``astitch_sim.passes.zero_size``): then ``plan.graph`` is the rewritten graph, same
    parameters and output names, and no kernel iterates over an empty domain.  A
    reduce over no dimensions becomes its reducer's elementwise op
    (``astitch_sim.passes.trivial_reduce``), as XLA's algebraic simplifier does.  A
    broadcast that only adds size-1 dims is a reshape, and such reshapes sink below
    the elementwise ops that read them (``astitch_sim.passes.unit_dims``), as XLA's
    algebraic simplifier and reshape mover do: JAX's keepdims per-row values
    (``f32[rows,1]``) are computed over ``[rows]``, the reduce's own shape.

    ``options`` belong to the strategy.  ``xla`` takes ``fusion_rules``: which XLA
    version's GPU fusion rules it follows, ``"openxla-2024"`` (the default: f32/f16
    divide, rsqrt, exp and sqrt are cheap) or ``"tf-2.6"`` (the paper's era: only
    divide and rsqrt are cheap); see ``strategies/xla_rules.py``.  ``fusionstitching`` takes its search's
    bounds: ``search_budget`` (2000 schedules priced), ``beam_width`` (3), ``max_merge`` (8 XLA
    kernels per pattern), ``block_sizes`` and ``min_gain`` (0.02: a re-tuned kernel
    replaces XLA's only if that much faster); see ``strategies/fs_options.py``.
    For ``astitch`` they are what-if switches: each turns one AStitch
    decision off, so you can see what that decision is worth (every switched
    plan still computes the same values).  ``plan.options`` records the ones
    that differ from the default.

    ======================  =======  ==================================================
    option                  default  when switched
    ======================  =======  ==================================================
    horizontal_packing      True     False: one row per block (the block as wide as the
                                     row), as the paper's XLA did: <750000,32> -> 750000 blocks of 32
    vertical_packing        True     False: the grid is never capped at one wave; a kernel
                                     whose grid exceeds a wave cannot hold a grid barrier,
                                     so it ends at each Global value instead
    task_splitting          True     False: a row (column) never spans several blocks
    regional_stitching      True     False: no value crosses stages in shared memory
                                     (it goes through global memory + grid barrier)
    global_stitching        True     False: no value crosses stages in global memory and
                                     no grid barrier: the kernel ends there (more kernels)
    register_reuse          True     False: no value stays in registers from one stage to
                                     a later one (recomputed, or read from memory)
    max_block_threads       1024     a power of two 32..1024: cap on threads per block
    never_behind            True     False: the raw stitch plan, even where a part of it
                                     moves more global bytes or is predicted slower
                                     than XLA's kernels for the same ops (on: XLA's
                                     kernels are kept there, when no other switch is
                                     changed; strategies/never_behind.py)
    launch_search           True     False: each stitched kernel launched by the paper's
                                     rules alone (on: also priced at other block sizes,
                                     without task splitting, and cut at its grid
                                     barriers; the fastest kept, a kernel note lists the
                                     candidates; strategies/astitch_launch.py);
                                     never_behind still applies
    assumed_registers       32       registers per thread assumed when sizing a wave
                                     (a planning input, not a switch: never_behind still
                                     applies); gpu_backend.apply_compiler re-plans with
                                     ptxas's count when a cooperative kernel would spill
    ======================  =======  ==================================================

    Every strategy also takes ``reduce_scheme``: ``"shuffle"`` (default: warp shuffles within a warp, one
    shared-memory step across warps) or ``"tree"`` (the paper's shared-memory tree, a block barrier per
    fold), how the threads of a reduction task combine (``astitch_sim/plan/reduce_scheme.py``).

    An unknown option, a value of the wrong type, or an option a strategy does not take
    (besides ``reduce_scheme``: unfused, tvm and inductor take none; xla takes ``fusion_rules``)
    raises AStitchError.
    """
    if not isinstance(graph, Graph):
        raise AStitchError(f"compile needs a Graph (from asim.from_hlo or asim.workload), got {type(graph).__name__}")
    graph.validate()
    hw = get_gpu(gpu)
    row = strategy_named(strategy)
    options = dict(options)
    prefer = ReduceScheme.parse(options.pop("reduce_scheme", ReduceScheme.SHUFFLE), "reduce_scheme")
    if prefer is ReduceScheme.NONE:
        raise AStitchError("reduce_scheme='none' is not a choice: use 'shuffle' (the default) or 'tree'")
    if options and row.options_type is None:
        takes = [s.name for s in REGISTRY.values() if s.options_type is not None]
        raise AStitchError(f"options ({', '.join(options)}) switch planning decisions; strategy {strategy!r} takes "
                           f"none (strategies with options: {', '.join(takes)})")
    parsed = row.options_type.from_kwargs(options) if row.options_type is not None else None
    graph, zero_notes = eliminate_zero_size(graph)
    graph, reduce_notes = eliminate_trivial_reduces(graph)
    graph, unit_notes = canonicalize_unit_dims(graph)
    with preferring(prefer):        # every kernel the planner assembles reduces so (planning/reduce_preference.py)
        plan = row.planner(graph, hw, parsed)
    if prefer is not ReduceScheme.SHUFFLE:        # the what-if every strategy takes (reduce_scheme.py)
        plan.options = {**plan.options, "reduce_scheme": str(prefer)}
    plan.notes[:0] = zero_notes + reduce_notes + unit_notes
    return plan.seal().validate()


def estimate(plan) -> float:
    """The cost model's **static estimate** of ``plan`` on its GPU preset, in microseconds: each generated
    kernel's counters estimated from its structure (bytes per stage, flops, barriers, atomics;
    ``strategies/fs_cost.py``) and priced by the SIMT model's own formula (``simt/cost.py``).

    A prediction, not a measurement, and not a simulation: no value is computed, so it takes milliseconds
    at any size (a GPT-size layernorm included), where ``asim.simulate(plan, inputs).stats.predicted_us``
    counts exactly by running the plan.  The two use the same formula and the same L1/L2 model (a broadcast
    operand re-read within a stage, a tensor an earlier stage or kernel left resident: ``simt/l2.py``); only
    the counts differ (the static counts charge transposed access as if coalesced).  On the 66 plans an H200
    timed on 2026-11-29 the estimate is within 8% of the measured time at the median, as the simulation is.
    The strategies' searches price their candidates this way (one kernel at a time: no kernel before it has
    left anything in the L2), and the explorer and notebook 6 set it beside GPU measurements
    (``asim.gpu_measurements``).

    Library kernels (a GEMM the plan hands to a vendor library) have no static counters: a plan with one
    raises AStitchError (simulate it instead).
    """
    if not isinstance(plan, Plan):
        raise AStitchError(f"estimate takes a Plan, got {type(plan).__name__}: compile one first, "
                           "asim.estimate(asim.compile(graph, strategy, gpu))")
    library = [k.name for k in plan.kernels if k.kind == "library"]
    if library:
        raise AStitchError(f"the static estimate prices generated kernels only; this plan calls a library for "
                           f"{', '.join(library)}: use asim.simulate(plan, inputs).stats.predicted_us")
    return float(sum(ks.predicted_us for ks in priced(plan.graph, plan.gpu, plan.kernels)))
