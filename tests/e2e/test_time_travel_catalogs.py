"""Time travel, metadata tables, refs, the snapshot procedures and `icegres branch --namespace` on
the two shared catalogs: SeaweedFS's REST catalog (S3 data, transactions/commit for the
multi-table commit) and a SQL catalog on a real PostgreSQL 15. The embedded catalog is
test_time_travel.py's and test_branch_cli.py's."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import uuid
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import psycopg
import pytest

from tests.support.icegres_server import running_icegres

pytestmark = pytest.mark.e2e


@dataclass
class Catalog:
    name: str
    env: dict[str, str]
    data_dir: Path


@pytest.fixture(params=["rest", "postgres"])
def catalog(request: pytest.FixtureRequest, tmp_path: Path) -> Catalog:
    if request.param == "rest":
        stack = request.getfixturevalue("stack")
        return Catalog("rest", dict(stack.env()), tmp_path / "data")
    pg = request.getfixturevalue("real_postgres")
    db = f"tt_{uuid.uuid4().hex[:10]}"
    with psycopg.connect(pg.dsn(), autocommit=True) as admin:
        admin.execute(f"create database {db}")
    env = {"ICEGRES_CATALOG_URI": f"postgresql://{pg.user}@{pg.host}:{pg.port}/{db}",
           "ICEGRES_WAREHOUSE": (tmp_path / "warehouse").as_uri()}
    return Catalog("postgres", env, tmp_path / "data")


@pytest.fixture
def server(catalog: Catalog) -> Iterator[tuple[Catalog, str]]:
    catalog.data_dir.mkdir(parents=True, exist_ok=True)
    with running_icegres(catalog.data_dir, env=catalog.env) as srv:
        yield catalog, srv.dsn()


def icegres_branch(catalog: Catalog, *args: str) -> subprocess.CompletedProcess[str]:
    clean = {k: v for k, v in os.environ.items() if not k.startswith("ICEGRES_")}
    return subprocess.run([sys.executable, "-m", "icegres", "branch", *args, "--data-dir", str(catalog.data_dir),
                           "--log-level", "warning"], capture_output=True, text=True, timeout=180,
                          env={**clean, **catalog.env}, stdin=subprocess.DEVNULL)


def test_time_travel_refs_and_procedures(server):
    catalog, dsn = server
    ns = f"tt_{uuid.uuid4().hex[:8]}"
    with psycopg.connect(dsn, autocommit=True) as c:
        c.execute(f"create schema {ns}")
        c.execute(f"create table {ns}.t (id bigint, v text)")
        c.execute(f"insert into {ns}.t values (1, 'a'), (2, 'b')")
        first = c.execute(f'select snapshot_id from {ns}."t$snapshots"').fetchone()[0]
        c.execute(f"insert into {ns}.t values (3, 'c')")
        assert c.execute(f"select count(*) from {ns}.t for version as of {first}").fetchone() == (2,)
        assert c.execute(f'select count(*) from {ns}."t@{first}"').fetchone() == (2,)
        assert c.execute(f'select count(*) from {ns}."t$history"').fetchone() == (2,)
        files = c.execute(f'select file_path from {ns}."t$files"').fetchall()
        assert len(files) == 2
        assert all(p.startswith("s3") for (p,) in files) == (catalog.name == "rest")
        c.execute(f"alter table {ns}.t create tag v1 as of version {first}")
        c.execute(f"alter table {ns}.t create branch dev")
        assert c.execute(f"select count(*) from {ns}.t for version as of 'v1'").fetchone() == (2,)
        assert c.execute(f'select count(*) from {ns}."t@dev"').fetchone() == (3,)
        c.execute(f"call system.rollback_to_snapshot('{ns}.t', {first})")
        assert c.execute(f"select count(*) from {ns}.t").fetchone() == (2,)
        c.execute(f"call system.fast_forward('{ns}.t', 'main', 'dev')")
        assert c.execute(f"select count(*) from {ns}.t").fetchone() == (3,)
        refs = c.execute(f'select name, type from {ns}."t$refs" order by name').fetchall()
        assert refs == [("dev", "BRANCH"), ("main", "BRANCH"), ("v1", "TAG")]


def test_branch_a_namespace_in_one_commit_diff_and_merge(server):
    catalog, dsn = server
    ns = f"br_{uuid.uuid4().hex[:8]}"
    with psycopg.connect(dsn, autocommit=True) as c:
        c.execute(f"create schema {ns}")
        for name in ("a", "b", "c"):
            c.execute(f"create table {ns}.{name} (id bigint)")
            c.execute(f"insert into {ns}.{name} values (1)")
    created = icegres_branch(catalog, "create", "preview", "--namespace", ns, "--json")
    assert created.returncode == 0, created.stderr
    assert sorted(json.loads(created.stdout)["created"]) == [f"{ns}.a", f"{ns}.b", f"{ns}.c"]
    with psycopg.connect(dsn, autocommit=True) as c:
        c.execute(f"insert into {ns}.b values (2), (3)")
        assert c.execute(f'select count(*) from {ns}."b@preview"').fetchone() == (1,)
    diff = icegres_branch(catalog, "diff", "preview", "main", "--namespace", ns, "--json")
    assert diff.returncode == 0, diff.stderr
    states = {d["table"]: (d["state"], d["rows_added"]) for d in json.loads(diff.stdout)}
    assert states == {f"{ns}.a": ("same", 0), f"{ns}.b": ("advanced", 2), f"{ns}.c": ("same", 0)}
    merged = icegres_branch(catalog, "merge", "main", "preview", "--namespace", ns, "--execute", "--json")
    assert merged.returncode == 0, merged.stderr
    assert list(json.loads(merged.stdout)["moves"]) == [f"{ns}.b"]
    with psycopg.connect(dsn, autocommit=True) as c:
        assert c.execute(f'select count(*) from {ns}."b@preview"').fetchone() == (3,)
    assert icegres_branch(catalog, "drop", "preview", "--namespace", ns).returncode == 0


def test_branch_writes_and_write_audit_publish(server):
    """Writes to a branch (by name and by the session's icegres.branch), their 40001 per ref, and
    publishing by fast-forward, on S3 + REST and on the PostgreSQL catalog."""
    catalog, dsn = server
    ns = f"bw_{uuid.uuid4().hex[:8]}"
    with psycopg.connect(dsn, autocommit=True) as c:
        c.execute(f"create schema {ns}")
        c.execute(f"create table {ns}.t (id bigint, v text)")
        c.execute(f"insert into {ns}.t values (1, 'a'), (2, 'b')")
        c.execute(f"alter table {ns}.t create branch audit")
        c.execute(f'insert into {ns}."t@audit" values (3, \'c\')')
        c.execute(f"update {ns}.\"t@audit\" set v = 'B' where id = 2")
        c.execute("set icegres.branch = 'audit'")
        c.execute(f"delete from {ns}.t where id = 1")
        assert c.execute(f"select * from {ns}.t order by id").fetchall() == [(2, "B"), (3, "c")]
        c.execute("reset icegres.branch")
        assert c.execute(f"select * from {ns}.t order by id").fetchall() == [(1, "a"), (2, "b")]
    with psycopg.connect(dsn) as a, psycopg.connect(dsn) as b:
        a.execute(f"update {ns}.\"t@audit\" set v = 'x' where id = 3")
        b.execute(f"update {ns}.\"t@audit\" set v = 'y' where id = 3")
        a.commit()
        with pytest.raises(psycopg.errors.SerializationFailure):
            b.commit()
    with psycopg.connect(dsn, autocommit=True) as c:
        c.execute(f"call system.fast_forward('{ns}.t', 'main', 'audit')")
        assert c.execute(f"select * from {ns}.t order by id").fetchall() == [(2, "B"), (3, "x")]
