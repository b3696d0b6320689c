"""The grading sandbox: what a learner's notebook kernel may see while it is autograded.

Learner code runs with the grader's account, so without a sandbox it could read the
instructor's solutions (``source/``), other students' submissions and the exchange, or rewrite
the gradebook. The sandbox is a bubblewrap (``bwrap``) container started for each kernel:

* a **whitelist** of read-only mounts: the system (``/usr``, ``/lib*``), the Python
  installation and the ``ptxlab`` package with its ``kernels/`` -- nothing of the course, and
  nothing of the folder the grader works in (a course root);
* of ``/etc``, only what a kernel reads, and an account list naming only the sandbox's user
  (:mod:`ptxlab.grading.sandbox_etc`);
* one **writable** folder, the submission's working copy (``autograded/<student>/<assignment>``),
  plus a private folder holding only this kernel's connection file and sockets;
* the socket of the grading worker's warm launch service (:mod:`ptxlab.run.launch_server`),
  read-only, when one runs;
* fresh ``/tmp``, ``/proc``, ``/dev`` (with the NVIDIA device nodes, and the CUDA MPS daemon's
  pipe folder when one runs, when ``gpu`` is on), no network (the kernel talks to the grader
  through Unix sockets), and it dies with the grader; a graded kernel's ``/tmp`` and
  ``/dev/shm`` are folders of its private folder on the grader's disk, which the grader's watch
  (:mod:`ptxlab.grading.sandbox_watch`) measures; the sandbox's root (``/etc`` included) is
  read-only;
* any path named as *hidden* (course root, exchange, gradebook) that still falls inside a
  whitelisted mount is covered with an empty tmpfs (or ``/dev/null`` for a file).

Whom it runs as (:mod:`ptxlab.grading.sandbox_account`): ``nobody`` in a user namespace of its
own, which is the grading account outside, when the grader is not root; a uid of its own, with
no capability, when it is. bwrap is the sandbox's first process, so its command line is
readable inside: :func:`sandbox_launch` hands it its options on a file descriptor instead.

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
from typing import TYPE_CHECKING

from .sandbox_errors import SandboxUnavailable
from .sandbox_etc import SANDBOX_HOSTNAME

if TYPE_CHECKING:
    from .sandbox_account import SandboxAccount

__all__ = ["SandboxPolicy", "SandboxUnavailable", "SandboxLaunch", "bwrap_binary", "sandbox_argv",
           "sandbox_options", "sandbox_launch", "python_readonly_paths", "editable_targets",
           "gpu_device_nodes", "mps_pipe_directory", "KERNEL_LIMITS_ENV"]

#: System folders every kernel needs, mounted read-only when they exist (of ``/etc``, only what
#: :mod:`ptxlab.grading.sandbox_etc` names).
_SYSTEM_DIRS = ("/usr", "/bin", "/sbin", "/lib", "/lib32", "/lib64", "/libx32")
#: The user the kernel is inside its namespace (nobody), when the grader is not root.
SANDBOX_UID = 65534
#: Environment variable carrying the kernel's own limits to ``ptxlab.grading.kernel_boot``.
KERNEL_LIMITS_ENV = "PTXLAB_KERNEL_LIMITS"


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
    #: Whom it runs as outside (a :class:`~ptxlab.grading.sandbox_account.SandboxAccount`):
    #: ``"auto"``, the grader's default (a uid of its own when the grader is root); ``None``,
    #: ``nobody`` in a user namespace, which is the grader's own account outside.
    account: "SandboxAccount | str | None" = "auto"


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
    importable children: packages and ``.py`` modules. The grader's working folder (on
    ``sys.path`` for ``python -m``; a course root, whose ``nbgrader_config.py`` and instructor
    modules sit there) and a hidden folder contribute nothing: what the kernel imports of them is
    installed elsewhere (the ``ptxlab`` package is mounted by its own path).
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
    guarded = _PathSet([workdir.resolve(), *(h.resolve() for h in hidden)])
    cwd = _working_folder()
    for entry in sys.path:
        if not entry or not os.path.isdir(entry):
            continue
        path = Path(entry).resolve()
        if installed.holds(path) or path.name in ("site-packages", "dist-packages"):
            candidates.append(path)
        elif path != cwd and not guarded.holds(path):
            # the grader's working folder (a course root, for ``python -m``) and a hidden folder
            # on the path give nothing: their modules are the instructor's
            children_of.append(path)
    candidates += editable_targets([Path(e) for e in sys.path if e and os.path.isdir(e)])
    out: list[Path] = []
    for path in candidates:
        if path == Path("/") or guarded.inside(path):
            children_of.append(path)
        else:
            out.append(path)
    for folder in children_of:
        out.extend(_importable_children(folder, guarded))
    return _dedupe_nested(out)


def _working_folder() -> Path | None:
    try:
        return Path.cwd().resolve()
    except OSError:          # removed while the grader runs in it
        return None


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


def _account_of(policy: SandboxPolicy) -> "SandboxAccount | None":
    """Whom the sandbox runs as outside: ``policy.account``, else the grader's default."""
    from .sandbox_account import sandbox_account

    return sandbox_account() if policy.account == "auto" else policy.account


def _namespace_args(policy: SandboxPolicy, account: "SandboxAccount | None") -> list[str]:
    """Namespaces, and how the sandbox's user is made: in a user namespace of its own (an
    unprivileged grader), or by root keeping only what changes uid (``account``)."""
    argv = ["--die-with-parent", "--new-session", "--unshare-pid", "--unshare-ipc",
            "--unshare-uts", "--unshare-cgroup-try", "--hostname", SANDBOX_HOSTNAME]
    if account is None:
        argv += ["--unshare-user", "--uid", str(SANDBOX_UID), "--gid", str(SANDBOX_UID)]
    else:
        argv += ["--cap-drop", "ALL", "--cap-add", "CAP_SETUID", "--cap-add", "CAP_SETGID"]
    if not policy.network:
        argv.append("--unshare-net")
    return argv


#: Mounted fresh before any other mount: never made again.
_FRESH = {Path("/"), Path("/proc"), Path("/dev"), Path("/tmp"), Path("/dev/shm")}


def _ancestor_dirs(targets: list[Path]) -> list[str]:
    """``--dir`` (mode 0755) for every folder above a mount point: bwrap run as root makes
    them 0700 and root's, which the sandbox's own user could not pass through."""
    wanted: set[Path] = set()
    for target in targets:
        wanted.update(p for p in target.parents if p not in _FRESH)
    argv: list[str] = []
    for folder in sorted(wanted, key=lambda p: (len(p.parts), str(p))):
        argv += ["--perms", "0755", "--dir", str(folder)]
    return argv


def _readonly_paths(policy: SandboxPolicy, workdir: Path, hidden: list[Path]) -> list[Path]:
    """Everything shown read-only at its own path (the system, Python, ``ptxlab``)."""
    readonly = [Path(d) for d in _SYSTEM_DIRS if os.path.isdir(d) and not os.path.islink(d)]
    readonly += python_readonly_paths(workdir, hidden, kernels=not policy.kernel_headers_only)
    if policy.kernel_headers_only:
        from ..run import sources

        readonly += [h.resolve() for h in sources.public_headers()]
    readonly += [p.resolve() for p in policy.extra_readonly]
    return _dedupe_nested(readonly)


def sandbox_options(policy: SandboxPolicy, *, bwrap: str | None = None,
                    env: dict[str, str] | None = None) -> list[str]:
    """bwrap's options (everything before ``--``) for ``policy``.

    ``env`` replaces the environment inside (``--clearenv`` then ``--setenv`` each entry).
    """
    from .sandbox_etc import etc_mounts

    bwrap = bwrap or bwrap_binary()
    account = _account_of(policy)
    workdir = policy.workdir.resolve()
    hidden = [h.resolve() for h in policy.hidden]
    argv = _namespace_args(policy, account)
    # Fresh /proc, /dev, /tmp first: the mounts below may lie inside them.
    argv += ["--proc", "/proc", "--dev", "/dev"]
    for folder, target in ((policy.tmp_dir, "/tmp"), (policy.shm_dir, "/dev/shm")):
        if folder is not None:
            argv += ["--bind", str(folder.resolve()), target]
        else:
            if policy.tmp_size_mb > 0 and bwrap_supports_size(bwrap):
                argv += ["--size", str(policy.tmp_size_mb * 2**20)]
            if account is not None:      # made by root: open to the sandbox's account
                argv += ["--perms", "1777"]
            argv += ["--tmpfs", target]
    readonly = _readonly_paths(policy, workdir, hidden)
    inside = (account.uid, account.gid) if account is not None else (SANDBOX_UID, SANDBOX_UID)
    etc = etc_mounts(*inside)
    writable = [workdir] + ([policy.private_dir.resolve()] if policy.private_dir else [])
    if account is not None:
        targets = readonly + [t for _, t in etc]
        targets += [Path(n) for n in gpu_device_nodes()] if policy.gpu else []
        argv += _ancestor_dirs(targets)
    if policy.gpu:
        argv += _gpu_device_args()
    for d in _SYSTEM_DIRS:
        if os.path.islink(d):
            argv += ["--symlink", os.readlink(d), d]
    for p in readonly:
        argv += ["--ro-bind", str(p), str(p)]
    for source, target in etc:
        argv += ["--ro-bind", str(source), str(target)]
    if policy.gpu and os.path.isdir("/sys"):
        argv += ["--ro-bind", "/sys", "/sys"]
    covers = _cover_args(argv, readonly, hidden, policy.overlays)
    if account is not None:        # folders above these may lie in a cover: made after it
        argv += _ancestor_dirs(writable + [Path(s) for s in policy.sockets])
    for folder in writable:
        argv += ["--bind", str(folder), str(folder)]
    for sock in policy.sockets:
        # Only the socket, read-only: the kernel can connect to it (a socket needs no write
        # access on its mount) but cannot replace it or put anything beside it.
        argv += ["--ro-bind", str(sock), str(sock)]
    # The covers are read-only once the writable folders inside them are mounted, and so is
    # the sandbox's root (the folders bwrap made for the mounts, /etc among them).
    for h in covers:
        argv += ["--remount-ro", str(h)]
    argv += ["--remount-ro", "/"]
    if account is None:     # else the first process inside enters it, as the sandbox's user
        argv += ["--chdir", str(workdir)]
    if env is not None:
        argv.append("--clearenv")
        for key, value in env.items():
            argv += ["--setenv", key, value]
    return argv


def _cover_args(argv: list[str], readonly: list[Path], hidden: list[Path],
                overlays: list[tuple[Path, Path]]) -> list[Path]:
    """Cover what must stay unseen wherever a mount exposed it, then lay the overlays; appends
    to ``argv`` and returns the folders covered (remounted read-only at the end)."""
    mounted = _PathSet(readonly)
    covers: list[Path] = []
    for h in hidden:
        if mounted.holds(h) and h.exists():
            if h.is_dir():
                argv += ["--tmpfs", str(h)]
                covers.append(h)
            else:
                argv += ["--ro-bind", "/dev/null", str(h)]
    for source, target in overlays:
        target = target.resolve()
        if mounted.holds(target) and target.is_dir():
            argv += ["--ro-bind", str(source.resolve()), str(target)]
    return covers


def sandbox_argv(policy: SandboxPolicy, command: list[str], *, bwrap: str | None = None,
                 env: dict[str, str] | None = None) -> list[str]:
    """The ``bwrap`` command line that runs ``command`` under ``policy``, every option on it
    (what :func:`sandbox_launch` starts, with the options out of sight).

    ``env`` replaces the environment inside (``--clearenv`` then ``--setenv`` each entry).
    """
    bwrap = bwrap or bwrap_binary()
    options = sandbox_options(policy, bwrap=bwrap, env=env)
    return [bwrap, *options, "--", *_inner_command(policy, command)]


def _inner_command(policy: SandboxPolicy, command: list[str]) -> list[str]:
    """``command``, started as the sandbox's account where root sets the sandbox up."""
    account = _account_of(policy)
    if account is None:
        return list(command)
    from .sandbox_account import drop_command

    return drop_command(account, policy.workdir.resolve(), command, sys.executable)


@dataclass
class SandboxLaunch:
    """A sandbox's command as it is started: ``argv`` names no path of the policy (bwrap reads
    its options from ``pass_fds[0]``, a file only this start holds), so the sandbox's
    ``/proc/1/cmdline`` -- bwrap is its first process -- shows nothing it must not see."""

    argv: list[str]
    pass_fds: tuple[int, ...]

    def close(self) -> None:
        """Close the options' file here once the sandbox started (bwrap closed its copy)."""
        for fd in self.pass_fds:
            try:
                os.close(fd)
            except OSError:
                pass
        self.pass_fds = ()


def _options_file(options: list[str]) -> int:
    """A file descriptor, not inherited by default, of a file holding ``options`` NUL-separated,
    read from its start."""
    data = b"".join(os.fsencode(o) + b"\0" for o in options)
    try:
        fd = os.memfd_create("ptxlab-sandbox-options")
    except (AttributeError, OSError):
        import tempfile

        with tempfile.TemporaryFile() as fh:
            fd = os.dup(fh.fileno())
    view = memoryview(data)
    while view:
        view = view[os.write(fd, view):]
    os.lseek(fd, 0, os.SEEK_SET)
    return fd


def sandbox_launch(policy: SandboxPolicy, command: list[str], *, bwrap: str | None = None,
                   env: dict[str, str] | None = None) -> SandboxLaunch:
    """What to start for ``command`` under ``policy``: ``argv`` with ``pass_fds`` (``Popen``'s
    argument of that name; :meth:`SandboxLaunch.close` once started)."""
    bwrap = bwrap or bwrap_binary()
    fd = _options_file(sandbox_options(policy, bwrap=bwrap, env=env))
    return SandboxLaunch([bwrap, "--args", str(fd), "--", *_inner_command(policy, command)],
                         (fd,))
