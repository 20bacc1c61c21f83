"""A real `icegres serve` process for e2e tests, on a free loopback port, stopped by its PID.

Ports: an icegres server started here binds port 0 and reports what the kernel gave it in its
`--ports-file` (`start_icegres`, `wait_ports`). Tests never pick a port by binding and closing a
socket: in the gap before the server binds it, any outgoing connection of this machine may be
given that port (tests/e2e/test_quorum_rejoin.py once failed so). A process that must come back
on the port it had (a keeper after SIGKILL) retries while the port is still taken
(`tests/support/keepers.py`); an address where nothing must answer is `refused_port()`.
"""

from __future__ import annotations

import contextlib
import itertools
import os
import signal
import socket
import subprocess
import sys
import time
from collections.abc import Iterator, Sequence
from dataclasses import dataclass, field
from pathlib import Path

from icegres.listeners import read_ports_file

PORT_IN_USE = "is in use"  # what an icegres server prints when its port is taken


# engine/executor.py logs it once every execution process is started and idle.
EXECUTORS_READY = "execution processes ready"


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
    ports: dict[str, int] = field(default_factory=dict)  # every port it bound, by option

    @property
    def flight_port(self) -> int:
        return self.ports["flight_port"]

    @property
    def ops_port(self) -> int:
        return self.ports["ops_port"]

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

    def wait_executors(self, timeout_s: float = 30) -> None:
        """Once the server's execution processes are all started and idle (engine/executor.py
        starts them 2 s after serving): a test that measures the server's idle memory or CPU
        must not count their start-up in what it measures."""
        self.wait_log(EXECUTORS_READY, timeout_s)

    def wait_log(self, text: str, timeout_s: float = 30) -> str:
        """The log once it holds `text`: a server listens (its port was bound) before it logs
        that it serves, so a test reading the log right after start-up must wait for the line."""
        deadline = time.monotonic() + timeout_s
        while text not in (log := self.log_path.read_text(errors="replace")):
            if time.monotonic() > deadline:
                raise AssertionError(f"{text!r} not in the log within {timeout_s}s:\n{log[-4000:]}")
            time.sleep(0.05)
        return log


def _quote(value: str) -> str:
    """libpq conninfo quoting: values with spaces or quotes go in single quotes, escaped."""
    if value and not any(c in value for c in " '\\"):
        return value
    return "'" + value.replace("\\", "\\\\").replace("'", "\\'") + "'"


@contextlib.contextmanager
def refused_port() -> Iterator[int]:
    """A loopback port where every connection is refused, for as long as the block runs: a socket
    is bound there but never listens, so no other process can take the port meanwhile."""
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        yield int(sock.getsockname()[1])


_RUNS = itertools.count(1)


def run_files(directory: Path, stem: str = "icegres") -> tuple[Path, Path]:
    """(log path, ports file path) of one more process started in `directory`, unique."""
    tag = f"{stem}-{os.getpid()}-{next(_RUNS)}"
    return directory / f"{tag}.log", directory / f"{tag}.ports.json"


def seed_data_dir(data_dir: Path, rows: int = 1_000_000) -> None:
    subprocess.run(
        [sys.executable, "-m", "icegres", "seed", "--data-dir", str(data_dir), "--rows", str(rows)],
        check=True, stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, timeout=300,
    )


class ServerExited(RuntimeError):
    """The process exited while we waited for it to bind or to listen; the message ends with its log."""


def _log_tail(log_path: Path, offset: int = 0) -> str:
    try:
        return log_path.read_bytes()[offset:].decode(errors="replace")[-4000:]
    except OSError:
        return ""


def wait_ports(proc: subprocess.Popen[bytes], ports_file: Path, log_path: Path, timeout_s: float) -> dict[str, int]:
    """The ports `proc` bound, from the --ports-file it writes once bound (its pid checked, so a
    file left by an earlier process is never taken for it)."""
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        data = read_ports_file(ports_file)
        if data is not None and data.get("pid") == proc.pid:
            return {k: int(v) for k, v in data.items() if k.endswith("port")}
        if proc.poll() is not None:
            raise ServerExited(f"icegres exited with {proc.returncode}:\n{_log_tail(log_path)}")
        time.sleep(0.02)
    raise RuntimeError(f"icegres did not write {ports_file} within {timeout_s}s:\n{_log_tail(log_path)}")


def wait_listening(proc: subprocess.Popen[bytes], port: int, log_path: Path, timeout_s: float) -> None:
    """Return once `port` accepts connections: an icegres server listens only when it serves."""
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            raise ServerExited(f"icegres exited with {proc.returncode}:\n{_log_tail(log_path)}")
        with contextlib.suppress(OSError), socket.create_connection(("127.0.0.1", port), timeout=0.5):
            return
        time.sleep(0.05)
    raise RuntimeError(f"icegres did not listen within {timeout_s}s:\n{_log_tail(log_path)}")


@dataclass
class Started:
    """A started icegres process and the ports it bound (its --ports-file)."""

    proc: subprocess.Popen[bytes]
    ports: dict[str, int]
    log_path: Path


def start_icegres(argv: Sequence[str], *, log_dir: Path, stem: str = "icegres", env: dict[str, str] | None = None,
                  timeout_s: float = 60, listening: bool = True) -> Started:
    """`python -m icegres <argv> --ports-file F` (its output appended to a log of its own in
    `log_dir`), returned once it bound its ports and, if `listening`, once every one of them
    accepts connections. Give the ports in `argv` as 0. On failure the process is killed and
    ServerExited / RuntimeError carries its log."""
    log_path, ports_file = run_files(log_dir, stem)
    cmd = [sys.executable, "-m", "icegres", *argv, "--ports-file", str(ports_file)]
    with open(log_path, "ab") as log:
        proc = subprocess.Popen(cmd, stdout=log, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL,
                                env={**os.environ, **(env or {})})
    try:
        deadline = time.monotonic() + timeout_s
        ports = wait_ports(proc, ports_file, log_path, timeout_s)
        # Every port, not only pgwire's: `serve` starts listening on them one after another
        # (Flight SQL's some 50 ms after pgwire's), so a test that starts on the first one to
        # answer finds the next refusing connections.
        for port in ports.values() if listening else ():
            wait_listening(proc, port, log_path, max(0.1, deadline - time.monotonic()))
    except BaseException:
        if proc.poll() is None:
            proc.kill()
            proc.wait(timeout=10)
        raise
    return Started(proc, ports, log_path)


def stop(proc: subprocess.Popen[bytes], sig: int = signal.SIGTERM, timeout_s: float = 15) -> None:
    """`sig` to the process (if it still runs), SIGKILL if it has not exited within `timeout_s`."""
    if proc.poll() is None:
        proc.send_signal(sig)
        try:
            proc.wait(timeout=timeout_s)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait(timeout=10)


@contextlib.contextmanager
def running_icegres(
    data_dir: Path, *, args: tuple[str, ...] = (), env: dict[str, str] | None = None,
    password: str | None = None, user: str = "icegres", timeout_s: float = 60,
) -> Iterator[IcegresServer]:
    """`icegres serve` on `data_dir`, on a port of the kernel's choice (and `args`, where any
    further port, e.g. `--flight-port 0`, should be 0 too); SIGTERM on exit."""
    started = start_icegres(["serve", "--data-dir", str(data_dir), "--host", "127.0.0.1", "--port", "0", *args],
                            log_dir=data_dir.parent, env=env, timeout_s=timeout_s)
    try:
        yield IcegresServer("127.0.0.1", started.ports["port"], data_dir, started.log_path, started.proc.pid,
                            user=user, password=password, ports=started.ports)
    finally:
        stop(started.proc)
