"""The eight views; each module has ``render(ctx)``.  :class:`Context` is what they share:
the graph's source, the GPU, the strategy, the what-if options, and cached access to plans and runs."""
from __future__ import annotations

import hashlib
from dataclasses import dataclass, field

import astitch_sim as asim
import streamlit as st

from .. import compute, state


@dataclass
class Context:
    source: compute.Source
    graph: object
    gpu: str
    strategy: str
    options: dict = field(default_factory=dict)
    xla_options: dict = field(default_factory=dict)     #: which XLA the xla strategy follows, when not the default

    def opts_for(self, strategy: str) -> tuple:
        """The what-if options ``strategy`` is compiled with: all of them for astitch, the reduction scheme
        (which every strategy takes) for the others, and for xla the XLA version it follows."""
        keep = dict(self.options) if strategy == "astitch" else {k: v for k, v in self.options.items()
                                                                  if k in state.EVERY_STRATEGY}
        if strategy == "xla":
            keep.update(self.xla_options)
        return tuple(sorted(keep.items()))

    def plan(self, strategy: str | None = None, options: dict | None = None):
        s = strategy or self.strategy
        opts = tuple(sorted(options.items())) if options is not None else self.opts_for(s)
        return compute.plan_of(self.source, s, self.gpu, opts)

    def variants(self, strategies=None) -> list:
        return [(s, s, dict(self.opts_for(s))) for s in (strategies or asim.STRATEGIES)]

    def runs(self, what: str, strategies=None):
        return compute.runs(self.source, self.gpu, self.variants(strategies), what)

    def label(self, strategy: str) -> str:
        if strategy == "xla" and self.xla_options:
            what_if = " (what-if)" if any(k in state.EVERY_STRATEGY for k in self.options) else ""
            return f"xla ({self.xla_options['fusion_rules']}){what_if}"
        return f"{strategy} (what-if)" if self.opts_for(strategy) else strategy


def plan_choice(label: str, options, labels, state_key: str, *, default=None, where=None):
    """A selectbox over the parts of a plan (its kernels, its stages), whose labels change with the plan.

    The browser keeps the label a selectbox shows: after a strategy or workload switch gives the same
    widget other labels, it shows and sends back the *previous* plan's label, which names nothing in this
    plan (Streamlit versions that return such a label as the value then fail on ``'>=' not supported
    between 'str' and 'int'``).  So the widget's key is derived from its labels, and a plan with other
    parts gets a fresh widget; the choice itself lives in ``state_key`` (an option, an index or a stage),
    kept across plans where it still exists, else ``default`` (else the first option)."""
    options, labels = list(options), list(labels)
    current = st.session_state.get(state_key, default)
    if current not in options:
        current = default if default in options else options[0]
    digest = hashlib.sha1("\x1f".join(labels).encode()).hexdigest()[:12]
    i = (where or st).selectbox(label, range(len(options)), index=options.index(current),
                                key=f"{state_key}@{digest}", format_func=labels.__getitem__)
    st.session_state[state_key] = options[i]
    return options[i]


def kernel_picker(ctx: Context, plan) -> int:
    """A kernel selector shared by the views (its choice, an index, goes in the URL as ``kernel``)."""
    labels = [f"kernel {i}: {k.name} ({k.kind})" for i, k in enumerate(plan.kernels)]
    return plan_choice("Kernel", range(len(labels)), labels, "kernel", default=0)


def node_picker(plan, label: str = "Highlight a node (graph, plan and source together)") -> str | None:
    names = [""] + [n.name for n in plan.graph if not (n.op == "constant" and n.rank == 0)]
    if st.session_state.get("node") not in names:
        st.session_state["node"] = ""
    st.selectbox(label, names, key="node", format_func=lambda n: n or "(none)")
    return st.session_state["node"] or None
