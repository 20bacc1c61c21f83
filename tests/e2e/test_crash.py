"""A server killed mid-commit leaves no partial commit and no staged file referenced by metadata.

One scenario per catalog kind, each on a fresh lake: the embedded SQLite catalog, a SQL catalog in
a fresh database of the stack's PostgreSQL, and SeaweedFS's REST catalog (a fresh namespace). Five
`icegres serve` processes take turns on the lake (each starting while the one before is at work):

1. a plain server creates tables `a` and `b` and commits one seed row each;
2. a server started with ICEGRES_FAULTS="before-publish=sleep:60" (icegres/faults.py) stages an
   INSERT into each table in one transaction and is sent COMMIT from a background thread; when its
   log says the commit has reached the fault point, the test lists the files the commit staged and
   SIGKILLs the server by its PID;
3. a plain server restarted on the lake must show both tables exactly as before: same rows, same
   metadata file, same snapshot history, and not one staged file referenced by any snapshot
   (manifest lists, manifests and every data-file entry, deleted ones included), and the staged
   data files themselves gone (its start-up recovered the killed server's staging record);
4. and 5. the same at "mid-publish"; then, the control: the same transaction, not interrupted,
   changes both tables together, in one commit (one token).

The fault points: `before-publish` (snapshots and manifests written, catalog not asked) and
`mid-publish` (SQL catalogs: the new metadata files written, the database transaction not begun;
REST: the `transactions/commit` POST not sent).
"""

from __future__ import annotations

import os
import re
import signal
import subprocess
import sys
import time
import uuid
from collections.abc import Callable, Iterator
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import psycopg
import pytest

from tests.support.icegres_server import IcegresServer, running_icegres

pytestmark = [pytest.mark.e2e, pytest.mark.timeout(90)]

TOKEN = "icegres.commit-token"
CONNECT_TIMEOUT_S = 10
FAULT_REACHED_TIMEOUT_S = 30
PRELUDE_TIMEOUT_S = 60
COMMIT_FAILED_TIMEOUT_S = 15
STALL_S = 60  # the faulted server sleeps at its point far longer than the test waits to kill it
SEED = {"a": [(1, "a-seed")], "b": [(1, "b-seed")]}
STAGED = {"a": [(2, "a-new"), (3, "a-new")], "b": [(2, "b-new")]}


# --- lakes -------------------------------------------------------------------------------------


@dataclass
class Lake:
    """A fresh lake: where servers keep their state, how they reach the catalog, how we do."""

    kind: str
    data_dir: Path
    env: dict[str, str]
    props: dict[str, str]
    ns: str
    list_files: Callable[[str], set[str]]  # every file under a table location, as full URIs
    _catalog: Any = None

    def serve(self, faults: str = "") -> Any:
        """A server on this lake; ICEGRES_FAULTS is set even when empty, whatever our environment holds."""
        return running_icegres(self.data_dir, env={**self.env, "ICEGRES_FAULTS": faults})

    def table(self, name: str) -> Any:
        """The table as the catalog has it now (a fresh load every call)."""
        if self._catalog is None:
            from pyiceberg.catalog import load_catalog

            self._catalog = load_catalog("icegres", **self.props)
        return self._catalog.load_table((self.ns, name))


def _local_files(location: str) -> set[str]:
    root = Path(location.removeprefix("file://"))
    return {"file://" + str(p) for p in root.rglob("*") if p.is_file()}


def _s3_lister(stack: Any) -> Callable[[str], set[str]]:
    from pyarrow import fs

    endpoint = stack.s3_endpoint
    s3 = fs.S3FileSystem(
        access_key=stack.s3_access_key, secret_key=stack.s3_secret_key, region=stack.s3_region,
        endpoint_override=endpoint.split("://", 1)[-1], scheme=endpoint.split("://", 1)[0],
        force_virtual_addressing=not stack.s3_path_style,
    )

    def list_files(location: str) -> set[str]:
        selector = fs.FileSelector(location.removeprefix("s3://"), recursive=True, allow_not_found=True)
        return {"s3://" + i.path for i in s3.get_file_info(selector) if i.type == fs.FileType.File}

    return list_files


@pytest.fixture(params=["embedded", "postgres", "rest"])
def lake(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[Lake]:
    ns = f"crash_{uuid.uuid4().hex[:10]}"
    data_dir = tmp_path / "data"
    data_dir.mkdir()
    if request.param == "embedded":
        props = {"type": "sql", "uri": f"sqlite:///{data_dir.resolve() / 'catalog.db'}",
                 "warehouse": (data_dir.resolve() / "warehouse").as_uri()}
        yield Lake("embedded", data_dir, {}, props, ns, _local_files)
        return
    stack = request.getfixturevalue("stack")
    if request.param == "rest":  # the stack's one REST catalog: a fresh namespace is the fresh lake
        yield Lake("rest", data_dir, stack.env(), dict(stack.pyiceberg_properties()), ns, _s3_lister(stack))
        return
    db = f"icegres_crash_{os.getpid()}_{uuid.uuid4().hex[:8]}"
    with psycopg.connect(stack.pg_url, autocommit=True, connect_timeout=CONNECT_TIMEOUT_S) as admin:
        admin.execute(f"create database {db}")
    try:
        uri = stack.pg_url.rsplit("/", 1)[0] + f"/{db}"
        warehouse = (tmp_path / "warehouse").as_uri()
        props = {"type": "sql", "uri": uri.replace("postgresql://", "postgresql+psycopg://", 1),
                 "warehouse": warehouse}
        env = {"ICEGRES_CATALOG_URI": uri, "ICEGRES_WAREHOUSE": warehouse}
        yield Lake("postgres", data_dir, env, props, ns, _local_files)
    finally:
        with psycopg.connect(stack.pg_url, autocommit=True, connect_timeout=CONNECT_TIMEOUT_S) as admin:
            admin.execute(f"drop database if exists {db} with (force)")


# --- what a table is, seen from outside --------------------------------------------------------


@dataclass(frozen=True)
class TableState:
    metadata_location: str
    snapshots: tuple[int, ...]
    referenced: frozenset[str]  # manifest lists, manifests and data files of every snapshot
    data_files: frozenset[str]  # every data-file entry of every snapshot, deleted ones included
    rows: tuple[tuple[Any, ...], ...]


def table_state(lake: Lake, name: str) -> TableState:
    table = lake.table(name)
    io = table.io
    referenced: set[str] = set()
    data_files: set[str] = set()
    for snapshot in table.metadata.snapshots:
        referenced.add(snapshot.manifest_list)
        for manifest in snapshot.manifests(io):
            referenced.add(manifest.manifest_path)
            for entry in manifest.fetch_manifest_entry(io, discard_deleted=False):
                data_files.add(entry.data_file.file_path)
    arrow = table.scan().to_arrow() if table.current_snapshot() is not None else None
    rows = tuple(sorted(zip(*(arrow.column(c).to_pylist() for c in ("id", "v")), strict=True))) if arrow else ()
    return TableState(table.metadata_location, tuple(s.snapshot_id for s in table.metadata.snapshots),
                      frozenset(referenced | data_files), frozenset(data_files), rows)


def table_files(lake: Lake) -> dict[str, set[str]]:
    return {name: lake.list_files(lake.table(name).location()) for name in SEED}


def _values(rows: list[tuple[int, str]]) -> str:
    return ", ".join(f"({i}, '{v}')" for i, v in rows)


def connect(srv: IcegresServer) -> psycopg.Connection:
    return psycopg.connect(srv.dsn(), autocommit=True, connect_timeout=CONNECT_TIMEOUT_S)


def create_and_seed(conn: psycopg.Connection, ns: str) -> None:
    conn.execute(f"create schema {ns}")
    for name, rows in SEED.items():
        conn.execute(f"create table {ns}.{name} (id bigint not null, v text)")
        conn.execute(f"insert into {ns}.{name} values {_values(rows)}")


def stage(conn: psycopg.Connection, ns: str) -> None:
    """BEGIN and one INSERT per table: staged files, nothing published."""
    conn.execute("begin")
    for name, rows in STAGED.items():
        assert conn.execute(f"insert into {ns}.{name} values {_values(rows)}").statusmessage == f"INSERT 0 {len(rows)}"


def fault_lines(srv: IcegresServer, point: str) -> int:
    text = srv.log_path.read_text(errors="replace") if srv.log_path.exists() else ""
    return len(re.findall(rf"^icegres-fault: reached {re.escape(point)} \(", text, re.M))


def wait_for_fault(srv: IcegresServer, point: str, seen: int, commit: Future[Any]) -> None:
    """Until the server's log has more than `seen` lines saying a commit reached `point`
    (icegres/faults.py writes them; the log file is per port, and a port may come round again)."""
    deadline = time.monotonic() + FAULT_REACHED_TIMEOUT_S
    while fault_lines(srv, point) <= seen:
        if commit.done():
            commit.result()  # raises what the COMMIT raised
            pytest.fail(f"COMMIT returned before reaching {point}:\n{srv.log_tail()}")
        if time.monotonic() > deadline:
            pytest.fail(f"the server did not reach {point} within {FAULT_REACHED_TIMEOUT_S}s:\n{srv.log_tail()}")
        time.sleep(0.05)


# --- the crash cases ---------------------------------------------------------------------------


@dataclass(frozen=True)
class Crash:
    point: str
    before: dict[str, TableState]  # each table as the killed commit found it
    staged: dict[str, set[str]]  # each table's files the killed commit had written


def seed(lake: Lake) -> None:
    with lake.serve() as srv, connect(srv) as conn:
        create_and_seed(conn, lake.ns)


def kill_at(lake: Lake, point: str, prelude: Future[Any], pool: ThreadPoolExecutor) -> Crash:
    """Start a server that stalls at `point` (while `prelude` runs), COMMIT a two-table transaction
    through it and SIGKILL it there."""
    conn = None
    try:
        with lake.serve(f"{point}=sleep:{STALL_S}") as srv:
            prelude.result(timeout=PRELUDE_TIMEOUT_S)
            before = {name: table_state(lake, name) for name in SEED}
            assert {name: list(state.rows) for name, state in before.items()} == SEED, point
            files_before = table_files(lake)
            conn = connect(srv)
            stage(conn, lake.ns)
            seen = fault_lines(srv, point)
            commit = pool.submit(conn.execute, "commit")  # never returns: the server stalls, then dies
            wait_for_fault(srv, point, seen, commit)
            staged = {name: files - files_before[name] for name, files in table_files(lake).items()}
            os.kill(srv.pid, signal.SIGKILL)
            with pytest.raises(psycopg.OperationalError):
                commit.result(timeout=COMMIT_FAILED_TIMEOUT_S)
    finally:
        # Only once the server is gone: until then a failed test's COMMIT may still hold the connection.
        if conn is not None:
            conn.close()
    # The kill came where it was meant to: each table's data files (and, for a SQL catalog past
    # mid-publish, its next metadata file) were on storage, and no catalog had been told.
    for name, files in staged.items():
        assert any(f.endswith(".parquet") for f in files), (point, name, sorted(files))
        new_metadata = [f for f in files if f.endswith(".metadata.json")]
        assert len(new_metadata) == (1 if point == "mid-publish" and lake.kind != "rest" else 0), (point, name, new_metadata)
    return Crash(point, before, staged)


def check_untouched(lake: Lake, conn: psycopg.Connection, crash: Crash) -> None:
    """Through a server restarted without faults, and pyiceberg: nothing of the killed commit."""
    for name, rows in SEED.items():
        assert conn.execute(f"select id, v from {lake.ns}.{name} order by id").fetchall() == rows, (crash.point, name)
    for name in SEED:
        after = table_state(lake, name)
        assert after == crash.before[name], (crash.point, name)  # metadata file, history, files, rows
        assert not after.referenced & crash.staged[name], (crash.point, name)
        # The restart's recovery deleted the data files the killed commit staged (engine/staging.py).
        staged_data = {f for f in crash.staged[name] if f.endswith(".parquet")}
        assert not staged_data & lake.list_files(lake.table(name).location()), (crash.point, name)


def restart_and_check(lake: Lake, crash: Crash) -> None:
    with lake.serve() as srv, connect(srv) as conn:
        check_untouched(lake, conn, crash)


def check_control_commit(lake: Lake, conn: psycopg.Connection, before: dict[str, TableState]) -> None:
    """The same transaction, not interrupted: both tables change, in one commit (one token)."""
    files_before = table_files(lake)
    stage(conn, lake.ns)
    assert conn.execute("commit").statusmessage == "COMMIT"
    tokens = set()
    for name in SEED:
        table = lake.table(name)
        head = table.current_snapshot()
        assert head.parent_snapshot_id == before[name].snapshots[-1], name
        tokens.add(head.summary.get(TOKEN))
        state = table_state(lake, name)
        assert state.snapshots == (*before[name].snapshots, head.snapshot_id), name
        assert state.rows == tuple(sorted(SEED[name] + STAGED[name])), name
        new_data = {f for f in lake.list_files(table.location()) - files_before[name] if f.endswith(".parquet")}
        assert new_data and new_data <= state.data_files, name
        want = sorted(SEED[name] + STAGED[name])
        assert conn.execute(f"select id, v from {lake.ns}.{name} order by id").fetchall() == want
    assert len(tokens) == 1 and None not in tokens, tokens


def test_a_commit_killed_at_either_fault_point_leaves_no_trace(lake: Lake) -> None:
    # Five servers in turn on one lake; each starts while the one before it is still at work.
    pool = ThreadPoolExecutor(max_workers=2)
    try:
        seeded = pool.submit(seed, lake)
        first = kill_at(lake, "before-publish", seeded, pool)
        checked = pool.submit(restart_and_check, lake, first)
        second = kill_at(lake, "mid-publish", checked, pool)
        with lake.serve() as srv, connect(srv) as conn:
            check_untouched(lake, conn, second)
            check_control_commit(lake, conn, second.before)
    finally:
        pool.shutdown(wait=False, cancel_futures=True)


# --- the hook itself ---------------------------------------------------------------------------


def test_a_malformed_fault_spec_stops_the_server_at_start_up(tmp_path: Path) -> None:
    cmd = [sys.executable, "-m", "icegres", "serve", "--data-dir", str(tmp_path / "data"),
           "--host", "127.0.0.1", "--port", "0"]
    done = subprocess.run(cmd, env={**os.environ, "ICEGRES_FAULTS": "mid-publish=sleep:soon"}, stdin=subprocess.DEVNULL,
                          capture_output=True, text=True, timeout=60)
    assert done.returncode != 0
    assert "ICEGRES_FAULTS: mid-publish: 'soon' is not a number of seconds" in done.stderr, done.stderr[-2000:]


def test_fault_spec_parsing() -> None:
    from icegres import faults

    assert faults.parse("") == {} and faults.parse("  ") == {}
    assert faults.parse(" before-publish = sleep:2.5 , mid-publish=crash ") == {
        "before-publish": faults.Sleep(2.5), "mid-publish": faults.Crash()}
    for bad in ("x=crash", "mid-publish", "before-publish=explode", "before-publish=sleep:-1",
                "before-publish=sleep:nan", "before-publish=sleep:inf", "before-publish=sleep:", ",",
                "before-publish=crash,", "=crash", "mid-publish=crash,mid-publish=sleep:1",
                f"mid-publish=sleep:{faults.SLEEP_S_MAX + 1}"):
        with pytest.raises(ValueError, match="ICEGRES_FAULTS"):
            faults.parse(bad)
