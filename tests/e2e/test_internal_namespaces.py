"""icegres's own namespaces in the catalog (`icegres_auth`: the authorization document;
`icegres_maintenance`: maintenance leases) are neither mounted nor listed: psql's \\dn and \\dt,
pg_namespace, pg_class, information_schema and Flight SQL's GetObjects show the user's schemas
and tables only, and a statement naming an internal table finds no such relation. On the embedded
SQLite catalog and on SeaweedFS's REST catalog (where a named table is looked up one by one)."""

from __future__ import annotations

import shutil
import subprocess
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import adbc_driver_flightsql.dbapi as adbc
import psycopg
import pytest
import trio

from icegres import config
from icegres.engine.acl_store import AclStore
from icegres.engine.catalog import Lakehouse
from icegres.engine.internal import AUTH_NAMESPACE, INTERNAL_NAMESPACES, MAINTENANCE_NAMESPACE
from icegres.engine.lease_store import IcebergLease
from icegres.machines.lease import Lease
from tests.support.icegres_server import start_icegres, stop
from tests.support.stack_fixtures import stack  # noqa: F401  (session fixture)

pytestmark = [pytest.mark.e2e, pytest.mark.timeout(300)]


def _populate(lakehouse: Lakehouse, schema: str) -> tuple[str, str]:
    """A user table, the authorization store and a lease table: (acl table, lease table)."""
    from pyiceberg.schema import Schema
    from pyiceberg.types import LongType, NestedField

    lakehouse.create_namespace_if_missing(schema)
    lakehouse.create_table(schema, "t", Schema(NestedField(1, "id", LongType(), required=False)))
    acl_table = f"acl_{uuid.uuid4().hex[:8]}"
    trio.run(AclStore(lakehouse, table=acl_table).change, "first", lambda doc: '{"roles": {}}')
    lease = IcebergLease.for_table(lakehouse, schema, "t")
    lease.swap(-1, Lease(0, "server", "token", 1, 60.0, True))
    assert {AUTH_NAMESPACE, MAINTENANCE_NAMESPACE} <= set(lakehouse.listing(internal=True).namespaces)
    return acl_table, lease.key[1]


@pytest.fixture(scope="module", params=["embedded", "seaweedfs"])
def served(request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory) -> Iterator[dict[str, Any]]:
    data_dir = tmp_path_factory.mktemp("internal") / "data"
    data_dir.mkdir()
    env = None
    schema = "pub"
    if request.param == "embedded":
        lakehouse = Lakehouse.embedded(data_dir)
    else:
        env = request.getfixturevalue("stack").env()
        lakehouse = Lakehouse.from_settings(config.resolve({}, environ=env))
        schema = f"pub_{uuid.uuid4().hex[:8]}"
    acl_table, lease_table = _populate(lakehouse, schema)
    started = start_icegres(["serve", "--data-dir", str(data_dir), "--host", "127.0.0.1", "--port", "0",
                             "--flight-port", "0"], log_dir=data_dir.parent, env=env)
    try:
        yield {"pg": f"host=127.0.0.1 port={started.ports['port']} user=icegres dbname=icegres",
               "flight": f"grpc://127.0.0.1:{started.ports['flight_port']}", "schema": schema,
               "acl": acl_table, "lease": lease_table, "lakehouse": lakehouse}
    finally:
        stop(started.proc)


def _internal_in(text: str) -> list[str]:
    return [ns for ns in sorted(INTERNAL_NAMESPACES) if ns in text]


def test_pg_catalog_and_information_schema_list_the_users_tables_only(served: dict[str, Any]) -> None:
    schema = served["schema"]
    with psycopg.connect(served["pg"], autocommit=True) as conn:
        # Mounted first by name, as a statement would (REST catalogs mount named tables on demand).
        assert conn.execute(f"select count(*) from {schema}.t").fetchone() == (0,)
        queries = {
            "pg_namespace": "select nspname from pg_namespace",
            "pg_class": "select n.nspname || '.' || c.relname from pg_class c "
                        "join pg_namespace n on n.oid = c.relnamespace",
            "schemata": "select schema_name from information_schema.schemata",
            "tables": "select table_schema || '.' || table_name from information_schema.tables",
        }
        seen = {name: [row[0] for row in conn.execute(sql).fetchall()] for name, sql in queries.items()}
        assert schema in seen["pg_namespace"] and f"{schema}.t" in seen["pg_class"], seen
        assert schema in seen["schemata"] and f"{schema}.t" in seen["tables"], seen
        for name, values in seen.items():
            assert not _internal_in(" ".join(values)), (name, values)
        for table in (f"{AUTH_NAMESPACE}.{served['acl']}", f"{MAINTENANCE_NAMESPACE}.{served['lease']}"):
            with pytest.raises(psycopg.Error) as info:
                conn.execute(f"select * from {table}")
            assert info.value.sqlstate == "42P01", (table, info.value)


def test_ddl_cannot_create_drop_or_write_in_an_internal_namespace(served: dict[str, Any]) -> None:
    acl = f"{AUTH_NAMESPACE}.{served['acl']}"
    refused = {
        f"create schema {AUTH_NAMESPACE}": "42939",
        f"create schema if not exists {MAINTENANCE_NAMESPACE}": "42939",
        f"drop schema {AUTH_NAMESPACE} cascade": "3F000",
        f"create table {AUTH_NAMESPACE}.mine (a int)": "3F000",
        f"drop table {acl}": "42P01",
        f"alter table {acl} rename to gone": "42P01",
        f"insert into {acl} values ('x')": "42P01",
    }
    with psycopg.connect(served["pg"], autocommit=True) as conn:
        for sql, sqlstate in refused.items():
            with pytest.raises(psycopg.Error) as info:
                conn.execute(sql)
            assert info.value.sqlstate == sqlstate, (sql, info.value.sqlstate, info.value)
    # The records are untouched.
    assert served["lakehouse"].load_table(AUTH_NAMESPACE, served["acl"]).current_snapshot() is not None
    assert AclStore(served["lakehouse"], table=served["acl"]).read()[1] == '{"roles": {}}'


def test_psql_lists_the_users_schemas_and_tables_only(served: dict[str, Any]) -> None:
    psql = shutil.which("psql")
    assert psql, "psql is installed by infra/system-deps.sh"
    for command in (r"\dn", r"\dt *.*"):
        out = subprocess.run([psql, served["pg"], "-X", "-c", command], capture_output=True, text=True, timeout=60)
        assert out.returncode == 0, out.stderr
        assert served["schema"] in out.stdout, (command, out.stdout)
        assert not _internal_in(out.stdout), (command, out.stdout)


def test_flight_sql_get_objects_lists_the_users_schemas_and_tables_only(served: dict[str, Any]) -> None:
    with adbc.connect(served["flight"], autocommit=True) as conn:
        [catalog] = conn.adbc_get_objects(depth="tables").read_all().to_pylist()
        schemas = {s["db_schema_name"]: [t["table_name"] for t in s["db_schema_tables"] or []]
                   for s in catalog["catalog_db_schemas"]}
        assert "t" in schemas.get(served["schema"], []), schemas
        assert not INTERNAL_NAMESPACES & set(schemas), schemas
        for name in INTERNAL_NAMESPACES:
            assert conn.adbc_get_objects(depth="tables", db_schema_filter=name).read_all().to_pylist() in (
                [], [{"catalog_name": "icegres", "catalog_db_schemas": []}]), name


def test_the_listing_leaves_them_out_unless_asked(tmp_path: Path) -> None:
    """The listing itself, without a server: what mounting and every engine listing read; the
    orphan sweep asks for them (their files are not orphans)."""
    lakehouse = Lakehouse.embedded(tmp_path)
    _populate(lakehouse, "pub")
    listing = lakehouse.listing()
    assert listing.namespaces == ("pub",) and [t.name for t in listing.tables] == ["t"]
    everything = lakehouse.listing(internal=True)
    assert set(everything.namespaces) == {"pub", AUTH_NAMESPACE, MAINTENANCE_NAMESPACE}
    assert len(everything.tables) == 3
