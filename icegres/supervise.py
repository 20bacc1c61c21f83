"""`icegres supervise`: run `icegres serve` as a child process and replace it when it dies or wedges.

Why a command of its own rather than `serve --ha`: the supervisor must outlive the writer's
SIGKILL, so it is a different process anyway; it holds no lake, no engine and no tail (a crash of
the writer can never take it down, and it never competes for the writer term). `serve` keeps
meaning "one process that serves", which is what systemd, Kubernetes or any other supervisor
already expects to run; `supervise` is the small built-in one for hosts without them.

The child is `icegres serve` with the flags `supervise` was given (options from the environment
or a config file reach it by inheritance). It must have `--ops-port`: the supervisor probes
`/ready` until the child serves (at most `--start-timeout-s`: replay may be long), then `/health`
every `--probe-interval-ms`. It replaces the child when

- the child exits (any code, any signal: a SIGKILLed writer, a tail that could not open), or
- `/health` answered 503 (poisoned tail, fenced writer, no majority) or did not answer for
  `--health-timeout-s` in a row, or `/ready` did not turn 200 within `--start-timeout-s`:
  then it SIGKILLs the child by PID (a wedged process cannot be trusted to drain).

A replacement is an ordinary `serve` start: on a quorum tail it wins a new, higher writer term
(fencing its predecessor at the keepers and at the lake), replays the acknowledged window and only
then listens. Restarts are immediate after a child that had served; a child that never became
ready is retried with a doubling delay (`RESTART_DELAY_S_MIN` .. `RESTART_DELAY_S_MAX`).
SIGTERM/SIGINT to the supervisor is passed to the child (which drains to the lake) and the
supervisor exits with the child's code.

Every child writes the ports it bound to a file of the supervisor's (`--ports-file`); the first
child's ports are then given to every later one as flags. So `--port 0` / `--ops-port 0` work
here too: the kernel picks once, and a replacement serves where its predecessor did (the
supervisor's own `--ports-file` reports them, with the supervisor's pid). A replacement that finds
a port taken exits, and is retried like any child that did not start.

`--warm-standby` keeps a second child waiting (`serve --standby`: imports done, lake open, no
term, no listener), started once the writer serves. A replacement is then that child, promoted
with SIGUSR1 after the old writer is gone (SIGKILLed or exited): it skips process start-up, the
bulk of a cold failover (bench/failover.py). The standby only promotes after a writer that had
served; a writer that never became ready is retried cold with the delay.

`judge` is the decision, pure: (policy, what is known of the child, now, the probe's answer) ->
(what is known next, a reason to replace or None). The trio driver below only probes and acts.
"""

from __future__ import annotations

import logging
import os
import shutil
import signal
import subprocess
import sys
import tempfile
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, replace
from pathlib import Path
from typing import TYPE_CHECKING, Any

import trio

from icegres.listeners import read_ports_file, write_ports_file

if TYPE_CHECKING:
    from icegres.config import Settings

__all__ = ["ChildPorts", "ChildState", "Policy", "child_argv", "judge", "restart_delay_s", "supervise"]

log = logging.getLogger("icegres.supervise")

RESTART_DELAY_S_MIN = 0.2
RESTART_DELAY_S_MAX = 5.0
PROBE_TIMEOUT_S_MAX = 1.0
STOP_TIMEOUT_S = 120.0  # a child draining its buffer to the lake on SIGTERM


@dataclass(frozen=True)
class Policy:
    start_timeout_s: float = 60.0
    health_timeout_s: float = 3.0
    probe_interval_ms: int = 200


@dataclass(frozen=True)
class ChildState:
    started_at_s: float
    ready: bool = False
    last_ok_at_s: float = 0.0

    @property
    def probe_path(self) -> str:
        return "/health" if self.ready else "/ready"


def judge(policy: Policy, child: ChildState, now_s: float, status: int | None) -> tuple[ChildState, str | None]:
    """One probe's answer (`status` None: no answer in time) -> the child's next state and a
    reason to replace it, or None to keep it."""
    if not child.ready:
        if status == 200:
            return replace(child, ready=True, last_ok_at_s=now_s), None
        waited = now_s - child.started_at_s
        if waited > policy.start_timeout_s:
            return child, f"not ready within {policy.start_timeout_s:g} s"
        return child, None
    if status == 200:
        return replace(child, last_ok_at_s=now_s), None
    bad = now_s - child.last_ok_at_s
    if bad > policy.health_timeout_s:
        what = "did not answer" if status is None else f"answered {status}"
        return child, f"/health {what} for {bad:.1f} s (limit {policy.health_timeout_s:g} s)"
    return child, None


def restart_delay_s(failed_starts: int) -> float:
    """The pause before the next start: none after a child that served, doubling (bounded) after
    each child in a row that never became ready."""
    if failed_starts <= 0:
        return 0.0
    return min(RESTART_DELAY_S_MAX, RESTART_DELAY_S_MIN * 2 ** (failed_starts - 1))


def child_argv(args: dict[str, Any], keys: tuple[str, ...]) -> list[str]:
    """The `serve` flags given on the command line (None: not given; the child inherits the
    environment, so options set there need no flag)."""
    from icegres.config import OPTIONS_BY_KEY

    out: list[str] = []
    if args.get("config"):
        out += ["--config", str(args["config"])]
    for key in keys:
        value = args.get(key)
        if value is None:
            continue
        option = OPTIONS_BY_KEY[key]
        out += [option.flag] if option.kind is bool else [option.flag, str(value)]
    return out


_PORT_KEYS = ("port", "flight_port", "ops_port")


class ChildPorts:
    """Where the children serve: learnt from the ports file the first child writes (`path`, its
    pid checked), then pinned. `flags()` gives them to every later child; `report` (the
    supervisor's own --ports-file) gets them once, with the supervisor's pid and `host`."""

    def __init__(self, path: Path, *, ops_port: int, host: str, report: str | None = None) -> None:
        self.path = path
        self.host = host
        self.report = report
        self.configured_ops_port = ops_port
        self.pinned: dict[str, int] = {}

    def learn(self, pid: int) -> bool:
        """True once the ports are known (read now from child `pid`'s file, or before)."""
        if self.pinned:
            return True
        data = read_ports_file(self.path)
        if data is None or data.get("pid") != pid:
            return False
        self.pinned = {key: int(data[key]) for key in _PORT_KEYS if isinstance(data.get(key), int)}
        log.info("supervisor: the writers serve on %s",
                 ", ".join(f"{key} {port}" for key, port in self.pinned.items()))
        if self.report:
            try:
                write_ports_file(self.report, self.host, self.pinned)
            except OSError as exc:
                log.error("supervisor: cannot write --ports-file %s: %s", self.report, exc)
        return True

    def ops_port(self, pid: int) -> int | None:
        """The port to probe child `pid` on, None until it is known."""
        if self.learn(pid):
            return self.pinned.get("ops_port", self.configured_ops_port or None)
        return self.configured_ops_port or None

    def flags(self) -> list[str]:
        """The child's flags: its ports file, and the pinned ports (after the forwarded flags:
        argparse keeps the last)."""
        out = ["--ports-file", str(self.path)]
        for key, port in self.pinned.items():
            out += ["--" + key.replace("_", "-"), str(port)]
        return out


async def probe(host: str, port: int, path: str, timeout_s: float) -> int | None:
    """The HTTP status of GET `path`, or None when nothing answered within `timeout_s`."""
    with trio.move_on_after(timeout_s):
        try:
            stream = await trio.open_tcp_stream(host, port)
            async with stream:
                request = f"GET {path} HTTP/1.1\r\nHost: {host}\r\nConnection: close\r\n\r\n"
                await stream.send_all(request.encode())
                head = b""
                while b"\r\n" not in head and len(head) < 4096:
                    chunk = await stream.receive_some(4096)
                    if not chunk:
                        break
                    head += chunk
            status = head.split(b" ", 2)[1]
            return int(status)
        except (OSError, trio.BrokenResourceError, ValueError, IndexError):
            return None
    return None


def run_supervisor(settings: Settings, args: dict[str, Any], keys: tuple[str, ...]) -> int:
    """`icegres supervise`: run `icegres serve` with the options `keys` of `args` as a child until
    SIGTERM/SIGINT, replacing it as `Policy` says. The process's exit status (the child's)."""
    from functools import partial

    policy = Policy(start_timeout_s=args["start_timeout_s"], health_timeout_s=args["health_timeout_s"],
                    probe_interval_ms=args["probe_interval_ms"])
    # --ports-file is the supervisor's own: the children write to a file of its choosing.
    keys = tuple(k for k in keys if k != "ports_file")
    return trio.run(partial(supervise, child_argv(args, keys), settings.host, settings.ops_port, policy,
                            warm_standby=args["warm_standby"], ports_file=settings.ports_file))


async def supervise(serve_argv: list[str], host: str, ops_port: int, policy: Policy, *,
                    warm_standby: bool = False, ports_file: str | None = None) -> int:
    """Run `icegres serve serve_argv` until SIGTERM/SIGINT, replacing it as the module says.
    With `warm_standby`, a second child waits (`serve --standby`: started, lake open) and is
    promoted with SIGUSR1 instead of a cold start. `ports_file` gets the children's ports once
    the first one bound them. Returns the last child's exit code once it stopped on our signal."""
    scratch = Path(tempfile.mkdtemp(prefix="icegres-supervise-"))
    try:
        ports = ChildPorts(scratch / "child-ports.json", ops_port=ops_port, host=host, report=ports_file)
        return await _supervise(serve_argv, host, ports, policy, warm_standby=warm_standby)
    finally:
        shutil.rmtree(scratch, ignore_errors=True)


async def _supervise(serve_argv: list[str], host: str, ports: ChildPorts, policy: Policy, *,
                     warm_standby: bool) -> int:
    probe_host = "127.0.0.1" if host in ("0.0.0.0", "") else ("::1" if host == "::" else host)
    stopping = trio.Event()
    failed_starts = 0
    generation = 0
    standby: trio.Process | None = None

    def cmd() -> list[str]:
        return [sys.executable, "-m", "icegres", "serve", *serve_argv, *ports.flags()]

    async def start_standby() -> None:
        nonlocal standby
        if warm_standby and not stopping.is_set() and (standby is None or standby.returncode is not None):
            # SIGUSR1 blocked from birth: a promotion sent while the standby still starts stays
            # pending until it listens for it (`serve._promoted`), instead of killing it.
            standby = await trio.lowlevel.open_process([*cmd(), "--standby"], stdin=subprocess.DEVNULL,
                                                       preexec_fn=_block_sigusr1)
            log.info("supervisor: warm standby started (pid %d)", standby.pid)

    with trio.open_signal_receiver(signal.SIGTERM, signal.SIGINT) as signals:
        async with trio.open_nursery() as nursery:

            async def on_signals() -> None:
                async for sig in signals:
                    log.info("supervisor: %s: stopping the writer", signal.Signals(sig).name)
                    stopping.set()

            nursery.start_soon(on_signals)
            promoted: trio.Process | None = None
            while True:
                generation += 1
                if promoted is not None:
                    proc, promoted = promoted, None
                    proc.send_signal(signal.SIGUSR1)
                    log.info("supervisor: writer %d is the promoted standby (pid %d)", generation, proc.pid)
                else:
                    proc = await trio.lowlevel.open_process(cmd(), stdin=subprocess.DEVNULL)
                    log.info("supervisor: writer %d started (pid %d)", generation, proc.pid)
                child = ChildState(started_at_s=trio.current_time())
                # A new standby starts once the writer serves: it never slows a failover down.
                reason = await _watch(proc, child, policy, probe_host, ports, stopping, start_standby)
                if stopping.is_set():
                    if standby is not None:
                        await _stop(standby)
                    code = await _stop(proc)
                    log.info("supervisor: writer pid %d exited with %s; done", proc.pid, code)
                    nursery.cancel_scope.cancel()
                    return code if code is not None else 1
                served = reason.startswith("served:")
                reason = reason.removeprefix("served:")
                if proc.returncode is None:
                    log.error("supervisor: replacing writer pid %d: %s (SIGKILL)", proc.pid, reason)
                    _kill(proc.pid)
                    with trio.CancelScope(shield=True):
                        await proc.wait()
                else:
                    log.error("supervisor: writer pid %d %s", proc.pid, reason)
                if standby is not None and standby.returncode is None and served:
                    promoted, standby = standby, None
                    continue
                failed_starts = 0 if served else failed_starts + 1
                delay = restart_delay_s(failed_starts)
                if delay:
                    with trio.move_on_after(delay):
                        await stopping.wait()
                if stopping.is_set():
                    if standby is not None:
                        await _stop(standby)
                    nursery.cancel_scope.cancel()
                    return 0
    return 0


async def _watch(proc: trio.Process, child: ChildState, policy: Policy, host: str, ports: ChildPorts,
                 stopping: trio.Event, on_ready: Callable[[], Awaitable[None]]) -> str:
    """Probe until the child must go (or a stop was asked): the reason, prefixed `served:` when
    the child had become ready."""
    interval_s = policy.probe_interval_ms / 1000
    timeout_s = min(PROBE_TIMEOUT_S_MAX, max(interval_s, 0.1))

    def why(text: str) -> str:
        return ("served:" if child.ready else "") + text

    while True:
        with trio.move_on_after(interval_s):
            async with trio.open_nursery() as waits:
                async def exited() -> None:
                    await proc.wait()
                    waits.cancel_scope.cancel()

                async def stop() -> None:
                    await stopping.wait()
                    waits.cancel_scope.cancel()

                waits.start_soon(exited)
                waits.start_soon(stop)
        if stopping.is_set():
            return "stopping"
        if proc.returncode is not None:
            return why(f"exited with {_describe_exit(proc.returncode)}")
        # Until the child reported its ports, it is not ready (it writes them before opening the lake).
        port = ports.ops_port(proc.pid)
        status = None if port is None else await probe(host, port, child.probe_path, timeout_s)
        if proc.returncode is not None:
            return why(f"exited with {_describe_exit(proc.returncode)}")
        was_ready = child.ready
        child, reason = judge(policy, child, trio.current_time(), status)
        if child.ready and not was_ready:
            log.info("supervisor: writer pid %d is serving", proc.pid)
            await on_ready()
        if reason is not None:
            return why(reason)


async def _stop(proc: trio.Process) -> int | None:
    if proc.returncode is None:
        proc.send_signal(signal.SIGTERM)
    with trio.CancelScope(shield=True):
        with trio.move_on_after(STOP_TIMEOUT_S):
            await proc.wait()
        if proc.returncode is None:
            log.error("supervisor: writer pid %d did not stop within %g s: SIGKILL", proc.pid, STOP_TIMEOUT_S)
            _kill(proc.pid)
            await proc.wait()
    return proc.returncode


# What a warm standby loads before it waits: the modules a first INSERT would otherwise import
# lazily (the tail, the write path, the commit machine), ~0.2 s of a promoted standby's first ack.
_WARM_MODULES = (
    "icegres.ladder", "icegres.machines.drivers.quorum", "icegres.machines.drivers.commit",
    "icegres.engine.dml", "icegres.engine.dml.copy_on_write", "icegres.engine.assign", "icegres.engine.params", "icegres.engine.lake_world",
    "icegres.protocol.pgwire.results", "icegres.protocol.pgwire.datarows", "icegres.pg.params", "pyiceberg.io.pyarrow",
    "icegres.engine.pg_catalog",
)
_WARM_SQL = ("insert into warm.t values ($1, $2)", "insert into warm.t values (1, 'x')")


def warm_up(engine: Any = None) -> None:
    """Import the write path, parse a few INSERTs (sqlglot's caches) and run `select 1` on a
    fresh session context (DataFusion), touching no lake. Blocking: a worker thread's job. Best
    effort: a failure only costs the first write time."""
    import importlib

    from icegres.engine.rewrite import to_sql
    from icegres.sql.parse import parse

    for name in _WARM_MODULES:
        try:
            importlib.import_module(name)
        except Exception:  # noqa: BLE001 - best effort
            log.debug("warm-up: cannot import %s", name, exc_info=True)
    for sql in _WARM_SQL:
        try:
            to_sql(parse(sql))
        except Exception:  # noqa: BLE001 - best effort
            log.debug("warm-up: cannot parse %r", sql, exc_info=True)
    if engine is not None:
        try:
            engine.new_context("public")[0].sql("select 1").collect()
        except Exception:  # noqa: BLE001 - best effort
            log.debug("warm-up: select 1 failed", exc_info=True)


def _block_sigusr1() -> None:
    signal.pthread_sigmask(signal.SIG_BLOCK, {signal.SIGUSR1})


def _kill(pid: int) -> None:
    try:
        os.kill(pid, signal.SIGKILL)
    except ProcessLookupError:
        pass


def _describe_exit(code: int) -> str:
    if code < 0:
        try:
            return f"signal {signal.Signals(-code).name}"
        except ValueError:
            return f"signal {-code}"
    return f"code {code}"
