"""The grading sandbox: what a learner's notebook kernel may see while it is autograded.

Learner code runs with the grader's account, so without a sandbox it could read the
instructor's solutions (``source/``), other students' submissions and the exchange, or rewrite
the gradebook. The sandbox is a bubblewrap (``bwrap``) container started for each kernel:

* a **whitelist** of read-only mounts: the system (``/usr``, ``/etc``, ``/lib*``), the Python
  installation and the ``ptxlab`` package with its ``kernels/`` -- nothing of the course;
* one **writable** folder, the submission's working copy (``autograded/<student>/<assignment>``),
  plus a private folder holding only this kernel's connection file and sockets;
* the socket of the grading worker's warm launch service (:mod:`ptxlab.run.launch_server`),
  read-only, when one runs;
* fresh ``/tmp``, ``/proc``, ``/dev`` (with the NVIDIA device nodes, and the CUDA MPS daemon's
  pipe folder when one runs, when ``gpu`` is on), no network (the kernel talks to the grader
  through Unix sockets), its own user namespace in which it is ``nobody``, and it dies with the
  grader; a graded kernel's ``/tmp`` and ``/dev/shm`` are folders of its private folder on the
  grader's disk, which the grader's watch (:mod:`ptxlab.grading.sandbox_watch`) measures;
* any path named as *hidden* (course root, exchange, gradebook) that still falls inside a
  whitelisted mount is covered with an empty tmpfs (or ``/dev/null`` for a file).

``bwrap`` comes from Debian's ``bubblewrap`` package (``autograder/install-sandbox.sh``) and
needs no privileges beyond unprivileged user namespaces. ``PTXLAB_BWRAP`` names another binary.
"""
from __future__ import annotations

import functools
import glob
import os
import shutil
import subprocess
import sys
from dataclasses import dataclass, field
from importlib.machinery import EXTENSION_SUFFIXES
from pathlib import Path

__all__ = ["SandboxPolicy", "SandboxUnavailable", "bwrap_binary", "sandbox_argv",
           "python_readonly_paths", "editable_targets", "gpu_device_nodes", "mps_pipe_directory", "KERNEL_LIMITS_ENV"]

#: System folders every kernel needs, mounted read-only when they exist.
_SYSTEM_DIRS = ("/usr", "/etc", "/bin", "/sbin", "/lib", "/lib32", "/lib64", "/libx32")
#: The user the kernel is inside its namespace (nobody).
SANDBOX_UID = 65534
#: Environment variable carrying the kernel's own limits to ``ptxlab.grading.kernel_boot``.
KERNEL_LIMITS_ENV = "PTXLAB_KERNEL_LIMITS"


class SandboxUnavailable(RuntimeError):
    """No working ``bwrap`` here; the message says how to install it."""


@dataclass
class SandboxPolicy:
    """What one sandboxed process may see and use."""

    workdir: Path                                  # writable: the submission's working copy
    private_dir: Path | None = None                # writable: this kernel's connection file
    hidden: list[Path] = field(default_factory=list)
    extra_readonly: list[Path] = field(default_factory=list)
    gpu: bool = True
    network: bool = False
    sockets: list[Path] = field(default_factory=list)  # Unix sockets it may connect to
    tmp_size_mb: int = 0        # size of its /tmp (a tmpfs); 0: the kernel's default (half of RAM)
    #: Host folders shown writable as its ``/tmp`` and ``/dev/shm`` instead of fresh tmpfs
    #: (a graded kernel's: one walk of the grader's own folders then measures all it wrote).
    tmp_dir: Path | None = None
    shm_dir: Path | None = None
    #: Show only the course's public headers of ``kernels/`` (a sandbox that compiles learner
    #: code: its include path, and its whole file system, hold no reference kernel).
    kernel_headers_only: bool = False
    # (source, target): ``source`` shown read-only at ``target``, over what is mounted there
    # (a graded notebook's client-only ``ptxlab`` over the real package)
    overlays: list[tuple[Path, Path]] = field(default_factory=list)


def bwrap_binary() -> str:
    """Path of a usable ``bwrap``; raises :class:`SandboxUnavailable` with the fix otherwise."""
    candidate = os.environ.get("PTXLAB_BWRAP") or shutil.which("bwrap")
    if not candidate or not os.access(candidate, os.X_OK):
        raise SandboxUnavailable(
            "the grading sandbox needs bubblewrap ('bwrap'): install it with "
            "'apt-get install bubblewrap' (or run autograder/install-sandbox.sh), or set "
            "PTXLAB_BWRAP to its path")
    return candidate


@functools.lru_cache(maxsize=None)
def bwrap_supports_size(bwrap: str) -> bool:
    """Whether this ``bwrap`` can size a tmpfs (``--size``, bubblewrap 0.9 and later). Without
    it the kernel's own watchdog counts what its ``/tmp`` holds against its memory limit."""
    try:
        out = subprocess.run([bwrap, "--help"], capture_output=True, text=True, timeout=10)
    except (OSError, subprocess.SubprocessError):
        return False
    return "--size" in (out.stdout + out.stderr)


def _package_dirs(kernels: bool = True) -> list[Path]:
    """The ``ptxlab`` package and (``kernels``) the ``kernels/`` folder it compiles from."""
    from ..run import sources

    dirs = [sources.PACKAGE_DIR]
    if not kernels:
        return dirs
    try:
        dirs.append(Path(sources.kernels_dir()).resolve())
    except Exception:  # no kernels folder: nothing more to mount
        pass
    return dirs


class _PathSet:
    """Absolute paths, asked in time proportional to a path's depth, not to how many there are:
    a class's sandbox hides every other student's folder, and a kernel's mounts are checked
    against all of them at each kernel start."""

    def __init__(self, paths) -> None:
        self._members = {Path(p).parts for p in paths}
        self._ancestors = {parts[:i] for parts in self._members for i in range(1, len(parts))}

    def add(self, path: Path) -> None:
        parts = path.parts
        self._members.add(parts)
        self._ancestors.update(parts[:i] for i in range(1, len(parts)))

    def holds(self, path: Path) -> bool:
        """``path`` is one of the set or lies inside one of them."""
        parts = path.parts
        return any(parts[:i] in self._members for i in range(1, len(parts) + 1))

    def inside(self, path: Path) -> bool:
        """One of the set is ``path`` or lies inside it."""
        return path.parts in self._members or path.parts in self._ancestors


def python_readonly_paths(workdir: Path, hidden: list[Path], *,
                          kernels: bool = True) -> list[Path]:
    """Folders the kernel's Python needs, never one that holds the workdir or a hidden path.

    The interpreter's prefixes and site-packages are mounted whole. Any other ``sys.path`` entry
    (a checkout on ``PYTHONPATH``, whose ``course/`` may hold solutions) contributes only its
    importable children: packages and ``.py`` modules.
    """
    prefixes = []
    for p in {sys.prefix, sys.base_prefix, sys.exec_prefix}:
        if p and os.path.isdir(p):
            prefixes.append(Path(p).resolve())
    exe = Path(sys.executable)
    candidates: list[Path] = [*prefixes, exe.parent, exe.resolve().parent,
                              *_package_dirs(kernels)]
    children_of: list[Path] = []
    installed = _PathSet(prefixes)
    for entry in sys.path:
        if not entry or not os.path.isdir(entry):
            continue
        path = Path(entry).resolve()
        if installed.holds(path) or path.name in ("site-packages", "dist-packages"):
            candidates.append(path)
        else:
            children_of.append(path)
    candidates += editable_targets([Path(e) for e in sys.path if e and os.path.isdir(e)])
    guarded = _PathSet([workdir.resolve(), *(h.resolve() for h in hidden)])
    out: list[Path] = []
    for path in candidates:
        if path == Path("/") or guarded.inside(path):
            children_of.append(path)
        else:
            out.append(path)
    for folder in children_of:
        out.extend(_importable_children(folder, guarded))
    return _dedupe_nested(out)


def editable_targets(site_dirs: list[Path]) -> list[Path]:
    """The package folders that editable installs (``pip install -e``) map their imports to.

    setuptools puts a ``__editable___<name>_finder.py`` in site-packages, loaded by a ``.pth``
    file, whose ``MAPPING`` names each package's source folder: those folders are not on
    ``sys.path``, yet the kernel imports from them. Only the package folders are named, never
    the checkout around them (whose ``course/`` may hold solutions).
    """
    import ast

    found: list[Path] = []
    for site in site_dirs:
        for finder in sorted(site.glob("__editable___*_finder.py")):
            try:
                tree = ast.parse(finder.read_text())
            except (OSError, SyntaxError, ValueError):
                continue
            for node in tree.body:
                target = node.target if isinstance(node, ast.AnnAssign) else (
                    node.targets[0] if isinstance(node, ast.Assign) and node.targets else None)
                if isinstance(target, ast.Name) and target.id == "MAPPING" and node.value is not None:
                    try:
                        mapping = ast.literal_eval(node.value)
                    except ValueError:
                        continue
                    found += [Path(v) for v in mapping.values()
                              if isinstance(v, str) and os.path.exists(v)]
    return found


#: Folders a wheel installs beside its packages that imports need: vendored shared libraries
#: (``pyzmq.libs``, ``numpy.libs``) and distribution metadata (versions, entry points).
_SUPPORT_DIR_SUFFIXES = (".libs", ".dist-info", ".egg-info")


def _is_module_file(path: Path) -> bool:
    return path.suffix in (".py", ".pth") or path.name.endswith(tuple(EXTENSION_SUFFIXES))


def _is_namespace_package(folder: Path) -> bool:
    """A folder without ``__init__.py`` that Python imports through (``nvidia/`` holding
    ``nvidia/cuda_nvrtc/``): it holds a regular package or an extension module."""
    if not folder.name.isidentifier() or (folder / "__init__.py").exists():
        return False
    try:
        return any((c.is_dir() and (c / "__init__.py").exists())
                   or (c.is_file() and c.name.endswith(tuple(EXTENSION_SUFFIXES)))
                   for c in folder.iterdir())
    except OSError:
        return False


def _importable_children(folder: Path, guarded: _PathSet) -> list[Path]:
    """What Python may load from ``folder`` and nothing else: packages (regular and namespace),
    modules (source and extension), ``.pth`` files, and the library and metadata folders wheels
    put beside them. A checkout on ``sys.path`` keeps its ``course/`` out of reach."""
    if folder == Path("/"):
        return []
    kids = []
    for child in sorted(folder.iterdir()) if folder.is_dir() else []:
        if guarded.inside(child):
            continue
        if child.is_dir():
            if ((child / "__init__.py").exists() or child.name.endswith(_SUPPORT_DIR_SUFFIXES)
                    or _is_namespace_package(child)):
                kids.append(child)
        elif _is_module_file(child):
            kids.append(child)
    return kids


def _dedupe_nested(paths: list[Path]) -> list[Path]:
    """Drop duplicates and paths already inside another path of the list."""
    unique = sorted(set(paths), key=lambda p: len(p.parts))
    kept: list[Path] = []
    seen = _PathSet([])
    for p in unique:
        if not seen.holds(p):
            kept.append(p)
            seen.add(p)
    return kept


def gpu_device_nodes() -> list[str]:
    """The NVIDIA device nodes of this machine (none on a machine without a GPU)."""
    return sorted(glob.glob("/dev/nvidia*")) + sorted(glob.glob("/dev/dri/*"))


def mps_pipe_directory() -> Path | None:
    """The CUDA MPS daemon's pipe folder, when an MPS daemon serves this machine.

    A CUDA client finds the daemon through it (``$CUDA_MPS_PIPE_DIRECTORY``, by default
    ``/tmp/nvidia-mps``), so a sandbox with its own ``/tmp`` must be shown it.
    """
    path = Path(os.environ.get("CUDA_MPS_PIPE_DIRECTORY") or "/tmp/nvidia-mps")
    return path if path.is_dir() else None


def _gpu_device_args() -> list[str]:
    args: list[str] = []
    for node in gpu_device_nodes():
        args += ["--dev-bind", node, node]
    mps = mps_pipe_directory()
    if mps is not None:
        args += ["--bind", str(mps), str(mps)]
    return args


def sandbox_argv(policy: SandboxPolicy, command: list[str], *, bwrap: str | None = None,
                 env: dict[str, str] | None = None) -> list[str]:
    """The ``bwrap`` command line that runs ``command`` under ``policy``.

    ``env`` replaces the environment inside (``--clearenv`` then ``--setenv`` each entry).
    """
    bwrap = bwrap or bwrap_binary()
    workdir = policy.workdir.resolve()
    hidden = [h.resolve() for h in policy.hidden]
    argv = [bwrap, "--die-with-parent", "--new-session",
            "--unshare-user", "--unshare-pid", "--unshare-ipc", "--unshare-uts",
            "--unshare-cgroup-try", "--uid", str(SANDBOX_UID), "--gid", str(SANDBOX_UID),
            "--hostname", "grading"]
    if not policy.network:
        argv.append("--unshare-net")
    # Fresh /proc, /dev, /tmp first: the mounts below may lie inside them.
    argv += ["--proc", "/proc", "--dev", "/dev"]
    for folder, target in ((policy.tmp_dir, "/tmp"), (policy.shm_dir, "/dev/shm")):
        if folder is not None:
            argv += ["--bind", str(folder.resolve()), target]
        else:
            if policy.tmp_size_mb > 0 and bwrap_supports_size(bwrap):
                argv += ["--size", str(policy.tmp_size_mb * 2**20)]
            argv += ["--tmpfs", target]
    if policy.gpu:
        argv += _gpu_device_args()
    readonly: list[Path] = []
    for d in _SYSTEM_DIRS:
        if os.path.islink(d):
            argv += ["--symlink", os.readlink(d), d]
        elif os.path.isdir(d):
            readonly.append(Path(d))
    readonly += python_readonly_paths(workdir, hidden, kernels=not policy.kernel_headers_only)
    if policy.kernel_headers_only:
        from ..run import sources

        readonly += [h.resolve() for h in sources.public_headers()]
    readonly += [p.resolve() for p in policy.extra_readonly]
    readonly = _dedupe_nested(readonly)
    for p in readonly:
        argv += ["--ro-bind", str(p), str(p)]
    if policy.gpu and os.path.isdir("/sys"):
        argv += ["--ro-bind", "/sys", "/sys"]
    # Cover what must stay unseen wherever a mount above exposed it.
    mounted = _PathSet(readonly)
    covers: list[Path] = []
    for h in hidden:
        if mounted.holds(h) and h.exists():
            if h.is_dir():
                argv += ["--tmpfs", str(h)]
                covers.append(h)
            else:
                argv += ["--ro-bind", "/dev/null", str(h)]
    for source, target in policy.overlays:
        target = target.resolve()
        if mounted.holds(target) and target.is_dir():
            argv += ["--ro-bind", str(source.resolve()), str(target)]
    argv += ["--bind", str(workdir), str(workdir)]
    if policy.private_dir is not None:
        pd = policy.private_dir.resolve()
        argv += ["--bind", str(pd), str(pd)]
    for sock in policy.sockets:
        # Only the socket, read-only: the kernel can connect to it (a socket needs no write
        # access on its mount) but cannot replace it or put anything beside it.
        argv += ["--ro-bind", str(sock), str(sock)]
    # The covers are read-only once the writable folders inside them are mounted.
    for h in covers:
        argv += ["--remount-ro", str(h)]
    argv += ["--chdir", str(workdir)]
    if env is not None:
        argv.append("--clearenv")
        for key, value in env.items():
            argv += ["--setenv", key, value]
    return argv + ["--", *command]
