"""Whom a grading sandbox runs as, outside it.

bubblewrap started by an unprivileged account maps the sandbox's user (``nobody`` inside its user
namespace) to that account outside: without subordinate ids (``/etc/subuid`` and the setuid
``newuidmap``, which bubblewrap does not use) there is no other uid it may map to. So a
notebook run by the grading account *is* the grading account to the machine's kernel: what
keeps it from the course is what the sandbox mounts, not its uid.

A grader running as root can do better, as CMS's ``isolate`` and PrairieLearn's graders do (set
the sandbox up as root, then run the untrusted code as an unprivileged uid of its own): bwrap
then builds the sandbox with root's view of the file system and no user namespace, keeping only
the capabilities to change uid, and the first process inside (:func:`drop_command`) becomes
:class:`SandboxAccount` -- by default uid and gid 60000, ``PTXLAB_SANDBOX_UID`` (``UID`` or
``UID:GID``) names another -- before the learner's code starts. Files the notebook writes then
belong to that uid, never to root; the folders it may write are handed to it
(:func:`hand_over`).
"""
from __future__ import annotations

import os
import pwd
import stat
from dataclasses import dataclass
from pathlib import Path

__all__ = ["SandboxAccount", "ACCOUNT_ENV", "DEFAULT_ID", "sandbox_account", "hand_over",
           "drop_command", "describe_account"]

#: Names the uid (and gid) a sandbox started by root runs as: ``UID`` or ``UID:GID``.
ACCOUNT_ENV = "PTXLAB_SANDBOX_UID"
#: The default: the first uid of ``isolate``'s sandboxes, an account of no person.
DEFAULT_ID = 60000

#: Run inside the sandbox as its first process (as root, with CAP_SETUID and CAP_SETGID only):
#: become the sandbox's account, ask to die with bwrap again (a change of uid clears it), enter
#: the working folder, then run the command. ``python -I -S``: nothing but the standard library.
_DROP = """\
import ctypes, os, signal, sys
uid, gid, cwd = int(sys.argv[1]), int(sys.argv[2]), sys.argv[3]
parent = os.getppid()
os.setgroups([])
os.setresgid(gid, gid, gid)
os.setresuid(uid, uid, uid)
if os.getuid() != uid or os.geteuid() != uid or os.getgid() != gid:
    os._exit(126)
ctypes.CDLL(None).prctl(1, signal.SIGKILL)
if os.getppid() != parent:
    os._exit(126)
os.chdir(cwd)
os.environ["PWD"] = cwd
os.execv(sys.argv[5], sys.argv[5:])
"""


@dataclass(frozen=True)
class SandboxAccount:
    """The uid and gid a sandbox started by root runs as, outside and inside alike."""

    uid: int
    gid: int


def _parse(text: str) -> SandboxAccount:
    uid_text, _, gid_text = text.strip().partition(":")
    try:
        uid = int(uid_text)
        gid = int(gid_text) if gid_text else uid
    except ValueError:
        raise ValueError(f"{ACCOUNT_ENV} must be UID or UID:GID, got {text!r}") from None
    if uid <= 0 or gid <= 0:
        raise ValueError(f"{ACCOUNT_ENV} must name an unprivileged uid and gid, got {text!r}")
    return SandboxAccount(uid, gid)


def sandbox_account() -> SandboxAccount | None:
    """The account a sandbox runs as when this process is root; ``None`` otherwise (bwrap then
    maps the sandbox's ``nobody`` to this process's own account).

    The default uid must belong to no account of the machine (whose owner could then reach the
    sandbox's processes and files); a uid named in ``PTXLAB_SANDBOX_UID`` is the
    administrator's choice (a dedicated system account, say) and is taken as it is.
    """
    if os.geteuid() != 0:
        return None
    named = os.environ.get(ACCOUNT_ENV, "").strip()
    if named:
        return _parse(named)
    from .sandbox_errors import SandboxUnavailable

    try:
        owner = pwd.getpwuid(DEFAULT_ID).pw_name
    except KeyError:
        return SandboxAccount(DEFAULT_ID, DEFAULT_ID)
    raise SandboxUnavailable(
        f"the grader runs as root and runs each sandbox as uid {DEFAULT_ID}, but that uid is "
        f"the account {owner!r} here: set {ACCOUNT_ENV} to a uid of no person's account")


def _give(path: str, account: SandboxAccount) -> None:
    """Folders and regular files only, and no file with another name elsewhere (a hard link's
    owner is the owner of every name of it): links are never followed, nor their targets given."""
    st = os.lstat(path)
    if stat.S_ISDIR(st.st_mode) or (stat.S_ISREG(st.st_mode) and st.st_nlink == 1):
        os.chown(path, account.uid, account.gid, follow_symlinks=False)


def hand_over(path: Path, account: SandboxAccount | None) -> None:
    """Give ``path`` and everything under it to ``account`` (nothing when ``None``): the
    folders a sandbox may write, and the files the grader put there for it."""
    if account is None:
        return
    _give(str(path), account)
    if path.is_symlink() or not path.is_dir():
        return
    for folder, dirs, files in os.walk(path):
        for name in dirs + files:
            _give(os.path.join(folder, name), account)


def drop_command(account: SandboxAccount, workdir: Path, command: list[str],
                 python: str) -> list[str]:
    """``command``, run inside the sandbox in ``workdir`` as ``account`` (``python`` is an
    interpreter the sandbox shows)."""
    return [python, "-I", "-S", "-c", _DROP, str(account.uid), str(account.gid),
            str(workdir), "--", *command]


def describe_account(account: SandboxAccount | None) -> str:
    """One line for the instructor: whom the notebooks run as, and what that leaves open."""
    if account is not None:
        return (f"sandbox account: the grader is root; it sets each sandbox up and runs the "
                f"notebook as uid {account.uid}, gid {account.gid}, with no capability "
                f"({ACCOUNT_ENV} names another uid)")
    me = os.geteuid()
    try:
        name = pwd.getpwuid(me).pw_name
    except KeyError:
        name = f"uid {me}"
    return (f"sandbox account: notebooks run as 'nobody' in a user namespace of their own, "
            f"which outside is the grading account ({name}, uid {me}): an unprivileged grader "
            "has no other uid to map it to without subordinate ids, so the sandbox's mounts, "
            "not its uid, keep the course out of its reach (a grader started as root runs "
            "each sandbox as a uid of its own)")
