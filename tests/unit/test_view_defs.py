"""Views without a catalog: the stored query, the expansion of statements, dependencies, the
metadata document and the catalog relations that describe views."""

from __future__ import annotations

import pyarrow as pa
import pytest

from icegres.engine import catalog_views, view_ddl, view_defs
from icegres.engine.view_defs import Resolver, ViewDef
from icegres.pg.errors import PgError
from icegres.sql.parse import DIALECT, parse

pytestmark = pytest.mark.unit

TABLES = {("shop", "orders"), ("shop", "cities"), ("public", "t")}


def view(ns: str, name: str, sql: str, columns: tuple[str, ...]) -> ViewDef:
    reads = frozenset(k for k, _ in view_defs.qualified_refs(parse(sql)) if k is not None)
    return ViewDef(ns, name, sql, tuple((c, pa.int64()) for c in columns), f"loc/{name}", reads)


def resolver(views: dict, path: tuple[str, ...] = ("shop", "public")) -> Resolver:
    return Resolver(list(path), lambda s, n: (s, n) in TABLES, views.get, frozenset({"pg_class"}))


def test_qualify_prefixes_each_unqualified_relation_and_keeps_the_text():
    sql = 'select o.id, "T".x from orders o join public."t" "T" on true where id in (select 1 from cities)'
    out = view_defs.qualify(sql, parse(sql), resolver({}))
    assert out == ('select o.id, "T".x from shop.orders o join public."t" "T" on true '
                   "where id in (select 1 from shop.cities)")


def test_qualify_leaves_ctes_and_catalog_relations_alone_and_refuses_unknown_names():
    sql = "with c as (select 1) select * from c, pg_class, t"
    assert view_defs.qualify(sql, parse(sql), resolver({})) == \
        "with c as (select 1) select * from c, pg_class, public.t"
    with pytest.raises(PgError) as caught:
        view_defs.qualify("select * from nope", parse("select * from nope"), resolver({}))
    assert caught.value.sqlstate == "42P01"


def test_qualify_drops_this_databases_name_and_refuses_anothers():
    # dbt names every relation "db"."schema"."table", inside an ephemeral model's CTE too.
    sql = ('with e as (select id from "lake"."shop"."orders") '
           'select * from e join lake . shop.cities c on true join postgres.public.t on true')
    here = Resolver(["shop"], lambda s, n: (s, n) in TABLES, {}.get, frozenset(), database="lake")
    assert view_defs.qualify(sql, parse(sql), here) == (
        'with e as (select id from "shop"."orders") select * from e join shop.cities c on true '
        "join public.t on true")
    for other in ('select * from "other"."shop"."orders"', "select * from orders, other.shop.cities"):
        with pytest.raises(PgError) as caught:
            view_defs.qualify(other, parse(other), here)
        assert caught.value.sqlstate == "0A000", other


def test_a_view_name_resolves_first_along_the_path():
    views = {("shop", "t"): view("shop", "t", "select 1 as a", ("a",))}
    assert resolver(views).resolve(None, "t") == ("view", ("shop", "t"))
    assert resolver(views, ("public", "shop")).resolve(None, "t") == ("table", ("public", "t"))
    assert resolver(views).resolve(None, "pg_class")[0] == "system"
    assert resolver(views).resolve("shop", "nope") is None


def test_expansion_is_a_subquery_named_like_the_view_with_its_columns():
    views = {("shop", "v"): view("shop", "v", "select id, city from shop.orders", ("n", "place"))}
    tree = parse("select v.n, x.place from v join shop.v x on true")
    out, used = view_defs.expand(tree, resolver(views))
    assert used == {("shop", "v")}
    assert out.sql(dialect=DIALECT) == (
        "SELECT v.n, x.place FROM (SELECT id, city FROM shop.orders) AS v(n, place) "
        "JOIN (SELECT id, city FROM shop.orders) AS x(n, place) ON TRUE")
    assert tree.sql(dialect=DIALECT) == "SELECT v.n, x.place FROM v JOIN shop.v AS x ON TRUE"  # not changed


def test_views_over_views_expand_all_the_way_and_a_statement_without_views_is_none():
    views = {("shop", "a"): view("shop", "a", "select id from shop.orders", ("id",)),
             ("shop", "b"): view("shop", "b", "select id from shop.a where id > 1", ("id",))}
    out, used = view_defs.expand(parse("select * from b"), resolver(views))
    assert used == {("shop", "a"), ("shop", "b")}
    assert "shop.orders" in out.sql(dialect=DIALECT) and " a(" in out.sql(dialect=DIALECT)
    assert view_defs.expand(parse("select * from orders"), resolver(views)) is None


def test_a_cycle_is_refused_and_a_missing_base_relation_is_named():
    views = {("shop", "a"): view("shop", "a", "select id from shop.b", ("id",)),
             ("shop", "b"): view("shop", "b", "select id from shop.a", ("id",)),
             ("shop", "c"): view("shop", "c", "select id from shop.gone", ("id",))}
    with pytest.raises(PgError) as caught:
        view_defs.expand(parse("select * from a"), resolver(views))
    assert caught.value.sqlstate == "42P17"
    with pytest.raises(PgError) as caught:
        view_defs.expand(parse("select * from c"), resolver(views))
    assert (caught.value.sqlstate, caught.value.message) == ("42P01", 'relation "shop.gone" does not exist')
    assert 'View "shop.c"' in (caught.value.detail or "")


def test_the_written_table_of_a_dml_statement_is_not_expanded():
    views = {("shop", "v"): view("shop", "v", "select id from shop.orders", ("id",))}
    tree = parse("insert into shop.orders select id from v")
    out, _ = view_defs.expand(tree, resolver(views), view_defs.dml_target(tree))
    assert out.sql(dialect=DIALECT).startswith("INSERT INTO shop.orders SELECT id FROM (SELECT")


def test_dependents_come_before_what_they_read():
    views = {("s", "a"): view("s", "a", "select * from s.t", ("x",)),
             ("s", "b"): view("s", "b", "select * from s.a", ("x",)),
             ("s", "c"): view("s", "c", "select * from s.b join s.a on true", ("x",)),
             ("s", "d"): view("s", "d", "select * from s.other", ("x",))}
    order = view_ddl.dependents(views, {("s", "t")})
    assert set(order) == {("s", "a"), ("s", "b"), ("s", "c")}
    assert order.index(("s", "c")) < order.index(("s", "b")) < order.index(("s", "a"))


def test_a_rename_rewrites_only_the_renamed_relation():
    sql = "select x.a from s.t x join s.tt on true where s.t.a > 0"
    assert view_ddl.renamed_in(sql, parse(sql), ("s", "t"), ("s", "u")) == \
        "select x.a from s.u x join s.tt on true where s.t.a > 0"


def test_the_metadata_document_follows_the_view_spec():
    from pyiceberg.schema import Schema
    from pyiceberg.types import LongType, NestedField, StringType
    from pyiceberg.view.metadata import ViewMetadata

    schema = Schema(NestedField(1, "id", LongType(), required=False), NestedField(2, "city", StringType(), required=False))
    meta = catalog_views.new_metadata("file:///w/shop/v", "shop", "select 1", schema, {}, {"engine-version": "x"})
    parsed = ViewMetadata.model_validate(meta)
    assert parsed.format_version == 1 and parsed.current_version_id == 1
    assert catalog_views.current_sql(meta) == "select 1"
    same = catalog_views.replaced_metadata(meta, "shop", "select 2", schema, {})
    assert [v["version-id"] for v in same["versions"]] == [1, 2] and len(same["schemas"]) == 1
    wider = Schema(*schema.fields, NestedField(3, "n", LongType(), required=False))
    more = catalog_views.replaced_metadata(same, "shop", "select 3", wider, {})
    assert [s["schema-id"] for s in more["schemas"]] == [0, 1]
    assert catalog_views.current_version(more)["schema-id"] == 1
    ViewMetadata.model_validate(more)
    for _ in range(20):
        more = catalog_views.replaced_metadata(more, "shop", "select 4", wider, {})
    assert len(more["versions"]) == catalog_views.VERSIONS_KEPT
    assert len(more["version-log"]) == 23


def test_a_view_another_engine_made_without_postgres_sql_is_kept_but_unusable():
    from pyiceberg.schema import Schema
    from pyiceberg.types import LongType, NestedField

    meta = catalog_views.new_metadata("loc", "s", "select 1", Schema(NestedField(1, "a", LongType())), {}, {})
    meta["versions"][0]["representations"][0]["dialect"] = "spark"
    defined = view_defs.from_metadata("s", "v", "loc/m.json", meta)
    assert defined.error is not None and defined.error.sqlstate == "0A000"
    assert [c for c, _ in defined.columns] == ["a"]


def test_the_catalog_relations_describe_views():
    from icegres.engine import pg_catalog

    col = pg_catalog.ColumnInfo("n", pa.int64(), True, 1)
    snap = pg_catalog.CatalogSnapshot("db", "me", ("shop",), (),
                                      (pg_catalog.ViewInfo("shop", "v", (col,), "select 1 as n"),))
    tables = pg_catalog.build_catalog_tables(snap)
    pg_class = tables["pg_catalog.pg_class"].to_pylist()
    (row,) = [r for r in pg_class if r["relname"] == "v"]
    assert (row["relkind"], row["relnatts"], row["relhasrules"]) == ("v", 1, True)
    attrs = [r for r in tables["pg_catalog.pg_attribute"].to_pylist() if r["attrelid"] == row["oid"]]
    assert [(a["attname"], a["atttypid"], a["attnotnull"]) for a in attrs] == [("n", 20, False)]
    assert tables["pg_catalog.pg_views"].to_pylist()[0]["definition"] == " select 1 as n;"
    views = tables["information_schema.views"].to_pylist()
    assert (views[0]["table_name"], views[0]["is_updatable"]) == ("v", "NO")
    assert pg_catalog.view_definition(snap.index, row["oid"]) == " select 1 as n;"


def test_pg_depend_records_what_each_views_rule_reads_as_postgresql_does():
    # PostgreSQL 15 for `create view s.w as select count(*) from s.v`: on w's _RETURN rule, an
    # internal dependency on w, normal ones on w and on v. (Over table columns it has a row per
    # column used; here one per relation.) dbt's postgres__get_relations reads these.
    from icegres.engine import pg_catalog

    col = pg_catalog.ColumnInfo("n", pa.int64(), True, 1)
    orders = pg_catalog.TableInfo("shop", "orders", (col,))
    snap = pg_catalog.CatalogSnapshot("db", "me", ("shop",), (orders,), (
        pg_catalog.ViewInfo("shop", "v", (col,), "select n from shop.orders", reads=(("shop", "orders"),)),
        pg_catalog.ViewInfo("shop", "w", (col,), "select count(*) from shop.v",
                            reads=(("shop", "v"), ("shop", "gone"))),
    ))
    tables = pg_catalog.build_catalog_tables(snap)
    oid = {r["relname"]: r["oid"] for r in tables["pg_catalog.pg_class"].to_pylist()}
    rules = {r["ev_class"]: r for r in tables["pg_catalog.pg_rewrite"].to_pylist()}
    assert {(r["rulename"], r["ev_type"], r["is_instead"]) for r in rules.values()} == {("_RETURN", "1", True)}
    assert set(rules) == {oid["v"], oid["w"]}
    name = {v: k for k, v in oid.items()}
    depends = sorted((name[rules_of], name[r["refobjid"]], r["deptype"])
                     for r in tables["pg_catalog.pg_depend"].to_pylist()
                     for rules_of in [next(k for k, v in rules.items() if v["oid"] == r["objid"])]
                     if r["classid"] == 2618 and r["refclassid"] == 1259 and r["refobjsubid"] == 0)
    assert depends == [("v", "orders", "n"), ("v", "v", "i"), ("v", "v", "n"),
                       ("w", "v", "n"), ("w", "w", "i"), ("w", "w", "n")]
