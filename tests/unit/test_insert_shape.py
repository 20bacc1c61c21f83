"""Recipes of prepared INSERTs: the rows they build equal the planned path's, and a recipe that no
longer describes its table is never used."""

from __future__ import annotations

from pathlib import Path

import pyarrow as pa
import pytest
from pyiceberg.types import LongType, NestedField, StringType

from icegres.engine import dml
from icegres.engine.catalog import Lakehouse
from icegres.engine.insert_shape import SHAPES_PER_SESSION_MAX
from icegres.engine.lake import Engine, SessionEnv
from icegres.engine.query import open_session
from icegres.engine.txn import new_transaction
from icegres.pg.errors import PgError
from icegres.sql.statement import classify

pytestmark = pytest.mark.unit

SCHEMA = pa.schema([pa.field("id", pa.int64()), pa.field("v", pa.string())])
INSERT = "insert into demo.t values ($1, $2)"


@pytest.fixture
def lake(tmp_path: Path):
    lh = Lakehouse.embedded(tmp_path / "lake")
    lh.create_namespace_if_missing("demo")
    lh.catalog.create_table(("demo", "t"), schema=SCHEMA)
    engine = Engine(lh)
    engine.refresh()
    return engine, lh


def _session(engine: Engine, search_path: str = "demo"):
    return open_session(engine, SessionEnv("icegres", "icegres", 1, {"search_path": search_path}))


def _planned(q, sql: str, params: dict | None):
    """What the write buffer's worker-thread path computes (and where recipes are kept)."""
    q.txn = new_transaction(None, None, autocommit=True)
    try:
        return dml.insert_rows(q, q.txn, classify(sql), params)
    finally:
        q.end_transaction()


def _now(q, sql: str, params: dict | None):
    return q.insert_shapes.rows_now(sql, q.env.search_path, params, q.resolve_mounted, q.engine.read_plan)


def test_a_recipe_builds_the_rows_datafusion_builds(lake) -> None:
    engine, _ = lake
    q = _session(engine)
    assert _now(q, INSERT, {"1": 1, "2": "a"}) is None  # nothing executed yet
    _planned(q, INSERT, {"1": 1, "2": "a"})
    # The oracle: the same values through a SELECT, which DataFusion plans and `conform` casts.
    oracle = "insert into demo.t select $1::bigint, $2::text"
    for params in ({"1": 2, "2": "b"}, {"1": None, "2": None}, {"1": -(2**63), "2": "é" * 100}):
        key, rows = _now(q, INSERT, params)
        planned = _planned(q, oracle, params)
        assert key == planned.key == ("demo", "t")
        assert rows.equals(planned.rows) and rows.schema.equals(planned.rows.schema, check_metadata=True)


def test_column_lists_constants_and_several_rows(lake) -> None:
    engine, _ = lake
    q = _session(engine)
    sql = "insert into t (v, id) values ($1, 7), (null, $2), ('x', 8)"
    _planned(q, sql, {"1": "p", "2": 5})
    _, rows = _now(q, sql, {"1": "q", "2": 6})
    assert rows.to_pylist() == [{"id": 7, "v": "q"}, {"id": 6, "v": None}, {"id": 8, "v": "x"}]
    oracle = "insert into t (v, id) select * from (values ($1::text, 7), (null, $2::bigint), ('x', 8))"
    assert rows.equals(_planned(q, oracle, {"1": "q", "2": 6}).rows)
    _planned(q, "insert into t (v) values ($1)", {"1": "only"})
    assert _now(q, "insert into t (v) values ($1)", {"1": "z"})[1].to_pylist() == [{"id": None, "v": "z"}]


def test_without_a_column_list_fewer_values_fill_the_first_columns(lake) -> None:
    """As PostgreSQL: the first N columns, the rest take their defaults (NULL here)."""
    engine, _ = lake
    q = _session(engine)
    assert _planned(q, "insert into t values ($1)", {"1": 4}).rows.to_pylist() == [{"id": 4, "v": None}]
    assert _now(q, "insert into t values ($1)", {"1": 5})[1].to_pylist() == [{"id": 5, "v": None}]
    assert _planned(q, "insert into t select 6", None).rows.to_pylist() == [{"id": 6, "v": None}]
    with pytest.raises(PgError, match="more expressions than target columns"):
        _planned(q, "insert into t select 1, 'a', 2", None)


def test_statements_without_a_recipe(lake) -> None:
    engine, _ = lake
    q = _session(engine)
    for sql, params in [
        ("insert into t values ($1, $2) returning id", {"1": 1, "2": "a"}),  # RETURNING is planned
        ("insert into t values ($1 + 1, $2)", {"1": 1, "2": "a"}),  # an expression
        ("insert into t values (1, 'a')", None),  # no parameters: planned as PostgreSQL casts
        ("insert into t select $1, $2", {"1": 1, "2": "a"}),
    ]:
        _planned(q, sql, params)
        assert _now(q, sql, params) is None, sql


def test_a_value_that_does_not_convert_takes_the_planned_path(lake) -> None:
    engine, _ = lake
    q = _session(engine)
    _planned(q, INSERT, {"1": 1, "2": "a"})
    assert _now(q, INSERT, {"1": "not a number", "2": "a"}) is None
    assert _now(q, INSERT, {"1": 2**63, "2": "a"}) is None


def test_a_null_in_a_not_null_column_is_refused_as_the_planned_path_refuses_it(tmp_path: Path) -> None:
    from pyiceberg.schema import Schema

    lh = Lakehouse.embedded(tmp_path / "lake")
    lh.create_namespace_if_missing("demo")
    lh.catalog.create_table(("demo", "r"), schema=Schema(
        NestedField(1, "id", LongType(), required=True), NestedField(2, "v", StringType(), required=False)))
    engine = Engine(lh)
    engine.refresh()
    q = _session(engine)
    sql = "insert into r values ($1, $2)"
    _planned(q, sql, {"1": 1, "2": "a"})
    with pytest.raises(PgError) as planned:  # the oracle: DataFusion's rows through `conform`
        _planned(q, "insert into r select $1::bigint, $2::text", {"1": None, "2": "a"})
    with pytest.raises(PgError) as now:
        _now(q, sql, {"1": None, "2": "a"})
    assert now.value.sqlstate == planned.value.sqlstate == "23502"
    assert str(now.value) == str(planned.value)


def test_a_new_schema_retires_the_recipe(lake) -> None:
    engine, lh = lake
    q = _session(engine)
    _planned(q, INSERT, {"1": 1, "2": "a"})
    with lh.catalog.load_table(("demo", "t")).update_schema() as update:
        update.add_column("extra", LongType())
    engine.refresh()
    assert _now(q, INSERT, {"1": 2, "2": "b"}) is None
    planned = _planned(q, INSERT, {"1": 2, "2": "b"})
    assert planned.rows.column_names == ["id", "v", "extra"]
    assert _now(q, INSERT, {"1": 3, "2": "c"})[1].to_pylist() == [{"id": 3, "v": "c", "extra": None}]


def test_new_data_keeps_the_recipe_a_new_table_retires_it(lake) -> None:
    engine, lh = lake
    q = _session(engine)
    _planned(q, INSERT, {"1": 1, "2": "a"})
    lh.catalog.load_table(("demo", "t")).append(pa.table({"id": [9], "v": ["z"]}, schema=SCHEMA))
    engine.refresh()
    assert _now(q, INSERT, {"1": 2, "2": "b"}) is not None  # same table, same schema: new snapshot only
    lh.catalog.drop_table(("demo", "t"))
    lh.catalog.create_table(("demo", "t"), schema=SCHEMA)
    engine.refresh()
    assert _now(q, INSERT, {"1": 2, "2": "b"}) is None  # same name, another table
    lh.catalog.drop_table(("demo", "t"))
    engine.refresh()
    assert _now(q, INSERT, {"1": 2, "2": "b"}) is None  # gone: the planned path says 42P01


def test_a_primary_key_retires_the_recipe(lake) -> None:
    engine, lh = lake
    q = _session(engine)
    _planned(q, INSERT, {"1": 1, "2": "a"})
    with lh.catalog.load_table(("demo", "t")).transaction() as tx:
        tx.set_properties({"icegres.primary-key": "id"})
    engine.refresh()
    assert _now(q, INSERT, {"1": 2, "2": "b"}) is None


def test_an_unqualified_name_follows_search_path(lake) -> None:
    engine, lh = lake
    q = _session(engine, "a, demo")
    sql = "insert into t values ($1, $2)"
    _planned(q, sql, {"1": 1, "2": "a"})
    assert _now(q, sql, {"1": 2, "2": "b"})[0] == ("demo", "t")
    lh.create_namespace_if_missing("a")
    lh.catalog.create_table(("a", "t"), schema=SCHEMA)
    engine.refresh()
    assert _now(q, sql, {"1": 2, "2": "b"}) is None  # `t` now means a.t
    assert _planned(q, sql, {"1": 2, "2": "b"}).key == ("a", "t")
    assert _now(q, sql, {"1": 3, "2": "c"})[0] == ("a", "t")
    other = _session(engine, "demo")  # recipes are per session and per search_path
    assert _now(other, sql, {"1": 3, "2": "c"}) is None


def test_a_session_keeps_a_bounded_number_of_recipes(lake) -> None:
    engine, _ = lake
    q = _session(engine)
    texts = [f"insert into t values ($1, $2) -- {i}" for i in range(SHAPES_PER_SESSION_MAX + 5)]
    for sql in texts:
        _planned(q, sql, {"1": 1, "2": "a"})
    kept = [sql for sql in texts if _now(q, sql, {"1": 1, "2": "a"}) is not None]
    assert len(kept) == SHAPES_PER_SESSION_MAX
    assert kept == texts[-SHAPES_PER_SESSION_MAX:]  # the oldest went first


def test_default_values_has_no_recipe(lake) -> None:
    engine, _ = lake
    q = _session(engine)
    assert _planned(q, "insert into t default values", None).rows.to_pylist() == [{"id": None, "v": None}]
    assert _now(q, "insert into t default values", None) is None
