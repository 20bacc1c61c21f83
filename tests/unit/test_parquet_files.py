"""Data files icegres writes carry a page index and pages bounded by the table's page-row-limit,
and DataFusion uses them: a point lookup reads one page of its column, not the row group."""

import re

import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from datafusion import SessionConfig, SessionContext

from icegres.engine.catalog import DEFAULT_TABLE_PROPERTIES, Lakehouse
from icegres.engine.parquet_files import PAGE_ROW_LIMIT, PAGE_ROW_LIMIT_DEFAULT, page_layout

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
