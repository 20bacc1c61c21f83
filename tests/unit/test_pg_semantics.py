"""Statements DataFusion ran, but not as PostgreSQL runs them, found by a differential run
against PostgreSQL 15: each must now give PostgreSQL's rows (rewrite.names.postgres_semantics, the
typed literals, set-returning functions). Checked against the session's real PostgreSQL."""

from __future__ import annotations

from typing import Any

import psycopg
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from icegres.engine.similar_to import similar_to_regex
from icegres.pg.errors import PgError
from tests.support.differential import engine_session, ours, theirs
from tests.support.fixtures import real_postgres  # noqa: F401  (session fixture)

pytestmark = pytest.mark.unit


@pytest.fixture(scope="module")
def qctx(tmp_path_factory: pytest.TempPathFactory) -> Any:
    return engine_session(tmp_path_factory.mktemp("lake"))


def _same(a: list[tuple[str | None, ...]]) -> list[tuple[str | None, ...]]:
    """Rows as PostgreSQL's Python values print them, where only the type differs: numeric
    seconds print their six decimals, and a timestamptz its UTC offset."""
    out = []
    for row in a:
        out.append(tuple(None if v is None else v.replace("+00:00", "").rstrip("0").rstrip(".")
                         if any(c.isdigit() for c in v) and "." in v else v for v in row))
    return out


@pytest.mark.parametrize("sql", [
    # Typed literals to the minute: DataFusion planned them, then failed to parse them.
    "select timestamp '2024-01-01 10:00' + interval '90 minutes'",
    "select '2024-01-01 10:00'::timestamptz",
    "select time '10:30'",
    "select timestamp '2024-01-01T09:05'",
    "select count(*) from t where timestamp '2024-01-01 10:00' < timestamp '2024-01-01 10:00:01'",
    # generate_series in a select list: rows, not one list.
    "select generate_series(1, 3)",
    "select generate_series(1, 7, 3) as n, 'x' as tag",
    "select * from generate_series(1, 10, 3)",
    "select sum(n) from generate_series(1, 4) g(n)",
    # extract(second ...) with its fraction.
    "select extract(second from timestamp '2024-05-08 10:34:56.5')",
    "select date_part('second', timestamp '2024-05-08 10:34:56.25'), extract(SECOND from time '10:34:56.125')",
    "select extract(year from date '2024-05-08'), extract(minute from timestamp '2024-05-08 10:34:56')",
    # SIMILAR TO as SQL's anchored regular expression.
    "select 'abc' similar to 'a%', 'abc' similar to 'b%', 'a.c' similar to 'a.c', 'abc' similar to 'a.c'",
    "select 'abc' similar to '(a|x)_c', 'x' similar to '[a-z]', 'a_b' similar to 'a#_b' escape '#'",
    "select 'ab' similar to 'a', 'aaa' similar to 'a{2,3}', 'aa' similar to 'a+', 'abc' not similar to 'a%'",
    # array_remove removes every match.
    "select array_remove(array[1, 2, 1], 1)",
    # FETCH FIRST / NEXT.
    "select x from (values (1), (2), (3)) v(x) order by x fetch first 2 rows only",
    "select x from (values (1), (2), (3)) v(x) order by x offset 1 rows fetch next 1 row only",
    # EXISTS in a select list: planned as sent, it failed only when DataFusion planned it physically.
    "select exists (select 1)",
    "select exists (select 1 from t where id = 5), not exists (select 1 from t where id = 2)",
    # to_date / to_timestamp with PostgreSQL's templates.
    "select to_date('2024-05-08', 'YYYY-MM-DD'), to_date('08/05/2024', 'DD/MM/YYYY')",
    "select to_timestamp('2024-05-08 10:34', 'YYYY-MM-DD HH24:MI')",
    "select to_timestamp(86400)",
    # regexp_split_to_table / _array, which DataFusion lacks (pgcli's casing() splits so), with
    # PostgreSQL's rule for empty matches.
    r"select regexp_split_to_table('the quick,  brown fox', '\W+')",
    r"select * from regexp_split_to_table('a1b22c', '\d+') w",
    "select w, count(*) from (select regexp_split_to_table('a b a', ' ') as w) s group by w order by w",
    "select regexp_split_to_array(',a,', ','), regexp_split_to_array('abc', ''), regexp_split_to_array('', 'x')",
    "select regexp_split_to_array('AxBXc', 'x', 'i'), regexp_split_to_array('a b', ' *')",
    # The computed columns of a CTE or a derived table have PostgreSQL's names for the query
    # around them (pgcli's casing(): `COUNT(1)` read as Count, `ROW_NUMBER() OVER ...` as Row_Number).
    "with w as (select id, count(1) from t group by id) select id, count from w order by count desc, id",
    "select row_number from (select row_number() over (order by id) from t) s order by 1",
])
def test_statements_datafusion_ran_otherwise_give_postgresqls_rows(qctx: Any, real_postgres: Any, sql: str) -> None:  # noqa: F811
    with psycopg.connect(real_postgres.dsn(), autocommit=True) as pg:
        pg.execute("create temp table t (id bigint)")
        pg.execute("insert into t values (1), (2)")
        expected = theirs(pg, sql)
    assert _same(ours(qctx, sql)) == _same(expected)


def test_fetch_with_ties_is_refused_not_cut_short(qctx: Any) -> None:
    with pytest.raises(PgError) as caught:
        ours(qctx, "select x from (values (1), (1), (2)) v(x) order by x fetch first 1 rows with ties")
    assert caught.value.sqlstate == "0A000"


_SIMILAR_PIECES = ["a", "b", "%", "_", ".", "^", "$", "|", "(", ")", "*", "+", "?", "{2}", "[ab]", "[^a]",
                   "#", "\\", "x", "d", "s", "1", " "]


@settings(max_examples=200, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(pattern=st.lists(st.sampled_from(_SIMILAR_PIECES), min_size=1, max_size=5).map("".join),
       text=st.text(st.sampled_from("ab.^$x#\\_% 1"), max_size=5), escape=st.sampled_from([None, "#"]))
def test_similar_to_matches_what_postgresql_matches(qctx: Any, real_postgres: Any,  # noqa: F811
                                                    pattern: str, text: str, escape: str | None) -> None:
    def quote(s: str) -> str:
        return "'" + s.replace("'", "''") + "'"

    sql = f"select {quote(text)} similar to {quote(pattern)}" + (f" escape {quote(escape)}" if escape else "")
    with psycopg.connect(real_postgres.dsn(), autocommit=True) as pg:
        try:
            expected = theirs(pg, sql)
        except psycopg.Error:
            return  # an invalid regular expression in PostgreSQL: not what this checks
    try:
        got = ours(qctx, sql)
    except PgError as exc:  # an escaped letter Rust's regex reads otherwise (\b, \y, ...)
        assert exc.sqlstate == "0A000" and "escape of" in exc.message, (sql, exc.message)
        return
    assert got == expected, (sql, similar_to_regex(pattern, escape or "\\"))


def test_a_statement_that_fails_only_when_it_runs_takes_the_rewrite_path_from_then_on(qctx: Any) -> None:
    sql = "select exists (select 1 from t where id = 1) as found"
    assert ours(qctx, sql) == [("True",)]
    route = qctx.cache.routes[(sql, tuple(qctx.env.search_path))]
    assert route != sql and "count(*)" in route  # the rewrite's spelling, kept for the next run
    assert ours(qctx, sql) == [("True",)]


@pytest.mark.parametrize("sql", [
    "select regexp_split_to_array('a', 'x', 'z')",
    "select regexp_split_to_array('a', 'x', 'g')",
    "select regexp_split_to_array('a', '(')",
])
def test_a_function_of_ours_refuses_with_postgresqls_sqlstate(qctx: Any, real_postgres: Any, sql: str) -> None:  # noqa: F811
    from icegres.engine.errors import from_datafusion

    with psycopg.connect(real_postgres.dsn(), autocommit=True) as pg, pytest.raises(psycopg.Error) as expected:
        pg.execute(sql)
    with pytest.raises(Exception) as got:
        ours(qctx, sql)
    assert from_datafusion(got.value, sql).sqlstate == expected.value.sqlstate
