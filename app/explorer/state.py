"""The page's state: what the user picked, kept in ``st.session_state`` and mirrored in the URL.

Every choice that matters for a shareable link lives in a query parameter, so the
address bar always holds the current view:

``?workload=softmax&shape=rows:64,cols:30000&strategy=astitch&gpu=V100&view=Thread+mapping``
``&off=global_stitching,register_reuse&block=256&reduce=tree`` (what-if switches) ``&xla=tf-2.6`` (which XLA the
xla strategy follows) ``&kernel=0&node=reduce.1``
``?example=layernorm`` (an HLO example).  Pasted or uploaded HLO cannot travel in a URL.

Widgets are created with ``key=`` only; their values are seeded here, before the
first widget is drawn, from the query parameters or the defaults.
"""
from __future__ import annotations

import difflib

import astitch_sim as asim
import streamlit as st
from astitch_sim.hardware.gpus import GPUS

from .compute import hlo_examples

VIEWS = ("Compare", "Graph", "Kernel", "Thread mapping", "Data movement", "Timeline", "Code", "What-if")
SOURCES = ("Catalog workload", "HLO example", "Your HLO")
DEFAULT_WORKLOAD = "paper_fig7"
DEFAULT_GPU = "V100"            # the paper's GPU
#: the explorer's default shapes keep every interaction under a second: at most this many input elements
EXPLORER_ELEMENTS = 1 << 20
#: the on/off decisions (the integer options, a block-size cap and the assumed registers, are not switches)
SWITCHES = [n for n in asim.AStitchOptions.known() if isinstance(getattr(asim.AStitchOptions(), n), bool)]
#: how a reduction task's threads combine (every strategy; astitch_sim/plan/reduce_scheme.py): the default first
REDUCE_SCHEMES = ("shuffle", "tree")
#: what-if options every strategy takes (the others are astitch's own)
EVERY_STRATEGY = ("reduce_scheme",)


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


def parse_shape(text: str) -> tuple[dict, list]:
    """``rows:64,cols:3000`` -> ({"rows": 64, "cols": 3000}, parts that are not ``name:positive integer``)."""
    out, bad = {}, []
    for part in filter(None, (text or "").split(",")):
        k, _, v = part.partition(":")
        try:
            n = int(v)
        except ValueError:
            n = 0
        if k.strip() and n > 0:
            out[k.strip()] = n
        else:
            bad.append(part)
    return out, bad


def did_you_mean(word: str, choices) -> str:
    """`` (did you mean 'softmax'?)`` when ``word`` is close to one of ``choices``, else ``""``."""
    close = difflib.get_close_matches(str(word), [str(c) for c in choices], n=1, cutoff=0.5)
    return f" (did you mean {close[0]!r}?)" if close else ""


def _checked(q, key: str, choices, default, what: str, problems: list):
    """The link's ``key`` when it is one of ``choices``; else ``default``, and a problem naming it."""
    value = q.get(key)
    if value is None:
        return default
    if value in choices:
        return value
    problems.append(f"the link's {key}={value!r} is not {what}{did_you_mean(value, choices)}; "
                    f"showing {default!r}. Known: {', '.join(map(str, choices))}")
    return default


def seed_from_query() -> None:
    """Once per session: fill the widget keys from the URL (or the defaults).  A value the link names that
    does not exist (a workload, a strategy, a GPU, a view, an HLO example, a shape) is replaced by the
    default, and the page says so (``_notice``), with a did-you-mean."""
    ss = st.session_state
    if ss.get("_seeded"):
        return
    q = st.query_params
    ss["_seeded"] = True
    problems: list = []
    ss["source"] = SOURCES[1] if q.get("example") else SOURCES[0]
    ss["workload"] = _checked(q, "workload", list(asim.WORKLOADS), DEFAULT_WORKLOAD, "a catalog workload", problems)
    ensure_shape(ss["workload"])
    shape, bad = parse_shape(q.get("shape", ""))
    dims = asim.WORKLOADS[ss["workload"]].defaults
    for k, v in shape.items():
        if k in dims:
            ss[shape_key(ss["workload"], k)] = v
        else:
            bad.append(f"{k}:{v}")
    if bad:
        problems.append(f"the link's shape has {', '.join(repr(b) for b in bad)}, which {ss['workload']} does not "
                        f"take (its dims: {', '.join(f'{k}:<positive integer>' for k in dims)}); those parts are "
                        "ignored")
    ss["example"] = _checked(q, "example", list(hlo_examples()), "layernorm", "an HLO example", problems)
    ss["strategy"] = _checked(q, "strategy", list(asim.STRATEGIES), "astitch", "a strategy", problems)
    ss["gpu"] = _checked(q, "gpu", list(GPUS), DEFAULT_GPU, "a GPU preset", problems)
    ss["view"] = _checked(q, "view", list(VIEWS), VIEWS[0], "a view", problems)
    off = set(filter(None, q.get("off", "").split(",")))
    for n in sorted(off - set(SWITCHES)):
        problems.append(f"the link switches off {n!r}, which is not a what-if switch{did_you_mean(n, SWITCHES)}; "
                        "ignored")
    for n in SWITCHES:
        ss[f"opt:{n}"] = n not in off
    ss["opt:reduce_scheme"] = _checked(q, "reduce", list(REDUCE_SCHEMES), REDUCE_SCHEMES[0],
                                       "a reduction scheme", problems)
    block = q.get("block", "1024")
    ss["opt:max_block_threads"] = int(block) if block in ("32", "64", "128", "256", "512", "1024") else 1024
    ss["opt:xla_rules"] = _checked(q, "xla", list(asim.XlaOptions.CHOICES), asim.XlaOptions().fusion_rules,
                                   "an XLA rule set", problems)
    ss["kernel"] = int(q.get("kernel", "0")) if q.get("kernel", "0").isdigit() else 0
    ss["node"] = q.get("node", "")
    ss.setdefault("hlo_text", "")
    if problems:
        ss["_notice"] = problems


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
    if ss.get("opt:reduce_scheme", REDUCE_SCHEMES[0]) != REDUCE_SCHEMES[0]:
        opts["reduce_scheme"] = ss["opt:reduce_scheme"]
    return opts


def xla_options() -> dict:
    """The xla strategy's option (which XLA version's fusion rules), when not the default: keywords for asim.compile."""
    rules = st.session_state.get("opt:xla_rules", asim.XlaOptions().fusion_rules)
    return asim.XlaOptions(fusion_rules=rules).changed()


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
    if xla_options():
        q["xla"] = xla_options()["fusion_rules"]
    if "reduce_scheme" in opts:
        q["reduce"] = opts["reduce_scheme"]
    if ss.get("kernel"):
        q["kernel"] = str(ss["kernel"])
    if ss.get("node"):
        q["node"] = ss["node"]
    if dict(st.query_params) != q:
        st.query_params.from_dict(q)
