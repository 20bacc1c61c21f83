"""checked_arith: which `+ - *` of an UPDATE's value are widened, and how."""

from __future__ import annotations

import pyarrow as pa
import pytest
import sqlglot

from icegres.engine.checked_arith import arithmetic_nodes, check_overflow

pytestmark = pytest.mark.unit


def _value(sql: str) -> sqlglot.exp.Expression:
    return sqlglot.parse_one(f"update t set a = {sql}", read="postgres").expressions[0].expression


def test_nodes_come_innermost_first_and_skip_subqueries_and_negative_literals() -> None:
    value = _value("-(b + 1) * c - (select x + 1 from y) + -5")
    assert [n.sql() for n in arithmetic_nodes(value)] == [
        "b + 1", "-(b + 1)", "-(b + 1) * c", "-(b + 1) * c - (SELECT x + 1 FROM y)",
        "-(b + 1) * c - (SELECT x + 1 FROM y) + -5",
    ]


def test_only_integer_results_are_widened_and_cast_back_to_their_type() -> None:
    item = sqlglot.parse_one("update t set a = (b + 1) * f", read="postgres").expressions[0]
    nodes = arithmetic_nodes(item.expression)
    check_overflow(nodes, [pa.int32(), pa.float64()])
    assert item.expression.sql() == "(CAST((CAST(b AS DECIMAL(38, 0)) + CAST(1 AS DECIMAL(38, 0))) AS INT)) * f"


def test_a_value_that_is_itself_arithmetic_is_replaced_in_its_set_item() -> None:
    item = sqlglot.parse_one("update t set a = -b", read="postgres").expressions[0]
    check_overflow(arithmetic_nodes(item.expression), [pa.int64()])
    assert item.expression.sql() == "CAST((-CAST(b AS DECIMAL(38, 0))) AS BIGINT)"


def test_dates_intervals_and_uint64_are_left_alone() -> None:
    item = sqlglot.parse_one("update t set a = d + 1, b = u * 2", read="postgres")
    nodes = [n for e in item.expressions for n in arithmetic_nodes(e.expression)]
    before = item.sql()
    check_overflow(nodes, [pa.date32(), pa.uint64()])
    assert item.sql() == before


def test_a_select_item_that_is_itself_arithmetic_is_found() -> None:
    select = sqlglot.parse_one("select a * b, c from t", read="postgres")
    assert [n.sql() for n in arithmetic_nodes(select.expressions[0])] == ["a * b"]
