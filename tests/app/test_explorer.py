"""The Streamlit explorer under Streamlit's AppTest: every view with the default input (the paper's
Figure 7), a pasted HLO module and a bad one (the AStitchError's message in the page, no exception),
shareable state in the query parameters, the what-if switches, every catalog workload."""
from pathlib import Path

import pytest

pytest.importorskip("streamlit", reason="the explorer needs the app extra: pip install -e '.[app]'")
from streamlit.testing.v1 import AppTest  # noqa: E402

import astitch_sim as asim  # noqa: E402
from anchor import TESTS_FILE

APP = str(Path(TESTS_FILE).resolve().parents[1] / "app" / "streamlit_app.py")
HLO = Path(TESTS_FILE).resolve().parent / "fixtures" / "hlo"
VIEWS = ("Compare", "Graph", "Kernel", "Thread mapping", "Data movement", "Timeline", "Code", "What-if")
#: what each view must draw: (element type, at least how many)
DRAWS = {"Compare": [("vega_lite_chart", 3), ("dataframe", 1)],
         "Graph": [("graphviz_chart", 1)],
         "Kernel": [("graphviz_chart", 1), ("vega_lite_chart", 1), ("metric", 3)],
         "Thread mapping": [("vega_lite_chart", 2)],
         "Data movement": [("graphviz_chart", 2), ("vega_lite_chart", 1)],
         "Timeline": [("vega_lite_chart", 2)],
         "Code": [("download_button", 3)],
         "What-if": [("vega_lite_chart", 3), ("dataframe", 2)]}


def app(**query) -> AppTest:
    at = AppTest.from_file(APP, default_timeout=180)
    for k, v in query.items():
        at.query_params[k] = v
    return at.run()


def qp(at, key) -> str:
    """A query parameter's value as the app wrote it (AppTest may keep a list)."""
    v = at.query_params[key]
    return v[0] if isinstance(v, list) else v


def page_text(at) -> str:
    parts = []
    for kind in ("markdown", "caption", "subheader", "info", "warning", "error"):
        parts += [str(e.value) for e in getattr(at, kind)]
    return "\n".join(parts)


def assert_clean(at):
    assert not at.exception, [e.value for e in at.exception]
    assert not [e.value for e in at.error], [e.value for e in at.error]
    assert "Traceback" not in page_text(at)


@pytest.mark.parametrize("view", VIEWS)
def test_every_view_draws_the_default_figure7(view):
    at = app(view=view)
    assert_clean(at)
    assert at.session_state["workload"] == "paper_fig7"
    for kind, least in DRAWS[view]:
        assert len(at.get(kind)) >= least, (view, kind, len(at.get(kind)))


def test_compare_lists_every_strategy_with_the_papers_kernel_counts():
    at = app(view="Compare")
    df = at.dataframe[0].value
    assert list(df["strategy"]) == list(asim.STRATEGIES)
    kernels = dict(zip(df["strategy"], df["kernels"], strict=True))
    assert kernels["xla"] == 4 and kernels["tvm"] == 3 and kernels["astitch"] == 1     # the paper's Figure 7
    assert kernels["inductor"] > kernels["astitch"]      # torch.compile: the row and column sums never share one
    assert (df["max error"] < 1e-4).all()
    assert "astitch vs xla" in page_text(at)
    searched = [e for e in at.expander if "fusionstitching searched" in e.label]
    assert len(searched) == 1                       # only the search-based strategy records a search
    shown = searched[0].code[0].value
    assert shown.startswith("search: ") and "chosen" in shown and "the winner" in shown


def test_code_view_shows_the_generated_kernel_and_figure7s_gpu_times():
    """The built-in example is the paper's Figure 7, timed on the H200 in the second GPU window (2026-11-29):
    the Code view shows every strategy's measured time beside the prediction for that plan."""
    at = app(view="Code", node="power.1")
    assert_clean(at)
    html = page_text(at)
    assert "def stitch_0_multiply_1(" in html and "class='row hl'" in html
    assert "No GPU measurement of this case" not in html
    df = measured_table(at)
    found = [m for m in committed_measurements().rows if m.workload == "paper_fig7"]
    assert len(df) == len(found) >= len(asim.STRATEGIES)
    assert sorted(set(df["strategy"])) == sorted(asim.STRATEGIES)
    assert at.session_state["node"] == "power.1"


# -- measured beside predicted (issue 29): the committed GPU runs, benchmarks/results/ --------------------------

MEASURED = "measured us (GPU)"
PREDICTED = "predicted us (cost model, static estimate)"


def committed_measurements():
    return asim.gpu_measurements(str(Path(APP).parents[1] / "benchmarks" / "results"))


def measured_table(at):
    tables = [d.value for d in at.dataframe if MEASURED in d.value.columns]
    assert len(tables) == 1, [list(d.value.columns) for d in at.dataframe]
    return tables[0]


def test_code_view_shows_every_measured_shape_of_the_workload_beside_its_prediction():
    """The explorer draws layernorm far below the sizes the GPU suite times: the table shows every measured
    shape anyway, each time once (the window's merged results.json repeats its parts), with the device, the
    date and the file, and beside it the cost model's prediction for the same plan -- same workload, shape,
    strategy and GPU preset -- labelled a prediction, and their ratio."""
    found = [m for m in committed_measurements().rows if m.workload == "layernorm"]
    assert len(found) >= 12                                 # two shapes x six strategies on the H200
    at = app(view="Code", workload="layernorm")
    assert_clean(at)
    df = measured_table(at)
    assert len(df) == len(found)
    assert not df.duplicated(["device", "date", "shape", "strategy"]).any()
    assert {"rows=16384 cols=768", "rows=8192 cols=4096"} <= set(df["shape"])
    assert {"device", "date", "shape", "strategy", MEASURED, PREDICTED, "predicted / GPU-measured", "file"} <= set(df)
    assert set(df["device"]) == {m.device for m in found} and all("parts" in f for f in df["file"])
    row = df[(df["shape"] == "rows=8192 cols=4096") & (df["strategy"] == "astitch")].iloc[0]
    m = next(m for m in found if m.shape == {"rows": 8192, "cols": 4096} and m.strategy == "astitch")
    plan = asim.compile(asim.workload("layernorm", rows=8192, cols=4096), "astitch", m.preset)
    assert row[MEASURED] == m.gpu_us and row["date"] == m.date[:10]
    assert abs(row[PREDICTED] - asim.estimate(plan)) < 1e-6
    assert row["predicted / GPU-measured"] == f"{asim.estimate(plan) / m.gpu_us:.2f}x"
    text = page_text(at)
    assert "**Measured**" in text and "**Predicted**" in text and "static estimate" in text
    assert "No GPU measurement" not in text and "no GPU so far" not in text


def test_at_a_measured_shape_each_plan_time_is_counted_once():
    """A window's merged results.json repeats the plan times of its parts (and a render of two windows repeats
    both): read once, through asim.gpu_measurements, each strategy at the shape shown appears once per window
    that timed it, from the part that measured it."""
    at = app(view="Code", workload="layernorm", shape="rows:16384,cols:768", gpu="H200")
    assert_clean(at)
    df = measured_table(at)
    here = df[df["shape"] == "rows=16384 cols=768"] if "shape" in df else df
    found = [m for m in committed_measurements().rows
             if m.workload == "layernorm" and m.shape == {"rows": 16384, "cols": 768} and m.preset == "H200"]
    assert len(here) == len(found) and len({m.date[:10] for m in found}) >= 2       # the two H200 windows
    assert not here.duplicated(["date", "strategy"]).any()
    for date in set(here["date"]):
        assert sorted(here[here["date"] == date]["strategy"]) == sorted(asim.STRATEGIES)
    assert all("/parts/" in f for f in df["file"])                                      # never a merged file


def test_a_measurement_of_a_plan_the_planner_no_longer_draws_gets_no_ratio():
    """Layer-norm backward was timed on the H200 in the first window (2026-11-27) with plans the planner no
    longer draws (astitch's launch since the imbalance fix, xla's since today's XLA packs short rows, and every
    strategy's dgamma/dbeta column reductions since they read vectors of adjacent columns): its results file's
    plan_signature differs from today's plan's, so each of those rows says so instead of a ratio.  The second
    window (2026-11-29) timed today's plans: ratios."""
    at = app(view="Code", workload="layernorm_backward")
    assert_clean(at)
    df = measured_table(at)
    here = df[df["shape"] == "rows=16384 cols=768"]
    stale, current = here[here["date"] == "2026-11-27"], here[here["date"] == "2026-11-29"]
    assert sorted(stale["strategy"]) == sorted(current["strategy"]) == sorted(asim.STRATEGIES)
    assert list(stale["predicted / GPU-measured"]) == ["plan changed since measured"] * len(asim.STRATEGIES)
    assert all(r.endswith("x") for r in current["predicted / GPU-measured"])
    assert "plan changed since measured" in page_text(at)


def test_an_unmeasured_workload_says_which_workloads_were_measured():
    at = app(view="Code", workload="swiglu")
    assert_clean(at)
    text = page_text(at)
    assert "No GPU measurement of this case" in text and "no GPU run has timed swiglu" in text
    for w in {m.workload for m in committed_measurements().rows}:
        assert f"**{w}**" in text
    assert "python -m benchmarks.gpu_session" in text
    assert "has had no GPU" not in text and not [d for d in at.dataframe if MEASURED in d.value.columns]
    at = app(view="Code", example="layernorm")              # an HLO module: GPU runs time catalog workloads
    assert_clean(at)
    assert "this graph is HLO" in page_text(at) and "**layernorm**" in page_text(at)


def test_one_click_opens_a_measured_shape_on_its_gpu():
    at = app(view="Code", workload="layernorm")
    [b for b in at.button if b.label == "Explore layernorm at rows=8192 cols=4096 on H200"][0].click().run()
    assert_clean(at)
    assert qp(at, "shape") == "rows:8192,cols:4096" and qp(at, "gpu") == "H200"
    assert (at.session_state["workload"], at.session_state["gpu"]) == ("layernorm", "H200")


@pytest.mark.parametrize("view", VIEWS)
def test_every_view_on_pasted_hlo(view):
    at = AppTest.from_file(APP, default_timeout=180)
    at.query_params["view"] = view
    at.run()
    at.radio(key="source").set_value("Your HLO").run()
    at.text_area(key="hlo_text").input((HLO / "softmax.hlo").read_text()).run()
    assert_clean(at)
    assert "softmax" in page_text(at).lower() or view in ("Thread mapping",)
    for kind, least in DRAWS[view]:
        assert len(at.get(kind)) >= least, (view, kind)


@pytest.mark.parametrize("view", ("Graph", "Compare", "Code"))
def test_bad_hlo_shows_the_astitch_error_not_a_traceback(view):
    at = AppTest.from_file(APP, default_timeout=60)
    at.query_params["view"] = view
    at.run()
    at.radio(key="source").set_value("Your HLO").run()
    at.text_area(key="hlo_text").input("HloModule broken\n\nENTRY main {\n  x = f32[4] parameter(0)\n"
                                       "  ROOT y = f32[4] frobnicate(x)\n}\n").run()
    assert not at.exception
    errors = [e.value for e in at.error]
    assert errors and "AStitchError" in errors[0] and "frobnicate" in errors[0], errors
    assert "Traceback" not in page_text(at)


def test_unsupported_op_in_real_hlo_is_an_error_message():
    at = AppTest.from_file(APP, default_timeout=60)
    at.run()
    at.radio(key="source").set_value("Your HLO").run()
    # a real module with an op astitch-sim does not support: the page names the op and its line
    text = (HLO / "softmax.hlo").read_text()
    text = text.replace(" exponential(", " cholesky(", 1)
    assert "cholesky" in text
    at.text_area(key="hlo_text").input(text).run()
    assert not at.exception
    assert at.error and "AStitchError" in at.error[0].value and "cholesky" in at.error[0].value
    assert "line " in at.error[0].value


def test_hlo_example_from_the_link():
    at = app(example="layernorm", view="Graph")
    assert_clean(at)
    assert at.session_state["source"] == "HLO example"
    assert qp(at, "example") == "layernorm"


def test_link_state_round_trips_through_query_parameters():
    at = app(workload="softmax", shape="rows:64,cols:3000", strategy="xla", gpu="H100", view="Kernel")
    assert_clean(at)
    ss = at.session_state
    assert (ss["workload"], ss["strategy"], ss["gpu"], ss["view"]) == ("softmax", "xla", "H100", "Kernel")
    assert ss["shape:softmax:rows"] == 64 and ss["shape:softmax:cols"] == 3000
    at.selectbox(key="strategy").set_value("astitch").run()
    at.radio(key="view").set_value("Thread mapping").run()
    assert qp(at, "strategy") == "astitch" and qp(at, "view") == "Thread mapping" and qp(at, "gpu") == "H100"
    assert qp(at, "workload") == "softmax" and qp(at, "shape") == "rows:64,cols:3000"


def test_unknown_workload_in_a_link_is_an_error_with_a_did_you_mean():
    at = app(workload="sofmax")
    assert not at.exception
    errors = [e.value for e in at.error]
    assert any("'sofmax'" in e and "did you mean 'softmax'?" in e for e in errors), errors
    assert at.session_state["workload"] == "paper_fig7"          # the page still shows the default


@pytest.mark.parametrize("query, words", [
    (dict(strategy="astich"), ["strategy='astich'", "did you mean 'astitch'?"]),
    (dict(gpu="H10"), ["gpu='H10'", "did you mean 'H100'?"]),
    (dict(view="Kernal"), ["view='Kernal'", "did you mean 'Kernel'?"]),
    (dict(example="layernrom"), ["example='layernrom'", "did you mean 'layernorm'?"]),
    (dict(workload="softmax", shape="rows:64,colz:30,cols:abc"), ["'colz:30'", "'cols:abc'", "rows:<positive integer>"]),
    (dict(off="global_stiching"), ["'global_stiching'", "did you mean 'global_stitching'?"]),
])
def test_a_link_naming_what_does_not_exist_is_an_error_naming_it(query, words):
    """A link with a typo is not silently clamped to a default: the page says what it ignored, and why."""
    at = app(**query)
    assert not at.exception
    errors = "\n".join(e.value for e in at.error)
    for w in words:
        assert w in errors, (w, errors)
    if "shape" in query:
        assert at.session_state["shape:softmax:rows"] == 64          # the good part of the shape is kept


def test_what_if_switch_changes_every_view_and_the_link():
    at = app(view="Graph")
    assert "1 kernel(s)" in at.subheader[0].value
    at.checkbox(key="opt:global_stitching").uncheck().run()
    assert_clean(at)
    assert "3 kernel(s)" in at.subheader[0].value
    assert qp(at, "off") == "global_stitching"
    at.radio(key="view").set_value("What-if").run()
    assert_clean(at)
    df = at.dataframe[0].value
    assert list(df["plan"]) == ["xla", "astitch (paper)", "astitch (what-if)"]
    # Figure 7 at full size on the V100: the paper's launch (its column reduction split over 2 blocks, two grid
    # barriers); unsplit, 4 of the 32 blocks would do the column stages (cost.imbalance_terms), priced slower
    assert list(df["kernels"]) == [4, 1, 3] and list(df["grid barriers"])[1:] == [2, 0]
    assert (df["max error"] < 1e-4).all()


def test_what_if_from_a_link():
    at = app(view="Kernel", off="horizontal_packing,register_reuse", block="256")
    assert_clean(at)
    assert at.session_state["opt:horizontal_packing"] is False
    assert at.session_state["opt:max_block_threads"] == 256
    assert "max_block_threads=256" in page_text(at)


def test_which_xla_is_a_setting_of_the_xla_strategy_carried_by_the_link():
    """The sidebar's "Which XLA" picks the xla strategy's fusion_rules: softmax's exp is cheap in today's
    XLA (3 kernels) and expensive in the paper's era (its own kernel: 4); the link carries the choice."""
    at = app(view="Compare", workload="softmax", shape="rows:64,cols:1024")
    assert_clean(at)
    kernels = dict(zip(at.dataframe[0].value["strategy"], at.dataframe[0].value["kernels"], strict=True))
    assert kernels["xla"] == 3
    at.selectbox(key="opt:xla_rules").set_value("tf-2.6").run()
    assert_clean(at)
    df = at.dataframe[0].value
    kernels = dict(zip(df["strategy"], df["kernels"], strict=True))
    assert kernels["xla (tf-2.6)"] == 4 and (df["max error"] < 1e-4).all()
    assert qp(at, "xla") == "tf-2.6"
    linked = app(view="What-if", workload="softmax", shape="rows:64,cols:1024", xla="tf-2.6")
    assert_clean(linked)
    assert linked.session_state["opt:xla_rules"] == "tf-2.6"
    assert list(linked.dataframe[0].value["plan"])[0] == "xla (tf-2.6)"
    assert "xla follows fusion_rules=tf-2.6" in page_text(linked)


def test_reduction_scheme_what_if_applies_to_every_strategy_and_travels_in_the_link():
    at = app(view="Kernel", strategy="xla")
    assert_clean(at)
    assert at.session_state["opt:reduce_scheme"] == "shuffle"
    assert "reduce_scheme" not in page_text(at)
    at.radio(key="opt:reduce_scheme").set_value("tree").run()
    assert_clean(at)
    assert qp(at, "reduce") == "tree"
    assert "reduce_scheme=tree" in page_text(at)
    linked = app(view="Kernel", strategy="xla", reduce="tree")
    assert_clean(linked)
    assert linked.session_state["opt:reduce_scheme"] == "tree"


def test_paper_shapes_are_one_click_away_in_the_thread_mapping_view():
    at = app(view="Thread mapping")
    at.button(key="btn:softmax <750000,32> (DIEN)").click().run()
    assert_clean(at)
    assert at.session_state["workload"] == "softmax"
    assert at.session_state["shape:softmax:rows"] == 750000
    text = page_text(at)
    # today's xla (8 rows of 32 threads a 256-thread block, read as 8 lanes x 4: 32 rows) vs astitch (128 rows)
    assert "32 row(s) per block" in text and "128 row(s) per block" in text and "one row per block" not in text
    assert "Pick tf-2.6 under *Which XLA*" in text
    paper = app(view="Thread mapping", workload="softmax", shape="rows:750000,cols:32", xla="tf-2.6")
    assert_clean(paper)
    assert "one row per block" in page_text(paper) and "128 row(s) per block" in page_text(paper)


def test_the_thread_mapping_view_says_where_vectors_run_across_rows():
    """adam over 1001 elements: 4-element vectors in flat order, the last element a scalar tail (issue 27)."""
    at = app(view="Thread mapping", workload="adam_step", shape="size:1001")
    assert_clean(at)
    text = page_text(at)
    assert "vectors of 4 run across rows" in text and "the last 1 element(s), a scalar tail, by one thread" in text


def test_paper_size_shapes_ask_before_simulating():
    at = app(view="Compare", workload="softmax", shape="rows:750000,cols:32")
    assert_clean(at)
    assert any("paper size" in i.value for i in at.info)
    assert any(b.label.startswith("Simulate") for b in at.button)
    assert not at.dataframe                       # nothing simulated yet: the page did not block


def test_step_through_on_a_tiny_shape():
    at = app(view="Data movement", shape="n:4,c:8")
    assert_clean(at)
    text = page_text(at)
    assert "step 1 of" in text and "loads param" in text
    at.slider(key="st_step").set_value(3).run()
    assert_clean(at)
    assert "step 3 of" in page_text(at)


@pytest.mark.slow
@pytest.mark.parametrize("name", list(asim.WORKLOADS))
def test_every_catalog_workload_compares_at_its_explorer_shape(name):
    at = app(view="Compare", workload=name)
    assert_clean(at)
    assert list(at.dataframe[0].value["strategy"]) == list(asim.STRATEGIES)


#: switching orders: forward, backward, and one that comes back to a strategy already seen
ORDERS = {"forward": asim.STRATEGIES, "backward": tuple(reversed(asim.STRATEGIES)),
          "revisit": ("unfused", "xla", "astitch", "unfused", "fusionstitching", "tvm", "astitch")}


def strategy_picker(at):
    return at.selectbox(key="strategy")


def pickers_show_this_plan(at, workload, shape, strategy):
    """Every plan-part picker on the page shows this strategy's kernels (never a previous plan's); returns
    how many pickers it checked."""
    plan = asim.compile(asim.workload(workload, **shape), strategy=strategy, gpu="V100")
    names = {k.name for k in plan.kernels}
    checked = 0
    for box in at.selectbox:
        if box.key and box.key.startswith(("kernel@", "graph_kernel@", "st_kernel@")):
            shown = box.format_func(box.value)
            assert any(n in shown for n in names) or shown == "(none)", (box.key, shown, sorted(names))
            checked += 1
    return checked


#: views with a kernel picker (the Data movement view's step-through has one at this tiny shape)
PICKERS = {"Graph": 1, "Kernel": 1, "Code": 1, "Data movement": 1}


@pytest.mark.parametrize("order", [o if o == "forward" else pytest.param(o, marks=pytest.mark.slow) for o in ORDERS])
@pytest.mark.parametrize("view", VIEWS)
def test_every_view_survives_strategy_switches(view, order):
    """The explorer's Kernel view crashed on unfused -> xla -> astitch (its kernel picker kept the previous
    plan's label): every view, every strategy, in several orders, draws cleanly and shows this plan."""
    at = app(view=view, workload="paper_fig7", shape="n:4,c:8")
    for s in ORDERS[order]:
        strategy_picker(at).set_value(s).run()
        assert_clean(at)
        assert at.session_state["strategy"] == s and qp(at, "strategy") == s
        assert pickers_show_this_plan(at, "paper_fig7", {"n": 4, "c": 8}, s) >= PICKERS.get(view, 0)


@pytest.mark.slow
@pytest.mark.parametrize("view", ("Kernel", "Code", "Graph", "Thread mapping"))
def test_plan_views_survive_strategy_switches_at_paper_size(view):
    """The same at the paper's BERT layernorm size (16384x768), with the last kernel picked first."""
    shape = {"rows": 16384, "cols": 768}
    at = app(view=view, workload="layernorm", shape="rows:16384,cols:768", strategy="unfused")
    kernel = [b for b in at.selectbox if b.key and b.key.startswith("kernel@")]
    if kernel:
        kernel[0].select_index(len(kernel[0].options) - 1).run()
        assert_clean(at)
    for s in ORDERS["revisit"]:
        strategy_picker(at).set_value(s).run()
        assert_clean(at)
        assert pickers_show_this_plan(at, "layernorm", shape, s) >= PICKERS.get(view, 0)


APP_ONLY = """
import json
from streamlit.testing.v1 import AppTest
out = {}
try:
    import numba  # noqa: F401
    out["numba"] = ["numba was importable: the hiding did not work"]
except ModuleNotFoundError:
    pass
for view in %r:
    at = AppTest.from_file(%r, default_timeout=300)
    at.query_params["view"] = view
    at.run()
    out[view] = [str(e.value)[:300] for e in at.exception] + [e.value[:300] for e in at.error]
print(json.dumps(out))
"""


@pytest.mark.slow
def test_every_view_works_with_the_app_extra_alone(tmp_path):
    """The README's main command installs only ``.[app]`` (Streamlit): every view must draw without numba,
    torch, jax, matplotlib or the notebook packages (hidden here as a missing package is)."""
    import json
    import os
    import subprocess
    import sys
    from benchmarks.image_like import hide
    hidden = hide(tmp_path / "hidden", ("numba", "torch", "jax", "matplotlib", "nbformat", "nbclient", "otter",
                                        "hypothesis", "playwright", "jupytext"))
    root = Path(APP).parents[1]
    env = dict(os.environ, PYTHONPATH=os.pathsep.join([str(hidden), str(root)]))
    r = subprocess.run([sys.executable, "-c", APP_ONLY % (VIEWS, APP)], env=env, capture_output=True, text=True,
                       timeout=900, cwd=tmp_path)
    assert r.returncode == 0, r.stderr[-3000:]
    problems = json.loads(r.stdout.strip().splitlines()[-1])
    assert set(problems) == set(VIEWS)
    assert not any(problems.values()), problems


def chart_frames(element) -> list:
    """The data sets a Vega-Lite chart element carries (Streamlit sends them as Arrow streams)."""
    import pyarrow as pa
    return [pa.ipc.open_stream(d.data.data).read_pandas() for d in element.proto.datasets]


def chart_title(element) -> str:
    import json
    title = json.loads(element.proto.spec).get("title", "")
    return title if isinstance(title, str) else title.get("text", "")


@pytest.mark.slow
def test_timeline_is_drawn_at_the_papers_size():
    """At BERT's layernorm size every kernel has hundreds of waves, and the timeline keeps block entries for
    the first and last waves only; the chart drew those two slivers and left the kernel blank between them.
    Now every drawn SM is busy for nearly all of each long kernel's span, as the cost model says it is."""
    at = app(view="Timeline", workload="layernorm", shape="rows:16384,cols:768")
    at.button(key="go:Timeline").click().run()
    assert_clean(at)
    plans = {s: asim.compile(asim.workload("layernorm", rows=16384, cols=768), strategy=s, gpu="V100")
             for s in ("xla", "astitch")}
    charts = [c for c in at.get("vega_lite_chart") if chart_title(c).split(":")[0] in plans]
    assert [chart_title(c).split(":")[0] for c in charts] == ["xla", "astitch"]
    sms = at.session_state["tl_sms"]
    for chart in charts:
        bars = chart_frames(chart)[0]
        starts = chart_frames(chart)[-1]["t"].tolist()           # kernel starts (the dashed rules)
        ends = starts[1:] + [bars["end_us"].max()]
        long_kernels = 0
        for k, (a, b) in enumerate(zip(starts, ends, strict=True)):
            mine = bars[bars["kernel"] == k]
            if (b - a) < 20:                     # short kernels (one wave) are drawn block by block anyway
                continue
            long_kernels += 1
            assert set(mine["sm"]) == set(range(sms)), (chart_title(chart), k)
            for sm, spans in mine.groupby("sm"):
                covered, t = 0.0, a
                for s, e in sorted(zip(spans["start_us"], spans["end_us"], strict=True)):
                    covered += max(0.0, e - max(s, t))
                    t = max(t, e)
                assert covered >= 0.9 * (b - a), (chart_title(chart), k, sm, covered, b - a)
        assert long_kernels >= 1


def byte_columns(df) -> dict:
    """``{column: unit}`` of a table's byte columns (named ``... B``, ``... KiB``, ``... MiB``, ``... GiB``)."""
    return {c: c.split()[-1].strip("()") for c in df.columns
            if c.split()[-1].strip("()") in ("B", "KiB", "MiB", "GiB")}


@pytest.mark.parametrize("view, shape", [("Compare", "n:4,c:8"), ("What-if", "n:4,c:8"), ("Data movement", "n:4,c:8"),
                                         ("Compare", "n:128,c:256")])
def test_byte_tables_use_a_unit_that_suits_their_values(view, shape):
    """A 2 KiB tensor read 0.00 MiB: every byte column picks its unit from its largest value (1 to 1024 of it)."""
    at = app(view=view, shape=shape)
    assert_clean(at)
    seen = 0
    for frame in at.dataframe:
        df = frame.value
        cols = byte_columns(df)
        tops = {c: float(df[c].max()) for c in cols}
        for col, unit in cols.items():
            # never a unit too small (1024 or more of it) ...
            assert tops[col] < 1024, (view, col, tops[col])
            # ... nor too big: the column (or the column it is stacked with, same unit) reaches 1 of it
            assert tops[col] == 0 or max(tops[c] for c, u in cols.items() if u == unit) >= 1, (view, col, tops)
            seen += 1
    assert seen >= 1, view


def test_two_bar_charts_have_room_for_their_bars():
    """The What-if view's 2-bar charts were squeezed to a few pixels (the height counted the bars, not the
    axis that Streamlit fits into it): every horizontal bar chart gives each bar and its axis room."""
    import json
    at = app(view="What-if", shape="n:4,c:8")
    assert_clean(at)
    checked = 0
    for chart in at.get("vega_lite_chart"):
        spec = json.loads(chart.proto.spec)
        y = (spec.get("encoding") or spec["layer"][0].get("encoding", {})).get("y", {})
        if y.get("type") != "nominal" or not isinstance(spec.get("height"), int):
            continue
        bars = len(chart_frames(chart)[0][y["field"]].unique())
        assert spec["height"] >= 40 * bars + 60, (y["field"], bars, spec["height"])
        checked += 1
    assert checked >= 3


def test_compare_breaks_each_kernels_predicted_time_into_the_cost_models_terms():
    at = app(view="Compare", shape="n:4,c:8")
    assert_clean(at)
    assert "Where the predicted time goes" in page_text(at)
    chart = next(c for c in at.get("vega_lite_chart") if "term" in chart_frames(c)[0].columns)
    df = chart_frames(chart)[0]
    g = asim.workload("paper_fig7", n=4, c=8)
    from astitch_sim.frontends.workloads import workload_inputs
    for s in asim.STRATEGIES:
        stats = asim.simulate(asim.compile(g, strategy=s, gpu="V100"), workload_inputs(g)).stats
        mine = df[df["plan"] == s]
        assert mine["kernel"].nunique() == stats.kernel_launches, s
        for i, ks in enumerate(stats.kernels):
            total = mine[mine["kernel"].str.contains(f" k{i} ")]["us"].sum()
            assert abs(total - ks.predicted_us) < 1e-6 * max(1.0, ks.predicted_us), (s, i, total, ks.predicted_us)
        assert {"launch", "DRAM traffic"} <= set(mine["term"])


def test_the_search_record_is_shown_whole():
    """The fusionstitching search record's last column ("chosen") was cut off in a narrow column."""
    at = app(view="Compare", shape="n:4,c:8")
    record = next(e for e in at.expander if "searched" in e.label)
    code = record.code[0]
    assert code.proto.wrap_lines and "chosen" in code.value


def test_step_through_of_figure7_shows_its_grid_barrier():
    """Figure 7's step-through opened at n=4, c=8, where the astitch plan is one block with no Global
    stitching, so the picture could not show what the view promises.  From the explorer's Figure 7 the
    tiny-shape button halves the shape only as far as the trace needs, keeping the plan's grid barrier; the
    step list then crosses it, and the picture has room for its strips, its axis title and its legend."""
    import json
    at = app(view="Data movement")
    assert_clean(at)
    button = at.button(key="btn:tiny")
    n, c = at.session_state["shape:paper_fig7:n"] // 2, at.session_state["shape:paper_fig7:c"] // 2
    assert f"n={n}, c={c}" in button.label

    def shape_of(plan):
        return [(len(k.stages), k.block_barriers, k.global_barriers) for k in plan.kernels]
    big = asim.compile(asim.workload("paper_fig7", n=2 * n, c=2 * c), strategy="astitch", gpu="V100")
    small = asim.compile(asim.workload("paper_fig7", n=n, c=c), strategy="astitch", gpu="V100")
    said = "this plan's kernels, stages and barriers" if shape_of(big) == shape_of(small) else "differs from this one"
    assert said in page_text(at)                     # the page says whether the tiny plan is the same plan
    button.click().run()
    assert_clean(at)
    assert (at.session_state["shape:paper_fig7:n"], at.session_state["shape:paper_fig7:c"]) == (n, c)
    assert sum(k.global_barriers for k in small.kernels) >= 1
    text = page_text(at)
    assert "grid barrier(s)** (Global stitching)" in text
    assert "waits at a grid barrier" in text
    picture = next(ch for ch in at.get("vega_lite_chart") if "tensor" in chart_frames(ch)[0].columns)
    spec = json.loads(picture.proto.spec)
    strips = chart_frames(picture)[0]["tensor"].nunique()
    assert spec["height"] >= 40 * strips + 150, (spec["height"], strips)
    enc = spec["encoding"]
    assert enc["x"]["title"] and enc["y"]["title"] and enc["color"]["legend"]["orient"] == "bottom"
    assert "not touched in this step" in enc["color"]["scale"]["domain"]


def test_step_through_at_four_by_eight_says_there_is_no_grid_barrier():
    at = app(view="Data movement", shape="n:4,c:8")
    assert_clean(at)
    assert "no grid barrier at this shape" in page_text(at) or "no barrier at this shape" in page_text(at)


def test_a_what_if_that_wins_says_why():
    """On Figure 7 "no task splitting" is predicted faster than the paper's plan; the view said nothing about
    why.  Each switch's row names the cost-model terms that changed most (the split's memset and its grid
    barrier here), the terms named add up to the time difference, and a winning switch is called out."""
    import re
    from astitch_sim.frontends.workloads import workload_inputs
    at = app(view="What-if")
    assert_clean(at)
    shape = {"n": at.session_state["shape:paper_fig7:n"], "c": at.session_state["shape:paper_fig7:c"]}
    g = asim.workload("paper_fig7", **shape)
    x = workload_inputs(g)
    paper = asim.simulate(asim.compile(g, strategy="astitch", gpu="V100"), x).stats.predicted_us
    df = at.dataframe[-1].value
    why = "why (predicted time, by cost-model term)"
    rows = dict(zip(df["plan"], df[why], strict=True))
    times = dict(zip(df["plan"], df["predicted us"], strict=True))
    assert times["astitch (paper)"] == pytest.approx(paper)
    split = rows["no task splitting"]
    if times["no task splitting"] < 0.98 * paper:
        assert "faster" in split and "memset" in split and "grid barriers" in split, split
        assert any("no task splitting" in w.value and "predicted faster" in w.value for w in at.warning)
    explained = 0
    for plan, text in rows.items():
        diff = times[plan] - paper
        if plan == "astitch (paper)" or abs(diff) < 0.05:
            continue
        named = [float(v) for v in re.findall(r" ([+-]\d+\.\d+)", text)]
        assert named and ("faster" in text) == (diff < 0), (plan, text)
        assert sum(named) == pytest.approx(diff, abs=0.006 * len(named)), (plan, text, diff)
        explained += 1
    assert explained >= 2


def test_code_view_highlights_the_nodes_stores_too():
    """Picking ``power.1`` highlighted the lines naming it (``power.1`` in comments) but not its stores,
    written with the generated identifiers (``s_power_1[row] = power_1``)."""
    import re
    import gpu_backend
    at = app(view="Code", node="power.1", shape="n:4,c:8")
    assert_clean(at)
    html = page_text(at)
    src = gpu_backend.generate_source(asim.compile(asim.workload("paper_fig7", n=4, c=8), strategy="astitch",
                                                   gpu="V100"))
    stores = [n for n, line in enumerate(src.splitlines(), 1) if re.match(r"\s*[gsr]_power_1\[.*\]\s*=", line)]
    assert stores
    for n in stores:
        assert f"<span class='row hl'><span class='ln'>{n}</span>" in html, n


def machine_code_independently(plan, arch: str) -> list:
    """ptxas's registers and spills for each kernel, from gpu_backend.machine.machine_code in a fresh process."""
    import json
    import os
    import subprocess
    import sys
    script = ("import json, sys, astitch_sim as asim\n"
              "from gpu_backend.machine.machine_code import compile_kernels\n"
              "plan = asim.Plan.from_json(sys.stdin.read())\n"
              f"print(json.dumps([(m.index, m.resources.registers, m.resources.spills) for m in "
              f"compile_kernels(plan, {arch!r}, disassemble=False)]))\n")
    env = {k: v for k, v in os.environ.items() if k != "NUMBA_ENABLE_CUDASIM"}
    r = subprocess.run([sys.executable, "-c", script], input=plan.to_json(), capture_output=True, text=True,
                       env=env, cwd=Path(APP).parents[1], timeout=600)
    assert r.returncode == 0, r.stderr[-3000:]
    return json.loads(r.stdout.strip().splitlines()[-1])


@pytest.mark.parametrize("gpu, arch", [("H100", "sm_90"), ("V100", "sm_70")])
def test_code_view_shows_each_kernels_ptx_and_sass_with_ptxas_numbers(gpu, arch):
    """Compiler Explorer's pane: the kernel's PTX and SASS beside its source, with registers, spills,
    instructions per element and load/store widths -- the numbers ptxas reports, not the explorer's."""
    from gpu_backend.machine import toolchain
    if not toolchain.available():
        pytest.skip(f"NVIDIA's toolchain is not installed: {toolchain.missing_reason()}")
    at = app(view="Code", gpu=gpu)
    assert_clean(at)
    assert not [c for c in at.code if ".entry" in c.value]          # nothing compiled before asking
    at.button(key="mc:go").click().run()
    assert_clean(at)
    shape = {"n": at.session_state["shape:paper_fig7:n"], "c": at.session_state["shape:paper_fig7:c"]}
    plan = asim.compile(asim.workload("paper_fig7", **shape), strategy="astitch", gpu=gpu)
    (index, registers, spills), = [m for m in machine_code_independently(plan, arch) if m[0] == 0]
    metrics = {m.label: m.value for m in at.metric}
    assert metrics["registers / thread"] == str(registers) and metrics["spilled B / thread"] == str(spills)
    assert any(c.value.lstrip().startswith("//") and ".entry" in c.value for c in at.code)      # the PTX
    if arch == "sm_70":          # CUDA 13's nvdisasm no longer reads sm_70: the page says so, no SASS
        assert any("No SASS for sm_70" in i.value for i in at.info)
    else:
        sass = [c.value for c in at.code if "STG" in c.value or "EXIT" in c.value]
        assert sass, "the SASS listing"
        assert {"SASS instructions", "per element"} <= set(metrics) and float(metrics["per element"]) > 0
        assert "global loads " in page_text(at) and "x32" in page_text(at)
        assert not any(".headerflags" in c for c in sass)            # the kernel's code, not the ELF headers


def column_tables(block, weight: float = 1.0):
    """``(share of the page's width, dataframe)`` for every table under ``block`` (columns nest)."""
    from streamlit.testing.v1.element_tree import Column
    children = list(getattr(block, "children", {}).values())
    total = sum(c.weight for c in children if isinstance(c, Column)) or 1.0
    for child in children:
        w = weight * child.weight / total if isinstance(child, Column) else weight
        if getattr(child, "type", "") == "dataframe":
            yield w, child
        yield from column_tables(child, w)


@pytest.mark.parametrize("view", VIEWS)
def test_wide_tables_get_the_pages_width(view):
    """Tables of many columns sat in a column of 2/5 of the page and hid their last columns (the Compare
    table's shared bytes, the What-if table's): a table of more than four columns is never in a column
    narrower than half the page."""
    at = app(view=view, shape="n:4,c:8")
    assert_clean(at)
    found = list(column_tables(at.main))
    assert len(found) == len(at.dataframe)
    for share, table in found:
        if len(table.value.columns) > 4:
            assert share >= 0.5, (view, list(table.value.columns), share)


# -- issue 31 item 4: the Graph view agrees with the plan and the cost model, and says why each kernel ends --------

def graph_dot(at) -> str:
    (chart,) = at.get("graphviz_chart")
    return chart.proto.spec


def test_graph_view_draws_a_regional_reduce_edge_through_shared_memory():
    """Figure 7 under astitch: reduce.1 is Regional (its task's threads combine it in shared memory), so the
    edge to divide.1, its epilogue consumer, is shared memory, not registers."""
    plan = asim.compile(asim.workload("paper_fig7"), "astitch", "V100")
    assert plan.kernels[0].values["reduce.1"].scheme == "regional"
    at = app(view="Graph", strategy="astitch")
    assert_clean(at)
    (edge,) = [line for line in graph_dot(at).splitlines() if '"reduce.1" -> "divide.1"' in line]
    assert 'label=" smem"' in edge and " reg" not in edge, edge


def test_graph_view_draws_a_split_reduces_epilogue_edge_through_global_memory():
    """Layernorm's 4 rows of 65536: task splitting spreads each row over many blocks, so mean_sum's partials
    meet in global memory (atomics, a memset, a grid barrier after the combine: what the cost model charges)
    before its epilogue computes mean. The edge mean_sum -> mean is global memory, not registers.  (8 rows of
    20000 split too until astitch priced its own launch, 4 rows of 30000 until a row's vector trips counted as
    loads in flight: one block per row is faster there now.)"""
    shape = "rows:4,cols:65536"
    plan = asim.compile(asim.workload("layernorm", rows=4, cols=65536), "astitch", "V100")
    stage = plan.kernels[0].stages[0]
    assert stage.mapping.splits > 1 and "mean" in stage.epilogue and stage.sync_after_combine
    assert plan.kernels[0].values["mean_sum"].space == "global"
    stats = asim.simulate(plan, asim.random_inputs(plan.graph)).stats.kernels[0]
    assert stats.memset_bytes > 0 and stats.breakdown["memset_us"] > 0     # what the split's combine costs
    at = app(view="Graph", strategy="astitch", workload="layernorm", shape=shape)
    assert_clean(at)
    (edge,) = [line for line in graph_dot(at).splitlines() if '"mean_sum" -> "mean"' in line]
    assert 'label=" global"' in edge and " reg" not in edge, edge


def charged_block_barriers(plan, index) -> float:
    """Block barriers per block the cost model charges, from the SIMT model's own counters of a run."""
    g = plan.graph
    ks = asim.simulate(plan, asim.random_inputs(g)).stats.kernels[index]
    return sum(s.block_barriers + s.tree_barriers + s.shuffle_barriers for s in ks.stages) / ks.grid


def test_kernel_and_graph_views_show_the_block_barriers_the_cost_model_charges():
    plan = asim.compile(asim.workload("paper_fig7"), "astitch", "V100")
    want = charged_block_barriers(plan, 0)
    # the reductions' barriers come on top of the stage barriers the plan counts (the old text showed only those)
    assert want > plan.kernels[0].block_barriers
    at = app(view="Kernel", strategy="astitch")
    assert_clean(at)
    assert f"{want:g} block barrier(s) per block" in page_text(at)
    assert "0 block barrier(s)" not in page_text(at)
    at = app(view="Graph", strategy="astitch")
    (picker,) = [b for b in at.selectbox if b.label == "Highlight a kernel"]
    picker.select(1).run()                      # position 1: kernel 0 (position 0 is "(none)")
    assert_clean(at)
    assert f"{want:g} block barrier(s) per block" in page_text(at)


def test_graph_view_says_why_each_kernel_ends_from_the_plan():
    plan = asim.compile(asim.workload("paper_fig7"), "xla", "V100")
    at = app(view="Graph", strategy="xla")
    assert_clean(at)
    text = page_text(at)
    for k in plan.kernels:
        for e in k.ends:
            assert e.why in text, (k.name, e.why)
    dot = graph_dot(at)
    assert "ends at power.1 (expensive_reused)" in dot          # next to its kernel, in the picture


def test_data_movement_lists_which_reads_the_l2_served():
    """Issue 28: the cost model serves a tensor re-read while it is in the L2 at the L2's bandwidth; the Data
    movement view lists every global read with the bytes the L2 served and the kernel that left the tensor
    there -- what ``simulate`` recorded, not a decision of its own."""
    from astitch_sim.frontends.workloads import workload_inputs
    at = app(view="Data movement", workload="layernorm", shape="rows:64,cols:128", strategy="unfused", gpu="H100")
    assert_clean(at)
    table = next(d.value for d in at.dataframe if "resident since" in d.value.columns)
    g = asim.workload("layernorm", rows=64, cols=128)
    res = asim.simulate(asim.compile(g, strategy="unfused", gpu="H100"), workload_inputs(g))
    want = [(n, t.read_bytes, round(t.l2_read_bytes)) for ks in res.stats.kernels for s in ks.stages
            for n, t in s.tensors.items() if t.read_sectors]
    got = list(zip(table["tensor"], table["read bytes"], table["from L2"], strict=True))
    assert got == want
    assert table["from L2"].sum() == round(res.stats.l2_read_bytes) > 0
    xc = table[table["tensor"] == "xc"]                 # written by op.2, re-read from the L2 by op.3 and op.8
    assert (xc["L2 %"] == 100).all() and set(xc["resident since"]) == {"k2 op.2:xc", "k3 op.3:xc_sq"}
    assert table[table["tensor"] == "x"]["resident since"].iloc[0] == "-"    # the input's first read: DRAM
    assert "came from the L2" in page_text(at)
    bars = next(chart_frames(ch)[0] for ch in at.get("vega_lite_chart")
                if "traffic" in chart_frames(ch)[0].columns and "L2 hit read" in set(chart_frames(ch)[0]["traffic"]))
    assert bars[bars["traffic"] == "L2 hit read"]["bytes"].sum() > 0


@pytest.mark.parametrize("view", VIEWS)
def test_every_view_of_a_stage_over_a_view_of_its_tensors(view):
    """A PyTorch group norm (``test_data_reuse.group_norm_nchw``), pasted as StableHLO: astitch's last stage
    computes ``[N, C, H, W]`` over the statistics' ``[N, G, rest]`` domain (issue 28).  Every view draws it, and the
    Kernel view shows the plan's note saying so."""
    from astitch_sim.frontends.to_stablehlo import to_stablehlo
    from test_data_reuse import group_norm_nchw
    text = to_stablehlo(group_norm_nchw(n=2, c=8, h=4, w=4, groups=2))
    at = AppTest.from_file(APP, default_timeout=180)
    at.query_params["view"] = view
    at.run()
    at.radio(key="source").set_value("Your HLO").run()
    at.text_area(key="hlo_text").input(text).run()
    assert_clean(at)
    for kind, least in DRAWS[view]:
        assert len(at.get(kind)) >= least, (view, kind)
    if view == "Kernel":
        assert "adaptive thread mapping over a view" in page_text(at)


def test_every_cost_model_term_has_a_name_and_a_colour_in_the_explorer(monkeypatch):
    """The Compare view's breakdown names each term of ``KernelStats.breakdown`` and colours it; a term added to
    ``simt/cost.py`` (the overlap across stages, the imbalance of idle blocks) needs both, or it shows under its
    field name in a colour of another term."""
    import sys
    monkeypatch.syspath_prepend(str(Path(APP).parent))
    sys.modules.pop("explorer.charts", None)
    from explorer.charts import TERM_COLOURS, TERMS
    from astitch_sim.figures.charts import BREAKDOWN_ORDER
    assert set(TERMS) == set(BREAKDOWN_ORDER)
    assert len(TERM_COLOURS) == len(TERMS) == len(set(TERM_COLOURS))
