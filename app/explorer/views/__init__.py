"""The eight views; each module has ``render(ctx)``.  :class:`Context` is what they share:
the graph's source, the GPU, the strategy, the what-if options, and cached access to plans and runs."""
from __future__ import annotations

from dataclasses import dataclass, field

import astitch_sim as asim
import streamlit as st

from .. import compute


@dataclass
class Context:
    source: compute.Source
    graph: object
    gpu: str
    strategy: str
    options: dict = field(default_factory=dict)

    def opts_for(self, strategy: str) -> tuple:
        return tuple(sorted(self.options.items())) if strategy == "astitch" else ()

    def plan(self, strategy: str | None = None, options: dict | None = None):
        s = strategy or self.strategy
        opts = tuple(sorted(options.items())) if options is not None else self.opts_for(s)
        return compute.plan_of(self.source, s, self.gpu, opts)

    def variants(self, strategies=None) -> list:
        return [(s, s, dict(self.opts_for(s))) for s in (strategies or asim.STRATEGIES)]

    def runs(self, what: str, strategies=None):
        return compute.runs(self.source, self.gpu, self.variants(strategies), what)

    def label(self, strategy: str) -> str:
        return f"{strategy} (what-if)" if strategy == "astitch" and self.options else strategy


def kernel_picker(ctx: Context, plan, key: str = "kernel") -> int:
    """A kernel selector shared by the views (its choice goes in the URL)."""
    n = len(plan.kernels)
    if st.session_state.get("kernel", 0) >= n:
        st.session_state["kernel"] = 0
    st.selectbox("Kernel", list(range(n)), key="kernel",
                 format_func=lambda i: f"kernel {i}: {plan.kernels[i].name} ({plan.kernels[i].kind})")
    return st.session_state["kernel"]


def node_picker(plan, label: str = "Highlight a node (graph, plan and source together)") -> str | None:
    names = [""] + [n.name for n in plan.graph if not (n.op == "constant" and n.rank == 0)]
    if st.session_state.get("node") not in names:
        st.session_state["node"] = ""
    st.selectbox(label, names, key="node", format_func=lambda n: n or "(none)")
    return st.session_state["node"] or None
