"""The scratch processes of one verify run: `icegres serve` (and `icegres keeper`) children on
loopback, started with the deployment's catalog settings in their environment (never on their
command line, where `ps` would show a secret), each logging to a file of the run, and all of
them ended by `Nodes.close` — on success, on a claim's failure, on Ctrl-C."""

from __future__ import annotations

import contextlib
import signal
import subprocess
import sys
import time
import urllib.error
import urllib.request
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path

from icegres.listeners import read_ports_file

__all__ = ["START_TIMEOUT_S", "Node", "NodeFailed", "Nodes", "child_base_env"]

START_TIMEOUT_S = 120.0  # a restart replays its tail before /ready turns 200
STOP_TIMEOUT_S = 60.0  # SIGTERM drains the write buffer to the lake


class NodeFailed(Exception):
    """A scratch process did not start (its log's last lines are in the message)."""


@dataclass
class Node:
    """One scratch process. `name` is stable across restarts: a restarted server has the same
    data directory, so the same tail identity, and replays what its predecessor acknowledged."""

    name: str
    kind: str  # "serve" | "keeper"
    data_dir: Path
    log_path: Path
    argv: list[str]
    env: dict[str, str]
    proc: subprocess.Popen[bytes] | None = None
    ports: dict[str, int] = field(default_factory=dict)

    @property
    def port(self) -> int:
        return self.ports["port"]

    @property
    def pid(self) -> int:
        assert self.proc is not None
        return self.proc.pid

    def dsn(self, **extra: str) -> str:
        parts = {"host": "127.0.0.1", "port": str(self.port), "dbname": "icegres", "user": "icegres",
                 "connect_timeout": "10", **extra}
        return " ".join(f"{k}={v}" for k, v in parts.items())

    @property
    def address(self) -> str:
        return f"127.0.0.1:{self.port}"

    def running(self) -> bool:
        return self.proc is not None and self.proc.poll() is None

    def kill(self) -> None:
        """SIGKILL, as a power cut would end it: no drain, no flush."""
        if self.running():
            assert self.proc is not None
            self.proc.kill()
            self.proc.wait(timeout=30)

    def stop(self) -> None:
        """SIGTERM (the server drains its buffer to the lake), SIGKILL if it has not exited in time."""
        if self.running():
            assert self.proc is not None
            self.proc.send_signal(signal.SIGTERM)
            try:
                self.proc.wait(timeout=STOP_TIMEOUT_S)
            except subprocess.TimeoutExpired:
                self.kill()

    def log_tail(self, chars: int = 2000) -> str:
        with contextlib.suppress(OSError):
            return self.log_path.read_text(errors="replace")[-chars:]
        return ""


class Nodes:
    """Every process a run started, by name."""

    def __init__(self, run_dir: Path, base_env: Mapping[str, str]) -> None:
        self.run_dir = run_dir
        self.base_env = dict(base_env)
        self.by_name: dict[str, Node] = {}

    def serve(self, name: str, env: Mapping[str, str] | None = None, args: Sequence[str] = (),
              *, wait_ready: bool = True) -> Node:
        """Start (or restart, keeping its data directory) the scratch server `name`; returned once
        /ready is 200, i.e. it replayed its tail and accepts clients."""
        data_dir = self.run_dir / name
        argv = ["serve", "--data-dir", str(data_dir), "--host", "127.0.0.1", "--port", "0", "--ops-port", "0",
                *args]
        node = self._start(name, "serve", data_dir, argv, env or {})
        if wait_ready:
            self._wait_ready(node)
        return node

    def keeper(self, name: str, *, init: bool, extra: Sequence[str] = ()) -> Node:
        """Start (or restart) the local keeper `name` (`--init` for a new, empty one)."""
        data_dir = self.run_dir / name
        node = self._start(name, "keeper", data_dir,
                           ["keeper", "--data-dir", str(data_dir), "--port", str(self._old_port(name)),
                            *(["--init"] if init else []), *extra], {})
        return node

    def restart(self, node: Node, *, wait_ready: bool = True) -> Node:
        """The same process again, with the same flags, environment and (for a keeper) port."""
        argv = list(node.argv)
        if node.kind == "keeper":
            argv = [a for a in argv if a != "--init"]
            argv[argv.index("--port") + 1] = str(node.ports.get("port", 0))
        fresh = self._start(node.name, node.kind, node.data_dir, argv, node.env)
        if node.kind == "serve" and wait_ready:
            self._wait_ready(fresh)
        return fresh

    def close(self) -> None:
        """End every process still running: SIGKILL (verify's processes hold nothing an operator
        needs drained; what the claims proved was proved before)."""
        for node in self.by_name.values():
            with contextlib.suppress(Exception):
                node.kill()

    def close_claim(self, prefix: str) -> None:
        """End the processes a claim started (their names begin with `prefix`)."""
        for name, node in self.by_name.items():
            if name.startswith(prefix):
                with contextlib.suppress(Exception):
                    node.kill()

    def _old_port(self, name: str) -> int:
        old = self.by_name.get(name)
        return old.ports.get("port", 0) if old is not None else 0

    def _start(self, name: str, kind: str, data_dir: Path, argv: list[str], env: Mapping[str, str]) -> Node:
        old = self.by_name.get(name)
        if old is not None and old.running():
            raise RuntimeError(f"scratch process {name} is still running")
        data_dir.mkdir(parents=True, exist_ok=True)
        log_path = self.run_dir / f"{name}.log"
        ports_file = self.run_dir / f"{name}.ports.json"
        with contextlib.suppress(FileNotFoundError):
            ports_file.unlink()
        node = Node(name, kind, data_dir, log_path, argv, dict(env))
        with open(log_path, "ab") as log:
            node.proc = subprocess.Popen(
                [sys.executable, "-m", "icegres", *argv, "--ports-file", str(ports_file)],
                stdout=log, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL,
                env={**self.base_env, **env}, start_new_session=True)  # Ctrl-C is verify's to handle
        self.by_name[name] = node
        deadline = time.monotonic() + START_TIMEOUT_S
        while True:
            data = read_ports_file(ports_file)
            if data is not None and data.get("pid") == node.pid:
                node.ports = {k: v for k, v in data.items() if k not in ("pid", "host") and isinstance(v, int)}
                return node
            if node.proc.poll() is not None:
                raise NodeFailed(f"scratch {kind} {name} exited with {node.proc.returncode}: {_last_lines(node)}")
            if time.monotonic() > deadline:
                node.kill()
                raise NodeFailed(f"scratch {kind} {name} did not bind within {START_TIMEOUT_S:g} s: {_last_lines(node)}")
            time.sleep(0.02)

    def _wait_ready(self, node: Node) -> None:
        deadline = time.monotonic() + START_TIMEOUT_S
        url = f"http://127.0.0.1:{node.ports['ops_port']}/ready"
        while True:
            with contextlib.suppress(OSError, urllib.error.URLError), urllib.request.urlopen(url, timeout=2) as reply:
                if reply.status == 200:
                    return
            if not node.running():
                raise NodeFailed(f"scratch server {node.name} exited with {node.proc.returncode if node.proc else '?'} "
                                 f"before serving: {_last_lines(node)}")
            if time.monotonic() > deadline:
                node.kill()
                raise NodeFailed(f"scratch server {node.name} was not ready within {START_TIMEOUT_S:g} s: "
                                 f"{_last_lines(node)}")
            time.sleep(0.05)


def _last_lines(node: Node, n: int = 3) -> str:
    lines = [line for line in node.log_tail(4000).splitlines() if line.strip()]
    return " | ".join(lines[-n:]) or f"(nothing in {node.log_path})"


def child_base_env(environ: Mapping[str, str]) -> dict[str, str]:
    """The environment children inherit: the caller's without any ICEGRES_* setting (the run hands
    each child its settings explicitly), except ICEGRES_FAULTS, which tests use to break a property
    on purpose and prove the claim that covers it FAILs."""
    return {k: v for k, v in environ.items() if not k.startswith("ICEGRES_") or k == "ICEGRES_FAULTS"}
