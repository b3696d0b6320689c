"""A grading process's Gradebooks share one engine per database: nbgrader's SQL is compiled
once per process, and no connection outlives the Gradebook that opened it."""
from __future__ import annotations

import shutil
from pathlib import Path

import pytest

from ptxlab.grading import gradebook_engines

api = pytest.importorskip("nbgrader.api")


@pytest.fixture
def shared(monkeypatch):
    """share_engines() installed for one test, nbgrader's own create_engine back after it."""
    monkeypatch.setattr(api, "create_engine", api.create_engine)
    monkeypatch.setattr(gradebook_engines, "_ENGINES", {})
    assert gradebook_engines.share_engines()
    return api.Gradebook


@pytest.fixture(scope="module")
def empty_gradebook(tmp_path_factory) -> Path:
    """One new gradebook, made once: nbgrader asks alembic for its schema version (a
    subprocess of seconds) whenever it makes a database."""
    path = tmp_path_factory.mktemp("gradebook") / "empty.db"
    with api.Gradebook(f"sqlite:///{path}"):
        pass
    return path


@pytest.fixture
def new_db(empty_gradebook, tmp_path):
    """``new_db(name)``: the URL of a new gradebook file in this test's folder."""
    def make(name: str) -> str:
        shutil.copy(empty_gradebook, tmp_path / name)
        return f"sqlite:///{tmp_path / name}"
    return make


def test_one_engine_per_database(shared, new_db):
    one, two = new_db("one.db"), new_db("two.db")
    with shared(one) as a, shared(one) as b, shared(two) as c:
        assert a.engine is b.engine
        assert c.engine is not a.engine
    assert gradebook_engines.shared_engine_count() == 2
    assert gradebook_engines.share_engines()         # again: still one wrapper, same engines
    with shared(one) as d:
        assert d.engine is a.engine


def test_without_sharing_each_gradebook_makes_its_own(new_db):
    url = new_db("g.db")
    if getattr(api.create_engine, gradebook_engines._MARK, False):
        pytest.skip("this process already shares its gradebook engines")
    with api.Gradebook(url) as a, api.Gradebook(url) as b:
        assert a.engine is not b.engine


def test_the_second_gradebook_reuses_the_compiled_sql(shared, new_db):
    from sqlalchemy import event

    url = new_db("g.db")
    with shared(url) as gb:
        gb.add_student("alice")
        engine = gb.engine
    hits: list[bool] = []

    def seen(conn, cursor, statement, parameters, context, executemany):
        hits.append(context.cache_hit.name == "CACHE_HIT")

    event.listen(engine, "after_cursor_execute", seen)
    try:
        with shared(url) as gb:
            assert gb.find_student("alice").id == "alice"
    finally:
        event.remove(engine, "after_cursor_execute", seen)
    assert hits and any(hits)        # the course check and the student lookup: compiled before


def test_a_closed_gradebook_leaves_no_connection(shared, new_db):
    url = new_db("g.db")
    with shared(url) as gb:
        gb.add_student("alice")
        engine = gb.engine
        assert engine.pool.checkedin() >= 1
    assert engine.pool.checkedin() == 0 and engine.pool.checkedout() == 0


def test_a_replaced_database_file_is_read_afresh(shared, new_db, tmp_path):
    """Another process replaces the gradebook (a restore, a new term): the next Gradebook reads
    the new file, not an old connection's."""
    url, other = new_db("g.db"), new_db("other.db")
    with shared(other) as gb:
        gb.add_student("bob")
    with shared(url) as gb:
        gb.add_student("alice")
    (tmp_path / "g.db").unlink()
    shutil.copy(tmp_path / "other.db", tmp_path / "g.db")
    with shared(url) as gb:
        assert [s.id for s in gb.students] == ["bob"]


def test_nested_gradebooks_survive_the_inner_ones_close(shared, new_db):
    url = new_db("g.db")
    with shared(url) as outer:
        outer.add_student("alice")
        with shared(url) as inner:
            inner.add_student("bob")
        outer.add_student("carol")                 # the pool was renewed under it
        assert sorted(s.id for s in outer.students) == ["alice", "bob", "carol"]
    with shared(url) as gb:
        assert sorted(s.id for s in gb.students) == ["alice", "bob", "carol"]


def test_the_grading_worker_shares_its_engines(tmp_path, monkeypatch):
    monkeypatch.setattr(api, "create_engine", api.create_engine)
    monkeypatch.setattr(gradebook_engines, "_ENGINES", {})
    from ptxlab.grading.grading_worker import SubmissionGrader

    SubmissionGrader(tmp_path, "ps1")
    assert getattr(api.create_engine, gradebook_engines._MARK, False)
