"""astitch-sim explorer: see how each strategy's plan moves data (``streamlit run app/streamlit_app.py``,
or ``astitch explore``).  Opens on the paper's Figure 7 graph.

Eight views of the same Plan (Compare, Graph, Kernel, Thread mapping, Data movement,
Timeline, Code, What-if); the sidebar picks the graph, GPU, strategy and the what-if
switches; the URL holds the whole state, so a link reproduces the view.  Bad input
(malformed HLO, an unsupported op, a shape the GPU cannot run) shows the
AStitchError's message, never a traceback.
"""
from __future__ import annotations

import streamlit as st

import astitch_sim as asim
# Streamlit runs this file with its own folder on sys.path: ``explorer`` is the package beside it
from explorer import compute, sidebar, state, style
from explorer.views import Context, code, compare, graph, kernel, mapping, movement, timeline, whatif

RENDER = {"Compare": compare.render, "Graph": graph.render, "Kernel": kernel.render,
          "Thread mapping": mapping.render, "Data movement": movement.render, "Timeline": timeline.render,
          "Code": code.render, "What-if": whatif.render}


def show_error(e: Exception) -> None:
    """An AStitchError's message as the page says it; anything else named plainly (no traceback)."""
    if isinstance(e, asim.AStitchError):
        st.error(f"**{type(e).__name__}:** {e}")
    else:
        st.error(f"**Unexpected {type(e).__name__}:** {e}. This is a bug in astitch-sim: please report it "
                 "with the link in your address bar.")


#: graph.source (the text an importer read) -> how the page names it
DIALECTS = {"hlo": "XLA HLO", "stablehlo": "StableHLO", "mhlo": "MHLO"}


def main() -> None:
    st.set_page_config(page_title="astitch-sim explorer", page_icon="🧵", layout="wide")
    st.markdown(style.CSS, unsafe_allow_html=True)
    state.seed_from_query()
    st.sidebar.title("astitch-sim")
    st.sidebar.caption("The AStitch compiler (ASPLOS'22) on a simulated GPU. No GPU needed.")
    source = sidebar.graph_inputs()
    sidebar.machine_inputs()
    sidebar.what_if_inputs()
    st.radio("View", state.VIEWS, key="view", horizontal=True, label_visibility="collapsed")
    for problem in st.session_state.pop("_notice", []):      # what the link named that does not exist
        st.error(problem)
    if source is None:
        st.info("Paste JAX's text (StableHLO, or HLO) or upload a `.mlir`/`.hlo` file in the sidebar (see *How to "
                "get StableHLO / HLO from JAX*), or pick a catalog workload or an HLO example.")
        return
    state.write_query(source)
    try:
        g = compute.graph_of(source)
    except Exception as e:          # AStitchError for bad HLO; never a traceback in the page
        show_error(e)
        return
    ctx = Context(source, g, st.session_state["gpu"], st.session_state["strategy"], state.what_if_options(),
                  state.xla_options())
    sig = g.signature()
    read = f" (read as {DIALECTS.get(g.source, g.source)} text)" if g.source else ""
    st.markdown(f"**{ctx.source.label}**{read} on **{ctx.gpu}** &nbsp; "
                f"`{sig if len(sig) < 150 else sig[:147] + '...'}`")
    if ctx.options:
        st.caption("what-if switches active (reduce_scheme: every strategy; the others: astitch): "
                   + ", ".join(f"{k}={v}" for k, v in ctx.options.items()))
    if ctx.xla_options:
        st.caption("xla follows " + ", ".join(f"{k}={v}" for k, v in ctx.xla_options.items()) + " (not today's XLA)")
    try:
        RENDER[st.session_state["view"]](ctx)
    except Exception as e:
        if type(e).__name__ in ("StopException", "RerunException"):
            raise
        show_error(e)


main()
