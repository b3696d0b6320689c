"""The learner's whole course in a real browser: a fresh workspace made as ``./lab open`` makes
it, JupyterLab at 1280x800 with its file browser open, every notebook run cell by cell.

For every notebook: no cell other than a graded one raises; every exercise's check says "not
implemented yet" and its graded cell fails with it before an answer; no output (picture,
table or widget) is wider than the notebook's output column; then the course's own solution
is typed into each answer cell, its check passes, its graded cell passes, and the notebook's
progress picture shows every exercise passed. At the end ``ptxlab progress`` in the workspace
says the same. Screenshots of each kind of picture go to docs/screenshots/.

Problems are collected over all notebooks and reported together. Skips, with the reason, when
Playwright, Debian's chromium, JupyterLab or nbgrader is missing.
"""
from __future__ import annotations

import json
import os
import re
import subprocess
import sys
import time

import pytest

from lab_driver import (BROWSER_ARGS, CHROMIUM, ROOT, close_notebook, lab_server, open_notebook,
                        output_text, outputs, run_all, run_cells, screenshot, set_source)

sync_api = pytest.importorskip("playwright.sync_api", reason="playwright is not installed "
                               "(pip install playwright)")
pytest.importorskip("jupyterlab", reason="jupyterlab is not installed (pip install jupyterlab)")
pytest.importorskip("nbgrader", reason="nbgrader is not installed (pip install nbgrader): the "
                    "workspace is made by its generate_assignment")
if not CHROMIUM.exists():
    pytest.skip(f"no chromium at {CHROMIUM} (apt-get install -y chromium)", allow_module_level=True)

from ptxlab.authoring import course_notebooks as nt  # noqa: E402
from ptxlab.teach.checks import NOT_IMPLEMENTED  # noqa: E402
from ptxlab.cli.open_course import learner_config  # noqa: E402
from ptxlab.authoring.workspace import prepare_workspace  # noqa: E402

pytestmark = pytest.mark.timeout(420)   # measured: about 2 minutes on 2 cores
WINDOW = {"width": 1280, "height": 800}
NAMES = nt.assignments()


@pytest.fixture(scope="module")
def workspace_lab(tmp_path_factory):
    """``./lab open`` in a temporary folder: the student notebooks, the learner's JupyterLab
    configuration (nbgrader's instructor tools off), the server on the workspace."""
    scratch = tmp_path_factory.mktemp("lab")
    root = scratch / "workspace"
    report = prepare_workspace(root)
    assert sorted(p.split("/")[0] for p in report.added if p.endswith(".ipynb")) == NAMES
    with lab_server(root, scratch, config_path=learner_config(root)) as (url, token):
        yield root, url, token


def _solutions(name: str) -> dict[str, str]:
    """grade_id -> the whole answer cell of the course's source notebook."""
    nb = json.loads(nt.notebook_path(name).read_text())
    return {c["metadata"]["nbgrader"]["grade_id"]: "".join(c["source"]) for c in nb["cells"]
            if c["metadata"].get("nbgrader", {}).get("solution")}


def _too_wide(page) -> list[str]:
    """Outputs whose content is wider than the output column (it would scroll), and pictures
    (an SVG or a table) wider than it as drawn."""
    return page.evaluate("""() => {
        const found = [];
        const cells = window.jupyterapp.shell.currentWidget.content.widgets;
        cells.forEach((cell, i) => cell.node.querySelectorAll('.jp-OutputArea-output')
          .forEach(o => {
            const what = (o.innerText || '').trim().split('\\n')[0].slice(0, 60);
            if (o.scrollWidth > o.clientWidth + 1)
              found.push(`cell ${i}: output ${o.scrollWidth} px in a ${o.clientWidth} px ` +
                         `column (${what})`);
            o.querySelectorAll('svg, table').forEach(p => {
              const w = p.getBoundingClientRect().right - o.getBoundingClientRect().left;
              if (w > o.clientWidth + 1)
                found.push(`cell ${i}: ${p.tagName} ${Math.round(w)} px in a ` +
                           `${o.clientWidth} px column (${what})`);
              // a picture shrunk to fit (JupyterLab scales a wide SVG down) is too wide too
              const drawn = p.tagName === 'svg' ? p.width.baseVal.value : 0;
              if (drawn > o.clientWidth + 1)
                found.push(`cell ${i}: an SVG drawn ${Math.round(drawn)} px wide, shrunk into ` +
                           `a ${o.clientWidth} px column (${what})`);
            });
          }));
        return found; }""")


def _progress_counts(html: str, name: str) -> str:
    """The counts the progress picture writes beside notebook ``name``."""
    m = re.search(rf">{re.escape(name)}</text>.*?fill=\"#555\">([^<]*)</text>", html, re.DOTALL)
    return m.group(1) if m else "(no row for this notebook)"


def _output_of(page, locator_text: str):
    """The output area (every output of one cell) holding ``locator_text``, in view."""
    loc = page.locator(".jp-Cell-outputArea", has_text=locator_text).first
    loc.wait_for(timeout=30_000)
    loc.scroll_into_view_if_needed()
    return loc


def _pictures_of(page, name: str) -> None:
    """Screenshots of the pictures a notebook shows, and the lane player seen to step."""
    expect = sync_api.expect
    if name.startswith("01_"):
        bank = _output_of(page, "wavefront")
        screenshot(page, bank, "bank_view.png")
        table = _output_of(page, "every address lane matches")
        screenshot(page, table, "address_table.png")
        screenshot(page, table.locator("svg").first, "row_flow.png")
        screenshot(page, _output_of(page, "lane 5 holds"), "fragment_map.png")
    elif name.startswith("05_"):
        screenshot(page, _output_of(page, "before: register a").locator("svg").first,
                   "movmatrix_before_after.png")
        player = page.locator(".jp-Cell-outputArea", has=page.locator(".widget-play")).first
        player.scroll_into_view_if_needed()
        expect(player).to_contain_text("lane 1 gives A[0][2]")
        # the slider steps the picture: four lanes on, lane 5 gives row 1's elements 2 and 3
        player.locator(".widget-slider .noUi-handle").first.focus()
        for _ in range(4):
            page.keyboard.press("ArrowRight")
        expect(player).to_contain_text("lane 5 gives A[1][2] and A[1][3]", timeout=30_000)
        screenshot(page, player, "lane_player.png")
        # play runs on by itself: the caption and the picture move on together
        player.locator(".widget-play button").first.click()
        expect(player).to_contain_text("lane 7 gives A[1][6]", timeout=30_000)
        player.locator(".widget-play button").first.click()
    elif name.startswith("06_"):
        player = page.locator(".jp-Cell-outputArea", has=page.locator(".widget-play")).first
        player.scroll_into_view_if_needed()
        expect(player).to_contain_text("mma.sync.aligned.m16n8k16.row.col.f32.f16.f16.f32")
        screenshot(page, player.locator("svg").first, "mma_fragments.png")


def _learner_gemm_of(page, cells, name: str) -> list[str]:
    """With exercise 3 answered, the capstone's `time_my_gemm` cell checks the learner's loop
    as a whole GEMM and shows it in the table, inside the column."""
    cell = next(i for i, c in enumerate(cells) if "time_my_gemm(" in "".join(c["source"]))
    run_cells(page, [cell])
    text = output_text(outputs(page)[cell])
    if "Your k-loop as a GEMM is right at" not in text:
        return [f"{name} time_my_gemm with exercise 3 answered said {text[:300]!r}"]
    screenshot(page, _output_of(page, "Your k-loop as a GEMM is right"), "learner_gemm.png")
    return [f"{name} {w}" for w in _too_wide(page)]


def test_every_notebook_of_a_fresh_workspace(workspace_lab):
    root, url, token = workspace_lab
    problems: list[str] = []
    seconds: dict[str, float] = {}
    checked: dict[str, int] = {}
    columns: set[int] = set()
    start = time.perf_counter()
    with sync_api.sync_playwright() as p:
        browser = p.chromium.launch(executable_path=str(CHROMIUM), args=BROWSER_ARGS)
        page = browser.new_page(viewport=WINDOW)
        try:
            for name in NAMES:
                t0 = time.perf_counter()
                path = f"{name}/{name}.ipynb"
                cells = json.loads((root / path).read_text())["cells"]
                meta = [c.get("metadata", {}).get("nbgrader", {}) for c in cells]
                answers = [i for i, m in enumerate(meta) if m.get("solution")]
                graded = [i for i, m in enumerate(meta) if m.get("grade")]
                solutions = _solutions(name)
                open_notebook(page, url, token, path)
                assert page.evaluate("() => !window.jupyterapp.shell.leftCollapsed"), \
                    "the file browser should be open"

                # 1. the student version as it comes: nothing answered yet
                run_all(page)
                outs = outputs(page)
                for i, cell_outputs in enumerate(outs):
                    text = output_text(cell_outputs)
                    raised = any(o.get("output_type") == "error" for o in cell_outputs)
                    if i in answers and cells[i]["cell_type"] == "code" and \
                            NOT_IMPLEMENTED not in text:
                        problems.append(f"{name} `{meta[i]['grade_id']}`: the check before an "
                                        f"answer said {text[:200]!r}")
                    elif i in graded and not (raised and NOT_IMPLEMENTED in text):
                        problems.append(f"{name} `{meta[i]['grade_id']}`: the graded cell "
                                        f"before an answer gave {text[-300:]!r}")
                    elif i not in graded and raised:
                        problems.append(f"{name} cell {i} raised: {text[-400:]}")
                problems += [f"{name} {w}" for w in _too_wide(page)]
                columns.add(page.evaluate(
                    "() => document.querySelector('.jp-OutputArea-output').clientWidth"))
                _pictures_of(page, name)

                # 2. the course's solutions typed in: every check and graded cell passes
                for i in answers:
                    set_source(page, i, solutions[meta[i]["grade_id"]])
                run_cells(page, sorted(answers + graded))
                outs = outputs(page)
                for i in answers:
                    text = output_text(outs[i])
                    if cells[i]["cell_type"] == "code" and ("[PASSED]" not in text
                                                            or NOT_IMPLEMENTED in text):
                        problems.append(f"{name} `{meta[i]['grade_id']}`: the check with the "
                                        f"solution said {text[:300]!r}")
                for i in graded:
                    text = output_text(outs[i])
                    if any(o.get("output_type") == "error" for o in outs[i]) or "passed" not in text:
                        problems.append(f"{name} `{meta[i]['grade_id']}`: the graded cell with "
                                        f"the solution gave {text[-300:]!r}")
                checked[name] = len(graded)
                if name.startswith("08_"):
                    problems += _learner_gemm_of(page, cells, name)

                # 3. the notebook's last cell, progress.show(), says so
                last = len(cells) - 1
                run_cells(page, [last])
                counts = _progress_counts(output_text(outputs(page)[last]), name)
                if counts != f"{len(graded)} passed, 0 attempted, 0 not started":
                    problems.append(f"{name}: progress.show() says {counts!r}")
                close_notebook(page)
                seconds[name] = time.perf_counter() - t0
        finally:
            browser.close()

    # 4. and so does `ptxlab progress` in a terminal in the workspace
    report = subprocess.run([sys.executable, "-m", "ptxlab.cli", "progress"], cwd=root,
                            capture_output=True, text=True, timeout=60,
                            env=dict(os.environ, PYTHONPATH=str(ROOT)))
    for name in NAMES:
        line = next((ln for ln in report.stdout.splitlines() if ln.startswith(name)), "")
        if f"{checked.get(name, -1)} passed, 0 attempted, 0 not started" not in line:
            problems.append(f"ptxlab progress: {line or report.stdout[-500:] + report.stderr[-500:]}")
    timing = ", ".join(f"{n[:2]} {s:.0f} s" for n, s in seconds.items())
    print(f"\nbrowser pass over {len(seconds)} notebooks, {sum(checked.values())} exercises: "
          f"{time.perf_counter() - start:.0f} s ({timing}); output column {sorted(columns)} px")
    assert not problems, "\n".join(problems)
    assert len(seconds) == len(NAMES)
