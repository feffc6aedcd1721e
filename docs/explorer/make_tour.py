"""Re-make the README's tour screenshots: ``python docs/explorer/make_tour.py`` (needs playwright and
Debian's chromium, like tests/app/test_explorer_browser.py).  Starts ``streamlit run`` on a free port,
opens each view by its link (the query parameters) and saves ``docs/explorer/N-view.png``."""
import socket
import subprocess
import sys
import time
import urllib.request
from pathlib import Path

from playwright.sync_api import sync_playwright

ROOT = Path(__file__).resolve().parents[2]
OUT = Path(__file__).resolve().parent
ARGS = ["--headless", "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
        "--disable-background-networking", "--disable-component-update", "--disable-sync"]
TOUR = [("1-compare", "view=Compare"), ("2-graph", "view=Graph&node=power.1"),
        ("3-kernel", "view=Kernel&node=power.1"),
        ("4-thread-mapping", "view=Thread+mapping&workload=softmax&shape=rows:750000,cols:32"),
        ("5-data-movement", "view=Data+movement"),
        ("6-step-through", "view=Data+movement&workload=paper_fig7&shape=n:64,c:128"),  # a grid barrier to step over
        ("7-timeline", "view=Timeline"), ("8-code", "view=Code&node=power.1"),
        ("9-what-if", "view=What-if&off=global_stitching")]


def main() -> None:
    from astitch_sim.cli import EXPLORE_FLAGS
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
            page = browser.new_page(viewport={"width": 1500, "height": 1250})
            for name, query in TOUR:
                page.goto(f"{base}/?{query}")
                page.wait_for_selector("[data-testid=stSidebar]", timeout=60_000)
                time.sleep(1.0)
                page.wait_for_function("() => { const s = document.querySelector('[data-testid=stStatusWidget]');"
                                       " return !s || !s.innerText.includes('Running'); }", timeout=120_000)
                time.sleep(2.5)
                page.screenshot(path=str(OUT / f"{name}.png"))
                print(OUT / f"{name}.png")
            browser.close()
    finally:
        server.terminate()


if __name__ == "__main__":
    main()
