"""varchar(n) and char(n) columns as PostgreSQL 15 keeps them: the declared type survives in the
table (Iceberg has only string), every write path checks the length (22001), char(n) reads back
blank-padded, and the catalog, RowDescription, psql's \\d and casts say what PostgreSQL says.

Each script runs statement by statement on icegres and on a real PostgreSQL 15; after every
statement both must agree on the outcome (command tag, or SQLSTATE and for 22001 the message)
and on the rows of the script's tables."""

from __future__ import annotations

import subprocess
import uuid
from collections.abc import Iterator
from typing import Any

import psycopg
import pyarrow as pa
import pytest

from tests.support.fixtures import real_postgres  # noqa: F401  (session fixture)
from tests.support.icegres_server import IcegresServer, running_icegres
from tests.support.postgres import PG_BIN_DIR

pytestmark = [pytest.mark.e2e, pytest.mark.timeout(240)]

Outcome = tuple[str, Any, Any]


@pytest.fixture(scope="module")
def icegres(tmp_path_factory: pytest.TempPathFactory) -> Iterator[IcegresServer]:
    with running_icegres(tmp_path_factory.mktemp("chars") / "lake") as srv:
        yield srv


def _run(conn: psycopg.Connection, sql: str) -> Outcome:
    try:
        with conn.cursor() as cur:
            cur.execute(sql)
            rows = None
            if cur.description:
                rows = [tuple(None if v is None else str(v) for v in r) for r in cur.fetchall()]
            return ("ok", cur.statusmessage, rows)
    except psycopg.Error as exc:
        # 22001's message names the type, and clients show it: it must be PostgreSQL's
        message = exc.diag.message_primary if exc.sqlstate == "22001" else None
        return ("error", exc.sqlstate, message)


def _sorted(outcome: Outcome) -> Outcome:
    status, tag, rows = outcome
    if status != "ok" or rows is None:
        return outcome
    return status, tag, sorted(rows, key=lambda row: tuple((v is not None, v or "") for v in row))


def _play(icegres: IcegresServer, postgres: Any, script: str, tables: tuple[str, ...]) -> None:
    with psycopg.connect(postgres.dsn(), autocommit=True) as pg, \
            psycopg.connect(icegres.dsn(), autocommit=True) as ig:
        _run(pg, "drop schema if exists ch cascade")
        for conn in (pg, ig):
            assert _run(conn, "create schema if not exists ch")[0] == "ok"
        try:
            for sql in (s.strip() for s in script.strip().splitlines()):
                theirs, ours = _run(pg, sql), _run(ig, sql)
                assert ours == theirs, f"{sql}\n  postgres: {theirs}\n  icegres:  {ours}"
                for table in tables:
                    dump = f"select * from {table}"
                    assert _sorted(_run(ig, dump)) == _sorted(_run(pg, dump)), f"rows of {table} after: {sql}"
        finally:
            for table in tables:
                _run(ig, f"drop table if exists {table}")


def test_values_too_long_are_refused_and_trailing_spaces_cut_as_postgresql_does(
        icegres: IcegresServer, real_postgres: Any) -> None:  # noqa: F811
    _play(icegres, real_postgres, """
        create table ch.t (id bigint, v varchar(5), c char(3), u varchar, b bpchar)
        insert into ch.t values (1, 'abc', 'ab', 'anything at all', 'x  ')
        insert into ch.t values (2, 'abcdef', 'a', null, null)
        insert into ch.t values (3, 'abc', 'abcd', null, null)
        insert into ch.t values (4, 'abcde   ', 'abc   ', null, null)
        insert into ch.t values (5, 'ab  ', ' a', null, null)
        insert into ch.t values (6, 'ééééé', 'ééé', null, null)
        insert into ch.t values (7, 'éééééé', 'x', null, null)
        insert into ch.t values (8, 'ok', 'ok'), (9, 'too long!', 'ok')
        insert into ch.t select 10, 'abcdefgh'::varchar(3), 'ab'::char(2)
        insert into ch.t select 11, v || 'x', c from ch.t where id = 1
        insert into ch.t select 12, v || 'xyz', c from ch.t where id = 1
        insert into ch.t (id, v) values (13, 12345)
        insert into ch.t (id, v) values (14, 123456)
        update ch.t set v = v || 'zz' where id = 1
        update ch.t set v = v || 'zzz' where id = 1
        update ch.t set c = 'xyz   ' where id = 5
        update ch.t set c = 'wxyz' where id = 5
        select id, c, length(c), c || '|', v || '|' from ch.t order by id
        select id from ch.t where c = 'ab' order by id
        select id from ch.t where c = 'xyz' order by id
    """, ("ch.t",))


def test_explicit_casts_cut_to_the_length_without_an_error(icegres: IcegresServer, real_postgres: Any) -> None:  # noqa: F811
    _play(icegres, real_postgres, """
        select 'abcdef'::varchar(3), cast('abcdef' as character varying(2)), 12345::varchar(2)
        select 'abcdef'::char(3) = 'abc', length('ab  '::char(3)), 'ab'::char(3) || '|'
        select cast('a b c' as varchar(4)) || '|', 'x'::varchar(1)
    """, ())


def test_the_catalog_describes_the_columns_as_postgresql_does(icegres: IcegresServer, real_postgres: Any) -> None:  # noqa: F811
    columns = ("select column_name, data_type, character_maximum_length, character_octet_length, udt_name"
               " from information_schema.columns where table_schema = 'ch' and table_name = '{t}'"
               " order by ordinal_position")
    attributes = ("select a.attname, a.atttypid, a.atttypmod, format_type(a.atttypid, a.atttypmod)"
                  " from pg_attribute a join pg_class c on c.oid = a.attrelid"
                  " join pg_namespace n on n.oid = c.relnamespace"
                  " where n.nspname = 'ch' and c.relname = '{t}' and a.attnum > 0 and not a.attisdropped"
                  " order by a.attnum")
    _play(icegres, real_postgres, f"""
        create table ch.d (a varchar(5) not null, b char(3), c character varying, d character, e bpchar, f text)
        {columns.format(t='d')}
        {attributes.format(t='d')}
        select format_type(1043, 9), format_type(1042, 7), format_type(1043, -1), format_type(1042, null)
        alter table ch.d add column g varchar(7)
        alter table ch.d alter column a type varchar(10)
        alter table ch.d alter column b type char(4)
        alter table ch.d rename column g to h
        alter table ch.d drop column c
        alter table ch.d alter column d type text
        {columns.format(t='d')}
        {attributes.format(t='d')}
        insert into ch.d (a, b, h) values ('0123456789', 'abcd', '1234567')
        insert into ch.d (a, b, h) values ('01234567890', 'abcd', '1234567')
        insert into ch.d (a, b, h) values ('0', 'abcde', '1234567')
        insert into ch.d (a, b, h) values ('0', 'abcd', '12345678')
        create table ch.e as select a, b as bb, h, a || '' as x from ch.d
        {columns.format(t='e')}
        {attributes.format(t='e')}
        insert into ch.e (a, bb, h) values ('0', 'abcde', '1')
        select a, bb, h, x from ch.e
    """, ("ch.d",))


def test_shrinking_or_narrowing_a_stored_column_is_refused(icegres: IcegresServer) -> None:
    """PostgreSQL rewrites the table to check each stored value; an Iceberg table's files are not
    rewritten by ALTER, so it is 0A000 (on an empty table there is nothing to check)."""
    with psycopg.connect(icegres.dsn(), autocommit=True) as conn:
        conn.execute("create schema if not exists ch2")
        conn.execute("create table ch2.s (v varchar(5), t text, c char(3), e text)")
        conn.execute("alter table ch2.s alter column e type varchar(3)")  # no rows yet
        conn.execute("insert into ch2.s values ('abc', 'abc', 'a', 'e')")
        for change in ("v type varchar(3)", "t type varchar(9)", "v type char(9)", "c type char(2)"):
            with pytest.raises(psycopg.errors.FeatureNotSupported):
                conn.execute(f"alter table ch2.s alter column {change}")
        conn.execute("alter table ch2.s alter column c type varchar(3)")
        conn.execute("alter table ch2.s alter column v type text")
        assert conn.execute("select format_type(atttypid, atttypmod) from pg_attribute where attrelid ="
                            " 'ch2.s'::regclass and attnum > 0 order by attnum").fetchall() == [
            ("text",), ("text",), ("character varying(3)",), ("character varying(3)",)]
        conn.execute("drop schema ch2 cascade")


def test_row_description_carries_the_type_and_length(icegres: IcegresServer, real_postgres: Any) -> None:  # noqa: F811
    """psycopg's description reads the type OID and typmod (display_size, internal_size) from
    RowDescription, as pgjdbc's ResultSetMetaData does."""
    def described(dsn: str) -> list[tuple[Any, ...]]:
        with psycopg.connect(dsn, autocommit=True) as conn:
            conn.execute("drop schema if exists ch3 cascade")
            conn.execute("create schema ch3")
            conn.execute("create table ch3.r (v varchar(5), c char(3), u varchar, t text)")
            conn.execute("insert into ch3.r values ('ab', 'a', 'u', 't')")
            with conn.cursor(binary=True) as cur:
                cur.execute("select v, c, u, t, v || '' as w from ch3.r")
                binary = cur.fetchall()
            cur = conn.execute("select v, c, u, t, v || '' as w from ch3.r")
            out = [(d.name, d.type_code, d.display_size, d.internal_size) for d in cur.description]
            out += [cur.fetchall(), binary]
            conn.execute("drop schema ch3 cascade")
            return out

    assert described(icegres.dsn()) == described(real_postgres.dsn())


def test_psql_describes_the_table_as_postgresql_does(icegres: IcegresServer, real_postgres: Any) -> None:  # noqa: F811
    setup = "drop schema if exists ch4 cascade; create schema ch4; " \
            "create table ch4.p (id bigint not null, v varchar(5), c char(3), b bpchar, t text)"
    outputs = []
    for dsn in (icegres.dsn(), real_postgres.dsn()):
        subprocess.run(["psql", "-X", "-q", dsn, "-c", setup], check=True, capture_output=True)
        done = subprocess.run(["psql", "-X", dsn, "-c", r"\d ch4.p"], check=True, capture_output=True, text=True)
        outputs.append(done.stdout)
        subprocess.run(["psql", "-X", "-q", dsn, "-c", "drop schema ch4 cascade"], check=True, capture_output=True)
    assert outputs[0] == outputs[1]
    assert "character varying(5)" in outputs[0] and "character(3)" in outputs[0]


def test_pg_dump_schema_only_declares_the_lengths(icegres: IcegresServer) -> None:
    with psycopg.connect(icegres.dsn(), autocommit=True) as conn:
        conn.execute("create schema if not exists ch5")
        conn.execute("create table ch5.dumped (v varchar(5), c char(3))")
    done = subprocess.run([str(PG_BIN_DIR / "pg_dump"), "-h", icegres.host, "-p", str(icegres.port),
                           "-U", icegres.user, "--schema-only", "-n", "ch5", "icegres"],
                          capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr[-2000:]
    assert "    v character varying(5),\n    c character(3)\n" in done.stdout


def test_copy_from_checks_the_lengths_and_copy_to_pads_char(icegres: IcegresServer) -> None:
    with psycopg.connect(icegres.dsn(), autocommit=True) as conn:
        conn.execute("create schema if not exists ch6")
        conn.execute("create table ch6.k (v varchar(3), c char(2))")
        with conn.cursor() as cur, cur.copy("copy ch6.k from stdin") as copy:
            copy.write("abc  \ta \nab\tb\n")
        with pytest.raises(psycopg.errors.StringDataRightTruncation) as exc:
            with conn.cursor() as cur, cur.copy("copy ch6.k from stdin") as copy:
                copy.write("ab\ta\nabcd\tb\n")
        assert exc.value.diag.message_primary == "value too long for type character varying(3)"
        assert conn.execute("select v || '|', c || '|', c from ch6.k order by v").fetchall() == [
            ("ab|", "b|", "b "), ("abc|", "a|", "a ")]
        with conn.cursor() as cur, cur.copy("copy (select * from ch6.k order by v) to stdout") as copy:
            assert b"".join(bytes(part) for part in copy) == b"ab\tb \nabc\ta \n"  # as PostgreSQL's


def test_the_write_buffer_checks_the_lengths(tmp_path: Any) -> None:
    """Buffered INSERTs (the write ladder, prepared INSERT recipes on the event loop) too."""
    with running_icegres(tmp_path / "lake", args=("--write-buffer-ms", "50")) as srv, \
            psycopg.connect(srv.dsn(), autocommit=True) as conn:
        conn.execute("create schema ch7")
        conn.execute("create table ch7.w (v varchar(3), c char(2))")
        for _ in range(5):  # past psycopg's prepare threshold: the recipe path
            conn.execute("insert into ch7.w values (%s, %s)", ("ab ", "a"))
        for v, c in (("abcd", "a"), ("ab", "abc")):
            with pytest.raises(psycopg.errors.StringDataRightTruncation):
                conn.execute("insert into ch7.w values (%s, %s)", (v, c))
        with pytest.raises(psycopg.errors.StringDataRightTruncation):
            conn.execute("insert into ch7.w values ('abcd', 'a')")
        conn.execute("alter table ch7.w alter column v type varchar(4)")
        conn.execute("insert into ch7.w values (%s, %s)", ("abcd", "a "))
        assert conn.execute("select v, c, length(c) from ch7.w order by v").fetchall() == [
            *[("ab ", "a ", 1)] * 5, ("abcd", "a ", 1)]


def test_flight_sql_writes_check_the_lengths(tmp_path: Any) -> None:
    import adbc_driver_manager

    from tests.e2e.test_flightsql import flight_server

    data_dir = tmp_path / "data"
    data_dir.mkdir()
    ns = f"ch_{uuid.uuid4().hex[:8]}"
    with flight_server(data_dir, command="serve") as (uri, _, _log, pg_port):
        import adbc_driver_flightsql.dbapi as adbc

        dsn = f"host=127.0.0.1 port={pg_port} dbname=icegres user=icegres"
        with psycopg.connect(dsn, autocommit=True) as pg:
            pg.execute(f"create schema {ns}")
            pg.execute(f"create table {ns}.f (v varchar(3), c char(2))")
        with adbc.connect(uri, autocommit=True) as c, c.cursor() as cur:
            cur.execute(f"insert into {ns}.f values ('abc  ', 'a ')")
            with pytest.raises(adbc_driver_manager.Error) as exc:
                cur.execute(f"insert into {ns}.f values ('abcd', 'a')")
            assert "22001" in str(exc.value) and "character varying(3)" in str(exc.value)
            with pytest.raises(adbc_driver_manager.Error) as exc:
                cur.execute(f"update {ns}.f set c = 'abc'")
            assert "22001" in str(exc.value) and "character(2)" in str(exc.value)
            assert cur.adbc_ingest("f", pa.table({"v": ["xy"], "c": ["b"]}), mode="append", db_schema_name=ns) == 1
            with pytest.raises(adbc_driver_manager.Error) as exc:
                cur.adbc_ingest("f", pa.table({"v": ["wxyz"], "c": ["b"]}), mode="append", db_schema_name=ns)
            assert "22001" in str(exc.value)
        with psycopg.connect(dsn, autocommit=True) as pg:
            assert pg.execute(f"select v, c from {ns}.f order by v").fetchall() == [("abc", "a "), ("xy", "b ")]
