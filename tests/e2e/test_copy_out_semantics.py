"""COPY ... TO STDOUT, byte for byte as PostgreSQL 15 writes it: the same rows in the same table on
icegres and on the session's real PostgreSQL, each COPY's output compared whole.

The values are the awkward ones: tabs, newlines, backslashes, quotes and delimiters inside text,
NULLs and empty strings, NaN and infinities, bytea, arrays with NULLs and quoted elements, dates
of year 1, microsecond timestamps, non-ASCII text; and options whose characters occur in
rendered values (DELIMITER ':' and timestamps, NULL '0' and integers in CSV), which make COPY
escape or quote values of types that otherwise never need it.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import psycopg
import pytest

from tests.support.differential import beside_postgres
from tests.support.fixtures import real_postgres  # noqa: F401  (session fixture)

pytestmark = [pytest.mark.e2e, pytest.mark.timeout(120)]

ROWS = [
    r"""(1, 'plain', 1, 1.5, 0.1, true, '2024-01-02', '2024-01-02 03:04:05.678', '2024-01-02 03:04:05+00',
         '\x00ff', array[1,2], array['a','b c'])""",
    r"""(2, E'tab\there', -5, -0.001, -1e300, false, '0001-01-01', '1999-12-31 23:59:59',
         '2000-01-01 00:00:00+05', '\x', '{}', array['', null])""",
    r"""(3, E'new\nline \\ back', null, null, 'NaN', null, null, null, null, null, null, null)""",
    r"""(4, 'quote " and , comma', 0, 0, 'Infinity', true, '2024-02-29', '2024-02-29 00:00:00',
         '2024-02-29 12:00:00.5+00', 'abc', array[null::int], array['x"y', 'p,q', 'NULL'])""",
    r"""(5, '', 7, 12345.678, 1.5e-7, false, '2024-12-31', '2024-12-31 12:00:00.000001',
         '2024-12-31 23:59:59.999999+00', '\x5c', array[-1], array['{}', 'a\b'])""",
    r"""(6, 'ünï©ødé ✓', 8, 1, 123456789.125, true, null, null, null, null, null, array['ü'])""",
    r"""(7, ' lead and trail ', 0, -0.5, -0.0, false, '2000-02-29', '1970-01-01 00:00:00',
         '1900-06-01 12:34:56.789+00', '\x5c0a09', array[0, -2147483648], array[' ', E'back\\slash'])""",
    r"""(8, '\.', -1, 99999.999, 1e-300, true, '9999-12-31', '0001-01-01 00:00:00.5',
         '2024-03-31 01:30:00+00', '\x2c22', array[1, null, 3], array['a;b', 'c:d', E'e\tf'])""",
    r"""(9, 'NULL', 2147483647, 0.001, 5e-324, null, '1999-01-08', '2038-01-19 03:14:08',
         '2024-10-27 00:59:59.999999+00', '\xe282ac', null, array[E'line\nend', 'ünï'])""",
    r"""(10, E'\\N', null, null, null, null, null, null, null, null, null, null)""",
]

# Types the first table lacks, with values at the edges of their renderings.
MORE_ROWS = [
    r"""(1, 1.5, '00:00:00', '00000000-0000-0000-0000-000000000000', 12345678901234567890,
         '{"a": [1, "x,y"]}')""",
    r"""(2, -3.4028235e38, '23:59:59.999999', 'a0eebc99-9c0b-4ef8-bb6d-6bb9bd380a11', -1, '"q\"uote"')""",
    r"""(3, 1e-7, '12:34:56.5', null, 0, null)""",
    r"""(4, null, null, 'ffffffff-ffff-ffff-ffff-ffffffffffff', null, '[]')""",
    r"""(5, 'NaN', '01:02:03', '12345678-1234-5678-1234-567812345678', 10, E'tab\there')""",
]


@pytest.fixture(scope="module")
def servers(tmp_path_factory: pytest.TempPathFactory, real_postgres: Any) -> Iterator[list[str]]:  # noqa: F811
    with beside_postgres(tmp_path_factory.mktemp("copy") / "lake", real_postgres) as dsns:
        for dsn in dsns:
            with psycopg.connect(dsn, autocommit=True) as conn:
                conn.execute("drop table if exists public.copy_out")
                conn.execute(
                    "create table public.copy_out (id bigint, s text, n int, x numeric(8,3), f double precision,"
                    " b boolean, d date, ts timestamp, tz timestamptz, by bytea, a int[], ta text[])")
                conn.execute("set timezone = 'UTC'")
                for row in ROWS:  # one row a statement: DataFusion's VALUES does not unify '{}' with array[]
                    conn.execute("insert into public.copy_out values " + row)
                conn.execute("drop table if exists public.copy_more")
                conn.execute("create table public.copy_more (id bigint, r real, t time, u uuid,"
                             " big numeric(20,0), j text)")
                for row in MORE_ROWS:
                    conn.execute("insert into public.copy_more values " + row)
        yield dsns
        with psycopg.connect(dsns[0], autocommit=True) as conn:
            conn.execute("drop table public.copy_out")
            conn.execute("drop table public.copy_more")


def _copy(dsn: str, sql: str, zone: str = "UTC") -> bytes | tuple[str, str | None]:
    with psycopg.connect(dsn, autocommit=True) as conn:
        conn.execute(f"set timezone = '{zone}'")
        try:
            with conn.cursor().copy(sql) as copy:
                return b"".join(bytes(chunk) for chunk in copy)
        except psycopg.Error as exc:
            return ("error", exc.sqlstate)


@pytest.mark.parametrize("sql", [
    "copy (select * from copy_out order by id) to stdout",
    "copy (select * from copy_out order by id) to stdout with (format csv)",
    "copy (select * from copy_out order by id) to stdout with (format csv, header)",
    "copy (select * from copy_out order by id) to stdout with (format text, null 'NUL', delimiter '|')",
    "copy (select * from copy_out order by id) to stdout"
    " with (format csv, header, delimiter ';', null 'NULL', quote '''', force_quote *)",
    "copy (select id, s, n from copy_out order by id) to stdout with (format csv, force_quote (n, \"s\"))",
    "copy (select id, s, n from copy_out order by id) to stdout with csv header force quote *",
    "copy (select id, s, n from copy_out order by id) to stdout with csv force quote s, n",
    "copy (select id, s from copy_out order by id) to stdout with csv header quote '\"' escape '\\'",
    "copy (select id, s, n from copy_out order by id) to stdout with (format csv, force_quote (nosuch))",
    "copy (select id, s, n from copy_out order by id) to stdout with (force_quote *)",
    # The characters of rendered numbers and times as options: escaped (text) or quoted (CSV).
    "copy (select * from copy_out order by id) to stdout with (delimiter ':')",
    "copy (select * from copy_out order by id) to stdout with (delimiter '-', null 'none')",
    "copy (select * from copy_out order by id) to stdout with (delimiter ' ')",
    "copy (select * from copy_out order by id) to stdout with (delimiter ',', null '')",
    "copy (select * from copy_out order by id) to stdout with (format csv, delimiter ':')",
    "copy (select * from copy_out order by id) to stdout with (format csv, delimiter '-', quote ':')",
    "copy (select * from copy_out order by id) to stdout with (format csv, null '0')",
    "copy (select * from copy_out order by id) to stdout with (format csv, null '-1', delimiter '|')",
    "copy (select * from copy_out order by id) to stdout with (format csv, quote '1')",
    "copy (select * from copy_out order by id) to stdout with (format csv, force_quote *, escape '0')",
    r"copy (select * from copy_out order by id) to stdout with (format csv, quote '''', escape '\')",
    r"copy (select * from copy_out order by id) to stdout with (format csv, null '\N', header)",
    "copy (select * from copy_more order by id) to stdout",
    "copy (select * from copy_more order by id) to stdout with (format csv)",
    "copy (select * from copy_more order by id) to stdout with (format csv, force_quote *, null 'x')",
    "copy (select * from copy_more order by id) to stdout with (delimiter '-')",
    "copy (select * from copy_more order by id) to stdout with (format csv, delimiter '.', null '0')",
    "copy (select * from copy_more order by id) to stdout with (format csv, delimiter 'e', quote 'f')",
    # `\.` alone on a line is quoted in CSV (it would end the data); in a row of more fields it is not.
    "copy (select s from copy_out order by id) to stdout with (format csv)",
    "copy (select s, id from copy_out order by id) to stdout with (format csv)",
    "copy (select s from copy_out order by id) to stdout with (format csv, header, null 's')",
    "copy (select s from copy_out order by id) to stdout",
    # Options PostgreSQL refuses.
    "copy (select id from copy_out) to stdout with (delimiter 'a')",
    "copy (select id from copy_out) to stdout with (delimiter '.')",
    "copy (select id from copy_out) to stdout with (delimiter '5')",
    r"copy (select id from copy_out) to stdout with (delimiter '\')",
    "copy (select id from copy_out) to stdout with (delimiter 'é')",
    "copy (select id from copy_out) to stdout with (delimiter '||')",
    "copy (select id from copy_out) to stdout with (null 'a\tb')",
    "copy (select id from copy_out) to stdout with (quote '\"')",
    r"copy (select id from copy_out) to stdout with (escape '\')",
    "copy (select id from copy_out) to stdout with (format csv, delimiter '|', quote '|')",
    "copy (select id from copy_out) to stdout with (format csv, quote 'ab')",
    "copy (select id from copy_out) to stdout with (format csv, escape '')",
    "copy (select id from copy_out) to stdout with (format csv, null 'a\"b')",
    "copy (select id from copy_out) to stdout with (format csv, null 'a,b')",
    "copy (select id from copy_out) to stdout with (format csv, force_not_null (id))",
    "copy (select id from copy_out) to stdout with (format csv, force_null (id))",
    "copy (select id from copy_out) to stdout with (format csv, header match)",
])

def test_copy_out_writes_postgresqls_bytes(servers: list[str], sql: str) -> None:
    theirs, ours = (_copy(dsn, sql) for dsn in servers)
    assert ours == theirs


def test_copy_of_a_table_with_a_column_list(servers: list[str]) -> None:
    """COPY t (b, a) TO STDOUT: those columns, in that order (row order is unspecified)."""
    theirs, ours = (_copy(dsn, "copy copy_out (s, id) to stdout with (format csv)") for dsn in servers)
    assert isinstance(ours, bytes) and isinstance(theirs, bytes)
    assert sorted(ours.splitlines()) == sorted(theirs.splitlines())


@pytest.mark.parametrize("zone", ["Asia/Kolkata", "America/St_Johns", "Europe/Berlin"])
@pytest.mark.parametrize("options", ["", " with (format csv)", " with (format csv, delimiter ':')",
                                     " with (delimiter '+')"])
def test_timestamptz_in_the_sessions_zone(servers: list[str], zone: str, options: str) -> None:
    sql = "copy (select id, tz, ts, d from copy_out order by id) to stdout" + options
    theirs, ours = (_copy(dsn, sql, zone) for dsn in servers)
    assert ours == theirs


def test_rows_of_no_columns(servers: list[str]) -> None:
    theirs, ours = (_copy(dsn, "copy (select from copy_out) to stdout") for dsn in servers)
    assert ours == theirs


def test_many_rows_arrive_whole_in_messages_of_many_rows(servers: list[str]) -> None:
    """More rows than one message holds: the same bytes, and icegres's messages end at row ends."""
    sql = ("copy (select i, 'row ' || i || E'\\t,\"' as s, i::double precision / 4 as f, i % 3 = 0 as b"
           " from generate_series(1, 60000) as g(i) order by i) to stdout with (format {})")
    for fmt in ("text", "csv"):
        theirs, ours = (_copy(dsn, sql.format(fmt)) for dsn in servers)
        assert ours == theirs
    with psycopg.connect(servers[1], autocommit=True) as conn:
        with conn.cursor().copy(sql.format("text")) as copy:
            messages = [bytes(chunk) for chunk in copy]
    assert 2 < len(messages) < 60000 // 10
    assert all(message.endswith(b"\n") for message in messages)
