"""Reading a file that learner code could have written, without trusting anything about it.

A sandboxed notebook can write its working folder and its kernel's private folder, so any file
there may have been replaced by a symbolic link (to the course's ledger, to ``/dev/zero``), a
FIFO (an ``open()`` that never returns), a socket, or a file of gigabytes. The grader reads such
files only through :func:`read_regular` and :func:`read_tail`, which

* walk the path one component at a time from a folder the grader trusts (``root``), each
  component opened relative to the previous one (``openat``) with ``O_NOFOLLOW``: no link is
  followed anywhere below ``root``;
* open the file itself with ``O_NONBLOCK`` (a FIFO returns at once) and refuse anything that
  ``fstat`` does not call a regular file;
* read at most a cap of bytes, decided from ``fstat`` before reading, so an unbounded file costs
  nothing.

Each refusal is an :class:`~ptxlab.run.errors.UntrustedFile` whose ``reason`` goes on that
student's row.
"""
from __future__ import annotations

import errno
import os
import stat
from pathlib import Path

from .errors import UntrustedFile

__all__ = ["read_regular", "read_tail", "open_regular", "UntrustedFile"]

_DIR_FLAGS = os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC
_FILE_FLAGS = os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC | os.O_NOCTTY


def _kind(mode: int) -> str:
    for test, name in ((stat.S_ISFIFO, "a FIFO (named pipe)"), (stat.S_ISSOCK, "a socket"),
                       (stat.S_ISCHR, "a character device"), (stat.S_ISBLK, "a block device"),
                       (stat.S_ISDIR, "a folder"), (stat.S_ISLNK, "a symbolic link")):
        if test(mode):
            return name
    return "not a regular file"


def _refusal(path: Path, exc: OSError, *, last: bool) -> UntrustedFile:
    if exc.errno == errno.ELOOP or (exc.errno == errno.ENOTDIR and not last):
        what = "is a symbolic link" if last else "lies in a folder that is a symbolic link"
        try:
            if stat.S_ISLNK(os.lstat(path).st_mode) and not last:
                what = "lies under a symbolic link"
        except OSError:
            pass
        return UntrustedFile(str(path), f"{what}; the grader follows no link a submission made")
    if exc.errno == errno.ENXIO:
        return UntrustedFile(str(path), "is a socket or a FIFO; the grader reads regular files only")
    return UntrustedFile(str(path), f"cannot be read ({exc.strerror or exc})")


def open_regular(path: Path | str, *, root: Path | str | None = None) -> int:
    """A read-only descriptor of ``path``, a regular file reached without following any link
    below ``root`` (default: the file's own folder, which the caller trusts).

    Raises :class:`UntrustedFile` for a link, a special file or a path outside ``root``;
    ``FileNotFoundError`` when there is no such file.
    """
    path = Path(os.path.abspath(path))
    base = Path(os.path.abspath(root)) if root is not None else path.parent
    try:
        rel = path.relative_to(base)
    except ValueError:
        raise UntrustedFile(str(path), f"lies outside {base}") from None
    parts = rel.parts
    if not parts:
        raise UntrustedFile(str(path), "is a folder")
    fd = os.open(base, os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC)
    try:
        walked = base
        for name in parts[:-1]:
            walked = walked / name
            try:
                nxt = os.open(name, _DIR_FLAGS, dir_fd=fd)
            except FileNotFoundError:
                raise
            except OSError as exc:
                raise _refusal(walked, exc, last=False) from None
            os.close(fd)
            fd = nxt
        try:
            file_fd = os.open(parts[-1], _FILE_FLAGS, dir_fd=fd)
        except FileNotFoundError:
            raise
        except OSError as exc:
            raise _refusal(path, exc, last=True) from None
    finally:
        os.close(fd)
    mode = os.fstat(file_fd).st_mode
    if not stat.S_ISREG(mode):
        os.close(file_fd)
        raise UntrustedFile(str(path), f"is {_kind(mode)}; the grader reads regular files only")
    return file_fd


def read_regular(path: Path | str, *, max_bytes: int, root: Path | str | None = None,
                 offset: int = 0) -> bytes:
    """The bytes of ``path`` from ``offset`` on, read as :func:`open_regular` opens it.

    A file holding more than ``max_bytes`` from ``offset`` is refused (:class:`UntrustedFile`)
    before anything is read.
    """
    fd = open_regular(path, root=root)
    try:
        size = os.fstat(fd).st_size
        if size - offset > max_bytes:
            raise UntrustedFile(str(path), f"holds {size - offset} bytes, more than the "
                                           f"{max_bytes} the grader reads")
        return _pread_all(fd, max(0, size - offset), offset)
    finally:
        os.close(fd)


def read_tail(path: Path | str, n_bytes: int, *, root: Path | str | None = None,
              offset: int = 0) -> bytes:
    """The last ``n_bytes`` of ``path`` past ``offset`` (a log's end), opened as
    :func:`open_regular` opens it; a file of any size costs ``n_bytes`` at most."""
    fd = open_regular(path, root=root)
    try:
        size = os.fstat(fd).st_size
        start = max(offset, size - n_bytes)
        return _pread_all(fd, max(0, size - start), start)
    finally:
        os.close(fd)


def _pread_all(fd: int, count: int, offset: int) -> bytes:
    chunks, got = [], 0
    while got < count:
        chunk = os.pread(fd, min(count - got, 1 << 20), offset + got)
        if not chunk:            # the file shrank while it was read
            break
        chunks.append(chunk)
        got += len(chunk)
    return b"".join(chunks)
