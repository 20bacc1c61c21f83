"""Native PostgreSQL 15 with the same demo.trips (primary key on id) and demo.cities.

The floor for a Postgres-wire round trip and for an OLTP point lookup. Started the way
tests/support/postgres.py starts it (initdb in a temp dir, the on-disk binaries, as the `postgres`
OS user when we are root, stopped by PID and removed on exit) — but with room for the
concurrency suite's 64 connections, and kept startable again for the start-up suite. Loaded with
COPY from the very rows `icegres seed` writes (icegres.seed.trips_chunk is deterministic), then
VACUUM ANALYZE, and warmed (every page read once) before anything is timed.
"""

from __future__ import annotations

import contextlib
import io
import shutil
import subprocess
import tempfile
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from bench.harness import Peer
from tests.support.postgres import (
    _BIND_ATTEMPTS_MAX,
    DB_NAME,
    DB_USER,
    PG_BIN_DIR,
    PostgresStartError,
    _child_env,
    _free_port,
    _log_tail,
    _run_checked,
    _RunAs,
    _stop_server,
    _wait_until_answers,
)

MAX_CONNECTIONS = 120  # the concurrency suite opens 64, plus psql and the peers' own


@dataclass
class Cluster:
    """An initdb'd cluster that can be started and stopped repeatedly (the start-up suite)."""

    base_dir: Path
    run_as: _RunAs
    port: int = 0
    proc: subprocess.Popen[bytes] | None = None
    settings: tuple[str, ...] = ()  # more `-c name=value` for postgres

    def enable_tls(self, cert: Path, key: Path) -> None:
        """ssl=on with this certificate and key (copied into the data directory, where
        PostgreSQL's ssl_cert_file/ssl_key_file defaults look, owned by the server's user, the
        key 0600 as PostgreSQL insists). Takes effect at the next start."""
        for source, name in ((cert, "server.crt"), (key, "server.key")):
            target = self.data_dir / name
            shutil.copyfile(source, target)
            target.chmod(0o600)
            self.run_as.chown(target)
        self.settings = (*self.settings, "-c", "ssl=on")

    @property
    def data_dir(self) -> Path:
        return self.base_dir / "data"

    @property
    def log_path(self) -> Path:
        return self.base_dir / "postgres.log"

    @property
    def conninfo(self) -> str:
        return f"host=127.0.0.1 port={self.port} user={DB_USER} dbname={DB_NAME}"

    def start(self, timeout_s: float = 60) -> float:
        """Spawn postgres; returns the perf_counter at spawn (for the start-up suite)."""
        self.port = _free_port()
        with open(self.log_path, "ab") as log:
            t0 = time.perf_counter()
            self.proc = subprocess.Popen(
                [str(PG_BIN_DIR / "postgres"), "-D", str(self.data_dir), "-p", str(self.port),
                 "-c", "listen_addresses=127.0.0.1", "-c", f"unix_socket_directories={self.base_dir}",
                 "-c", "fsync=on", "-c", "logging_collector=off", "-c", f"max_connections={MAX_CONNECTIONS}",
                 "-c", "TimeZone=UTC", "-c", "shared_buffers=256MB", *self.settings],
                stdout=log, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL, env=_child_env(),
                cwd=self.base_dir, start_new_session=True, user=self.run_as.uid,
                group=self.run_as.gid, extra_groups=self.run_as.extra_groups,
            )
        return t0

    def wait_ready(self, timeout_s: float = 60) -> None:
        assert self.proc is not None
        if not _wait_until_answers(self.proc, self.port, self.run_as, self.base_dir,
                                   time.monotonic() + timeout_s):
            raise PostgresStartError(f"postgres did not answer\n{_log_tail(self.log_path)}")

    def stop(self) -> None:
        if self.proc is not None:
            _stop_server(self.proc, self.data_dir, self.run_as, self.base_dir)
            self.proc = None


def _start_on_a_free_port(cluster: Cluster) -> None:
    """Start the cluster, again on another port while the one picked was taken before postgres
    bound it (postgres cannot bind port 0 and report it: the port is picked here, and an outgoing
    connection may take it meanwhile)."""
    for attempt in range(1, _BIND_ATTEMPTS_MAX + 1):
        offset = cluster.log_path.stat().st_size if cluster.log_path.exists() else 0
        cluster.start()
        try:
            cluster.wait_ready()
            return
        except PostgresStartError:
            with open(cluster.log_path, "rb") as f:
                f.seek(offset)
                said = f.read().decode("utf-8", "replace")
            exited = cluster.proc is not None and cluster.proc.poll() is not None
            cluster.stop()
            if attempt == _BIND_ATTEMPTS_MAX or not exited or not (
                    "could not bind" in said or "Address already in use" in said):
                raise


@contextlib.contextmanager
def running_cluster(tls: tuple[Path, Path] | None = None) -> Iterator[Cluster]:
    """`tls`: (certificate, key) PEM files: the cluster runs with ssl=on."""
    run_as = _RunAs.for_current_process()
    base = Path(tempfile.mkdtemp(prefix="icegres-bench-pg-"))
    cluster = Cluster(base, run_as)
    try:
        run_as.chown(base)
        cluster.log_path.touch()
        run_as.chown(cluster.log_path)
        _run_checked([str(PG_BIN_DIR / "initdb"), "-D", str(cluster.data_dir), "-A", "trust", "-U",
                      DB_USER, "-E", "UTF8", "--locale=C.UTF-8", "--no-instructions"],
                     run_as, cluster.log_path, 120, base)
        if tls is not None:
            cluster.enable_tls(*tls)
        _start_on_a_free_port(cluster)
        yield cluster
    finally:
        cluster.stop()
        shutil.rmtree(base, ignore_errors=True)


def load_trips(conninfo: str, rows: int) -> dict[str, Any]:
    """demo.trips (id primary key) and demo.cities, the same rows icegres seed writes."""
    import psycopg
    import pyarrow.csv as pacsv

    from icegres.seed import CHUNK_ROWS, cities_table, trips_chunk

    t0 = time.perf_counter()
    with psycopg.connect(conninfo, autocommit=True) as conn:
        conn.execute("create schema if not exists demo")
        conn.execute("drop table if exists demo.trips")
        conn.execute("drop table if exists demo.cities")
        conn.execute(
            "create table demo.trips (id bigint primary key, city text, fare double precision, "
            "distance double precision, pickup_ts timestamptz, passengers integer, vendor text, "
            "paid boolean)")
        conn.execute("create table demo.cities (city text primary key, country text, population bigint)")

        def copy(table: str, arrow: Any) -> None:
            buf = io.BytesIO()
            pacsv.write_csv(arrow, buf, pacsv.WriteOptions(include_header=False))
            with conn.cursor() as cur, cur.copy(f"COPY {table} FROM STDIN (FORMAT csv)") as cp:
                cp.write(buf.getvalue())

        copy("demo.cities", cities_table())
        for start in range(1, rows + 1, CHUNK_ROWS):
            copy("demo.trips", trips_chunk(start, min(CHUNK_ROWS, rows - start + 1)))
        conn.execute("vacuum analyze demo.trips")
        conn.execute("vacuum analyze demo.cities")
        n = conn.execute("select count(*) from demo.trips").fetchone()[0]
        conn.execute("select * from demo.trips").fetchall()  # warm: every page in shared buffers
    if n != rows:
        raise RuntimeError(f"PostgreSQL demo.trips has {n} rows, expected {rows}")
    return {"rows": n, "load_s": round(time.perf_counter() - t0, 1)}


class PostgresPeer(Peer):
    def __init__(self, conninfo: str, name: str = "postgres") -> None:
        import psycopg

        self.name = name
        self.conn = psycopg.connect(conninfo, autocommit=True)

    def run(self, sql: str) -> list[tuple]:
        return self.conn.execute(sql).fetchall()

    def close(self) -> None:
        self.conn.close()


def version(conninfo: str) -> str:
    import psycopg

    with psycopg.connect(conninfo) as c:
        return str(c.execute("show server_version").fetchone()[0])
