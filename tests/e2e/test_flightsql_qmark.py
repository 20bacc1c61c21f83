"""ADBC with its declared parameter style: `adbc_driver_flightsql.dbapi.paramstyle` is "qmark", so
`cursor.execute(sql, parameters)` and `cursor.executemany` name parameters `?` (the real driver,
Go inside, against one `icegres serve --flight-port`; pgwire checks what Flight wrote).

A `?` outside strings, quoted names, dollar quotes and comments is a positional parameter, numbered
in order when the statement is prepared (icegres/sql/placeholders.py); `$n` keeps working; mixing
both in one statement is 42601. Over pgwire `?` stays what PostgreSQL makes of it.
"""

from __future__ import annotations

import datetime as dt
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import adbc_driver_flightsql.dbapi as adbc
import adbc_driver_manager
import psycopg
import psycopg.errors
import pyarrow as pa
import pytest

from tests.e2e.test_flightsql import flight_server
from tests.e2e.test_flightsql_writes import Both

pytestmark = [pytest.mark.e2e, pytest.mark.timeout(180)]

assert adbc.paramstyle == "qmark"

UTC = dt.UTC
ROWS = [
    (1, "one", 0.5, True, dt.date(2024, 1, 1), dt.datetime(2024, 1, 1, 8, 0), dt.datetime(2024, 1, 1, 8, 0, tzinfo=UTC)),
    (2, "two", 1.0, False, dt.date(2024, 2, 29), dt.datetime(2024, 2, 29, 23, 59, 59),
     dt.datetime(2024, 2, 29, 23, 59, 59, tzinfo=UTC)),
    (3, None, None, None, None, None, None),
]


@pytest.fixture(scope="module")
def both(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Both]:
    data_dir: Path = tmp_path_factory.mktemp("flightqmark") / "data"
    data_dir.mkdir()
    with flight_server(data_dir, command="serve") as (uri, _, log_path, pg_port):
        yield Both(uri, pg_port, data_dir, log_path)


@pytest.fixture
def ns(both: Both) -> str:
    name = f"fq_{uuid.uuid4().hex[:10]}"
    with both.pg() as pg:
        pg.execute(f"create schema {name}")
        pg.execute(f"create table {name}.t (id bigint, name text, score double precision, ok boolean, d date, "
                   "ts timestamp, tz timestamptz)")
        with pg.cursor() as cur:
            cur.executemany(f"insert into {name}.t values (%s, %s, %s, %s, %s, %s, %s)", ROWS)
    return name


def rows(both: Both, sql: str) -> list[tuple[Any, ...]]:
    with both.pg() as pg:
        return pg.execute(sql).fetchall()


# --- queries ------------------------------------------------------------------------------------

def test_select_with_parameters_of_every_type(both, ns):
    with both.flight(autocommit=True) as c, c.cursor() as cur:
        for row in ROWS[:2]:
            cur.execute(f"select id from {ns}.t where id = ? and name = ? and score = ? and ok = ? and d = ? "
                        "and ts = ? and tz = ?", parameters=row)
            assert cur.fetchall() == [(row[0],)]
        cur.execute(f"select id from {ns}.t where name is not distinct from ? order by id", parameters=(None,))
        assert cur.fetchall() == [(3,)]
        cur.execute(f"select id from {ns}.t where d >= ? and ts < ? order by id",
                    parameters=(dt.date(2024, 1, 1), dt.datetime(2024, 3, 1)))
        assert cur.fetchall() == [(1,), (2,)]
        cur.execute("select ? as i, ? as s, ? as f, ? as b, ? as d, ? as n",
                    parameters=(7, "x'?", 2.5, False, dt.date(2024, 5, 6), None))
        table = cur.fetch_arrow_table()
    assert table.to_pylist() == [{"i": 7, "s": "x'?", "f": 2.5, "b": False, "d": dt.date(2024, 5, 6), "n": None}]
    assert table.schema.types[:5] == [pa.int64(), pa.string(), pa.float64(), pa.bool_(), pa.date32()]


def test_question_marks_in_literals_quoted_names_and_comments_are_not_parameters(both, ns):
    with both.flight(autocommit=True) as c, c.cursor() as cur:
        text = "select '?' as \"q?\", $$?$$ as d, ? as a /* ? */ -- ?\n"
        # The parameter schema of the prepared statement: the one real placeholder.
        assert len(cur.adbc_prepare(text)) == 1
        cur.execute(text, parameters=(5,))
        table = cur.fetch_arrow_table()
        assert table.column_names == ["q?", "d", "a"]
        assert table.to_pylist() == [{"q?": "?", "d": "?", "a": 5}]
        cur.execute(f"select count(*) from {ns}.t where name <> '?' and id = ?", parameters=(2,))
        assert cur.fetchall() == [(1,)]


def test_dollar_parameters_keep_working(both, ns):
    with both.flight(autocommit=True) as c, c.cursor() as cur:
        cur.execute(f"select name from {ns}.t where id = $1 and score = $2", parameters=(2, 1.0))
        assert cur.fetchall() == [("two",)]
        cur.execute("select $2 as b, $1 as a", parameters=("a", "b"))
        assert cur.fetchall() == [("b", "a")]
        cur.executemany(f"insert into {ns}.t (id, name) values ($1, $2)", [(10, "ten"), (11, "eleven")])
        assert cur.rowcount == 2
    assert rows(both, f"select id, name from {ns}.t where id >= 10 order by id") == [(10, "ten"), (11, "eleven")]


def test_a_query_bound_to_several_rows_returns_their_results_in_row_order(both, ns):
    ids = pa.record_batch([pa.array([2, 9, 1, 3])], names=["0"])
    with both.flight(autocommit=True) as c, c.cursor() as cur:
        cur.execute(f"select id, name from {ns}.t where id = ?", parameters=ids)
        assert cur.fetchall() == [(2, "two"), (1, "one"), (3, None)]
        assert cur.rowcount == 3


# --- writes -------------------------------------------------------------------------------------

def test_executemany_inserts_every_row_in_one_commit(both, ns):
    with both.pg() as pg:
        pg.execute(f"create table {ns}.m (id bigint, name text, score double precision, at timestamptz)")
    start = dt.datetime(2024, 1, 1, tzinfo=UTC)
    batch = [(i, None if i % 7 == 0 else f"n{i}", i / 4, start + dt.timedelta(minutes=i)) for i in range(1000)]
    with both.flight(autocommit=True) as c, c.cursor() as cur:
        cur.execute(f"insert into {ns}.m values (?, ?, ?, ?)", parameters=batch[0])
        assert cur.rowcount == 1
        before = both.snapshots(ns, "m")
        cur.executemany(f"insert into {ns}.m values (?, ?, ?, ?)", batch[1:])
        assert cur.rowcount == 999
        assert both.snapshots(ns, "m") == before + 1  # every row, one Iceberg commit
        # A statement the batch cannot take as its rows whole runs once per row: still one commit.
        cur.executemany(f"insert into {ns}.m (id, name) values (? + 1000, upper(?))", [(1, "a"), (2, "b")])
        assert cur.rowcount == 2
        assert both.snapshots(ns, "m") == before + 2
        cur.execute(f"select id, name, score, at from {ns}.m where id < 1000 order by id")
        assert cur.fetchall() == batch
    assert rows(both, f"select count(*), sum(id) from {ns}.m") == [(1002, sum(range(1000)) + 2003)]
    assert rows(both, f"select name from {ns}.m where id > 1000 order by id") == [("A",), ("B",)]


def test_update_and_delete_with_parameters(both, ns):
    with both.flight(autocommit=True) as c, c.cursor() as cur:
        cur.execute(f"update {ns}.t set name = ?, score = score * ? where id <= ?", parameters=("upd", 10.0, 2))
        assert cur.rowcount == 2
        cur.executemany(f"update {ns}.t set ok = ? where id = ?", [(False, 1), (True, 2), (True, 3)])
        assert cur.rowcount == 3
        cur.execute(f"delete from {ns}.t where id = ? returning id, name", parameters=(1,))
        assert cur.fetchall() == [(1, "upd")]
        cur.executemany(f"delete from {ns}.t where id = ?", [(2,), (42,)])
        assert cur.rowcount == 1
    assert rows(both, f"select id, name, score, ok from {ns}.t order by id") == [(3, None, None, True)]


def test_a_write_bound_to_several_rows_by_execute_is_one_commit(both, ns):
    before = both.snapshots(ns, "t")
    batch = pa.record_batch([pa.array([20, 21, 22]), pa.array(["a", "b", None])], names=["0", "1"])
    with both.flight(autocommit=True) as c, c.cursor() as cur:
        cur.execute(f"insert into {ns}.t (id, name) values (?, ?) returning id, name", parameters=batch)
        assert cur.fetchall() == [(20, "a"), (21, "b"), (22, None)]
        assert cur.rowcount == 3
    assert both.snapshots(ns, "t") == before + 1


def test_parameters_inside_a_transaction(both, ns):
    c = both.flight()  # autocommit off: BeginTransaction at connect
    try:
        with c.cursor() as cur:
            cur.executemany(f"insert into {ns}.t (id, name) values (?, ?)", [(30, "x"), (31, "y")])
            cur.execute(f"select name from {ns}.t where id = ?", parameters=(31,))
            assert cur.fetchall() == [("y",)]  # its own staged write
            assert rows(both, f"select count(*) from {ns}.t where id >= 30") == [(0,)]
            c.commit()
        assert rows(both, f"select id, name from {ns}.t where id >= 30 order by id") == [(30, "x"), (31, "y")]
    finally:
        c.close()


# --- errors -------------------------------------------------------------------------------------

@pytest.mark.parametrize("text", ["select ? + $1", "select $1 + ?"])
def test_mixing_both_styles_is_a_syntax_error(both, ns, text):
    with both.flight(autocommit=True) as c, c.cursor() as cur:
        with pytest.raises(adbc_driver_manager.Error) as exc:
            cur.execute(text, parameters=(1, 2))
        assert "42601" in str(exc.value) and 'cannot mix "?" and "$n"' in str(exc.value)
        with pytest.raises(adbc_driver_manager.Error, match="42601"):
            cur.executemany(f"insert into {ns}.t (id, name) values (?, $2)", [(1, "a")])
        cur.execute("select ?", parameters=(1,))  # the connection is fine afterwards
        assert cur.fetchall() == [(1,)]


def test_mixing_both_styles_inside_a_transaction_aborts_it_until_rollback(both, ns):
    c = both.flight()
    try:
        with c.cursor() as cur:
            with pytest.raises(adbc_driver_manager.Error, match="42601"):
                cur.execute("select ? + $1", parameters=(1, 2))
            with pytest.raises(adbc_driver_manager.Error, match="25P02"):
                cur.execute(f"select count(*) from {ns}.t where id = ?", parameters=(1,))
            c.rollback()
        # A new cursor: the driver does not prepare again a text whose prepare failed (it then
        # runs the statement as a bulk ingest without a table).
        with c.cursor() as cur:
            cur.execute(f"select count(*) from {ns}.t where id = ?", parameters=(1,))
            assert cur.fetchall() == [(1,)]
    finally:
        c.close()


def test_a_parameter_left_unbound_is_42p02(both, ns):
    with both.flight(autocommit=True) as c, c.cursor() as cur:
        with pytest.raises(adbc_driver_manager.Error, match="42P02"):
            cur.execute(f"select id from {ns}.t where id = ?")
            cur.fetchall()


def test_pgwire_keeps_question_mark_as_postgresql_reads_it(both):
    with both.pg() as pg, pytest.raises(psycopg.errors.SyntaxError):
        pg.execute("select ?")
