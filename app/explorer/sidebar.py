"""The inputs, in the sidebar: the graph (catalog, HLO example, your HLO), the GPU, the strategy,
and the what-if switches of the astitch strategy (they apply in every view)."""
from __future__ import annotations

import astitch_sim as asim
import streamlit as st
from astitch_sim.hardware.gpus import GPUS

from . import state
from .compute import Source, hlo_examples

JAX_HOWTO = """\
**Dump your model's text from JAX** (any jitted function):

```python
import jax, jax.numpy as jnp
def f(x):                                   # e.g. a softmax
    return jax.nn.softmax(x, axis=-1)
x = jnp.zeros((64, 1000), jnp.float32)
print(jax.jit(f).lower(x).as_text())        # StableHLO, JAX's default
```

Paste the printed module (`module @jit_f ...`) here, or save it to a `.mlir` file and upload it.
XLA's HLO text (`as_text(dialect="hlo")`, `HloModule ... ENTRY ...`) works too; the page says which
it read. From a whole model, `XLA_FLAGS=--xla_dump_to=/tmp/dump` writes every module XLA compiles;
take a `*.before_optimizations.txt` file.
"""


def _paper_size(name):
    state.set_shape(name, asim.WORKLOADS[name].defaults)


def _explorer_size(name):
    state.set_shape(name, state.explorer_shape(name))


def graph_inputs() -> Source | None:
    ss = st.session_state
    st.sidebar.radio("Graph", state.SOURCES, key="source", horizontal=False)
    if ss["source"] == state.SOURCES[0]:
        names = list(asim.WORKLOADS)
        st.sidebar.selectbox("Workload", names, key="workload",
                             format_func=lambda n: f"{n} (the paper's Figure 7)" if n == "paper_fig7" else n)
        name = ss["workload"]
        entry = asim.WORKLOADS[name]
        st.sidebar.caption(f"{entry.doc} *Catalog shape from {entry.source}.*")
        state.ensure_shape(name)
        cols = st.sidebar.columns(len(entry.defaults))
        for col, k in zip(cols, entry.defaults):
            col.number_input(k, min_value=1, max_value=1 << 26, step=1, key=state.shape_key(name, k))
        shape = state.current_shape(name)
        paper = dict(entry.defaults)
        b1, b2 = st.sidebar.columns(2)
        b1.button("Catalog (paper) size", on_click=_paper_size, args=(name,), disabled=shape == paper,
                  help=" ".join(f"{k}={v}" for k, v in paper.items()), key="btn:paper")
        b2.button("Explorer size", on_click=_explorer_size, args=(name,),
                  disabled=shape == state.explorer_shape(name), key="btn:small",
                  help="a shape that answers within a second")
        return Source("workload", name, tuple(shape.items()))
    if ss["source"] == state.SOURCES[1]:
        examples = list(hlo_examples())
        if ss.get("example") not in examples:
            ss["example"] = "layernorm" if "layernorm" in examples else examples[0]
        st.sidebar.selectbox("HLO example (made with JAX)", examples, key="example")
        st.sidebar.caption("Real HLO modules from `jax.jit(...).lower(...).as_text('hlo')`, "
                           "as in `tests/fixtures/make_fixtures.py`.")
        return Source("example", ss["example"])
    up = st.sidebar.file_uploader("Upload a .mlir / .hlo / .txt file", type=["mlir", "hlo", "txt"], key="hlo_file")
    if up is not None:
        try:
            ss["hlo_text"] = up.getvalue().decode("utf-8")
        except UnicodeDecodeError:
            st.sidebar.error("that file is not UTF-8 text; upload the StableHLO or HLO text module")
    st.sidebar.text_area("…or paste StableHLO or HLO text", key="hlo_text", height=180,
                         placeholder="module @jit_f {\n  func.func public @main(...) { ... }\n}\n\n"
                                     "(or HloModule jit_f ... ENTRY main { ... })")
    with st.sidebar.expander("How to get StableHLO / HLO from JAX"):
        st.markdown(JAX_HOWTO)
    text = ss.get("hlo_text", "").strip()
    if not text:
        return None
    return Source("hlo", "pasted", text=text)


def machine_inputs() -> None:
    st.sidebar.selectbox("GPU preset", list(GPUS), key="gpu",
                         help="SM count, occupancy limits, bandwidth of the cost model (V100: the paper's GPU)")
    st.sidebar.selectbox("Strategy (for Graph, Kernel, Data movement, Timeline, Code)", list(asim.STRATEGIES),
                         key="strategy")


def what_if_inputs() -> None:
    off = state.what_if_options()
    label = "What-if switches (astitch)" + (f" -- {len(off)} changed" if off else "")
    with st.sidebar.expander(label, expanded=bool(off)):
        st.caption("Turn one AStitch decision off and every view shows the changed plan "
                   "(options of `asim.compile`).")
        for n in state.SWITCHES:
            st.checkbox(n.replace("_", " "), key=f"opt:{n}", help=asim.AStitchOptions.HELP[n])
        st.select_slider("max threads per block", options=[32, 64, 128, 256, 512, 1024],
                         key="opt:max_block_threads", help=asim.AStitchOptions.HELP["max_block_threads"])
        st.radio("reduction scheme (every strategy)", state.REDUCE_SCHEMES, key="opt:reduce_scheme", horizontal=True,
                 help="how the threads of a reduction task combine their partials: shuffle (warp shfl_xor, one "
                      "shared-memory step and one block barrier across warps; the default) or tree (the paper's "
                      "shared-memory tree, a block barrier per fold) -- astitch_sim/plan/reduce_scheme.py")
        st.button("Reset to the paper's AStitch", on_click=_reset_switches, disabled=not off, key="btn:reset")
    xla = state.xla_options()
    default = asim.XlaOptions().fusion_rules
    with st.sidebar.expander("Which XLA (xla)" + (f" -- {xla['fusion_rules']}" if xla else ""), expanded=bool(xla)):
        st.selectbox("XLA's GPU fusion rules", list(asim.XlaOptions.CHOICES), key="opt:xla_rules",
                     format_func=lambda n: f"{n} (default)" if n == default else n,
                     help=asim.XlaOptions.HELP["fusion_rules"])
        st.caption(asim.XlaOptions.CHOICES[st.session_state.get("opt:xla_rules", default)])


def _reset_switches():
    for n in state.SWITCHES:
        st.session_state[f"opt:{n}"] = True
    st.session_state["opt:max_block_threads"] = 1024
    st.session_state["opt:reduce_scheme"] = state.REDUCE_SCHEMES[0]
