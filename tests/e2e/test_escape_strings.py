"""E'…' strings against a real PostgreSQL 15: the escapes it reads, and the ones it refuses with
its SQLSTATE, message, hint and cursor (sql/escapes.py; and a prefixed string that never ends), over the simple and the extended
protocol, in a small statement and in a big one (a Query over 64 KiB is scanned in pieces:
protocol/pgwire/statements.py). A refused string fails the whole Query message before any of
its statements runs, as PostgreSQL's parser reads the whole message first."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import psycopg
import pytest

from tests.support.fixtures import real_postgres  # noqa: F401  (session fixture)
from tests.support.icegres_server import running_icegres
from tests.support.pgwire_raw import RawConnection

pytestmark = [pytest.mark.e2e, pytest.mark.timeout(300)]

STATEMENTS = [
    # refused: the encoding check (22021), the scanner's Unicode escapes (22025, 42601)
    r"select E'\xff'", r"select E'\0'", r"select E'\400'", r"select E'ok\777'", r"select E'\xc3\x28'",
    r"select E'\xe2\x82'", r"select E'\xf0\x28\x8c\x28'", r"select E'\xed\xa0\x80'", r"select E'\xc0\x80'",
    r"select E'\u'", r"select E'ab\uZZZZ'", r"select 1, E'\xff\u'", r"select E'ok', E'\u0000'",
    r"select E'\U00110000'", r"select E'\ude00'", r"select E'\ud83d'", r"select E'\ud83dx'", r"select E'\ud83d\n'",
    r"select E'\ud83d'''", r"select E'\ud83d\u0041'", r"select E'\ud83d\uZZ'", r"select 'a' E'\u'",
    "select 'x' as \"E\", E'\\u'", r"select nosuch, E'\xff'", "/* c */ select\n E'\\u'",
    # read: what each escape means, and the cursor of a later error where strings were rewritten
    r"select E'\101\x4\7\b\f\r\t\q\'\\', length(E'\1234')", r"select E'\303\251', E'\xc3\xa9', E'\u00e9'",
    r"select E'\U000000E9', E'a''b', e'\\x', E'\x5c', E'\xg'", r"select E'\ud83d\ude00', E'\U0000D83D\U0000DE00'",
    r"select E'\ud83d\ude00' as a, nosuch", r"select E'\303\251' || nosuch", r"select 'a\nb', E'\\'",
    r"select upper(E'\u00e9t\u00e9') = 'ÉTÉ'",
    # a string that never ends: PostgreSQL's message names it from its prefix
    r"select E'abc\'", "select e'x", "select B'101", "select X'ff", "select N'ab", "select U&'ab", 'select U&"ab',
]
PAD = "p" * 70_000  # a statement over 64 KiB: a Query message read in pieces


def outcome(conn: psycopg.Connection, sql: str, *, prepare: bool = False) -> tuple[Any, ...]:
    try:
        with conn.cursor() as cur:
            cur.execute(sql, prepare=prepare)
            return ("ok", cur.fetchall())
    except psycopg.Error as exc:
        d = exc.diag
        return ("error", d.sqlstate, d.message_primary or str(exc), d.statement_position, d.message_hint)


@pytest.fixture(scope="module")
def conns(real_postgres, tmp_path_factory: pytest.TempPathFactory) -> Iterator[list[psycopg.Connection]]:  # noqa: F811
    with running_icegres(tmp_path_factory.mktemp("escapes") / "lake") as srv, \
            psycopg.connect(real_postgres.dsn(), autocommit=True) as pg, \
            psycopg.connect(srv.dsn(), autocommit=True) as ig:
        yield [pg, ig]


@pytest.mark.parametrize("sql", STATEMENTS)
def test_escape_strings_as_postgresql_reads_them(conns, sql):
    pg, ig = conns
    expected = outcome(pg, sql)
    assert outcome(ig, sql) == expected
    assert outcome(ig, sql, prepare=True) == outcome(pg, sql, prepare=True)  # Parse/Bind/Execute


@pytest.mark.parametrize("sql", [r"select E'<pad>\xff'", r"select E'<pad>\u'", r"select E'<pad>\ud83dx'",
                                 r"select 1, E'\u', E'<pad>\xff'", r"select length(E'<pad>\303\251\ud83d\ude00')",
                                 r"select length(E'\303\251'), length(E'<pad>\n')"])
def test_big_escape_strings_as_postgresql_reads_them(conns, sql):
    pg, ig = conns
    sql = sql.replace("<pad>", PAD)
    assert outcome(ig, sql) == outcome(pg, sql)
    assert outcome(ig, sql, prepare=True) == outcome(pg, sql, prepare=True)


@pytest.mark.parametrize("pad", ["", PAD])
def test_a_refused_string_fails_the_whole_message(conns, pad):
    """Nothing of the message runs, the statements before the bad string included; in a block,
    the block fails (25P02 after it)."""
    for conn in conns:
        message = f"create table esc_t (i int); select E'{pad}\\xff'"
        assert outcome(conn, message)[:2] == ("error", "22021")
        assert outcome(conn, "select * from esc_t")[:2] == ("error", "42P01")
        conn.execute("begin")
        try:
            assert outcome(conn, "select E'\\u'")[:2] == ("error", "22025")
            assert outcome(conn, "select 1")[:2] == ("error", "25P02")
        finally:
            conn.execute("rollback")


def _until_ready(conn: RawConnection) -> list[tuple[bytes, dict[str, str] | bytes]]:
    out = []
    while True:
        reply = conn.read()
        out.append((reply.kind, reply.error_fields() if reply.kind == b"E" else b""))
        if reply.kind == b"Z":
            return out


def _answers(host: str, port: int, user: str, database: str, messages: list[tuple[bytes, bytes]]) -> list:
    """What a server answers each message group (up to its ReadyForQuery): kinds, and an
    error's SQLSTATE and message."""
    with RawConnection(host, port) as conn:
        conn.startup(user, database)
        _until_ready(conn)
        answers = []
        for kind, body in messages:
            conn.send(kind, body)
            if kind == b"P":
                conn.send(b"S", b"")
            answers.append([(k, (f["C"], f["M"]) if isinstance(f, dict) else None) for k, f in _until_ready(conn)])
        return answers


@pytest.mark.parametrize("text", [b"select '\xff'", b"select 'a\xe2\x82' as x", b"select '" + b"a" * 70_000 + b"\xc3\x28'"])
def test_a_query_that_is_not_utf8_is_an_error_not_the_end_of_the_session(real_postgres, conns, text):  # noqa: F811
    """PostgreSQL answers 22021 naming the bytes and the session goes on: the same message in a
    Query, in a Parse, and in a Parse's statement name; then `select 1` still answers."""
    messages = [(b"Q", text + b"\0"), (b"P", b"\0" + text + b"\0\0\0"), (b"P", text[7:] + b"\0select 1\0\0\0"),
                (b"Q", b"select 1\0")]
    ig = conns[1].info
    theirs = _answers(real_postgres.host, real_postgres.port, real_postgres.user, real_postgres.dbname, messages)
    ours = _answers(ig.host, ig.port, ig.user, ig.dbname, messages)
    assert ours == theirs
    assert theirs[-1][0][0] == b"T"  # (the session went on)


@pytest.mark.parametrize("options", [r"delimiter E'\x01'", r"format csv, delimiter E'\t', quote E'\''"])
def test_copy_options_written_as_escape_strings(conns, options):
    sql = f"copy (select 1 as a, 'x y' as b) to stdout ({options})"
    copied = []
    for conn in conns:
        with conn.cursor() as cur, cur.copy(sql) as copy:
            copied.append(b"".join(bytes(chunk) for chunk in copy))
    assert copied[1] == copied[0]
