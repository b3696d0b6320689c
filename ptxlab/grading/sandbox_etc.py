"""The sandbox's ``/etc``: what a notebook kernel reads there, and nothing else of the machine's.

The machine's ``/etc`` holds what no notebook needs and some that no notebook may read: the
accounts of the machine (``passwd``, ``group``, ``shadow``), host keys and TLS private keys,
the network's host names, crontabs, the global Jupyter and nbgrader settings (the exchange and
the course). A kernel -- the dynamic loader, Python, IPython, ipykernel, numpy, CuPy -- reads
only:

* the loader's cache and its configuration (``ld.so.cache``, ``ld.so.conf``, ``ld.so.conf.d``);
* the system's symbolic links of ``update-alternatives`` (``/usr/local/cuda`` is one of them
  where the CUDA toolkit comes from NVIDIA's packages);
* the time zone (``localtime``, ``timezone``), and a Debian Python's ``/etc/python3.*`` (its
  ``sitecustomize``);
* and, made by the grader, an account list naming only the sandbox's user, its group, a
  ``hosts`` file with ``localhost`` and the sandbox's host name, and a ``nsswitch.conf`` that
  looks nowhere but in those files.
"""
from __future__ import annotations

import atexit
import glob
import os
import shutil
import tempfile
from pathlib import Path

#: The host name inside every sandbox.
SANDBOX_HOSTNAME = "grading"

__all__ = ["ETC_KEPT", "etc_mounts", "synthetic_etc", "SANDBOX_HOSTNAME"]

#: Entries of the machine's ``/etc`` a sandbox shows, read-only, where they exist (globs).
ETC_KEPT = ("ld.so.cache", "ld.so.conf", "ld.so.conf.d", "alternatives", "localtime",
            "timezone", "python3", "python3.*")
#: The name of the sandbox's user and group in its account list.
_USER = "sandbox"
_TREES: dict[tuple[int, int], Path] = {}


def _files(uid: int, gid: int) -> dict[str, str]:
    return {
        "passwd": f"{_USER}:x:{uid}:{gid}:grading sandbox:/tmp/home:/usr/sbin/nologin\n",
        "group": f"{_USER}:x:{gid}:\n",
        "hosts": f"127.0.0.1\tlocalhost\n::1\tlocalhost\n127.0.1.1\t{SANDBOX_HOSTNAME}\n",
        "hostname": f"{SANDBOX_HOSTNAME}\n",
        "nsswitch.conf": "passwd: files\ngroup: files\nshadow: files\nhosts: files\n"
                         "networks: files\nprotocols: files\nservices: files\n",
    }


def synthetic_etc(uid: int, gid: int) -> Path:
    """A folder (made once per process and account, removed at exit) holding the files the
    grader writes for a sandbox whose user is ``uid``/``gid`` inside."""
    folder = _TREES.get((uid, gid))
    files = _files(uid, gid)
    if folder is not None and all((folder / name).is_file() for name in files):
        return folder
    _remove_stale()
    folder = Path(tempfile.mkdtemp(prefix=f"ptxlab-etc-{os.getpid()}-"))
    for name, text in files.items():
        (folder / name).write_text(text)
        (folder / name).chmod(0o644)
    folder.chmod(0o755)
    _TREES[(uid, gid)] = folder
    atexit.register(shutil.rmtree, folder, True)
    return folder


def _remove_stale() -> None:
    """The folders of this account's processes that ended without removing theirs (a worker
    killed at a submission's limit)."""
    for folder in Path(tempfile.gettempdir()).glob("ptxlab-etc-*-*"):
        try:
            pid = int(folder.name.split("-")[2])
            if folder.stat().st_uid != os.geteuid() or pid == os.getpid():
                continue
            os.kill(pid, 0)
        except ProcessLookupError:
            shutil.rmtree(folder, ignore_errors=True)
        except (ValueError, OSError):
            continue


def etc_mounts(uid: int, gid: int, etc: str = "/etc") -> list[tuple[Path, Path]]:
    """``(source, target)`` of every file and folder the sandbox's ``/etc`` shows, read-only."""
    mounts: list[tuple[Path, Path]] = []
    for pattern in ETC_KEPT:
        for found in sorted(glob.glob(os.path.join(etc, pattern))):
            if os.path.exists(found):         # a dangling link shows nothing
                mounts.append((Path(found).resolve(), Path("/etc") / Path(found).name))
    made = synthetic_etc(uid, gid)
    mounts += [(made / name, Path("/etc") / name) for name in sorted(_files(uid, gid))]
    return mounts
