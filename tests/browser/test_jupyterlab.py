"""A real browser: JupyterLab (headless) runs the ldmatrix notebook, a widget control is changed
and the address table is seen to change; a screenshot of each widget goes to docs/screenshots/.

Skips, with the reason, when Playwright, Debian's chromium or JupyterLab is missing (install:
``pip install playwright jupyterlab`` and ``apt-get install -y chromium``).
"""
from __future__ import annotations

import os
import shutil
import socket
import subprocess
import sys
import time
import urllib.request
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
CHROMIUM = Path(os.environ.get("PTXLAB_CHROMIUM", "/usr/bin/chromium"))
SHOTS = ROOT / "docs" / "screenshots"
NOTEBOOK = "02_ldmatrix"
BROWSER_ARGS = ["--headless", "--no-sandbox", "--disable-gpu", "--disable-background-networking",
                "--disable-component-update", "--disable-sync", "--no-first-run"]

sync_api = pytest.importorskip("playwright.sync_api", reason="playwright is not installed "
                               "(pip install playwright)")
pytest.importorskip("jupyterlab", reason="jupyterlab is not installed (pip install jupyterlab)")
if not CHROMIUM.exists():
    pytest.skip(f"no chromium at {CHROMIUM} (apt-get install -y chromium)", allow_module_level=True)

pytestmark = pytest.mark.timeout(600) if hasattr(pytest.mark, "timeout") else []


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@pytest.fixture(scope="module")
def lab(tmp_path_factory):
    """A JupyterLab server over a scratch copy of the notebook; yields its base URL and token."""
    work = tmp_path_factory.mktemp("lab")
    shutil.copy(ROOT / "course" / "source" / NOTEBOOK / f"{NOTEBOOK}.ipynb", work)
    shutil.copy(ROOT / "course" / "source" / "01_warps_lanes_smem" / "01_warps_lanes_smem.ipynb", work)
    port, token = _free_port(), "ptxlab-browser-test"
    env = dict(os.environ, PYTHONPATH=os.pathsep.join(
        p for p in (str(ROOT), os.environ.get("PYTHONPATH", "")) if p),
        JUPYTER_CONFIG_DIR=str(work / ".jupyter"), JUPYTER_RUNTIME_DIR=str(work / ".runtime"))
    log = open(work / "lab.log", "w")
    proc = subprocess.Popen(
        [sys.executable, "-m", "jupyter", "lab", "--no-browser", f"--port={port}",
         "--ip=127.0.0.1", f"--ServerApp.token={token}", "--ServerApp.password=",
         f"--ServerApp.root_dir={work}", "--LabApp.expose_app_in_browser=True",
         "--ServerApp.disable_check_xsrf=True", "--LabApp.news_url=",
         "--LabApp.collaborative=False", "--allow-root"],
        cwd=work, env=env, stdout=log, stderr=subprocess.STDOUT)
    url = f"http://127.0.0.1:{port}"
    deadline = time.time() + 90
    while time.time() < deadline:
        try:
            urllib.request.urlopen(f"{url}/api/status?token={token}", timeout=2)
            break
        except Exception:
            if proc.poll() is not None:
                break
            time.sleep(0.5)
    else:
        proc.terminate()
        pytest.fail(f"JupyterLab did not start: {(work / 'lab.log').read_text()[-2000:]}")
    if proc.poll() is not None:
        pytest.fail(f"JupyterLab exited: {(work / 'lab.log').read_text()[-2000:]}")
    yield url, token
    proc.terminate()
    try:
        proc.wait(timeout=15)
    except subprocess.TimeoutExpired:
        proc.kill()
    log.close()


def _open_and_run(page, url: str, token: str, name: str) -> None:
    page.goto(f"{url}/lab/tree/{name}.ipynb?token={token}", wait_until="domcontentloaded")
    page.wait_for_function("window.jupyterapp !== undefined", timeout=60_000)
    page.wait_for_selector(".jp-Notebook .jp-Cell", timeout=60_000)
    # wait until the kernel is idle before running everything
    page.wait_for_function(
        "() => { const w = window.jupyterapp.shell.currentWidget;"
        " return w && w.sessionContext && w.sessionContext.session &&"
        " w.sessionContext.session.kernel && w.sessionContext.session.kernel.status === 'idle'; }",
        timeout=60_000)
    page.evaluate("window.jupyterapp.commands.execute('notebook:run-all-cells')")
    # done when every code cell has run, or as soon as one fails (Run All stops there)
    page.wait_for_function(
        "() => { const w = window.jupyterapp.shell.currentWidget;"
        " if (document.querySelector(\"[data-mime-type='application/vnd.jupyter.stderr']\")"
        "     && w.sessionContext.session.kernel.status === 'idle') return true;"
        " const cells = w.content.widgets.filter(c => c.model.type === 'code');"
        " return cells.length > 0 && cells.every(c => c.model.executionCount !== null)"
        " && w.sessionContext.session.kernel.status === 'idle'; }",
        timeout=300_000)
    failed = page.locator(".jp-OutputArea-output[data-mime-type='application/vnd.jupyter.stderr']")
    texts = [t for t in failed.all_inner_texts() if "Error" in t or "Traceback" in t]
    assert not texts, f"{name}: a cell failed in the browser: {texts[0][-800:]}"


def _widget_output(page, text: str):
    """The output area of the widget whose rendered HTML contains ``text``."""
    loc = page.locator(".jp-OutputArea-output .widget-vbox", has_text=text).first
    loc.wait_for(timeout=60_000)
    loc.scroll_into_view_if_needed()
    return loc


def test_ldmatrix_notebook_widgets_update_live(lab):
    url, token = lab
    SHOTS.mkdir(parents=True, exist_ok=True)
    with sync_api.sync_playwright() as p:
        browser = p.chromium.launch(executable_path=str(CHROMIUM), args=BROWSER_ARGS)
        page = browser.new_page(viewport={"width": 1500, "height": 1000})
        try:
            _open_and_run(page, url, token, NOTEBOOK)

            table = _widget_output(page, "matrices side by side")
            assert "ldmatrix.sync.aligned.m8n8.x4" in table.inner_text()
            table.screenshot(path=str(SHOTS / "address_table.png"))
            table.get_by_role("button", name=".x2").first.click()
            page.wait_for_function(
                "() => [...document.querySelectorAll('caption')].some("
                "c => c.textContent.includes('m8n8.x2.shared'))", timeout=30_000)
            assert "m8n8.x2" in table.inner_text()
            formula = table.locator("input[type='text']").first
            formula.fill("base + (lane % 8) * stride + (lane // 8) * 16")
            page.wait_for_function(
                "() => document.body.innerText.includes('every address lane matches')",
                timeout=30_000)
            table.screenshot(path=str(SHOTS / "address_table_formula.png"))

            fmap = _widget_output(page, "lane 9 holds")
            fmap.screenshot(path=str(SHOTS / "fragment_map.png"))
        finally:
            browser.close()


def test_bank_view_screenshot(lab):
    url, token = lab
    with sync_api.sync_playwright() as p:
        browser = p.chromium.launch(executable_path=str(CHROMIUM), args=BROWSER_ARGS)
        page = browser.new_page(viewport={"width": 1500, "height": 1000})
        try:
            _open_and_run(page, url, token, "01_warps_lanes_smem")
            view = _widget_output(page, "wavefront")
            assert "extra from bank conflicts" in view.inner_text()
            view.screenshot(path=str(SHOTS / "bank_view.png"))
        finally:
            browser.close()
