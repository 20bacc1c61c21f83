"""Data files icegres writes carry a page index and pages bounded by the table's page-row-limit,
and DataFusion uses them: a point lookup reads one page of its column, not the row group."""

import re
from decimal import Decimal

import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from datafusion import SessionConfig, SessionContext

from icegres.engine.catalog import DEFAULT_TABLE_PROPERTIES, Lakehouse
from icegres.engine.parquet_files import (
    DELTA_INTEGERS,
    PAGE_ROW_LIMIT,
    PAGE_ROW_LIMIT_DEFAULT,
    integer_encodings,
    page_layout,
)

pytestmark = pytest.mark.unit

ROWS = 20_000


def test_page_layout_follows_the_iceberg_property():
    assert page_layout({PAGE_ROW_LIMIT: "1000"})["max_rows_per_page"] == 1000
    assert page_layout({})["max_rows_per_page"] == PAGE_ROW_LIMIT_DEFAULT == 20_000
    assert page_layout({})["write_page_index"] is True
    with pytest.raises(ValueError, match="page-row-limit"):
        page_layout({PAGE_ROW_LIMIT: "0"})


def test_tables_icegres_creates_get_small_pages_and_a_small_dictionary_bound():
    assert int(DEFAULT_TABLE_PROPERTIES[PAGE_ROW_LIMIT]) <= 8192
    assert int(DEFAULT_TABLE_PROPERTIES["write.parquet.dict-size-bytes"]) <= 64 * 1024


def _written_file(tmp_path, properties):
    lake = Lakehouse.embedded(tmp_path)
    lake.create_namespace_if_missing("s")
    rows = pa.table({
        "id": pa.array(range(ROWS), pa.int64()),
        "ts": pa.array(range(ROWS), pa.int64()).cast(pa.timestamp("us")),
        "city": pa.array([f"c{i % 7}" for i in range(ROWS)]),
    })
    if properties is None:  # a table another engine created: no icegres defaults
        table = lake.catalog.create_table(("s", "t"), schema=rows.schema)
    else:
        table = lake.create_table("s", "t", rows.schema, properties)
    table.append(rows)  # pyiceberg's own write path: the format model install() replaced
    (task,) = list(table.scan().plan_files())
    return task.file.file_path.removeprefix("file://")


def _pages_of_the_filter_column(path, where):
    ctx = SessionContext(SessionConfig().set("datafusion.execution.parquet.pushdown_filters", "true"))
    ctx.register_parquet("f", path)
    plan = ctx.sql(f"explain analyze select * from f where {where}").collect()[0].column(1)[0].as_py()
    found = re.search(r"page_index_pages_pruned=(\d+) total \u2192 (\d+) matched", plan)
    assert found, plan
    return int(found.group(1)), int(found.group(2))


def test_a_written_file_has_a_page_index_with_pages_of_the_row_limit(tmp_path):
    path = _written_file(tmp_path, {PAGE_ROW_LIMIT: "1000"})
    meta = pq.ParquetFile(path).metadata
    column = meta.row_group(0).column(0)
    assert column.has_offset_index and column.has_column_index
    # 20 pages of 1000 rows; the lookup reads one of them.
    assert _pages_of_the_filter_column(path, "id = 12345") == (ROWS // 1000, 1)
    ctx = SessionContext()
    ctx.register_parquet("f", path)
    assert ctx.sql("select count(*), min(id), max(id) from f").collect()[0].to_pylist() == [
        {"count(*)": ROWS, "min(f.id)": 0, "max(f.id)": ROWS - 1}]


def test_a_table_without_the_property_gets_the_iceberg_default_page_size(tmp_path):
    path = _written_file(tmp_path, None)
    assert _pages_of_the_filter_column(path, "id = 12345") == (1, 1)  # 20,000 rows: one page


def _encodings(path):
    group = pq.ParquetFile(path).metadata.row_group(0)
    return {group.column(i).path_in_schema: group.column(i) for i in range(group.num_columns)}


def test_integer_columns_of_mostly_distinct_values_are_delta_encoded_and_the_rest_keep_dictionaries(tmp_path):
    lake = Lakehouse.embedded(tmp_path)
    lake.create_namespace_if_missing("s")
    n = ROWS
    rows = pa.table({
        "id": pa.array(range(n), pa.int64()),
        "ts": pa.array(range(0, n * 1000, 1000), pa.int64()).cast(pa.timestamp("us", tz="UTC")),
        "price": pa.array([Decimal(i * 7).scaleb(-2) for i in range(n)], pa.decimal128(15, 2)),
        "day": pa.array(range(n), pa.int32()).cast(pa.date32()),
        "small": pa.array([i % 5 for i in range(n)], pa.int32()),
        "city": pa.array([f"c{i % 7}" for i in range(n)]),
        "fare": pa.array([float(i % 50) for i in range(n)]),
        "s": pa.array([{"a": i, "b": f"x{i % 3}"} for i in range(n)]),
        "tags": pa.array([[i % 4] for i in range(n)], pa.list_(pa.int64())),
        "m": pa.array([[("k", i % 2)] for i in range(n)], pa.map_(pa.string(), pa.int64())),
    })
    table = lake.create_table("s", "t", rows.schema, dict(DEFAULT_TABLE_PROPERTIES))
    table.append(rows)
    (task,) = list(table.scan().plan_files())
    path = task.file.file_path.removeprefix("file://")
    columns = _encodings(path)
    for name in ("id", "ts", "price", "day"):
        assert "DELTA_BINARY_PACKED" in columns[name].encodings, name
        assert not columns[name].has_dictionary_page, name
    # Columns that are not top-level integers keep pyarrow's dictionary, nested leaves included
    # (a nested integer of distinct values too: the choice covers top-level columns only).
    for name in ("small", "city", "fare", "s.a", "s.b", "tags.list.element", "m.key_value.key", "m.key_value.value"):
        assert columns[name].has_dictionary_page, name
        assert "DELTA_BINARY_PACKED" not in columns[name].encodings, name
    assert set(columns) == {"id", "ts", "price", "day", "small", "city", "fare", "s.a", "s.b",
                            "tags.list.element", "m.key_value.key", "m.key_value.value"}
    assert table.scan().to_arrow().select(rows.column_names).cast(rows.schema).equals(rows)
    ctx = SessionContext()
    ctx.register_parquet("f", path)
    got = ctx.sql("select sum(id) as i, max(ts) as t, sum(price) as p, max(day) as d from f").collect()[0]
    assert got.to_pylist() == [{"i": sum(range(n)), "t": rows["ts"][-1].as_py(),
                                "p": sum(rows["price"].to_pylist()), "d": rows["day"][-1].as_py()}]


def test_delta_is_chosen_exactly_when_the_first_row_group_would_overflow_the_dictionary():
    def chosen(values, dictionary_bytes, group=1000):
        rows = pa.table({"v": pa.array(values, pa.int64()), "w": pa.array(["x"] * len(values))})
        return integer_encodings(rows, dictionary_bytes, group)

    assert chosen(range(100), 800) == {}  # 100 distinct x 8 bytes: fits
    assert chosen(range(101), 800) == {"use_dictionary": ["w"], "column_encoding": {"v": "DELTA_BINARY_PACKED"}}
    assert chosen([*range(100), *range(100, 200)], 800, group=100) == {}  # only the first group counts
    assert chosen([None] * 500 + list(range(100)), 800) == {}  # nulls are not dictionary entries
    assert chosen([], 800) == {}
    narrow = pa.table({"v": pa.array(range(150), pa.int16())})
    assert integer_encodings(narrow, 600, 1000) == {}  # stored as INT32: 150 x 4 bytes
    assert integer_encodings(narrow, 599, 1000)["column_encoding"] == {"v": "DELTA_BINARY_PACKED"}
    wide = pa.table({"v": pa.array(range(150), pa.int64()).cast(pa.decimal128(30, 2))})
    assert integer_encodings(wide, 8, 1000) == {}  # precision > 18: not an integer column


@pytest.mark.parametrize(("switch", "delta"), [(None, True), ("true", True), ("false", False), ("OFF", False)])
def test_a_table_can_keep_dictionaries_for_readers_without_delta(tmp_path, switch, delta):
    # Iceberg's vectorized Spark reader decodes DELTA_BINARY_PACKED only since Iceberg 1.10.
    properties = dict(DEFAULT_TABLE_PROPERTIES)
    if switch is not None:
        properties[DELTA_INTEGERS] = switch
    lake = Lakehouse.embedded(tmp_path)
    lake.create_namespace_if_missing("s")
    rows = pa.table({"id": pa.array(range(ROWS), pa.int64())})
    table = lake.create_table("s", "t", rows.schema, properties)
    table.append(rows)
    (task,) = list(table.scan().plan_files())
    column = _encodings(task.file.file_path.removeprefix("file://"))["id"]
    assert ("DELTA_BINARY_PACKED" in column.encodings) is delta
    assert column.has_dictionary_page is not delta
    assert table.scan().to_arrow()["id"].to_pylist() == list(range(ROWS))
