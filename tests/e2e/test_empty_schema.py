"""A schema made by CREATE SCHEMA is in pg_namespace, information_schema.schemata and psql's \\dn
at once, before it holds a table, and gone after DROP SCHEMA (as in PostgreSQL)."""

from __future__ import annotations

import subprocess
from pathlib import Path

import psycopg
import pytest

from tests.support.icegres_server import running_icegres

pytestmark = pytest.mark.e2e


def test_an_empty_schema_is_listed_until_dropped(tmp_path: Path) -> None:
    with running_icegres(tmp_path / "data") as srv, psycopg.connect(srv.dsn(), autocommit=True) as conn:
        def listed() -> tuple[bool, bool]:
            ns = conn.execute("select count(*) from pg_namespace where nspname = 'bare'").fetchone()[0]
            info = conn.execute("select count(*) from information_schema.schemata "
                                "where schema_name = 'bare'").fetchone()[0]
            return ns == 1, info == 1

        assert listed() == (False, False)
        conn.execute("create schema bare")
        assert listed() == (True, True)
        dn = subprocess.run(["psql", srv.dsn(), "-XAtc", r"\dn"], capture_output=True, text=True, timeout=60)
        assert dn.returncode == 0, dn.stderr
        assert any(line.split("|")[0] == "bare" for line in dn.stdout.splitlines())
        conn.execute("drop schema bare")
        assert listed() == (False, False)
