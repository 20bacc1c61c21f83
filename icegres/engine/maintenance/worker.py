"""Automatic maintenance's jobs, and the process they run in (`python -m
icegres.engine.maintenance.worker`).

Why a process: a job is mostly pyiceberg's Python (manifests read and written, metadata), which
holds the GIL; run on a thread of the server, it made every foreground statement wait for the
GIL at each of its thread hand-offs (bench auto_maintenance, first run: point-lookup p95 2.42x of
idle while a job ran). In a process of its own, at nice +10 like the execution processes, the job
competes for a core, not for the server's interpreter. The scheduler (scheduler.py) starts one
such process when the first job is due and keeps it; a job is one request over a socket pair,
answered with what it did.

The **gate** is how the server tells a running job what it may do without a message: four
numbers in shared memory (a memfd both processes map) that the server's scheduler keeps current
while the job runs — the lease's deadline on the monotonic clock (CLOCK_MONOTONIC is one clock
for every process of the machine), whether the server drains, and the foreground's load (queries
running, statements finished). The job reads it before each commit (`fence`: at least
`commit_margin_s` of lease left, not draining) and between compaction's file groups (`pause`:
wait for a quiet foreground, up to `max_defer_s`). A lost lease shows as a deadline of -inf.

`run_op` is the job itself and runs the same in a thread (the unit tests, and a server started
without the options the process needs) as in the process.
"""

from __future__ import annotations

import logging
import mmap
import os
import struct
import sys
import threading
import time
from dataclasses import dataclass
from typing import Any

log = logging.getLogger("icegres.maintain")

__all__ = ["Gate", "LeaseLost", "Request", "run_op"]

NICE = 10  # as the execution processes (executor_main.py): the server's threads come first
_FIELDS = ("deadline", "stopping", "running", "finished")
GATE_BYTES = 8 * len(_FIELDS)
EPOCH_PROPERTY = "icegres.maintenance.epoch"


class LeaseLost(Exception):
    """The job must not commit: its lease is lost or nearly out, or the server is draining."""


class Gate:
    """Four doubles in a buffer (shared memory between the server and the worker process, or a
    plain bytearray in one process): written by the scheduler, read by the job."""

    def __init__(self, buffer: Any = None) -> None:
        self.buffer = buffer if buffer is not None else bytearray(GATE_BYTES)
        if buffer is None:
            self.deadline = float("inf")

    def _get(self, i: int) -> float:
        return struct.unpack_from("d", self.buffer, 8 * i)[0]

    def _set(self, i: int, value: float) -> None:
        struct.pack_into("d", self.buffer, 8 * i, value)

    deadline = property(lambda self: self._get(0), lambda self, v: self._set(0, v))  # monotonic s; -inf: lost
    stopping = property(lambda self: self._get(1) != 0, lambda self, v: self._set(1, 1.0 if v else 0.0))
    running = property(lambda self: int(self._get(2)), lambda self, v: self._set(2, float(v)))
    finished = property(lambda self: int(self._get(3)), lambda self, v: self._set(3, float(v)))


@dataclass(frozen=True)
class Request:
    """One operation of a job, with what the server knows that the job cannot see itself."""

    op: str  # policy.Op's value
    key: tuple[str, str]
    min_input_files: int
    expire_max_age_ms: int
    expire_retain_last: int
    pinned: frozenset[int]  # snapshots this server's transactions hold
    in_use: frozenset[str]  # local files a statement running on this server may open
    commit_margin_s: float
    quiet_s: float
    max_defer_s: float
    epoch: int = 0  # the lease's: written into the summary of the snapshots the job commits


def run_op(lakehouse: Any, request: Request, gate: Gate) -> dict[str, Any]:
    """Run one operation (blocking): what it did, `found` False when it changed nothing. Raises
    LeaseLost (nothing committed) or the operation's own error."""

    def fence() -> None:
        if gate.stopping:
            raise LeaseLost("the server is draining: nothing committed")
        left = gate.deadline - time.monotonic()
        if left < request.commit_margin_s:
            raise LeaseLost(f"the lease has {max(left, 0):.1f}s left (< {request.commit_margin_s:.1f}s): "
                            "nothing committed")

    def pause(*_: Any) -> None:
        deadline = time.monotonic() + request.max_defer_s
        before = (gate.running, gate.finished)
        while time.monotonic() < deadline and not gate.stopping:
            time.sleep(request.quiet_s)
            after = (gate.running, gate.finished)
            if after[0] == 0 and before == after:
                break
            before = after
        if gate.stopping or gate.deadline <= time.monotonic():
            raise LeaseLost("stopped between file groups: the lease is gone or the server drains")

    key = request.key
    # Which lease a snapshot was committed under: a later holder (or an operator) can tell a
    # deposed holder's late commit by it (docs/maintenance-lease.md, "Why epochs").
    summary = {EPOCH_PROPERTY: str(request.epoch)} if request.epoch else {}
    if request.op == "compact":
        from icegres.engine.maintenance.compact import CompactOptions, compact

        result = compact(lakehouse, key, CompactOptions(min_input_files=request.min_input_files), pause, fence,
                         summary)
        return {"found": result.snapshot_id is not None, "compacted": result.rewritten_data_files_count,
                "written": result.added_data_files_count}
    if request.op == "rewrite_manifests":
        from icegres.engine.maintenance.manifests import rewrite_manifests

        merged = rewrite_manifests(lakehouse, key, before_commit=fence, snapshot_properties=summary)
        found = merged.snapshot_id is not None
        return {"found": found, "manifests": (merged.rewritten_manifests_count, merged.added_manifests_count)
                if found else (0, 0)}
    assert request.op == "expire", request.op
    from icegres.engine.maintenance import expire

    kept: list[str] = []

    def delete(io: Any, path: str) -> None:
        if path.removeprefix("file://") in request.in_use:
            kept.append(path)  # a running statement may still open it: the orphan sweep's
            return
        expire._delete(io, path)

    now_ms = int(time.time() * 1000)
    report = expire.expire(lambda: lakehouse.load_table(*key), f"{key[0]}.{key[1]}",
                           expire.Policy(now_ms - request.expire_max_age_ms, request.expire_retain_last),
                           pinned=lambda table: set(request.pinned), local_requirements=lakehouse.kind == "sql",
                           delete=delete, before_commit=fence)
    notes = []
    if kept:
        notes.append(f"{len(kept)} files in use left for the orphan sweep")
    if report.kept_files:
        notes.append("metadata unreadable after the expiry: no file deleted")
    return {"found": bool(report.expired_snapshots), "expired": len(report.expired_snapshots),
            "deleted": len(report.deleted.kinds) - len(kept), "notes": notes}


def describe(exc: BaseException) -> str:
    message = getattr(exc, "message", None) or str(exc)
    detail = getattr(exc, "detail", None)
    shown = f"{type(exc).__name__}: {message}" if message else type(exc).__name__
    return f"{shown} ({detail})" if detail else shown


# --- the process ----------------------------------------------------------------------------------


def serve(conn: Any, gate: Gate) -> None:
    """Answer requests until the server closes the connection: ("ok", result) or ("lost" |
    "error", message)."""
    from icegres.engine.catalog import Lakehouse

    settings = conn.recv()
    lakehouse = Lakehouse.from_settings(settings)
    conn.send(("ready", None))
    while (request := conn.recv()) is not None:
        try:
            conn.send(("ok", run_op(lakehouse, request, gate)))
        except LeaseLost as exc:
            conn.send(("lost", str(exc)))
        except Exception as exc:  # noqa: BLE001 - the server logs it and counts the job failed
            conn.send(("error", describe(exc)))


def main(argv: list[str]) -> None:
    from multiprocessing.connection import Connection

    parent = os.getppid()

    def watch() -> None:
        while os.getppid() == parent:
            time.sleep(0.5)
        os._exit(1)

    threading.Thread(target=watch, daemon=True, name="parent-watch").start()
    os.nice(NICE)
    logging.basicConfig(level=logging.WARNING, format="%(asctime)s %(levelname)s %(name)s: %(message)s")
    conn_fd, gate_fd = int(argv[0]), int(argv[1])
    gate = Gate(mmap.mmap(gate_fd, GATE_BYTES))
    try:
        serve(Connection(conn_fd), gate)
    except (BrokenPipeError, ConnectionResetError, EOFError):
        pass  # the server went away


if __name__ == "__main__":
    main(sys.argv[1:])
