"""A real, throwaway PostgreSQL 15 server for tests: no mocks, nothing left behind.

`running_postgres()` initdb's a fresh cluster in a temporary directory, starts `postgres` on a free
loopback port and yields once the server answers. On exit, or on any failure while starting, it stops
exactly the process it started (`pg_ctl stop -m fast`, then SIGKILL to that PID) and removes the
directory. If the server cannot start, the error carries the tail of its log: a test that needs
PostgreSQL fails loudly instead of skipping.

PostgreSQL refuses to run as root, so when the tests run as root the cluster belongs to the
unprivileged OS user `postgres` and every PostgreSQL binary runs as that user.
"""

from __future__ import annotations

import contextlib
import os
import pwd
import shutil
import signal
import socket
import subprocess
import tempfile
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

PG_BIN_DIR = Path(os.environ.get("ICEGRES_PG_BIN", "/usr/lib/postgresql/15/bin"))
OS_USER_WHEN_ROOT = "postgres"
DB_USER = "postgres"
DB_NAME = "postgres"
_LOG_TAIL_BYTES = 4000
_BIND_ATTEMPTS_MAX = 3  # the free port we picked can be taken before postgres binds it


@dataclass(frozen=True)
class PostgresServer:
    host: str
    port: int
    user: str
    dbname: str
    data_dir: Path

    def dsn(self) -> str:
        return f"host={self.host} port={self.port} user={self.user} dbname={self.dbname}"


class PostgresStartError(RuntimeError):
    """PostgreSQL could not be initialised or started; the message ends with its log tail."""


@dataclass(frozen=True)
class _RunAs:
    """Who runs the PostgreSQL binaries: nobody in particular unless we are root."""

    uid: int | None
    gid: int | None

    @classmethod
    def for_current_process(cls) -> _RunAs:
        if os.geteuid() != 0:
            return cls(None, None)
        pw = pwd.getpwnam(OS_USER_WHEN_ROOT)
        return cls(pw.pw_uid, pw.pw_gid)

    @property
    def extra_groups(self) -> list[int] | None:
        # Passing user=/group= to subprocess makes the child switch ids itself, so the PID we get
        # back is the postgres process (not a runuser wrapper) and we can always kill exactly it.
        # Dropping root's supplementary groups completes the switch.
        return None if self.uid is None else []

    def chown(self, path: Path) -> None:
        if self.uid is not None:
            os.chown(path, self.uid, self.gid if self.gid is not None else -1)


def _free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def _log_tail(log_path: Path) -> str:
    try:
        data = log_path.read_bytes()
    except OSError as e:
        return f"<no log: {e}>"
    return data[-_LOG_TAIL_BYTES:].decode("utf-8", "replace")


def _child_env() -> dict[str, str]:
    # A clean environment: PG* variables from the caller must not redirect initdb or pg_ctl.
    return {
        "PATH": f"{PG_BIN_DIR}:/usr/bin:/bin",
        "LC_ALL": "C.UTF-8",
        "LANG": "C.UTF-8",
        "TZ": "UTC",
    }


def _run_checked(
    args: list[str], run_as: _RunAs, log_path: Path, timeout_s: float, cwd: Path
) -> None:
    with open(log_path, "ab") as log:
        proc = subprocess.run(
            args,
            stdout=log,
            stderr=subprocess.STDOUT,
            stdin=subprocess.DEVNULL,
            env=_child_env(),
            cwd=cwd,
            timeout=timeout_s,
            check=False,
            user=run_as.uid,
            group=run_as.gid,
            extra_groups=run_as.extra_groups,
        )
    if proc.returncode != 0:
        raise PostgresStartError(f"{args[0]} exited with {proc.returncode}\n{_log_tail(log_path)}")


def _answers(port: int, run_as: _RunAs, timeout_s: float, cwd: Path) -> bool:
    """True once the server accepts a connection on the TCP port (pg_isready exit code 0)."""
    try:
        proc = subprocess.run(
            [
                str(PG_BIN_DIR / "pg_isready"),
                "-q",
                "-h",
                "127.0.0.1",
                "-p",
                str(port),
                "-U",
                DB_USER,
                "-d",
                DB_NAME,
                "-t",
                "2",
            ],
            stdin=subprocess.DEVNULL,
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
            env=_child_env(),
            cwd=cwd,
            timeout=timeout_s,
            check=False,
            user=run_as.uid,
            group=run_as.gid,
            extra_groups=run_as.extra_groups,
        )
    except subprocess.TimeoutExpired:
        return False
    return proc.returncode == 0


def _start_server(
    data_dir: Path, base_dir: Path, run_as: _RunAs, log_path: Path, deadline: float
) -> tuple[subprocess.Popen[bytes], int]:
    """Start postgres on a free port and wait until it answers. Returns (process, port)."""
    last_error = ""
    for _attempt in range(_BIND_ATTEMPTS_MAX):
        port = _free_port()
        log_offset = log_path.stat().st_size if log_path.exists() else 0
        with open(log_path, "ab") as log:
            proc = subprocess.Popen(
                [
                    str(PG_BIN_DIR / "postgres"),
                    "-D",
                    str(data_dir),
                    "-p",
                    str(port),
                    "-c",
                    "listen_addresses=127.0.0.1",
                    "-c",
                    f"unix_socket_directories={base_dir}",
                    "-c",
                    "fsync=on",
                    "-c",
                    "logging_collector=off",
                    "-c",
                    "max_connections=50",
                    "-c",
                    "TimeZone=UTC",
                ],
                stdout=log,
                stderr=subprocess.STDOUT,
                stdin=subprocess.DEVNULL,
                env=_child_env(),
                cwd=base_dir,
                start_new_session=True,
                user=run_as.uid,
                group=run_as.gid,
                extra_groups=run_as.extra_groups,
            )
        try:
            answered = _wait_until_answers(proc, port, run_as, base_dir, deadline)
        except BaseException:
            _stop_server(proc, data_dir, run_as, base_dir)
            raise
        if answered:
            return proc, port
        if proc.poll() is None:
            _stop_server(proc, data_dir, run_as, base_dir)
            raise PostgresStartError(
                f"postgres did not answer before the deadline\n{_log_tail(log_path)}"
            )
        with open(log_path, "rb") as f:
            f.seek(log_offset)
            last_error = f.read().decode("utf-8", "replace")
        if "could not bind" not in last_error and "Address already in use" not in last_error:
            break
    raise PostgresStartError(f"postgres exited with {proc.returncode}\n{_log_tail(log_path)}")


def _wait_until_answers(
    proc: subprocess.Popen[bytes], port: int, run_as: _RunAs, cwd: Path, deadline: float
) -> bool:
    """True once the server answers; False if it exited or the deadline passed first."""
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            return False
        if _answers(port, run_as, max(0.5, deadline - time.monotonic()), cwd):
            return True
        time.sleep(0.05)
    return False


def _stop_server(proc: subprocess.Popen[bytes], data_dir: Path, run_as: _RunAs, cwd: Path) -> None:
    """Fast shutdown, then SIGKILL to the PID we started if it is still there. Never raises."""
    if proc.poll() is None:
        with contextlib.suppress(Exception):
            subprocess.run(
                [
                    str(PG_BIN_DIR / "pg_ctl"),
                    "stop",
                    "-D",
                    str(data_dir),
                    "-m",
                    "fast",
                    "-w",
                    "-t",
                    "20",
                ],
                stdin=subprocess.DEVNULL,
                stdout=subprocess.DEVNULL,
                stderr=subprocess.DEVNULL,
                env=_child_env(),
                cwd=cwd,
                timeout=30,
                check=False,
                user=run_as.uid,
                group=run_as.gid,
                extra_groups=run_as.extra_groups,
            )
    with contextlib.suppress(subprocess.TimeoutExpired):
        proc.wait(timeout=10)
    if proc.poll() is None:
        with contextlib.suppress(ProcessLookupError):
            # The postmaster leads its own session (start_new_session), so this reaches its
            # children too — and nothing else.
            os.killpg(proc.pid, signal.SIGKILL)
        with contextlib.suppress(subprocess.TimeoutExpired):
            proc.wait(timeout=10)


@contextlib.contextmanager
def running_postgres(*, timeout_s: float = 60) -> Iterator[PostgresServer]:
    """A fresh PostgreSQL 15 cluster on 127.0.0.1, trust auth, stopped and removed on exit.

    `timeout_s` bounds initdb plus start-up together. Raises PostgresStartError (with the server log
    tail) if the server cannot be started in time.
    """
    deadline = time.monotonic() + timeout_s
    run_as = _RunAs.for_current_process()
    base_dir = Path(tempfile.mkdtemp(prefix="icegres-pg-"))
    data_dir = base_dir / "data"
    log_path = base_dir / "postgres.log"
    proc: subprocess.Popen[bytes] | None = None
    try:
        try:
            run_as.chown(base_dir)
            log_path.touch()
            run_as.chown(log_path)
            _run_checked(
                [
                    str(PG_BIN_DIR / "initdb"),
                    "-D",
                    str(data_dir),
                    "-A",
                    "trust",
                    "-U",
                    DB_USER,
                    "-E",
                    "UTF8",
                    "--locale=C.UTF-8",
                    "--no-instructions",
                ],
                run_as,
                log_path,
                max(1.0, deadline - time.monotonic()),
                base_dir,
            )
            proc, port = _start_server(data_dir, base_dir, run_as, log_path, deadline)
        except subprocess.TimeoutExpired as e:
            raise PostgresStartError(f"{e}\n{_log_tail(log_path)}") from e
        yield PostgresServer(
            host="127.0.0.1", port=port, user=DB_USER, dbname=DB_NAME, data_dir=data_dir
        )
    finally:
        if proc is not None:
            _stop_server(proc, data_dir, run_as, base_dir)
        shutil.rmtree(base_dir, ignore_errors=True)
