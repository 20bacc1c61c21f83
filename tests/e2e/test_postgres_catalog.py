"""The SQL catalog on a real PostgreSQL: two icegres processes share one catalog."""

from __future__ import annotations

import os
import subprocess
import sys

import psycopg
import pytest

from tests.support.icegres_server import running_icegres

pytestmark = pytest.mark.e2e


def test_two_servers_share_one_postgres_catalog(real_postgres, tmp_path):
    db = f"cat_{os.getpid()}"
    with psycopg.connect(real_postgres.dsn(), autocommit=True) as admin:
        admin.execute(f"create database {db}")
    uri = f"postgresql://{real_postgres.user}@{real_postgres.host}:{real_postgres.port}/{db}"
    warehouse = (tmp_path / "warehouse").as_uri()
    env = {"ICEGRES_CATALOG_URI": uri, "ICEGRES_WAREHOUSE": warehouse}
    subprocess.run([sys.executable, "-m", "icegres", "seed", "--data-dir", str(tmp_path / "a"), "--rows", "5000"],
                   check=True, timeout=300, env={**os.environ, **env}, stdin=subprocess.DEVNULL, capture_output=True)
    (tmp_path / "b").mkdir()
    with running_icegres(tmp_path / "a", env=env) as a, running_icegres(tmp_path / "b", env=env) as b, \
            psycopg.connect(a.dsn(), autocommit=True) as ca, psycopg.connect(b.dsn(), autocommit=True) as cb:
        assert ca.execute("select count(*), max(id) from demo.trips").fetchone() == (5000, 5000)
        assert cb.execute("select count(*), max(id) from demo.trips").fetchone() == (5000, 5000)
        # A table created by another writer through the same catalog is visible to both at once.
        script = (
            "import pyarrow as pa\n"
            "from pyiceberg.catalog.sql import SqlCatalog\n"
            f"cat = SqlCatalog('icegres', uri={uri.replace('postgresql://', 'postgresql+psycopg://')!r}, warehouse={warehouse!r})\n"
            "cat.create_namespace('ops')\n"
            "t = cat.create_table(('ops', 'events'), schema=pa.schema([pa.field('kind', pa.string())]))\n"
            "t.append(pa.table({'kind': ['boot', 'deploy']}))\n"
        )
        subprocess.run([sys.executable, "-c", script], check=True, timeout=120)
        for conn in (ca, cb):
            assert conn.execute("select kind from ops.events order by kind").fetchall() == [("boot",), ("deploy",)]


def test_unreachable_postgres_catalog_fails_start_with_one_line(tmp_path):
    proc = subprocess.run(
        [sys.executable, "-m", "icegres", "serve", "--data-dir", str(tmp_path), "--port", "0",
         "--catalog-uri", "postgresql://ice:hunter2@127.0.0.1:1/nope"],
        capture_output=True, text=True, timeout=120, stdin=subprocess.DEVNULL,
    )
    assert proc.returncode == 1
    lines = [line for line in proc.stderr.strip().splitlines() if line]
    assert len(lines) == 1, proc.stderr
    assert "postgres sql catalog at postgresql://ice:***@127.0.0.1:1/nope" in lines[0]
    assert "hunter2" not in proc.stderr


def test_views_on_a_postgres_catalog_of_the_older_schema(real_postgres, tmp_path):
    """A catalog made before views (Iceberg's JDBC schema V0: no `iceberg_type` column) gets the
    column when icegres opens it; views are then rows beside the tables, seen by both servers."""
    db = f"catv0_{os.getpid()}"
    with psycopg.connect(real_postgres.dsn(), autocommit=True) as admin:
        admin.execute(f"create database {db}")
    uri = f"postgresql://{real_postgres.user}@{real_postgres.host}:{real_postgres.port}/{db}"
    with psycopg.connect(uri, autocommit=True) as raw:
        raw.execute("create table iceberg_tables (catalog_name varchar(255) not null, "
                    "table_namespace varchar(255) not null, table_name varchar(255) not null, "
                    "metadata_location varchar(1000), previous_metadata_location varchar(1000), "
                    "primary key (catalog_name, table_namespace, table_name))")
        raw.execute("create table iceberg_namespace_properties (catalog_name varchar(255) not null, "
                    "namespace varchar(255) not null, property_key varchar(255) not null, "
                    "property_value varchar(1000) not null, "
                    "primary key (catalog_name, namespace, property_key))")
    env = {"ICEGRES_CATALOG_URI": uri, "ICEGRES_WAREHOUSE": (tmp_path / "warehouse").as_uri()}
    (tmp_path / "a").mkdir()
    (tmp_path / "b").mkdir()
    with running_icegres(tmp_path / "a", env=env) as a, running_icegres(tmp_path / "b", env=env) as b, \
            psycopg.connect(a.dsn(), autocommit=True) as ca, psycopg.connect(b.dsn(), autocommit=True) as cb:
        ca.execute("create schema ops")
        ca.execute("create table ops.events (kind text)")
        ca.execute("insert into ops.events values ('boot'), ('deploy'), ('boot')")
        ca.execute("create view ops.kinds as select kind, count(*) as n from ops.events group by kind")
        assert cb.execute("select * from ops.kinds order by kind").fetchall() == [("boot", 2), ("deploy", 1)]
        cb.execute("drop view ops.kinds")
        assert ca.execute("select count(*) from information_schema.views").fetchone() == (0,)
        ca.execute("create view ops.boots as select * from ops.events where kind = 'boot'")
    with psycopg.connect(uri) as raw:
        rows = raw.execute("select table_name, iceberg_type from iceberg_tables order by 1").fetchall()
    assert rows == [("boots", "VIEW"), ("events", "TABLE")]
