"""icegres.engine.connect(): the mounted lakehouse as an ibis DataFusion backend."""

from __future__ import annotations

import pyarrow as pa
import pytest

import icegres.engine
from icegres.engine.catalog import Lakehouse

pytestmark = pytest.mark.unit


@pytest.fixture(scope="module")
def lake_dir(tmp_path_factory):
    data_dir = tmp_path_factory.mktemp("ibislake")
    lh = Lakehouse.embedded(data_dir)
    lh.create_namespace_if_missing("shop")
    t = lh.catalog.create_table(("shop", "orders"), schema=pa.schema([
        pa.field("id", pa.int64()), pa.field("customer", pa.string()), pa.field("amount", pa.float64())]))
    t.append(pa.table({"id": [1, 2, 3, 4], "customer": ["a", "b", "a", "c"], "amount": [10.0, 5.5, 2.5, 7.0]}))
    return data_dir


def test_table_expressions(lake_dir):
    con = icegres.engine.connect(lake_dir)
    assert "orders" in con.list_tables(database="shop")
    orders = con.table("orders", database="shop")
    schema = orders.schema()
    assert list(schema.names) == ["id", "customer", "amount"]
    assert [schema[n].is_integer() for n in schema.names] == [True, False, False]
    assert schema["customer"].is_string() and schema["amount"].is_floating()
    out = (orders.group_by("customer").agg(total=orders.amount.sum()).order_by("customer").execute())
    assert out["customer"].tolist() == ["a", "b", "c"]
    assert out["total"].tolist() == [12.5, 5.5, 7.0]


def test_sql_through_ibis(lake_dir):
    con = icegres.engine.connect(lake_dir)
    df = con.sql("select customer, count(*) as n from shop.orders group by customer order by customer").execute()
    assert df["n"].tolist() == [2, 1, 1]


def test_sees_new_commits_after_refresh(lake_dir):
    con = icegres.engine.connect(lake_dir)
    lh = Lakehouse.embedded(lake_dir)
    t = lh.load_table("shop", "orders")
    t.append(pa.table({"id": [5], "customer": ["d"], "amount": [1.0]}))
    con.icegres_engine.refresh()
    assert con.table("orders", database="shop").count().execute() == 5
