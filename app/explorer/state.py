"""The page's state: what the user picked, kept in ``st.session_state`` and mirrored in the URL.

Every choice that matters for a shareable link lives in a query parameter, so the
address bar always holds the current view:

``?workload=softmax&shape=rows:64,cols:30000&strategy=astitch&gpu=V100&view=Thread+mapping``
``&off=global_stitching,register_reuse&block=256`` (what-if switches) ``&kernel=0&node=reduce.1``
``?example=layernorm`` (an HLO example).  Pasted or uploaded HLO cannot travel in a URL.

Widgets are created with ``key=`` only; their values are seeded here, before the
first widget is drawn, from the query parameters or the defaults.
"""
from __future__ import annotations

import astitch_sim as asim
import streamlit as st
from astitch_sim.hardware import GPUS

VIEWS = ("Compare", "Graph", "Kernel", "Thread mapping", "Data movement", "Timeline", "Code", "What-if")
SOURCES = ("Catalog workload", "HLO example", "Your HLO")
DEFAULT_WORKLOAD = "paper_fig7"
DEFAULT_GPU = "V100"            # the paper's GPU
#: the explorer's default shapes keep every interaction under a second: at most this many input elements
EXPLORER_ELEMENTS = 1 << 20
#: the on/off decisions (the integer options, a block-size cap and the assumed registers, are not switches)
SWITCHES = [n for n in asim.AStitchOptions.known() if isinstance(getattr(asim.AStitchOptions(), n), bool)]


def explorer_shape(name: str) -> dict:
    """The workload's catalog shape, halved along its first dimension until it is explorer-sized."""
    shape = dict(asim.WORKLOADS[name].defaults)
    keys = list(shape)
    while _elements(name, shape) > EXPLORER_ELEMENTS and shape[keys[0]] > 1:
        shape[keys[0]] = max(1, shape[keys[0]] // 2)
    return shape


def _elements(name: str, shape: dict) -> int:
    g = asim.workload(name, **shape)
    total = 0
    for p in g.inputs:
        n = 1
        for d in p.shape:
            n *= d
        total += n
    return total


def shape_key(workload: str, dim: str) -> str:
    return f"shape:{workload}:{dim}"


def parse_shape(text: str) -> dict:
    out = {}
    for part in filter(None, (text or "").split(",")):
        k, _, v = part.partition(":")
        try:
            out[k.strip()] = int(v)
        except ValueError:
            continue
    return out


def seed_from_query() -> None:
    """Once per session: fill the widget keys from the URL (or the defaults)."""
    ss = st.session_state
    if ss.get("_seeded"):
        return
    q = st.query_params
    ss["_seeded"] = True
    ss["source"] = SOURCES[1] if q.get("example") else SOURCES[0]
    name = q.get("workload", DEFAULT_WORKLOAD)
    ss["workload"] = name if name in asim.WORKLOADS else DEFAULT_WORKLOAD
    if name not in asim.WORKLOADS:
        ss["_notice"] = f"the link names workload {name!r}, which the catalog does not have; showing {DEFAULT_WORKLOAD}"
    ensure_shape(ss["workload"])
    for k, v in parse_shape(q.get("shape", "")).items():
        if k in asim.WORKLOADS[ss["workload"]].defaults and v > 0:
            ss[shape_key(ss["workload"], k)] = v
    ss["example"] = q.get("example", "layernorm")
    ss["strategy"] = q.get("strategy") if q.get("strategy") in asim.STRATEGIES else "astitch"
    ss["gpu"] = q.get("gpu") if q.get("gpu") in GPUS else DEFAULT_GPU
    ss["view"] = q.get("view") if q.get("view") in VIEWS else VIEWS[0]
    off = set(filter(None, q.get("off", "").split(",")))
    for n in SWITCHES:
        ss[f"opt:{n}"] = n not in off
    block = q.get("block", "1024")
    ss["opt:max_block_threads"] = int(block) if block in ("32", "64", "128", "256", "512", "1024") else 1024
    ss["kernel"] = int(q.get("kernel", "0")) if q.get("kernel", "0").isdigit() else 0
    ss["node"] = q.get("node", "")
    ss.setdefault("hlo_text", "")


def ensure_shape(name: str) -> None:
    ss = st.session_state
    for k, v in explorer_shape(name).items():
        ss.setdefault(shape_key(name, k), v)


def current_shape(name: str) -> dict:
    ensure_shape(name)
    return {k: int(st.session_state[shape_key(name, k)]) for k in asim.WORKLOADS[name].defaults}


def set_shape(name: str, shape: dict) -> None:
    """Callback-safe: switch to ``name`` at ``shape`` (used by the one-click shape buttons)."""
    ss = st.session_state
    ss["source"] = SOURCES[0]
    ss["workload"] = name
    for k, v in shape.items():
        ss[shape_key(name, k)] = int(v)


def what_if_options() -> dict:
    """The what-if switches that are off (and a lowered block cap): keywords for asim.compile."""
    ss = st.session_state
    opts = {n: False for n in SWITCHES if not ss.get(f"opt:{n}", True)}
    if ss.get("opt:max_block_threads", 1024) != 1024:
        opts["max_block_threads"] = int(ss["opt:max_block_threads"])
    return opts


def write_query(source) -> None:
    """Mirror the state in the URL (only what a link can carry)."""
    ss = st.session_state
    q = {}
    if source.kind == "workload":
        q["workload"] = source.name
        q["shape"] = ",".join(f"{k}:{v}" for k, v in source.shape)
    elif source.kind == "example":
        q["example"] = source.name
    q.update(strategy=ss["strategy"], gpu=ss["gpu"], view=ss["view"])
    opts = what_if_options()
    off = [n for n in SWITCHES if n in opts]
    if off:
        q["off"] = ",".join(off)
    if "max_block_threads" in opts:
        q["block"] = str(opts["max_block_threads"])
    if ss.get("kernel"):
        q["kernel"] = str(ss["kernel"])
    if ss.get("node"):
        q["node"] = ss["node"]
    if dict(st.query_params) != q:
        st.query_params.from_dict(q)
