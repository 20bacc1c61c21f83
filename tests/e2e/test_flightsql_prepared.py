"""Prepared statements over Flight SQL: a parameterless query started at prepare time is used by
the GetFlightInfo that follows only while it would read the same thing (see
`icegres.protocol.flightsql.sessions.Speculation`).

`cursor.execute(q)` prepares and executes at once; `cursor.adbc_prepare(q)` followed by
`cursor.execute(q)` prepares once and executes later (the driver does not prepare the same text
twice), which leaves room to commit, change the session or close in between.
"""

from __future__ import annotations

import uuid
from collections.abc import Iterator
from pathlib import Path

import adbc_driver_flightsql.dbapi as adbc
import adbc_driver_manager
import psycopg
import pytest

from tests.e2e.test_flightsql import flight_server

pytestmark = [pytest.mark.e2e, pytest.mark.timeout(120)]


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[str, int]]:
    """(Flight URI, pgwire port) of one `icegres serve` over a fresh embedded lakehouse."""
    data_dir: Path = tmp_path_factory.mktemp("flightprepared") / "data"
    data_dir.mkdir()
    with flight_server(data_dir, command="serve") as (uri, _, _, pg_port):
        yield uri, pg_port


def pg(pg_port: int) -> psycopg.Connection:
    return psycopg.connect(f"host=127.0.0.1 port={pg_port} dbname=icegres user=icegres", autocommit=True,
                           connect_timeout=10)


@pytest.fixture
def ns(server: tuple[str, int]) -> str:
    name = f"fp_{uuid.uuid4().hex[:10]}"
    with pg(server[1]) as c:
        c.execute(f"create schema {name}")
        c.execute(f"create table {name}.t (id bigint, v text)")
        c.execute(f"insert into {name}.t values (1, 'a')")
    return name


def test_execute_sees_a_commit_made_after_the_prepare(server, ns):
    uri, pg_port = server
    query = f"select count(*) as n from {ns}.t"
    with adbc.connect(uri, autocommit=True) as c, c.cursor() as cur:
        assert cur.adbc_prepare(query).names == []  # the parameter schema: none
        with pg(pg_port) as p:
            p.execute(f"insert into {ns}.t values (2, 'b')")
        cur.execute(query)  # the same text: executes the statement prepared above
        assert cur.fetchall() == [(2,)]
        with pg(pg_port) as p:
            p.execute(f"insert into {ns}.t values (3, 'c')")
        cur.execute(query)  # executed again: run afresh
        assert cur.fetchall() == [(3,)]


def test_prepare_and_execute_at_once_reports_rows_and_rowcount(server, ns):
    uri, pg_port = server
    with adbc.connect(uri, autocommit=True) as c, c.cursor() as cur:
        for i in range(5):
            cur.execute(f"select id, v from {ns}.t where id = {1 + i % 2}")
            assert cur.rowcount == (1 if i % 2 == 0 else 0)
            assert cur.fetchall() == ([(1, "a")] if i % 2 == 0 else [])
        with pg(pg_port) as p:
            p.execute(f"insert into {ns}.t values (2, 'b')")
        cur.execute(f"select id, v from {ns}.t where id = 2")
        assert cur.fetchall() == [(2, "b")]


def test_execute_follows_a_schema_change_made_after_the_prepare(server, ns):
    uri, pg_port = server
    other = f"{ns}_b"
    with pg(pg_port) as p:
        p.execute(f"create schema {other}")
        p.execute(f"create table {other}.t (id bigint, v text)")
        p.execute(f"insert into {other}.t values (7, 'x'), (8, 'y')")
    with adbc.connect(uri, autocommit=True) as c, c.cursor() as cur:
        c.adbc_connection.set_options(**{"adbc.connection.db_schema": ns})
        cur.adbc_prepare("select count(*) as n from t")
        c.adbc_connection.set_options(**{"adbc.connection.db_schema": other})
        cur.execute("select count(*) as n from t")
        assert cur.fetchall() == [(2,)]


def test_a_prepared_statement_closed_unexecuted_leaves_the_session_usable(server, ns):
    uri, _ = server
    with adbc.connect(uri, autocommit=True) as c, c.cursor() as cur:
        for i in range(40):  # each prepare closes the previous statement, never executed
            cur.adbc_prepare(f"select id from {ns}.t where id = {i}")
        cur.execute(f"select id, v from {ns}.t")
        assert cur.fetchall() == [(1, "a")]


def test_an_execution_error_is_reported_by_execute(server, ns):
    uri, _ = server
    with adbc.connect(uri, autocommit=True) as c, c.cursor() as cur:
        with pytest.raises(adbc_driver_manager.Error, match="22012"):
            cur.execute(f"select id / (id - id) from {ns}.t")
            cur.fetchall()
        cur.execute(f"select id from {ns}.t")
        assert cur.fetchall() == [(1,)]


def test_an_execution_error_inside_a_transaction_aborts_it_until_rollback(server, ns):
    # The prepare started the query; its error comes at execution, and must still reach execute
    # and fail the transaction as any statement error does.
    uri, _ = server
    with adbc.connect(uri) as c, c.cursor() as cur:  # autocommit off: BeginTransaction at connect
        cur.execute(f"select id from {ns}.t")
        assert cur.fetchall() == [(1,)]
        with pytest.raises(adbc_driver_manager.Error, match="22012"):
            cur.execute(f"select id / (id - id) from {ns}.t")
            cur.fetchall()
        with pytest.raises(adbc_driver_manager.Error, match="25P02"):
            cur.execute(f"select id from {ns}.t")
            cur.fetchall()
        c.rollback()
        cur.execute(f"select id from {ns}.t")
        assert cur.fetchall() == [(1,)]


def test_inside_a_transaction_the_prepared_query_reads_the_snapshot(server, ns):
    uri, pg_port = server
    query = f"select count(*) as n from {ns}.t"
    with adbc.connect(uri) as c, c.cursor() as cur:  # autocommit off: BeginTransaction at connect
        cur.execute(query)
        assert cur.fetchall() == [(1,)]
        with pg(pg_port) as p:
            p.execute(f"insert into {ns}.t values (2, 'b')")
        cur.execute(f"select count(*) as n from {ns}.t where id > 0")
        assert cur.fetchall() == [(1,)]  # the transaction's snapshot
        c.rollback()
        cur.execute(query)
        assert cur.fetchall() == [(2,)]


def test_inside_a_transaction_a_prepared_query_sees_the_transactions_own_later_writes(server, ns):
    uri, pg_port = server
    query = f"select count(*) as n from {ns}.t"
    with adbc.connect(uri) as c, c.cursor() as cur, c.cursor() as writer:
        cur.adbc_prepare(query)
        writer.execute(f"insert into {ns}.t values (5, 'e')")  # in the same transaction
        cur.execute(query)
        assert cur.fetchall() == [(2,)]
        c.rollback()
        cur.execute(query)
        assert cur.fetchall() == [(1,)]
    with pg(pg_port) as p:
        assert p.execute(query).fetchall() == [(1,)]


def test_a_prepared_statement_outlives_its_transaction(server, ns):
    uri, pg_port = server
    query = f"select count(*) as n from {ns}.t"
    with adbc.connect(uri) as c, c.cursor() as cur:
        cur.adbc_prepare(query)
        c.commit()  # EndTransaction, then a new BeginTransaction
        with pg(pg_port) as p:
            p.execute(f"insert into {ns}.t values (6, 'f')")
        cur.execute(query)  # runs in the new transaction, which sees the commit
        assert cur.fetchall() == [(2,)]
        c.rollback()


def test_a_deadline_stops_a_prepared_query_and_the_session_goes_on(server, ns):
    from adbc_driver_flightsql import StatementOptions

    uri, _ = server
    with adbc.connect(uri, autocommit=True) as c, c.cursor() as cur:
        cur.adbc_statement.set_options(**{StatementOptions.TIMEOUT_QUERY.value: "0.5",
                                          StatementOptions.TIMEOUT_FETCH.value: "0.5"})
        with pytest.raises(adbc_driver_manager.OperationalError, match="(?i)deadline"):
            cur.execute("select sum(value) from range(30000000000)")
            cur.fetchall()
    with adbc.connect(uri, autocommit=True) as c, c.cursor() as cur:
        cur.execute(f"select id from {ns}.t")
        assert cur.fetchall() == [(1,)]
