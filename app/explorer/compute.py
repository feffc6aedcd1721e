"""Compile, simulate and trace -- cached, so moving between views costs nothing.

Every result is keyed by the graph's *source* (a catalog workload and shape, or the
HLO text), the strategy, the GPU and the what-if options.  Simulation summaries keep
the counters, the timeline and the error against the reference, not the output
arrays, so a paper-size shape does not hold gigabytes in the cache.

Big shapes: simulating all strategies of a paper-size graph takes seconds to
minutes on a laptop.  The views that need the SIMT model ask first (a button that
says how big the job is) and then show a progress bar step by step; views that
need only the compiler (Graph, Kernel, Thread mapping, Code) are instant at any size.
"""
from __future__ import annotations

import glob
import os
import time
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import streamlit as st

import astitch_sim as asim
from astitch_sim.frontends.workloads import workload_inputs
from astitch_sim.hardware.measured import plan_signature

REPO = Path(__file__).resolve().parents[2]
HLO_DIRS = [REPO / "tests" / "fixtures" / "hlo"]
#: above this many input elements, the SIMT model runs only when asked (with progress)
HEAVY_ELEMENTS = 1 << 22
#: the step-through traces every thread: kernels up to this many domain elements
TRACE_ELEMENTS = 1 << 13


@dataclass(frozen=True)
class Source:
    """Where the graph comes from: ``workload`` (name + shape), ``example`` (an HLO file) or ``hlo`` (text)."""
    kind: str
    name: str
    shape: tuple = ()
    text: str = ""

    @property
    def label(self) -> str:
        if self.kind == "workload":
            return f"{self.name} " + " ".join(f"{k}={v}" for k, v in self.shape)
        return f"HLO {self.name}"


@dataclass
class Run:
    """What one simulation left behind (no output arrays)."""
    strategy: str
    plan: object
    stats: object
    timeline: object
    max_error: float
    seconds: float


def hlo_examples() -> dict:
    """name -> path of every HLO example shipped in the repository (JAX-made fixtures)."""
    out = {}
    for d in HLO_DIRS:
        for p in sorted(glob.glob(str(d / "*.hlo"))):
            out.setdefault(Path(p).stem, p)
    return out


@st.cache_resource(max_entries=64, show_spinner=False)
def graph_of(source: Source):
    if source.kind == "workload":
        return asim.workload(source.name, **dict(source.shape))
    if source.kind == "example":
        path = hlo_examples().get(source.name)
        if path is None:
            raise asim.AStitchError(f"no HLO example named {source.name!r}; the examples are: "
                                    f"{', '.join(hlo_examples())}")
        return asim.from_hlo(Path(path).read_text())
    return asim.from_hlo(source.text)


def input_elements(graph) -> int:
    return int(sum(int(np.prod(p.shape)) for p in graph.inputs))


@st.cache_resource(max_entries=256, show_spinner=False)
def plan_of(source: Source, strategy: str, gpu: str, options: tuple = ()):
    return asim.compile(graph_of(source), strategy=strategy, gpu=gpu, **dict(options))


@st.cache_resource(max_entries=4, show_spinner=False)
def inputs_and_reference(source: Source):
    g = graph_of(source)
    inputs = workload_inputs(g) if source.kind == "workload" else asim.random_inputs(g)
    return inputs, asim.reference(g, inputs)


def max_error(outs, ref) -> float:
    """Largest |simulated - reference| / (1 + |reference|) over all outputs (inf if finiteness differs)."""
    err = 0.0
    for o, r in zip(outs, ref):
        a, b = np.asarray(o, dtype=np.float64), np.asarray(r, dtype=np.float64)
        if (np.isfinite(a) != np.isfinite(b)).any():
            return float("inf")
        both = np.isfinite(a) & np.isfinite(b)
        if both.any():
            err = max(err, float(np.max(np.abs(a[both] - b[both]) / (1 + np.abs(b[both])))))
    return err


@st.cache_resource(max_entries=128, show_spinner=False)
def run_of(source: Source, strategy: str, gpu: str, options: tuple = ()) -> Run:
    plan = plan_of(source, strategy, gpu, options)
    inputs, ref = inputs_and_reference(source)
    t = time.perf_counter()
    res = asim.simulate(plan, inputs)
    return Run(strategy, plan, res.stats, res.timeline, max_error(res.outputs, ref), time.perf_counter() - t)


@st.cache_resource(max_entries=8, show_spinner=False)
def trace_of(source: Source, strategy: str, gpu: str, options: tuple = ()):
    plan = plan_of(source, strategy, gpu, options)
    inputs, _ = inputs_and_reference(source)
    return asim.simulate(plan, inputs, trace=True)


def traceable(plan) -> bool:
    return all(s.mapping.size <= TRACE_ELEMENTS for k in plan.kernels for s in k.stages)


def simulated(key) -> bool:
    return key in st.session_state.setdefault("_simulated", set())


def runs(source: Source, gpu: str, variants: list, what: str) -> dict | None:
    """Simulate ``variants`` (``(label, strategy, options)``) with a progress bar.

    Returns ``{label: Run}``, or None when the graph is big and the user has not asked
    yet (a button is shown instead, so the page never blocks without saying why)."""
    g = graph_of(source)
    key = (source, gpu, tuple((label, s, tuple(sorted(o.items()))) for label, s, o in variants))
    elements = input_elements(g)
    if elements > HEAVY_ELEMENTS and not simulated(key):
        st.info(f"**{what}** needs the SIMT model to run {len(variants)} plan(s) over {elements:,} input elements "
                f"(paper size). That takes a while on a laptop; the compiler-only views (Graph, Kernel, Thread "
                f"mapping, Code) are instant.")
        if not st.button(f"Simulate {len(variants)} plan(s) now", type="primary", key=f"go:{what}"):
            return None
    out = {}
    bar = st.progress(0.0, text="preparing inputs and the numpy reference ...") if elements > 1 << 18 else None
    inputs_and_reference(source)
    for i, (label, strategy, options) in enumerate(variants):
        if bar is not None:
            bar.progress(i / len(variants), text=f"simulating {label} ({i + 1} of {len(variants)}) ...")
        out[label] = run_of(source, strategy, gpu, tuple(sorted(options.items())))
    if bar is not None:
        bar.empty()
    st.session_state.setdefault("_simulated", set()).add(key)
    return out


#: where a checkout keeps the GPU runs' results (``python -m benchmarks.gpu_session`` writes them)
RESULTS = REPO / "benchmarks" / "results"


@st.cache_data(show_spinner=False)
def gpu_measurements():
    """Every GPU-measured plan time committed under ``benchmarks/results``, read by ``asim.gpu_measurements``
    (the project's one reader: each time once -- a window's merged results.json is skipped where its parts are
    read -- and simulator runs refused).  None when there is no such folder (the app runs outside a checkout)."""
    if not RESULTS.is_dir():
        return None
    return asim.gpu_measurements(str(RESULTS))


def shape_text(shape: dict) -> str:
    return " ".join(f"{k}={v}" for k, v in shape.items())


@st.cache_data(max_entries=512, show_spinner=False)
def predicted(workload: str, shape: tuple, strategy: str, preset: str) -> tuple:
    """``(us, signature, error)``: the cost model's static estimate (``asim.estimate``) of the plan compiled
    today for this workload, shape, strategy and GPU preset (default options), and that plan's
    ``plan_signature``; ``error`` (and None, "") when it does not compile now.  Milliseconds at GPU-suite sizes
    (no values computed), so the measured table prices every row it shows."""
    try:
        plan = asim.compile(asim.workload(workload, **dict(shape)), strategy, preset)
        return asim.estimate(plan), plan_signature(plan), ""
    except asim.AStitchError as e:
        return None, "", str(e)


def measured_for(source: Source, found) -> list:
    """One row per GPU measurement of this source's *workload*, at every shape measured (the explorer draws a
    smaller shape than the GPU suite times), each beside the prediction for the same plan: same workload, shape,
    strategy and GPU preset.  A row whose plan the planner no longer draws (its ``plan_signature`` differs from
    today's plan's) gets no ratio: the prediction prices another plan."""
    if source.kind != "workload" or not found:
        return []
    order = {s: i for i, s in enumerate(asim.STRATEGIES)}
    mine = [m for m in found.rows if m.workload == source.name]
    first = {}                                  # each window's shapes in the order its suite ran them
    for m in mine:
        first.setdefault((m.date[:10], m.device, shape_text(m.shape)), len(first))
    mine.sort(key=lambda m: (first[(m.date[:10], m.device, shape_text(m.shape))], order.get(m.strategy, len(order))))
    rows = []
    for m in mine:
        us, signature, error = predicted(m.workload, tuple(m.shape.items()), m.strategy, m.preset)
        if error:
            ratio = f"cannot compile now: {error}"
        elif m.plan_signature and signature != m.plan_signature:
            ratio = "plan changed since measured"
        else:
            ratio = f"{us / m.gpu_us:.2f}x" + ("" if m.plan_signature else " (run recorded no plan signature)")
        rows.append({"device": m.device, "date": m.date[:10], "preset": m.preset, "shape": shape_text(m.shape),
                     "strategy": m.strategy, "measured us (GPU)": m.gpu_us,
                     "predicted us (cost model, static estimate)": us, "predicted / GPU-measured": ratio,
                     "file": os.path.relpath(m.source, REPO)})
    return rows


def measured_workloads(found) -> dict:
    """workload -> the shapes measured (as text), for every workload with a GPU measurement."""
    out: dict = {}
    for m in (found.rows if found else []):
        shapes = out.setdefault(m.workload, [])
        if shape_text(m.shape) not in shapes:
            shapes.append(shape_text(m.shape))
    return dict(sorted(out.items()))
