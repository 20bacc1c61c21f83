"""sql/time_travel.py and the parser's time-travel spellings: what each reference asks for."""

from __future__ import annotations

import pytest
from sqlglot import exp

from icegres.sql.parse import parse
from icegres.sql.statement import tree_table_refs
from icegres.sql.time_travel import Point, mentions, spark_metadata, table_function, travel_of

pytestmark = pytest.mark.unit


def _tables(sql: str) -> list[exp.Table]:
    return list(parse(sql).find_all(exp.Table))


@pytest.mark.parametrize("sql, point, value", [
    ("select * from t for version as of 12", Point.VERSION, "12"),
    ("select * from t FOR SYSTEM_VERSION AS OF 12 x", Point.VERSION, "12"),
    ("select * from t as of 12", Point.VERSION, "12"),
    ("select * from t as of 'dev'", Point.VERSION, "'dev'"),
    ("select * from t for system_time as of timestamp '2024-01-01'", Point.TIMESTAMP, None),
    ("select * from t for timestamp as of now() - interval '1 hour'", Point.TIMESTAMP, None),
    ("select * from t as of timestamp '2024-01-01 10:00'", Point.TIMESTAMP, None),
    ("select * from t for system time as of timestamptz '2024-01-01 10:00+02'", Point.TIMESTAMP, None),
])
def test_every_spelling_reads_into_one_travel(sql, point, value):
    (table,) = _tables(sql)
    travel = travel_of(table)
    assert travel is not None and travel.point is point and travel.name == "t"
    if value is not None:
        assert travel.value.sql() == value


def test_names_with_a_ref_or_a_metadata_table():
    (at,) = _tables('select * from demo."t@dev"')
    assert (travel_of(at).point, travel_of(at).name, travel_of(at).ref) == (Point.VERSION, "t", "dev")
    (meta,) = _tables('select * from demo."t$snapshots"')
    assert (travel_of(meta).point, travel_of(meta).metadata) == (Point.METADATA, "snapshots")
    (other,) = _tables('select * from demo."t$nope"')
    assert travel_of(other) is None
    (spark,) = _tables("select * from demo.t.history")
    assert spark_metadata(spark) == ("demo", "t", "history")


@pytest.mark.parametrize("sql", [
    "select * from t as of",  # a table aliased "of", as PostgreSQL reads it
    "select of.a from t as of where of.a = 1",
    "select * from t for update",
    "select 1 as of",
])
def test_an_alias_named_of_is_no_time_travel(sql):
    assert all(travel_of(t) is None for t in _tables(sql))


def test_time_travel_references_are_not_the_tables_head():
    tree = parse("select * from demo.a for version as of 1 join demo.b on true join demo.\"c$files\" on true")
    assert tree_table_refs(tree, ["public"]) == {("demo", "b")}


def test_the_cheap_test_and_table_functions():
    assert mentions("select * from t AS  OF 3") and mentions('select * from "t@x"')
    assert mentions('select * from "t$snapshots"') and mentions("select * from s.t.refs")
    assert mentions("select * from branch_diff('a', 'b')")
    assert not mentions("select $1, 'x' from t where a = $2")
    (call,) = _tables("select * from branch_diff('a', 'b') d")
    assert table_function(call)[0] == "branch_diff"
