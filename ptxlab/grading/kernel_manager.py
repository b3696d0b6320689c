"""The kernel manager of graded notebooks: every kernel in the sandbox, with its limits.

:class:`SandboxedKernelManager` starts a Python kernel inside the bubblewrap sandbox
(:mod:`ptxlab.grading.sandbox`) with its own connection folder, Unix-socket transport (no
network), a clean environment, memory and file-size limits, and every learner kernel launch sent
to an isolated child or the worker's warm launch service. It imports nothing of nbgrader, so the
preflight (:mod:`ptxlab.grading.preflight`) starts a grading kernel without paying for it.
"""
from __future__ import annotations

import asyncio
import json
import os
import shutil
import sys
import tempfile
from pathlib import Path

from jupyter_client.manager import AsyncKernelManager
from traitlets import Bool, Float, Integer, List, Unicode

from . import cgroups, client_package, disk_share, sandbox
from .sandbox_account import hand_over, sandbox_account
from .sandbox_watch import HARD_FACTOR, SandboxWatch, folder_usage
from .launch_service_pool import (gpu_memory_cap, service_socket, sharing_workers,
                                  wants_service)
from ..run.isolation import MEMORY_ENV, TIMEOUT_ENV
from ..run.launch_client import SERVICE_ENV, SESSION_ENV
from ..run.launch_log import LAUNCH_LOG_ENV
from ..teach.graded import GRADED_BY_GRADER_ENV

__all__ = ["SandboxedKernelManager", "effective_launch_timeout", "sandbox_env"]

#: A launch gets at most this share of the cell's time limit.
_LAUNCH_SHARE_OF_CELL = 0.5


def effective_launch_timeout(launch_timeout_s: float, cell_timeout_s: float | None) -> float:
    """The wall-clock limit of one kernel launch: the configured one, but at most half the
    cell's, so a hanging kernel is stopped by its own limit (whose message names the kernel)
    before the cell's limit interrupts the whole cell."""
    if cell_timeout_s is None or cell_timeout_s <= 0:
        return launch_timeout_s
    return max(1.0, min(launch_timeout_s, _LAUNCH_SHARE_OF_CELL * cell_timeout_s))

#: Environment variables passed into the sandbox (everything else, tokens included, is dropped).
_ENV_KEEP_PREFIXES = ("LANG", "LC_", "CUDA_", "CUPY_", "NVIDIA_", "PTXLAB_", "NBGRADER_")
_ENV_KEEP = {"PATH", "TERM", "TZ", "PYTHONPATH", "LD_LIBRARY_PATH", "PYTHONHASHSEED"}


def sandbox_env(env: dict[str, str], *, home: str = "/tmp/home") -> dict[str, str]:
    """What of ``env`` a sandboxed process keeps, with ``home`` (in the sandbox's private
    ``/tmp`` by default) for every cache and settings folder."""
    kept = {k: v for k, v in env.items()
            if k in _ENV_KEEP or k.startswith(_ENV_KEEP_PREFIXES)}
    kept.update({
        "HOME": home,
        "MPLCONFIGDIR": f"{home}/.matplotlib",
        "CUPY_CACHE_DIR": f"{home}/.cupy",
        "IPYTHONDIR": f"{home}/.ipython",
        "JUPYTER_RUNTIME_DIR": f"{home}/.jupyter-runtime",
        "PYTHONDONTWRITEBYTECODE": "1",
        "PYTHONUNBUFFERED": "1",
        "OPENBLAS_NUM_THREADS": "1",
        "OMP_NUM_THREADS": "1",
        "MKL_NUM_THREADS": "1",
        "PYDEVD_DISABLE_FILE_VALIDATION": "1",
    })
    return kept


class SandboxedKernelManager(AsyncKernelManager):
    """Starts a Python kernel inside the grading sandbox, whatever kernelspec the notebook names."""

    sandbox_mode = Unicode("bwrap", config=True,
                           help="'bwrap' (the sandbox) or 'none' (limits only: trusted code)")
    hidden_paths = List(Unicode(), config=True,
                        help="paths the kernel must not see even if a whitelisted mount holds them")
    gpu = Bool(True, config=True, help="give the kernel the NVIDIA device nodes")
    kernel_memory_mb = Integer(4096, config=True,
                               help="memory limit of the kernel process, MiB (0: none)")
    kernel_memory_mode = Unicode("auto", config=True,
                                 help="how the kernel's memory is limited: 'address_space' "
                                      "(RLIMIT_AS), 'resident' (a watchdog on resident memory: "
                                      "CUDA cannot start under an address-space limit) or "
                                      "'auto' (resident when the kernel gets a GPU)")
    launch_gpu_memory_mb = Integer(0, config=True,
                                   help="GPU memory one kernel launch may allocate through "
                                        "CuPy, MiB (0: no limit); sets CUPY_GPU_MEMORY_LIMIT")
    launch_service = Unicode("on", config=True,
                             help="'on': the worker's kernel launches run in one warm launch "
                                  "service (one CUDA context, one compile cache), cleared "
                                  "between students -- on the CPU model too, where it spares "
                                  "every launch a fork and a compile; 'off': each launch in a "
                                  "child process of its own; 'auto': on when the kernel gets a "
                                  "GPU")
    file_size_mb = Integer(256, config=True, help="largest file the kernel may write, MiB")
    disk_quota_mb = Integer(512, config=True,
                            help="most the kernel's working folder may hold, MiB (0: no quota); "
                                 "past it the running cell gets 'Disk quota exceeded'")
    max_files = Integer(20000, config=True,
                        help="most files and folders the kernel's working folder may hold")
    max_tasks = Integer(1024, config=True,
                        help="most processes and threads the notebook's processes may run "
                             "together; past it the grader stops the sandbox (0: no limit)")
    limit_enforcement = Unicode("auto", config=True,
                                help="who holds a kernel to its memory and process limits and "
                                     "its CPU share: 'cgroup' (the kernel's cgroup controllers, "
                                     "per submission; grading stops if they cannot be used), "
                                     "'watch' (the grader's watch, sampling every "
                                     "watch_interval_s) or 'auto' (cgroups where this account "
                                     "may make them, else the watch)")
    watch_interval_s = Float(0.1, config=True,
                             help="how often the grader measures a running sandbox's memory, "
                                  "disk and processes, seconds (0: not at all; the kernel's own "
                                  "limits stay, which its code can defeat: trusted classes only)")
    launch_timeout_s = Float(60.0, config=True,
                             help="wall-clock limit of one isolated kernel launch, seconds")
    launch_memory_mb = Integer(4096, config=True,
                               help="resident-memory limit of one isolated kernel launch, MiB")
    cell_timeout_s = Float(None, allow_none=True,
                           help="the notebook cell's time limit (set by SandboxedExecute)")
    spare = Bool(False, help="started before its notebook is known: the kernel works in an "
                             "empty private folder that receives the notebook's files later")
    graded_outside = Bool(True, help="the grader computes the verdicts from recorded answers "
                                     "(set by SandboxedExecute): checks in the notebook only "
                                     "say so")

    _private_dir: Path | None = None
    #: The grader's own folder of this kernel, never mounted in its sandbox: why the grader's
    #: watch stopped it.
    _guard_dir: Path | None = None
    _watch: SandboxWatch | None = None
    _watch_folders: list[Path] = []
    _group: cgroups.SubmissionGroup | None = None
    #: The notebook's own folder and what it held before the kernel started (a kernel stopped
    #: past its quota leaves none of what it wrote there).
    _workdir: Path | None = None
    _workdir_before: set[str] | None = None
    _disk_share: disk_share.DiskShare | None = None
    #: The private folder mounted as a sized file system of its own (unmounted at cleanup).
    _scratch: Path | None = None
    #: The sandbox's start until the kernel is launched (the file of bwrap's options).
    _sandbox_start: sandbox.SandboxLaunch | None = None

    @property
    def notebook_gpu(self) -> bool:
        """Whether the notebook's own sandbox gets the GPU's device nodes: only where its test
        cells decide. A judged notebook launches nothing (the grader launches its kernel
        answers in the launch service, the one process of a worker that holds the GPU), so it
        can neither take the GPU's memory nor keep its SMs busy."""
        return self.gpu and not self.graded_outside

    @property
    def workdir(self) -> Path | None:
        """A spare kernel's working folder (``None`` for a kernel started in its notebook's)."""
        return self._private_dir / "work" if (self.spare and self._private_dir) else None

    @property
    def stop_note(self) -> Path | None:
        """Why the kernel was stopped: the grader's own reason when its watch stopped the
        sandbox (a file of a folder the sandbox never sees), else where the kernel says why it
        stopped itself (its memory, its disk quota; a file of its private folder, untrusted)."""
        self._settle_limits()
        if self._guard_dir is not None and self.watch_reason_file.exists():
            return self.watch_reason_file
        return self._private_dir / "kernel-stopped.txt" if self._private_dir else None

    @property
    def watch_reason_file(self) -> Path | None:
        return self._guard_dir / "stopped-by-grader.txt" if self._guard_dir else None

    @property
    def launch_log(self) -> Path | None:
        """The file every isolated launch of this kernel appends its record to."""
        return self._private_dir / "launches.jsonl" if self._private_dir else None

    async def _async_pre_start_kernel(self, **kw):
        """The command that starts the kernel inside its sandbox, and the arguments it starts
        with: jupyter_client's own command, wrapped by the kernel's boot and the sandbox."""
        kw = self._prepare_kernel_place(kw)
        kernel_cmd, kw = await super()._async_pre_start_kernel(**kw)
        workdir = Path(kw.get("cwd") or os.getcwd()).resolve()
        env = dict(kw.get("env") or os.environ)
        self._note_workdir(workdir)
        boot = [sys.executable, "-m", "ptxlab.grading.kernel_boot", "--", *kernel_cmd[1:]]
        limits = self._kernel_limits()
        # Everything the sandbox can write, measured by the grader's watch.
        self._watch_folders = [workdir, self._private_dir]
        launch_timeout = self.launch_timeout()
        if launch_timeout < self.launch_timeout_s:
            self.log.info("kernel launches limited to %g s (half the %g s cell limit) instead "
                          "of %g s", launch_timeout, self.cell_timeout_s, self.launch_timeout_s)
        inner_env = self._inner_env(env, limits, launch_timeout)
        # The course and the exchange, the same for every kernel of the worker (so one launch
        # service serves them all), and the course this notebook's folder lies in.
        configured = self.service_hidden_paths()
        hidden = configured + _course_paths_of(workdir)
        overlays: list[tuple[Path, Path]] = []
        if self.graded_outside:
            # The notebook holds no answer: its ptxlab is the client only, and it launches
            # nothing (the judge runs the kernels), so it gets no launch service either.
            overlays, covered = client_package.overlays()
            hidden += covered
            service = None
            if self.sandbox_mode == "none":     # no mounts: the client comes first on the path
                inner_env["PYTHONPATH"] = os.pathsep.join(
                    [str(client_package.client_tree()), inner_env.get("PYTHONPATH", "")]).rstrip(
                    os.pathsep)
        else:
            service = self.launch_service_socket(env, configured, launch_timeout)
        if service:
            inner_env[SERVICE_ENV] = service
        kernel_cmd = self._sandboxed_command(kw, boot, env, inner_env, workdir, hidden,
                                             overlays, service)
        return self._in_group(kernel_cmd), kw

    def _prepare_kernel_place(self, kw: dict) -> dict:
        """The kernel's private folders, transport, disk share and working folder, set up before
        jupyter_client writes the connection file and builds the command (both depend on them)."""
        self._private_dir = Path(tempfile.mkdtemp(prefix="ptxlab-kernel-"))
        if self._guard_dir is None:
            self._guard_dir = Path(tempfile.mkdtemp(prefix="ptxlab-guard-"))
        self.connection_file = str(self._private_dir / "kernel.json")
        if self.sandbox_mode == "bwrap":
            # No network inside: the kernel and the grader talk over Unix sockets.
            self.transport = "ipc"
            self.ip = str(self._private_dir / "kernel-ipc")
        if self.kernel_spec is not None:
            # Signals to the sandbox's process do not reach the kernel inside it; ask the kernel
            # to interrupt itself (an interrupt_request on the control channel) instead.
            self.kernel_spec.interrupt_mode = "message"
        self._share_disk(Path(kw.get("cwd") or os.getcwd()).resolve(),
                         dict(kw.get("env") or os.environ))
        self._mount_scratch()
        if self.spare:
            self.workdir.mkdir()
            kw["cwd"] = str(self.workdir)
        elif self._scratch is not None and kw.get("cwd") and Path(kw["cwd"]).is_dir():
            # in its sized scratch area, as a prestarted kernel: the kernel refuses the write
            # past the quota in the working folder too (nbgrader saves the notebook itself)
            work = self._private_dir / "work"
            work.mkdir()
            disk_share.copy_submission(Path(kw["cwd"]), work)
            kw["cwd"] = str(work)
        return kw

    def _kernel_limits(self) -> dict:
        """The limits the kernel's boot applies to itself in the sandbox (its limits env)."""
        return {"memory_mb": self.kernel_memory_mb, "file_size_mb": self.file_size_mb,
                "disk_mb": self.disk_share.quota_mb, "max_files": self.max_files,
                "stop_note": str(self.stop_note),
                "memory_mode": self._memory_mode(),
                # the sandbox's /tmp and /dev/shm are folders of the grader's disk (below):
                # under the disk quota, not the memory limit
                "watch_tmp": False,
                "disk_folders": ["/tmp", "/dev/shm"] if self.sandbox_mode == "bwrap" else []}

    def _inner_env(self, env: dict, limits: dict, launch_timeout: float) -> dict:
        """The kernel's environment inside the sandbox: the grader's, cleaned, plus what the
        boot, the isolated launches and the launch service read."""
        if self.sandbox_mode == "none":
            # No sandbox, so no private /tmp: the kernel's home is a folder of its own.
            home = self._private_dir / "home"
            home.mkdir(exist_ok=True)
            inner_env = sandbox_env(env, home=str(home))
        else:
            inner_env = sandbox_env(env)
        inner_env.update({
            sandbox.KERNEL_LIMITS_ENV: json.dumps(limits),
            "PTXLAB_ISOLATE": "1",
            TIMEOUT_ENV: f"{launch_timeout:g}",
            MEMORY_ENV: str(self.launch_memory_mb),
            LAUNCH_LOG_ENV: str(self.launch_log),
            # This kernel's launches get an executor of their own in the launch service.
            SESSION_ENV: self._private_dir.name,
            GRADED_BY_GRADER_ENV: "1" if self.graded_outside else "0",
        })
        if self.notebook_gpu:
            inner_env.update(gpu_memory_cap(self.launch_gpu_memory_mb, env))
        return inner_env

    def _sandboxed_command(self, kw: dict, boot: list[str], env: dict, inner_env: dict,
                           workdir: Path, hidden: list, overlays: list[tuple[Path, Path]],
                           service: str | None) -> list[str]:
        """The command that runs ``boot`` in the configured sandbox; sets the start's ``env``
        (and the descriptors bwrap reads its options from) in ``kw``."""
        if self.sandbox_mode == "bwrap":
            tmp_dir, shm_dir = self._private_dir / "tmp", self._private_dir / "shm"
            tmp_dir.mkdir(exist_ok=True)
            shm_dir.mkdir(exist_ok=True)
            account = sandbox_account()
            for folder in (self._private_dir, workdir):   # what the sandbox's account writes
                hand_over(folder, account)
            policy = sandbox.SandboxPolicy(
                workdir=workdir, private_dir=self._private_dir, hidden=hidden,
                gpu=self.notebook_gpu,
                sockets=[Path(service)] if service else [], tmp_dir=tmp_dir, shm_dir=shm_dir,
                overlays=overlays, account=account)
            # bwrap reads its options from a file only this start holds: the sandbox's
            # /proc/1/cmdline names none of the paths it mounts or hides
            self._sandbox_start = sandbox.sandbox_launch(policy, boot, env=inner_env)
            kw["pass_fds"] = self._sandbox_start.pass_fds
            kw["env"] = {"PATH": env.get("PATH", "/usr/bin:/bin")}
            return self._sandbox_start.argv
        if self.sandbox_mode == "none":
            kw["env"] = {**env, **inner_env}
            return boot
        raise ValueError(f"SandboxedKernelManager.sandbox_mode must be 'bwrap' or 'none', "
                         f"got {self.sandbox_mode!r}")

    @property
    def disk_share(self) -> disk_share.DiskShare:
        """This kernel's disk quota: the configured one, or less where the disk's free space,
        shared by the machine's grading workers, holds less."""
        if self._disk_share is None:        # not started yet: the share of this folder's disk
            return self._shared_quota([Path(os.getcwd())], dict(os.environ))
        return self._disk_share

    def _shared_quota(self, folders: list[Path], env: dict[str, str]) -> disk_share.DiskShare:
        return disk_share.disk_share(self.disk_quota_mb, folders, sharing_workers(env),
                                     HARD_FACTOR)

    def _share_disk(self, workdir: Path, env: dict[str, str]) -> None:
        """Size this kernel's quota now, for the disks of its folders."""
        self._disk_share = self._shared_quota(
            [workdir] + ([self._private_dir] if self._private_dir else []), env)

    def _note_workdir(self, workdir: Path) -> None:
        """What the kernel's working folder holds before it runs, where that folder is the
        submission's own (autograded/<student>/<assignment>), the one folder ever cleared: a
        kernel in its private folder (prestarted, or in a sized scratch area) leaves nothing
        outside it, and no walk of the submission is needed."""
        self._workdir = self._workdir_before = None
        if _course_paths_of(workdir):
            self._workdir, self._workdir_before = workdir, disk_share.snapshot(workdir)

    def _mount_scratch(self) -> None:
        """Make the private folder (the sandbox's /tmp and /dev/shm, a prestarted kernel's
        working folder) a file system of the hard quota's size, where this grader may mount
        one: the kernel then refuses the write past it, however fast it comes."""
        self._unmount_scratch()         # a restarted kernel's earlier folder
        share = self._disk_share
        if (self.sandbox_mode != "bwrap" or share is None or share.quota_mb <= 0
                or not disk_share.can_mount_scratch()):
            return
        size = int(HARD_FACTOR * share.quota_mb * 2**20) + (4 << 20)    # + its sockets, notes
        files = int(HARD_FACTOR * self.max_files) + 64 if self.max_files > 0 else 1 << 20
        if disk_share.mount_scratch(self._private_dir, size, files):
            self._scratch = self._private_dir

    def _unmount_scratch(self) -> None:
        if self._scratch is not None:
            disk_share.unmount_scratch(self._scratch)
            if self._scratch != self._private_dir:
                shutil.rmtree(self._scratch, ignore_errors=True)
            self._scratch = None

    def _remove_what_passed_the_quota(self) -> None:
        """A notebook that left its folder over the quota (whoever stopped it) leaves none of
        what it wrote there: the next step and the next student get the disk back."""
        share, folder, before = self._disk_share, self._workdir, self._workdir_before
        self._workdir = self._workdir_before = None
        if share is None or share.quota_mb <= 0 or folder is None or before is None:
            return
        used, files = folder_usage([folder], share.quota_mb * 2**20 + 1, 1 << 62)
        if used > share.quota_mb * 2**20 or (self.max_files > 0 and files > self.max_files):
            gone = disk_share.remove_new_files(folder, before)
            self.log.warning("the notebook left %d MiB in %s, over its %d MiB quota: removed "
                             "the %d entries it wrote", used >> 20, folder, share.quota_mb, gone)

    def enforcement(self) -> cgroups.CgroupRoot:
        """Where this kernel's limits are enforced (the configured mode, found once)."""
        mode = self.limit_enforcement
        if mode not in ("auto", "cgroup", "watch"):
            raise ValueError(f"SandboxedKernelManager.limit_enforcement must be 'auto', "
                             f"'cgroup' or 'watch', got {mode!r}")
        root = cgroups.find_root("off" if mode == "watch" else "auto")
        if mode == "cgroup" and not root.usable:
            raise RuntimeError("limit_enforcement is 'cgroup' but " + root.describe())
        return root

    def _in_group(self, kernel_cmd: list[str]) -> list[str]:
        """``kernel_cmd`` started inside a new control group of its own, where one can be made:
        then the kernel holds every process of the sandbox to the memory and task limits."""
        self._remove_group()
        root = self.enforcement()
        if not root.usable:
            return kernel_cmd
        memory = int(HARD_FACTOR * self.kernel_memory_mb * 2**20) if self.kernel_memory_mb > 0 else 0
        self._group = root.group(self._private_dir.name, cgroups.GroupLimits(
            memory_bytes=memory, tasks=max(0, self.max_tasks),
            stated_memory_mb=max(0, self.kernel_memory_mb)))
        return self._group.enter_argv(kernel_cmd)

    def _remove_group(self) -> None:
        if self._group is not None:
            if not self._group.remove():
                self.log.warning("could not remove the control group of kernel %s",
                                 self._group.name)
            self._group = None

    def limit_reached_now(self) -> str:
        """Measure the sandbox now (the grader calls it after each cell) and stop it past a
        limit: the grader's reason, or ``""``."""
        return self._watch.check_now() if self._watch is not None else ""

    def _settle_limits(self) -> None:
        """Ask the kernel's control group, now, whether it stopped the sandbox at a limit: its
        reason then becomes the grader's own stop note (a folder the sandbox never sees)."""
        if self._watch is not None:
            self._watch.settle()
        elif self._group is not None and self._guard_dir is not None:
            why = self._group.limit_reason()
            if why and not self.watch_reason_file.exists():
                self.watch_reason_file.write_text(why + "\n")

    def service_hidden_paths(self) -> list[Path]:
        """What no launch service may see: the configured course, exchange and hidden paths."""
        return [Path(p) for p in self.hidden_paths] + self._configured_course_paths()

    def launch_timeout(self) -> float:
        return effective_launch_timeout(self.launch_timeout_s, self.cell_timeout_s)

    def launch_service_socket(self, env: dict[str, str], hidden: list[Path],
                               launch_timeout: float, mode: str | None = None) -> str | None:
        """This worker's warm launch service, when it is wanted (``mode``, default the
        configured one) and can run."""
        if self.sandbox_mode not in ("bwrap", "none"):
            return None              # the error about the mode comes below
        if not wants_service(mode or self.launch_service, self.gpu):
            return None
        # No sandbox, so no private /tmp: the service's home is a folder of its own.
        service_env = (sandbox_env(env) if self.sandbox_mode == "bwrap" else sandbox_env(
            env, home=str(Path(tempfile.gettempdir()) / f"ptxlab-launch-home-{os.getuid()}")))
        service_env.update(gpu_memory_cap(self.launch_gpu_memory_mb, env))
        # No student's folder is ever in its view.
        return service_socket(sandbox_mode=self.sandbox_mode, gpu=self.gpu,
                              hidden=[h for h in hidden if h.exists()], env=service_env,
                              max_timeout_s=launch_timeout, max_memory_mb=self.launch_memory_mb)

    async def _async_launch_kernel(self, kernel_cmd: list[str], **kw) -> None:
        try:
            await super()._async_launch_kernel(kernel_cmd, **kw)
        finally:
            self._close_sandbox_start()

    def _close_sandbox_start(self) -> None:
        if self._sandbox_start is not None:
            self._sandbox_start.close()
            self._sandbox_start = None

    def hand_over(self, path: Path | None) -> None:
        """Give ``path`` (files copied into the kernel's folder) to the account the sandbox
        runs as, where the grader is root; nothing otherwise."""
        if path is not None and self.sandbox_mode == "bwrap":
            hand_over(path, sandbox_account())

    async def _async_post_start_kernel(self, **kw) -> None:
        await super()._async_post_start_kernel(**kw)
        self._start_watch()

    def _start_watch(self) -> None:
        """The grader's watch over the sandbox just started: the limits the learner's code
        cannot reach (all its processes' memory, all it wrote, its processes and threads)."""
        self._stop_watch()
        process = getattr(self.provisioner, "process", None)
        if process is None or self._guard_dir is None or self.watch_interval_s <= 0:
            return
        reason = self.watch_reason_file
        if reason is not None and reason.exists():
            reason.unlink()
        self._watch = SandboxWatch(
            process.pid, reason_file=reason, folders=self._watch_folders,
            memory_mb=max(0, self.kernel_memory_mb), disk_mb=max(0, self.disk_share.quota_mb),
            max_files=max(0, self.max_files) if self.disk_quota_mb > 0 else 0,
            max_tasks=max(0, self.max_tasks), interval_s=self.watch_interval_s,
            log=self.log, group=self._group).start()

    def _stop_watch(self) -> None:
        if self._watch is not None:
            self._watch.stop()
            self._watch = None

    async def _async_kill_kernel(self, restart: bool = False) -> None:
        # jupyter_client checks every 0.1 s whether the killed kernel is gone; a graded
        # notebook's kernel is killed after every submission, so look more often.
        self._stop_watch()
        if not self.has_kernel:
            return
        assert self.provisioner is not None
        await self.provisioner.kill(restart=restart)
        process = getattr(self.provisioner, "process", None)
        loop = asyncio.get_running_loop()
        deadline = loop.time() + 5.0
        while process is not None and process.poll() is None and loop.time() < deadline:
            await asyncio.sleep(0.005)
        if self.has_kernel:
            await self.provisioner.wait()

    def _memory_mode(self) -> str:
        mode = self.kernel_memory_mode
        if mode == "auto":
            return ("resident" if (self.notebook_gpu and sandbox.gpu_device_nodes())
                    else "address_space")
        if mode not in ("address_space", "resident"):
            raise ValueError(f"SandboxedKernelManager.kernel_memory_mode must be 'auto', "
                             f"'address_space' or 'resident', got {mode!r}")
        return mode

    def _configured_course_paths(self) -> list[Path]:
        """The course root and the exchange nbgrader was configured with, where they exist."""
        found = []
        for section, key in (("CourseDirectory", "root"), ("Exchange", "root")):
            try:
                value = self.config[section].get(key) if section in self.config else None
            except (AttributeError, KeyError, TypeError):
                value = None
            if value and Path(str(value)).is_dir():
                found.append(Path(str(value)))
        return found

    async def _async_cleanup_resources(self, restart: bool = False) -> None:
        self._close_sandbox_start()
        self._stop_watch()
        self._remove_group()
        if not restart:
            self._remove_what_passed_the_quota()
        await super()._async_cleanup_resources(restart=restart)
        if not restart and self._private_dir is not None:
            self._unmount_scratch()
            shutil.rmtree(self._private_dir, ignore_errors=True)
            self._private_dir = None
        if not restart and self._guard_dir is not None:
            shutil.rmtree(self._guard_dir, ignore_errors=True)
            self._guard_dir = None

    cleanup_resources = _async_cleanup_resources


def _course_paths_of(workdir: Path) -> list[Path]:
    """The course root, guessed from ``<root>/autograded/<student>/<assignment>``."""
    parts = workdir.parts
    if len(parts) >= 4 and parts[-3] == "autograded":
        return [Path(*parts[:-3])]
    return []
