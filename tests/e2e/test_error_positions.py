"""Error positions (ErrorResponse 'P') against a real PostgreSQL 15, statement by statement.

Each statement runs on PostgreSQL (tables shaped like the seeded demo lakehouse) and on icegres;
the SQLSTATE and the 1-based character position must agree. Where icegres cannot agree yet, KNOWN
records what each side sends and why, so the difference stays deliberate: if either side changes,
the test says so.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import psycopg
import pytest

from tests.support.fixtures import real_postgres  # noqa: F401  (session fixture)
from tests.support.icegres_server import running_icegres, seed_data_dir

pytestmark = pytest.mark.e2e

_PG_SCHEMA = """
create schema demo;
create table demo.trips (
    id bigint not null, city text, fare double precision, distance double precision,
    pickup_ts timestamptz, passengers integer, vendor text, paid boolean);
create table demo.cities (city text not null, country text, population bigint);
"""

# Must agree exactly: SQLSTATE and position.
CORPUS = (
    # unknown columns: select list, WHERE, ORDER BY, GROUP BY, inside calls, qualified, quoted
    "select nope from demo.trips",
    "select id, nope from demo.trips",
    "select id from demo.trips where nope > 1",
    "select id from demo.trips order by nope",
    "select city, count(*) from demo.trips group by nope",
    "select sum(nope) from demo.trips",
    "select upper(nope) from demo.trips",
    "select NOPE from demo.trips",
    'select "City" from demo.trips',
    'select "nope""x" from demo.trips',
    "select t.nope from demo.trips t",
    'select t."Nope" from demo.trips t',
    "select demo.trips.nope from demo.trips",
    "select id from demo.trips t join demo.cities c on t.city = c.nope",
    "select id from (select id from demo.trips) s where s.nope = 1",
    "with x as (select id from demo.trips) select nope from x",
    "select * from demo.trips where id in (select nope from demo.cities)",
    "select * from demo.trips t where exists (select 1 from demo.cities c where c.city = t.nope)",
    "select count(*) filter (where nope) from demo.trips",
    "select 1 as nope, nope from demo.trips",
    "select x.nope from demo.trips x join demo.cities nope on true",
    # the name also appears in literals and comments, which must not count
    "select 'nope', nope from demo.trips",
    "select $$nope$$, nope from demo.trips",
    # a parameter the simple Query protocol has no value for
    "select $1",
    "select id from demo.trips where id = 1 + $2",
    "select /* nope */ nope from demo.trips",
    "select -- nope\n nope from demo.trips",
    # characters, not bytes; tabs and newlines
    "select 'é' as x, nope from demo.trips",
    "select '😀', nope from demo.trips",
    "select\tid\tfrom\tdemo.trips\twhere\tnope\t=\t1",
    "select id\nfrom demo.trips\nwhere\n  fare > 1 and nope = 2",
    # ambiguous columns, unknown qualifiers
    "select city from demo.trips, demo.cities",
    "select t.* from demo.trips t, demo.cities c where city = 'x'",
    "select nope.* from demo.trips",
    # unknown relations
    "select * from demo.missing",
    "select * from missing",
    'select * from "Missing"',
    'select * from demo."Missing"',
    "select * from nodb.missing",
    "select missing.id from missing",
    "select missing from missing",
    "select id from demo.trips join demo.nothere using (city)",
    # unknown functions
    "select no_such_function(1)",
    "select no_such_function(id) from demo.trips",
    "select nope(1, 2) from demo.trips",
    'select "NoFunc"(1)',
    "select NoFunc(1)",
    "select demo.nofunc(1)",
    "select pg_catalog.nofunc(1)",
    # syntax errors at a token, and at end of input
    "selec 1",
    "select id frm demo.trips",
    "select id from demo.trips wher id = 1",
    "select (1 + 2 from demo.trips",
    "select id from demo.trips where id = = 1",
    "select from where",
    "select id from demo.trips where city = 'é' and and",
    "select 1 from",
    "select 1 +",
    "select id from demo.trips where",
    "select * from demo.trips limit",
    "select id from demo.trips group by",
    "select id,\n  city\n  from demo.trips\n  where id >",
    "select\t'é'\n  ,\t1 1",
    # unterminated tokens (DataFusion's TokenizerError, placed by our own scan)
    "select 'abc",
    'select "abc',
    "select 1, 'x', \"abc",
    # sqlparser cannot tokenize E'..\'' but the rewrite path plans it; the name is still found
    "select e'nope\\'', nope from demo.trips",
    # leading whitespace and comments: the session adds the statement's offset in the message
    "   select nope from demo.trips",
    "-- a comment\nselect nope from demo.trips",
    "/* c */ select nope from demo.trips",
)

# statement -> (what icegres sends: (SQLSTATE, position), what PostgreSQL sends, why they differ)
KNOWN: dict[str, tuple[tuple[str, int | None], tuple[str, int | None], str]] = {
    # The session strips trailing whitespace, so "end of input" is one past the stripped text.
    "select 1 from  ": (("42601", 14), ("42601", 16), "trailing whitespace stripped by the session"),
    # DataFusion's parser gives up at a different token than PostgreSQL's grammar.
    "select id from demo.trips order id": (("42601", 27), ("42601", 33), "sqlparser rejects ORDER, PG the token after it"),
    # DataFusion accepts what PostgreSQL rejects, or plans it differently.
    "select id,, city from demo.trips": ((None, None), ("42601", 11), "DataFusion accepts an empty select item"),
    "select nope.id from demo.trips t": (
        ("42703", 8), ("42P01", 8),
        "DataFusion says no field nope.id; PG says missing FROM-clause entry (same position)"),
    "select * from demo.trips t where exists (select 1 from demo.cities c where c.city = x.city)": (
        ("42703", 85), ("42P01", 85), "as above, inside a subquery"),
    "select city from demo.trips t join demo.cities c using (nope)": (
        ("42703", 57), ("42703", None), "PG sends no position for USING columns"),
    # Type errors: DataFusion's messages do not say which literal or operator failed.
    "select 1 + 'abc'": (("42804", None), ("22P02", 12), "DataFusion coerces types, PG parses the literal"),
    "select abs('x')": (("42804", None), ("22P02", 12), "no function signature position from DataFusion"),
    "select id from demo.trips limit 'a'": (("42804", None), ("22P02", 33), "type_coercion without a location"),
    # Casts fail while executing, not planning: positions are given only to planning errors.
    "select 'x'::int": (("22P02", None), ("22P02", 8), "cast fails in execution, after plan()"),
    "select cast('x' as int)": (("22P02", None), ("22P02", 13), "as above"),
}

# PostgreSQL counts positions from the start of the whole Query message; the session splits it, so
# it adds the failing statement's offset in the message.
MULTI = (
    ("select 1; select nope from demo.trips", "select nope from demo.trips"),
    ("select 1;\n  select * from missing", "select * from missing"),
    ("select 1; /* hi */ select no_such_function(1)", "select no_such_function(1)"),
)


def _error(conn: psycopg.Connection, sql: str, params: Any = None) -> tuple[str | None, int | None]:
    try:
        conn.execute(sql, params).fetchall()
    except psycopg.Error as err:
        pos = err.diag.statement_position
        return err.diag.sqlstate, None if pos is None else int(pos)
    return None, None


@pytest.fixture(scope="module")
def pg(real_postgres) -> Iterator[psycopg.Connection]:  # noqa: F811
    with psycopg.connect(real_postgres.dsn(), autocommit=True) as conn:
        conn.execute(_PG_SCHEMA)
        yield conn


@pytest.fixture(scope="module")
def icegres(tmp_path_factory: pytest.TempPathFactory) -> Iterator[psycopg.Connection]:
    # Positions do not depend on the data: a small lakehouse of the demo shape is enough.
    data_dir = tmp_path_factory.mktemp("positions") / "data"
    seed_data_dir(data_dir, rows=1000)
    with running_icegres(data_dir) as srv, psycopg.connect(srv.dsn(), autocommit=True) as conn:
        yield conn


@pytest.mark.parametrize("sql", CORPUS)
def test_position_matches_postgres(pg, icegres, sql):
    expected = _error(pg, sql)
    assert expected[0] is not None, f"PostgreSQL accepted {sql!r}: not an error case"
    assert _error(icegres, sql) == expected


@pytest.mark.parametrize("sql", list(KNOWN))
def test_known_difference(pg, icegres, sql):
    ours, theirs, _why = KNOWN[sql]
    assert _error(pg, sql) == theirs
    assert _error(icegres, sql) == ours


@pytest.mark.parametrize(("message", "statement"), MULTI)
def test_multi_statement_offset_is_the_statements_place_in_the_message(pg, icegres, message, statement):
    theirs, ours = _error(pg, message), _error(icegres, message)
    assert theirs[0] == ours[0]
    assert theirs[1] is not None and ours[1] is not None
    assert theirs[1] == ours[1]
    assert ours[1] > message.index(statement)


@pytest.mark.parametrize("sql", [
    "select nope from demo.trips where id = %s",
    "select id from demo.trips where id = %s and nope = 1",
    "select * from demo.missing where id = %s",
    "select no_such_function(%s)",
])
def test_extended_protocol_positions_match(pg, icegres, sql):
    # Parameters make psycopg use Parse/Bind: the position counts in the Parse text ($1, not %s).
    expected = _error(pg, sql, (1,))
    assert expected[1] is not None
    assert _error(icegres, sql, (1,)) == expected
