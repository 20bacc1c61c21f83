"""Exact freshness: a statement sees every commit that finished before it began, from any process."""

from __future__ import annotations

import subprocess
import sys
import textwrap

import psycopg
import pytest

from tests.support.icegres_server import running_icegres

pytestmark = pytest.mark.e2e


def lake(data_dir, code: str) -> None:
    """Change the lakehouse from another process, the way any other Iceberg writer would."""
    script = textwrap.dedent(
        f"""
        import pyarrow as pa
        from pathlib import Path
        from icegres.engine.catalog import Lakehouse
        lh = Lakehouse.embedded(Path({str(data_dir)!r}))
        cat = lh.catalog
        """
    ) + textwrap.dedent(code)
    subprocess.run([sys.executable, "-c", script], check=True, timeout=120)


def test_commits_tables_and_namespaces_from_other_processes(tmp_path):
    data_dir = tmp_path / "data"
    lake(data_dir, """
        cat.create_namespace("sales")
        t = cat.create_table(("sales", "orders"), schema=pa.schema([pa.field("id", pa.int64()), pa.field("amount", pa.float64())]))
        t.append(pa.table({"id": [1, 2], "amount": [1.5, 2.5]}))
    """)
    with running_icegres(data_dir) as srv, psycopg.connect(srv.dsn(), autocommit=True) as c:
        assert c.execute("select count(*), sum(amount) from sales.orders").fetchone() == (2, 4.0)
        lake(data_dir, """
            t = cat.load_table(("sales", "orders"))
            t.append(pa.table({"id": [3], "amount": [10.0]}))
        """)
        assert c.execute("select count(*), sum(amount) from sales.orders").fetchone() == (3, 14.0)
        lake(data_dir, """
            cat.create_namespace("hr")
            t = cat.create_table(("hr", "people"), schema=pa.schema([pa.field("name", pa.string())]))
            t.append(pa.table({"name": ["ada"]}))
        """)
        assert c.execute("select name from hr.people").fetchall() == [("ada",)]
        assert ("hr",) in c.execute("select nspname from pg_catalog.pg_namespace").fetchall()
        # Schema evolution by another writer: a renamed column is read by field id, an added one is NULL.
        lake(data_dir, """
            t = cat.load_table(("sales", "orders"))
            with t.update_schema() as u:
                u.rename_column("amount", "total")
                u.add_column("note", __import__("pyiceberg.types", fromlist=["StringType"]).StringType())
        """)
        rows = c.execute("select id, total, note from sales.orders order by id").fetchall()
        assert rows == [(1, 1.5, None), (2, 2.5, None), (3, 10.0, None)]
        lake(data_dir, """cat.drop_table(("hr", "people"))""")
        with pytest.raises(psycopg.errors.UndefinedTable):
            c.execute("select * from hr.people")
