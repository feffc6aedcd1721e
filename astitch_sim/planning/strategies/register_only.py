"""The register-only strategies as policies: what ``unfused``, ``xla`` and ``tvm`` decide differently.

All three split a graph the same way (``fusion.partition_plan``): kernels are built
around *roots*, values that leave their kernel through global memory, and every
other op is fused into the kernels that read it, passing values only through
registers.  A policy holds the few rules in which they differ, each a named field
read by a named method, so the planner has no ``if strategy == ...``:

============================  ===========  ===========================  ==============
rule                          unfused      xla                          tvm
============================  ===========  ===========================  ==============
every op that works is a      yes          no                           no
root (a kernel per op)
an expensive op whose         (a root      yes (paper's pattern 2)      no: recomputed
elements a broadcast reuses   anyway)                                   per element
ends its kernel
a producer several kernels    own kernel   own kernel if expensive,     recomputed
would compute                              else recomputed              in each
multi-output fusion           no           siblings and loop fusions    no
(siblings share a kernel)                  of one shape
which ops are expensive       op table     the XLA version's GPU rules  op table
                                           (``xla_rules.py``)
============================  ===========  ===========================  ==============

``fusion.py``'s docstring says where XLA and TVM state each rule.
"""
from __future__ import annotations

from dataclasses import dataclass, replace
from typing import Optional

from ...passes.analysis import is_expensive
from .common import is_work
from .xla_rules import DEFAULT_RULES, RULES, XlaRules, reused_by_broadcast

#: what happens to a producer that several kernels would compute
RECOMPUTE = "recompute in each kernel"
OWN_KERNEL_IF_EXPENSIVE = "own kernel if expensive, else recompute"
OWN_KERNEL = "own kernel"


@dataclass(frozen=True)
class RegisterOnlyPolicy:
    """The rules one register-only strategy follows (see the module docstring's table)."""

    name: str                      #: the strategy's registry name, first word of the plan's note
    title: str                     #: how the notes name the framework ("XLA", "TVM")
    kernel_label: str              #: kernel names: ``fusion.3:add.7`` or ``op.3:add.7``
    kernel_per_op: bool = False    #: every op that does work is a root
    expensive_broadcast_ends_kernel: bool = False    #: the paper's pattern (2) makes a root
    shared_producer: str = OWN_KERNEL_IF_EXPENSIVE   #: RECOMPUTE, OWN_KERNEL_IF_EXPENSIVE or OWN_KERNEL
    multi_output_fusion: bool = False                 #: siblings (reduces, loop fusions) share a kernel
    #: which XLA version says what is expensive (``xla_rules.py``); None: the op table's cost class (the paper's)
    rules: Optional[XlaRules] = None

    def is_expensive(self, node) -> bool:
        """Expensive under this policy: the XLA version's GPU rules, or the op table's cost class."""
        return self.rules.is_expensive(node) if self.rules is not None else is_expensive(node)

    def ends_kernel_before_reuse(self, node) -> bool:
        """The paper's pattern (2) as this policy sees it: an expensive op whose elements a broadcast reuses."""
        if self.rules is not None:
            return self.rules.refuses_to_fuse_into_reuser(node)
        return is_expensive(node) and bool(reused_by_broadcast(node))

    def is_own_root(self, node) -> bool:
        """Is ``node`` a root under this policy's own rules (beyond the shared ones: outputs,
        reduces, library ops and the values library kernels read from memory)?"""
        return ((self.kernel_per_op and is_work(node))
                or (self.expensive_broadcast_ends_kernel and self.ends_kernel_before_reuse(node)))

    def shared_producer_is_root(self, node) -> bool:
        """Does a (non-free) producer that several kernels would compute get a kernel of its own?"""
        if self.shared_producer == RECOMPUTE:
            return False
        return self.shared_producer == OWN_KERNEL or self.is_expensive(node)


UNFUSED = RegisterOnlyPolicy("unfused", "unfused", "op", kernel_per_op=True, shared_producer=OWN_KERNEL)
XLA = RegisterOnlyPolicy("xla", "XLA", "fusion", expensive_broadcast_ends_kernel=True, multi_output_fusion=True,
                         rules=RULES[DEFAULT_RULES])
TVM = RegisterOnlyPolicy("tvm", "TVM", "fusion", shared_producer=RECOMPUTE)

#: name -> policy, for the registry
POLICIES = {p.name: p for p in (UNFUSED, XLA, TVM)}


def xla_policy(fusion_rules: str = DEFAULT_RULES) -> RegisterOnlyPolicy:
    """The ``xla`` policy following the GPU fusion rules of the XLA version ``fusion_rules`` (``xla_rules.RULES``)."""
    return XLA if fusion_rules == DEFAULT_RULES else replace(XLA, rules=RULES[fusion_rules])
