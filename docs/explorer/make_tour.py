"""Re-make the README's tour screenshots: ``python docs/explorer/make_tour.py [OUT_DIR]`` (needs playwright and
Debian's chromium, like tests/app/test_explorer_browser.py, which opens the same links).  Starts
``streamlit run`` on a free port, opens each view by its link (the query parameters), waits until every chart
is drawn, scrolls to the part the tour shows, refuses a page with an exception on it, and saves
``N-view.png`` in ``OUT_DIR`` (default: this folder) as a palette PNG (``SHRINK``: a few tens of KiB each,
so the repository stays small; the colours of the explorer's pictures are few)."""
import socket
import subprocess
import sys
import time
import urllib.request
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
OUT = Path(__file__).resolve().parent
ARGS = ["--headless", "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
        "--disable-background-networking", "--disable-component-update", "--disable-sync"]
#: (file name, the link's query, the text to scroll to or None: the top of the page)
TOUR = [("1-compare", "view=Compare", None), ("2-graph", "view=Graph&node=power.1", None),
        ("3-kernel", "view=Kernel&node=power.1", None),
        ("4-thread-mapping", "view=Thread+mapping&workload=softmax&shape=rows:750000,cols:32", None),
        ("5-data-movement", "view=Data+movement", None),
        # a grid barrier to step over (at 4x8 the astitch plan has none)
        ("6-step-through", "view=Data+movement&workload=paper_fig7&shape=n:64,c:128", "Step through one thread"),
        ("7-timeline", "view=Timeline", None), ("8-code", "view=Code&node=power.1", None),
        ("9-what-if", "view=What-if&off=global_stitching", None)]
#: colours kept per screenshot (a palette PNG): the pages are flat colours, text and thin lines
SHRINK = 96
#: how the charts show they are drawn: Vega-Lite renders a canvas or an svg, graphviz an svg
DRAWN = ("() => [...document.querySelectorAll('[data-testid=stVegaLiteChart]')].every(c => c.querySelector("
         "'canvas, svg')) && [...document.querySelectorAll('[data-testid=stGraphVizChart]')].every(c => "
         "c.querySelector('svg'))")
IDLE = ("() => { const s = document.querySelector('[data-testid=stStatusWidget]');"
        " return !s || !s.innerText.includes('Running'); }")


def settle(page) -> None:
    """Wait until the script has run and every chart on the page is drawn."""
    page.wait_for_selector("[data-testid=stSidebar]", timeout=60_000)
    time.sleep(1.0)
    page.wait_for_function(IDLE, timeout=120_000)
    page.wait_for_function(DRAWN, timeout=120_000)
    time.sleep(2.0)                     # Vega's transitions, graphviz's layout


def clean(page, name: str) -> None:
    """A tour picture never shows an error: stop if the page has an exception or a traceback."""
    body = page.inner_text("body")
    if page.locator("[data-testid=stException]").count() or "Traceback" in body:
        raise SystemExit(f"{name}: the page shows an exception:\n{body[:2000]}")


def shrink(path: Path) -> None:
    """Rewrite ``path`` as a palette PNG of at most ``SHRINK`` colours."""
    from PIL import Image
    with Image.open(path) as im:
        small = im.convert("RGB").quantize(colors=SHRINK, method=Image.Quantize.MEDIANCUT, dither=Image.Dither.NONE)
    small.save(path, optimize=True)


#: the browser window the pictures show
VIEWPORT = {"width": 1500, "height": 1250}


def shoot(page, base: str, out: Path) -> list:
    """Every tour picture, in order, at ``VIEWPORT`` (the page's own size is restored after); returns the paths."""
    paths, before = [], page.viewport_size
    page.set_viewport_size(VIEWPORT)
    for name, query, scroll_to in TOUR:
        page.goto(f"{base}/?{query}")
        settle(page)
        clean(page, name)
        if scroll_to:
            page.get_by_text(scroll_to).first.evaluate("e => e.scrollIntoView({block: 'start'})")
            time.sleep(1.0)
        path = out / f"{name}.png"
        page.screenshot(path=str(path))
        shrink(path)
        paths.append(path)
        print(path, f"{path.stat().st_size // 1024} KiB")
    if before:
        page.set_viewport_size(before)
    return paths


def main(out: Path = OUT) -> None:
    from playwright.sync_api import sync_playwright

    from astitch_sim.cli import EXPLORE_FLAGS
    out.mkdir(parents=True, exist_ok=True)
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    server = subprocess.Popen([sys.executable, "-m", "streamlit", "run", str(ROOT / "app" / "streamlit_app.py"),
                               "--server.port", str(port), "--server.headless", "true"] + EXPLORE_FLAGS,
                              stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    base = f"http://127.0.0.1:{port}"
    try:
        for _ in range(120):
            try:
                urllib.request.urlopen(base + "/_stcore/health", timeout=2)
                break
            except OSError:
                time.sleep(0.5)
        with sync_playwright() as p:
            browser = p.chromium.launch(executable_path="/usr/bin/chromium", args=ARGS)
            shoot(browser.new_page(viewport=VIEWPORT), base, out)
            browser.close()
    finally:
        server.terminate()
        server.wait(timeout=30)


if __name__ == "__main__":
    main(Path(sys.argv[1]) if len(sys.argv) > 1 else OUT)
