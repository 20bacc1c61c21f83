"""Kill `icegres serve` during big INSERT ... SELECT statements and count what it leaves behind.

Issue 30's measurement: a server SIGKILLed mid-write left its staged Parquet files in the table's
data directory (20 kills of a 500k-row INSERT ... SELECT: 27 unreferenced files, 30 MB). This
runs that loop on a fresh embedded (SQLite) lake, or on any catalog the environment points at, and
reports after every kill (each a moment after the statement's first file appears) the table's
unreferenced files (listed under its location, minus every
file any snapshot or metadata file references) and again after the next start's recovery.

    python -m bench.staged_kills --kills 20 --rows 500000 [--seed 1] [--json]

With `--source DIR`, the servers run that checkout's icegres (e.g. the commit before staging
records, for the "before" number). `tests/e2e/test_staged_files.py` drives `kill_loop` with a
concurrent writer on a second server.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import random
import signal
import sys
import tempfile
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import psycopg

from tests.support.icegres_server import running_icegres

CONNECT_TIMEOUT_S = 10


@dataclass
class Leftovers:
    data_files: int = 0  # unreferenced files under the table's data/ (the staged Parquet files)
    data_bytes: int = 0
    other_files: int = 0  # unreferenced files elsewhere under the location (manifests, metadata)
    other_bytes: int = 0


@dataclass
class KillReport:
    kills: int = 0
    committed: int = 0  # INSERTs that answered before the kill
    killed_mid_statement: int = 0
    after_kill: list[Leftovers] = field(default_factory=list)  # before the next start's recovery
    after_recovery: list[Leftovers] = field(default_factory=list)

    def as_json(self) -> dict[str, Any]:
        def total(rows: list[Leftovers]) -> dict[str, int]:
            last = rows[-1] if rows else Leftovers()
            return {"data_files": last.data_files, "data_bytes": last.data_bytes,
                    "other_files": last.other_files, "other_bytes": last.other_bytes}

        return {"kills": self.kills, "committed": self.committed, "killed_mid_statement": self.killed_mid_statement,
                "left_after_last_kill": total(self.after_kill), "left_after_recovery": total(self.after_recovery),
                "peak_left_after_a_kill_data_files": max((x.data_files for x in self.after_kill), default=0),
                "left_by_kills_data_files": [x.data_files for x in self.after_kill],
                "left_after_each_recovery_data_files": [x.data_files for x in self.after_recovery]}


def referenced_files(table: Any) -> tuple[set[str], set[str]]:
    """(data and delete files of every snapshot, deleted entries too; every metadata file the table
    references: manifest lists, manifests, the current and logged metadata files, statistics)."""
    io = table.io
    data: set[str] = set()
    meta: set[str] = {table.metadata_location, *(e.metadata_file for e in table.metadata.metadata_log)}
    meta |= {s.statistics_path for s in table.metadata.statistics}
    for snapshot in table.metadata.snapshots:
        meta.add(snapshot.manifest_list)
        for manifest in snapshot.manifests(io):
            meta.add(manifest.manifest_path)
            for entry in manifest.fetch_manifest_entry(io, discard_deleted=False):
                data.add(entry.data_file.file_path)
    return data, meta


def leftovers(table: Any, list_files: Callable[[str], dict[str, int]]) -> Leftovers:
    """What lies under `table`'s location that nothing of the table references."""
    data, meta = referenced_files(table)
    out = Leftovers()
    for path, size in list_files(table.location()).items():
        if path in data or path in meta:
            continue
        if "/data/" in path[len(table.location()):] + "/":
            out.data_files += 1
            out.data_bytes += size
        else:
            out.other_files += 1
            out.other_bytes += size
    return out


def local_files(location: str) -> dict[str, int]:
    root = Path(location.removeprefix("file://"))
    return {"file://" + str(p): p.stat().st_size for p in root.rglob("*") if p.is_file()}


def connect(srv: Any) -> psycopg.Connection:
    return psycopg.connect(srv.dsn(), autocommit=True, connect_timeout=CONNECT_TIMEOUT_S)


def prepare(data_dir: Path, env: dict[str, str], ns: str, rows: int) -> None:
    with running_icegres(data_dir, env=env) as srv, connect(srv) as conn:
        conn.execute(f"create schema {ns}")
        conn.execute(f"create table {ns}.src (id bigint, v text, x double precision)")
        conn.execute(f"insert into {ns}.src select g, 'row-' || g, g * 0.5 from generate_series(1, {rows}) as t(g)")
        conn.execute(f"create table {ns}.dst (id bigint, v text, x double precision)")


def kill_loop(data_dir: Path, env: dict[str, str], ns: str, kills: int, load_table: Callable[[], Any],
              list_files: Callable[[str], dict[str, int]], seed: int = 1,
              after_file_s: tuple[float, float] = (0.0, 0.3), timeout_s: float = 120,
              quiet: Callable[[], Any] = contextlib.nullcontext) -> KillReport:
    """`kills` times: start a server on `data_dir` (its start-up recovers the last kill), measure,
    run `INSERT INTO dst SELECT * FROM src`, and SIGKILL the server a random moment (`after_file_s`)
    after the first new Parquet file appears under the table's data directory — the statement
    computes for most of its time and writes at its end, so a kill at a random moment of the
    statement would nearly always hit the SELECT; measure again. A last start recovers the last
    kill. `quiet()` holds any other writer of the table while its files are counted (a file it has
    staged and not yet committed is no leftover) and while the statement runs (its first new file
    must be this statement's); the other writer runs while servers start and recover."""
    rng = random.Random(seed)
    report = KillReport()
    location = load_table().location()
    for _ in range(kills):
        with running_icegres(data_dir, env=env) as srv:
            with quiet():
                report.after_recovery.append(leftovers(load_table(), list_files))
            before = {p for p in list_files(location) if p.endswith(".parquet")}
            conn = connect(srv)
            outcome: list[str] = []

            def insert(conn: psycopg.Connection = conn, outcome: list[str] = outcome) -> None:
                try:
                    conn.execute(f"insert into {ns}.dst select * from {ns}.src")
                    outcome.append("committed")
                except psycopg.Error as exc:
                    outcome.append(f"failed: {type(exc).__name__}")

            worker = threading.Thread(target=insert, daemon=True)
            with quiet():  # (the first new file must be this statement's)
                worker.start()
                deadline = time.monotonic() + timeout_s
                while not outcome and time.monotonic() < deadline:
                    if any(p.endswith(".parquet") and p not in before for p in list_files(location)):
                        break
                    time.sleep(0.01)
                time.sleep(rng.uniform(*after_file_s))
                os.kill(srv.pid, signal.SIGKILL)
                worker.join(timeout=30)
            conn.close()
            report.kills += 1
            if outcome and outcome[0] == "committed":
                report.committed += 1
            else:
                report.killed_mid_statement += 1
        with quiet():
            report.after_kill.append(leftovers(load_table(), list_files))
    with running_icegres(data_dir, env=env), quiet():
        report.after_recovery.append(leftovers(load_table(), list_files))
    return report


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--kills", type=int, default=20)
    parser.add_argument("--rows", type=int, default=500_000)
    parser.add_argument("--seed", type=int, default=1)
    parser.add_argument("--source", help="run the servers from this checkout's icegres")
    parser.add_argument("--dir", help="work here (default: a temporary directory)")
    parser.add_argument("--json", action="store_true")
    args = parser.parse_args(argv)
    env = {}
    if args.source:
        env["PYTHONPATH"] = os.path.abspath(args.source)
    root = Path(args.dir or tempfile.mkdtemp(prefix="staged-kills-"))
    data_dir = root / "data"
    data_dir.mkdir(parents=True)
    props = {"type": "sql", "uri": f"sqlite:///{data_dir.resolve() / 'catalog.db'}",
             "warehouse": (data_dir.resolve() / "warehouse").as_uri()}
    ns = "kills"
    prepare(data_dir, env, ns, args.rows)

    def load_table() -> Any:
        from pyiceberg.catalog import load_catalog

        return load_catalog("icegres", **props).load_table((ns, "dst"))

    started = time.monotonic()
    report = kill_loop(data_dir, env, ns, args.kills, load_table, local_files, seed=args.seed)
    result = {**report.as_json(), "rows": args.rows, "seconds": round(time.monotonic() - started, 1),
              "source": args.source or "this checkout"}
    if args.json:
        print(json.dumps(result, indent=2))
    else:
        for key, value in result.items():
            print(f"{key}: {value}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
