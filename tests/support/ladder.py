"""What the write-ladder e2e tests share: a server process they can kill, and writers that record
exactly which rows the server acknowledged (tests/e2e/test_write_buffer.py, test_tail_url.py)."""

from __future__ import annotations

import contextlib
import signal
import subprocess
import threading
import time
import uuid
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import psycopg

from tests.support.icegres_server import start_icegres

CONNECT_TIMEOUT_S = 10


@dataclass
class Server:
    proc: subprocess.Popen[bytes]
    port: int
    log_path: Path
    ports: dict[str, int] = field(default_factory=dict)  # every port it bound, by option

    @property
    def ops_port(self) -> int:
        return self.ports["ops_port"]

    def dsn(self) -> str:
        return f"host=127.0.0.1 port={self.port} dbname=icegres user=icegres"

    def connect(self) -> psycopg.Connection:
        return psycopg.connect(self.dsn(), autocommit=True, connect_timeout=CONNECT_TIMEOUT_S)

    def log(self) -> str:
        return self.log_path.read_text(errors="replace")

    def stop(self, sig: int = signal.SIGTERM, timeout_s: float = 60) -> int:
        if self.proc.poll() is None:
            self.proc.send_signal(sig)
        return self.proc.wait(timeout=timeout_s)


@contextlib.contextmanager
def serve(data_dir: Path, *args: str, env: dict[str, str] | None = None, timeout_s: float = 60) -> Iterator[Server]:
    """`icegres serve` on `data_dir` with `args` (any port among them given as 0), on a port of
    the kernel's choice; killed (SIGKILL) on exit if still running."""
    started = start_icegres(["serve", "--data-dir", str(data_dir), "--port", "0", *args], log_dir=data_dir.parent,
                            env=env, timeout_s=timeout_s)
    proc = started.proc
    try:
        yield Server(proc, started.ports["port"], started.log_path, started.ports)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait(timeout=10)


def catalog(data_dir: Path) -> Any:
    """The embedded lake's catalog, opened by pyiceberg from outside the server."""
    from pyiceberg.catalog.sql import SqlCatalog

    return SqlCatalog("icegres", uri=f"sqlite:///{data_dir.resolve() / 'catalog.db'}",
                      warehouse=(data_dir.resolve() / "warehouse").as_uri())


def lake_ids(data_dir: Path, ns: str, name: str = "t") -> list[int]:
    """Every id in the table's current snapshot, read by pyiceberg (not through icegres)."""
    table = catalog(data_dir).load_table((ns, name))
    if table.current_snapshot() is None:
        return []
    return table.scan(selected_fields=("id",)).to_arrow().column("id").to_pylist()


def make_table(srv: Server, name: str = "t", *, prefix: str = "b") -> str:
    """A fresh namespace holding `name (id bigint, w int, note text)`; returns the namespace."""
    ns = f"{prefix}_{uuid.uuid4().hex[:8]}"
    with srv.connect() as conn:
        conn.execute(f"create schema {ns}")
        conn.execute(f"create table {ns}.{name} (id bigint, w int, note text)")
    return ns


class Writers:
    """N threads inserting unique ids one row per statement; `acked` holds what the server acked."""

    def __init__(self, srv: Server, table: str, n: int, *, pause_s: float = 0.0, base: int = 0) -> None:
        self.srv, self.table, self.pause_s, self.base = srv, table, pause_s, base
        self.acked: list[int] = []
        self.errors: list[BaseException] = []
        self._lock = threading.Lock()
        self._stop = threading.Event()
        self._threads = [threading.Thread(target=self._run, args=(w,), daemon=True) for w in range(n)]

    def __enter__(self) -> Writers:
        for t in self._threads:
            t.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop()

    def stop(self) -> None:
        self._stop.set()
        for t in self._threads:
            t.join(timeout=30)

    def count(self) -> int:
        with self._lock:
            return len(self.acked)

    def _run(self, w: int) -> None:
        i = 0
        try:
            with self.srv.connect() as conn:
                while not self._stop.is_set():
                    ident = self.base + w * 1_000_000 + i
                    i += 1
                    conn.execute(f"insert into {self.table} values (%s, %s, 'x')", (ident, w))
                    with self._lock:
                        self.acked.append(ident)
                    if self.pause_s:
                        time.sleep(self.pause_s)
        except (psycopg.OperationalError, psycopg.errors.AdminShutdown):
            pass  # the server went away (killed or shutting down): what was acked is in `acked`
        except BaseException as exc:  # noqa: BLE001 - reported by the test
            self.errors.append(exc)
