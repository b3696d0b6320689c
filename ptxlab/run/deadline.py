"""Waiting until a deadline, a bounded wait at a time.

Every wait for a child in ``run/`` (a forked launch, an executor's reply, an executor's start)
is the same loop: until the deadline passes, wait a short while for the thing itself, then look
at what else may have gone wrong (the child died, it went over its memory). :class:`Deadline`
writes the loop's clock once; the callers keep their own checks.

No thread and nothing but the clock: the caller may be a kernel whose memory a learner has used
up, where a new thread cannot start.
"""
from __future__ import annotations

import time
from collections.abc import Iterator

__all__ = ["Deadline"]


class Deadline:
    """``timeout_s`` from now on the monotonic clock; ``None`` is a deadline that never passes."""

    def __init__(self, timeout_s: float | None) -> None:
        self.at = None if timeout_s is None else time.monotonic() + timeout_s

    def left(self) -> float | None:
        """Seconds until the deadline (``<= 0`` once it passed); ``None`` without one."""
        return None if self.at is None else self.at - time.monotonic()

    def waits(self, most_s: float | None = None) -> Iterator[float | None]:
        """How long to wait next, until the deadline passes: what is left of it, at most
        ``most_s`` (``None``: as long as is left, and ``None``, "for ever", without a deadline).

        The time left is read anew before each wait, so a loop over this that ends without a
        ``break`` ends at the deadline, never early, and its last wait never runs past it."""
        while True:
            left = self.left()
            if left is not None and left <= 0:
                return
            if most_s is None:
                yield left
            else:
                yield most_s if left is None else min(most_s, left)
