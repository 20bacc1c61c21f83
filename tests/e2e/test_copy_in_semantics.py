"""COPY ... FROM STDIN read as PostgreSQL 15 reads it: the same bytes into the same empty table on
icegres and on the session's real PostgreSQL, then the outcome (command tag and rows, or SQLSTATE)
compared. Text and CSV, escapes, quoting, NULL strings, HEADER [MATCH], FORCE_NULL /
FORCE_NOT_NULL, CRLF, the end marker, rows of the wrong width, values that do not parse.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import psycopg
import pytest

from tests.support.differential import beside_postgres
from tests.support.fixtures import real_postgres  # noqa: F401  (session fixture)

pytestmark = [pytest.mark.e2e, pytest.mark.timeout(120)]

# (name, COPY statement, the bytes sent)
CASES = [
    ("text", "copy dd.i from stdin", "1\ta\t1.5\tt\t2024-01-01\n2\t\\N\t\\N\t\\N\t\\N\n3\tx\\ty\\\\z\\nw\t-0.5\tf\t2024-02-29\n"),
    ("csv", "copy dd.i from stdin with (format csv)", '1,a,1.5,t,2024-01-01\n2,,,,\n3,"x,y ""q""",2,false,2024-03-01\n4,"",0,yes,2024-03-02\n'),
    ("csv header", "copy dd.i from stdin with (format csv, header)", 'id,s,x,b,d\n1,a,1,t,2024-01-01\n'),
    ("csv null", "copy dd.i from stdin with (format csv, null 'NULL')", '1,NULL,NULL,NULL,NULL\n2,"NULL",1,t,2024-01-01\n3,,1,t,2024-01-01\n'),
    ("csv multiline", "copy dd.i from stdin with (format csv)", '1,"line1\nline2",1,t,2024-01-01\n'),
    ("csv delim", "copy dd.i from stdin with (format csv, delimiter ';', quote '''')", "1;'a;b';1.25;t;2024-01-01\n"),
    ("text cols", "copy dd.i (s, id) from stdin", "hello\t10\n\\N\t11\n"),
    ("bad count", "copy dd.i from stdin", "1\ta\n"),
    ("extra col", "copy dd.i from stdin", "1\ta\t1\tt\t2024-01-01\textra\n"),
    ("bad int", "copy dd.i from stdin", "x\ta\t1\tt\t2024-01-01\n"),
    ("bad date", "copy dd.i from stdin with (format csv)", "1,a,1,t,2024-02-30\n"),
    ("numeric round", "copy dd.i from stdin with (format csv)", "1,a,1.23456,t,2024-01-01\n2,b,-1.005,f,2024-01-01\n3,c, 7 ,f,2024-01-01\n"),
    ("end marker", "copy dd.i from stdin", "1\ta\t1\tt\t2024-01-01\n\\.\n"),
    ("crlf", "copy dd.i from stdin with (format csv)", "1,a,1,t,2024-01-01\r\n2,b,2,f,2024-01-02\r\n"),
    ("empty", "copy dd.i from stdin", ""),
    ("no trailing newline", "copy dd.i from stdin with (format csv)", "1,a,1,t,2024-01-01"),
    ("force_null", "copy dd.i from stdin with (format csv, force_null (s))", '1,"",1,t,2024-01-01\n'),
    ("force_not_null", "copy dd.i from stdin with (format csv, force_not_null (s))", '1,,1,t,2024-01-01\n'),
    ("escape", "copy dd.i from stdin with (format csv, escape '\\')", '1,"a\\"b",1,t,2024-01-01\n'),
    ("text octal", "copy dd.i from stdin", "1\t\\101\\x42\\u0043\t1\tt\t2024-01-01\n"),
    ("bool forms", "copy dd.i from stdin with (format csv)", "1,a,1,TRUE,2024-01-01\n2,a,1,off,2024-01-01\n3,a,1,1,2024-01-01\n"),
    ("header match", "copy dd.i from stdin with (format csv, header match)", 'id,s,x,b,d\n1,a,1,t,2024-01-01\n'),
    ("header mismatch", "copy dd.i from stdin with (format csv, header match)", 'id,s,x,b,e\n1,a,1,t,2024-01-01\n'),
    ("header match text", "copy dd.i (s, id) from stdin with (header match)", 's\tid\nq\t1\n'),
    ("force both", "copy dd.i from stdin with (format csv, null 'N', force_null (s, x), force_not_null (d))", '1,"N",N,t,N\n2,N,"N",f,2024-01-01\n'),
    ("force bad col", "copy dd.i from stdin with (format csv, force_null (nosuch))", '1,a,1,t,2024-01-01\n'),
    ("force text", "copy dd.i from stdin with (force_null (s))", '1\ta\t1\tt\t2024-01-01\n'),
    ("spaces csv", "copy dd.i from stdin with (format csv)", '1, a ,1,t,2024-01-01\n'),
]


@pytest.fixture(scope="module")
def servers(tmp_path_factory: pytest.TempPathFactory, real_postgres: Any) -> Iterator[list[str]]:  # noqa: F811
    with beside_postgres(tmp_path_factory.mktemp("copy-in") / "lake", real_postgres) as dsns:
        for dsn in dsns:
            with psycopg.connect(dsn, autocommit=True) as conn:
                conn.execute("create schema if not exists dd")
        yield dsns
        with psycopg.connect(dsns[0], autocommit=True) as conn:
            conn.execute("drop schema dd cascade")


def _load(dsn: str, sql: str, data: str) -> tuple[Any, ...]:
    with psycopg.connect(dsn, autocommit=True) as conn:
        conn.execute("drop table if exists dd.i")
        conn.execute("create table dd.i (id bigint, s text, x numeric(8,2), b boolean, d date)")
        try:
            with conn.cursor() as cur:
                with cur.copy(sql) as copy:
                    copy.write(data.encode())
                tag = cur.statusmessage
        except psycopg.Error as exc:
            return ("error", exc.sqlstate)
        rows = conn.execute("select * from dd.i order by id").fetchall()
        return ("ok", tag, rows)


@pytest.mark.parametrize(("sql", "data"), [pytest.param(sql, data, id=name) for name, sql, data in CASES])
def test_copy_in_reads_as_postgresql_reads(servers: list[str], sql: str, data: str) -> None:
    theirs, ours = (_load(dsn, sql, data) for dsn in servers)
    assert ours == theirs
