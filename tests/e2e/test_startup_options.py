"""Start-up `options` (PGOPTIONS, `options=-c ...` in a DSN) and the settings SHOW reports, against
PostgreSQL 15: the same options give the same settings, the same bad ones the same error."""

from __future__ import annotations

import os
import subprocess
from collections.abc import Iterator
from pathlib import Path

import psycopg
import pytest

from tests.support.fixtures import real_postgres  # noqa: F401  (session fixture)
from tests.support.icegres_server import running_icegres, seed_data_dir

pytestmark = pytest.mark.e2e


@pytest.fixture(scope="module")
def icegres(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    data_dir = tmp_path_factory.mktemp("options") / "data"
    seed_data_dir(data_dir, rows=100)
    with running_icegres(data_dir) as srv:
        yield srv.dsn()


@pytest.fixture(scope="module")
def dsns(real_postgres, icegres: str) -> list[str]:  # noqa: F811
    with psycopg.connect(real_postgres.dsn(), autocommit=True) as pg:
        pg.execute("create schema if not exists demo")
        pg.execute("create table if not exists demo.cities (city text, country text, population bigint)")
    return [real_postgres.dsn(), icegres]


def _connect_outcome(dsn: str, options: str, show: list[str]) -> tuple[str, ...]:
    try:
        with psycopg.connect(dsn, options=options, autocommit=True) as conn:
            return tuple(conn.execute(f"show {name}").fetchone()[0] for name in show)
    except psycopg.OperationalError as err:
        # libpq reports a FATAL at start-up as the message text only
        return ("error", str(err).strip().splitlines()[-1].split("FATAL:")[-1].strip())


@pytest.mark.parametrize(("options", "show"), [
    ("-c search_path=demo", ["search_path"]),
    ("-csearch_path=demo,public", ["search_path"]),
    ("--search-path=demo", ["search_path"]),
    ("-c statement_timeout=5s -c application_name=opt", ["statement_timeout", "application_name"]),
    (r"-c application_name=two\ words", ["application_name"]),
    ("-c statement_timeout=1500", ["statement_timeout"]),
    ("-c default_transaction_isolation=serializable", ["default_transaction_isolation"]),
    ("-c nope=1", ["search_path"]),
    ("-c statement_timeout=abc", ["search_path"]),
    ("-c statement_timeout", ["search_path"]),
    ("-x", ["search_path"]),
])
def test_startup_options_as_postgresql_applies_them(dsns: list[str], options: str, show: list[str]) -> None:
    theirs, ours = (_connect_outcome(dsn, options, show) for dsn in dsns)
    assert ours == theirs


def test_pgoptions_reaches_psql_queries(icegres: str, tmp_path: Path) -> None:
    out = subprocess.run(["psql", icegres, "-XAtc", "select count(*) from cities"], capture_output=True,
                         text=True, timeout=60, env={**os.environ, "PGOPTIONS": "-c search_path=demo"})
    assert out.returncode == 0, out.stderr
    assert out.stdout.strip() == "20"


@pytest.mark.parametrize("value", ["500ms", "500", "1000", "1s", "60s", "90s", "1.5s", "2h", "1d", "0", "100us"])
def test_show_prints_time_settings_in_postgresqls_units(dsns: list[str], value: str) -> None:
    shown = []
    for dsn in dsns:
        with psycopg.connect(dsn, autocommit=True) as conn:
            conn.execute(f"set statement_timeout = '{value}'")
            conn.execute(f"set lock_timeout = '{value}'")
            shown.append(conn.execute("select current_setting('statement_timeout'), "
                                      "current_setting('lock_timeout')").fetchone()
                         + conn.execute("show statement_timeout").fetchone())
    assert shown[1] == shown[0]


def test_transaction_isolation_reports_the_level_in_force(icegres: str) -> None:
    # Every transaction reads one snapshot: PostgreSQL's REPEATABLE READ, also for the weaker
    # levels asked for (PostgreSQL itself would say "read committed" and mean it).
    with psycopg.connect(icegres, autocommit=True) as conn:
        def show() -> str:
            return conn.execute("show transaction_isolation").fetchone()[0]

        assert show() == "repeatable read"
        conn.execute("begin isolation level serializable")
        assert show() == "serializable"
        conn.execute("commit")
        conn.execute("begin")
        conn.execute("set transaction isolation level read committed")
        assert show() == "repeatable read"
        conn.execute("commit")
        conn.execute("set default_transaction_isolation = 'serializable'")
        assert show() == "serializable"
        conn.execute("begin")
        assert show() == "serializable"
        conn.execute("commit")
