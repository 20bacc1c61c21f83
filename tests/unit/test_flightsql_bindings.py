"""Parameter rows a Flight SQL DoPut binds (icegres/protocol/flightsql/bindings.py): rows by
column position, and a query run once per row with its results concatenated under one schema."""

from __future__ import annotations

from typing import Any

import pyarrow as pa
import pytest

from icegres.pg.errors import PgError
from icegres.protocol.flightsql.bindings import common_schema, param_rows, run_each

pytestmark = pytest.mark.unit


def test_rows_are_read_by_column_position_across_batches() -> None:
    first = pa.RecordBatch.from_arrays([pa.array([1, 2]), pa.array(["a", None])], names=["0", "0"])
    second = pa.RecordBatch.from_arrays([pa.array([3]), pa.array(["c"])], names=["x", "y"])
    assert param_rows([first, second]) == [{"1": 1, "2": "a"}, {"1": 2, "2": None}, {"1": 3, "2": "c"}]
    assert param_rows([pa.RecordBatch.from_pydict({"0": pa.array([], pa.int64())})]) == []
    assert param_rows([]) == []


def _start(results: dict[Any, pa.Table]) -> Any:
    def start(row: dict[str, Any] | None) -> tuple[pa.Schema, Any]:
        table = results[(row or {}).get("1")]
        return table.schema, iter(table.to_batches(max_chunksize=2))

    return start


def test_a_query_bound_to_several_rows_is_their_results_in_row_order() -> None:
    by_id = {i: pa.table({"id": pa.array([i] * i, pa.int64()), "v": pa.array(["x"] * i)}) for i in (1, 3)}
    by_id[0] = pa.table({"id": pa.array([], pa.int64()), "v": pa.array([], pa.string())})
    schema, batches = run_each(_start(by_id), [{"1": 3}, {"1": 0}, {"1": 1}])
    assert schema.names == ["id", "v"]
    assert pa.Table.from_batches(batches, schema).column("id").to_pylist() == [3, 3, 3, 1]


def test_a_column_a_null_parameter_left_untyped_takes_the_type_of_the_others() -> None:
    typed = pa.table({"a": pa.array([7], pa.int64())}, schema=pa.schema([pa.field("a", pa.int64(), False)]))
    untyped = pa.table({"a": pa.nulls(1)})
    schema, batches = run_each(_start({None: untyped, 7: typed}), [None, {"1": 7}])
    assert schema == pa.schema([pa.field("a", pa.int64(), True)])
    assert pa.Table.from_batches(batches, schema).column("a").to_pylist() == [None, 7]
    assert common_schema([typed.schema, typed.schema]) == typed.schema  # nothing to widen


def test_results_of_types_that_do_not_cast_are_refused() -> None:
    ints = pa.table({"a": pa.array([1], pa.int64())})
    lists = pa.table({"a": pa.array([[1]], pa.list_(pa.int64()))})
    with pytest.raises(PgError) as exc:
        run_each(_start({1: ints, 2: lists}), [{"1": 1}, {"1": 2}])
    assert exc.value.sqlstate == "42804"


def test_held_results_are_bounded() -> None:
    big = pa.table({"a": pa.array(range(1000), pa.int64())})
    with pytest.raises(PgError) as exc:
        run_each(_start({1: big}), [{"1": 1}] * 3, bytes_max=16_000)
    assert exc.value.sqlstate == "54000" and "3 parameter rows" in exc.value.message
