"""The strategy registry: one row per strategy, the one place that names them.

``asim.compile(graph, strategy=...)``, the CLI's ``--strategy`` choices, the
explorer's strategy list and the tutorials' comparisons all read this table, so
a new strategy is one ``register(Strategy(...))`` call in its own module and
shows up everywhere.

Each row gives
  * ``name``: what users type (``strategy="xla"``);
  * ``summary``: one line for ``--help`` and the explorer;
  * ``planner``: ``planner(graph, gpu, options) -> Plan``; ``options`` is an
    instance of ``options_type`` (or ``None`` when the strategy takes none);
  * ``options_type``: a dataclass with ``from_kwargs(dict)`` that checks the
    keyword options of ``compile`` and gives readable errors, or ``None``.

Rows are kept in registration order, which is the order the comparisons show:
from the most kernels to the fewest.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Callable, Optional, Protocol

from ...errors import AStitchError


class OptionsType(Protocol):
    """What ``compile`` asks of a strategy's options class: build a checked instance from keywords."""

    def from_kwargs(self, options: dict) -> Any: ...


@dataclass(frozen=True)
class Strategy:
    name: str
    summary: str
    planner: Callable
    options_type: Optional[OptionsType] = None


REGISTRY: dict[str, Strategy] = {}


def register(strategy: Strategy) -> Strategy:
    """Add ``strategy`` to the table (a name can be registered once)."""
    if strategy.name in REGISTRY:
        raise AStitchError(f"strategy {strategy.name!r} is registered twice")
    REGISTRY[strategy.name] = strategy
    return strategy


def strategy_named(name: str) -> Strategy:
    """The row for ``name``; an unknown name raises AStitchError listing the known ones."""
    try:
        return REGISTRY[name]
    except (KeyError, TypeError):
        raise AStitchError(f"unknown strategy {name!r}: use one of {', '.join(REGISTRY)}") from None


def _register_builtin() -> None:
    """The strategies of the paper's comparison (imported lazily: their modules import the planner's helpers)."""
    def register_only(name):
        """The planner of a register-only strategy: ``fusion.partition_plan`` following its policy."""
        def plan(graph, gpu, _options):
            from .fusion import partition_plan
            from .register_only import POLICIES
            return partition_plan(graph, gpu, POLICIES[name])
        return plan

    def astitch(graph, gpu, options):
        from .astitch import astitch_plan
        return astitch_plan(graph, gpu, options)

    def xla(graph, gpu, options):
        from .fusion import partition_plan
        from .register_only import xla_policy
        from .xla_options import XlaOptions
        return partition_plan(graph, gpu, xla_policy((options or XlaOptions()).fusion_rules))

    def fusionstitching(graph, gpu, options):
        from .fusionstitching import fusionstitching_plan
        return fusionstitching_plan(graph, gpu, options)

    def inductor(graph, gpu, options):
        from .inductor import inductor_plan
        return inductor_plan(graph, gpu, options)

    from .fs_options import FusionStitchingOptions
    from .options import AStitchOptions
    from .xla_options import XlaOptions
    register(Strategy("unfused", "one kernel per op: every intermediate value goes through global memory",
                      register_only("unfused")))
    register(Strategy("xla", "XLA's GPU fusion (OpenXLA's rules of 2022-2024 by default; fusion_rules='tf-2.6' for "
                      "the paper's era): elementwise ops fuse into their consumers, a reduce's result or an "
                      "expensive op that is broadcast ends a kernel", xla, XlaOptions))
    register(Strategy("tvm", "TVM's fusion: like xla, but an expensive broadcast producer is recomputed by "
                      "every consumer thread instead of ending the kernel", register_only("tvm")))
    register(Strategy("fusionstitching", "FusionStitching (2020), AStitch's predecessor: XLA's kernels stitched "
                      "through registers and shared memory where a search with a cost model says it pays (no "
                      "Global scheme, no grid barrier)", fusionstitching, FusionStitchingOptions))
    register(Strategy("inductor", "PyTorch Inductor (torch.compile): pointwise ops fused into reductions, short "
                      "rows kept in registers (persistent reductions), long rows re-read per loop, reductions with "
                      "few outputs split into two kernels; no grid barrier", inductor))
    register(Strategy("astitch", "AStitch: four stitch schemes (independent, local, regional, global), dominant "
                      "ops, hierarchical data reuse, adaptive thread mapping", astitch, AStitchOptions))


_register_builtin()
