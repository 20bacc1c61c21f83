"""A front end's hand-off of blocking work to a worker thread: the job runs under a PullScope (its
long pulls end when the caller stops waiting, batches.py), a job that found no free execution
slot waits for one on the caller's loop and runs again (executor.py), and a panic inside
DataFusion comes back as the statement's error.

The job is the outermost frame of its worker thread; nothing below calls back into this module.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from typing import Any, TypeVar

from icegres.engine.batches import PullScope, scoped
from icegres.engine.executor import Queued
from icegres.pg.errors import INTERNAL_ERROR, PgError

T = TypeVar("T")


def run_in_scope(scope: PullScope, fn: Callable[..., T], *args: Any) -> T:
    """In a worker thread: `fn(*args)`, its cancellable pulls under `scope`. A panic inside
    DataFusion comes back as the statement's XX000, not as itself (`is_native_panic`)."""
    try:
        with scoped(scope):
            return fn(*args)
    except Queued:
        raise
    except BaseException as exc:
        if is_native_panic(exc):
            detail = (str(exc).strip().splitlines() or ["no message"])[0]
            raise PgError(INTERNAL_ERROR, f"internal error in the query engine (a panic): {detail}") from None
        raise


def is_native_panic(exc: BaseException) -> bool:
    """A Rust panic that PyO3 turned into its PanicException on the calling thread. That class
    derives from BaseException, not Exception, so no `except Exception` on its way up — a
    session's or an RPC's last guard — would stop it: the exception would end the server."""
    kind = type(exc)
    return kind.__name__ == "PanicException" and kind.__module__ == "pyo3_runtime"


async def cancellable_job(run_sync: Callable[..., Awaitable[T]], fn: Callable[..., T], *args: Any) -> T:
    """`await run_sync(job)` — a front end's hand-off to a worker thread, trio's or asyncio's —
    where the job is `fn(*args)` under a new PullScope, cancelled when the caller stops waiting
    (the thread is abandoned; its long pulls end with it). A job that raises Queued (a heavy
    statement, no execution slot free) has only planned: the caller waits for a slot here, on
    its own loop and under its own cancel scope (statement_timeout counts the wait), and the job
    runs again with the slot handed to it."""
    slot = None
    while True:
        scope = PullScope(slot)
        try:
            return await run_sync(run_in_scope, scope, fn, *args)
        except Queued as queued:
            slot = await queued.executors.wait_turn()
            executors = queued.executors
            continue
        except BaseException:
            scope.cancel()
            raise
        finally:
            if slot is not None and scope.slot is slot:
                executors.release_unused(slot)
