"""INSERTs inside a transaction block, as drivers and ORMs send them: psycopg's executemany and
SQLAlchemy's `VALUES (%(id)s::INTEGER, %(name)s::VARCHAR, …)`.

A block's INSERT rows wait in memory until something reads the table's files or the block commits
(engine/txn.py `StagedWrite.pending`), and a parameter cast to its own column's type is taken as
the parameter (engine/insert_shape.py `_uncast`). Both change only how fast the rows get there:
each test runs the same client calls on PostgreSQL 15 and icegres and compares every outcome
(rows, command tags, SQLSTATEs) — reads of the block's own rows, savepoints, UPDATE and DELETE
and ALTER over the pending rows, ROLLBACK, other sessions' view.
"""

from __future__ import annotations

import datetime
from collections.abc import Callable, Iterator
from decimal import Decimal
from typing import Any

import psycopg
import pytest

from tests.support.fixtures import real_postgres  # noqa: F401  (session fixture)
from tests.support.icegres_server import IcegresServer, running_icegres

pytestmark = [pytest.mark.e2e, pytest.mark.timeout(300)]

TABLE = "bi.t"
CREATE = f"create table {TABLE} (id integer, name text, score double precision, day date, price numeric(10,2))"
INSERT = f"insert into {TABLE} (id, name, score, day, price) values (%s, %s, %s, %s, %s)"
# SQLAlchemy 2's psycopg dialect renders a bound cast per typed column (render_bind_cast).
CAST_INSERT = (f"insert into {TABLE} (id, name, score, day, price) "
               "values (%(id)s::INTEGER, %(name)s::VARCHAR, %(score)s, %(day)s::DATE, %(price)s::NUMERIC)")


def _rows(n: int, start: int = 0) -> list[tuple[Any, ...]]:
    return [(i, f"n{i}", i * 0.5, datetime.date(2024, 1, 1) + datetime.timedelta(days=i % 40),
             Decimal(i) / 4) for i in range(start, start + n)]


@pytest.fixture(scope="module")
def icegres(tmp_path_factory: pytest.TempPathFactory) -> Iterator[IcegresServer]:
    with running_icegres(tmp_path_factory.mktemp("block_inserts") / "lake") as srv:
        yield srv


@pytest.fixture
def both(icegres: IcegresServer, real_postgres: Any) -> Iterator[tuple[psycopg.Connection, psycopg.Connection]]:  # noqa: F811
    """A connection to PostgreSQL and one to icegres, each with an empty `bi.t`."""
    with psycopg.connect(real_postgres.dsn(), autocommit=True) as pg, \
            psycopg.connect(icegres.dsn(), autocommit=True) as ig:
        for conn in (pg, ig):
            conn.execute("create schema if not exists bi")
            conn.execute(f"drop table if exists {TABLE}")
            conn.execute(CREATE)
        yield pg, ig
        for conn in (pg, ig):
            conn.execute(f"drop table if exists {TABLE}")


def _outcome(conn: psycopg.Connection, step: Callable[[psycopg.Cursor], Any]) -> tuple[Any, ...]:
    try:
        with conn.cursor() as cur:
            step(cur)
            rows = cur.fetchall() if cur.description else None
            return "ok", cur.statusmessage, _text(rows)
    except psycopg.Error as exc:
        return "error", exc.sqlstate


def _text(rows: list[tuple[Any, ...]] | None) -> list[tuple[str | None, ...]] | None:
    if rows is None:
        return None
    text = [tuple(None if v is None else str(v) for v in r) for r in rows]
    return sorted(text, key=lambda r: tuple((v is not None, v or "") for v in r))


def _same(pg: psycopg.Connection, ig: psycopg.Connection, step: Callable[[psycopg.Cursor], Any], what: str) -> tuple[Any, ...]:
    theirs, ours = _outcome(pg, step), _outcome(ig, step)
    assert ours == theirs, f"{what}\n  postgres: {theirs}\n  icegres:  {ours}"
    return ours


def _sql(text: str, params: Any = None) -> Callable[[psycopg.Cursor], Any]:
    return lambda cur: cur.execute(text, params)


def _many(text: str, rows: list[Any]) -> Callable[[psycopg.Cursor], Any]:
    return lambda cur: cur.executemany(text, rows)


READ = f"select id, name, score, day, price from {TABLE}"


def test_a_blocks_executemany_reads_savepoints_and_changes_as_postgresql(both):
    """Rows inserted in a block are seen by the block's reads, rolled back to a savepoint, then
    updated, deleted and altered in the same block — each step as PostgreSQL answers it."""
    pg, ig = both
    steps: list[tuple[str, Callable[[psycopg.Cursor], Any]]] = [
        ("begin", _sql("begin")),
        ("executemany 200", _many(INSERT, _rows(200))),
        ("read own rows", _sql(f"select count(*), sum(id), sum(price), max(day) from {TABLE}")),
        ("savepoint", _sql("savepoint s1")),
        ("executemany 50 more", _many(INSERT, _rows(50, start=200))),
        ("count", _sql(f"select count(*) from {TABLE}")),
        ("rollback to", _sql("rollback to savepoint s1")),
        ("count after rollback to", _sql(f"select count(*), max(id) from {TABLE}")),
        ("insert after rollback to", _many(INSERT, _rows(30, start=300))),
        ("update pending rows", _sql(f"update {TABLE} set score = -score where id % 7 = 0")),
        ("insert after update", _many(INSERT, _rows(10, start=400))),
        ("delete some", _sql(f"delete from {TABLE} where id % 11 = 0")),
        ("insert before alter", _many(INSERT, _rows(5, start=500))),
        ("alter", _sql(f"alter table {TABLE} add column note text")),
        ("insert with new column", _sql(f"insert into {TABLE} (id, name, note) values (%s, %s, %s)", (600, "x", "after alter"))),
        ("read all", _sql(f"select id, name, score, day, price, note from {TABLE}")),
        ("commit", _sql("commit")),
        ("read after commit", _sql(f"select id, name, score, day, price, note from {TABLE}")),
    ]
    for what, step in steps:
        _same(pg, ig, step, what)


def _copy_in(rows: list[tuple[Any, ...]]) -> Callable[[psycopg.Cursor], Any]:
    def step(cur: psycopg.Cursor) -> None:
        with cur.copy(f"copy {TABLE} (id, name, score, day, price) from stdin") as copy:
            for row in rows:
                copy.write_row(row)
    return step


def test_every_kind_of_statement_after_a_blocks_inserts_as_postgresql(both):
    """What may read or rewrite the pending rows — INSERT … SELECT of the table, UPDATE … FROM,
    DELETE … USING, MERGE, COPY in and out, CREATE TABLE AS, a view, RENAME, TRUNCATE, DROP —
    each right after INSERTs of the same block."""
    pg, ig = both
    for conn in (pg, ig):
        conn.execute("drop table if exists bi.src")
        conn.execute("drop table if exists bi.copied")
        conn.execute("drop view if exists bi.v")
        conn.execute("create table bi.src (id integer, bonus double precision)")
        conn.execute("insert into bi.src values (1, 10), (2, 20), (3, 30), (500, 5)")
    steps: list[tuple[str, Callable[[psycopg.Cursor], Any]]] = [
        ("begin", _sql("begin")),
        ("executemany", _many(INSERT, _rows(20))),
        ("insert select from itself", _sql(f"insert into {TABLE} select id + 100, name, score, day, price from {TABLE}")),
        ("executemany", _many(INSERT, _rows(5, start=300))),
        ("update from", _sql(f"update {TABLE} t set score = t.score + s.bonus from bi.src s where s.id = t.id")),
        ("executemany", _many(INSERT, _rows(5, start=500))),
        ("delete using", _sql(f"delete from {TABLE} t using bi.src s where s.id = t.id and s.bonus > 15")),
        ("executemany", _many(INSERT, _rows(5, start=700))),
        ("merge", _sql(f"merge into {TABLE} t using bi.src s on t.id = s.id "
                       "when matched then update set name = 'merged' "
                       "when not matched then insert (id, name) values (s.id, 'new')")),
        ("executemany", _many(INSERT, _rows(5, start=900))),
        ("copy in", _copy_in(_rows(5, start=1100))),
        ("executemany", _many(INSERT, _rows(5, start=1200))),
        ("copy out", lambda cur: cur.execute(f"select count(*), sum(id) from {TABLE}")),
        ("create table as", _sql(f"create table bi.copied as select * from {TABLE} where id % 2 = 0")),
        ("executemany", _many(INSERT, _rows(5, start=1300))),
        ("view", _sql(f"create view bi.v as select id, name from {TABLE} where id > 1000")),
        ("read the view", _sql("select * from bi.v")),
        ("executemany", _many(INSERT, _rows(5, start=1400))),
        ("rename", _sql(f"alter table {TABLE} rename to t2")),
        ("executemany into the new name", _many(INSERT.replace(TABLE, "bi.t2"), _rows(5, start=1500))),
        ("read renamed", _sql("select id, name, score, day, price from bi.t2")),
        ("rename back", _sql("alter table bi.t2 rename to t")),
        ("read copied", _sql("select * from bi.copied")),
        ("commit", _sql("commit")),
        ("read after commit", _sql(READ)),
        ("begin", _sql("begin")),
        ("executemany", _many(INSERT, _rows(5, start=1600))),
        ("truncate", _sql(f"truncate {TABLE}")),
        ("executemany after truncate", _many(INSERT, _rows(3, start=1700))),
        ("commit", _sql("commit")),
        ("read after truncate", _sql(READ)),
        ("begin", _sql("begin")),
        ("executemany", _many(INSERT, _rows(5, start=1800))),
        ("drop a table a view reads", _sql(f"drop table {TABLE}")),
        ("rollback", _sql("rollback")),
        ("read after rolled back drop", _sql(READ)),
        ("begin", _sql("begin")),
        ("executemany", _many(INSERT, _rows(5, start=1900))),
        ("drop the view", _sql("drop view bi.v")),
        ("drop the table the block's dropped view read", _sql(f"drop table {TABLE}")),
        ("commit", _sql("commit")),
        ("gone", _sql(READ)),
    ]
    try:
        for what, step in steps:
            _same(pg, ig, step, what)
    finally:
        for conn in (pg, ig):
            conn.execute("drop view if exists bi.v")
            conn.execute("drop table if exists bi.src")
            conn.execute("drop table if exists bi.copied")


def test_rolled_back_and_uncommitted_rows_are_seen_by_no_one_else(both, icegres: IcegresServer):
    pg, ig = both
    with psycopg.connect(icegres.dsn(), autocommit=True) as other:
        _same(pg, ig, _sql("begin"), "begin")
        _same(pg, ig, _many(INSERT, _rows(100)), "executemany")
        assert other.execute(f"select count(*) from {TABLE}").fetchone() == (0,)
        _same(pg, ig, _sql("rollback"), "rollback")
        _same(pg, ig, _sql(READ), "nothing after rollback")
        _same(pg, ig, _sql("begin"), "begin")
        _same(pg, ig, _many(INSERT, _rows(100)), "executemany")
        assert other.execute(f"select count(*) from {TABLE}").fetchone() == (0,)
        _same(pg, ig, _sql("commit"), "commit")
        assert other.execute(f"select count(*), sum(id) from {TABLE}").fetchone() == (100, 4950)


def test_a_blocks_inserts_are_written_when_read_and_at_commit(both, icegres: IcegresServer):
    """A block's 1,000 single-row INSERTs write no file until the block reads the table (one
    file then) and commits (the block's files merged into one): they wrote a file each."""
    _, ig = both

    def parquet_files() -> int:
        return sum(1 for _ in icegres.data_dir.rglob("*.parquet"))

    before = parquet_files()
    with ig.transaction():
        ig.cursor().executemany(INSERT, _rows(1000))
        assert parquet_files() == before
        assert ig.execute(f"select count(*) from {TABLE}").fetchone() == (1000,)
        assert parquet_files() == before + 1
        ig.cursor().executemany(INSERT, _rows(500, start=1000))
        assert parquet_files() == before + 1
    assert ig.execute(f"select count(*), sum(id) from {TABLE}").fetchone() == (1500, 1124250)
    assert ig.execute('select count(*), sum(record_count) from "bi"."t$files"').fetchone() == (1, 1500)


def test_sqlalchemys_bound_casts_store_and_fail_as_postgresql(both):
    """`%(id)s::INTEGER` and friends: good values stored as PostgreSQL stores them, and values the
    cast refuses refused with PostgreSQL's SQLSTATE (the statement then changes nothing)."""
    pg, ig = both
    good = [dict(id=i, name=f"n{i}", score=i / 3, day=datetime.date(2024, 2, 1 + i % 28), price=Decimal(i) / 8)
            for i in range(50)]
    with pg.transaction(), ig.transaction():
        _same(pg, ig, _many(CAST_INSERT, good), "good rows in a block")
    _same(pg, ig, _many(CAST_INSERT, good[:3]), "good rows in autocommit")
    row = dict(id=1, name="a", score=1.0, day=datetime.date(2024, 1, 1), price=Decimal("1.25"))
    variants = {
        "a string cast to integer": dict(row, id="12"),
        "not a number": dict(row, id="abc"),
        "beyond integer": dict(row, id=2 ** 40),
        "an integer cast to varchar": dict(row, name=17),
        "no such day": dict(row, day="2024-02-30"),
        "a date string": dict(row, day="2024-02-03"),
        "more decimals than the column keeps": dict(row, price=Decimal("1.005")),
        "too many digits for the column": dict(row, price=Decimal("123456789.5")),
        "a float for the numeric": dict(row, price=2.5),
        "NULLs": dict(row, id=None, name=None, day=None, price=None),
    }
    for what, params in variants.items():
        _same(pg, ig, _sql(CAST_INSERT, params), what)
        _same(pg, ig, _sql(READ), f"rows after: {what}")
    for what, params in variants.items():
        _same(pg, ig, _sql("begin"), "begin")
        _same(pg, ig, _sql(CAST_INSERT, params), f"{what}, in a block")
        _same(pg, ig, _sql("rollback"), "rollback")
    _same(pg, ig, _sql(READ), "rows at the end")


def test_a_big_values_list_of_cast_constants_as_postgresql(both):
    """An INSERT over 2 kB of constants with `::type` casts (read by the lexer, sql/values_rows.py):
    each cast to the column's own type taken as the constant, any other cast — and a value a cast
    refuses — as PostgreSQL answers it, the statement then changing nothing."""
    pg, ig = both

    def big(bad: str = "") -> str:
        rows = [f"({i}::int, 'n{i}'::text, {i}.5::float8, '2024-01-{1 + i % 28:02d}'::date, {i}.25::numeric)"
                for i in range(100)]
        if bad:
            rows[57] = bad
        return f"insert into {TABLE} (id, name, score, day, price) values " + ", ".join(rows)

    statements = {
        "all cast to their columns' types": big(),
        "a cast the column assigns (bigint into integer)": big("(7::bigint, 'x'::varchar, 1::float8, null::date, 2::numeric)"),
        "text cast into an integer column": big("('5'::text, 'x', 1, null, 2)"),
        "not an integer": big("('x'::int, 'x', 1, null, 2)"),
        "beyond integer": big("(3000000000::int, 'x', 1, null, 2)"),
        "no such day": big("(1, 'x', 1, '2024-02-30'::date, 2)"),
        "more decimals than the column keeps": big("(1, 'x', 1, null, 1.005::numeric)"),
        "a boolean cast into a text column": big("(1, true::bool, 1, null, 2)"),
    }
    for what, sql in statements.items():
        assert len(sql) > 2048
        _same(pg, ig, _sql(sql), what)
        _same(pg, ig, _sql(READ), f"rows after: {what}")
