"""Real `icegres keeper` processes for e2e tests (tests/e2e/test_keeper.py, test_quorum_rejoin.py,
test_ops.py, test_failover.py).

A keeper's first start binds port 0 and reports the port it got (--ports-file); every later start
asks for that same port, because the writers' --tail-quorum names it. Between a SIGKILL and that
restart the port is free, and an outgoing connection of this machine can be given it meanwhile
(a writer reconnecting to the dead keeper can even be connected to itself on it): a restart that
finds its port taken is retried until RESTART_TIMEOUT_S.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import trio

from icegres.machines.quorum import AcceptorState, recover_acceptor
from icegres.machines.quorum_format import scan_log
from tests.support.icegres_server import PORT_IN_USE, ServerExited, wait_listening, wait_ports

READY_TIMEOUT_S = 20
RESTART_TIMEOUT_S = 20  # how long a restart waits for its old port to come free
RETRY_PAUSE_S = 0.2


class Keeper:
    """One keeper: its data directory, its port once it has one, its process while it runs."""

    def __init__(self, data_dir: Path) -> None:
        self.data_dir = data_dir
        self.port: int | None = None  # chosen by the kernel at the first start, then kept
        self.proc: subprocess.Popen[bytes] | None = None
        self.log_path = data_dir.parent / f"{data_dir.name}.stderr"
        self.ports_file = data_dir.parent / f"{data_dir.name}.ports.json"

    @property
    def address(self) -> str:
        assert self.port is not None, "a keeper has an address once it started"
        return f"127.0.0.1:{self.port}"

    def start(self, *extra: str, init: bool = False, timeout_s: float = READY_TIMEOUT_S) -> None:
        """Start it (`--init`, or `extra` flags such as --rejoin) and return once it listens. A
        restart on a port still taken by someone else is retried, up to RESTART_TIMEOUT_S."""
        deadline = time.monotonic() + max(timeout_s, RESTART_TIMEOUT_S if self.port is not None else 0)
        while True:
            offset = self.log_path.stat().st_size if self.log_path.exists() else 0
            argv = [sys.executable, "-m", "icegres", "keeper", "--host", "127.0.0.1",
                    "--port", str(self.port if self.port is not None else 0), "--ports-file", str(self.ports_file),
                    "--data-dir", str(self.data_dir), *(["--init"] if init else []), *extra]
            with open(self.log_path, "ab") as err:
                self.proc = subprocess.Popen(argv, stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, stderr=err)
            try:
                self.port = wait_ports(self.proc, self.ports_file, self.log_path, timeout_s)["port"]
                wait_listening(self.proc, self.port, self.log_path, timeout_s)
                return
            except ServerExited:
                taken = PORT_IN_USE in self.log_path.read_bytes()[offset:].decode(errors="replace")
                if not taken or time.monotonic() + RETRY_PAUSE_S > deadline:
                    raise
                time.sleep(RETRY_PAUSE_S)

    async def start_async(self, *extra: str, init: bool = False) -> None:
        """`start` from a trio test, in a worker thread."""
        await trio.to_thread.run_sync(lambda: self.start(*extra, init=init))

    async def kill(self) -> None:
        assert self.proc is not None
        os.kill(self.proc.pid, signal.SIGKILL)
        await trio.to_thread.run_sync(self.proc.wait, 10)
        self.proc = None

    def durable_state(self) -> AcceptorState:
        return recover_acceptor(scan_log((self.data_dir / "keeper.log").read_bytes()).records)

    def stop(self) -> None:
        """SIGKILL, if it runs."""
        if self.proc is not None and self.proc.poll() is None:
            os.kill(self.proc.pid, signal.SIGKILL)
            self.proc.wait(10)
        self.proc = None


def start_keepers(root: Path, n: int = 3) -> list[Keeper]:
    """`n` new keepers (--init) under `root`, each listening on a port of its own."""
    keepers = [Keeper(root / f"keeper{i}") for i in range(n)]
    try:
        for keeper in keepers:
            keeper.start(init=True)
    except BaseException:
        for keeper in keepers:
            keeper.stop()
        raise
    return keepers
