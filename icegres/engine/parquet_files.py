"""The layout of the Parquet data files icegres writes: pyiceberg's writer, with a page index and
pages bounded in rows.

pyiceberg writes no page index and passes `write.parquet.page-row-limit` to pyarrow as its write
batch size, which does not bound a page; so each column chunk of a 64k-row group came out as one
or two pages, and a point lookup decompressed the whole chunk of every column it returned (plus,
for a column of unique values such as a timestamp, its ~512 KB dictionary page). Iceberg's Java
writers (parquet-java) write column and offset indexes by default and end a page at the row limit:
DataFusion then prunes pages by their statistics and reads only the ones that can match. Files
written here keep the Iceberg meaning of the property and carry the index, so every engine gets
the same layout from icegres as from Spark or Flink.

Integer columns whose values are mostly distinct (ids, timestamps, prices stored as decimals) are
written DELTA_BINARY_PACKED instead of dictionary-encoded (`integer_encodings`). pyarrow's writer
starts every column on a dictionary and, once the dictionary outgrows `write.parquet.dict-size-bytes`,
falls back to PLAIN for the rest of the chunk; zstd then has to inflate 8 bytes per value on every
read, and the chunk still carries the dictionary page it gave up on. Delta is the fallback Parquet's
v2 writers (parquet-java, arrow-rs) pick for integers, and every Parquet reader decodes it (Spark,
Trino, DuckDB, DataFusion, pyarrow). The choice is made per file from its first row group: a column
whose distinct values there would overflow the dictionary bound gets delta, the rest keep their
dictionary.

Iceberg's own Spark reader decodes delta in its vectorized path only since Iceberg 1.10
(apache/iceberg#13391); for older readers a table can keep dictionaries everywhere with
`icegres.parquet.delta-integers = false` (`DELTA_INTEGERS`).

Every data file write goes through pyiceberg's `write_file`, which asks its `FileFormatFactory` for
the Parquet writer: `install()` puts ours there. (bench/SCORECARD.md has the effect on reads.)
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    import pyarrow as pa

PAGE_ROW_LIMIT = "write.parquet.page-row-limit"
PAGE_ROW_LIMIT_DEFAULT = 20_000  # the Iceberg spec's default, for tables icegres did not create
DELTA_INTEGERS = "icegres.parquet.delta-integers"  # 'false': no delta encoding (ddl.py checks it)


def page_layout(properties: dict[str, str]) -> dict[str, Any]:
    """pyarrow ParquetWriter options that bound pages by rows and index them."""
    rows = int(properties.get(PAGE_ROW_LIMIT, PAGE_ROW_LIMIT_DEFAULT))
    if rows <= 0:
        raise ValueError(f"{PAGE_ROW_LIMIT} must be positive, not {rows}")
    return {"write_page_index": True, "max_rows_per_page": rows, "write_batch_size": rows}


def delta_integers(properties: dict[str, str]) -> bool:
    """Whether a table's data files get `integer_encodings`: on unless the property says off in
    any of PostgreSQL's boolean spellings (icegres stores 'false'; another engine may not)."""
    value = properties.get(DELTA_INTEGERS)
    if value is None:
        return True
    from icegres.pg.errors import PgError
    from icegres.pg.text_in import parse_bool

    try:
        return parse_bool(value)
    except PgError:
        return True  # not a boolean: the default


def _integer_width(t: pa.DataType) -> int | None:
    """Bytes per value of a column Parquet stores as INT32/INT64 (None: another physical type).
    Decimals count because icegres writes them `store_decimal_as_integer`."""
    import pyarrow as pa

    if pa.types.is_decimal128(t):
        return 4 if t.precision <= 9 else 8 if t.precision <= 18 else None
    if pa.types.is_integer(t) or pa.types.is_date32(t) or pa.types.is_time32(t):
        return t.bit_width // 8 if t.bit_width > 32 else 4
    if pa.types.is_timestamp(t) or pa.types.is_time64(t) or pa.types.is_date64(t):
        return 8
    return None


def integer_encodings(rows: pa.Table, dictionary_bytes: int, row_group_rows: int) -> dict[str, Any]:
    """ParquetWriter options giving DELTA_BINARY_PACKED to the integer columns of `rows` whose first
    row group has more distinct values than the dictionary bound holds ({} when there are none).
    Blocking: one hash count per integer column over at most one row group."""
    import pyarrow.compute as pc

    sample = rows.slice(0, max(row_group_rows, 1))
    delta = []
    for field, column in zip(rows.schema, sample.columns, strict=True):
        width = _integer_width(field.type)
        if width is None:
            continue
        if pc.count_distinct(column, mode="only_valid").as_py() * width > dictionary_bytes:
            delta.append(field.name)
    if not delta:
        return {}
    # pyarrow takes a list of the Parquet leaf columns that keep their dictionary.
    keep = [leaf for f in rows.schema if f.name not in delta for leaf in _leaf_paths(f.name, f.type)]
    return {"use_dictionary": keep, "column_encoding": dict.fromkeys(delta, "DELTA_BINARY_PACKED")}


# CREATE INDEX (ddl_index.py): the columns rows are sorted by, and the columns given bloom filters
# (Iceberg's own property, which other engines' writers honour too).
SORT_PROPERTY = "icegres.sort-columns"
BLOOM_PREFIX = "write.parquet.bloom-filter-enabled.column."


def sorted_rows(properties: dict[str, str], rows: pa.Table) -> pa.Table:
    """`rows` in the order of the table's index columns (its Iceberg sort order), so each data
    file's min/max statistics on them are tight; unchanged without an index."""
    columns = [c for c in properties.get(SORT_PROPERTY, "").split(",") if c and c in rows.column_names]
    if not columns or rows.num_rows < 2:
        return rows
    return rows.sort_by([(c, "ascending") for c in columns])


def bloom_filters(properties: dict[str, str], rows: pa.Table) -> dict[str, dict[str, Any]]:
    """pyarrow's bloom_filter_options for the columns the table's properties turn them on for."""
    wanted = [key[len(BLOOM_PREFIX):] for key, value in properties.items()
              if key.startswith(BLOOM_PREFIX) and value.lower() == "true"]
    return {c: {"ndv": max(rows.num_rows, 1), "fpp": 0.01} for c in wanted if c in rows.column_names}


def _leaf_paths(path: str, t: pa.DataType) -> list[str]:
    """The Parquet column paths under an Arrow field, as pyarrow's writer names them (compliant
    nested types: a list's items are `list.element`, a map's `key_value.key` / `.value`)."""
    import pyarrow as pa

    if pa.types.is_struct(t):
        return [leaf for f in t for leaf in _leaf_paths(f"{path}.{f.name}", f.type)]
    if pa.types.is_map(t):
        return [*_leaf_paths(f"{path}.key_value.key", t.key_type),
                *_leaf_paths(f"{path}.key_value.value", t.item_type)]
    if pa.types.is_list(t) or pa.types.is_large_list(t) or pa.types.is_fixed_size_list(t):
        return _leaf_paths(f"{path}.list.element", t.value_type)
    return [path]


_installed = False


def install() -> None:
    """Make pyiceberg write Parquet data files with `page_layout` and `integer_encodings` (idempotent)."""
    global _installed
    if _installed:
        return
    from pyiceberg.io.fileformat import FileFormatFactory
    from pyiceberg.io.pyarrow import ParquetFormatModel, ParquetFormatWriter
    from pyiceberg.manifest import FileFormat

    from icegres.engine import staging

    class PagedParquetWriter(ParquetFormatWriter):
        def __init__(self, output_file: Any, file_schema: Any, properties: dict[str, str]) -> None:
            super().__init__(output_file, file_schema, properties)
            self._parquet_writer_kwargs.update(page_layout(properties))

        def write(self, table: pa.Table) -> None:
            # The first batch opens the file: its encodings are chosen here.
            if self._writer is None and delta_integers(self._properties):
                self._parquet_writer_kwargs.update(integer_encodings(
                    table, self._parquet_writer_kwargs["dictionary_pagesize_limit"], self._row_group_size))
            if self._writer is None:
                blooms = bloom_filters(self._properties, table)
                if blooms:
                    self._parquet_writer_kwargs["bloom_filter_options"] = blooms
            super().write(sorted_rows(self._properties, table))

        def __exit__(self, *exc: Any) -> None:
            try:
                super().__exit__(*exc)
            finally:
                staging.after_close(self._output_file.location)

    class PagedParquetModel(ParquetFormatModel):
        def create_writer(self, output_file: Any, file_schema: Any, properties: dict[str, str]) -> Any:
            # A transaction's staging record names the file before it exists (engine/staging.py).
            staging.before_create(output_file.location)
            return PagedParquetWriter(output_file, file_schema, properties)

    # `register` refuses a second model for a format; the registry is the extension point.
    FileFormatFactory._registry[FileFormat.PARQUET] = PagedParquetModel()
    _installed = True
