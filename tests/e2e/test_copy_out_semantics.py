"""COPY ... TO STDOUT, byte for byte as PostgreSQL 15 writes it: the same rows in the same table on
icegres and on the session's real PostgreSQL, each COPY's output compared whole.

The values are the awkward ones: tabs, newlines, backslashes, quotes and delimiters inside text,
NULLs and empty strings, NaN and infinities, bytea, arrays with NULLs and quoted elements, dates
of year 1, microsecond timestamps, non-ASCII text.
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
        yield dsns
        with psycopg.connect(dsns[0], autocommit=True) as conn:
            conn.execute("drop table public.copy_out")


def _copy(dsn: str, sql: str) -> bytes | tuple[str, str | None]:
    with psycopg.connect(dsn, autocommit=True) as conn:
        conn.execute("set timezone = 'UTC'")
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
])
def test_copy_out_writes_postgresqls_bytes(servers: list[str], sql: str) -> None:
    theirs, ours = (_copy(dsn, sql) for dsn in servers)
    assert ours == theirs


def test_copy_of_a_table_with_a_column_list(servers: list[str]) -> None:
    """COPY t (b, a) TO STDOUT: those columns, in that order (row order is unspecified)."""
    theirs, ours = (_copy(dsn, "copy copy_out (s, id) to stdout with (format csv)") for dsn in servers)
    assert isinstance(ours, bytes) and isinstance(theirs, bytes)
    assert sorted(ours.splitlines()) == sorted(theirs.splitlines())
