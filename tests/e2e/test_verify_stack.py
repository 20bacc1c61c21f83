"""`icegres verify` on the real stack: SeaweedFS's REST catalog and S3, a PostgreSQL 15 tail, and
three keepers verify starts itself. Every claim runs and passes; the scratch namespace is gone
afterwards and the demo namespace untouched."""

from __future__ import annotations

import subprocess
import sys
import uuid
from pathlib import Path

import pytest
from pyiceberg.catalog.rest import RestCatalog

from tests.support.stack import Stack
from tests.support.stack_fixtures import stack  # noqa: F401  (the session's stack)
from tests.support.verify import SCRATCH, run_verify, verdicts, verify_env

pytestmark = [pytest.mark.e2e, pytest.mark.timeout(1200)]


def _tables(catalog: RestCatalog) -> dict[str, str]:
    """Every table outside the scratch namespace and its metadata file."""
    out = {}
    for (namespace,) in catalog.list_namespaces():
        if namespace == SCRATCH:
            continue
        for identifier in catalog.list_tables(namespace):
            out[".".join(identifier)] = catalog.load_table(identifier).metadata_location
    return out


def _tail_rows(url: str) -> tuple[int, int]:
    import psycopg

    with psycopg.connect(url, autocommit=True, connect_timeout=10) as conn:
        counts = []
        for table in ("icegres_tail", "icegres_tail_owner"):
            exists = conn.execute("select to_regclass(%s)", (table,)).fetchone()[0]
            counts.append(conn.execute(f"select count(*) from {table}").fetchone()[0] if exists else 0)
    return counts[0], counts[1]


def test_every_claim_passes_on_seaweedfs_with_a_postgres_tail_and_local_keepers(stack: Stack,  # noqa: F811
                                                                                   tmp_path: Path) -> None:
    env = stack.env()
    subprocess.run([sys.executable, "-m", "icegres", "seed", "--data-dir", str(tmp_path / "seed"), "--rows", "500"],
                   check=True, timeout=600, capture_output=True, stdin=subprocess.DEVNULL, env=verify_env(env))
    catalog = RestCatalog("verify-test", **stack.pyiceberg_properties())
    before = _tables(catalog)
    tail_rows_before = _tail_rows(stack.pg_url)
    proc = run_verify("--data-dir", str(tmp_path / "d"), "--write-buffer-ms", "50", "--tail-url", stack.pg_url,
                      "--local-keepers", "--rounds", "1", "--json", env=env, timeout_s=1100)
    assert proc.returncode == 0, proc.stderr[-4000:]
    results = verdicts(proc)
    assert {name: c["result"] for name, c in results.items()} == {name: "PASS" for name in results}, results
    assert len(results) >= 3
    assert _tables(catalog) == before
    assert _tail_rows(stack.pg_url) == tail_rows_before  # the scratch servers' tail rows are gone
    assert SCRATCH not in [ns[0] for ns in catalog.list_namespaces()]


def test_a_catalog_that_refuses_the_scratch_namespace_is_one_line_and_exit_2(stack: Stack,  # noqa: F811
                                                                            tmp_path: Path) -> None:
    """A SQL catalog on PostgreSQL reached as a role that may read the catalog but not write it."""
    import psycopg

    db = f"icegres_verify_ro_{uuid.uuid4().hex[:8]}"
    with psycopg.connect(stack.pg_url, autocommit=True, connect_timeout=10) as admin:
        admin.execute(f"create database {db}")
    try:
        base = stack.pg_url.rsplit("/", 1)[0]
        warehouse = (tmp_path / "warehouse").as_uri()
        owner = {"ICEGRES_CATALOG_URI": f"{base}/{db}", "ICEGRES_WAREHOUSE": warehouse}
        subprocess.run([sys.executable, "-m", "icegres", "seed", "--rows", "100", "--data-dir", str(tmp_path / "s")],
                       check=True, timeout=300, capture_output=True, stdin=subprocess.DEVNULL, env=verify_env(owner))
        with psycopg.connect(f"{base}/{db}", autocommit=True, connect_timeout=10) as conn:
            conn.execute(f"create role {db} login password 'reader-pw'")
            conn.execute(f"grant select on all tables in schema public to {db}")
        host = base.split("@", 1)[1]
        reader = {"ICEGRES_CATALOG_URI": f"postgresql://{db}:reader-pw@{host}/{db}", "ICEGRES_WAREHOUSE": warehouse}
        proc = run_verify("--data-dir", str(tmp_path / "d"), env=reader, timeout_s=300)
        lines = proc.stderr.strip().splitlines()
        assert proc.returncode == 2 and len(lines) == 1, proc.stderr
        assert lines[0].startswith(f"icegres verify: cannot create the scratch namespace {SCRATCH}: "), lines
        assert "reader-pw" not in proc.stderr and proc.stdout == ""
    finally:
        with psycopg.connect(stack.pg_url, autocommit=True, connect_timeout=10) as admin:
            admin.execute(f"drop database if exists {db} with (force)")
            admin.execute(f"drop role if exists {db}")
