"""Driving a real JupyterLab from the browser tests: start a server, open a notebook, run its
cells, read what they printed and drew, and take screenshots of single outputs.

JupyterLab 4 skips rendering cells outside the viewport by default (``windowingMode`` =
``contentVisibility``): an off-screen widget then has no rendered text, so locators see
nothing. The scratch labs therefore attach and render every cell (``windowingMode: none``), and
an output is scrolled into view before it is read. Cells are run one at a time through the
notebook's own command, so that a cell that raises (a graded cell without an answer) does not
stop the ones after it, as it would stop "Run All".
"""
from __future__ import annotations

import json
import os
import re
import socket
import subprocess
import sys
import time
import urllib.request
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
CHROMIUM = Path(os.environ.get("PTXLAB_CHROMIUM", "/usr/bin/chromium"))
SHOTS = ROOT / "docs" / "screenshots"
BROWSER_ARGS = ["--headless", "--no-sandbox", "--disable-gpu", "--disable-background-networking",
                "--disable-component-update", "--disable-sync", "--no-first-run"]
#: JupyterLab user settings for a scratch lab: render every cell (widgets off-screen keep their
#: text), never ask about news (its toast would cover the page).
LAB_SETTINGS = {
    "@jupyterlab/notebook-extension/tracker.jupyterlab-settings": {"windowingMode": "none"},
    "@jupyterlab/apputils-extension/notification.jupyterlab-settings": {
        "fetchNews": "false", "checkForUpdates": False},
}
ANSI = re.compile(r"\x1b\[[0-9;]*m")


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@contextmanager
def lab_server(root: Path, scratch: Path, *, config_path: Path | None = None
               ) -> Iterator[tuple[str, str]]:
    """A JupyterLab serving ``root`` (user settings and runtime files in ``scratch``, extra
    configuration from ``config_path`` as ``ptxlab open`` passes it); yields its URL and token."""
    for rel, settings in LAB_SETTINGS.items():
        path = scratch / ".jupyter" / "lab" / "user-settings" / rel
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(json.dumps(settings))
    port, token = _free_port(), "ptxlab-browser-test"
    env = dict(os.environ, PYTHONPATH=os.pathsep.join(
        p for p in (str(ROOT), os.environ.get("PYTHONPATH", "")) if p),
        JUPYTER_CONFIG_DIR=str(scratch / ".jupyter"), JUPYTER_RUNTIME_DIR=str(scratch / ".runtime"))
    if config_path is not None:
        env["JUPYTER_CONFIG_PATH"] = str(config_path)
    log_path = scratch / "lab.log"
    with open(log_path, "w") as log:
        proc = subprocess.Popen(
            [sys.executable, "-m", "jupyter", "lab", "--no-browser", f"--port={port}",
             "--ip=127.0.0.1", f"--ServerApp.token={token}", "--ServerApp.password=",
             f"--ServerApp.root_dir={root}", "--LabApp.expose_app_in_browser=True",
             "--ServerApp.disable_check_xsrf=True", "--LabApp.news_url=",
             "--LabApp.collaborative=False", "--allow-root"],
            cwd=root, env=env, stdout=log, stderr=subprocess.STDOUT)
        try:
            url = f"http://127.0.0.1:{port}"
            deadline = time.time() + 90
            while True:
                try:
                    urllib.request.urlopen(f"{url}/api/status?token={token}", timeout=2)
                    break
                except Exception:
                    if proc.poll() is not None or time.time() > deadline:
                        raise RuntimeError("JupyterLab did not start: "
                                           + log_path.read_text()[-2000:]) from None
                    time.sleep(0.5)
            yield url, token
        finally:
            proc.terminate()
            try:
                proc.wait(timeout=15)
            except subprocess.TimeoutExpired:
                proc.kill()


_PANEL = "window.jupyterapp.shell.currentWidget"
_KERNEL_IDLE = f"{_PANEL}.sessionContext.session.kernel.status === 'idle'"


def open_notebook(page, url: str, token: str, path: str, *, collapse_left: bool = False) -> None:
    """Open ``path`` (relative to the server's root) and wait for its kernel. The first time, the
    page loads a lab workspace of its own, reset (no tab of an earlier page can become the
    current one); later notebooks open in the same page, as from the file browser."""
    if page.url.startswith(url) and page.evaluate("() => window.jupyterapp !== undefined"):
        page.evaluate("path => { window.jupyterapp.commands.execute('docmanager:open', {path}); }",
                      path)
    else:
        workspace = re.sub(r"[^A-Za-z0-9_-]", "-", path)
        page.goto(f"{url}/lab/workspaces/{workspace}/tree/{path}?reset&token={token}",
                  wait_until="domcontentloaded")
        page.wait_for_function("window.jupyterapp !== undefined", timeout=60_000)
    page.wait_for_function(
        "path => { const w = window.jupyterapp.shell.currentWidget;"
        " return !!(w && w.context && w.context.path === path && w.content &&"
        " w.content.widgets.length && w.sessionContext && w.sessionContext.session &&"
        " w.sessionContext.session.kernel &&"
        " w.sessionContext.session.kernel.status === 'idle'); }", arg=path, timeout=60_000)
    page.evaluate("() => window.jupyterapp.shell.collapseRight()")
    if collapse_left:
        page.evaluate("() => window.jupyterapp.shell.collapseLeft()")


def close_notebook(page) -> None:
    """Shut the open notebook's kernel down and close it, unsaved."""
    page.evaluate(f"async () => {{ const w = {_PANEL}; await w.sessionContext.shutdown();"
                  " w.dispose(); }")


def _wait_until_run(page, indices: list[int] | None, timeout_ms: int) -> None:
    page.wait_for_function(
        f"indices => {_KERNEL_IDLE} && {_PANEL}.content.widgets.every((c, i) =>"
        "  (indices !== null && !indices.includes(i)) || c.model.type !== 'code' ||"
        "  (c.model.executionCount !== null && c.model.executionState !== 'running'))",
        arg=indices, timeout=timeout_ms)


def run_cells(page, indices: list[int], *, timeout_ms: int = 150_000) -> None:
    """Run the cells at ``indices`` one after the other, each to its end, whatever they raise."""
    page.evaluate(
        f"async indices => {{ const nb = {_PANEL}.content;"
        "  for (const i of indices) { nb.activeCellIndex = i;"
        "    await window.jupyterapp.commands.execute('notebook:run-cell'); } }", indices)
    _wait_until_run(page, indices, timeout_ms)


def run_all(page, *, stop_on_error: bool = False, timeout_ms: int = 150_000) -> None:
    """"Run All" on the open notebook. Unless ``stop_on_error``, every code cell is tagged
    ``raises-exception`` first (in the page only), so that one that raises, as a graded cell
    without an answer does, stops nothing after it."""
    if not stop_on_error:
        page.evaluate(f"() => {_PANEL}.content.widgets.forEach(c => {{"
                      "  if (c.model.type === 'code') c.model.setMetadata('tags',"
                      "    [...(c.model.getMetadata('tags') || []), 'raises-exception']); })")
    page.evaluate("() => { window.jupyterapp.commands.execute('notebook:run-all-cells'); }")
    if stop_on_error:
        # done when every code cell has run, or as soon as one raises (Run All stops there)
        page.wait_for_function(
            f"() => {_KERNEL_IDLE} && ({_PANEL}.content.widgets.some(c =>"
            "   c.model.type === 'code' && c.model.outputs.toJSON()"
            "   .some(o => o.output_type === 'error')) ||"
            f"  {_PANEL}.content.widgets.every(c => c.model.type !== 'code' ||"
            "   c.model.executionCount !== null))", timeout=timeout_ms)
    else:
        _wait_until_run(page, None, timeout_ms)


def set_source(page, index: int, source: str) -> None:
    """Replace what cell ``index`` holds, as if typed in."""
    page.evaluate(f"([i, text]) => {_PANEL}.content.widgets[i].model.sharedModel.setSource(text)",
                  [index, source])


def outputs(page) -> list[list[dict]]:
    """Every cell's outputs as the notebook would save them (an empty list for markdown)."""
    return page.evaluate(f"() => {_PANEL}.content.widgets.map(c =>"
                         " c.model.type === 'code' ? c.model.outputs.toJSON() : [])")


def output_text(cell_outputs: list[dict]) -> str:
    """What a cell printed, drew as HTML, or raised, as one string (errors without colours)."""
    parts = []
    for o in cell_outputs:
        kind = o.get("output_type")
        if kind == "stream":
            parts.append("".join(o.get("text", "")))
        elif kind == "error":
            parts.append(ANSI.sub("", f"{o.get('ename')}: {o.get('evalue')}"))
        else:
            data = o.get("data", {})
            parts.append("".join(data.get("text/html", "") or data.get("text/plain", "")))
    return "\n".join(parts)


#: what a widget draws (controls, tables, pictures, text), as opposed to boxes that span the
#: whole output
DRAWN = ("table, svg, input, select, button, label, .widget-label, .widget-html-content b, "
         ".widget-html-content span, .widget-html-content i")


def screenshot(page, element, name: str, *, crop: bool = False) -> None:
    """Save ``element`` whole to docs/screenshots/``name``: the window is made tall enough for
    it first (nothing past the notebook's own scroll area can be seen), width unchanged.
    ``crop``: cut the empty right-hand side off (up to the last thing the element draws)."""
    SHOTS.mkdir(parents=True, exist_ok=True)
    size = page.viewport_size
    element.scroll_into_view_if_needed()
    height = element.evaluate("e => Math.ceil(e.getBoundingClientRect().height)")
    page.set_viewport_size({"width": size["width"], "height": max(size["height"], height + 200)})
    # Lumino lays the panels out again on the next frames; scroll once the notebook has grown
    page.wait_for_function(
        "e => { e.scrollIntoView({block: 'center'}); const r = e.getBoundingClientRect();"
        " return r.top >= 0 && r.bottom <= window.innerHeight; }", arg=element.element_handle(),
        timeout=10_000)
    if crop:
        clip = element.evaluate(
            "(e, drawn) => { const r = e.getBoundingClientRect(); let right = r.left;"
            " for (const d of e.querySelectorAll(drawn)) {"
            "   const b = d.getBoundingClientRect(); if (b.width > 0) right = Math.max(right, b.right); }"
            " return {x: r.left, y: r.top, width: Math.min(right + 8, r.right) - r.left,"
            "         height: r.height}; }", DRAWN)
        page.screenshot(path=str(SHOTS / name), clip=clip, animations="disabled", caret="hide")
    else:
        element.screenshot(path=str(SHOTS / name), animations="disabled", caret="hide")
    page.set_viewport_size(size)
