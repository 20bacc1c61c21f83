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
