"""Arrow Flight SQL over the real stack: `icegres flight-serve` on SeaweedFS's Iceberg REST catalog
(SigV4) with Parquet on its S3, read with the real ADBC driver (writes over Flight on SeaweedFS
are in test_flightsql_writes.py, which runs on both backends).

The stack's catalog is shared by the whole session (other tests keep a seeded demo lakehouse in
it), so this module writes its own namespace with pyiceberg and reads that."""

from __future__ import annotations

import uuid
from collections.abc import Iterator

import adbc_driver_flightsql.dbapi as adbc
import pyarrow as pa
import pyarrow.compute as pc
import pytest

from tests.e2e.test_flightsql import flight_server

pytestmark = [pytest.mark.e2e, pytest.mark.timeout(300)]

ROWS = 20_000
CITIES = ["Lagos", "Seoul", "Lima", "Oslo"]


def rows() -> pa.Table:
    ids = pa.array(range(1, ROWS + 1), pa.int64())
    return pa.table({"id": ids, "city": pa.array([CITIES[i % 4] for i in range(ROWS)]),
                     "fare": pc.divide(pc.cast(ids, pa.float64()), 7.0)})


@pytest.fixture(scope="module")
def ns(stack) -> str:
    from pyiceberg.catalog import load_catalog

    name = f"fsw_{uuid.uuid4().hex[:8]}"
    catalog = load_catalog("check", **stack.pyiceberg_properties())
    catalog.create_namespace(name)
    data = rows()
    table = catalog.create_table((name, "t"), data.schema)
    for start in range(0, ROWS, 5_000):  # four data files
        table.append(data.slice(start, 5_000))
    return name


@pytest.fixture(scope="module")
def conn(stack, ns, tmp_path_factory) -> Iterator[adbc.Connection]:
    data_dir = tmp_path_factory.mktemp("flightsw") / "data"
    data_dir.mkdir()
    with flight_server(data_dir, env=stack.env()) as (uri, _, _, _), adbc.connect(uri, autocommit=True) as c:
        yield c


def test_queries_parameters_and_streaming(conn, ns) -> None:
    data = rows()
    with conn.cursor() as cur:
        cur.execute(f"select id, city, fare from {ns}.t where id <= 3 order by id")
        assert cur.fetch_arrow_table().to_pylist() == data.slice(0, 3).to_pylist()
        cur.execute(f"select id, city from {ns}.t where id = $1", parameters=(4242,))
        assert cur.fetchall() == [(4242, CITIES[4241 % 4])]
        cur.execute(f"select city, count(*) from {ns}.t group by city order by city")
        assert cur.fetchall() == [(c, ROWS // 4) for c in sorted(CITIES)]
        cur.execute(f"select * from {ns}.t")
        table = cur.fetch_arrow_table()
    assert table.num_rows == ROWS and pc.sum(table["id"]).as_py() == ROWS * (ROWS + 1) // 2


def test_metadata(conn, ns) -> None:
    tables = conn.adbc_get_objects(depth="tables", db_schema_filter=ns).read_all().to_pylist()
    assert [t["table_name"] for t in tables[0]["catalog_db_schemas"][0]["db_schema_tables"]] == ["t"]
    schema = conn.adbc_get_table_schema("t", db_schema_filter=ns)
    assert schema.names == ["id", "city", "fare"] and schema.field("city").type == pa.string()
