"""The two ways a front end hosts the write path (`writes.WriteHost`), both the engine's own, so
the write path never calls back into a front end: the front end hands over its query context,
the transaction the statement runs in and how it runs blocking work in a worker thread.

- `SessionHost`: a session that runs one statement at a time (pgwire): the query context's
  transaction is simply set and cleared.
- `LockedHost`: a session whose calls may overlap (Flight SQL): the query context's transaction
  is set only inside each worker-thread call, under the session's lock, and cleared after.
"""

from __future__ import annotations

import threading
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from icegres.engine.txn import new_transaction

if TYPE_CHECKING:
    from icegres.engine.query import QueryContext
    from icegres.engine.txn import TxnState

RunSync = Callable[..., Awaitable[Any]]  # `await run_sync(fn, *args)`: fn(*args) in a worker thread


def staged(txn: TxnState | None, engine: Any, fn: Callable[..., Any], args: tuple[Any, ...]) -> Any:
    """`fn(*args)` in this worker thread, with the data files it writes staged for `txn`."""
    from icegres.engine import staging

    with staging.bound(txn, getattr(engine, "staging", None)):
        return fn(*args)


@dataclass(eq=False)
class SessionHost:
    """One statement at a time: `bind` sets the query context's transaction directly."""

    qctx: QueryContext
    txn: TxnState | None  # the open transaction block's, None: autocommit
    default_isolation: str | None
    run_sync: RunSync
    idle: bool = True  # no block at all (not even a failed one): the write buffer may take it

    def block(self) -> TxnState | None:
        return self.txn

    def new_txn(self, *, autocommit: bool) -> TxnState:
        return new_transaction(self.default_isolation, None, autocommit=autocommit)

    def bind(self, txn: TxnState | None) -> None:
        if txn is None:
            self.qctx.end_transaction()
        else:
            self.qctx.txn = txn

    async def run(self, fn: Callable[..., Any], *args: Any) -> Any:
        # (the open block's, else the statement's own transaction, which `bind` made current)
        txn = self.txn if self.txn is not None else self.qctx.txn
        return await self.run_sync(staged, txn, self.qctx.engine, fn, args)


@dataclass(eq=False)
class LockedHost:
    """Overlapping calls of one session: each worker-thread call binds its transaction under
    `lock`, so concurrent calls never see each other's; between calls the query context's
    transaction is always None."""

    qctx: QueryContext
    txn: TxnState | None  # the transaction the statement runs in, None: autocommit
    default_isolation: str | None
    run_sync: RunSync
    lock: threading.Lock
    _bound: TxnState | None = field(default=None, init=False)

    def __post_init__(self) -> None:
        self._bound = self.txn

    @property
    def idle(self) -> bool:
        return self.txn is None

    def block(self) -> TxnState | None:
        return self.txn

    def new_txn(self, *, autocommit: bool) -> TxnState:
        return new_transaction(self.default_isolation, None, autocommit=autocommit)

    def bind(self, txn: TxnState | None) -> None:
        self._bound = txn if txn is not None else self.txn

    async def run(self, fn: Callable[..., Any], *args: Any) -> Any:
        qctx, bound, lock = self.qctx, self._bound, self.lock

        def call() -> Any:
            with lock:
                qctx.txn = bound
                try:
                    return staged(bound, qctx.engine, fn, args)
                finally:
                    qctx.txn = None

        return await self.run_sync(call)
