"""The per-statement caches (table references, result column names) keyed on literal shape."""

from __future__ import annotations

import pyarrow as pa
import pytest

from icegres.engine import column_names
from icegres.engine.catalog import Lakehouse
from icegres.engine.lake import Engine, SessionEnv
from icegres.engine.query import open_session
from icegres.pg.errors import PgError
from icegres.sql import shape as engine_mod
from icegres.sql.shape import literal_shape as _literal_shape
from icegres.sql.statement import query

pytestmark = pytest.mark.unit


@pytest.mark.parametrize(
    ("a", "b"),
    [
        ("select * from demo.trips where id = 123456", "select * from demo.trips where id = 7"),
        ("select count(*) from t where zone = 'z1' limit 5", "select count(*) from t where zone = 'it''s' limit 50"),
        ("select * from t where a in (1, 'x') and b > -1.5e3", "select * from t where a in (22, '') and b > -3"),
        ("select '1'::int, date '2020-01-01'", "select '7'::int, date '1999-12-31'"),
        ("update t set a = 'x' where b = 1", "update t set a = 'y' where b = 2"),
        ("select cast('5' as numeric(10, 2))", "select cast('6' as numeric(12, 4))"),
    ],
)
def test_statements_differing_only_in_values_share_a_shape(a, b):
    assert _literal_shape(a) == _literal_shape(b)
    assert _literal_shape(a) != a


@pytest.mark.parametrize(
    ("a", "b"),
    [
        ("select 1", "select 1 as a"),
        ("select 1", "select '1'"),  # different literal kinds keep different tokens
        ("select 1 as true", "select 1 as false"),  # names "true" / "false"
        ("select true", "select 1"),  # `bool` vs `?column?`
        ("select '1'::int", "select '1'::text"),
        ('select 1 as "x"', 'select 1 as "y"'),
        ("select 1 as 5", "select 1 as 6"),  # sqlglot reads a number after AS as a name
        ("select 1 as 'x'", "select 1 as 'y'"),
        ("select * from 'x'", "select * from 'y'"),  # sqlglot reads these strings as tables
        ("select * from t, 'x'", "select * from t, 'y'"),
        ("select * from ('x')", "select * from ('y')"),
        ("select * from t join 'x' on true", "select * from t join 'y' on true"),
        ("with 'x' as (select 1) select 1", "with 'y' as (select 1) select 1"),
        ("insert into 'x' values (1)", "insert into 'y' values (1)"),
        ("select * from t where a in (select b from u, 'x')", "select * from t where a in (select b from u, 'y')"),
        ("select * from date, 'x'", "select * from date, 'y'"),
        ("select E'a\\'b', 5", "select E'a\\'c', 5"),  # backslash escapes: verbatim
        ("select $$1$$", "select $$2$$"),
        ("select $1, 5", "select $2, 5"),
        ("select 5 -- 1\n", "select 5 -- 2\n"),
        ("select 5 /* 1 /* 2 */ 3 */", "select 5 /* 1 /* 2 */ 4 */"),
        ("select 'a$' , $1", "select 'b$' , $1"),
        ("select U&'d!0061' UESCAPE '!'", "select U&'d!0062' UESCAPE '!'"),
        ("select 'a", "select 'b"),  # unterminated: exact text
        ('select "a', 'select "b'),
    ],
)
def test_statements_that_may_differ_in_meaning_do_not_share_a_shape(a, b):
    assert _literal_shape(a) != _literal_shape(b)


def test_a_text_with_nul_never_equals_a_mask():
    masked = _literal_shape("select 5")
    assert _literal_shape(masked) != masked


@pytest.fixture
def qctx(tmp_path):
    lh = Lakehouse.embedded(tmp_path)
    lh.create_namespace_if_missing("demo")
    t = lh.catalog.create_table(
        ("demo", "trips"), schema=pa.schema([pa.field("id", pa.int64()), pa.field("zone", pa.string())])
    )
    t.append(pa.table({"id": [1, 2, 3], "zone": ["a", "b", "c"]}))
    engine = Engine(lh)
    engine.refresh()
    return open_session(engine, SessionEnv("icegres", "icegres", 1, {"search_path": "demo"}))


def test_point_lookups_with_new_literals_parse_once(qctx, monkeypatch):
    from icegres.sql import parse

    parse._parse_cached.cache_clear()
    parses = []
    real_parse = parse._parse_one
    monkeypatch.setattr(parse, "_parse_one", lambda sql: parses.append(sql) or real_parse(sql))
    for i in range(5):
        schema, stream = qctx.start(query(f"select count(*), max(zone) from trips where id = {i} and zone <> 'z{i}'"))
        assert schema.names == ["count", "max"]
        assert sum(b.to_pyarrow().num_rows for b in stream) == 1
    assert len(parses) == 1  # the first statement, once: its tables and its column names share the tree
    assert qctx.table_refs(query("select * from trips where id = 99")) == {("demo", "trips")}


def test_names_from_datafusion_are_not_cached_with_the_shape(qctx):
    # `?column?` comes from the select list; the fallback for `*` is DataFusion's own per schema.
    assert qctx.start(query("select 1, id from trips where id = 1"))[0].names == ["?column?", "id"]
    assert qctx.start(query("select 2, id from trips where id = 2"))[0].names == ["?column?", "id"]
    assert qctx.start(query("select 1 as a, id from trips where id = 1"))[0].names == ["a", "id"]
    for sql in ("select true, id from trips", "select false as x, 'a' from trips", "select 1 as true from trips"):
        schema = qctx.start(query(sql))[0]
        plain = qctx.plan(query(sql)).df.schema()
        assert schema.names == column_names.postgres_names(column_names.select_list_names(sql), plain)
    assert qctx.start(query("select 1 as true from trips"))[0].names == ["true"]


def test_search_path_still_keys_table_refs(qctx):
    assert qctx.table_refs(query("select * from trips where id = 1")) == {("demo", "trips")}
    qctx.env.settings["search_path"] = "public"
    assert qctx.table_refs(query("select * from trips where id = 2")) == {("public", "trips")}


def test_long_texts_key_on_the_exact_text():
    sql = "select 1 from t where a in (" + ",".join(["1"] * engine_mod.SHAPE_TEXT_MAX) + ")"
    assert _literal_shape(sql) == sql


def test_a_repeated_describe_plans_once_per_snapshot(qctx, monkeypatch):
    plans = []
    real_plan = qctx.plan
    monkeypatch.setattr(qctx, "plan", lambda *a: plans.append(a) or real_plan(*a))
    sql = "select * from trips where id = $1"
    for _ in range(3):  # a new Statement each time, as each Parse classifies its text
        schema, types = qctx.describe(query(sql))
        assert schema.names == ["id", "zone"] and types == {1: pa.int64()}
    assert len(plans) == 1
    types[1] = pa.string()  # the caller's copy: the cache keeps its own
    assert qctx.describe(query(sql))[1] == {1: pa.int64()}
    table = qctx.engine.lakehouse.catalog.load_table(("demo", "trips"))
    table.append(pa.table({"id": pa.array([4], pa.int64()), "zone": ["d"]}))
    assert qctx.describe(query(sql))[0].names == ["id", "zone"]
    assert len(plans) == 2  # a new snapshot: described afresh
    from pyiceberg.types import DoubleType

    with table.update_schema() as update:
        update.add_column("fare", DoubleType())
    assert qctx.describe(query(sql))[0].names == ["id", "zone", "fare"]
    assert len(plans) == 3


def test_describe_of_another_search_path_is_its_own(qctx):
    assert qctx.describe(query("select * from trips where id = $1"))[0].names == ["id", "zone"]
    qctx.env.settings["search_path"] = "public"
    with pytest.raises(PgError) as raised:  # no public.trips: described afresh, not from the cache
        qctx.describe(query("select * from trips where id = $1"))
    assert raised.value.sqlstate == "42P01"


def test_placeholder_types_visit_each_expression_once(qctx, monkeypatch):
    from icegres.engine import params

    visits = []
    real_walk = params._walk_expr
    monkeypatch.setattr(params, "_walk_expr", lambda e, out, depth: visits.append(depth) or real_walk(e, out, depth))
    df = qctx.plan(query("select * from trips where id = $1 and zone = $2")).df
    assert params.placeholder_types(df) == {1: pa.int64(), 2: pa.string_view()}
    # Before: a column was its own operand, walked again down to the depth limit (~200 visits each).
    assert len(visits) < 20
    visits.clear()
    df = qctx.plan(query("select id + $1, case when zone = $2 then $3 else zone end from trips "
                         "where id in ($4, 5) and upper(zone) between $5 and $6")).df
    assert params.placeholder_types(df) == {1: pa.int64(), 2: pa.string_view(), 4: pa.int64(),
                                            5: pa.string_view(), 6: pa.string_view()}
    assert max(visits) < 10


@pytest.fixture
def parses(monkeypatch):
    """The texts sqlglot parses from now on."""
    from icegres.sql import parse

    parse._parse_cached.cache_clear()
    seen: list[str] = []
    real_parse = parse._parse_one
    monkeypatch.setattr(parse, "_parse_one", lambda sql: seen.append(sql) or real_parse(sql))
    return seen


def test_an_expanded_statement_carries_its_tree(qctx, parses):
    """Views and time-travel references are expanded on the statement's tree, and the expanded
    statement takes that tree on with its text: the text written out is not parsed again."""
    from icegres.engine.ddl import parse_ddl
    from icegres.engine.ddl_apply import create_view

    lake = qctx.engine.lakehouse
    view_sql = "SELECT id, zone FROM demo.trips WHERE id > 1"
    create_view(lake, parse_ddl("CREATE VIEW demo.v AS " + view_sql),
                pa.schema([pa.field("id", pa.int64()), pa.field("zone", pa.string())]), view_sql, ["demo"])
    snapshot = lake.catalog.load_table(("demo", "trips")).current_snapshot().snapshot_id
    sent = ["select zone from v where id = 2",
            f"select count(*) as n from trips for version as of {snapshot}",
            f"select v.zone from v join trips for version as of {snapshot} t on t.id = v.id where v.id = 3"]
    found = []
    for sql in sent:
        schema, stream = qctx.start(query(sql))
        found.append([r for b in stream for r in b.to_pyarrow().to_pylist()])
        assert qctx.with_views(query(sql)).sql != sql
    assert found == [[{"zone": "b"}], [{"n": 3}], [{"zone": "c"}]]
    assert sorted(parses) == sorted([*sent, view_sql])


def test_a_route_holds_the_literals_so_it_keys_on_the_text(qctx):
    """Routes key on the text, not the shape (docs/architecture.md, "What the per-statement
    caches key on"): the rewrite reads literal values, so one statement's rewrite filled with
    another's literals would plan something else."""
    from icegres.sql.shape import fill_shape, literal_shape, masked_literals

    path = tuple(qctx.env.search_path)
    for a, b in [("select 'pg_class'::regclass::oid", "select 'pg_type'::regclass::oid"),
                 ("select to_char(now(), 'YYYY')", "select to_char(now(), 'FMDay')")]:
        assert literal_shape(a) == literal_shape(b)
        qctx.plan(query(a))
        qctx.plan(query(b))
        route_a, route_b = qctx.cache.routes.get((a, path)), qctx.cache.routes.get((b, path))
        assert route_a != a and route_b != b  # both took the rewrite path
        assert fill_shape(literal_shape(route_a), masked_literals(b)) != route_b
