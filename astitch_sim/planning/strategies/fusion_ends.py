"""Why a register-only kernel ends: each root of ``fusion.partition_plan``, with the rule that made it one.

``fusion.py`` calls these where it decides a root (``_initial_roots``, ``_settle_roots``), so
the reason recorded is the test that fired, not a guess made afterwards.  A root's value leaves
its kernel through global memory: that is where the kernel ends (``astitch_sim/plan/kernel_end.py``).
"""
from __future__ import annotations

from ...passes.analysis import is_boundary
from ...plan.kernel_end import EndRule, KernelEnd, end
from .xla_rules import reused_by_broadcast


def _others(names) -> str:
    names = list(dict.fromkeys(names))
    return ", ".join(names[:4]) + (f" and {len(names) - 4} more" if len(names) > 4 else "")


def graph_output(policy, node) -> KernelEnd:
    return end(policy.title, node.name, EndRule.GRAPH_OUTPUT,
               f"{node.name} is a graph output: its kernel writes it to global memory")


def reduce_result(policy, node) -> KernelEnd:
    readers = [u.name for u in node.users]
    read = f" (read by {_others(readers)})" if readers else ""
    return end(policy.title, node.name, EndRule.REDUCE_RESULT,
               f"{node.name} is a reduce{read}: {policy.title} ends the kernel at a reduce's result, which "
               "leaves through global memory")


def library_operand(policy, node) -> KernelEnd:
    libs = [u.name for u in node.users if is_boundary(u)]
    return end(policy.title, node.name, EndRule.LIBRARY_OPERAND,
               f"{node.name} is read from global memory by the library kernel of {_others(libs)}")


def one_op(policy, node) -> KernelEnd:
    return end(policy.title, node.name, EndRule.ONE_OP_PER_KERNEL,
               f"{node.name} ({node.op}) does work: {policy.title} runs every such op as a kernel of its own")


def expensive_reused(policy, node) -> KernelEnd:
    """The paper's pattern (2) as XLA applies it: how often fusing would evaluate ``node`` per value."""
    bcasts = reused_by_broadcast(node, policy.is_expensive)      # the walk ends_kernel_before_reuse makes
    times = max((b.size // max(node.size, 1) for b in bcasts), default=1)
    rules = f" ({policy.rules.name} rules)" if policy.rules is not None else ""
    return end(policy.title, node.name, EndRule.EXPENSIVE_REUSED,
               f"{node.name} ({node.op}) is expensive{rules} and {_others(b.name for b in bcasts)} reuses its "
               f"elements: fused, it would be recomputed {times} times per value, so {policy.title} ends the "
               "kernel here")


def shared_root(policy, node, kernels: int) -> KernelEnd:
    """A producer several kernels would compute that the policy gives a kernel of its own."""
    rule = getattr(policy, "SHARED_ROOT_RULE", EndRule.EXPENSIVE_SHARED)
    if rule is EndRule.REALIZED:
        why = (f"{node.name} is read by {len(node.users)} consumers (more than realize_reads_threshold): "
               f"{policy.title} stores it once instead of inlining it into each")
    else:
        why = (f"{node.name} ({node.op}) is expensive and {kernels} kernels read it: {policy.title} gives it a "
               "kernel of its own rather than recompute it in each")
    return end(policy.title, node.name, rule, why)
