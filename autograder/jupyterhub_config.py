"""JupyterHub settings for PTX Matrix Lab on a shared GPU server (see README.md beside this file).

Load it from the hub's own configuration (``load_subconfig("/srv/ptxlab/autograder/
jupyterhub_config.py")`` in ``/etc/jupyterhub/jupyterhub_config.py``) or copy what you need. The
names at the top come from the environment of the hub's service, so the file itself need not be
edited:

======================================  ==========================  ==========================
variable                                default                     meaning
======================================  ==========================  ==========================
``PTXLAB_COURSE_ID``                    ptx-matrix-lab              nbgrader course id
``PTXLAB_HOME``                         /srv/ptxlab                 this repository
``PTXLAB_COURSE_ROOT``                  $PTXLAB_HOME/course         the course root
``PTXLAB_GRADER_USER``                  grader-ptx                  the grading account
``PTXLAB_INSTRUCTORS``                  (none)                      comma-separated user names
``PTXLAB_STUDENTS``                     (none)                      comma-separated user names
``PTXLAB_FORMGRADER_PORT``              9999                        the formgrader service's port
``PTXLAB_FORMGRADER_TOKEN``             (required by JupyterHub)    the service's API token
``PTXLAB_GPU_SHARING``                  mps                         ``mps``, ``mig`` or ``none``
``PTXLAB_STUDENT_GPU_MEMORY``           4G                          GPU memory per student (MPS)
``PTXLAB_STUDENT_GPU_PERCENT``          25                          share of the GPU's SMs (MPS)
``PTXLAB_MIG_DEVICES``                  (none)                      MIG UUIDs, comma-separated
``PTXLAB_STUDENT_MEMORY``               4G                          host memory per student
``PTXLAB_STUDENT_CPUS``                 2                           CPU cores per student
``PTXLAB_SPAWNER``                      systemd                     ``systemd`` (SystemdSpawner),
                                                                    ``local`` (LocalProcessSpawner)
                                                                    or a spawner class's name
``PTXLAB_EXCHANGE``                     (none)                      the exchange, if not
                                                                    /srv/nbgrader/exchange: passed
                                                                    on to every server (with
                                                                    ``PTXLAB_COURSE_ID``)
======================================  ==========================  ==========================

Students get their own single-user servers (SystemdSpawner: each one a systemd unit with its
memory and CPU limits) with nbgrader's assignment list; the formgrader runs as a hub service
under the grading account, reachable by the ``formgrade-<course>`` group only.
``PTXLAB_SPAWNER=local`` starts each server as a plain process of the student's Unix account
(JupyterHub's LocalProcessSpawner, the hub running as root): for a machine without systemd and
for tests; the memory, CPU and /tmp limits of the systemd units do not apply. The proxy is
``$PTXLAB_HOME/.venv/node/node_modules/.bin/configurable-http-proxy`` when it is there
(``npm install --prefix $PTXLAB_HOME/.venv/node configurable-http-proxy``), else the
``configurable-http-proxy`` on the hub's PATH.
"""
import os
import zlib
from pathlib import Path

c = get_config()  # noqa: F821 - provided by JupyterHub when it loads this file


def _env(name, default=""):
    return os.environ.get(name) or default


def _names(variable):
    return [n.strip() for n in _env(variable).split(",") if n.strip()]


COURSE_ID = _env("PTXLAB_COURSE_ID", "ptx-matrix-lab")
HOME = _env("PTXLAB_HOME", "/srv/ptxlab")
COURSE_ROOT = _env("PTXLAB_COURSE_ROOT", f"{HOME}/course")
GRADER = _env("PTXLAB_GRADER_USER", "grader-ptx")
INSTRUCTORS = _names("PTXLAB_INSTRUCTORS")
STUDENTS = _names("PTXLAB_STUDENTS")
FORMGRADER_PORT = int(_env("PTXLAB_FORMGRADER_PORT", "9999"))
# The exchange and the course id reach every server the hub starts, students' and the
# formgrader's, when the hub's environment names them (global_nbgrader_config.py reads them).
SHARED_ENV = {name: os.environ[name] for name in ("PTXLAB_EXCHANGE", "PTXLAB_COURSE_ID")
              if os.environ.get(name)}
SPAWNERS = {"systemd": "systemdspawner.SystemdSpawner",
            "local": "jupyterhub.spawner.LocalProcessSpawner"}
SPAWNER = _env("PTXLAB_SPAWNER", "systemd")

c.Authenticator.allowed_users = set([GRADER, *INSTRUCTORS, *STUDENTS])
c.Authenticator.admin_users = set(INSTRUCTORS)

# nbgrader reads these group names: 'formgrade-<course>' may open the formgrader,
# 'nbgrader-<course>' sees the course's assignments.
c.JupyterHub.load_groups = {
    f"formgrade-{COURSE_ID}": {"users": [GRADER, *INSTRUCTORS]},
    f"nbgrader-{COURSE_ID}": {"users": [*INSTRUCTORS, *STUDENTS]},
}
c.JupyterHub.load_roles = [
    {"name": f"formgrade-{COURSE_ID}", "groups": [f"formgrade-{COURSE_ID}"],
     "scopes": [f"access:services!service={COURSE_ID}"]},
    {"name": f"nbgrader-{COURSE_ID}", "groups": [f"nbgrader-{COURSE_ID}"],
     "scopes": ["list:services", f"read:services!service={COURSE_ID}"]},
    # The course list of a student's server asks the hub which courses exist.
    {"name": "server", "scopes": ["inherit"]},
    # The formgrader finds its course the same way: from the grading account's groups.
    {"name": f"{COURSE_ID}-formgrader", "services": [COURSE_ID],
     "scopes": [f"read:users:name!user={GRADER}", f"read:users:groups!user={GRADER}"]},
]

# The formgrader: a single-user server of the grading account, started and proxied by the hub,
# serving only nbgrader's formgrader (autograder/jupyter_server_config.py). Its "autograde"
# button grades with the sandbox, because the course config loads the grading settings.
c.JupyterHub.services = [{
    "name": COURSE_ID,
    "url": f"http://127.0.0.1:{FORMGRADER_PORT}",
    "command": ["jupyterhub-singleuser", f"--config={HOME}/autograder/jupyter_server_config.py",
                f"--ServerApp.root_dir={COURSE_ROOT}"],
    "user": GRADER,
    "cwd": COURSE_ROOT,
    "environment": {
        "JUPYTERHUB_DEFAULT_URL": "/formgrader",
        "PTXLAB_GRADING_CONFIG": f"{HOME}/autograder/nbgrader_config.py",
        **SHARED_ENV,
    },
    "api_token": _env("PTXLAB_FORMGRADER_TOKEN"),
}]

# The proxy installed beside the code (README.md, step 6), else the one on the hub's PATH.
_PROXY = Path(HOME, ".venv", "node", "node_modules", ".bin", "configurable-http-proxy")
if _PROXY.is_file():
    c.ConfigurableHTTPProxy.command = [str(_PROXY)]

# Students: one systemd unit each, with its own memory and CPU limits (PTXLAB_SPAWNER=local:
# a plain process of the student's account, without those limits).
c.JupyterHub.spawner_class = SPAWNERS.get(SPAWNER, SPAWNER)
c.Spawner.mem_limit = _env("PTXLAB_STUDENT_MEMORY", "4G")
c.Spawner.cpu_limit = float(_env("PTXLAB_STUDENT_CPUS", "2"))
c.Spawner.default_url = "/lab"
c.SystemdSpawner.isolate_tmp = True          # a private /tmp per student
c.SystemdSpawner.isolate_devices = False     # the NVIDIA device nodes must stay visible
c.SystemdSpawner.disable_user_sudo = True


def gpu_share_environment(user_name, policy=None):
    """The environment that gives one student their share of the GPU.

    ``mps``: every student's CUDA work goes through the MPS daemon (autograder/
    ptxlab-mps.service), which caps each client's pinned GPU memory and share of the SMs, so
    one student's kernel cannot take the whole GPU. ``mig``: each student gets one MIG slice
    (a hard partition, on A100/H100), picked from ``PTXLAB_MIG_DEVICES`` by a hash of the user
    name. ``none``: the GPU is shared without limits.
    """
    policy = policy or _env("PTXLAB_GPU_SHARING", "mps")
    memory = _env("PTXLAB_STUDENT_GPU_MEMORY", "4G")
    env = {}
    if policy == "mps":
        env["CUDA_MPS_PINNED_DEVICE_MEM_LIMIT"] = f"0={memory}"
        env["CUDA_MPS_ACTIVE_THREAD_PERCENTAGE"] = _env("PTXLAB_STUDENT_GPU_PERCENT", "25")
    elif policy == "mig":
        devices = _names("PTXLAB_MIG_DEVICES")
        if not devices:
            raise ValueError("PTXLAB_GPU_SHARING=mig needs PTXLAB_MIG_DEVICES (the MIG UUIDs "
                             "listed by 'nvidia-smi -L')")
        env["CUDA_VISIBLE_DEVICES"] = devices[zlib.crc32(user_name.encode()) % len(devices)]
    elif policy != "none":
        raise ValueError(f"PTXLAB_GPU_SHARING must be mps, mig or none, got {policy!r}")
    # CuPy's own pool stays under the student's share as well.
    units = {"K": 2**10, "M": 2**20, "G": 2**30}
    number, unit = memory[:-1], memory[-1:].upper()
    if unit in units and number.replace(".", "", 1).isdigit():
        env["CUPY_GPU_MEMORY_LIMIT"] = str(int(float(number) * units[unit]))
    return env


def _pre_spawn(spawner):
    spawner.environment.update(SHARED_ENV)
    spawner.environment.update(gpu_share_environment(spawner.user.name))


c.Spawner.pre_spawn_hook = _pre_spawn
