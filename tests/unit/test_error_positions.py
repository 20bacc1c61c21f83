"""errors.py in process: DataFusion's own error messages -> PgError with PostgreSQL's position.

The expected positions are PostgreSQL 15's (tests/e2e/test_error_positions.py checks them against a
real server); here the DataFusion errors are real too, from an in-memory context, so a change in
DataFusion's wording shows up as a failure rather than as positions silently going missing.
"""

from __future__ import annotations

import datafusion
import pytest

from icegres.engine import errors
from icegres.engine.errors import Anchor, Target, from_datafusion, locate, parse_name
from icegres.pg.errors import PgError
from icegres.sql.lexer import Kind, tokenize

pytestmark = pytest.mark.unit


@pytest.fixture(scope="module")
def ctx() -> datafusion.SessionContext:
    ctx = datafusion.SessionContext()
    ctx.sql("create schema demo").collect()
    ctx.sql("create table demo.trips (id bigint, city varchar, fare double)").collect()
    ctx.sql("create table demo.cities (city varchar, country varchar)").collect()
    return ctx


def datafusion_error(ctx: datafusion.SessionContext, sql: str) -> Exception:
    try:
        ctx.sql(sql)
    except Exception as exc:  # DataFusion raises plain Exceptions
        return exc
    raise AssertionError(f"DataFusion accepted {sql!r}")


# sql, SQLSTATE, position, message: all as PostgreSQL 15 sends them
CASES = [
    ("select nope from demo.trips", "42703", 8, 'column "nope" does not exist'),
    ("select id from demo.trips where nope > 1", "42703", 33, 'column "nope" does not exist'),
    ("select NOPE from demo.trips", "42703", 8, 'column "nope" does not exist'),
    ('select "City" from demo.trips', "42703", 8, 'column "City" does not exist'),
    ('select "nope""x" from demo.trips', "42703", 8, 'column "nope"x" does not exist'),
    ('select t."Nope" from demo.trips t', "42703", 8, "column t.Nope does not exist"),
    ("select demo.trips.nope from demo.trips", "42703", 8, "column trips.nope does not exist"),
    ("select 'nope', /* nope */ nope from demo.trips", "42703", 27, 'column "nope" does not exist'),
    ("select '😀é', nope from demo.trips", "42703", 14, 'column "nope" does not exist'),
    ("select 1 as nope, nope from demo.trips", "42703", 19, 'column "nope" does not exist'),
    ("select x.nope from demo.trips x join demo.cities nope on true", "42703", 8, "column x.nope does not exist"),
    ("select city from demo.trips, demo.cities", "42702", 8, 'column reference "city" is ambiguous'),
    ("select nope.* from demo.trips", "42P01", 8, 'missing FROM-clause entry for table "nope"'),
    ("select * from demo.missing", "42P01", 15, 'relation "demo.missing" does not exist'),
    ("select * from missing", "42P01", 15, 'relation "missing" does not exist'),
    ('select * from demo."Missing"', "42P01", 15, 'relation "demo.Missing" does not exist'),
    ("select missing.id from missing", "42P01", 24, 'relation "missing" does not exist'),
    ("select no_such_function(1)", "42883", 8, None),
    ('select "NoFunc"(1)', "42883", 8, None),
    ("select demo.nofunc(id) from demo.trips", "42883", 8, None),
    ("selec 1", "42601", 1, 'syntax error at or near "selec"'),
    ("select id frm demo.trips", "42601", 15, 'syntax error at or near "demo"'),
    ("select\t'é'\n  ,\t1 1", "42601", 18, 'syntax error at or near "1"'),
    ("select from where", "42601", 13, 'syntax error at or near "where"'),
    ("select id from demo.trips where city = 'é' and and", "42601", 48, 'syntax error at or near "and"'),
    ("select 1 from", "42601", 14, "syntax error at end of input"),
    ("select id,\n  city\n  from demo.trips\n  where id >", "42601", 49, "syntax error at end of input"),
    ("select 'abc", "42601", 8, "unterminated quoted string at or near \"'abc\""),
    ('select "abc', "42601", 8, 'unterminated quoted identifier at or near ""abc"'),
]


@pytest.mark.parametrize(("sql", "sqlstate", "position", "message"), CASES)
def test_postgres_position_from_datafusion_error(ctx, sql, sqlstate, position, message):
    err = from_datafusion(datafusion_error(ctx, sql), sql)
    assert (err.sqlstate, err.position) == (sqlstate, position)
    if message is not None:
        assert err.message == message


def test_no_statement_no_position(ctx):
    err = from_datafusion(datafusion_error(ctx, "select nope from demo.trips"))
    assert err.sqlstate == "42703" and err.position is None


def test_parser_coordinates_of_a_rewrite_are_not_used_for_the_original(ctx):
    # DataFusion parsed some other text: its line and column say nothing about this one.
    exc = datafusion_error(ctx, "select id frm demo.trips")
    assert from_datafusion(exc, "select  id  frm demo.trips", verbatim=False).position is None
    # Names are still found in the client's text.
    exc = datafusion_error(ctx, "select nope from demo.trips")
    assert from_datafusion(exc, "select 1, nope from trips", verbatim=False).position == 11


def test_a_name_not_in_the_statement_gets_no_position(ctx):
    exc = datafusion_error(ctx, "select nope from demo.trips")
    assert from_datafusion(exc, "select other from demo.trips").position is None


def test_pg_error_passes_through_untouched():
    err = PgError("0A000", "not yet", position=3)
    assert from_datafusion(err, "select 1") is err and err.position == 3


def test_syntax_error_keeps_datafusions_explanation_as_detail(ctx):
    err = from_datafusion(datafusion_error(ctx, "select (1 + 2 from demo.trips"), "select (1 + 2 from demo.trips")
    assert (err.message, err.position) == ('syntax error at or near "from"', 15)
    assert err.detail == "Expected: ), found: from"


# --------------------------------------------------------------------------------------------------
# The pieces


def test_tokens_honour_quotes_comments_and_dollar_quotes():
    sql = "select E'a\\'b', U&\"x\", 'it''s', $t$ 'no' $t$, $1, /* a /* nested */ c */ \"Q\"\"q\".Id -- end"
    tokens = [(t.kind, t.value) for t in tokenize(sql)]
    assert tokens == [
        (Kind.NAME, "select"), (Kind.STRING, "a'b"), (Kind.OP, ","), (Kind.QUOTED_NAME, "x"),
        (Kind.OP, ","), (Kind.STRING, "it's"), (Kind.OP, ","), (Kind.STRING, "$t$ 'no' $t$"),
        (Kind.OP, ","), (Kind.PARAM, "$1"), (Kind.OP, ","), (Kind.QUOTED_NAME, 'Q"q'),
        (Kind.OP, "."), (Kind.NAME, "id"),
    ]


@pytest.mark.parametrize(("sql", "start"), [
    ("select 'abc", 7), ('select "a""b', 7), ("select 1 /* a /* b */", 9), ("select $x$ abc $y$", 7),
])
def test_unterminated_tokens_run_to_the_end(sql, start):
    last = tokenize(sql)[-1]
    assert (last.kind, last.start) == (Kind.UNTERMINATED, start)


@pytest.mark.parametrize(("text", "parts"), [
    ("nope", ("nope",)), ("t.nope", ("t", "nope")), ('t."Nope"', ("t", "Nope")),
    ('"a.b"."c""d"', ("a.b", 'c"d')), ("demo.trips.id", ("demo", "trips", "id")),
])
def test_parse_name(text, parts):
    assert parse_name(text) == parts


@pytest.mark.parametrize(("sql", "target", "position"), [
    # a function name is a column only when not called
    ("select nope(1), nope from t", Target(Anchor.COLUMN, ("nope",)), 17),
    ("select nope, nope(1) from t", Target(Anchor.FUNCTION, ("nope",)), 14),
    # a table is found in FROM before a column of the same name
    ("select missing from missing", Target(Anchor.TABLE, ("public", "missing")), 21),
    ("select 1 from a.missing, missing", Target(Anchor.TABLE, ("public", "missing")), 26),
    # the parser's line and column, counted in characters
    ("select 1\n  from x y z", Target(Anchor.LINE_COLUMN, line=2, column=12), 21),
    ("select 1", Target(Anchor.LINE_COLUMN, line=3, column=1), None),
    ("select 1 +  ", Target(Anchor.END), 13),
])
def test_locate(sql, target, position):
    assert locate(sql, target) == position


def test_quoted_reserved_word_is_a_name_not_a_syntax_error():
    assert errors._keyword_misread_as_name(tokenize('select "where" from t'), ("where",)) is None
