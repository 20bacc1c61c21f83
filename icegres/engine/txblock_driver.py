"""Performs the transaction block machine's effects for a front end: one rule set, two protocols.

pgwire's session and every Flight SQL transaction hold a `TxBlock`: the machine's state
(`icegres.machines.txblock`) and the engine transaction (`TxnState`) its effects started. A front
end feeds it what the client asked for; `feed` steps the machine and performs the effects in
their order:

- the engine's: start a transaction, mark / release / restore a savepoint on it (no I/O);
- the front end's, through its `BlockPort`: bind the query context, warn the client, restore
  settings, close portals;
- a refusal raises the PgError the client gets (the state is unchanged);
- the end of the block's transaction (publish or discard, which do I/O) comes back as an `Ending`
  for the caller to `finish` where it may await: on pgwire's trio loop, or through trio-asyncio
  from Flight SQL's handlers.

`feed` is atomic under a small lock of its own: Flight SQL feeds a transaction from its asyncio
loop (a failed statement) and from worker threads (a savepoint, under the session lock, because
statements stage into the same TxnState there).
"""

from __future__ import annotations

import threading
from dataclasses import dataclass
from typing import Protocol

from icegres.engine import authz
from icegres.engine import writes as core
from icegres.engine.txn import TxnState
from icegres.machines import txblock
from icegres.machines.txblock import (
    CloseBlockPortals,
    ClosePortals,
    Config,
    DiscardWrites,
    Event,
    MarkSavepoint,
    Notice,
    PublishWrites,
    Refuse,
    ReleaseSavepoint,
    ReportRolledBack,
    RestoreSavepoint,
    RestoreSettings,
    StartTransaction,
    State,
)
from icegres.pg.errors import PgError


class BlockPort(Protocol):
    """What a front end does for its transaction block."""

    def new_txn(self, isolation: str | None) -> TxnState:
        """A fresh engine transaction (`isolation` None: the session's default)."""
        ...

    def bind(self, txn: TxnState | None) -> None:
        """The block's transaction began (or, None, ended): where the session's statements run."""
        ...

    def warn(self, sqlstate: str, message: str) -> None:
        """Send the client a WARNING; the statement goes on."""
        ...

    def restore_settings(self, values: tuple[tuple[str, str], ...]) -> None: ...

    def close_portals(self, block_only: bool) -> None:
        """Close named portals and cursors without HOLD (`block_only`), or every portal."""
        ...


@dataclass
class Ending:
    """How the block's transaction ends: published, or discarded; `rolled_back`: the client
    asked for COMMIT and a failed block rolled back instead."""

    txn: TxnState
    publish: bool
    rolled_back: bool = False


class TxBlock:
    """One transaction block: the machine's state and the engine transaction it started."""

    def __init__(self, port: BlockPort, config: Config | None = None) -> None:
        self.port = port
        self.state: State = txblock.initial_state(config)
        self.txn: TxnState | None = None
        self._lock = threading.Lock()

    @property
    def status(self) -> str:
        """'I', 'T' or 'E', as ReadyForQuery reports the block."""
        return txblock.transaction_status(self.state)

    def feed(self, event: Event) -> Ending | None:
        """Step the machine with `event` and perform its effects; the transaction's end, if the
        block ended, for `finish`. Raises PgError if the machine refused the statement."""
        with self._lock:
            self.state, effects = txblock.step(self.state, event)
            ending: Ending | None = None
            for effect in effects:
                match effect:
                    case Refuse(sqlstate=sqlstate, message=message):
                        raise PgError(sqlstate, message)
                    case Notice(sqlstate=sqlstate, message=message):
                        self.port.warn(sqlstate, message)
                    case StartTransaction(isolation=isolation):
                        self.txn = self.port.new_txn(isolation)
                        self.port.bind(self.txn)
                    case MarkSavepoint(name=name):
                        self._txn().mark(name)
                    case ReleaseSavepoint(index=index):
                        self._txn().release(index)
                    case RestoreSavepoint(index=index):
                        self._txn().rollback_to(index)
                    case RestoreSettings(values=values):
                        self.port.restore_settings(values)
                    case CloseBlockPortals():
                        self.port.close_portals(block_only=True)
                    case ClosePortals():
                        self.port.close_portals(block_only=False)
                    case PublishWrites() | DiscardWrites():
                        ending = Ending(self._txn(), publish=isinstance(effect, PublishWrites))
                        self.txn = None
                        self.port.bind(None)
                    case ReportRolledBack():
                        assert ending is not None, "the machine rolls back before it says so"
                        ending.rolled_back = True
            return ending

    def _txn(self) -> TxnState:
        if self.txn is None:
            raise AssertionError(f"{self.state.phase.value} block without a transaction")
        return self.txn


async def finish(host: core.WriteHost, ending: Ending | None) -> None:
    """Publish (through the commit machine: PgError if it aborts), then apply its role and
    privilege changes, or discard the transaction of a block that ended; nothing if it did not."""
    if ending is None:
        return
    if ending.publish:
        base = host.qctx.engine.authorization
        try:  # its GRANTs, REVOKEs and role changes refused by the state now: nothing committed
            await authz.check_block(base, ending.txn)
        except PgError:
            await core.discard(host, ending.txn)
            raise
        await core.publish(host, ending.txn)
        # Its GRANTs, REVOKEs and role changes, once its data is in (authz.commit_block).
        await authz.commit_block(base, ending.txn)
    else:
        await core.discard(host, ending.txn)
