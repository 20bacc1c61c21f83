"""What the engine and the front ends may ask of the write ladder: a port the engine owns.

The write ladder (`icegres/ladder.py`) sits above the engine: its flushes stage data files on the
engine's mounted plans and mount the snapshots they commit. Statements, in turn, must read the
rows the ladder acknowledged and has not yet put in the lake, and writes must go through it or
wait for it. That second arrow would point upward, so it is this protocol instead: the engine
declares what it calls, `WriteLadder` implements it, and the server's wiring hands the one to
the other with `Engine.attach_ladder` once the tail has been replayed. No module under
icegres/engine imports icegres.ladder.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Protocol

import pyarrow as pa

from icegres.engine.txn import Key

if TYPE_CHECKING:
    from icegres.engine.mounts import ReadPlan

__all__ = ["Buffered", "WriteLadderPort"]


@dataclass(frozen=True)
class Buffered:
    """One acknowledged statement's rows (the buffer's opaque `rows_ref`): the engine unions those
    whose `lsn` is above a plan's lake watermark with that plan."""

    key: Key
    lsn: int
    rows: pa.Table


class WriteLadderPort(Protocol):
    """The write ladder as the engine and the front ends see it (module docstring).

    Readers run in worker threads and take `visible` entries BEFORE they read the mounted plan:
    entries first, then the plan, is what makes the union exact (icegres/ladder.py explains why).
    """

    def has_entries(self) -> bool:
        """Whether any table has acked rows not yet in the lake (a cheap check before `visible`)."""
        ...

    def visible(self, refs: set[Key] | None) -> Mapping[Key, tuple[Buffered, ...]]:
        """The acked entries each table in `refs` (None: all) must be unioned with, from one
        instant of the buffer."""
        ...

    def watermark(self, plan: ReadPlan | None) -> int:
        """The highest LSN of this ladder's tail that `plan`'s snapshot holds (0: none)."""
        ...

    def settle_blocking(self, refs: set[Key] | None) -> None:
        """From a worker thread: wait until the rows buffered now for `refs` are in the lake."""
        ...

    async def settle(self, refs: set[Key] | None) -> None:
        """Wait until every entry visible now for `refs` (None: all) is committed and mounted (or
        reported lost): what a rewrite, a DDL or a transaction block needs before it pins."""
        ...

    async def append(self, key: Key, rows: pa.Table) -> None:
        """Buffer one autocommit statement's conformed rows; return once they are acknowledged.
        Raises PgError when they are not (refused, or the tail failed)."""
        ...

    def stats(self) -> dict[str, Any]:
        """The ladder's counters and its tail's state, for /health and /metrics."""
        ...
