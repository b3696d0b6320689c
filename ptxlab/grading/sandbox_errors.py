"""The sandbox's own error, apart from the sandbox, so the modules it is built from (whom it runs
as, its ``/etc``) can raise it without importing the sandbox back."""
from __future__ import annotations

__all__ = ["SandboxUnavailable"]


class SandboxUnavailable(RuntimeError):
    """No working ``bwrap`` here; the message says how to install it."""
