"""One long-lived thread that runs a driver's blocking calls in order, woken by a queue.

A tail's storage calls sit on every durable acknowledgement: the WAL's write + fsync, the
Postgres tail's INSERT. `trio.to_thread.run_sync` pays for generality on each of them (a
capacity limiter, a thread taken from and returned to a cache, a checkpoint before and after);
measured here, a call through it cost ~0.15 ms more than the same call handed to a thread that
was already waiting on a queue, which is a tenth of a tail-dir ack. A tail issues at most one
storage call at a time anyway (its machine keeps one batch in flight), so one thread per tail is
all it needs, and it also keeps a connection that is not thread-safe on the thread that made it.
"""

from __future__ import annotations

import queue
import threading
from collections.abc import Callable
from functools import partial
from typing import Any

import outcome
import trio

__all__ = ["SerialThread"]

_STOP = object()


class SerialThread:
    """`await run(fn, *args)`: fn runs on this object's thread, one call at a time, in order.

    Like `trio.to_thread.run_sync` without `abandon_on_cancel`: a cancelled caller still waits
    for its call to finish (a write must never land after we stopped looking for it). The
    thread starts on first use and ends at `close()`; it is a daemon so that a process that
    exits without closing is not held up by it.
    """

    def __init__(self, name: str) -> None:
        self._name = name
        self._calls: queue.SimpleQueue[Any] | None = None  # the running thread's queue
        self._lock = threading.Lock()
        self._outstanding = 0  # calls submitted and not yet answered (trio thread only)
        self._drained: trio.Event | None = None

    async def run(self, fn: Callable[..., Any], *args: Any) -> Any:
        task = trio.lowlevel.current_task()
        self.submit(fn, *args, done=partial(trio.lowlevel.reschedule, task))
        return await trio.lowlevel.wait_task_rescheduled(lambda _: trio.lowlevel.Abort.FAILED)

    def submit(self, fn: Callable[..., Any], *args: Any, done: Callable[[outcome.Outcome[Any]], object]) -> None:
        """Queue `fn(*args)` without waiting; `done(outcome)` is then called on the trio thread
        (through `run_sync_soon`, so it must not raise and must not block). Call from trio.

        For a caller that is not a task waiting on the answer — a machine driver that steps its
        core when the call ends — this saves the scheduler passes of a task that would wait."""
        calls = self._calls or self._start()
        token = trio.lowlevel.current_trio_token()
        self._outstanding += 1

        def answer(result: outcome.Outcome[Any]) -> None:
            self._outstanding -= 1
            if not self._outstanding and self._drained is not None:
                self._drained.set()
                self._drained = None
            done(result)

        def deliver(result: outcome.Outcome[Any]) -> None:
            token.run_sync_soon(answer, result)

        calls.put((fn, args, deliver))

    async def drained(self) -> None:
        """Return once every call submitted so far has been answered: its owner may then close
        what the calls use (a call that is still running could land after we stopped looking).
        Call from trio; wrap in a shielded scope where the wait must not be cut short."""
        while self._outstanding:
            if self._drained is None:
                self._drained = trio.Event()
            await self._drained.wait()

    def close(self) -> None:
        """Stop the thread once the calls already queued have run (does not wait for it)."""
        with self._lock:
            calls, self._calls = self._calls, None
        if calls is not None:
            calls.put(_STOP)

    def _start(self) -> queue.SimpleQueue[Any]:
        with self._lock:
            if self._calls is None:
                # Each thread has its own queue, so calls made after a close never reach a
                # thread that is still finishing the calls made before it.
                self._calls = queue.SimpleQueue()
                threading.Thread(target=_serve, args=(self._calls,), name=self._name, daemon=True).start()
            return self._calls


def _serve(calls: queue.SimpleQueue[Any]) -> None:
    while (call := calls.get()) is not _STOP:
        fn, args, deliver = call
        deliver(outcome.capture(fn, *args))
