"""Which XLA the ``xla`` strategy is: the GPU fusion rules of one named XLA version, as a table.

Two questions decide most of XLA's kernel boundaries between reductions (``strategies/fusion.py``
applies the answers):

1. **Is a producer expensive?**  XLA's generic ``InstructionFusion::IsExpensive``
   (``xla/service/instruction_fusion.cc``) lists expensive opcodes: divide, exp, log, power, sqrt,
   rsqrt, tanh, logistic, cbrt, erf, atan2...; sine, cosine, tan, abs and sign are cheap on real
   types; an integer divide or remainder by a constant scalar is cheap (multiplies and shifts).
   :func:`astitch_sim.passes.analysis.is_expensive` is that function over our op table.  The GPU backend
   overrides it: ``GpuInstructionFusion::IsExpensive`` (``xla/service/gpu/instruction_fusion.cc``,
   ``xla/service/gpu/transforms/`` from 2024-08)
   calls some float math *cheap* on f32 and f16 because the GPU has an instruction or a short
   sequence for it.  Which ops is what changed over the years, so it is a column of :data:`RULES`.
   bf16 and f64 keep the generic answer (the override tests ``ElementIsF32OrF16``).
2. **Does the consumer reuse the producer's elements?**  ``ShouldFuseInexpensiveChecks`` refuses to
   fuse an expensive producer into a consumer that ``ReusesOperandElements`` -- a broadcast (for a
   fusion: a broadcast anywhere between the fused parameter and the root,
   ``FusionReusesParamElements``).  Fused, the producer would be evaluated once per element of the
   broadcast's result instead of once per element of its own.  So the expensive producer ends its
   kernel and its consumer reads it from memory (the paper's pattern 2).  A *cheap* producer is fused
   and recomputed per element: layer norm's ``rsqrt(var + eps)`` runs once per element of the row, as
   in XLA's own kernels.  :func:`reused_by_broadcast` finds the broadcast through what would be fused
   between: views, converts, cheap elementwise ops (``rsqrt(var + eps) * w`` then broadcast: the rsqrt is
   reused) and broadcasts that add no element (``broadcast_in_dim`` f32[128,1] -> f32[128,1], common in
   JAX's HLO; XLA's algebraic simplifier turns them into the operand before fusion runs).

3. **How are a row reduction's rows laid on blocks?**  Not a fusion rule but XLA's reduction emitter, and
   it too changed between the two versions (column ``packs_rows``): the paper's XLA gives every row a block
   of its own (``num_threads_y = is_row_reduction ? 1 : kWarpSize`` in TF 2.x's
   ``ComputeReductionCodegenInfo``; <750000,32> is 750000 blocks of 32 threads, the paper's DIEN example);
   today's packs short rows into 256-thread blocks (``kThreadsPerBlockTarget`` in
   ``xla/service/gpu/fusions/reduction.cc``; ``common.xla_packed_rows``).  On an H200 the paper-era mapping of
   the DIEN softmax measured 957 us against ``jax.jit``'s 56 us (``benchmarks/results/2026-11-27-h200``).

Where XLA states it, in the two versions modelled (the ``xla`` strategy's option ``fusion_rules``):

========================  =====================================================  ==========================
rule set                  cheap on f32/f16 on the GPU (``GpuInstructionFusion``  source read
                          ``::IsExpensive``)
========================  =====================================================  ==========================
``openxla-2024``          divide, rsqrt, exp, sqrt                               openxla/xla 7396266b^
(default)                 ("Some floating-point math ops are cheap on the        (2024-10-29), file
                          GPU"; exp since 5946f66b, 2021-08-30: "Make kExp not   unchanged since dc65ec0c
                          expensive"; sqrt since dc65ec0c, 2022-10-28: "kSqrt    (2022-10-28)
                          for F32 and F16 lowers to sqrt.approx.f32")
``tf-2.6`` (the paper's   divide, rsqrt ("Unlike other intrinsics that can be    openxla/xla 32afd3d1
era)                      expanded into many instructions, Div and Rsqrt are     (2021-07-14), the history
                          lowered into single hardware instructions")            TensorFlow's XLA shared;
                                                                                 the same rule in
                                                                                 DeepRec-AI/DeepRec
                                                                                 (TF 1.15) 14f9068b
========================  =====================================================  ==========================

``openxla-2024`` is the last rule-based GPU fusion XLA had: ``GpuInstructionFusion`` was XLA's default
until priority fusion became the default (4e1ee52b, 2024-02-15) and was deleted on 2024-10-29
(7396266b).  ``GpuPriorityFusion`` kept the same ``IsExpensive`` (divide, sqrt, rsqrt, exp cheap on
f32/f16) and, until e0a9a877 (2023-10-13), the same expensive-and-reused check; since then it fuses a
producer into all its consumers when its GPU performance model predicts a gain.  That cost model is
*not* modelled here: on the graphs of this project it too fuses the cheap divide and rsqrt of a
normalisation (recomputing them costs less than a launch), which is what these rules give.

``tf-2.6`` is the rule from before TensorFlow 1.15 until 2021-08-30: the XLA of TensorFlow 1.15 to 2.6
(2.6.0 was released in August 2021; Alibaba's TF 1.15 fork DeepRec has the same rule), the era of the
AStitch paper (ASPLOS'22, written in 2021).  The generic ``IsExpensive`` list is the same for every op of our table in
both versions, except ops that had no HLO opcode in 2021 (tan, erf, round-nearest-even, which JAX
then expanded into other ops); they are classified as in 2024.

Not modelled (in either version): reduction epilogue fusion (an elementwise op of a reduce's result
shape fused into the reduce's kernel), the Triton normalisation and softmax fusions of recent XLA,
``FusionMerger``'s merges of whole fusions, and the code-duplication limit
(``CodeDuplicationTooHigh``).
"""
from __future__ import annotations

from dataclasses import dataclass

from ...plan import notes
from ...passes.analysis import broadcasts_reached, is_expensive as generic_is_expensive

#: the element types XLA's GPU override calls some float math cheap on (``ElementIsF32OrF16``)
F32_OR_F16 = ("f32", "f16")


@dataclass(frozen=True)
class XlaRules:
    """One XLA version's answer to "is this producer expensive on the GPU?" (the module docstring)."""

    name: str                 #: what ``fusion_rules=`` takes
    title: str                #: one line for notes and help: which XLA, when
    gpu_cheap: tuple          #: ops cheap on f32/f16 (``GpuInstructionFusion::IsExpensive``)
    source: str               #: the XLA commit and file read
    #: row reductions pack short rows into 256-thread blocks (``common.xla_packed_rows``); False: one block per
    #: row, as the paper describes the XLA it measured
    packs_rows: bool = True

    def is_expensive(self, node) -> bool:
        """XLA's ``GpuInstructionFusion::IsExpensive`` under these rules: the generic
        ``InstructionFusion::IsExpensive`` (``analysis.is_expensive``), except ``gpu_cheap`` ops on f32/f16."""
        if node.op in self.gpu_cheap and node.dtype in F32_OR_F16:
            return False
        return generic_is_expensive(node)

    def refuses_to_fuse_into_reuser(self, node) -> bool:
        """``ShouldFuseInexpensiveChecks``: an expensive producer is not fused into a consumer that reuses
        its elements, so it ends its kernel (the paper's pattern 2)."""
        return self.is_expensive(node) and bool(reused_by_broadcast(node, self.is_expensive))


#: the rule sets, by name (the module docstring's table)
RULES = {r.name: r for r in (
    XlaRules("openxla-2024", "OpenXLA's GPU fusion rules of 2022-10 to 2024-10 (GpuInstructionFusion): "
             "f32/f16 divide, rsqrt, exp and sqrt are cheap; short rows of a row reduction share 256-thread blocks",
             ("divide", "rsqrt", "exponential", "sqrt"),
             "openxla/xla 7396266b^ xla/service/gpu/transforms/instruction_fusion.cc GpuInstructionFusion::IsExpensive; "
             "row reductions: xla/service/gpu/fusions/reduction.cc kThreadsPerBlockTarget"),
    XlaRules("tf-2.6", "the paper-era XLA (TensorFlow 1.15 to 2.6, until 2021-08-30): only f32/f16 divide and "
             "rsqrt are cheap; exp and sqrt are expensive; a row reduction gives each row a block of its own",
             ("divide", "rsqrt"),
             "openxla/xla 32afd3d1 (tensorflow/compiler/xla) xla/service/gpu/instruction_fusion.cc "
             "GpuInstructionFusion::IsExpensive; row reductions one block per row",
             packs_rows=False),
)}
#: the rules the ``xla`` strategy follows unless ``fusion_rules=`` names others
DEFAULT_RULES = "openxla-2024"
#: the start of the plan note naming the rules a plan followed (``print(plan)`` shows it)
NOTE_PREFIX = notes.XLA_RULES


def reused_by_broadcast(node, is_expensive=generic_is_expensive) -> list:
    """The broadcasts that reuse ``node``'s elements in the kernel it would be fused into (XLA's
    ``ReusesOperandElements``; for a fusion consumer ``FusionReusesParamElements``, which follows the fused
    parameter through the fusion to its root).  The walk goes through what XLA would fuse with it: views
    (reshapes, bitcasts, transposes, slices...), converts, copies, broadcasts that add no element (XLA's
    simplifier removes those before fusion) and cheap elementwise ops.  It stops at an expensive op (that op
    is refused from a reusing consumer itself, so ``node`` stays in its kernel without reuse), a reduce (it
    reads each element once) and library ops."""
    return broadcasts_reached(node, lambda u: u.opdef.is_view or u.op in ("convert", "copy")
                              or (u.kind == "elementwise" and not is_expensive(u)))
