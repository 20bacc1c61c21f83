"""A damaged table is isolated (engine/damage.py): the server starts, statements naming that table
get PostgreSQL's error naming the file (58P01 for a file that is gone, XX001 for one that cannot
be decoded), every other table answers and takes writes, the catalog still lists it, /health is
200 "degraded" naming it, /metrics counts it, and it heals without a restart once the file is
back or a new snapshot replaces the damaged one.

One lake holds one table per kind of damage (metadata JSON, manifest list, manifest, Parquet;
missing or garbage), so one server start covers them all. The same on SeaweedFS's REST catalog
and S3 for a missing Parquet file and a missing manifest list.
"""

from __future__ import annotations

import shutil
import time
import uuid
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import psycopg
import pyarrow as pa
import pytest

from tests.support.icegres_server import running_icegres, seed_data_dir
from tests.support.ops import get, health

pytestmark = [pytest.mark.e2e, pytest.mark.timeout(300)]

NAMESPACE = "broken"
HEAL_WAIT_S = 1.2  # a damaged table named by statements is tried again at most once a second


@dataclass(frozen=True)
class Case:
    table: str
    sqlstate: str
    damage: Callable[[Path], Path]  # damages the table's directory, returns the file it hit


def _one(directory: Path, pattern: str) -> Path:
    (path,) = sorted(directory.glob(pattern))[-1:]
    return path


def _remove(path: Path) -> Path:
    path.unlink()
    return path


def _overwrite(path: Path, data: bytes) -> Path:
    path.write_bytes(data)
    return path


def _garbage_footer(path: Path) -> Path:
    data = path.read_bytes()
    return _overwrite(path, data[:-64] + b"\x00" * 60 + b"PAR1")  # the footer's bytes and length


CASES = [
    Case("metadata_missing", "58P01", lambda t: _remove(_one(t / "metadata", "*.metadata.json"))),
    Case("metadata_corrupt", "XX001", lambda t: _overwrite(_one(t / "metadata", "*.metadata.json"), b"{garbage")),
    Case("manifest_list_missing", "58P01", lambda t: _remove(_one(t / "metadata", "snap-*.avro"))),
    Case("manifest_missing", "58P01", lambda t: _remove(_one(t / "metadata", "*-m0.avro"))),
    Case("manifest_corrupt", "XX001", lambda t: _overwrite(_one(t / "metadata", "*-m0.avro"), b"Obj\x01garbage" * 10)),
    Case("parquet_missing", "58P01", lambda t: _remove(_one(t / "data", "*.parquet"))),
    Case("parquet_corrupt", "XX001", lambda t: _garbage_footer(_one(t / "data", "*.parquet"))),
]


def _rows(n: int = 3) -> pa.Table:
    return pa.table({"id": pa.array(range(1, n + 1), pa.int64()), "name": pa.array([f"n{i}" for i in range(n)])})


def _sqlstate(conn: psycopg.Connection, sql: str) -> tuple[str | None, str]:
    try:
        conn.execute(sql).fetchall()
    except psycopg.Error as err:
        return err.diag.sqlstate, err.diag.message_primary or ""
    return None, ""


def damaged_gauge(port: int) -> int:
    text = get(port, "/metrics")[1]
    (line,) = [ln for ln in text.splitlines() if ln.startswith("icegres_tables_damaged ")]
    return int(line.split()[1])


@pytest.fixture
def lake(tmp_path: Path) -> tuple[Path, dict[str, tuple[Path, bytes]]]:
    """The demo lake plus one damaged table per case; per case, the file hit and its bytes."""
    from icegres.engine.catalog import Lakehouse

    data_dir = tmp_path / "data"
    seed_data_dir(data_dir, rows=2000)
    lakehouse = Lakehouse.embedded(data_dir)
    lakehouse.create_namespace_if_missing(NAMESPACE)
    hit: dict[str, tuple[Path, bytes]] = {}
    for case in CASES:
        table = lakehouse.create_table(NAMESPACE, case.table, _rows().schema)
        table.append(_rows())
        path = Path(table.metadata_location.removeprefix("file://")).parent.parent
        files = {p: p.read_bytes() for p in path.rglob("*") if p.is_file()}
        damaged = case.damage(path)
        hit[case.table] = (damaged, files[damaged])
    return data_dir, hit


def test_a_damaged_table_is_isolated_named_reported_and_heals(lake: tuple[Path, dict[str, tuple[Path, bytes]]]) -> None:
    data_dir, hit = lake
    with running_icegres(data_dir, args=("--ops-port", "0")) as srv, \
            psycopg.connect(srv.dsn(), autocommit=True) as conn:
        ops = srv.ops_port
        # The other tables answer, and take writes.
        assert conn.execute("select count(*) from demo.trips").fetchone() == (2000,)
        conn.execute("insert into demo.cities (city, country, population) values ('Graz', 'AT', 1)")
        assert conn.execute("select count(*) from demo.cities").fetchone() == (21,)
        for case in CASES:
            state, message = _sqlstate(conn, f"select * from {NAMESPACE}.{case.table}")
            path, _ = hit[case.table]
            assert (state, path.name in message, f"{NAMESPACE}.{case.table}" in message) == \
                (case.sqlstate, True, True), (case.table, state, message)
            # the same error in a transaction block, and for a write that must read the table
            with conn.transaction():
                assert _sqlstate(conn, f"select count(*) from {NAMESPACE}.{case.table}")[0] == case.sqlstate
            assert _sqlstate(conn, f"delete from {NAMESPACE}.{case.table} where id = 1")[0] == case.sqlstate
        # The catalog lists every table, damaged or not (psql's \dt query).
        listed = {r[0] for r in conn.execute(
            "select c.relname from pg_catalog.pg_class c join pg_catalog.pg_namespace n on n.oid = c.relnamespace "
            "where n.nspname = %s and c.relkind in ('r', 'p')", (NAMESPACE,)).fetchall()}
        assert listed == {c.table for c in CASES}
        status, body = health(ops)
        assert status == 200 and body["status"] == "degraded"
        reported = {d["table"]: d for d in body["damaged_tables"]}
        assert set(reported) == {f"{NAMESPACE}.{c.table}" for c in CASES}
        for case in CASES:
            entry = reported[f"{NAMESPACE}.{case.table}"]
            assert entry["sqlstate"] == case.sqlstate and hit[case.table][0].name in entry["error"]
        assert damaged_gauge(ops) == len(CASES)
        # Repaired: every file restored but one table's, which a new snapshot replaces instead.
        replaced = "parquet_missing"
        for table, (path, data) in hit.items():
            if table != replaced:
                path.write_bytes(data)
        from icegres.engine.catalog import Lakehouse

        Lakehouse.embedded(data_dir).load_table(NAMESPACE, replaced).overwrite(_rows(5))
        time.sleep(HEAL_WAIT_S)
        for case in CASES:
            expected = 5 if case.table == replaced else 3
            assert conn.execute(f"select count(*) from {NAMESPACE}.{case.table}").fetchone() == (expected,), case
        status, body = health(ops)
        assert (status, body["status"], "damaged_tables" in body) == (200, "ok", False)
        assert damaged_gauge(ops) == 0


def test_health_recovers_with_no_statement_naming_the_table(tmp_path: Path) -> None:
    """The server's periodic re-check heals a table nobody queries again."""
    from icegres.engine.catalog import Lakehouse

    data_dir = tmp_path / "data"
    seed_data_dir(data_dir, rows=100)
    lakehouse = Lakehouse.embedded(data_dir)
    lakehouse.create_namespace_if_missing(NAMESPACE)
    table = lakehouse.create_table(NAMESPACE, "t", _rows().schema)
    table.append(_rows())
    path = _one(Path(table.metadata_location.removeprefix("file://")).parent.parent / "data", "*.parquet")
    aside = tmp_path / path.name
    shutil.move(path, aside)
    with running_icegres(data_dir, args=("--ops-port", "0")) as srv, \
            psycopg.connect(srv.dsn(), autocommit=True) as conn:
        assert _sqlstate(conn, f"select * from {NAMESPACE}.t")[0] == "58P01"
        assert damaged_gauge(srv.ops_port) == 1
        shutil.move(aside, path)
        deadline = time.monotonic() + 30
        while damaged_gauge(srv.ops_port) and time.monotonic() < deadline:
            time.sleep(0.5)
        assert damaged_gauge(srv.ops_port) == 0
        assert health(srv.ops_port)[1]["status"] == "ok"


def test_damage_on_the_rest_catalog_and_object_store(stack, tmp_path: Path) -> None:
    """SeaweedFS's REST catalog and S3: a missing Parquet file and a missing manifest list. (A
    missing metadata JSON is no damage there: SeaweedFS's loadTable answers the metadata document
    from the catalog's own store, which the object's deletion leaves in place; any REST error
    loading a table is the catalog's 58030, docs/architecture.md "Damaged tables".)"""
    from pyarrow import fs
    from pyiceberg.catalog import load_catalog

    schema = f"damaged_{uuid.uuid4().hex[:8]}"
    s3 = fs.S3FileSystem(access_key=stack.s3_access_key, secret_key=stack.s3_secret_key, region=stack.s3_region,
                         endpoint_override=stack.s3_endpoint.split("://", 1)[-1],
                         scheme=stack.s3_endpoint.split("://", 1)[0], force_virtual_addressing=not stack.s3_path_style)
    catalog = load_catalog("rest", **stack.pyiceberg_properties())
    catalog.create_namespace(schema)
    hit: dict[str, tuple[str, bytes]] = {}
    for name in ("ok", "parquet_missing", "manifest_list_missing"):
        table = catalog.create_table((schema, name), schema=_rows().schema)
        table.append(_rows())
        if name == "parquet_missing":
            (path,) = [task.file.file_path for task in table.scan().plan_files()]
        elif name == "manifest_list_missing":
            path = table.current_snapshot().manifest_list
        else:
            continue
        key = path.split("://", 1)[1]
        with s3.open_input_stream(key) as f:
            hit[name] = (path, f.read())
        s3.delete_file(key)
    env = {**stack.env(), "ICEGRES_FILE_CACHE_MB": "0"}
    with running_icegres(tmp_path / "data", env=env, args=("--ops-port", "0")) as srv, \
            psycopg.connect(srv.dsn(), autocommit=True) as conn:
        assert conn.execute(f"select count(*) from {schema}.ok").fetchone() == (3,)
        for name, (path, _) in hit.items():
            state, message = _sqlstate(conn, f"select * from {schema}.{name}")
            assert state == "58P01" and f"{schema}.{name}" in message and path.rsplit("/", 1)[1] in message, \
                (name, state, message)
        conn.execute(f"insert into {schema}.ok values (9, 'x')")
        assert conn.execute(f"select count(*) from {schema}.ok").fetchone() == (4,)
        status, body = health(srv.ops_port)
        assert status == 200 and body["status"] == "degraded"
        assert {d["table"] for d in body["damaged_tables"]} == {f"{schema}.{n}" for n in hit}
        for path, data in hit.values():
            with s3.open_output_stream(path.split("://", 1)[1]) as f:
                f.write(data)
        time.sleep(HEAL_WAIT_S)
        for name in hit:
            assert conn.execute(f"select count(*) from {schema}.{name}").fetchone() == (3,)
        assert damaged_gauge(srv.ops_port) == 0
