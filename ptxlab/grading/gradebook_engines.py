"""One database engine per gradebook in a process that grades many submissions.

nbgrader opens a new :class:`nbgrader.api.Gradebook` for each step of each submission (the
assignment's setup, each preprocessor that records grades, the grader's own reads), and each
Gradebook makes a new SQLAlchemy engine. SQLAlchemy keeps the SQL it compiles from a query in a
cache of the engine that made it, so a grading worker compiled every one of nbgrader's queries
again for every submission: measured, most of nbgrader's own step and a third of the worker's
time on the GIL.

:func:`share_engines` lets every Gradebook of this process reuse one engine per database URL.
A Gradebook's ``close`` still disposes of the engine's connections (the engine opens new ones
on its next use), so no connection, lock or transaction outlives the Gradebook that made it;
what is kept is the compiled SQL and the dialect's settings, which depend on the database's kind
only. Nothing else changes: the same statements run in the same order.
"""
from __future__ import annotations

import threading
from typing import Any, Callable

__all__ = ["share_engines", "shared_engine_count"]

#: The engines made so far, by the arguments they were made with.
_ENGINES: dict[str, Any] = {}
_LOCK = threading.Lock()
_MARK = "_ptxlab_shared_engines"


def _sharing(make: Callable[..., Any]) -> Callable[..., Any]:
    """``make`` (SQLAlchemy's ``create_engine``), returning the engine it made before for the
    same arguments."""

    def create_engine(url: Any, *args: Any, **kwargs: Any) -> Any:
        key = repr((str(url), args, sorted(kwargs.items())))
        with _LOCK:
            engine = _ENGINES.get(key)
            if engine is None:
                engine = _ENGINES[key] = make(url, *args, **kwargs)
        return engine

    setattr(create_engine, _MARK, True)
    return create_engine


def share_engines() -> bool:
    """Make nbgrader's Gradebooks in this process share one engine per database URL (again
    is a no-op); ``False`` where this nbgrader makes its engines some other way."""
    import nbgrader.api as api

    make = getattr(api, "create_engine", None)
    if make is None:
        return False
    if not getattr(make, _MARK, False):
        api.create_engine = _sharing(make)
    return True


def shared_engine_count() -> int:
    """How many engines this process holds for its gradebooks."""
    return len(_ENGINES)
