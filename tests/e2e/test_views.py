"""Views: CREATE [OR REPLACE] VIEW, DROP VIEW, ALTER VIEW, views over views, the catalog
relations that describe them, and views as catalog objects — seen by every server on the same
catalog, after a restart, over Flight SQL, and by pyiceberg reading the catalog as Iceberg views.
"""

from __future__ import annotations

import json
import sqlite3
import subprocess
import sys
import textwrap
from collections.abc import Iterator
from pathlib import Path

import psycopg
import pytest

from tests.support.icegres_server import running_icegres

pytestmark = pytest.mark.e2e

SETUP = """
create schema shop;
create table shop.orders (id bigint, city text, amount double precision);
insert into shop.orders values (1, 'Berlin', 10.0), (2, 'Berlin', 5.5), (3, 'Paris', 7.0);
"""


def lake(data_dir: Path, code: str) -> None:
    """Change the catalog from another process, as another Iceberg engine would."""
    script = textwrap.dedent(f"""
        from pathlib import Path
        from icegres.engine.catalog import Lakehouse
        lh = Lakehouse.embedded(Path({str(data_dir)!r}))
        cat = lh.catalog
    """) + textwrap.dedent(code)
    subprocess.run([sys.executable, "-c", script], check=True, timeout=120)


@pytest.fixture(scope="module")
def data_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return tmp_path_factory.mktemp("views") / "data"


@pytest.fixture(scope="module")
def server(data_dir: Path) -> Iterator[object]:
    with running_icegres(data_dir) as srv:
        with psycopg.connect(srv.dsn(), autocommit=True) as c:
            c.execute(SETUP)
        yield srv


@pytest.fixture
def conn(server) -> Iterator[psycopg.Connection]:
    with psycopg.connect(server.dsn(), autocommit=True) as c:
        c.execute("set search_path = shop, public")
        yield c


def _error(conn: psycopg.Connection, sql: str) -> tuple[str | None, str]:
    try:
        conn.execute(sql)
    except psycopg.Error as err:
        return err.diag.sqlstate, err.diag.message_primary or ""
    return None, ""


def test_a_view_answers_with_its_query_and_names_its_columns(conn):
    conn.execute("create view by_city as select city, count(*), sum(amount) as total "
                 "from orders group by city")
    cur = conn.execute("select * from by_city order by city")
    assert [d.name for d in cur.description] == ["city", "count", "total"]
    assert cur.fetchall() == [("Berlin", 2, 15.5), ("Paris", 1, 7.0)]
    assert conn.execute("select b.total from shop.by_city b where b.city = 'Paris'").fetchone() == (7.0,)
    conn.execute("drop view by_city")


def test_a_column_list_renames_and_a_view_over_a_view_reads_through(conn):
    conn.execute("create view big (order_id, place) as select id, city from orders where amount > 6")
    conn.execute("create view big_berlin as select order_id from big where place = 'Berlin'")
    assert conn.execute("select * from big_berlin").fetchall() == [(1,)]
    # A new commit to the base table is seen through both views at once.
    conn.execute("insert into orders values (4, 'Berlin', 99.0)")
    assert conn.execute("select * from big_berlin order by 1").fetchall() == [(1,), (4,)]
    conn.execute("delete from orders where id = 4")
    conn.execute("drop view big_berlin, big")


def test_create_or_replace_keeps_columns_and_may_add_some(conn):
    conn.execute("create view v_rep as select id, city from orders")
    conn.execute("create or replace view v_rep as select id, city, amount from orders where id < 3")
    assert conn.execute("select * from v_rep order by id").fetchall() == [(1, "Berlin", 10.0), (2, "Berlin", 5.5)]
    assert _error(conn, "create or replace view v_rep as select id from orders")[0] == "42P16"
    assert _error(conn, "create or replace view v_rep as select city, id, amount from orders")[0] == "42P16"
    conn.execute("drop view v_rep")


def test_dependents_restrict_and_cascade(conn):
    conn.execute("create table t_dep (a int)")
    conn.execute("create view v_a as select a from t_dep")
    conn.execute("create view v_b as select a from v_a")
    assert _error(conn, "drop view v_a")[0] == "2BP01"
    assert _error(conn, "drop table t_dep")[0] == "2BP01"
    assert _error(conn, "drop view v_a restrict")[0] == "2BP01"
    notices: list[str] = []
    conn.add_notice_handler(lambda d: notices.append(d.message_primary or ""))
    conn.execute("drop table t_dep cascade")
    assert notices == ["drop cascades to 2 other objects"]
    assert conn.execute("select count(*) from pg_class where relname in ('t_dep', 'v_a', 'v_b')").fetchone() == (0,)


def test_rename_takes_dependents_along(conn):
    conn.execute("create view v_r1 as select id from orders")
    conn.execute("create view v_r2 as select id from v_r1 where id = 1")
    conn.execute("alter view v_r1 rename to v_r1b")
    assert conn.execute("select * from v_r2").fetchall() == [(1,)]
    assert "v_r1b" in conn.execute("select pg_get_viewdef('v_r2'::regclass)").fetchone()[0]
    conn.execute("alter table v_r1b rename to v_r1c")  # ALTER TABLE renames a view too
    assert conn.execute("select * from v_r2").fetchall() == [(1,)]
    conn.execute("drop view v_r1c cascade")


def test_writes_into_a_view_are_refused(conn):
    conn.execute("create view v_ro as select id, city from orders")
    for sql, message in [("insert into v_ro values (9, 'x')", 'cannot insert into view "v_ro"'),
                         ("update v_ro set city = 'x'", 'cannot update view "v_ro"'),
                         ("delete from v_ro", 'cannot delete from view "v_ro"')]:
        assert _error(conn, sql) == ("0A000", message)
    assert _error(conn, "truncate v_ro") == ("42809", '"v_ro" is not a table')
    conn.execute("drop view v_ro")


def test_a_view_in_a_transaction_reads_its_snapshot_and_its_writes(server, conn):
    conn.execute("create view v_tx as select count(*) as n from orders")
    try:
        with psycopg.connect(server.dsn()) as tx:  # not autocommit: a transaction block
            assert tx.execute("select n from shop.v_tx").fetchone() == (3,)
            conn.execute("insert into orders values (5, 'Rome', 1.0)")  # another session commits
            assert tx.execute("select n from shop.v_tx").fetchone() == (3,)
            tx.execute("insert into shop.orders values (6, 'Rome', 1.0)")
            assert tx.execute("select n from shop.v_tx").fetchone() == (4,)
            tx.rollback()
        assert conn.execute("select n from v_tx").fetchone() == (4,)
    finally:
        conn.execute("delete from orders where id >= 5")
        conn.execute("drop view v_tx")


def test_view_ddl_in_a_transaction_block_is_the_blocks_until_commit(server, conn):
    with psycopg.connect(server.dsn()) as tx:
        tx.execute("create view shop.v_ddl as select 1 as one")
        assert tx.execute("select one from shop.v_ddl").fetchone() == (1,)
        with pytest.raises(psycopg.errors.UndefinedTable):
            conn.execute("select one from v_ddl")
        tx.rollback()
    with pytest.raises(psycopg.errors.UndefinedTable):
        conn.execute("select one from v_ddl")
    with psycopg.connect(server.dsn()) as tx:
        tx.execute("create view shop.v_ddl as select 1 as one")
        tx.commit()
    assert conn.execute("select one from v_ddl").fetchone() == (1,)
    conn.execute("drop view v_ddl")


def test_the_catalog_describes_views(conn):
    conn.execute("create view v_cat as select id, city from orders")
    assert conn.execute(
        "select c.relkind, c.relnatts from pg_class c join pg_namespace n on n.oid = c.relnamespace "
        "where n.nspname = 'shop' and c.relname = 'v_cat'").fetchone() == ("v", 2)
    assert conn.execute(
        "select attname, format_type(atttypid, atttypmod) from pg_attribute "
        "where attrelid = 'shop.v_cat'::regclass and attnum > 0 order by attnum").fetchall() == [
        ("id", "bigint"), ("city", "text")]
    assert conn.execute("select table_type, is_insertable_into from information_schema.tables "
                        "where table_schema = 'shop' and table_name = 'v_cat'").fetchone() == ("VIEW", "NO")
    definition = conn.execute("select view_definition from information_schema.views "
                              "where table_schema = 'shop' and table_name = 'v_cat'").fetchone()[0]
    assert definition == " select id, city from shop.orders;"
    assert conn.execute("select pg_get_viewdef('shop.v_cat'::regclass, true)").fetchone() == (definition,)
    assert conn.execute("select definition from pg_views where viewname = 'v_cat'").fetchone() == (definition,)
    assert conn.execute("select pg_get_viewdef('shop.orders'::regclass)").fetchone() == (None,)
    conn.execute("drop view v_cat")


def test_another_server_on_the_same_catalog_sees_views_come_and_go(server, conn):
    with running_icegres(server.data_dir) as other, psycopg.connect(other.dsn(), autocommit=True) as c2:
        assert _error(c2, "select * from shop.v_two")[0] == "42P01"
        conn.execute("create view v_two as select id from orders where city = 'Paris'")
        assert c2.execute("select * from shop.v_two").fetchall() == [(3,)]
        c2.execute("create or replace view shop.v_two as select id from shop.orders where city = 'Berlin'")
        assert conn.execute("select * from v_two order by id").fetchall() == [(1,), (2,)]
        conn.execute("drop view v_two")
        assert _error(c2, "select * from shop.v_two")[0] == "42P01"
        assert c2.execute("select count(*) from pg_views where viewname = 'v_two'").fetchone() == (0,)


def test_a_view_whose_table_another_engine_dropped_says_which_relation_is_missing(tmp_path):
    data_dir = tmp_path / "data"
    with running_icegres(data_dir) as srv, psycopg.connect(srv.dsn(), autocommit=True) as c:
        c.execute("create table gone (a int)")
        c.execute("create view over_gone as select a from gone")
        c.execute("create view over_over as select a from over_gone")
        lake(data_dir, 'cat.drop_table(("public", "gone"))')
        for view in ("over_gone", "over_over"):
            with pytest.raises(psycopg.Error) as caught:
                c.execute(f"select * from {view}")
            assert caught.value.diag.sqlstate == "42P01"
            assert caught.value.diag.message_primary == 'relation "public.gone" does not exist'
            assert "over_gone" in (caught.value.diag.message_detail or "")
    # A restart over the broken view starts, and the view is still there to drop.
    with running_icegres(data_dir) as srv, psycopg.connect(srv.dsn(), autocommit=True) as c:
        assert c.execute("select count(*) from pg_views where viewname like 'over_%'").fetchone() == (2,)
        c.execute("drop view over_gone cascade")


def test_views_survive_a_restart(tmp_path):
    data_dir = tmp_path / "data"
    with running_icegres(data_dir) as srv, psycopg.connect(srv.dsn(), autocommit=True) as c:
        c.execute("create table kept (a int)")
        c.execute("insert into kept values (1), (2)")
        c.execute("create view kept_v (n) as select count(*) from kept")
    with running_icegres(data_dir) as srv, psycopg.connect(srv.dsn(), autocommit=True) as c:
        assert c.execute("select n from kept_v").fetchone() == (2,)


def test_flight_sql_reads_a_view(server, conn):
    import adbc_driver_flightsql.dbapi as adbc

    from tests.e2e.test_flightsql import flight_server

    conn.execute("create view v_flight as select city, sum(amount) as total from orders group by city")
    try:
        with flight_server(server.data_dir) as (uri, _, _, _), adbc.connect(uri, autocommit=True) as fc, \
                fc.cursor() as cur:
            cur.execute("select * from shop.v_flight order by city")
            assert cur.fetchall() == [("Berlin", 15.5), ("Paris", 7.0)]
            cur.execute("create view shop.v_flight2 as select city from shop.v_flight")
            cur.execute("select count(*) from shop.v_flight2")
            assert cur.fetchone() == (2,)
            objects = fc.adbc_get_objects(depth="tables", db_schema_filter="shop").read_all().to_pylist()
            tables = {t["table_name"]: t["table_type"] for c in objects for s in c["catalog_db_schemas"]
                      for t in s["db_schema_tables"]}
            assert tables["v_flight"] == "VIEW" and tables["orders"] == "TABLE"
            assert fc.adbc_get_table_schema("v_flight", db_schema_filter="shop").names == ["city", "total"]
        assert conn.execute("select count(*) from v_flight2").fetchone() == (2,)
    finally:
        conn.execute("drop view v_flight cascade")


def test_the_sql_catalog_holds_an_iceberg_view(server, conn, data_dir):
    """The row and the metadata file are what Iceberg's JDBC catalog and the view spec say."""
    from pyiceberg.view.metadata import ViewMetadata

    conn.execute("create view v_spec (n, place) as select id, city from orders")
    try:
        db = sqlite3.connect(data_dir / "catalog.db")
        rows = db.execute("select table_namespace, table_name, metadata_location, iceberg_type "
                          "from iceberg_tables where table_name in ('v_spec', 'orders') order by 2").fetchall()
        db.close()
        assert [(r[0], r[1], r[3]) for r in rows] == [("shop", "orders", "TABLE"), ("shop", "v_spec", "VIEW")]
        location = rows[1][2]
        assert location.endswith(".metadata.json") and "/metadata/00000-" in location
        doc = json.loads(Path(location.removeprefix("file://")).read_text())
        meta = ViewMetadata.model_validate(doc)  # pyiceberg's model of the spec
        assert meta.format_version == 1
        version = next(v for v in meta.versions if v.version_id == meta.current_version_id)
        (rep,) = version.representations
        assert (rep.root.type, rep.root.dialect) == ("sql", "postgres")
        assert rep.root.sql == "select id, city from shop.orders"
        assert version.default_namespace == ("shop",) or list(version.default_namespace) == ["shop"]
        schema = next(s for s in meta.schemas if s.schema_id == version.schema_id)
        assert [f.name for f in schema.fields] == ["n", "place"]
        assert [h.version_id for h in meta.version_log] == [1]
        assert version.summary.get("engine-name") == "icegres"
        conn.execute("create or replace view v_spec (n, place) as select id, city from orders where id > 1")
        db = sqlite3.connect(data_dir / "catalog.db")
        new, previous = db.execute("select metadata_location, previous_metadata_location from iceberg_tables "
                                   "where table_name = 'v_spec'").fetchone()
        db.close()
        assert previous == location and "/metadata/00001-" in new
        meta = ViewMetadata.model_validate(json.loads(Path(new.removeprefix("file://")).read_text()))
        assert meta.current_version_id == 2 and [h.version_id for h in meta.version_log] == [1, 2]
        assert len(meta.schemas) == 1  # the same columns: the schema is reused
    finally:
        conn.execute("drop view v_spec")
    # pyiceberg's own table listing does not take the view row for a table.
    lake(data_dir, """
        assert ("shop", "orders") in cat.list_tables("shop")
        assert all(t[-1] != "v_spec" for t in cat.list_tables("shop"))
    """)


def test_two_servers_on_a_rest_catalog_share_views(stack, tmp_path):
    """The same on SeaweedFS's Iceberg REST catalog (its view endpoints), where each statement
    checks the names it gives, and the views and tables those views read."""
    env = stack.env()
    with running_icegres(tmp_path / "a", env=env) as a_srv, running_icegres(tmp_path / "b", env=env) as b_srv, \
            psycopg.connect(a_srv.dsn(), autocommit=True) as a, psycopg.connect(b_srv.dsn(), autocommit=True) as b:
        a.execute("drop schema if exists rview cascade")
        a.execute("create schema rview")
        a.execute("create table rview.t (a int)")
        a.execute("insert into rview.t values (1), (2)")
        a.execute("create view rview.v as select a from rview.t")
        assert b.execute("select * from rview.v order by a").fetchall() == [(1,), (2,)]
        b.execute("create or replace view rview.v as select a, a * 10 as b from rview.t")
        assert a.execute("select * from rview.v order by a").fetchall() == [(1, 10), (2, 20)]
        a.execute("create view rview.w as select b from rview.v")
        assert _error(b, "drop view rview.v")[0] == "2BP01"
        b.execute("alter view rview.v rename to v2")
        assert a.execute("select * from rview.w order by b").fetchall() == [(10,), (20,)]
        # The view w reads changes elsewhere; the same statement text on a sees it.
        b.execute("create or replace view rview.v2 as select a, a * 100 as b from rview.t")
        assert a.execute("select * from rview.w order by b").fetchall() == [(100,), (200,)]
        assert a.execute("select relname, relkind from pg_class where relnamespace = 'rview'::regnamespace "
                         "order by 1").fetchall() == [("t", "r"), ("v2", "v"), ("w", "v")]
        # An unqualified name of a table this server has not read yet resolves at CREATE VIEW.
        a.execute("create table rview.t2 (c int)")
        b.execute("set search_path = rview")
        b.execute("create view w2 as select c from t2")
        assert a.execute("select definition from pg_views where viewname = 'w2'").fetchone() == (
            " select c from rview.t2;",)
        b.execute("drop schema rview cascade")
        assert _error(a, "select * from rview.w")[0] == "42P01"


def test_explain_cursors_and_copy_read_a_view(conn):
    conn.execute("create view v_misc as select id, city from orders where id < 3")
    try:
        plan = "\n".join(r[1] for r in conn.execute("explain select * from v_misc").fetchall())
        assert "orders" in plan
        with conn.transaction():
            conn.execute("declare c cursor for select id from v_misc order by id")
            assert conn.execute("fetch all from c").fetchall() == [(1,), (2,)]
        with conn.cursor().copy("copy (select * from v_misc order by id) to stdout") as copy:
            assert b"".join(bytes(chunk) for chunk in copy) == b"1\tBerlin\n2\tBerlin\n"
    finally:
        conn.execute("drop view v_misc")


def test_a_view_reads_rows_the_write_buffer_acked(tmp_path):
    with running_icegres(tmp_path / "data", args=("--write-buffer-ms", "60000")) as srv, \
            psycopg.connect(srv.dsn(), autocommit=True) as c:
        c.execute("create table buf (id bigint, v text)")
        c.execute("create view buf_v as select id from buf where v = 'x'")
        c.execute("insert into buf values (1, 'x'), (2, 'y')")  # acked from the buffer, not yet in the lake
        assert c.execute("select * from buf_v").fetchall() == [(1,)]
        c.execute("create table other (id bigint)")
        c.execute("insert into other values (1), (2)")
        # The DELETE reads buf only through the view: buf's buffered rows must reach the lake first.
        assert c.execute("delete from other where id in (select id from buf_v)").rowcount == 1
        assert c.execute("select * from other").fetchall() == [(2,)]
