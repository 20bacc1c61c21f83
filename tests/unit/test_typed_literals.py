"""PostgreSQL's typed literals as DataFusion must read them (icegres/engine/rewrite/literals.py), and the
assignment casts of INSERT / UPDATE values into Iceberg columns (assign.cast), checked against a
real PostgreSQL 15 where the answer is PostgreSQL's to give."""

from __future__ import annotations

import uuid
from collections.abc import Iterator
from decimal import Decimal as D
from typing import Any

import psycopg
import pyarrow as pa
import pytest
import sqlglot.expressions as exp

from icegres.engine import assign
from icegres.engine.catalog import Lakehouse
from icegres.engine.lake import Engine, SessionEnv, session_config
from icegres.engine.query import open_session
from icegres.engine.rewrite import to_sql
from icegres.pg.errors import PgError
from icegres.pg.types import pg_type_for_arrow
from icegres.sql.parse import parse
from icegres.sql.statement import query
from tests.support.fixtures import real_postgres  # noqa: F401  (session fixture)

pytestmark = pytest.mark.unit


def _datafusion(sql: str) -> pa.Table:
    from datafusion import SessionContext

    return SessionContext(session_config()).sql(sql).to_arrow_table()


def _insert_source(sql: str) -> str:
    """What dml.py hands DataFusion for an INSERT's rows."""
    tree = parse(sql)
    assert isinstance(tree, exp.Insert)
    return to_sql(tree.expression)


def _update_values(sql: str) -> list[str]:
    """What dml.py hands DataFusion for each UPDATE SET value."""
    tree = parse(sql)
    assert isinstance(tree, exp.Update)
    return [to_sql(a.expression) for a in tree.expressions]


# --- numeric literals ---------------------------------------------------------------------------


@pytest.mark.parametrize(("literal", "value"), [
    ("1234567890123456789.0123456789", D("1234567890123456789.0123456789")),
    ("-9999999999999999999999999999.9999999999", D("-9999999999999999999999999999.9999999999")),
    ("123456789.1", D("123456789.1")),
    ("1.50", D("1.50")),
    ("1e3", D("1000")),
    ("1.5e-3", D("0.0015")),
    ("0.000", D("0.000")),
    ("12345678901234567890123", D("12345678901234567890123")),
    ("123456789012345678901234567890123456789012.5", D("123456789012345678901234567890123456789012.5")),
])
def test_inserted_numeric_literals_are_exact(literal: str, value: D) -> None:
    source = _insert_source(f"insert into t (n) values ({literal})")
    assert source.startswith("VALUES (CAST(")
    [got] = _datafusion(f"select * from ({source}) v").column(0).to_pylist()
    assert got == value and got.as_tuple().exponent == min(value.as_tuple().exponent, 0)


def test_insert_select_projections_are_exact_but_not_their_arithmetic() -> None:
    source = _insert_source("insert into t select 0.1 as a, fare * 1.1, 7 from s")
    assert source == "SELECT CAST('0.1' AS DECIMAL(1, 1)) AS a, fare * 1.1, 7 FROM s"


@pytest.mark.parametrize("literal", ["7", "-9223372036854775808", "1e400", "1e-400"])
def test_literals_datafusion_reads_exactly_or_cannot_hold_as_decimal_are_left(literal: str) -> None:
    assert _insert_source(f"insert into t values ({literal})") == f"VALUES ({literal})"


def test_update_values_change_only_where_float64_loses_digits() -> None:
    # The SET value meets the column in `CASE WHEN hit THEN value ELSE column END`: a decimal
    # there would turn a double column into a decimal, so only literals float64 cannot carry
    # change, to the widest decimal.
    assert _update_values("update t set n = 1234567890123456789.0123456789, d = 0.30000000000000004, "
                          "i = 3, w = 12345678901234567890") == [
        "CAST('1234567890123456789.0123456789' AS DECIMAL(38, 10))", "0.30000000000000004", "3",
        "CAST('12345678901234567890' AS DECIMAL(38, 0))"]


def test_numeric_literals_outside_assignments_stay_float() -> None:
    # `fare > 0.5` as a decimal comparison would make DataFusion cast every fare to decimal.
    sql = "select 1.5, fare * 1.1 from t where fare > 0.5 and n = 1234567890123456789.0123456789"
    assert to_sql(parse(sql)) == sql.replace("select", "SELECT").replace(
        " from", " FROM").replace(" where", " WHERE").replace(" and", " AND")
    tree = parse("update t set n = 1 where fare > 0.5")
    assert to_sql(tree.args["where"].this) == "fare > 0.5"


def test_to_sql_leaves_its_tree_untouched() -> None:
    tree = parse("insert into t values (1.5, '\\x00'::bytea)")
    before = tree.sql()
    to_sql(tree.expression)
    assert tree.sql() == before


# --- bytea and uuid -----------------------------------------------------------------------------


@pytest.mark.parametrize(("literal", "value"), [
    ("'\\x00615c'", b"\x00a\\"),
    ("'\\xDEAD BEEF'", b"\xde\xad\xbe\xef"),
    ("'\\x'", b""),
    ("''", b""),
    ("'a\\\\b\\001\\377'", b"a\\b\x01\xff"),
    ("'plain'", b"plain"),
])
def test_bytea_casts_decode_like_byteain(literal: str, value: bytes, real_postgres: Any) -> None:  # noqa: F811
    with psycopg.connect(real_postgres.dsn(), autocommit=True) as pg:
        assert pg.execute(f"select {literal}::bytea").fetchone() == (value,)
    sql = to_sql(parse(f"select {literal}::bytea as b"))
    assert _datafusion(sql).column(0).to_pylist() == [value]
    assert _datafusion(f"select * from ({_insert_source(f'insert into t values ({literal}::bytea)')}) v"
                       ).column(0).to_pylist() == [value]


@pytest.mark.parametrize(("literal", "sqlstate"), [("'\\xzz'", "22023"), ("'\\x0'", "22023"), ("'a\\9'", "22P02")])
def test_bad_bytea_literals_fail_as_in_postgres(literal: str, sqlstate: str, real_postgres: Any) -> None:  # noqa: F811
    with psycopg.connect(real_postgres.dsn(), autocommit=True) as pg, pytest.raises(psycopg.Error) as theirs:
        pg.execute(f"select {literal}::bytea")
    assert theirs.value.sqlstate == sqlstate
    with pytest.raises(PgError) as ours:
        to_sql(parse(f"select {literal}::bytea"))
    assert ours.value.sqlstate == sqlstate


def test_uuid_casts_are_fixed_size_binary_announced_as_uuid() -> None:
    text = "a0eebc99-9c0b-4ef8-bb6d-6bb9bd380a11"
    sql = to_sql(parse(f"select '{{{text.upper()}}}'::uuid as u"))
    table = _datafusion(sql)
    assert table.column(0).to_pylist() == [uuid.UUID(text).bytes]
    assert pg_type_for_arrow(table.schema.field(0).type).oid == 2950
    with pytest.raises(PgError) as err:
        to_sql(parse("select 'abc'::uuid"))
    assert err.value.sqlstate == "22P02"


# --- through the engine -------------------------------------------------------------------------


@pytest.fixture
def session(tmp_path) -> Iterator[Any]:
    lake = Lakehouse.embedded(tmp_path)
    lake.create_namespace_if_missing("demo")
    engine = Engine(lake)
    engine.refresh()
    yield open_session(engine, SessionEnv("icegres", "icegres", 1, {"search_path": "demo"}))


def test_uuid_cast_plans_through_the_rewrite_path(session: Any) -> None:
    df = session.plan(query("select 'a0eebc99-9c0b-4ef8-bb6d-6bb9bd380a11'::uuid as u")).df
    assert df.to_pydict() == {"u": [uuid.UUID("a0eebc99-9c0b-4ef8-bb6d-6bb9bd380a11").bytes]}
    assert pg_type_for_arrow(df.schema().field(0).type).oid == 2950


def test_bytea_cast_on_the_rewrite_path(session: Any) -> None:
    assert session.plan(query("select '\\xdead'::bytea as b, current_user as u")).df.to_pydict()["b"] == [b"\xde\xad"]


def test_bytea_cast_on_the_direct_path(session: Any) -> None:
    assert session.plan(query("select '\\xdead'::bytea as b")).df.to_pydict()["b"] == [b"\xde\xad"]


# --- assignment casts (assign.cast), as PostgreSQL does them --------------------------------------


ASSIGNMENTS = [
    # (value, its Arrow type, PostgreSQL type of the value, column's Arrow type, column's type)
    (D("3.7"), pa.decimal128(2, 1), "numeric", pa.int32(), "int"),
    (D("2.5"), pa.decimal128(2, 1), "numeric", pa.int32(), "int"),
    (D("-2.5"), pa.decimal128(2, 1), "numeric", pa.int64(), "bigint"),
    (2.5, pa.float64(), "float8", pa.int32(), "int"),
    (3.5, pa.float64(), "float8", pa.int64(), "bigint"),
    (-2.5, pa.float64(), "float8", pa.int64(), "bigint"),
    (D("1.005"), pa.decimal128(4, 3), "numeric", pa.decimal128(9, 2), "numeric(9,2)"),
    (D("-1.005"), pa.decimal128(4, 3), "numeric", pa.decimal128(9, 2), "numeric(9,2)"),
    (123456789.1, pa.float64(), "float8", pa.decimal128(38, 10), "numeric(38,10)"),
    (0.1, pa.float64(), "float8", pa.decimal128(38, 10), "numeric(38,10)"),
    (D("1234567890123456789.0123456789"), pa.decimal128(29, 10), "numeric", pa.decimal128(38, 10), "numeric(38,10)"),
    (D("1.5"), pa.decimal128(2, 1), "numeric", pa.float64(), "float8"),
]


@pytest.fixture
def pg(real_postgres: Any) -> Iterator[psycopg.Connection]:  # noqa: F811
    with psycopg.connect(real_postgres.dsn(), autocommit=True) as conn:
        yield conn


@pytest.mark.parametrize(("value", "src", "src_pg", "to", "to_pg"), ASSIGNMENTS)
def test_assignment_casts_round_like_postgres(pg: psycopg.Connection, value: Any, src: pa.DataType, src_pg: str,
                                              to: pa.DataType, to_pg: str) -> None:
    pg.execute("drop table if exists a")
    pg.execute(f"create temp table a (c {to_pg})")
    pg.execute(f"insert into a values (%s::{src_pg})", (value,))
    [(theirs,)] = pg.execute("select c from a").fetchall()
    [ours] = assign.cast(pa.chunked_array([pa.array([value], src)]), to).to_pylist()
    assert ours == theirs and type(ours) is type(theirs)


@pytest.mark.parametrize(("value", "src", "src_pg", "to", "to_pg"), [
    (D("3000000000.5"), pa.decimal128(11, 1), "numeric", pa.int32(), "int"),
    (1e30, pa.float64(), "float8", pa.int64(), "bigint"),
    (D("9.999"), pa.decimal128(4, 3), "numeric", pa.decimal128(3, 2), "numeric(3,2)"),
    (1e30, pa.float64(), "float8", pa.decimal128(38, 10), "numeric(38,10)"),
])
def test_assignments_that_do_not_fit_are_22003(pg: psycopg.Connection, value: Any, src: pa.DataType, src_pg: str,
                                               to: pa.DataType, to_pg: str) -> None:
    pg.execute("drop table if exists a")
    pg.execute(f"create temp table a (c {to_pg})")
    with pytest.raises(psycopg.Error) as theirs:
        pg.execute(f"insert into a values (%s::{src_pg})", (value,))
    column = pa.chunked_array([pa.array([value], src)])
    with pytest.raises((pa.ArrowInvalid, pa.ArrowNotImplementedError)) as exc:
        assign.cast(column, to)
    assert assign._cast_error(exc.value, pa.field("c", to), src).sqlstate == theirs.value.sqlstate == "22003"
