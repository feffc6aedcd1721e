"""The Streamlit explorer under Streamlit's AppTest: every view with the default input (the paper's
Figure 7), a pasted HLO module and a bad one (the AStitchError's message in the page, no exception),
shareable state in the query parameters, the what-if switches, every catalog workload."""
from pathlib import Path

import pytest

pytest.importorskip("streamlit", reason="the explorer needs the app extra: pip install -e '.[app]'")
from streamlit.testing.v1 import AppTest  # noqa: E402

import astitch_sim as asim  # noqa: E402

APP = str(Path(__file__).resolve().parents[1] / "app" / "streamlit_app.py")
HLO = Path(__file__).resolve().parent / "fixtures" / "hlo"
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
    assert (df["max error"] < 1e-4).all()
    assert "astitch vs xla" in page_text(at)
    searched = [e for e in at.expander if "fusionstitching searched" in e.label]
    assert len(searched) == 1                       # only the search-based strategy records a search
    shown = searched[0].code[0].value
    assert shown.startswith("search: ") and "chosen" in shown and "the winner" in shown


def test_code_view_shows_the_generated_kernel_and_says_no_gpu_times_exist():
    at = app(view="Code", node="power.1")
    assert_clean(at)
    html = page_text(at)
    assert "def stitch_0_multiply_1(" in html and "class='row hl'" in html
    assert "No GPU measurements exist" in html
    assert at.session_state["node"] == "power.1"


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
    assert list(df["kernels"]) == [4, 1, 3] and list(df["grid barriers"])[1:] == [2, 0]
    assert (df["max error"] < 1e-4).all()


def test_what_if_from_a_link():
    at = app(view="Kernel", off="horizontal_packing,register_reuse", block="256")
    assert_clean(at)
    assert at.session_state["opt:horizontal_packing"] is False
    assert at.session_state["opt:max_block_threads"] == 256
    assert "max_block_threads=256" in page_text(at)


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
    assert "one row per block" in text and "32 row(s) per block" in text        # xla vs astitch


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
