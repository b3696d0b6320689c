"""No import cycles among ptxlab's modules, counted the way grimp counts imports: an import inside
a function (or under ``if TYPE_CHECKING:``) is an import too, so a cycle cannot hide in one.

import-linter's contracts keep the layers one-way (``tests/package/test_layers.py``); inside a layer
two modules can still import each other. This test finds those: the strongly connected
components of the import graph (Tarjan), each reported with one concrete cycle through it.

One test per top-level part of the package. A part known to hold a cycle still is marked
``xfail(strict=True)`` naming it, so the test fails the moment the cycle is gone: then take
the mark off, and the part stays free of cycles from then on.
"""
from __future__ import annotations

from collections import deque
from functools import lru_cache
from pathlib import Path

import pytest

grimp = pytest.importorskip("grimp", reason="grimp comes with import-linter (./lab setup --dev)")

PACKAGE = "ptxlab"
ROOT = Path(__file__).resolve().parents[2]


@lru_cache(maxsize=1)
def _graph():
    return grimp.build_graph(PACKAGE, include_external_packages=False, cache_dir=None)


def _imports(graph, module: str) -> set[str]:
    return graph.find_modules_directly_imported_by(module)


@lru_cache(maxsize=1)
def _components() -> tuple[tuple[str, ...], ...]:
    """Every strongly connected component of ptxlab's import graph of two or more modules, by
    Tarjan's algorithm (iterative: no recursion limit). A module that imports itself is no
    cycle between modules (``run/isolation.py`` does, run as ``__main__``, so that what it
    pickles names the module by its package path)."""
    graph = _graph()
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    found: list[tuple[str, ...]] = []
    for root in sorted(graph.modules):
        if root in index:
            continue
        index[root] = low[root] = len(index)
        stack.append(root)
        on_stack.add(root)
        work = [(root, iter(sorted(_imports(graph, root))))]
        while work:
            node, successors = work[-1]
            for nxt in successors:
                if nxt not in index:
                    index[nxt] = low[nxt] = len(index)
                    stack.append(nxt)
                    on_stack.add(nxt)
                    work.append((nxt, iter(sorted(_imports(graph, nxt)))))
                    break
                if nxt in on_stack:
                    low[node] = min(low[node], index[nxt])
            else:
                work.pop()
                if work:
                    parent = work[-1][0]
                    low[parent] = min(low[parent], low[node])
                if low[node] == index[node]:
                    members = []
                    while True:
                        m = stack.pop()
                        on_stack.discard(m)
                        members.append(m)
                        if m == node:
                            break
                    if len(members) > 1:
                        found.append(tuple(sorted(members)))
    return tuple(sorted(found))


def _one_cycle(component: tuple[str, ...]) -> list[str]:
    """A shortest cycle through the first module of ``component``: [a, b, ..., a]."""
    graph = _graph()
    inside = set(component)
    start = component[0]
    came_from: dict[str, str] = {}
    queue = deque([start])
    while queue:
        node = queue.popleft()
        for nxt in sorted((_imports(graph, node) & inside) - {node}):
            if nxt == start:
                path = [node]
                while path[-1] != start:
                    path.append(came_from[path[-1]])
                return [start, *reversed(path[:-1]), start]
            if nxt not in came_from:
                came_from[nxt] = node
                queue.append(nxt)
    raise AssertionError(f"{component} is not a cycle")


def _within(scope: str, module: str) -> bool:
    return module == scope or module.startswith(scope + ".")


def cycles_in(scope: str) -> list[str]:
    """The cycles that touch a module of ``scope`` (a package or a module name), as text."""
    return [f"{len(comp)} modules import each other: {', '.join(comp)}\n"
            f"    e.g. {' -> '.join(_one_cycle(comp))}"
            for comp in _components() if any(_within(scope, m) for m in comp)]


def _assert_no_cycle(scope: str) -> None:
    found = cycles_in(scope)
    assert not found, (f"import cycles in {scope} (counting imports inside functions):\n  "
                       + "\n  ".join(found))


def test_the_ptx_interpreter_has_no_cycle():
    """The interpreter, the decoder and the instruction families: the families compile against
    ``decode_context``, ``lanes`` and ``flow``, never ``program`` or ``interpreter``."""
    _assert_no_cycle("ptxlab.run.ptx")


def _parts() -> list[str]:
    """The top-level subpackages and modules of ptxlab (read from the folder, so collecting
    the tests builds no graph)."""
    folder = ROOT / PACKAGE
    names = [p.name for p in folder.iterdir() if p.is_dir() and (p / "__init__.py").exists()]
    names += [p.stem for p in folder.glob("*.py") if p.stem != "__init__"]
    return sorted(f"{PACKAGE}.{n}" for n in names)


#: Parts of ptxlab that still hold a cycle, with the modules in it.
KNOWN_CYCLES: dict[str, str] = {}


@pytest.mark.parametrize("part", [
    pytest.param(part, marks=pytest.mark.xfail(strict=True, reason=KNOWN_CYCLES[part]))
    if part in KNOWN_CYCLES else part for part in _parts()])
def test_no_cycle_in(part):
    _assert_no_cycle(part)


def test_the_package_face_is_in_no_cycle():
    """``ptxlab/__init__.py`` itself (the face the learner imports) is in no cycle."""
    assert not [c for c in _components() if PACKAGE in c], cycles_in(PACKAGE)


def test_the_known_cycles_name_parts_of_the_package():
    assert set(KNOWN_CYCLES) <= set(_parts()), sorted(set(KNOWN_CYCLES) - set(_parts()))
