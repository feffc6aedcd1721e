"""The explorer in a real browser: ``streamlit run`` on a free localhost port, driven by Playwright
in Debian's chromium.  Opens the page, switches workload, strategy and view, sees the graph and a
chart drawn, finds no exception text, and saves a screenshot.

Needs ``playwright`` (the test extra) and Debian's ``chromium`` (``apt-get install -y chromium``;
Playwright's own browser download is not used).  Skipped, saying why, where either is missing;
``.ci/run`` installs chromium so CI always runs it.  ``ASTITCH_SCREENSHOTS=DIR`` keeps the
screenshots.  The README's tour is made by ``docs/explorer/make_tour.py``, which the last test here runs.
"""
import os
import shutil
import socket
import subprocess
import sys
import time
import urllib.request
from pathlib import Path

import pytest

import astitch_sim as asim
from anchor import TESTS_FILE

ROOT = Path(TESTS_FILE).resolve().parents[1]
CHROMIUM = os.environ.get("ASTITCH_CHROMIUM") or shutil.which("chromium") or "/usr/bin/chromium"
ARGS = ["--headless", "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
        "--disable-background-networking", "--disable-component-update", "--disable-sync"]

pytest.importorskip("streamlit", reason="the explorer needs Streamlit: pip install -e '.[test]'")
playwright = pytest.importorskip("playwright.sync_api", reason="the browser test needs playwright: "
                                 "pip install -e '.[test]'")
if not Path(CHROMIUM).exists():
    pytest.skip(f"Debian's chromium is not installed ({CHROMIUM} missing): apt-get install -y chromium",
                allow_module_level=True)

pytestmark = pytest.mark.slow


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@pytest.fixture(scope="module")
def server():
    """``streamlit run app/streamlit_app.py`` on a free port, stopped after the module."""
    port = free_port()
    from astitch_sim.cli import EXPLORE_FLAGS
    cmd = [sys.executable, "-m", "streamlit", "run", str(ROOT / "app" / "streamlit_app.py"),
           "--server.port", str(port), "--server.address", "127.0.0.1", "--server.headless", "true",
           "--server.fileWatcherType", "none"] + EXPLORE_FLAGS
    log = open(Path(os.environ.get("TMPDIR", "/tmp")) / f"astitch-explorer-{port}.log", "w")
    proc = subprocess.Popen(cmd, cwd=ROOT, stdout=log, stderr=subprocess.STDOUT)
    url = f"http://127.0.0.1:{port}"
    deadline = time.time() + 90
    while time.time() < deadline:
        try:
            if urllib.request.urlopen(f"{url}/_stcore/health", timeout=2).status == 200:
                break
        except OSError:
            time.sleep(0.5)
        if proc.poll() is not None:
            raise RuntimeError(f"streamlit exited with {proc.returncode}; see {log.name}")
    else:
        proc.terminate()
        raise RuntimeError(f"streamlit did not answer on {url} within 90 s; see {log.name}")
    yield url
    proc.terminate()
    try:
        proc.wait(timeout=20)
    except subprocess.TimeoutExpired:
        proc.kill()
    log.close()


@pytest.fixture(scope="module")
def page(server):
    with playwright.sync_playwright() as p:
        browser = p.chromium.launch(executable_path=CHROMIUM, args=ARGS)
        pg = browser.new_page(viewport={"width": 1500, "height": 1000})
        yield pg
        browser.close()


def settle(pg, timeout=120_000):
    """Wait until Streamlit has finished running the script (no 'Running' status widget)."""
    pg.wait_for_selector("[data-testid=stSidebar]", timeout=timeout)
    time.sleep(0.5)
    pg.wait_for_function("() => { const s = document.querySelector('[data-testid=stStatusWidget]');"
                         " return !s || !s.innerText.includes('Running'); }", timeout=timeout)
    time.sleep(0.8)


def no_exception(pg):
    assert pg.locator("[data-testid=stException]").count() == 0
    body = pg.inner_text("body")
    assert "Traceback" not in body and "Unexpected" not in body, body[:2000]


def pick(pg, label: str, option: str):
    """Choose ``option`` in the selectbox labelled ``label``."""
    box = pg.locator("[data-testid=stSelectbox]").filter(has_text=label).first
    box.locator("input").first.click()
    pg.keyboard.type(option)
    time.sleep(0.3)
    pg.keyboard.press("Enter")
    settle(pg)


def view(pg, name: str):
    pg.locator("[data-testid=stMain] [data-testid=stRadio] label").filter(has_text=name).first.click()
    settle(pg)


def shot(pg, tmp_path, name):
    out = Path(os.environ.get("ASTITCH_SCREENSHOTS") or tmp_path)
    out.mkdir(parents=True, exist_ok=True)
    path = out / f"{name}.png"
    pg.screenshot(path=str(path))
    assert path.stat().st_size > 10_000
    return path


def test_open_switch_and_see_pictures(server, page, tmp_path):
    pg = page
    t0 = time.time()
    pg.goto(server + "/")
    settle(pg)
    opened = time.time() - t0
    no_exception(pg)
    assert "paper_fig7" in pg.inner_text("body")
    # the Compare view: charts drawn (Vega-Lite renders a canvas or svg)
    pg.wait_for_selector("[data-testid=stVegaLiteChart] canvas, [data-testid=stVegaLiteChart] svg", timeout=60_000)
    assert "astitch vs xla" in pg.inner_text("body")
    shot(pg, tmp_path, "compare")
    # the Graph view: graphviz drawn as SVG with the kernel cluster and the Figure 7 nodes
    view(pg, "Graph")
    svg = pg.wait_for_selector("[data-testid=stGraphVizChart] svg", timeout=60_000)
    assert "power.1" in svg.text_content() and "kernel 0" in svg.text_content()
    no_exception(pg)
    shot(pg, tmp_path, "graph")
    # switch the strategy: xla plans four kernels
    pick(pg, "Strategy", "xla")
    assert "4 kernel(s)" in pg.inner_text("body")
    assert "kernel 3" in pg.locator("[data-testid=stGraphVizChart] svg").first.text_content()
    no_exception(pg)
    # switch the workload: softmax, then the thread-mapping view draws xla and astitch side by side
    pick(pg, "Workload", "softmax")
    assert "softmax" in pg.inner_text("body")
    view(pg, "Thread mapping")
    pg.wait_for_selector("[data-testid=stVegaLiteChart] canvas, [data-testid=stVegaLiteChart] svg", timeout=60_000)
    assert pg.locator("[data-testid=stVegaLiteChart]").count() >= 2
    no_exception(pg)
    shot(pg, tmp_path, "mapping")
    # the URL carries the state (a shareable link)
    assert "workload=softmax" in pg.url and "strategy=xla" in pg.url and "view=Thread" in pg.url
    # the timeline view draws its chart
    view(pg, "Timeline")
    pg.wait_for_selector("[data-testid=stVegaLiteChart] canvas, [data-testid=stVegaLiteChart] svg", timeout=60_000)
    no_exception(pg)
    print(f"page opened and settled in {opened:.1f} s")


def test_a_shared_link_opens_the_same_view(server, page, tmp_path):
    pg = page
    pg.goto(server + "/?workload=paper_fig7&shape=n:128,c:256&strategy=astitch&gpu=V100&view=Kernel&kernel=0")
    settle(pg)
    no_exception(pg)
    pg.wait_for_selector("[data-testid=stGraphVizChart] svg", timeout=60_000)
    body = pg.inner_text("body")
    assert "Kernel anatomy" in body and "blocks per wave" in body and "assume-relax-apply" in body


def test_bad_hlo_shows_the_message_in_the_page(server, page):
    pg = page
    pg.goto(server + "/")
    settle(pg)
    pg.locator("[data-testid=stSidebar] [data-testid=stRadio] label").filter(has_text="Your HLO").click()
    settle(pg)
    area = pg.locator("[data-testid=stSidebar] textarea").first
    area.fill("HloModule broken\n\nENTRY main {\n  ROOT y = f32[4] frobnicate(x)\n}\n")
    area.press("Control+Enter")
    settle(pg)
    alert = pg.wait_for_selector("[data-testid=stAlert]", timeout=30_000)
    assert "AStitchError" in alert.inner_text()
    assert pg.locator("[data-testid=stException]").count() == 0
    assert "Traceback" not in pg.inner_text("body")


@pytest.mark.parametrize("start_view", ["Kernel", "Code"])
def test_kernel_picker_survives_strategy_switches(server, page, start_view):
    """The kernel picker lists the plan's kernels by name; a strategy switch changes them, and the browser
    then sends back the previous plan's label (a string) as the picker's value. Switching unfused -> xla ->
    astitch -> tvm, and Kernel -> Code, must show each plan's kernel, never a TypeError."""
    pg = page
    pg.goto(server + f"/?workload=paper_fig7&shape=n:128,c:256&strategy=unfused&gpu=V100&view={start_view}")
    settle(pg)
    no_exception(pg)
    for strategy in ("xla", "astitch", "tvm"):
        pick(pg, "Strategy", strategy)
        no_exception(pg)
        assert f"strategy={strategy}" in pg.url
        # the picker shows this plan's first kernel, not the label the previous plan's picker showed
        first = asim.compile(asim.workload("paper_fig7", n=128, c=256), strategy=strategy, gpu="V100").kernels[0]
        box = pg.locator("[data-testid=stMain] [data-testid=stSelectbox]").filter(has_text="Kernel").first
        assert box.locator("input").first.input_value() == f"kernel 0: {first.name} ({first.kind})"
    view(pg, "Code" if start_view == "Kernel" else "Kernel")
    no_exception(pg)
    pick(pg, "Strategy", "unfused")
    no_exception(pg)


@pytest.mark.parametrize("signame", ["SIGTERM", "SIGHUP"])
def test_astitch_explore_stops_its_server_when_it_is_stopped(signame):
    """``astitch explore`` serves the app through a Streamlit child; killing ``astitch explore`` (a closed
    terminal, a supervisor) must stop that server too (it kept running on its port)."""
    import signal
    port = free_port()
    env = dict(os.environ, PYTHONPATH=str(ROOT) + os.pathsep + os.environ.get("PYTHONPATH", ""))
    proc = subprocess.Popen([sys.executable, "-m", "astitch_sim", "explore", "--no-browser", "--port", str(port)],
                            cwd=ROOT, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    health = f"http://127.0.0.1:{port}/_stcore/health"

    def answers() -> bool:
        try:
            return urllib.request.urlopen(health, timeout=2).status == 200
        except OSError:
            return False

    try:
        deadline = time.time() + 90
        while not answers():
            assert proc.poll() is None and time.time() < deadline, "the explorer did not start"
            time.sleep(0.5)
        proc.send_signal(getattr(signal, signame))
        assert proc.wait(timeout=30) == 0
        deadline = time.time() + 20
        while answers() and time.time() < deadline:
            time.sleep(0.5)
        assert not answers(), f"the Streamlit server still answers on port {port} after {signame}"
    finally:
        if proc.poll() is None:
            proc.kill()


def test_the_readme_tour_is_made_by_its_script(server, page, tmp_path):
    """``docs/explorer/make_tour.py`` makes every picture the README's tour shows (and only those), from
    pages without an exception, each a small palette PNG -- and the committed pictures are its output's
    kind (palette PNGs of the same size), so they were made by it, not by hand."""
    import importlib.util
    import re

    from PIL import Image
    spec = importlib.util.spec_from_file_location("make_tour", ROOT / "docs" / "explorer" / "make_tour.py")
    tour = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(tour)
    shown = re.findall(r"\(docs/explorer/([\w-]+)\.png\)", (ROOT / "README.md").read_text())
    assert shown == [name for name, *_ in tour.TOUR]
    made = tour.shoot(page, server, tmp_path)
    assert [p.stem for p in made] == shown
    for path in made + [ROOT / "docs" / "explorer" / f"{name}.png" for name in shown]:
        with Image.open(path) as im:
            assert im.mode == "P" and im.size == tuple(tour.VIEWPORT.values()), (path, im.mode, im.size)
        assert 10_000 < path.stat().st_size < 150_000, path
