"""Why a kernel ends: the boundary decision each strategy records, per kernel, in the Plan.

The question users of XLA and Inductor ask most is not "what is in this kernel" but
"why does it stop here".  Every planner answers it where it decides: when an op
becomes a kernel's last op (a root whose result leaves through global memory), the
planner appends a :class:`KernelEnd` to ``Kernel.ends`` naming

* ``node``: the op at the boundary (computed by the kernel; its result leaves it),
* ``rule``: an :class:`EndRule` word (a closed set, like every word of the Plan),
* ``why``: the rule applied to this graph, in words ("exp.1 is expensive and its
  elements are reused by broadcast.3: recomputed 256x per value if fused"),
* ``source``: where the strategy states the rule (a file and function of XLA,
  TVM, PyTorch, or the paper's section).

``print(plan)`` shows them after each kernel (``ends at ...``), the plan's JSON carries
them, ``plan.validate()`` checks that each names an op the kernel computes, and the
explorer's Graph view shows them next to each kernel: it reads them, it decides nothing.

========================  =============================================================  ===================
rule                      the kernel ends at ``node`` because                            strategies
========================  =============================================================  ===================
``one_op_per_kernel``     every op that does work is a kernel of its own                 unfused
``graph_output``          ``node`` is a graph output (it must reach global memory)       xla, tvm, inductor
``reduce_result``         a reduce's result leaves its kernel (XLA fuses a reduce only   xla, tvm, inductor
                          as a consumer; TVM never fuses a kCommReduce group into its
                          consumer; Inductor realizes reduction results)
``expensive_reused``      an expensive op whose elements a broadcast reuses would be     xla
                          recomputed per element of the broadcast if fused
``expensive_shared``      an expensive op several kernels read would be recomputed in    xla
                          each
``realized``              Inductor realizes a value read by more than                    inductor
                          ``realize_reads_threshold`` consumers
``library_operand``       a library kernel (matrix product, sort...) reads it from       every strategy
                          global memory
``library_op``            a library op runs as a library kernel, never stitched          every strategy
``not_fused``             the next node was refused by the fusion rule the ``why``       inductor
                          names (``can_fuse``'s WhyNoFuse)
``scope_end``             the stitch scope (a memory-intensive cluster) ends: its        astitch,
                          value is read by a library op or is a graph output             fusionstitching
``global_cut``            without Global stitching (a what-if, or a grid barrier over    astitch
                          more blocks than one wave) the kernel ends before the first
                          stage that reads a Global value
``read_before_computed``  a later stage reads from memory a value a stage of this        astitch
                          kernel would compute its own copy of after it
``stitch_cut``            never-behind's search inside the scope cut it before the next  astitch
                          stage: the cut plan is predicted faster, or the only stitch
                          its byte rule admits
``never_behind``          XLA's kernel kept: stitching these ops would cost more         astitch
``search_illegal``        stitching the next kernel in is illegal (no schedule keeps     fusionstitching
                          every crossing value in registers or shared memory)
``search_choice``         the search's cheapest cover cuts here (the next pattern        fusionstitching
                          prices higher)
``search_limit``          the search did not look further (``max_merge`` or the          fusionstitching
                          ``search_budget``)
========================  =============================================================  ===================
"""
from __future__ import annotations

from dataclasses import asdict, dataclass

from ..errors import AStitchError
from .sealed import Sealable
from .vocabulary import Word


class EndRule(Word):
    """The rule that ended a kernel (the module docstring's table)."""
    ONE_OP_PER_KERNEL = "one_op_per_kernel"
    GRAPH_OUTPUT = "graph_output"
    REDUCE_RESULT = "reduce_result"
    EXPENSIVE_REUSED = "expensive_reused"
    EXPENSIVE_SHARED = "expensive_shared"
    REALIZED = "realized"
    LIBRARY_OPERAND = "library_operand"
    LIBRARY_OP = "library_op"
    NOT_FUSED = "not_fused"
    SCOPE_END = "scope_end"
    GLOBAL_CUT = "global_cut"
    READ_BEFORE_COMPUTED = "read_before_computed"
    STITCH_CUT = "stitch_cut"
    NEVER_BEHIND = "never_behind"
    SEARCH_ILLEGAL = "search_illegal"
    SEARCH_CHOICE = "search_choice"
    SEARCH_LIMIT = "search_limit"

    @classmethod
    def noun(cls) -> str:
        return "kernel-end rule"


#: (strategy title, rule) -> where that strategy states the rule.  A strategy's planner looks its
#: citation up here, so the sources are written once (``fusion.py`` and ``inductor.py`` say more).
SOURCES = {
    ("unfused", EndRule.ONE_OP_PER_KERNEL): "a framework without fusion launches one kernel per op (paper, Section 2)",
    ("XLA", EndRule.GRAPH_OUTPUT): "xla/service/gpu: a fusion root that is an output of the computation",
    ("XLA", EndRule.REDUCE_RESULT): "xla/service/gpu/gpu_fusible.cc IsInputFusibleReduction (a reduce fuses "
                                    "only as a consumer)",
    ("XLA", EndRule.EXPENSIVE_REUSED): "xla/service/gpu/instruction_fusion.cc ShouldFuseInexpensiveChecks "
                                       "(is_expensive && ReusesOperandElements)",
    ("XLA", EndRule.EXPENSIVE_SHARED): "xla/service/instruction_fusion.cc ShouldFuse (FusionWouldDuplicate && "
                                       "is_expensive)",
    ("XLA", EndRule.LIBRARY_OPERAND): "a custom call (cuBLAS, sort) reads its operands from memory",
    ("TVM", EndRule.GRAPH_OUTPUT): "relay FuseOps: an output of the function",
    ("TVM", EndRule.REDUCE_RESULT): "src/relay/transforms/fuse_ops.cc RunFuse: a kCommReduce group is not fused "
                                    "into its post-dominator",
    ("TVM", EndRule.LIBRARY_OPERAND): "fuse_ops.cc: kOpaque ops are not fused; they read their inputs from memory",
    ("unfused", EndRule.GRAPH_OUTPUT): "an output of the graph",
    ("unfused", EndRule.LIBRARY_OPERAND): "a library kernel reads its operands from memory",
    ("Inductor", EndRule.GRAPH_OUTPUT): "torch/_inductor/graph.py: graph outputs are realized",
    ("Inductor", EndRule.REDUCE_RESULT): "torch/_inductor/ir.py: a Reduction is realized into a buffer",
    ("Inductor", EndRule.REALIZED): "torch/_inductor/config.py realize_reads_threshold (4)",
    ("Inductor", EndRule.LIBRARY_OPERAND): "torch/_inductor/lowering.py: extern kernels read realized buffers",
    ("Inductor", EndRule.NOT_FUSED): "torch/_inductor/codegen/simd.py SIMDScheduling.can_fuse, "
                                     "torch/_inductor/choices.py InductorChoices.can_fuse (WhyNoFuse)",
    ("AStitch", EndRule.SCOPE_END): "paper Section 4: a stitch scope is a memory-intensive cluster between "
                                    "compute-intensive (library) ops",
    ("AStitch", EndRule.GLOBAL_CUT): "paper Section 4.2: Global stitching needs a grid barrier with every block "
                                     "resident; without it the kernel ends there",
    ("AStitch", EndRule.READ_BEFORE_COMPUTED): "astitch_sim/planning/strategies/astitch.py _reads_before_computed",
    ("AStitch", EndRule.STITCH_CUT): "astitch_sim/planning/strategies/astitch_cuts.py (the best stitch inside the "
                                     "scope; issue 28, not the paper's)",
    ("AStitch", EndRule.NEVER_BEHIND): "astitch_sim/planning/strategies/never_behind.py (XLA's fusion is in AStitch's "
                                       "search space)",
    ("FusionStitching", EndRule.SCOPE_END): "Zheng et al. 2020: fusion patterns are runs of XLA kernels between "
                                            "library ops",
    ("FusionStitching", EndRule.SEARCH_ILLEGAL): "Zheng et al. 2020: stitching through registers and shared memory "
                                                 "only (no Global scheme, no grid barrier)",
    ("FusionStitching", EndRule.SEARCH_CHOICE): "Zheng et al. 2020: fusion exploration by dynamic programming with "
                                                "a delta cost model (strategies/fs_cost.py)",
    ("FusionStitching", EndRule.SEARCH_LIMIT): "strategies/fs_options.py: max_merge and search_budget bound the "
                                               "exploration",
}


def source_of(title: str, rule) -> str:
    """Where strategy ``title`` states ``rule`` (:data:`SOURCES`), or '' when it has no citation."""
    return SOURCES.get((title, EndRule.parse(rule)), "")


@dataclass
class KernelEnd(Sealable):
    """One reason a kernel ends: the op at the boundary, the rule, in words, and the rule's source."""
    WORDS = {"rule": EndRule}

    node: str
    rule: EndRule
    why: str = ""
    source: str = ""

    def to_dict(self) -> dict:
        return {**asdict(self), "rule": str(self.rule)}

    @classmethod
    def from_dict(cls, d) -> "KernelEnd":
        if not isinstance(d, dict) or "node" not in d or "rule" not in d:
            raise AStitchError(f"a kernel end must be a dict with 'node' and 'rule' (written by plan.to_json()), "
                               f"got {d!r}")
        extra = set(d) - {"node", "rule", "why", "source"}
        if extra:
            raise AStitchError(f"a kernel end has no field {', '.join(sorted(extra))}; its fields: node, rule, why, "
                               "source")
        return cls(d["node"], d["rule"], d.get("why", ""), d.get("source", ""))

    def describe(self) -> str:
        """One line for ``print(plan)`` and the explorer."""
        src = f"  [{self.source}]" if self.source else ""
        return f"{self.node}: {self.rule} -- {self.why}{src}"


def end(title: str, node: str, rule, why: str) -> KernelEnd:
    """A :class:`KernelEnd` with the citation strategy ``title`` gives the rule (:data:`SOURCES`)."""
    return KernelEnd(node, EndRule.parse(rule), why, source_of(title, rule))
