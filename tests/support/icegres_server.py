"""A real `icegres serve` process for e2e tests, on a free loopback port, stopped by its PID."""

from __future__ import annotations

import contextlib
import os
import signal
import socket
import subprocess
import sys
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path


@dataclass(frozen=True)
class IcegresServer:
    host: str
    port: int
    data_dir: Path
    log_path: Path
    pid: int
    user: str = "icegres"
    database: str = "icegres"
    password: str | None = None

    def dsn(self, **extra: str) -> str:
        parts = {"host": self.host, "port": str(self.port), "dbname": self.database, "user": self.user}
        if self.password is not None:
            parts["password"] = self.password
        parts.update(extra)
        return " ".join(f"{k}={_quote(v)}" for k, v in parts.items())

    def url(self, driver: str = "postgresql+psycopg") -> str:
        auth = self.user if self.password is None else f"{self.user}:{self.password}"
        return f"{driver}://{auth}@{self.host}:{self.port}/{self.database}"

    def log_tail(self, n: int = 4000) -> str:
        try:
            return self.log_path.read_text(errors="replace")[-n:]
        except OSError:
            return ""


def _quote(value: str) -> str:
    """libpq conninfo quoting: values with spaces or quotes go in single quotes, escaped."""
    if value and not any(c in value for c in " '\\"):
        return value
    return "'" + value.replace("\\", "\\\\").replace("'", "\\'") + "'"


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def seed_data_dir(data_dir: Path, rows: int = 1_000_000) -> None:
    subprocess.run(
        [sys.executable, "-m", "icegres", "seed", "--data-dir", str(data_dir), "--rows", str(rows)],
        check=True, stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, timeout=300,
    )


def _wait_listening(proc: subprocess.Popen[bytes], port: int, log_path: Path, timeout_s: float) -> None:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            raise RuntimeError(f"icegres exited with {proc.returncode}:\n{log_path.read_text(errors='replace')[-4000:]}")
        with contextlib.suppress(OSError), socket.create_connection(("127.0.0.1", port), timeout=0.5):
            return
        time.sleep(0.05)
    raise RuntimeError(f"icegres did not listen within {timeout_s}s:\n{log_path.read_text(errors='replace')[-4000:]}")


@contextlib.contextmanager
def running_icegres(
    data_dir: Path, *, args: tuple[str, ...] = (), env: dict[str, str] | None = None,
    password: str | None = None, user: str = "icegres", timeout_s: float = 60,
) -> Iterator[IcegresServer]:
    port = free_port()
    log_path = data_dir.parent / f"icegres-{port}.log"
    cmd = [sys.executable, "-m", "icegres", "serve", "--data-dir", str(data_dir), "--host", "127.0.0.1",
           "--port", str(port), *args]
    with open(log_path, "ab") as log:
        proc = subprocess.Popen(cmd, stdout=log, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL,
                                env={**os.environ, **(env or {})})
    try:
        _wait_listening(proc, port, log_path, timeout_s)
        yield IcegresServer("127.0.0.1", port, data_dir, log_path, proc.pid, user=user, password=password)
    finally:
        if proc.poll() is None:
            proc.send_signal(signal.SIGTERM)
            try:
                proc.wait(timeout=15)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait(timeout=10)
