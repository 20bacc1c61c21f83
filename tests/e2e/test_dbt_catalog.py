"""The catalog queries dbt-postgres 1.11 sends (its macros, rendered as dbt renders them for a
schema and a relation) answer on icegres as on PostgreSQL 15 holding the same tables and view:
listing relations, a relation's columns, `dbt docs generate`'s catalog, the views' dependencies
from pg_depend, whether a schema exists. tests/e2e/test_dbt.py drives dbt itself; this pins what
its answers must be, without dbt installed."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import psycopg
import pytest

from tests.support.fixtures import real_postgres  # noqa: F401  (session fixture)
from tests.support.icegres_server import running_icegres

pytestmark = pytest.mark.e2e

DATABASE = "dbt_catalog"
USER = "postgres"  # the owner both show: icegres names its user as owner of everything
SCHEMA = "dbtcat"
DDL = [
    f"create schema {SCHEMA}",
    f"create table {SCHEMA}.customers (id integer, name text, signup_date date, is_active boolean,"
    " credit_limit numeric(12,2))",
    f"create table {SCHEMA}.orders (order_id integer, customer_id integer, amount numeric(10,2), status text,"
    " ordered_at date, gift boolean, placed_at timestamp, ratio double precision, big bigint)",
    f"insert into {SCHEMA}.customers values (1, 'Ada', '2024-01-15', true, 1500.50)",
    f"insert into {SCHEMA}.orders values (100, 1, 19.99, 'completed', '2024-04-01', false, null, 0.5, 7)",
    # dbt's view: an ephemeral model's CTE inside, every relation named with its database
    f'create view "{{db}}"."{SCHEMA}"."open_orders" as (with __dbt__cte__stg as (select * from'
    f' "{{db}}"."{SCHEMA}"."orders" where status <> \'cancelled\') select o.order_id, c.name, o.amount'
    f' from __dbt__cte__stg as o join "{{db}}"."{SCHEMA}"."customers" as c on c.id = o.customer_id)',
]

# postgres__list_relations_without_caching (adapters.sql)
LIST_RELATIONS = f"""
    select
      '{{db}}' as database,
      tablename as name,
      schemaname as schema,
      'table' as type
    from pg_tables
    where schemaname ilike '{SCHEMA}'
    union all
    select
      '{{db}}' as database,
      viewname as name,
      schemaname as schema,
      'view' as type
    from pg_views
    where schemaname ilike '{SCHEMA}'
    union all
    select
      '{{db}}' as database,
      matviewname as name,
      schemaname as schema,
      'materialized_view' as type
    from pg_matviews
    where schemaname ilike '{SCHEMA}'
    union all
    select distinct
     '{{db}}' as database,
     proname as name,
     ns.nspname as schema,
     'function' as type
    from pg_proc
     join pg_namespace as ns on pronamespace = ns.oid
    where ns.nspname ilike '{SCHEMA}'
"""

# postgres__get_columns_in_relation (adapters.sql)
COLUMNS = """
      select
          column_name,
          data_type,
          character_maximum_length,
          numeric_precision,
          numeric_scale

      from "{db}".information_schema."columns"
      where table_name = '%s'
        and table_schema = '%s'
      order by ordinal_position
"""

# postgres__get_catalog_relations (catalog.sql), for the schema and for two relations
CATALOG = """
    select
        '{db}' as table_database,
        sch.nspname as table_schema,
        tbl.relname as table_name,
        case tbl.relkind
            when 'v' then 'VIEW'
            when 'm' then 'MATERIALIZED VIEW'
            else 'BASE TABLE'
        end as table_type,
        tbl_desc.description as table_comment,
        col.attname as column_name,
        col.attnum as column_index,
        pg_catalog.format_type(col.atttypid, col.atttypmod) as column_type,
        col_desc.description as column_comment,
        pg_get_userbyid(tbl.relowner) as table_owner

    from pg_catalog.pg_namespace sch
    join pg_catalog.pg_class tbl on tbl.relnamespace = sch.oid
    join pg_catalog.pg_attribute col on col.attrelid = tbl.oid
    left outer join pg_catalog.pg_description tbl_desc on (tbl_desc.objoid = tbl.oid and tbl_desc.objsubid = 0)
    left outer join pg_catalog.pg_description col_desc on (col_desc.objoid = tbl.oid and col_desc.objsubid = col.attnum)
    where (%s)
      and not pg_is_other_temp_schema(sch.oid) -- not a temporary schema belonging to another session
      and tbl.relpersistence in ('p', 'u') -- [p]ermanent table or [u]nlogged table. Exclude [t]emporary tables
      and tbl.relkind in ('r', 'v', 'f', 'p', 'm') -- o[r]dinary table, [v]iew, [f]oreign table, [p]artitioned table, [m]aterialized view. Other values are [i]ndex, [S]equence, [c]omposite type, [t]OAST table
      and col.attnum > 0 -- negative numbers are used for system columns such as oid
      and not col.attisdropped -- column as not been dropped

    order by
        sch.nspname,
        tbl.relname,
        col.attnum
"""
CATALOG_WHERES = [
    f"upper(sch.nspname) = upper('{SCHEMA}')",
    f"(upper(sch.nspname) = upper('{SCHEMA}') and\n           upper(tbl.relname) = upper('orders')) or "
    f"(upper(sch.nspname) = upper('{SCHEMA}') and\n           upper(tbl.relname) = upper('open_orders'))",
]

# postgres__get_relations (relations.sql): which view reads which relation
DEPENDENCIES = r"""
    select distinct
        dependent_namespace.nspname as dependent_schema,
        dependent_class.relname as dependent_name,
        referenced_namespace.nspname as referenced_schema,
        referenced_class.relname as referenced_name

    -- Query for views: views are entries in pg_class with an entry in pg_rewrite, but we avoid
    -- a seq scan on pg_rewrite by leveraging the fact there is an "internal" row in pg_depend for
    -- the view...
    from pg_class as dependent_class
    join pg_namespace as dependent_namespace on dependent_namespace.oid = dependent_class.relnamespace
    join pg_depend as dependent_depend on dependent_depend.refobjid = dependent_class.oid
        and dependent_depend.classid = 'pg_rewrite'::regclass
        and dependent_depend.refclassid = 'pg_class'::regclass
        and dependent_depend.deptype = 'i'

    -- ... and via pg_depend (that has a row per column, hence the need for "distinct" above, and
    -- making sure to exclude the internal row to avoid a view appearing to depend on itself)...
    join pg_depend as joining_depend on joining_depend.objid = dependent_depend.objid
        and joining_depend.classid = 'pg_rewrite'::regclass
        and joining_depend.refclassid = 'pg_class'::regclass
        and joining_depend.refobjid != dependent_depend.refobjid

    -- ... we can find the tables they query from in pg_class, but excluding system tables. Note we
    -- don't need need to exclude _dependent_ system tables, because they only query from other
    -- system tables, and so are automatically excluded by excluding _referenced_ system tables
    join pg_class as referenced_class on referenced_class.oid = joining_depend.refobjid
    join pg_namespace as referenced_namespace on referenced_namespace.oid = referenced_class.relnamespace
        and referenced_namespace.nspname != 'information_schema'
        and referenced_namespace.nspname not like 'pg\_%'

    order by
        dependent_schema, dependent_name, referenced_schema, referenced_name;
"""

# postgres__check_schema_exists, postgres__list_schemas (adapters.sql)
SCHEMA_EXISTS = [f"select count(*) from pg_namespace where nspname = '{SCHEMA}'",
                 "select count(*) from pg_namespace where nspname = 'nope'"]
LIST_SCHEMAS = "select distinct nspname from pg_namespace"


@pytest.fixture(scope="module")
def both(real_postgres: Any, tmp_path_factory: pytest.TempPathFactory) -> Iterator[list[psycopg.Connection]]:  # noqa: F811
    """[PostgreSQL, icegres]: connections to one database each, the same schema in both."""
    with psycopg.connect(real_postgres.dsn(), autocommit=True) as admin:
        admin.execute(f"drop database if exists {DATABASE}")
        admin.execute(f"create database {DATABASE}")
    theirs = real_postgres.dsn().replace(f"dbname={real_postgres.dbname}", f"dbname={DATABASE}")
    data_dir = Path(tmp_path_factory.mktemp("dbtcat")) / "lake"
    with running_icegres(data_dir, args=("--database", DATABASE), user=USER) as srv, \
            psycopg.connect(theirs, autocommit=True) as pg, \
            psycopg.connect(srv.dsn(dbname=DATABASE), autocommit=True) as ours:
        for conn in (pg, ours):
            for statement in DDL:
                conn.execute(statement.format(db=DATABASE))
        yield [pg, ours]


def _rows(conn: psycopg.Connection, sql: str) -> list[tuple[Any, ...]]:
    return conn.execute(sql.format(db=DATABASE)).fetchall()


def test_relations_are_listed_as_postgresql_lists_them(both: list[psycopg.Connection]) -> None:
    pg, ours = (sorted(_rows(c, LIST_RELATIONS)) for c in both)
    assert ours == pg == [(DATABASE, "customers", SCHEMA, "table"), (DATABASE, "open_orders", SCHEMA, "view"),
                          (DATABASE, "orders", SCHEMA, "table")]


@pytest.mark.parametrize("relation", ["customers", "orders", "open_orders"])
def test_a_relations_columns_as_postgresql(both: list[psycopg.Connection], relation: str) -> None:
    pg, ours = (_rows(c, COLUMNS % (relation, SCHEMA)) for c in both)
    assert ours == pg


@pytest.mark.parametrize("where", CATALOG_WHERES, ids=["schema", "relations"])
def test_docs_generate_catalog_as_postgresql(both: list[psycopg.Connection], where: str) -> None:
    pg, ours = (_rows(c, CATALOG % where) for c in both)
    assert ours == pg
    assert {r[2] for r in ours} >= {"orders", "open_orders"}


def test_view_dependencies_as_postgresql(both: list[psycopg.Connection]) -> None:
    pg, ours = (_rows(c, DEPENDENCIES) for c in both)
    assert ours == pg == [(SCHEMA, "open_orders", SCHEMA, "customers"), (SCHEMA, "open_orders", SCHEMA, "orders")]


def test_schemas_as_postgresql(both: list[psycopg.Connection]) -> None:
    for sql in SCHEMA_EXISTS:
        pg, ours = (_rows(c, sql) for c in both)
        assert ours == pg, sql
    pg, ours = ({r[0] for r in _rows(c, LIST_SCHEMAS)} for c in both)
    assert {SCHEMA, "public", "pg_catalog", "information_schema"} <= ours <= pg
