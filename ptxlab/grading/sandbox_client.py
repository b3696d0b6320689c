"""The notebook's side of grading: the whole ``ptxlab`` a graded notebook can import.

In a grading run this file *is* the package ``ptxlab`` inside the sandbox
(:mod:`ptxlab.grading.client_package` mounts it in place of the real package), so the learner's
process holds no answer: no layouts, no emulator, no tensor-core model, no exercise cases, no
reference kernel, no seed. It imports nothing but the standard library and IPython, and it
never computes an expected value. What it does:

* ``from ptxlab.exercises import ldmatrix as ex`` gives exercises whose ``check``/``grade``
  only say that the grader checks the answer (the verdict is computed by the grader's judge,
  :mod:`ptxlab.grading.judge`, in a process that runs no learner code);
* every other ``ptxlab`` name (widgets, pictures, ``launch``, ``layouts`` ...) is
  :class:`Off`: using it prints, once, that pictures and runs are off while grading, and
  returns an object that stays quiet, so a cell that draws a picture does not stop the
  notebook;
* :func:`hand_back` is what the grader runs right after each test cell: it asks the answer
  named by the (trusted) test cell the questions the judge chose for this run and hands the
  replies back as plain data -- built-in numbers, text and lists, copied so that no object of
  the learner's leaves the sandbox; a kernel's source must be an exact ``str``, and one longer
  than the grader reads goes back as its length alone (never cut), so the judge refuses it.

The questions are inputs only (a lane, a base address, a stride ...), drawn by the judge from a
seed the notebook never sees; the expected values stay in the judge.
"""
from __future__ import annotations

import importlib
import importlib.abc
import importlib.machinery
import json
import math
import sys
import types

__all__ = ["hand_back", "plain", "ClientExercise", "Off", "MIME_TYPE", "GRADING_CLIENT",
           "OFF_STOP_NOTE"]

#: The display type the replies leave the notebook's kernel under.
MIME_TYPE = "application/x-ptxlab-replies+json"
#: Set on this module so code (and tests) can tell the client from the real package.
GRADING_CLIENT = True
_OPAQUE = "__ptxlab_opaque__"
#: A dict answer ({case: answer}) travels as its (key, value) pairs under this key.
_DICT = "__ptxlab_dict__"
#: Longest text that leaves the sandbox as itself: the grader compiles a kernel source of at most
#: 1 MiB (``ptxlab.run.launch_request.MAX_SOURCE_BYTES``); a longer text goes back as its length
#: alone, never cut into a shorter text the grader would judge in its place.
_MAX_TEXT = 1 << 20
_MAX_ITEMS = 4096
_MAX_CALLS = 50_000
#: The first words of the line a cell ends with when it stopped at something that is off.
OFF_STOP_NOTE = "[grading] this cell stopped at something that is off while grading"
_OFF_NOTE = ("[grading] pictures, widgets and kernel runs are off while the notebook is graded: "
             "the grader runs your answers itself (see the test cells)")
_EXERCISE_PACKAGES = ("ptxlab.exercises", "ptxlab.teach.exercises")


# ---------------------------------------------------------------------------------------------
# Plain data out of the sandbox
# ---------------------------------------------------------------------------------------------

def _opaque(value: object) -> dict:
    try:
        name = type(value).__name__[:40]
    except Exception:
        name = "object"
    return {_OPAQUE: name}


def plain(value: object, depth: int = 0) -> object:
    """``value`` copied into built-in data (``None``, ``bool``, ``int``, ``float``, ``str``,
    lists), never calling a method the learner could have overridden; anything else becomes an
    opaque description that equals nothing."""
    kind = type(value)
    if value is None or kind is bool:
        return value
    if kind is int:
        return value
    if kind is float:
        return value if math.isfinite(value) else _opaque(value)
    if kind is str:
        return value if len(value) <= _MAX_TEXT else _too_long(value)
    if isinstance(value, int):                  # an int subclass: its value, not its methods
        return int.__int__(value)
    if isinstance(value, float):
        f = float.__float__(value)
        return f if math.isfinite(f) else _opaque(value)
    if depth >= 4:
        return _opaque(value)
    if kind in (list, tuple):
        return [plain(v, depth + 1) for v in value[:_MAX_ITEMS]]
    if kind is dict:                 # dict's own items, never an overridden method
        pairs = list(dict.items(value))[:_MAX_ITEMS]
        return {_DICT: [[plain(k, depth + 1), plain(v, depth + 1)] for k, v in pairs]}
    module = getattr(kind, "__module__", "") or ""
    if module == "numpy" or module.startswith("numpy."):
        # numpy scalars and arrays: their values, through numpy's own conversion
        try:
            import numpy as np

            if isinstance(value, np.generic):
                return plain(value.item(), depth)
            if isinstance(value, np.ndarray) and kind is np.ndarray and value.size <= _MAX_ITEMS:
                return plain(np.ndarray.tolist(value), depth)
        except Exception:
            pass
    return _opaque(value)


def _too_long(text: str) -> dict:
    """A text over :data:`_MAX_TEXT`, described by its length (nothing of it is copied)."""
    return {_OPAQUE: "str", "text": f"a text of {len(text)} characters, more than the "
                                    f"{_MAX_TEXT} the grader reads (is a table or a file pasted "
                                    "into it?)"}


def _exception_text(exc: BaseException) -> str:
    try:
        text = f"{type(exc).__name__}: {exc}"
    except Exception:
        text = type(exc).__name__
    tb, line = exc.__traceback__, None
    while tb is not None:
        if tb.tb_frame.f_globals.get("__name__") == "__main__":
            line = tb.tb_lineno
        tb = tb.tb_next
    return (text + (f" (line {line})" if line else ""))[:500]


def _reply_calls(fn, questions: list) -> dict:
    calls: dict[str, dict] = {}
    for q in questions[:_MAX_CALLS]:
        key, args, kwargs = q["key"], list(q.get("args") or []), dict(q.get("kwargs") or {})
        try:
            out = fn(*args, **kwargs)
        except NotImplementedError:
            calls[key] = {"raised": "NotImplementedError"}
            continue
        except Exception as exc:          # the learner's bug, replayed as its text
            calls[key] = {"raised": type(exc).__name__[:60], "text": _exception_text(exc)}
            continue
        calls[key] = {"value": plain(out)}
    return {"calls": calls}


def _reply_data(value: object) -> dict:
    if isinstance(value, str) and type(value) is not str:
        return {"refused": f"the answer is a `{type(value).__name__[:40]}`, a subclass of str, "
                           "not a plain str: an answer's text must be a plain str",
                "data": str.__str__(value)[:_MAX_TEXT]}
    if isinstance(value, str) and str.__len__(value) > _MAX_TEXT:
        # an answer's text (a kernel source) over the limit: its length only, so the judge
        # refuses it by name rather than judge (or compile) a part of it
        return {"too_long": str.__len__(value), "limit": _MAX_TEXT}
    return {"data": plain(value)}


def _reply(namespace: dict, request: dict) -> dict:
    name = request["answer"]
    if name not in namespace:
        return {"missing": True}
    value = namespace[name]
    questions = request.get("questions")
    if callable(value) and not isinstance(value, str):
        if questions is None:
            return {"data": _opaque(value)}
        return _reply_calls(value, questions)
    return _reply_data(value)


def replies(namespace: dict, requests: list[dict]) -> dict[str, dict]:
    """Each request's reply: the answer's values on the judge's questions, or the answer itself
    as data."""
    out: dict[str, dict] = {}
    for request in requests:
        try:
            out[request["key"]] = _reply(namespace, request)
        except Exception as exc:            # a broken answer is its own failure
            out[request["key"]] = {"error": _exception_text(exc)}
    return out


def hand_back(namespace: dict, requests_json: str, token: str) -> None:
    """Answer the judge's requests and hand the replies back as one display message."""
    from IPython.display import display

    text = json.dumps({"token": str(token), "replies": replies(namespace, json.loads(requests_json))})
    display({MIME_TYPE: text}, raw=True)


# ---------------------------------------------------------------------------------------------
# What the notebook imports
# ---------------------------------------------------------------------------------------------

class Off:
    """Anything of the course the notebook uses for pictures or runs: off while grading."""

    _noted = False
    #: Whether the running cell used something that is off (reset before every cell).
    used_in_cell = False

    def __init__(self, name: str = "ptxlab"):
        object.__setattr__(self, "_name", name)
        Off.used_in_cell = True
        _hook_ipython()

    def _note(self) -> None:
        if not Off._noted:
            Off._noted = True
            print(_OFF_NOTE)

    def __getattr__(self, name: str) -> "Off":
        if name.startswith("__") and name.endswith("__"):
            raise AttributeError(name)
        return Off(f"{self._name}.{name}")

    def __call__(self, *args, **kwargs) -> "Off":
        self._note()
        return Off(f"{self._name}(...)")

    def __iter__(self):
        self._note()
        return iter(())

    def __getitem__(self, key) -> "Off":
        return Off(f"{self._name}[...]")

    def __bool__(self) -> bool:
        return False

    def __repr__(self) -> str:
        return f"<{self._name}: off while the notebook is graded>"

    def _repr_html_(self) -> str:
        return "<i>(off while the notebook is graded)</i>"


_HOOKED = False


def _hook_ipython() -> None:
    """In the notebook's IPython: a cell that fails only because it used something that is
    off (a picture's data unpacked, a launch's outputs indexed) ends with the note instead of
    an error, so the feedback does not blame the learner for what grading switched off."""
    global _HOOKED
    if _HOOKED:
        return
    _HOOKED = True
    try:
        from IPython import get_ipython

        shell = get_ipython()
    except Exception:
        shell = None
    if shell is None:
        _HOOKED = False          # not in IPython yet (the kernel is starting): try next time
        return

    def before_cell(*_args) -> None:
        Off.used_in_cell = False

    shown = shell.showtraceback

    def showtraceback(*args, **kwargs):
        value = sys.exc_info()[1]
        if Off.used_in_cell and isinstance(value, Exception) and not isinstance(
                value, _PendingVerdict):
            print(f"{OFF_STOP_NOTE} ({type(value).__name__}); your answers are checked by the "
                  "grader")
            return None
        return shown(*args, **kwargs)

    shell.events.register("pre_run_cell", before_cell)
    shell.showtraceback = showtraceback


class _PendingVerdict(AssertionError):
    """A test cell's line until the judge replaces it with its verdict."""

    def _render_traceback_(self) -> list[str]:
        # IPython shows this instead of a traceback: the judge replaces the output, and a
        # full, coloured traceback costs a graded kernel more CPU than the rest of the cell.
        return [f"{type(self).__name__}: {self}"]


class ClientExercise:
    """An exercise as the graded notebook sees it: it only says that the grader checks."""

    def __init__(self, module: str, name: str):
        self._module, self._name = module, name

    def check(self, answer=None, *, quiet: bool = False) -> None:
        if not quiet:
            print(f"{self._name}: the grader checks this answer (see the test cell below)")

    def grade(self, answer=None, hidden: bool = False) -> None:
        """Fails until the judge replaces this cell's outputs with its verdict: a grading run
        whose judge did not run gives no points, never all of them."""
        raise _PendingVerdict(f"{self._name}: the grader's judge decides this test cell "
                              "(this line stays only if the judge could not run)")

    def hint(self) -> None:
        print("hints are off while the notebook is graded")

    def reveal(self) -> None:
        print("solutions are off while the notebook is graded")

    def __getattr__(self, name: str) -> Off:
        if name.startswith("__") and name.endswith("__"):
            raise AttributeError(name)
        return Off(f"{self._module}.{self._name}.{name}")

    def __call__(self, *args, **kwargs) -> Off:
        """A helper of the exercise module (a table, a picture) rather than an exercise."""
        return Off(f"{self._module}.{self._name}")(*args, **kwargs)

    def __repr__(self) -> str:
        return f"<exercise {self._name}: checked by the grader>"


def _off_operator(name: str):
    def operator(self, *args):
        return Off(f"{getattr(self, '_name', 'ptxlab')} {name.strip('_')} ...")
    operator.__name__ = name
    return operator


#: Arithmetic and comparison on something that is off gives something that is off (a picture's
#: size computed from a table, a constant of an exercise module used in a sum).
for _name in ("__add__", "__radd__", "__sub__", "__rsub__", "__mul__", "__rmul__",
              "__truediv__", "__rtruediv__", "__floordiv__", "__rfloordiv__", "__mod__",
              "__rmod__", "__pow__", "__neg__", "__lt__", "__le__", "__gt__", "__ge__"):
    setattr(Off, _name, _off_operator(_name))
    setattr(ClientExercise, _name, _off_operator(_name))
del _name


class _ExerciseModule(types.ModuleType):
    def __getattr__(self, name: str):
        if name.startswith("__") and name.endswith("__"):
            raise AttributeError(name)
        return ClientExercise(self.__name__, name)


class _OffModule(types.ModuleType):
    def __getattr__(self, name: str):
        if name.startswith("__") and name.endswith("__"):
            raise AttributeError(name)
        if self.__name__ in _EXERCISE_PACKAGES:       # ``from ptxlab.exercises import mma``
            return importlib.import_module(f"{self.__name__}.{name}")
        return Off(f"{self.__name__}.{name}")


class _ClientFinder(importlib.abc.MetaPathFinder, importlib.abc.Loader):
    """Every ``ptxlab.*`` module the client does not hold as a file: an exercise module under
    ``ptxlab.exercises``, an :class:`Off` module elsewhere."""

    def find_spec(self, fullname, path=None, target=None):
        if not fullname.startswith("ptxlab."):
            return None
        return importlib.machinery.ModuleSpec(fullname, self, is_package=True)

    def create_module(self, spec):
        name = spec.name
        exercise = any(name.startswith(p + ".") for p in _EXERCISE_PACKAGES)
        module = (_ExerciseModule if exercise else _OffModule)(name)
        module.__path__ = []
        return module

    def exec_module(self, module) -> None:
        return None


def load_ipython_extension(ipython) -> None:
    """``%load_ext ptxlab`` in a graded notebook: ``%%cuda`` cells exist but run nothing (a
    whole program is a demo, never an answer), and say so once."""

    def cuda(line: str, cell: str) -> None:
        Off("ptxlab %%cuda")._note()

    ipython.register_magic_function(cuda, magic_kind="cell", magic_name="cuda")


def _install() -> None:
    if __name__ != "ptxlab":       # imported as ptxlab.grading.sandbox_client (tests, the grader)
        return
    if not any(isinstance(f, _ClientFinder) for f in sys.meta_path):
        sys.meta_path.append(_ClientFinder())


def __getattr__(name: str):
    """``from ptxlab import layouts`` and the like, in the sandbox: off while grading."""
    if __name__ != "ptxlab" or (name.startswith("__") and name.endswith("__")):
        raise AttributeError(name)
    return importlib.import_module(f"ptxlab.{name}")


_install()
