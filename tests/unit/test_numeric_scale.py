"""numeric quotients and averages against PostgreSQL 15 (rewrite/numeric.py): never fewer digits
than PostgreSQL prints, and every digit it prints the same (docs/types.md: scale max(20, s1, s2));
where PostgreSQL's own scale is 20 (quotients between 1e-4 and 1), the same text."""

from __future__ import annotations

from decimal import Decimal
from pathlib import Path
from typing import Any

import psycopg
import pyarrow as pa
import pytest

from tests.support.differential import ours, theirs
from tests.support.fixtures import real_postgres  # noqa: F401  (session fixture)

pytestmark = pytest.mark.unit

_SCHEMA = pa.schema([pa.field("flag", pa.string()), pa.field("qty", pa.decimal128(15, 2)),
                     pa.field("price", pa.decimal128(15, 2)), pa.field("disc", pa.decimal128(15, 2)),
                     pa.field("n", pa.int32()), pa.field("f", pa.float64())])
_ROWS = [("A", "17.00", "21168.23", "0.04", 3, 1.5), ("A", "36.00", "45983.16", "0.09", 7, 2.25),
         ("N", "8.00", "13309.60", "0.10", 2, 0.1), ("N", "28.00", "28955.64", "0.09", 9, 3.0),
         ("N", "24.00", "22824.48", "0.10", 4, 7.5), ("R", "32.00", "49620.16", "0.07", 1, -2.0)]


@pytest.fixture(scope="module")
def qctx(tmp_path_factory: pytest.TempPathFactory) -> Any:
    from icegres.engine.catalog import Lakehouse
    from icegres.engine.lake import Engine, SessionEnv
    from icegres.engine.query import open_session

    lake = Lakehouse.embedded(Path(tmp_path_factory.mktemp("lake")))
    lake.create_namespace_if_missing("num")
    table = lake.catalog.create_table(("num", "items"), schema=_SCHEMA)
    columns = list(zip(*_ROWS, strict=True))
    table.append(pa.table({
        "flag": list(columns[0]), "qty": [Decimal(v) for v in columns[1]],
        "price": [Decimal(v) for v in columns[2]], "disc": [Decimal(v) for v in columns[3]],
        "n": list(columns[4]), "f": list(columns[5])}, schema=_SCHEMA))
    engine = Engine(lake)
    engine.refresh()
    return open_session(engine, SessionEnv("icegres", "icegres", 1, {"search_path": "num"}))


@pytest.fixture(scope="module")
def pg(real_postgres: Any) -> Any:  # noqa: F811
    with psycopg.connect(real_postgres.dsn(), autocommit=True) as conn:
        conn.execute("drop schema if exists num cascade")
        conn.execute("create schema num")
        conn.execute("create table num.items (flag text, qty numeric(15,2), price numeric(15,2), "
                     "disc numeric(15,2), n int, f double precision)")
        for row in _ROWS:
            conn.execute("insert into num.items values (%s, %s, %s, %s, %s, %s)", row)
        conn.execute("set search_path = num")
        yield conn
        conn.execute("drop schema num cascade")


QUERIES = [
    "select 2.00::numeric(15,2) / 3",
    "select 1 / 3::numeric, 10::numeric / 4, 7.0 / 2, 1.0 / 3.0, 7 / 2.0, 100::numeric / 7",
    "select 123456789.12::numeric(15,2) / 7, 2::numeric / 3 * 3",
    "select avg(qty), avg(price), avg(disc) from items",
    "select flag, sum(qty) / count(*), avg(qty) from items group by flag order by flag",
    # TPC-H Q1's aggregates
    "select flag, sum(qty), sum(price), sum(price * (1 - disc)), sum(price * (1 - disc) * (1 + disc)),"
    " avg(qty), avg(price), avg(disc), count(*) from items group by flag order by flag",
    "select qty / n, price / qty from items order by qty",
    "select round(avg(price), 2), round(sum(price) / 3, 4) from items",
]


def _digits_agree(mine: str | None, theirs_: str | None) -> bool:
    if mine is None or theirs_ is None:
        return mine == theirs_
    try:
        expected = Decimal(theirs_)
        got = Decimal(mine)
    except ArithmeticError:
        return mine == theirs_
    if expected.as_tuple().exponent >= 0 and "." not in theirs_:
        return got == expected
    scale = -expected.as_tuple().exponent
    return -got.as_tuple().exponent >= scale and got.quantize(Decimal(1).scaleb(-scale)) == expected


@pytest.mark.parametrize("sql", QUERIES)
def test_numeric_results_carry_every_digit_postgresql_prints(qctx: Any, pg: Any, sql: str) -> None:
    mine, expected = ours(qctx, sql), theirs(pg, sql)
    assert len(mine) == len(expected)
    for got_row, want_row in zip(mine, expected, strict=True):
        assert all(_digits_agree(g, w) for g, w in zip(got_row, want_row, strict=True)), (got_row, want_row)


@pytest.mark.parametrize("sql", [
    "select 2.00::numeric(15,2) / 3",
    "select 1 / 3::numeric, 1.0 / 3.0",
    "select avg(disc) from items",
])
def test_quotients_below_one_print_as_postgresql_prints_them(qctx: Any, pg: Any, sql: str) -> None:
    assert ours(qctx, sql) == theirs(pg, sql)


def test_a_float_operand_keeps_float_division(qctx: Any, pg: Any) -> None:
    sql = "select qty / f from items where f = 1.5"
    assert [float(v) for v in ours(qctx, sql)[0]] == [float(v) for v in theirs(pg, sql)[0]]
