"""``ptxlab open``: JupyterLab on the learner's workspace (or, for instructors, the course source).

A learner gets the student version of every notebook in a folder of their own
(:mod:`ptxlab.authoring.workspace`, ``workspace/`` of the checkout by default), and a JupyterLab
without nbgrader's instructor tools (creating assignments, the formgrader, the course and
assignment lists of a class); nbgrader's "Validate" stays. ``--instructor`` opens
``course/source/`` with everything, as the course's authors work.
"""
from __future__ import annotations

import argparse
import json
import os
import sys
from pathlib import Path

from ..run import sources
from ..authoring.workspace import STATE_DIR, default_course_dir, prepare_workspace

__all__ = ["add_arguments", "run", "jupyter_command", "learner_config"]

#: nbgrader's JupyterLab plugins and server extensions a learner working alone has no use for.
INSTRUCTOR_PLUGINS = ("@jupyter/nbgrader:create-assignment", "@jupyter/nbgrader:formgrader",
                      "@jupyter/nbgrader:course-list", "@jupyter/nbgrader:assignment-list",
                      "@jupyter/nbgrader:menu")
INSTRUCTOR_SERVER_EXTENSIONS = ("nbgrader.server_extensions.formgrader",
                                "nbgrader.server_extensions.course_list",
                                "nbgrader.server_extensions.assignment_list")


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("workspace", nargs="?", type=Path, default=None,
                        help="the learner's folder (default: workspace/ beside the course)")
    parser.add_argument("--instructor", action="store_true",
                        help="open course/source/ (solutions, hidden tests and nbgrader's "
                             "instructor tools) instead of a workspace")
    parser.add_argument("--no-browser", action="store_true",
                        help="serve without opening a browser and print the URL (a remote "
                             "machine: reach it through an SSH tunnel)")
    parser.add_argument("--port", type=int, default=None, help="the server's port")


def learner_config(workspace: Path) -> Path:
    """A Jupyter config folder for the learner's server: nbgrader's instructor tools off."""
    folder = workspace / STATE_DIR / "jupyter"
    (folder / "labconfig").mkdir(parents=True, exist_ok=True)
    (folder / "labconfig" / "page_config.json").write_text(json.dumps(
        {"disabledExtensions": {p: True for p in INSTRUCTOR_PLUGINS}}, indent=1) + "\n")
    (folder / "jupyter_server_config.json").write_text(json.dumps(
        {"ServerApp": {"jpserver_extensions": {e: False for e in INSTRUCTOR_SERVER_EXTENSIONS}}},
        indent=1) + "\n")
    return folder


def jupyter_command(root: Path, *, no_browser: bool, port: int | None,
                    as_root: bool) -> list[str]:
    argv = [sys.executable, "-m", "jupyterlab", f"--notebook-dir={root}"]
    if no_browser:
        argv.append("--no-browser")
    if port is not None:
        argv.append(f"--port={port}")
    if as_root:
        argv.append("--allow-root")
    return argv


def run(args: argparse.Namespace) -> int:
    env = dict(os.environ)
    if args.instructor:
        root = default_course_dir() / "source"
        if not root.is_dir():
            print(f"ptxlab open --instructor: no course source at {root} (a checkout of the "
                  "course has it)", file=sys.stderr)
            return 2
        print(f"opening the instructor's notebooks (solutions included): {root}")
    else:
        root = (args.workspace or sources.PROJECT_ROOT / "workspace").resolve()
        try:
            report = prepare_workspace(root)
        except (FileNotFoundError, RuntimeError) as exc:
            print(f"ptxlab open: {exc}", file=sys.stderr)
            return 2
        print(report.summary())
        config = learner_config(root)
        env["JUPYTER_CONFIG_PATH"] = os.pathsep.join(
            [str(config)] + [p for p in env.get("JUPYTER_CONFIG_PATH", "").split(os.pathsep) if p])
    as_root = hasattr(os, "geteuid") and os.geteuid() == 0
    if as_root:
        print("running as root: JupyterLab is started with --allow-root (a learner's own account "
              "is safer)")
    if args.no_browser:
        print("no browser: open the URL printed below (from another machine, through "
              "'ssh -L 8888:localhost:8888 <this machine>')")
    argv = jupyter_command(root, no_browser=args.no_browser, port=args.port, as_root=as_root)
    sys.stdout.flush()
    os.execve(argv[0], argv, env)
    return 0  # not reached
