"""A data file the table's snapshot lists and storage cannot give is an error (58P01) naming the
table and the file, on both front ends, never an empty or short answer; the other tables go on
answering, and the table reads again once the file is back (engine/file_presence.py)."""

from __future__ import annotations

import shutil
from collections.abc import Iterator
from pathlib import Path

import adbc_driver_flightsql.dbapi as adbc
import adbc_driver_manager
import psycopg
import pytest

from tests.e2e.test_flightsql import flight_server
from tests.support.icegres_server import running_icegres, seed_data_dir

pytestmark = [pytest.mark.e2e, pytest.mark.timeout(180)]

READS = [
    "select count(*) from demo.cities",
    "select * from demo.cities",
    "select sum(population) from demo.cities",
    "select t.city, c.country from demo.trips t join demo.cities c on c.city = t.city limit 5",
]


@pytest.fixture(scope="module")
def lake(tmp_path_factory: pytest.TempPathFactory) -> Path:
    data_dir = tmp_path_factory.mktemp("missing") / "data"
    seed_data_dir(data_dir, rows=2000)
    return data_dir


def _data_files(lake: Path, table: str) -> list[Path]:
    return sorted((lake / "warehouse" / "demo" / table / "data").glob("*.parquet"))


@pytest.fixture
def hidden(lake: Path, tmp_path: Path) -> Iterator[Path]:
    """demo.cities's one data file, moved away for the test and put back after it."""
    (path,) = _data_files(lake, "cities")
    aside = tmp_path / path.name
    shutil.move(path, aside)
    try:
        yield path
    finally:
        shutil.move(aside, path)


def _sqlstate(conn: psycopg.Connection, sql: str) -> tuple[str | None, str]:
    try:
        conn.execute(sql).fetchall()
    except psycopg.Error as err:
        return err.diag.sqlstate, err.diag.message_primary or ""
    return None, ""


def test_a_file_removed_while_serving_is_an_error_not_an_empty_table(lake: Path) -> None:
    with running_icegres(lake) as srv, psycopg.connect(srv.dsn(), autocommit=True) as conn:
        before = [conn.execute(sql).fetchall() for sql in READS]
        assert before[0] == [(20,)]
        (path,) = _data_files(lake, "cities")
        aside = lake.parent / path.name
        shutil.move(path, aside)
        try:
            for sql in READS:
                state, message = _sqlstate(conn, sql)
                assert state == "58P01", (sql, state, message)
                assert "demo.cities" in message and path.name in message
            with conn.transaction():
                assert _sqlstate(conn, READS[0])[0] == "58P01"
            assert conn.execute("select count(*) from demo.trips").fetchone() == (2000,)
            # a write that must read the table first is refused the same way, and changes nothing
            assert _sqlstate(conn, "update demo.cities set population = 0 where city = 'Berlin'")[0] == "58P01"
        finally:
            shutil.move(aside, path)
        assert [conn.execute(sql).fetchall() for sql in READS] == before


def test_a_file_missing_at_start_up_fails_that_table_only(lake: Path, hidden: Path) -> None:
    with running_icegres(lake) as srv, psycopg.connect(srv.dsn(), autocommit=True) as conn:
        state, message = _sqlstate(conn, READS[0])
        assert state == "58P01" and hidden.name in message
        assert conn.execute("select count(*) from demo.trips").fetchone() == (2000,)


def test_flight_sql_reads_say_the_same(lake: Path) -> None:
    with flight_server(lake) as (uri, _, _, _), adbc.connect(uri, autocommit=True) as conn, conn.cursor() as cur:
        cur.execute(READS[0])
        assert cur.fetchall() == [(20,)]
        (path,) = _data_files(lake, "cities")
        aside = lake.parent / path.name
        shutil.move(path, aside)
        try:
            for sql in READS:
                with pytest.raises(adbc_driver_manager.Error) as exc:
                    cur.execute(sql)
                    cur.fetchall()
                assert "58P01" in str(exc.value) and path.name in str(exc.value), sql
        finally:
            shutil.move(aside, path)
        cur.execute(READS[0])
        assert cur.fetchall() == [(20,)]


def test_a_remote_file_removed_while_serving_is_an_error_too(stack, tmp_path: Path) -> None:
    """The same on the object store (SeaweedFS's S3, REST catalog), after the table was read."""
    import uuid

    from pyarrow import fs
    from pyiceberg.catalog import load_catalog

    schema = f"missing_{uuid.uuid4().hex[:8]}"
    s3 = fs.S3FileSystem(access_key=stack.s3_access_key, secret_key=stack.s3_secret_key, region=stack.s3_region,
                         endpoint_override=stack.s3_endpoint.split("://", 1)[-1],
                         scheme=stack.s3_endpoint.split("://", 1)[0], force_virtual_addressing=not stack.s3_path_style)
    env = {**stack.env(), "ICEGRES_FILE_CACHE_MB": "0"}  # every read goes to the store
    with running_icegres(tmp_path / "data", env=env) as srv, psycopg.connect(srv.dsn(), autocommit=True) as conn:
        conn.execute(f"create schema {schema}")
        conn.execute(f"create table {schema}.t (id int)")
        conn.execute(f"insert into {schema}.t values (1), (2), (3)")
        assert conn.execute(f"select count(*) from {schema}.t").fetchone() == (3,)
        assert conn.execute(f"select sum(id) from {schema}.t").fetchone() == (6,)
        table = load_catalog("rest", **stack.pyiceberg_properties()).load_table((schema, "t"))
        (path,) = [task.file.file_path for task in table.scan().plan_files()]
        s3.delete_file(path.split("://", 1)[1])
        for sql in (f"select count(*) from {schema}.t", f"select * from {schema}.t", f"select sum(id) from {schema}.t"):
            state, message = _sqlstate(conn, sql)
            assert state == "58P01", (sql, state, message)
            assert f"{schema}.t" in message and path.rsplit("/", 1)[1] in message


def test_a_missing_long_text_file_fails_that_table_only(tmp_path: Path) -> None:
    """A DEFAULT or COMMENT from 64 kB on is a file beside the table's metadata
    (engine/long_texts.py): gone, the table's statements get 58P01 naming it — never the
    reference in the text's place, nor no default — and the other tables answer."""
    text = "long text é " * 10_000
    data_dir = tmp_path / "data"
    with running_icegres(data_dir) as srv, psycopg.connect(srv.dsn(), autocommit=True) as conn:
        conn.execute(f"create table lt (id int, s text default '{text}')")
        conn.execute("create table other (id int)")
        conn.execute("insert into other values (1)")
    (path,) = (data_dir / "warehouse").rglob("icegres-text-*.txt")
    aside = tmp_path / path.name
    shutil.move(path, aside)
    with running_icegres(data_dir) as srv, psycopg.connect(srv.dsn(), autocommit=True) as conn:
        for sql in ("select count(*) from lt", "insert into lt (id) values (1)"):
            state, message = _sqlstate(conn, sql)
            assert state == "58P01" and path.name in message, (sql, state, message)
        assert conn.execute("select count(*) from other").fetchone() == (1,)
    shutil.move(aside, path)
    with running_icegres(data_dir) as srv, psycopg.connect(srv.dsn(), autocommit=True) as conn:
        conn.execute("insert into lt (id) values (1)")
        assert conn.execute("select s = %s from lt", [text]).fetchone() == (True,)
