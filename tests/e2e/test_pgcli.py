"""pgcli (4.7.1, the newest release; its own venv, infra/tool-venv.sh) against icegres.

Driven twice: at its prompt over a pseudo-terminal as a person uses it — its defaults (it sets
its local time zone, `SET TIME ZONE "Etc/UTC"`), the completion refresh it runs in the
background after connecting (schemata, tables, views, columns, functions, datatypes, foreign
keys), Tab completion of tables, columns and functions, the backslash commands — and through its
own PGExecute metadata functions and PGExecute.run() of the backslash commands, answered by
icegres and by a real PostgreSQL 15 holding the same tables, which must agree.
"""

from __future__ import annotations

import re
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import psycopg
import pytest

from tests.e2e.expected import trips
from tests.support.fixtures import real_postgres  # noqa: F401  (session fixture)
from tests.support.icegres_server import running_icegres
from tests.support.pgcli_tool import PgcliSession, metadata, pgcli_venv, table_rows

pytestmark = [pytest.mark.e2e, pytest.mark.timeout(600)]


@pytest.fixture(scope="session")
def pgcli() -> Path:
    return pgcli_venv()


TRIPS_COLUMNS = [("id", "bigint", "not null"), ("city", "text", ""), ("fare", "double precision", ""),
                 ("distance", "double precision", ""), ("pickup_ts", "timestamp with time zone", ""),
                 ("passengers", "integer", ""), ("vendor", "text", ""), ("paid", "boolean", "")]


def test_a_session_at_the_prompt(server, pgcli: Path, tmp_path: Path) -> None:
    with PgcliSession(pgcli, tmp_path / "home", host=server.host, port=server.port, user=server.user,
                      dbname=server.database) as cli:
        # Its defaults: the local zone, set with a quoted name.
        assert table_rows(cli.run("SHOW TIME ZONE")) == [("Etc/UTC",)]
        # Tab completes from what the refresher read: a table, a column of it, a function.
        assert table_rows(cli.complete("SELECT count(*) FROM demo.cit", "")) == [("20",)]
        busy = sum(1 for p in trips()["passengers"].to_pylist() if p > 4)
        assert table_rows(cli.complete("SELECT count(*) FROM demo.trips WHERE pas", "> 4")) == [(str(busy),)]
        assert table_rows(cli.complete("SELECT pg_catalog.current_datab", "")) == [(server.database,)]

        assert table_rows(cli.run(r"\dt demo.*")) == [("demo", "cities", "table", server.user),
                                                    ("demo", "trips", "table", server.user)]
        # (other tests' schemas share the SeaweedFS catalog: only these two are this test's)
        schemas = table_rows(cli.run(r"\dn"))
        assert ("demo", server.user) in schemas and ("public", server.user) in schemas, schemas
        assert [(c, t, m) for c, t, m in table_rows(cli.run(r"\d demo.trips"))] == TRIPS_COLUMNS
        # Nothing of demo is on the default search_path ("$user", public), as in PostgreSQL.
        for command in (r"\dt", r"\d", r"\dv", r"\di", r"\df"):
            out = cli.run(command)
            assert table_rows(out) == [] and "SELECT 0" in out, (command, out)
        cli.run("SET search_path TO demo, public")
        expected = [("demo", "cities", "table", server.user), ("demo", "trips", "table", server.user)]
        assert table_rows(cli.run(r"\dt")) == expected
        assert table_rows(cli.run(r"\d")) == expected
        assert table_rows(cli.run(r"\dv")) == [] and table_rows(cli.run(r"\di")) == []
        assert table_rows(cli.run("SELECT city, country FROM cities ORDER BY city LIMIT 2")) == [
            ("Amsterdam", "Netherlands"), ("Berlin", "Germany")]
    screen = cli.screen()
    # The completion refresher runs in a thread of its own: a failing metadata query prints its
    # traceback on the terminal and leaves completion half-filled.
    assert "Traceback" not in screen and "Exception in thread" not in screen, screen[-6000:]


# --- the same tables in icegres and in PostgreSQL 15 ------------------------------------------

DATABASE = "pgcli_demo"
USER = "postgres"  # the owner both show: icegres names its user as owner of everything
DDL = [
    "create schema demo",
    "create table demo.trips (id bigint not null primary key, city text, fare double precision,"
    " distance double precision, pickup_ts timestamptz, passengers integer, vendor text, paid boolean)",
    "create table demo.cities (city text not null, country text, population bigint)",
    "create schema sales",
    "create table sales.orders (region text not null, id integer not null, amount numeric(12,2),"
    " placed date, shipped timestamp, primary key (region, id))",
]


@pytest.fixture(scope="module")
def both(real_postgres: Any, tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[str, str]]:  # noqa: F811
    """(icegres's DSN, PostgreSQL's DSN): one database, the same schemas and tables in each."""
    with psycopg.connect(real_postgres.dsn(), autocommit=True) as admin:
        admin.execute(f"drop database if exists {DATABASE}")
        admin.execute(f"create database {DATABASE}")
    theirs = real_postgres.dsn().replace(f"dbname={real_postgres.dbname}", f"dbname={DATABASE}")
    data_dir = tmp_path_factory.mktemp("pgcli") / "lake"
    data_dir.mkdir()
    with running_icegres(data_dir, args=("--database", DATABASE), user=USER) as srv:
        ours = srv.dsn(dbname=DATABASE)
        for dsn in (ours, theirs):
            with psycopg.connect(dsn, autocommit=True) as conn:
                for statement in DDL:
                    conn.execute(statement)
        yield ours, theirs


SYSTEM = ("pg_catalog", "information_schema")


def _user_rows(rows: list[Any]) -> list[Any]:
    return [r for r in rows if r[0] not in SYSTEM]


@pytest.mark.parametrize("search_path", ["", "demo, sales"])
def test_metadata_and_commands_agree_with_postgresql(both: tuple[str, str], pgcli: Path, search_path: str) -> None:
    options = f" options='-c search_path={search_path.replace(' ', '')}'" if search_path else ""
    ours, theirs = (metadata(pgcli, dsn + options) for dsn in both)
    failed = {k: v for part in ("functions", "commands") for k, v in ours[part].items() if isinstance(v, dict)}
    assert not failed, failed

    fn_ours, fn_theirs = ours["functions"], theirs["functions"]
    for name in ("search_path", "schemata", "datatypes", "foreignkeys", "casing"):
        assert fn_ours[name] == fn_theirs[name], name
    for name in ("tables", "views", "table_columns", "view_columns"):
        assert _user_rows(fn_ours[name]) == _user_rows(fn_theirs[name]), name
    assert [r[:2] for r in fn_ours["tables"] if r[0] == "demo"] == [["demo", "cities"], ["demo", "trips"]]
    # The built-in functions icegres has are a subset of PostgreSQL's, each described alike:
    # argument names, modes, types by name, defaults, result, kind.
    assert fn_ours["functions"] and all(f in fn_theirs["functions"] for f in fn_ours["functions"])
    assert fn_ours["databases"] == [DATABASE] and DATABASE in fn_theirs["databases"]

    cmd_ours, cmd_theirs = ours["commands"], theirs["commands"]
    for command, answer in cmd_ours.items():
        if command == r"\l":  # PostgreSQL has its other databases too
            assert answer[0]["rows"][0] in cmd_theirs[command][0]["rows"]
        elif command == r"\dn":  # PostgreSQL 15 has public owned by pg_database_owner
            assert answer[0]["rows"] == [["demo", USER], ["public", USER], ["sales", USER]]
            assert cmd_theirs[command][0]["rows"][0::2] == [["demo", USER], ["sales", USER]]
        else:
            assert answer == cmd_theirs[command], command
    described = cmd_ours[r"\d sales.orders"][0]
    assert described["rows"][:2] == [["region", "text", " not null"], ["id", "integer", " not null"]]
    assert re.search(r'"orders_pkey" PRIMARY KEY, btree \(region, id\)', described["status"])
