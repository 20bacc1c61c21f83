"""Writes as PostgreSQL makes them: each script runs statement by statement on icegres and on a real
PostgreSQL 15, and after every statement both must agree on the outcome (command tag or SQLSTATE)
and on the rows of the script's tables.

The scripts came from a differential run of ~100 writes (2026-12-05) that found values PostgreSQL
assigns and icegres refused (an integer into a numeric column, text with more decimals than the
column's scale) or stored differently (timestamptz text read in UTC instead of the session's
TimeZone), and errors with the wrong SQLSTATE. Where icegres differs on purpose (docs/types.md:
smallint is not bounded), the scripts stay clear of it; varchar(n) and char(n) have their own
scripts in test_char_types.py.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import psycopg
import pytest

from tests.support.fixtures import real_postgres  # noqa: F401  (session fixture)
from tests.support.icegres_server import IcegresServer, running_icegres

pytestmark = [pytest.mark.e2e, pytest.mark.timeout(180)]

Outcome = tuple[str, Any, Any]


@pytest.fixture(scope="module")
def icegres(tmp_path_factory: pytest.TempPathFactory) -> Iterator[IcegresServer]:
    with running_icegres(tmp_path_factory.mktemp("dml") / "lake") as srv:
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
        return ("error", exc.sqlstate, None)  # the message may differ; the SQLSTATE may not


def _rows(outcome: Outcome) -> Outcome:
    """A table's dump in an order of its own (a table has none): rows sorted, NULLs first."""
    status, tag, rows = outcome
    if rows is None:
        return outcome
    return status, tag, sorted(rows, key=lambda row: tuple((v is not None, v or "") for v in row))


def _play(icegres: IcegresServer, postgres: Any, script: str, tables: tuple[str, ...], *,
          after_create: str | None = None) -> None:
    """`script`'s statements on PostgreSQL and icegres alike: the same outcomes and the same rows
    of `tables` after each. `after_create` ({table}: its name): an icegres-only statement run
    after each CREATE TABLE (table properties PostgreSQL has not)."""
    with psycopg.connect(postgres.dsn(), autocommit=True) as pg, \
            psycopg.connect(icegres.dsn(), autocommit=True) as ig:
        _run(pg, "drop schema if exists dd cascade")
        for conn in (pg, ig):
            assert _run(conn, "create schema if not exists dd")[0] == "ok"
        try:
            for sql in (s.strip() for s in script.strip().splitlines()):
                theirs, ours = _run(pg, sql), _run(ig, sql)
                assert ours == theirs, f"{sql}\n  postgres: {theirs}\n  icegres:  {ours}"
                words = sql.split()
                if after_create is not None and ours[0] == "ok" and [w.lower() for w in words[:2]] == ["create", "table"]:
                    name = words[5] if words[2].lower() == "if" else words[2]
                    assert _run(ig, after_create.format(table=name))[0] == "ok", name
                for table in tables:
                    dump = f"select * from {table}"
                    assert _rows(_run(ig, dump)) == _rows(_run(pg, dump)), f"rows of {table} after: {sql}"
        finally:
            for table in tables:
                _run(ig, f"drop table if exists {table}")


_CONSTANTS = """
        create table dd.k (i int, b bigint, d double precision, n numeric(10,2), f boolean, dt date, ts timestamp, s text, v varchar(5))
        insert into dd.k values (1, -2, 1.5, 12.25, true, '2024-02-29', '2024-02-29 23:59:59.123456', 'a', 'abc')
        insert into dd.k values (-7, 9223372036854775807, -0.0, -0.5, 'yes', '1999-12-31', '2000-01-01T00:00:00', '', 'abcde')
        insert into dd.k values (' 42 ', '-3', ' 1e3 ', ' 7.1 ', ' OFF ', ' 2024-01-01 ', '2024-01-01 10:00:00.5', 'x', 'ab   ')
        insert into dd.k values (2, 3, .5, 1e2, 'f', '2000-01-01', '2000-01-01 00:00:00', 'y', 'abcde   ')
        insert into dd.k (i, b) values (1, 2), (3, -4), (null, null)
        insert into dd.k (d) values ('NaN'), ('-Infinity'), ('inf'), ('-0'), (1e308), (-12)
        insert into dd.k (d) values (12345678901234567890123), ('4.9e-324')
        insert into dd.k (i) values (2147483648)
        insert into dd.k (b) values (-9223372036854775809)
        insert into dd.k (d) values (1e400)
        insert into dd.k (d) values ('1e400')
        insert into dd.k (d) values ('1e-400')
        insert into dd.k (n) values (1.005)
        insert into dd.k (n) values ('2.555')
        insert into dd.k (n) values (123456789.5)
        insert into dd.k (n) values (99999999.99)
        insert into dd.k (i) values (1.5)
        insert into dd.k (i) values ('1.5')
        insert into dd.k (i) values ('')
        insert into dd.k (f) values ('maybe')
        insert into dd.k (dt) values ('2024-02-30')
        insert into dd.k (ts) values ('2024-13-01 00:00:00')
        insert into dd.k (v) values ('abcdef')
        insert into dd.k (i, n) values (E'7', E'2.5')
        insert into dd.k (i) values (E'x')
        create table dd.kn (id int not null, s text)
        insert into dd.kn values (1, 'a'), (null, 'b')
        insert into dd.kn values (2, 'c')
"""


def test_values_are_assigned_to_numeric_columns_as_postgresql_assigns_them(
        icegres: IcegresServer, real_postgres: Any) -> None:  # noqa: F811
    _play(icegres, real_postgres, """
        create table dd.t (id bigint, x numeric(10,2), f double precision, n int, s text)
        insert into dd.t values (1, 9, 9, 9, 9)
        insert into dd.t values (2, '3.14159', '2.5', '7', 'c')
        insert into dd.t values (3, -2.345, ' 1.5 ', ' 42 ', 'x')
        insert into dd.t values (4, ' 1.005 ', 1, 1.5, 1.5)
        insert into dd.t values (5, 99999999.994, 1, 1, 'x')
        insert into dd.t values (6, 99999999.995, 1, 1, 'x')
        insert into dd.t values (7, 1, 1, 2147483648, 'x')
        insert into dd.t values (8, 1e3, 1, '1.5', 'x')
        insert into dd.t (id, x) values (9, 123456789)
        insert into dd.t (id, x) select 10, 12345678
        update dd.t set x = x * 3 where id = 5
        update dd.t set x = x / 3 where id = 1
        update dd.t set n = n + 1 where id = 2
        update dd.t set n = 2147483647 where id = 3
        update dd.t set n = n + 1 where id = 3
        update dd.t set x = n where id = 2
        update dd.t set s = x where id = 2
        update dd.t set x = E'4.25' where id = 1
        update dd.t set x = E'4.25'::text where id = 1
    """, ("dd.t",))


def test_constants_built_straight_into_arrow_mean_what_postgresql_reads_them_as(
        icegres: IcegresServer, real_postgres: Any) -> None:  # noqa: F811
    """An INSERT's VALUES of constants skip planning when each constant can be read only one way
    (engine/insert_shape.py): an unquoted number into an integer, double or numeric column, a
    quoted one through the type's input function, boolean words, ISO dates and timestamps. The
    ones it cannot settle (rounding, out of range, other spellings) take the planned path; both
    must store what PostgreSQL stores and refuse what it refuses."""
    _play(icegres, real_postgres, _CONSTANTS, ("dd.k", "dd.kn"))


def test_a_big_values_list_read_without_a_tree_means_what_postgresql_reads(
        icegres: IcegresServer, real_postgres: Any) -> None:  # noqa: F811
    """Over 64 kB an INSERT … VALUES of constants is read by the lexer, never parsed into a tree
    (sql/values_rows.py); a column whose constants the recipe cannot take as they are is made a
    typed Arrow column (engine/dml/constant_rows.py). Each INSERT of the script above with its rows repeated past
    64 kB, and what only a long list has (rows of two widths, a refused value in its last row),
    must store and refuse what PostgreSQL does."""
    lines = []
    for line in (s.strip() for s in _CONSTANTS.strip().splitlines()):
        head, found, rows = line.partition(" values ")
        lines.append(f"{head}{found}{', '.join([rows] * (66_000 // len(rows) + 1))}" if found else line)
        if found:
            lines.append("truncate dd.k")  # (each statement's rows compared alone: dumps stay small)
    filler = ", ".join(f"({i}, {i}, {i}.5, {i}.25, {'true' if i % 2 else 'false'}, '2024-01-01', "
                       f"'2024-01-01 00:00:00', 's{i}', 'v{i % 10}')" for i in range(800))
    lines += [f"insert into dd.k values {filler}, (1, 2)",  # 42601
              f"insert into dd.k values {filler}, (1, 2, 3, 4, 't', '2024-01-01', '2024-01-01 00:00:00', 'x', 'toolong')",
              f"insert into dd.k values {filler}, (-1, 2, 3, 4, 't', '2024-01-01', '2024-01-01 00:00:00', 'x', 'y')",
              f"insert into dd.k (i, s) values {', '.join(f'({i}, $${i}$$)' for i in range(6_000))}"]
    assert all(len(line) > 64 * 1024 for line in lines if line.startswith("insert into dd.k"))
    _play(icegres, real_postgres, "\n".join(lines), ("dd.k", "dd.kn"))



def _repeated(head: str, row: str, last: str = "") -> str:
    """`head values row, row, …` past the lexer's threshold (sql/parse.py VALUES_TEXT), `row`'s
    `{i}` the row's number, and `last` as the final row."""
    rows = [row.format(i=i) for i in range(3_000 // len(row) + 2)]
    return f"{head} values {', '.join(rows + ([last] if last else []))}"


def test_a_big_values_list_the_recipe_does_not_take_means_what_postgresql_reads(
        icegres: IcegresServer, real_postgres: Any) -> None:  # noqa: F811
    """A big VALUES list into a table with CHECK constraints and defaults, with DEFAULT in its
    rows, casts with modifiers or of several words, numbers its columns round, strings only the
    column's input function reads and an expression every row has: each column made a typed
    Arrow column and assigned (engine/dml/constant_rows.py), or, where rows differ in their
    expressions, the parse. Rows, tags and
    SQLSTATEs as PostgreSQL's, nothing stored by a statement that fails."""
    r = _repeated
    c = "insert into dd.c"
    lines = [
        "set time zone 'UTC'",
        "create table dd.c (id int check (id >= 0), n numeric(6,2), d double precision default 7.5, "
        "s varchar(4), ts timestamptz, dt date, b boolean default true, t text default 'dflt')",
        r(c, "({i}, {i}.555, DEFAULT, 'abcdef'::varchar(4), '2024-01-01 10:00:00+02', ' 2024-01-02 ', DEFAULT, $$x{i}$$)"),
        r(f"{c} (id, s)", "({i}, 'ab')"),
        r(f"{c} (id, s)", "({i}, 'ab')", "(-1, 'ab')"),  # 23514 in the last row: nothing stored
        r(f"{c} (id, d, dt)", "({i}, '{i}.5'::double precision, '2024-03-01'::date)"),
        r(f"{c} (id, d)", "({i}, '1e400'::double precision)"),  # 22003
        r(f"{c} (id, d)", "({i}, 'x'::double precision)"),  # 22P02
        r(f"{c} (id, n)", "({i}, '5'::text)"),  # 42804
        r(f"{c} (id, n)", "({i}, 12345.678)"),  # 22003: numeric(6,2) overflows
        r(f"{c} (id, n)", "({i}, 1.005::numeric(4,1))"),
        r(f"{c} (id, s)", "({i}, 'abcdef')"),  # 22001
        r(f"{c} (id, s)", "({i}, 'ab  '::character varying(3))"),
        r(f"{c} (id, b, t)", "({i}, 'yes', 'v{i}')"),
        r(f"{c} (id, b)", "({i}, 'maybe')"),  # 22P02
        r(f"{c} (id, t)", "({i}, DEFAULT)", "(0, 'last')"),  # DEFAULT beside values: the parse
        r(f"{c} (id, t)", "({i}, 'x')", "(0, 5)"),  # kinds mixed: the parse
        r(f"{c} (id)", "({i}.5)"),  # rounds to an integer
        r(f"{c} (id)", "('{i}.5')"),  # 22P02
        r(f"{c} (ts)", "('2024-06-01 12:00:00 America/New_York')"),
        r(f"{c} (ts, dt)", "(NULL::timestamp with time zone, NULL)"),
        r(f"{c} (id, n)", "({i}, 99999999999999999999999)"),  # 22003
        r(f"{c} (id, t, n, d)", "({i}, upper('abc') || 'd', 2.5 * 2, length('abc'))"),  # one expression per column
        r(f"{c} (id, t)", "({i}, 'name ' || {i})"),  # one expression differing in a constant
        r(f"{c} (id, n)", "({i}, (1.005))"),
        r(f"{c} (id, b)", "({i}, 1 < 2)"),
        r(f"{c} (id, dt)", "({i}, date '2024-01-01' + 1)"),
        r(f"{c} (id, t)", "({i}, nosuch)"),  # 42703
        r(f"{c} (id, n)", "({i}, 1 / 0)"),  # 22012
        r(f"{c} (id, n)", "({i}, 'a' || 'b')"),  # 42804: text into numeric
        r(f"{c} (id, t)", "({i}, nosuchfunction(1))"),  # 42883
        r(f"{c} (id, n)", "({i}, sum(1))"),  # 42803
        r(f"{c} (id, n)", "({i}, row_number() over ())"),  # 42P20
        r(f"{c} (id, n)", "({i}, extract(year from date '2024-01-01'))"),
        r(f"{c} (id, n)", "({i}, E'5')"),  # an untyped literal, whatever its prefix
        r(f"{c} (id, n)", "({i}, E'x')"),  # 22P02
        "create table dd.nw (id int, ts timestamptz, u uuid)",
        r("insert into dd.nw", "({i}, now(), gen_random_uuid())"),
        "select count(*) > 100, count(distinct ts), count(distinct u) = count(*) from dd.nw",
        "create table dd.g (id int generated always as identity, s text not null)",
        r("insert into dd.g (id, s)", "(DEFAULT, 's{i}')"),
        r("insert into dd.g", "(DEFAULT, 's{i}')"),
        r("insert into dd.g (id, s)", "({i}, 's{i}')"),  # 428C9
        r("insert into dd.g (id, s)", "(DEFAULT, 's{i}')", "(DEFAULT, NULL)"),  # 23502
    ]
    assert all(len(line) > 2048 for line in lines if line.startswith("insert"))
    _play(icegres, real_postgres, "\n".join(lines), ("dd.c", "dd.g"))
    with psycopg.connect(icegres.dsn(), autocommit=True) as ig:
        ig.execute("drop table if exists dd.nw")


def test_values_rows_mixing_strings_with_numbers_are_assigned_item_by_item(
        icegres: IcegresServer, real_postgres: Any) -> None:  # noqa: F811
    """PostgreSQL assigns each item of an INSERT's VALUES to its column apart: a column holding
    strings beside numbers or booleans is not one type across the rows (`('x'), (5)` into text
    was 22P02), and the columns the statement leaves out take their defaults however the rows
    were planned. Rows, RETURNING rows, tags and SQLSTATEs as PostgreSQL's."""
    script = """
        create table dd.m (s text, i int default 9, b boolean, n numeric(6,2), d date)
        insert into dd.m (s) values ('x'), (5)
        insert into dd.m (s) values ('x'), (true), (1.50), (-2)
        insert into dd.m (i) values ('7'), (5)
        insert into dd.m (b) values ('yes'), (true), ('off')
        insert into dd.m (n) values ('1.555'), (2), ('3'), (-4.5)
        insert into dd.m (s) values (1.50), (-2), (1e3), (0.125)
        insert into dd.m (n) values (1.5), (2.25), (3)
        insert into dd.m (s, n) values ('x', 1), (5, '2'), ('y', '3.5') returning s, n, i
        insert into dd.m (s) values ('a'), (1), ('b'), (2) returning s
        insert into dd.m (n) values ('x'), (5)
        insert into dd.m (i) values ('1'), (2.5), ('x')
        insert into dd.m (d) values (date '2024-01-01'), ('2024-01-02')
        insert into dd.m (d, s) values (date '2024-01-03', 'p'), ('2024-01-04', 'q') returning d, s, i
    """
    _play(icegres, real_postgres, script, ("dd.m",))


def test_big_values_rows_of_one_expression_differing_in_constants_mean_what_postgresql_reads(
        icegres: IcegresServer, real_postgres: Any) -> None:  # noqa: F811
    """Rows whose expressions differ only in their constants (`'name ' || 1`, `'name ' || 2`):
    evaluated over a column per differing constant (sql/values_template.py) where the constant
    stands under operators and functions that take any operand, else parsed; a row that fails
    fails the statement. Rows, tags and SQLSTATEs as PostgreSQL's."""
    r = _repeated
    c = "insert into dd.e"
    lines = [
        "create table dd.e (id int, t text, n numeric(8,2), d double precision, b boolean, dt date, g bigint)",
        r(f"{c} (id, t)", "({i}, md5('row {i}'))"),
        r(f"{c} (id, t)", "({i}, upper('a{i}') || lower('B') || 'it''s {i}')"),
        r(f"{c} (id, t)", "({i}, concat('x', {i}, 'y'))"),
        r(f"{c} (id, n)", "({i}, {i} * 2 - 1)"),
        r(f"{c} (id, n)", "({i}, ({i} + 3) / 7)"),  # integer division, as in PostgreSQL
        r(f"{c} (id, n)", "({i}, {i} % 5 + abs(-{i}))"),
        r(f"{c} (id, d)", "({i}, {i}.5 * 2)"),
        r(f"{c} (id, d)", "({i}, 1.5 / {i}.25)"),  # a numeric quotient: the parse
        r(f"{c} (id, n)", "({i}, length('x{i}'))"),
        r(f"{c} (id, b)", "({i}, {i} > 50 and 'a{i}' <> 'a7')"),
        r(f"{c} (id, n)", "({i}, coalesce(NULL, {i}, 0))"),
        r(f"{c} (id, n)", "({i}, greatest({i}, 40) - least({i}, 40))"),
        r(f"{c} (id, dt)", "({i}, date '2024-01-01' + {i})"),
        r(f"{c} (id, t)", "({i}, 'v' || {i}::text)"),  # a cast constant: the parse
        r(f"{c} (id, t)", "({i}, 'x{i}' like 'x1%')"),  # a LIKE pattern: the parse
        r(f"{c} (id, n)", "({i}, {i} / ({i} - 3))"),  # 22012 in the row of 3: nothing stored
        r(f"{c} (id, n)", "({i}, 'a' || {i})"),  # 42804: text into numeric
        r(f"{c} (id, n)", "({i}, {i} * 1000000)"),  # 22003: numeric(8,2) overflows
        r(f"{c} (id, g)", "({i}, 9223372036854775000 + {i} * 10)"),  # 22003: bigint overflows, never wraps
        r(f"{c} (id, g)", "({i}, 9223372036854775000 + {i})"),
    ]
    assert all(len(line) > 2048 for line in lines if line.startswith("insert"))
    _play(icegres, real_postgres, "\n".join(lines), ("dd.e",))


def test_a_big_values_list_with_on_conflict_or_returning_means_what_postgresql_reads(
        icegres: IcegresServer, real_postgres: Any) -> None:  # noqa: F811
    """The lexer reads a big VALUES list followed by ON CONFLICT or RETURNING too (ORMs' bulk
    inserts end so); the tail is parsed with the head. Rows, RETURNING rows, tags and refusals
    as PostgreSQL's."""
    def rows(start: int, stop: int, suffix: str = "") -> str:
        return ", ".join(f"({i}, 's{i}{suffix}')" for i in range(start, stop))

    lines = [
        "create table dd.kp (id int primary key, s text)",
        f"insert into dd.kp values {rows(0, 6000)} returning id, s",
        f"insert into dd.kp values {rows(3000, 9000)} on conflict do nothing",
        f"insert into dd.kp values {rows(8000, 14000)} on conflict (id) do nothing returning id",
        f"insert into dd.kp values {rows(13000, 19000, 'u')} on conflict (id) do update set s = excluded.s || '!'",
        f"insert into dd.kp values {rows(19000, 25000)} returning nosuch",  # 42703: nothing inserted
        f"insert into dd.kp values {rows(19000, 25000)}, (19000, 'again') on conflict (id) do update set s = 'x'",
        f"insert into dd.kp values {rows(19000, 25000)} on conflict (s) do nothing",  # 42P10
        f"insert into dd.kp values {rows(0, 6000)};",  # 23505
    ]
    assert all(len(line) > 64 * 1024 for line in lines[1:])
    _play(icegres, real_postgres, "\n".join(lines), ("dd.kp",))


def test_a_writes_target_is_the_table_whatever_a_cte_is_named(
        icegres: IcegresServer, real_postgres: Any) -> None:  # noqa: F811
    """The target of an INSERT, UPDATE, DELETE or MERGE is a relation, never a CTE of the same
    name (which the rest of the statement reads); a CTE that names no table is 42P01 as a target."""
    _play(icegres, real_postgres, """
        set search_path = dd, public
        create table dd.w (i int)
        insert into w values (1), (2)
        with w as (select 1 as i) delete from w where i in (select i from w)
        with w as (select 2 as i) update w set i = 3 where i = (select i from w)
        with w as (select 5 as i) insert into w select i from w
        with w as (select 9 as i) merge into w using w s on false when not matched then insert values (s.i)
        with nosuch as (select 1 as i) delete from nosuch
    """, ("dd.w",))


def test_fractions_assigned_to_integer_columns_round_as_postgresql_rounds_them(
        icegres: IcegresServer, real_postgres: Any) -> None:  # noqa: F811
    """numeric half away from zero, float8 half to even; DataFusion's cast truncates."""
    _play(icegres, real_postgres, """
        create table dd.r (id bigint, n int, b bigint, f double precision, x numeric(6,2))
        insert into dd.r values (1, 15, 15, 2.5, 2.5), (2, -15, 9007199254740993, 3.5, -2.5)
        insert into dd.r values (3, 0.5, 7, -2.5, 0.5), (4, -0.5, 1.15, 1.15, 0.3)
        insert into dd.r select 5, 4.5, -4.5, 0.3, 0.55
        update dd.r set n = n * 1.5
        update dd.r set n = f where id = 1
        update dd.r set n = f * 1 where id = 2
        update dd.r set b = b + 0 where id = 2
        update dd.r set n = x
        update dd.r set b = x * 3
        update dd.r set n = 2.5 where id = 3
        update dd.r set n = -2.5 where id = 2
        update dd.r set b = 1.5e3 where id > 3
        update dd.r set n = 'abc' where id = 99
        update dd.r set n = '7' where id = 1
        update dd.r set n = 1e10 where id = 1
        update dd.r set f = 1.15, x = 1.15 where id = 1
        update dd.r set f = x where id = 3
        update dd.r set n = 1, b = 1 where id = 4
        update dd.r set n = f, b = f where id = 4
        update dd.r set n = -n, b = -n where id = 4
    """, ("dd.r",))


def test_integer_overflow_in_an_update_is_an_error_not_a_wrapped_value(
        icegres: IcegresServer, real_postgres: Any) -> None:  # noqa: F811
    _play(icegres, real_postgres, """
        create table dd.o (id bigint, n int, m int, big bigint, d date, f double precision)
        insert into dd.o values (1, 2147483647, 2, 9223372036854775807, '2024-01-01', 1.5)
        insert into dd.o values (2, 46341, 46341, -9223372036854775808, '2024-02-01', 2)
        update dd.o set n = n + 1 where id = 1
        update dd.o set n = n * m where id = 2
        update dd.o set big = big + 1 where id = 1
        update dd.o set big = big - 1 where id = 2
        update dd.o set big = big * 2 where id = 1
        update dd.o set big = n * m where id = 2
        update dd.o set big = -big where id = 2
        update dd.o set n = n - 1, m = m * 3 + 1 where id = 1
        update dd.o set d = d + 1, big = big - (select count(*) from dd.o) where id = 1
        update dd.o set f = f * 2 + n where id = 1
        update dd.o set m = m + m + m where id = 2
        update dd.o set n = (n + 1) / 2 where id = 2
    """, ("dd.o",))


def test_integer_overflow_in_an_insert_select_is_an_error_not_a_wrapped_value(
        icegres: IcegresServer, real_postgres: Any) -> None:  # noqa: F811
    _play(icegres, real_postgres, """
        create table dd.src (id bigint, a int, b int, big bigint)
        create table dd.dst (id bigint, x bigint, y int)
        insert into dd.src values (1, 46341, 46341, 9223372036854775807), (2, 2, 3, 5), (3, -2147483648, 1, -9223372036854775808)
        insert into dd.dst select id, a * b, a + b from dd.src where id = 2
        insert into dd.dst select id, a * b, 1 from dd.src where id = 1
        insert into dd.dst select id, big + 1, 0 from dd.src where id = 1
        insert into dd.dst select id, big - 1, 0 from dd.src where id = 3
        insert into dd.dst select id, -big, 0 from dd.src where id = 3
        insert into dd.dst select id, (a::bigint) * b, 0 from dd.src where id = 1
        insert into dd.dst select max(id), sum(a) * 2, count(*) from dd.src where id < 3 group by a order by 1 limit 1
        insert into dd.dst select id * 10, x + 1, y from dd.dst where id = 2
        insert into dd.dst select id + 100 as k, a + 1, b from dd.src where id = 2 order by k
        insert into dd.dst select distinct id + 200, 1, 1 from dd.src
    """, ("dd.src", "dd.dst"))


def test_values_rows_may_hold_subqueries(icegres: IcegresServer, real_postgres: Any) -> None:  # noqa: F811
    _play(icegres, real_postgres, """
        create table dd.v (id bigint, n int, s text)
        insert into dd.v values (1, 1, 'a'), (2, 5, 'b')
        insert into dd.v values (13, (select max(n) from dd.v), (select min(s) from dd.v))
        insert into dd.v values (14, (select count(*) from dd.v), 'x'), (15, 2.5, (select max(s) from dd.v))
        insert into dd.v values (16, (select n from dd.v where id = 1), 'y')
        insert into dd.v values (17, (select n from dd.v), 'y')
        insert into dd.v values ((select max(id) + 1 from dd.v), 1, 'z')
    """, ("dd.v",))


def test_relative_date_words_are_read_in_the_sessions_time_zone(
        icegres: IcegresServer, real_postgres: Any) -> None:  # noqa: F811
    """'today', 'tomorrow' and 'yesterday', midnights in the session's TimeZone."""
    _play(icegres, real_postgres, """
        create table dd.w (id bigint, d date, ts timestamp, tz timestamptz)
        set timezone = 'Pacific/Kiritimati'
        insert into dd.w values (1, 'today', 'tomorrow', 'yesterday')
        insert into dd.w values (2, 'yesterday', 'today', 'today')
        set timezone = 'America/Los_Angeles'
        insert into dd.w values (3, 'tomorrow', 'yesterday', 'tomorrow')
    """, ("dd.w",))


def test_timestamptz_text_is_read_in_the_sessions_time_zone(
        icegres: IcegresServer, real_postgres: Any) -> None:  # noqa: F811
    _play(icegres, real_postgres, """
        create table dd.d (id bigint, tz timestamptz, ts timestamp, d date)
        set timezone = 'Europe/Berlin'
        insert into dd.d values (1, '2024-01-01 00:00:00', '2024-01-01 00:00:00', '2024-01-01')
        insert into dd.d values (2, '2024-07-01 12:00:00', null, null)
        insert into dd.d values (3, timestamptz '2024-07-01 12:00:00', timestamp '2024-07-01 12:00:00', null)
        insert into dd.d select 4, '2024-07-01 12:00:00', '2024-07-01 12:00:00', '2024-07-01'
        insert into dd.d values (5, '2024-07-01 12:00:00+00', '2024-07-01 12:00:00+05', '2024-07-01 23:00:00+05')
        insert into dd.d values (6, '2024-03-31 02:30:00', '2024-03-31 02:30:00', null)
        update dd.d set tz = '2024-03-01 10:00:00' where id = 2
        update dd.d set tz = tz + interval '1 day' where id = 3
        select id from dd.d where tz = timestamptz '2024-01-01 00:00:00' order by id
        select id from dd.d where tz < timestamptz '2024-07-01 12:00:00' order by id
        select count(*) from dd.d where tz >= '2024-07-01 10:00:00+00'
        set timezone = '-03:30'
        insert into dd.d values (7, '2024-07-01 12:00:00', null, null)
        set timezone = 'UTC'
        insert into dd.d values (8, '2024-07-01 12:00:00', null, null)
    """, ("dd.d",))


def test_copy_reads_timestamptz_text_in_the_sessions_time_zone(
        icegres: IcegresServer, real_postgres: Any) -> None:  # noqa: F811
    rows = "1\t2024-01-01 00:00:00\n2\t2024-07-01 12:30:00.5\n3\t2024-07-01 12:30:00+00\n"
    dumps = []
    for dsn in (real_postgres.dsn(), icegres.dsn()):
        with psycopg.connect(dsn, autocommit=True) as conn:
            conn.execute("drop table if exists public.copy_tz")
            conn.execute("create table public.copy_tz (id bigint, tz timestamptz)")
            conn.execute("set timezone = 'America/New_York'")
            with conn.cursor().copy("copy public.copy_tz from stdin") as copy:
                copy.write(rows)
            conn.execute("set timezone = 'UTC'")
            dumps.append(conn.execute("select id, tz from public.copy_tz order by id").fetchall())
            conn.execute("drop table public.copy_tz")
    assert dumps[1] == dumps[0]


def test_set_returning_functions_in_from_name_their_column(
        icegres: IcegresServer, real_postgres: Any) -> None:  # noqa: F811
    _play(icegres, real_postgres, """
        create table dd.a (id bigint, v text)
        insert into dd.a select g, 'v' || g from generate_series(1, 5) g
        insert into dd.a select generate_series + 10, 'w' from generate_series(1, 2)
        insert into dd.a select u, 'u' from unnest(array[20, 21]) u
        select g.g from generate_series(1, 3) g
        delete from dd.a where id in (select x from generate_series(1, 3) as t(x))
    """, ("dd.a",))


def test_a_correlated_subquery_that_selects_without_aggregating_is_refused_by_name(
        icegres: IcegresServer) -> None:
    with psycopg.connect(icegres.dsn(), autocommit=True) as conn:
        conn.execute("create schema if not exists dd")
        conn.execute("create table dd.c (id bigint, v text)")
        try:
            conn.execute("insert into dd.c values (1, 'a'), (2, 'b')")
            with pytest.raises(psycopg.errors.FeatureNotSupported, match="aggregate"):
                conn.execute("update dd.c set v = (select v from dd.c c2 where c2.id = dd.c.id + 1)")
            conn.execute("update dd.c set v = (select max(v) from dd.c c2 where c2.id = dd.c.id + 1)")
            assert conn.execute("select id, v from dd.c order by id").fetchall() == [(1, "b"), (2, None)]
        finally:
            conn.execute("drop table dd.c")


def test_transaction_blocks_restore_settings_and_refuse_writes_when_read_only(
        icegres: IcegresServer, real_postgres: Any) -> None:  # noqa: F811
    """SET (and RESET, a SET to the default) inside a block is undone by ROLLBACK, SET LOCAL also
    by COMMIT; READ ONLY (by BEGIN, SET TRANSACTION or the session default) refuses writes with
    25006."""
    _play(icegres, real_postgres, """
        create table dd.x (id bigint, n int)
        begin
        insert into dd.x values (1, 1)
        select 1/0
        select count(*) from dd.x
        rollback
        start transaction isolation level serializable
        insert into dd.x values (2, 2)
        savepoint a
        insert into dd.x values (3, 3)
        rollback to savepoint a
        commit
        set default_transaction_read_only = on
        insert into dd.x values (4, 4)
        begin
        update dd.x set n = 0
        rollback
        begin read write
        insert into dd.x values (5, 5)
        commit
        set default_transaction_read_only = off
        begin
        set transaction read only
        delete from dd.x
        rollback
        begin read only
        create table dd.y (id int)
        rollback
        set session characteristics as transaction read only
        show default_transaction_read_only
        truncate dd.x
        set session characteristics as transaction read write
        begin
        set search_path = dd
        select count(*) from x
        rollback
        show search_path
        begin
        set local search_path = dd
        set application_name = 'kept'
        set local timezone = 'Europe/Berlin'
        show timezone
        commit
        show search_path
        show application_name
        show timezone
        set local statement_timeout = 5
        show statement_timeout
        begin
        reset application_name
        show application_name
        rollback
        show application_name
        set search_path = dd, public
        begin
        reset all
        show search_path
        rollback
        show search_path
        begin
        set local application_name = 'local'
        reset application_name
        commit
        show application_name
    """, ("dd.x",))


def test_a_query_message_of_several_statements_runs_in_one_transaction_as_postgresql_runs_it(
        icegres: IcegresServer, real_postgres: Any) -> None:  # noqa: F811
    """A line with several statements is one simple Query: outside a block its writes are one
    transaction under default_transaction_read_only; a BEGIN in it opens a block that an error
    then leaves failed. And a plain SET to the value a SET LOCAL gave survives COMMIT."""
    _play(icegres, real_postgres, """
        create table dd.q (id bigint)
        insert into dd.q values (1); insert into dd.q values (2); select 1/0
        insert into dd.q values (3); insert into dd.q values (4)
        set default_transaction_read_only = on
        insert into dd.q values (5); insert into dd.q values (6)
        select count(*) from dd.q; insert into dd.q values (7)
        set default_transaction_read_only = off
        begin; insert into dd.q values (8); select 1/0
        select count(*) from dd.q
        commit
        begin; insert into dd.q values (9)
        select count(*) from dd.q
        commit
        begin
        set local timezone = 'Asia/Tokyo'
        set timezone = 'Asia/Tokyo'
        commit
        show timezone
        begin
        set local application_name = 'local'
        set application_name = 'local'
        set local application_name = 'later'
        commit
        show application_name
    """, ("dd.q",))


def test_values_rows_mixing_typed_and_untyped_literals_take_one_type(
        icegres: IcegresServer, real_postgres: Any) -> None:  # noqa: F811
    """PostgreSQL gives an untyped literal the other rows' type; DataFusion calls Date32 and Utf8
    in one VALUES column "inconsistent"."""
    _play(icegres, real_postgres, """
        create table dd.m (id bigint, d date, ts timestamp, b boolean, a int[], s text)
        insert into dd.m values (1, date '2024-01-01', timestamp '2024-01-01 10:00:00', true, array[1], 'x'), (2, '2024-01-02', '2024-01-02 11:00', 't', '{2,3}', 'y')
        insert into dd.m values (4, date '2024-05-05', null, false, array[4], null), (3, '2024-05-06', null, 'yes', null, null)
        insert into dd.m (id, d) values (5, date '2024-01-01'), (6, '2024-01-06')
        insert into dd.m values (7, date '2024-01-01'), (8, '2024-01-08')
        insert into dd.m values (9, date '2024-01-01'), (10, '2024-13-45')
        insert into dd.m values (11, date '2024-01-01', null), (12, '2024-01-08')
    """, ("dd.m",))


def test_comments_are_iceberg_comments_that_pg_catalog_shows(
        icegres: IcegresServer, real_postgres: Any) -> None:  # noqa: F811
    """COMMENT ON TABLE / COLUMN land in the Iceberg metadata (the `comment` property and the
    field's doc, which Spark and Trino read too) and come back through obj_description,
    col_description and pg_description, as psql's \\d+ and catalog browsers ask for them."""
    _play(icegres, real_postgres, """
        create table dd.k (id bigint, "Name" text, v int)
        comment on table dd.k is 'the k table'
        comment on column dd.k."Name" is 'who it''s for'
        comment on column dd.k.v is 'a value'
        comment on column dd.k.nosuch is 'x'
        comment on table dd.nosuch is 'x'
        select obj_description('dd.k'::regclass, 'pg_class'), obj_description('dd.k'::regclass)
        select col_description('dd.k'::regclass, 2), col_description('dd.k'::regclass, 3), col_description('dd.k'::regclass, 1)
        select c.relname, obj_description(c.oid, 'pg_class') from pg_class c join pg_namespace n on n.oid = c.relnamespace where n.nspname = 'dd' order by 1
        select a.attname, col_description(a.attrelid, a.attnum) from pg_attribute a where a.attrelid = 'dd.k'::regclass and a.attnum > 0 order by a.attnum
        select d.objsubid, d.description from pg_description d where d.objoid = 'dd.k'::regclass order by 1
    """, ())
    from icegres.engine.catalog import Lakehouse

    table = Lakehouse.embedded(icegres.data_dir).load_table("dd", "k")
    assert table.properties["comment"] == "the k table"
    assert {f.name: f.doc for f in table.schema().fields} == {"id": None, "Name": "who it's for", "v": "a value"}
    with psycopg.connect(icegres.dsn(), autocommit=True) as conn:
        conn.execute("drop table dd.k")
    _play(icegres, real_postgres, """
        create table dd.k (id bigint, "Name" text, v int)
        comment on column dd.k.v is 'a value'
        comment on table dd.k is 'the k table'
        comment on column dd.k.v is null
        comment on table dd.k is ''
        select obj_description('dd.k'::regclass, 'pg_class'), col_description('dd.k'::regclass, 3)
        select count(*) from pg_description d where d.objoid = 'dd.k'::regclass
    """, ("dd.k",))


def test_timestamptz_columns_are_seen_in_the_sessions_time_zone(
        icegres: IcegresServer, real_postgres: Any) -> None:  # noqa: F811
    """date_trunc, extract, to_char, ::date and comparisons with untyped text of a timestamptz
    column, in a session at another TimeZone than UTC: reads, a transaction, and DML's WHERE."""
    _play(icegres, real_postgres, """
        create table dd.z (id bigint, tz timestamptz, ts timestamp, d date)
        insert into dd.z values (1, '2024-01-01 00:30:00+00', '2024-01-01 00:30:00', '2024-01-01'), (2, '2023-12-31 23:30:00+00', '2023-12-31 23:30:00', '2023-12-31'), (3, '2024-07-01 22:15:00+00', '2024-07-01 22:15:00', '2024-07-01'), (4, null, null, null)
        set timezone = 'Europe/Berlin'
        select id, tz from dd.z order by id
        select id, extract(hour from tz), extract(day from tz), extract(dow from tz) from dd.z order by id
        select id, date_trunc('day', tz), date_trunc('month', tz), date_trunc('hour', tz) from dd.z order by id
        select date_trunc('day', tz) as day, count(*) from dd.z group by 1 order by 1
        select id from dd.z where tz >= '2024-01-01' order by id
        select id from dd.z where tz < '2024-01-01 01:00:00' order by id
        select id from dd.z where tz between '2024-01-01' and '2024-07-02' order by id
        select id from dd.z where tz = '2024-01-01 01:30:00' order by id
        select id from dd.z where tz in ('2024-01-01 01:30:00', '2024-01-01 02:30:00') order by id
        select id from dd.z where tz::date = '2024-01-01' order by id
        select id, to_char(tz, 'YYYY-MM-DD HH24:MI') from dd.z order by id
        select id, tz + interval '1 day' from dd.z order by id
        select max(tz), min(tz) from dd.z
        select a.id, b.id from dd.z a join dd.z b on a.tz < b.tz order by 1, 2
        with c as (select tz from dd.z where id = 1) select date_trunc('day', tz) from c
        update dd.z set d = '2000-01-01' where tz < '2024-01-01 01:00:00'
        delete from dd.z where tz >= '2024-07-01 23:00:00'
        begin
        select id from dd.z where tz >= '2024-01-01' order by id
        update dd.z set ts = '1999-01-01' where tz = '2024-01-01 01:30:00'
        select id, ts from dd.z order by id
        commit
        set timezone = 'America/New_York'
        select id, date_trunc('day', tz), extract(hour from tz) from dd.z order by id
        select id from dd.z where tz >= '2023-12-31 19:00:00' order by id
        insert into dd.z values (5, '2024-03-10 12:00:00', null, null)
        select id from dd.z where date_trunc('day', tz) = '2024-03-10' order by id
        set timezone = 'UTC'
        select id, date_trunc('day', tz), extract(hour from tz) from dd.z order by id
        select id from dd.z where tz >= '2024-01-01' order by id
    """, ("dd.z",))


def test_update_and_delete_return_the_rows_they_changed(
        icegres: IcegresServer, real_postgres: Any) -> None:  # noqa: F811
    """UPDATE ... RETURNING reads the rows as written, DELETE ... RETURNING the rows deleted."""
    _play(icegres, real_postgres, """
        create table dd.rr (id bigint, n int, s text, x numeric(6,2))
        insert into dd.rr values (1, 1, 'a', 1.005), (2, 2, 'b', 2), (3, null, 'c', null)
        update dd.rr set n = n + 100, x = x * 2 where id = 1 returning id, n, s, x
        update dd.rr set s = upper(s) where id = 2 returning *
        update dd.rr set n = 2.5 where id = 3 returning n, n * 2 as twice, s || '!'
        update dd.rr set n = 7 where false returning id
        update dd.rr set n = 1 where id = 1 returning nosuch
        delete from dd.rr where id = 2 returning *
        delete from dd.rr where s = 'none' returning id
        delete from dd.rr where id = 3 returning id, x, upper(s)
        select count(*) from dd.rr
    """, ("dd.rr",))
    with psycopg.connect(icegres.dsn(), autocommit=True) as conn:  # many rows: in any order
        conn.execute("create table dd.rm (id bigint, n int, s text)")
        try:
            conn.execute("insert into dd.rm values (1, 1, 'a'), (4, 4, 'd'), (5, 5, 'e')")
            assert sorted(conn.execute("update dd.rm set n = -n returning id, n").fetchall()) == [
                (1, -1), (4, -4), (5, -5)]
            assert sorted(conn.execute("delete from dd.rm where n < -1 returning s").fetchall()) == [("d",), ("e",)]
            assert conn.execute("select id, n, s from dd.rm").fetchall() == [(1, -1, "a")]
            for _ in range(2):  # extended protocol, a prepared statement, binary rows
                with conn.cursor(binary=True) as cur:
                    cur.execute("update dd.rm set n = n - %s where id = %s returning n, s", (1, 1), prepare=True)
                    last = cur.fetchall()
            assert last == [(-3, "a")]
        finally:
            conn.execute("drop table dd.rm")


def test_insert_on_conflict_skips_or_updates_the_rows_whose_key_exists(
        icegres: IcegresServer, real_postgres: Any) -> None:  # noqa: F811
    _play(icegres, real_postgres, """
        create table dd.u (id bigint primary key, n int, s text)
        create table dd.nokey (id bigint, n int)
        insert into dd.u values (1, 1, 'a'), (2, 2, 'b')
        insert into dd.u values (1, 10, 'x'), (3, 3, 'c') on conflict (id) do nothing
        insert into dd.u values (1, 10, 'x'), (4, 4, 'd') on conflict do nothing
        insert into dd.u values (2, 20, 'y'), (5, 5, 'e') on conflict (id) do update set n = excluded.n, s = excluded.s || '!'
        insert into dd.u values (1, 100, 'z') on conflict (id) do update set n = u.n + excluded.n where u.n < 5
        insert into dd.u values (1, 100, 'z') on conflict (id) do update set n = n + excluded.n where u.n < 5
        insert into dd.u as q values (3, 30, 'w') on conflict (id) do update set n = q.n * 10 returning id, n, s
        insert into dd.u values (6, 6, 'f'), (6, 7, 'g') on conflict (id) do nothing
        insert into dd.u values (7, 7, 'h'), (7, 8, 'i') on conflict (id) do update set n = excluded.n
        insert into dd.u values (8, 8, 'j') on conflict (n) do nothing
        insert into dd.u values (8, 8, 'j') on conflict do update set n = 1
        insert into dd.u values (9, 9, 'k') on conflict on constraint u_pkey do nothing
        insert into dd.u values (9, 9, 'k') on conflict on constraint nope do nothing
        insert into dd.u (id, s) select id + 100, s from dd.u where id < 3 on conflict (id) do nothing
        insert into dd.u (id, s) select id, 'up' from dd.u where id < 3 on conflict (id) do update set s = excluded.s returning id, s
        insert into dd.u values (2, 1, 'x') on conflict (id) do update set id = 50
        insert into dd.u values (2, 1, 'x') on conflict (id) do update set nosuch = 1
        insert into dd.nokey values (1, 1) on conflict do nothing
        begin
        insert into dd.u values (9, 90, 'txn') on conflict (id) do update set n = excluded.n
        insert into dd.u values (9, 91, 'txn') on conflict (id) do update set n = u.n + excluded.n
        select n from dd.u where id = 9
        rollback
        begin
        insert into dd.u values (10, 1, 'new') on conflict (id) do nothing
        insert into dd.u values (10, 2, 'again') on conflict (id) do update set s = excluded.s
        commit
    """, ("dd.u", "dd.nokey"))


def test_a_time_zone_set_inside_a_transaction_is_seen_at_once_and_kept_as_postgresql_keeps_it(
        icegres: IcegresServer, real_postgres: Any) -> None:  # noqa: F811
    _play(icegres, real_postgres, """
        create table dd.tt (id bigint, tz timestamptz)
        insert into dd.tt values (1, '2024-01-01 00:30:00+00')
        begin
        select extract(hour from tz) from dd.tt
        set timezone = 'Asia/Tokyo'
        select extract(hour from tz) from dd.tt
        insert into dd.tt values (2, '2024-01-01 09:00:00')
        select id, extract(hour from tz) from dd.tt order by id
        set local timezone = 'America/New_York'
        select id, extract(hour from tz), date_trunc('day', tz) from dd.tt order by id
        commit
        show timezone
        select id, extract(hour from tz) from dd.tt order by id
        begin
        set timezone = 'Europe/Berlin'
        rollback
        show timezone
    """, ("dd.tt",))


def test_writes_under_with_as_postgresql_runs_them(icegres: IcegresServer, real_postgres: Any) -> None:  # noqa: F811
    """`WITH … INSERT/UPDATE/DELETE/MERGE` (was a query to DataFusion: 0A000 "not implemented"):
    an INSERT's query takes the CTEs, elsewhere each CTE stands where it is named."""
    _play(icegres, real_postgres, """
        create table dd.w (a int, b text)
        create table dd.src (id int, v text)
        insert into dd.src values (1, 'p'), (2, 'q'), (3, 'r')
        with c as (select id, v from dd.src where id < 3) insert into dd.w select id, v from c
        with c(k) as (select id + 10 from dd.src) insert into dd.w (a) with d as (select k * 2 as k from c) select k from d
        with recursive n(x) as (select 1 union all select x + 1 from n where x < 4) insert into dd.w (a) select x from n
        with c as (select 1 as id), d as (select id + 1 as id from c) update dd.w set b = 'u' from d where dd.w.a = d.id
        with c as (select id from dd.src where v = 'r') delete from dd.w where a in (select id from c)
        with c as (select 4 as id, 'm' as v) merge into dd.w using c on dd.w.a = c.id when matched then update set b = c.v
        with c as (select 1) insert into dd.w values (7, 'v')
        with c as (select 1 as id) insert into dd.w select id, 'x' from c returning a, b
        with recursive n(x) as (select 1) update dd.w set b = 'z' where a in (select x from n)
    """, ("dd.w",))


def test_in_subqueries_outside_a_filter_are_three_valued_as_in_postgresql(
        icegres: IcegresServer, real_postgres: Any) -> None:  # noqa: F811
    """`a IN (SELECT …)` in a select list or CASE, and an UPDATE's WHERE (evaluated in a CASE over
    each file's rows): DataFusion plans IN (subquery) only as a filter and refused these with
    0A000; NULL where PostgreSQL answers NULL, so NOT IN over a list holding NULL updates nothing."""
    _play(icegres, real_postgres, """
        create table dd.i (a int, b text)
        create table dd.l (x int)
        create table dd.e (x int)
        insert into dd.i values (1, 'p'), (2, 'q'), (null, 'r'), (4, 's')
        insert into dd.l values (1), (null)
        select a, a in (select x from dd.l), a not in (select x from dd.l), a in (select x from dd.e), a not in (select x from dd.e) from dd.i order by a
        select a, case when a in (select x from dd.l where x > 0) then 'hit' else 'miss' end from dd.i order by a
        update dd.i set b = 'in' where a in (select x from dd.l)
        update dd.i set b = 'not' where a not in (select x from dd.l)
        update dd.i set b = 'not-empty' where a not in (select x from dd.e) and b <> 'in'
        update dd.i set b = b || '!' where a in (select x + 1 from dd.l) or b = 's'
        delete from dd.i where a in (select x from dd.l where x is not null)
    """, ("dd.i",))
