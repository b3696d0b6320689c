"""A real browser: JupyterLab (headless) runs the ldmatrix notebook, a widget control is changed
and the address table is seen to change; a screenshot of each widget goes to docs/screenshots/.

Skips, with the reason, when Playwright, Debian's chromium or JupyterLab is missing (install:
``pip install playwright jupyterlab`` and ``apt-get install -y chromium``).

JupyterLab 4 skips rendering cells outside the viewport by default (``windowingMode`` =
``contentVisibility``): after "Run All" has scrolled to the end, an off-screen widget has no
rendered text, so locators see nothing. The scratch lab therefore attaches and renders every
cell (``windowingMode: none``), and each widget is scrolled into view before it is read.
"""
from __future__ import annotations

import json
import os
import re
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
#: wide enough for the fragment map's four matrices two by two beside one lane's registers
VIEWPORT = {"width": 1800, "height": 1000}
#: JupyterLab user settings for the scratch lab: render every cell (widgets off-screen keep their
#: text), never ask about news (its toast would cover the page), no sidebar over the notebook.
LAB_SETTINGS = {
    "@jupyterlab/notebook-extension/tracker.jupyterlab-settings": {"windowingMode": "none"},
    "@jupyterlab/apputils-extension/notification.jupyterlab-settings": {
        "fetchNews": "false", "checkForUpdates": False},
}

sync_api = pytest.importorskip("playwright.sync_api", reason="playwright is not installed "
                               "(pip install playwright)")
pytest.importorskip("jupyterlab", reason="jupyterlab is not installed (pip install jupyterlab)")
if not CHROMIUM.exists():
    pytest.skip(f"no chromium at {CHROMIUM} (apt-get install -y chromium)", allow_module_level=True)

pytestmark = pytest.mark.timeout(180)  # each test runs in ~15 s on 2 cores


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
    for rel, settings in LAB_SETTINGS.items():
        path = work / ".jupyter" / "lab" / "user-settings" / rel
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(json.dumps(settings))
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


_CODE_CELLS = ("window.jupyterapp.shell.currentWidget.content.widgets"
               ".filter(c => c.model.type === 'code')")
_KERNEL_IDLE = "window.jupyterapp.shell.currentWidget.sessionContext.session.kernel.status === 'idle'"
_ANSI = re.compile(r"\x1b\[[0-9;]*m")


def _open_and_run(page, url: str, token: str, name: str) -> None:
    """Open ``name``.ipynb, run every cell and fail with the traceback if one raises."""
    # a workspace of its own, reset: nothing restored from an earlier page (another notebook's
    # tab could otherwise become the current widget)
    page.goto(f"{url}/lab/workspaces/{name}/tree/{name}.ipynb?reset&token={token}",
              wait_until="domcontentloaded")
    page.wait_for_function("window.jupyterapp !== undefined", timeout=60_000)
    page.wait_for_selector(".jp-Notebook .jp-Cell", timeout=60_000)
    # wait until this notebook is the current widget and its kernel is idle
    page.wait_for_function(
        "name => { const w = window.jupyterapp.shell.currentWidget;"
        " return !!(w && w.context && w.context.path === name && w.sessionContext &&"
        " w.sessionContext.session && w.sessionContext.session.kernel &&"
        " w.sessionContext.session.kernel.status === 'idle'); }", arg=f"{name}.ipynb",
        timeout=60_000)
    page.evaluate("() => { window.jupyterapp.shell.collapseLeft();"
                  " window.jupyterapp.shell.collapseRight(); }")
    page.evaluate("window.jupyterapp.commands.execute('notebook:run-all-cells')")
    # done when every code cell has run, or as soon as one raises (Run All stops there); read the
    # notebook model, not the page, so that nothing depends on what is scrolled into view
    page.wait_for_function(
        f"() => {_KERNEL_IDLE} && ({_CODE_CELLS}.some(c => c.model.outputs.toJSON()"
        "   .some(o => o.output_type === 'error'))"
        f" || {_CODE_CELLS}.every(c => c.model.executionCount !== null))",
        timeout=150_000)
    errors = page.evaluate(
        f"() => {_CODE_CELLS}.flatMap(c => c.model.outputs.toJSON())"
        ".filter(o => o.output_type === 'error')"
        ".map(o => (o.traceback || []).join('\\n') || (o.ename + ': ' + o.evalue))")
    assert not errors, f"{name}: a cell failed in the browser:\n{_ANSI.sub('', errors[0])[-1500:]}"


def _widget_output(page, text: str):
    """The widget (its outermost box) whose rendered content contains ``text``, in view."""
    loc = page.locator(".jp-OutputArea-output > .widget-vbox", has_text=text).first
    loc.wait_for(timeout=60_000)
    loc.scroll_into_view_if_needed()
    return loc


#: what a widget draws (controls, tables, text), as opposed to boxes that span the whole output
_DRAWN = "table, input, select, button, label, .widget-label, .widget-html-content b, " \
         ".widget-html-content span, .widget-html-content i"


def _screenshot(page, widget, name: str) -> None:
    """Save ``widget`` whole to docs/screenshots/``name``, cropped to what it draws: the window is
    made tall enough for it first (nothing past the notebook's own scroll area can be seen)."""
    size = page.viewport_size
    height = widget.evaluate("e => Math.ceil(e.getBoundingClientRect().height)")
    page.set_viewport_size({"width": size["width"], "height": max(size["height"], height + 200)})
    # Lumino lays the panels out again on the next frames; scroll once the notebook has grown
    page.wait_for_function(
        "e => { e.scrollIntoView({block: 'center'}); const r = e.getBoundingClientRect();"
        " return r.top >= 0 && r.bottom <= window.innerHeight; }", arg=widget.element_handle(),
        timeout=10_000)
    clip = widget.evaluate(
        "(e, drawn) => { const r = e.getBoundingClientRect(); let right = r.left;"
        " for (const d of e.querySelectorAll(drawn)) {"
        "   const b = d.getBoundingClientRect(); if (b.width > 0) right = Math.max(right, b.right); }"
        " return {x: r.left, y: r.top, width: Math.min(right + 8, r.right) - r.left,"
        "         height: r.height}; }", _DRAWN)
    page.screenshot(path=str(SHOTS / name), clip=clip, animations="disabled", caret="hide")
    page.set_viewport_size(size)


def test_ldmatrix_notebook_widgets_update_live(lab):
    url, token = lab
    SHOTS.mkdir(parents=True, exist_ok=True)
    expect = sync_api.expect
    with sync_api.sync_playwright() as p:
        browser = p.chromium.launch(executable_path=str(CHROMIUM), args=BROWSER_ARGS)
        page = browser.new_page(viewport=VIEWPORT)
        try:
            _open_and_run(page, url, token, NOTEBOOK)

            # the first address table: matrices side by side, .x4, a formula wrong past lane 7
            table = _widget_output(page, "matrices side by side")
            expect(table.locator("caption").first).to_contain_text(
                "ldmatrix.sync.aligned.m8n8.x4.shared.b16")
            expect(table).to_contain_text("lane(s) wrong: 8-31")
            _screenshot(page, table, "address_table.png")

            # a control changes: .x2 redraws the table (lanes 16-31 now ignored)
            table.get_by_role("button", name=".x2").first.click()
            expect(table.locator("caption").first).to_contain_text(
                "ldmatrix.sync.aligned.m8n8.x2.shared.b16", timeout=30_000)
            expect(table).to_contain_text("lane(s) wrong: 8-15")
            expect(table).to_contain_text("ignored (.x2)")

            # the learner types the right formula: every lane turns green
            formula = table.locator("input[type='text']").first
            formula.fill("base + (lane % 8) * stride + (lane // 8) * 16")
            expect(table).to_contain_text("every address lane matches", timeout=30_000)
            expect(table).not_to_contain_text("lane(s) wrong")
            formula.blur()
            _screenshot(page, table, "address_table_formula.png")

            fmap = _widget_output(page, "lane 9 holds")
            expect(fmap).to_contain_text("your formula matches every element")
            _screenshot(page, fmap, "fragment_map.png")
        finally:
            browser.close()


def test_bank_view_screenshot(lab):
    url, token = lab
    with sync_api.sync_playwright() as p:
        browser = p.chromium.launch(executable_path=str(CHROMIUM), args=BROWSER_ARGS)
        page = browser.new_page(viewport=VIEWPORT)
        try:
            _open_and_run(page, url, token, "01_warps_lanes_smem")
            view = _widget_output(page, "wavefront")
            sync_api.expect(view).to_contain_text("7 extra from bank conflicts")
            _screenshot(page, view, "bank_view.png")
            # an XOR swizzle spreads the eight rows over all 32 banks: the count redraws
            view.locator("input[type='text']").first.fill("chunk ^ (row % 8)")
            sync_api.expect(view).to_contain_text("1 wavefront(s) for 1 matrices "
                                                  "(conflict-free: 1); 0 extra", timeout=30_000)
        finally:
            browser.close()
