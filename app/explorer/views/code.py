"""Code: the generated Numba-CUDA source of the selected kernel next to the plan printout, lines
linked by node (godbolt-style), the plan JSON to download, and the GPU-measured times of this workload beside
the cost model's predictions for the same plans."""
from __future__ import annotations

import re

import pandas as pd
import streamlit as st

import gpu_backend

from .. import compute, machine, state
from ..style import esc
from . import kernel_picker, node_picker


@st.cache_data(max_entries=64, show_spinner=False)
def source_of(plan_json: str) -> str:
    import astitch_sim as asim
    return gpu_backend.generate_source(asim.Plan.from_json(plan_json))


def split_functions(src: str) -> list:
    """The module's top-level kernel functions, in order: (name, first line, text)."""
    lines = src.splitlines()
    starts = [i for i, ln in enumerate(lines) if ln.startswith("def ")]
    out = []
    for n, i in enumerate(starts):
        j = i
        while j > 0 and lines[j - 1].startswith("@"):
            j -= 1
        end = starts[n + 1] if n + 1 < len(starts) else len(lines)
        while end > i and lines[end - 1].startswith("@"):
            end -= 1
        out.append((lines[i][4:].split("(")[0], j + 1, "\n".join(lines[j:end]).rstrip()))
    return out


def kernel_source(src: str, plan, index: int) -> tuple:
    funcs = split_functions(src)
    ident = re.sub(r"\W", "_", plan.kernels[index].name)
    for name, first, text in funcs:
        if name == ident:
            return first, text
    return (funcs[index][1], funcs[index][2]) if index < len(funcs) else (1, src)


def node_pattern(node: str | None):
    """What marks a source line as ``node``'s: its name (in comments and the plan), or the generated code's
    identifiers for it -- the value (``power_1``), its arrays (``g_``, ``s_``, ``r_``: global, shared,
    register), its accumulator (``acc_``) and reloads (``power_1_v2``), as ``gpu_backend.codegen.source.ident``
    spells them.  The name alone missed the stores (``s_power_1[row] = power_1``)."""
    if not node:
        return None
    from gpu_backend.codegen.source import ident
    return re.compile(rf"(?<![\w.]){re.escape(node)}(?![\w.])|\b(?:[gsr]_|acc_)?{re.escape(ident(node))}(?:_v\d+)?\b")


def highlighted(text: str, first: int, node: str | None) -> str:
    """HTML source with line numbers; lines that mention ``node`` (see :func:`node_pattern`) highlighted."""
    pat = node_pattern(node)
    out = []
    for n, line in enumerate(text.splitlines(), start=first):
        code, _, comment = line.partition("  #") if "  #" in line else (line, "", "")
        body = esc(code) + (f"<span class='cm'>  #{esc(comment)}</span>" if comment else "")
        cls = "row hl" if pat is not None and pat.search(line) else "row"
        out.append(f"<span class='{cls}'><span class='ln'>{n}</span>{body}</span>")
    return "<div class='srcview'>" + "".join(out) + "</div>"


def plan_text(plan, index: int, node: str | None) -> str:
    lines = str(plan).splitlines()
    start = next((i for i, ln in enumerate(lines) if ln.startswith(f"kernel {index} ")), 0)
    end = next((i for i, ln in enumerate(lines) if ln.startswith(f"kernel {index + 1} ")), len(lines))
    return highlighted("\n".join(lines[start:end]), start + 1, node)


def render(ctx):
    plan = ctx.plan()
    st.subheader(f"Code: the Numba-CUDA kernels generated from the {ctx.label(ctx.strategy)} plan")
    top = st.columns(2)
    with top[0]:
        i = kernel_picker(ctx, plan)
    with top[1]:
        node = node_picker(plan)
    src = source_of(plan.to_json())
    first, text = kernel_source(src, plan, i)
    left, right = st.columns([2, 3], gap="medium")
    with left:
        st.markdown("**the plan** (`print(plan)`)")
        st.markdown(plan_text(plan, i, node), unsafe_allow_html=True)
    with right:
        st.markdown(f"**generated source** (`gpu_backend.generate_source(plan)`, lines {first}-"
                    f"{first + len(text.splitlines()) - 1})")
        st.markdown(highlighted(text, first, node), unsafe_allow_html=True)
    if node:
        st.caption(f"Highlighted: every line that mentions `{node}` in the plan and in the kernel source.")
    c = st.columns(3)
    stem = f"{ctx.graph.name}-{ctx.strategy}-{ctx.gpu}"
    c[0].download_button("Plan JSON", plan.to_json(), file_name=f"{stem}.plan.json", mime="application/json",
                         key="dl:plan")
    c[1].download_button("Numba-CUDA source (.py)", src, file_name=f"{stem}_kernels.py", mime="text/x-python",
                         key="dl:src")
    c[2].download_button("Plan printout (.txt)", str(plan), file_name=f"{stem}.plan.txt", key="dl:txt")
    st.divider()
    machine_pane(plan, i)
    st.divider()
    timings(ctx)


def machine_pane(plan, i: int) -> None:
    """Kernel ``i``'s PTX and SASS side by side with ptxas's registers, spills and stack, and the SASS counts
    (instructions per element, global load/store widths), as the compiler chain reported them."""
    st.markdown("### Machine code: PTX and SASS (NVIDIA's compiler, no GPU)")
    plan_json = plan.to_json()
    asked = st.session_state.setdefault("_machine", set())
    if plan_json not in asked:
        st.caption("Compiles every kernel of this plan as Numba would on a GPU: NVVM -> PTX -> ptxas -> "
                   "nvdisasm (a few seconds per kernel; cached).")
        if not st.button("Compile to PTX and SASS", key="mc:go"):
            return
        asked.add(plan_json)
    with st.spinner("compiling ..."):
        data = machine.machine_code(plan_json)
    if "error" in data:
        st.warning(f"No machine code: {data['error']}. The pane needs {machine.INSTALL}.")
        return
    mine = [k for k in data["kernels"] if k["index"] == i]
    if not mine:
        st.info("a library kernel: the plan calls a library routine here, no generated code to compile")
        return
    k = mine[0]
    res = k["resources"]
    c = st.columns(5)
    c[0].metric("registers / thread", res["registers"], help=f"ptxas cap {res['max_registers']} (the plan's)")
    c[1].metric("spilled B / thread", res["spill_stores"] + res["spill_loads"],
                help=f"{res['spill_stores']} B stored, {res['spill_loads']} B loaded")
    c[2].metric("stack B", res["stack"])
    if k["sass"] is not None:
        c[3].metric("SASS instructions", k["instructions"], help="static count of the main body"
                    + (" (a loop the compiler kept)" if k["loop"] else " (straight-line)"))
        c[4].metric("per element", f"{k['instructions_per_element']:.1f}",
                    help=f"thread-instructions per element, {k['elements_per_thread']:g} element(s) per thread")
    widths = (f"; global loads {k['global_loads']}, stores {k['global_stores']} (count x bits: 128-bit accesses "
              "are vectorised)") if k["sass"] is not None else ""
    st.caption(f"{res['tool']} for {data['arch']}; shared memory {res['shared_static']} B"
               + (f" + {res['shared_runtime']} B (device runtime, grid barrier)" if res["shared_runtime"] else "")
               + widths)
    left, right = st.columns(2, gap="medium")
    with left:
        st.markdown(f"**PTX** (`{k['name']}`)")
        st.code(k["ptx"], language="text", height=520)
    with right:
        if k["sass"] is None:
            st.markdown("**SASS**")
            st.info(f"No SASS for {data['arch']}: {k.get('sass_missing', '')}. Pick a newer GPU preset (A100, "
                    "H100) in the sidebar to see it.")
        else:
            st.markdown(f"**SASS** (`nvdisasm`; {', '.join(f'{n} {c}' for c, n in sorted(k['classes'].items(), key=lambda x: -x[1]))})")
            st.code(k["sass"], language="text", height=520)


def timings(ctx):
    """GPU measurements of this workload (every shape the GPU suite timed), each beside the cost model's
    prediction for the same plan -- labelled which is which -- or, where there is none, what was measured."""
    st.markdown("### Measured vs predicted")
    found = compute.gpu_measurements()
    if found is None:
        st.info("**No GPU measurements here:** this app runs outside a checkout (no `benchmarks/results` folder "
                "beside it), so it cannot read the committed GPU runs. The only times shown are the SIMT model's "
                "**predictions** (Compare view).")
        return
    rows = compute.measured_for(ctx.source, found)
    if not rows:
        unmeasured(ctx, found)
        return
    name = ctx.source.name
    df = pd.DataFrame(rows)
    st.dataframe(df, hide_index=True, width="stretch", column_config={
        "measured us (GPU)": st.column_config.NumberColumn(format="%.1f", help="measured on the GPU named"),
        "predicted us (cost model, static estimate)": st.column_config.NumberColumn(
            format="%.1f", help="a prediction (asim.estimate), not a measurement"),
        "predicted / GPU-measured": st.column_config.TextColumn(help="above 1x: the model predicts slower than the GPU ran")})
    comparable = [r for r in rows if r["predicted / GPU-measured"].endswith("x")]
    presets = sorted({r["preset"] for r in rows})
    shown = compute.shape_text(dict(ctx.source.shape))
    where = (f"The explorer shows {name} at {shown}, one of the measured shapes." if shown in {r["shape"] for r in rows}
             else f"The explorer draws {name} at {shown}, smaller than the sizes the GPU suite times: the rows are "
                  "at those sizes.")
    st.caption(
        f"**Measured**: the GPU time of each plan's kernels (median over repetitions, CUDA events, L2 flushed), as "
        f"committed in the results file named, {len(rows)} plan time(s) of {name}, each counted once. "
        f"**Predicted**: the cost model's static estimate (`asim.estimate`, no simulation) of the plan compiled "
        f"today for the same workload, shape and strategy on the run's GPU preset ({', '.join(presets)}) with "
        f"default options, whatever GPU and what-if switches the sidebar picks. {where} "
        f"{len(comparable)} of {len(rows)} rows compare like with like"
        + ("." if len(comparable) == len(rows) else
           "; *plan changed since measured*: the planner now draws another plan than the one timed (its "
           "`plan_signature` in the results file differs), so the two times are of different plans and no ratio "
           "is given."))
    shapes = list(dict.fromkeys((r["shape"], r["preset"]) for r in rows))
    cols = st.columns(min(4, len(shapes)))
    for i, (shape, preset) in enumerate(shapes):
        cols[i % len(cols)].button(f"Explore {name} at {shape} on {preset}", key=f"measured:{shape}:{preset}",
                                   on_click=open_measured, args=(name, shape, preset))


def open_measured(name: str, shape: str, preset: str) -> None:
    """Callback: show ``name`` at a measured shape on the run's GPU preset (the compiler-only views are instant
    at any size; the simulating ones ask first)."""
    state.set_shape(name, {k: int(v) for k, v in (part.split("=") for part in shape.split())})
    st.session_state["gpu"] = preset


def unmeasured(ctx, found) -> None:
    """What is measured, said plainly, when this graph is not."""
    measured = compute.measured_workloads(found)
    if not measured:
        st.info("**No GPU measurement is committed in this checkout** (`benchmarks/results` holds no GPU run). "
                "`python -m benchmarks.gpu_session` is the runbook that measures the GPU suite on a GPU and commits "
                "its results; this view then shows them here, each beside the cost model's prediction, labelled. "
                "The SIMT model's **predictions** are in the Compare view.")
        return
    devices = sorted({m.device for m in found.rows})
    dates = sorted({m.date[:10] for m in found.rows})
    what = ("this graph is HLO, and GPU runs time catalog workloads" if ctx.source.kind != "workload"
            else f"no GPU run has timed {ctx.source.name} yet, at any shape")
    listed = "; ".join(f"**{w}** ({', '.join(shapes)})" for w, shapes in measured.items())
    st.info(f"**No GPU measurement of this case:** {what}. Measured so far ({len(found.rows)} plan times on "
            f"{', '.join(devices)}, {', '.join(dates)}): {listed}. Pick one of them in the sidebar to see its "
            "GPU-measured times beside the cost model's predictions. `python -m benchmarks.gpu_session` is the "
            "runbook that adds more (`benchmarks/README.md`, \"The GPU window: the runbook\"). Until then this "
            "case's only times are the SIMT model's **predictions** (Compare view).")
