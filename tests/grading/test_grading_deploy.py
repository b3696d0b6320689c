"""The deployment files of autograder/ that no test can start without a hub or a GPU: each is
loaded the way its program loads it, and what it names must exist.

(The formgrader's server config, the global nbgrader config and grade-assignment.sh are
started for real in tests/test_grading_cycle.py.)
"""
from __future__ import annotations

import configparser
import re
import shutil
import subprocess
from pathlib import Path
from types import SimpleNamespace

import pytest
from traitlets.config.loader import PyFileConfigLoader

REPO = Path(__file__).resolve().parents[2]
AUTOGRADER = REPO / "autograder"


def _load(path: Path, **env: str):
    """A Jupyter-style config file, loaded as its program loads it, under ``env``."""
    import os
    old = {k: os.environ.get(k) for k in env}
    os.environ.update(env)
    try:
        return PyFileConfigLoader(path.name, path=str(path.parent)).load_config()
    finally:
        for k, v in old.items():
            if v is None:
                os.environ.pop(k, None)
            else:
                os.environ[k] = v


HUB_ENV = dict(PTXLAB_HOME=str(REPO), PTXLAB_COURSE_ROOT=str(REPO / "course"),
               PTXLAB_STUDENTS="ada,ben", PTXLAB_INSTRUCTORS="prof", PTXLAB_GRADER_USER="grader-x",
               PTXLAB_FORMGRADER_TOKEN="t0ken")


def test_jupyterhub_config_groups_roles_and_formgrader_service():
    cfg = _load(AUTOGRADER / "jupyterhub_config.py", **HUB_ENV)
    groups = cfg.JupyterHub.load_groups
    assert groups["formgrade-ptx-matrix-lab"]["users"] == ["grader-x", "prof"]
    assert set(groups["nbgrader-ptx-matrix-lab"]["users"]) == {"prof", "ada", "ben"}
    assert cfg.Authenticator.allowed_users == {"grader-x", "prof", "ada", "ben"}
    roles = {r["name"]: r for r in cfg.JupyterHub.load_roles}
    assert roles["formgrade-ptx-matrix-lab"]["scopes"] == ["access:services!service=ptx-matrix-lab"]
    (service,) = cfg.JupyterHub.services
    assert service["name"] == "ptx-matrix-lab" and service["user"] == "grader-x"
    assert service["api_token"] == "t0ken"
    config_arg = next(a for a in service["command"] if a.startswith("--config="))
    assert Path(config_arg.split("=", 1)[1]).is_file()      # autograder/jupyter_server_config.py
    assert Path(service["environment"]["PTXLAB_GRADING_CONFIG"]).is_file()
    assert Path(service["cwd"]).is_dir()
    assert cfg.SystemdSpawner.isolate_devices is False       # the GPU's device nodes stay visible


@pytest.mark.parametrize("policy", ["mps", "mig", "none"])
def test_jupyterhub_pre_spawn_hook_gives_each_student_a_gpu_share(policy, monkeypatch):
    for key, value in {**HUB_ENV, "PTXLAB_GPU_SHARING": policy, "PTXLAB_STUDENT_GPU_MEMORY": "3G",
                       "PTXLAB_MIG_DEVICES": "MIG-aaa,MIG-bbb,MIG-ccc"}.items():
        monkeypatch.setenv(key, value)
    hook = _load(AUTOGRADER / "jupyterhub_config.py").Spawner.pre_spawn_hook
    envs = {}
    for name in ("ada", "ben", "carl", "dora"):
        spawner = SimpleNamespace(user=SimpleNamespace(name=name), environment={})
        hook(spawner)
        envs[name] = spawner.environment
    assert all(e["CUPY_GPU_MEMORY_LIMIT"] == str(3 * 2**30) for e in envs.values())
    if policy == "mps":
        assert envs["ada"]["CUDA_MPS_PINNED_DEVICE_MEM_LIMIT"] == "0=3G"
        assert 0 < int(envs["ada"]["CUDA_MPS_ACTIVE_THREAD_PERCENTAGE"]) <= 100
    elif policy == "mig":
        picked = {e["CUDA_VISIBLE_DEVICES"] for e in envs.values()}
        assert picked <= {"MIG-aaa", "MIG-bbb", "MIG-ccc"} and len(picked) >= 2
    else:
        assert not any(k.startswith("CUDA_") for e in envs.values() for k in e)


def test_jupyterhub_mig_without_devices_says_what_is_missing(monkeypatch):
    monkeypatch.setenv("PTXLAB_GPU_SHARING", "mig")
    monkeypatch.delenv("PTXLAB_MIG_DEVICES", raising=False)
    hook = _load(AUTOGRADER / "jupyterhub_config.py").Spawner.pre_spawn_hook
    with pytest.raises(ValueError, match="PTXLAB_MIG_DEVICES"):
        hook(SimpleNamespace(user=SimpleNamespace(name="ada"), environment={}))


def test_global_nbgrader_config_names_exchange_and_course():
    cfg = _load(AUTOGRADER / "global_nbgrader_config.py", PTXLAB_EXCHANGE="/x/exchange",
                PTXLAB_COURSE_ID="c1")
    assert cfg.Exchange.root == "/x/exchange" and cfg.CourseDirectory.course_id == "c1"
    assert cfg.Exchange.path_includes_course is True


def test_course_config_loads_the_grading_settings():
    cfg = _load(REPO / "course" / "nbgrader_config.py")
    assert "ptxlab.grading.execute.SandboxedExecute" in cfg.Autograde.autograde_preprocessors
    assert cfg.Execute.timeout == 120 and cfg.CourseDirectory.course_id == "ptx-matrix-lab"
    cfg = _load(REPO / "course" / "nbgrader_config.py", PTXLAB_CELL_TIMEOUT_S="45",
                PTXLAB_LAUNCH_GPU_MEMORY_MB="512")
    assert cfg.Execute.timeout == 45
    assert cfg.SandboxedKernelManager.launch_gpu_memory_mb == 512


def test_the_documented_limits_are_the_ones_that_hold(monkeypatch):
    """The cell limit the README's table and the grading config's own table give is the one
    stock ``nbgrader autograde`` (the course's config) and ``ptxlab grade`` (the grading config,
    then the course's) grade with; the submission limit and the grader's allowance after it are
    the figures the README gives."""
    import argparse

    from ptxlab.cli import grade as cli
    from ptxlab.grading import worker_handle
    from ptxlab.grading.grading_worker import load_grading_config

    for name in ("PTXLAB_CELL_TIMEOUT_S", "PTXLAB_GRADING_CONFIG"):
        monkeypatch.delenv(name, raising=False)
    readme = (AUTOGRADER / "README.md").read_text()
    documented = int(re.search(r"^\| `PTXLAB_CELL_TIMEOUT_S` \| (\d+)[^|]*\|", readme, re.M)[1])
    tabled = int(re.search(r"^``PTXLAB_CELL_TIMEOUT_S``\s+(\d+)\s",
                           (AUTOGRADER / "nbgrader_config.py").read_text(), re.M)[1])
    stock = _load(REPO / "course" / "nbgrader_config.py").Execute.timeout
    ours = load_grading_config(REPO / "course").Execute.timeout
    assert documented == tabled == stock == ours, (documented, tabled, stock, ours)
    assert f"ran past the cell limit of {documented} s" in readme
    parser = argparse.ArgumentParser()
    cli.add_arguments(parser)
    submission = parser.get_default("submission_timeout")
    assert re.search(rf"^\| `--submission-timeout` \| {submission:g} s \|", readme, re.M)
    assert f"have {worker_handle.GRADER_ALLOWANCE_S:g} s more" in readme


def _unit(name: str) -> configparser.ConfigParser:
    parser = configparser.ConfigParser(strict=False, interpolation=None)
    parser.optionxform = str
    parser.read(AUTOGRADER / name)
    return parser


def _in_repo(path: str) -> Path:
    """A path of the server layout (/srv/ptxlab/...) in this checkout."""
    return REPO / Path(path).relative_to("/srv/ptxlab")


def test_systemd_units_name_what_exists():
    service = _unit("ptxlab-grade@.service")
    script = service["Service"]["ExecStart"].split()[0]
    assert _in_repo(script).is_file() and _in_repo(script).stat().st_mode & 0o111
    assert _in_repo(service["Service"]["WorkingDirectory"]).is_dir()
    assert service["Service"]["EnvironmentFile"] == "/etc/ptxlab/grading.env"
    assert (AUTOGRADER / "grading.env").is_file()
    timer = _unit("ptxlab-grade@.timer")
    assert timer["Timer"]["OnCalendar"] and timer["Install"]["WantedBy"] == "timers.target"
    mps = _unit("ptxlab-mps.service")
    assert "nvidia-cuda-mps-control" in mps["Service"]["ExecStart"]
    verify = shutil.which("systemd-analyze")
    if verify:
        out = subprocess.run([verify, "verify", "--man=no", str(AUTOGRADER / "ptxlab-grade@.timer")],
                             capture_output=True, text=True)
        assert "Unknown key" not in out.stderr and "Unknown section" not in out.stderr, out.stderr


def test_grading_env_sets_only_known_variables():
    known = set(re.findall(r"``(PTXLAB_[A-Z_]+)``", (AUTOGRADER / "nbgrader_config.py").read_text()))
    script = (AUTOGRADER / "grade-assignment.sh").read_text()
    known |= set(re.findall(r"\$\{?(PTXLAB_[A-Z_]+)", script))
    for line in (AUTOGRADER / "grading.env").read_text().splitlines():
        if not line.strip() or line.startswith("#"):
            continue
        key = line.split("=", 1)[0]
        assert key in known or key.startswith("CUDA_MPS_") or key == "PATH", key


def test_readme_names_only_files_that_exist():
    text = (AUTOGRADER / "README.md").read_text()
    for name in set(re.findall(r"`((?:autograder|scripts|tests|ptxlab)/[\w./@-]+)`", text)):
        assert (REPO / name.rstrip("/")).exists(), name
    for name in set(re.findall(r"^\| `([\w@-]+\.[\w.]+)`", text, re.MULTILINE)):
        assert (AUTOGRADER / name).exists(), name
