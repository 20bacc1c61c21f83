"""pg_dump and pg_restore (PostgreSQL 15's own binaries) against icegres, restored into a real
PostgreSQL 15: `--schema-only`, `-t demo.cities` (plain SQL through psql) and `-Fc -n demo`
(pg_restore) give the same tables and the same rows."""

from __future__ import annotations

import subprocess
from collections.abc import Iterator
from pathlib import Path

import psycopg
import pytest

from tests.support.fixtures import real_postgres  # noqa: F401  (session fixture)
from tests.support.icegres_server import IcegresServer, running_icegres, seed_data_dir
from tests.support.postgres import PG_BIN_DIR

pytestmark = [pytest.mark.e2e, pytest.mark.timeout(300)]

ROWS = 5000


@pytest.fixture(scope="module")
def icegres(tmp_path_factory: pytest.TempPathFactory) -> Iterator[IcegresServer]:
    data_dir = tmp_path_factory.mktemp("dump") / "data"
    seed_data_dir(data_dir, rows=ROWS)
    with running_icegres(data_dir) as srv:
        with psycopg.connect(srv.dsn(), autocommit=True) as conn:
            conn.execute("create schema if not exists empty_one")
            conn.execute("create table demo.typed (n numeric(12,3) not null, d date, ts timestamp, "
                         "b boolean, t varchar(20), primary key (n))")
            conn.execute("insert into demo.typed values (1.5, '2024-01-02', '2024-01-02 03:04:05', true, 'a\tb'),"
                         " (-2.25, null, null, false, null)")
        yield srv


def _conninfo(srv: IcegresServer) -> list[str]:
    return ["-h", srv.host, "-p", str(srv.port), "-U", srv.user]


def _fresh_database(pg, name: str) -> str:  # noqa: ANN001
    with psycopg.connect(pg.dsn(), autocommit=True) as conn:
        conn.execute(f"drop database if exists {name}")
        conn.execute(f"create database {name}")
    return pg.dsn().replace(f"dbname={pg.dbname}", f"dbname={name}")


def _run(args: list[str], **kwargs) -> subprocess.CompletedProcess[str]:  # noqa: ANN003
    done = subprocess.run(args, capture_output=True, text=True, timeout=240, **kwargs)
    assert done.returncode == 0, done.stderr[-3000:]
    return done


def _rows(dsn: str, sql: str) -> list[tuple[object, ...]]:
    with psycopg.connect(dsn) as conn:
        return conn.execute(sql).fetchall()


_TABLES = "select table_schema, table_name, column_name, data_type, is_nullable from " \
          "information_schema.columns where table_schema in ('demo', 'empty_one') order by 1, 2, ordinal_position"


def test_schema_only_restores_into_postgresql(icegres: IcegresServer, real_postgres) -> None:  # noqa: F811
    dump = _run([str(PG_BIN_DIR / "pg_dump"), *_conninfo(icegres), "--schema-only", "icegres"]).stdout
    target = _fresh_database(real_postgres, "dump_schema")
    _run(["psql", target, "-X", "-v", "ON_ERROR_STOP=1", "-q"], input=dump.replace("OWNER TO icegres", "OWNER TO postgres"))
    assert _rows(target, _TABLES) == _rows(icegres.dsn(), _TABLES)
    assert _rows(target, "select nspname from pg_namespace where nspname = 'empty_one'") == [("empty_one",)]


def test_one_table_with_its_rows(icegres: IcegresServer, real_postgres) -> None:  # noqa: F811
    dump = _run([str(PG_BIN_DIR / "pg_dump"), *_conninfo(icegres), "--no-owner", "-t", "demo.cities",
                 "icegres"]).stdout
    assert "demo.trips" not in dump
    target = _fresh_database(real_postgres, "dump_table")
    with psycopg.connect(target, autocommit=True) as conn:
        conn.execute("create schema demo")  # pg_dump -t dumps the table, not its schema
    _run(["psql", target, "-X", "-v", "ON_ERROR_STOP=1", "-q"], input=dump)
    sql = "select * from demo.cities order by 1"
    assert _rows(target, sql) == _rows(icegres.dsn(), sql)


def test_custom_format_of_a_schema_through_pg_restore(icegres: IcegresServer, real_postgres,  # noqa: F811
                                                      tmp_path: Path) -> None:
    archive = tmp_path / "demo.dump"
    _run([str(PG_BIN_DIR / "pg_dump"), *_conninfo(icegres), "-Fc", "-n", "demo", "-f", str(archive),
          "icegres"])
    target = _fresh_database(real_postgres, "dump_custom")
    _run([str(PG_BIN_DIR / "pg_restore"), "--no-owner", "--exit-on-error", "-d", target, str(archive)])
    for sql in ("select * from demo.cities order by 1", "select * from demo.typed order by 1",
                "select count(*), sum(id), min(pickup_ts), max(pickup_ts), count(distinct city) from demo.trips",
                "select id, city, fare, distance, passengers, vendor, paid from demo.trips order by id limit 50"):
        assert _rows(target, sql) == _rows(icegres.dsn(), sql), sql
    # the primary key came along
    assert _rows(target, "select count(*) from pg_constraint where contype = 'p' and conrelid = "
                         "'demo.typed'::regclass") == [(1,)]
