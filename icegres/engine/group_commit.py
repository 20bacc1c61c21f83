"""Group commit of blind appends on the synchronous path: the appends waiting for one table at
the same time share one Iceberg commit.

An autocommit INSERT or COPY that reads nothing of its table (and a transaction block that only
did such appends to one table) is a blind append: its data files are staged before the commit,
and any head of the table with the same schema takes them as they are. Committed one statement
at a time, concurrent appends queue on the table's head: each commit rewrites the manifest list
and moves the head, so all but one of every round of commits is rejected and must rebase
(issue 25: with six writers a third of the INSERTs gave up). Here they queue in a lane per table
instead. While the lane's commit is in flight the next appends wait; when it is done, the first
of them leads the next commit, which takes every append queued by then: one commit machine run
(`machines/commit.py`) publishes all their files in one snapshot on the freshest head we know.

What a member is promised:

- it is acknowledged only when the commit holding its files is committed: the verdict it gets is
  the machine's verdict for exactly that commit;
- a commit that fails fails every member with the same verdict, and the machine deleted every
  member's staged files (an unknown outcome keeps them all, as it keeps one statement's);
- lanes are first come, first served: a member waits at most for the commit in flight, then its
  own;
- its wait is shielded from cancellation, as the commit is: once its files are handed to a
  commit, a cancel reported to the caller would make it delete files the lake may reference.

The lane itself is plain trio code with no I/O: the member that leads commits its batch itself
(`engine/writes.py`) and reports the verdict back. Only appends go through lanes; anything that read its table
(a primary key, ON CONFLICT, INSERT ... SELECT from itself, UPDATE, DELETE) commits alone.
"""

from __future__ import annotations

from collections.abc import Hashable
from dataclasses import dataclass, field
from types import MappingProxyType
from typing import TYPE_CHECKING, Any, Generic, TypeVar

import trio

from icegres.engine.txn import StagedWrite, TxnState

if TYPE_CHECKING:
    from icegres.engine.mounts import ReadPlan

__all__ = ["AppendGroups", "Turn", "lane_of", "merged_appends"]

T = TypeVar("T")


@dataclass(eq=False)
class _Member(Generic[T]):
    item: T
    wake: trio.Event = field(default_factory=trio.Event)  # set with a verdict, or to lead
    done: bool = False
    result: Any = None
    error: BaseException | None = None


@dataclass(eq=False)
class _Lane:
    waiting: list[_Member[Any]] = field(default_factory=list)
    busy: bool = False  # a commit of this lane is in flight, or its leader is on the way


@dataclass(eq=False)
class Turn(Generic[T]):
    """What `AppendGroups.join` hands back: a verdict (`done`), or a batch to commit (`batch`:
    the items, this member's first) whose verdict the leader reports with `AppendGroups.finish`."""

    lane_key: Hashable
    member: _Member[T]
    batch: list[_Member[T]] = field(default_factory=list)

    @property
    def leads(self) -> bool:
        return bool(self.batch)

    @property
    def items(self) -> list[T]:
        return [m.item for m in self.batch]

    def verdict(self) -> Any:
        """The verdict of the commit that held this member's item; raises its error."""
        assert self.member.done
        if self.member.error is not None:
            raise self.member.error
        return self.member.result


class AppendGroups:
    """The lanes of one engine: at most one commit in flight per lane, the rest queued behind it.

    Control goes down and comes back by returning: `join` answers with the member's verdict or
    with a batch for the caller to commit, and the caller reports that batch's verdict with
    `finish` (always: a leader that does not leaves its batch and lane waiting forever)."""

    def __init__(self) -> None:
        self._lanes: dict[Hashable, _Lane] = {}
        self.commits = 0  # batches led, in all lanes
        self.members = 0  # members those batches carried

    async def join(self, lane_key: Hashable, item: T) -> Turn[T]:
        """Queue `item` in its lane; return once it has a verdict, or leads the lane's next commit
        (then `turn.items` are everything queued by now, first come first). Not cancellable: an
        item handed to a lane may be committed by another member's commit."""
        with trio.CancelScope(shield=True):
            lane = self._lanes.setdefault(lane_key, _Lane())
            me: _Member[T] = _Member(item)
            lane.waiting.append(me)
            if lane.busy:
                await me.wake.wait()
            else:
                lane.busy = True
            turn = Turn(lane_key, me)
            if not me.done:
                assert lane.busy and lane.waiting and lane.waiting[0] is me
                turn.batch, lane.waiting = lane.waiting, []
                self.commits += 1
                self.members += len(turn.batch)
            return turn

    def finish(self, turn: Turn[T], result: Any = None, error: BaseException | None = None) -> None:
        """The leader's verdict for its batch: every member is told it, and the lane passes to the
        first member that queued meanwhile (it takes everyone queued by the time it runs)."""
        assert turn.leads and not turn.member.done
        for m in turn.batch:
            m.done, m.result, m.error = True, result, error
        lane = self._lanes[turn.lane_key]
        if lane.waiting:
            lane.waiting[0].wake.set()  # `busy` stays set: newcomers keep queuing behind it
        else:
            lane.busy = False
            del self._lanes[turn.lane_key]
        for m in turn.batch[1:]:
            m.wake.set()


# --- which transactions share a lane, and the one transaction they commit as ----------------------


def lane_of(txn: TxnState) -> tuple[Any, ...] | None:
    """The lane of a transaction that can share its commit: exactly one table written, by a blind
    append (`StagedWrite.is_blind_append`), with no snapshot properties of its own and no
    SERIALIZABLE reads to assert. None: it commits alone."""
    writes = [w for w in txn.writes.values() if w.changes_rows]
    if len(writes) != 1 or txn.snapshot_properties or txn.serializable:
        return None
    write = writes[0]
    if not write.is_blind_append or write.base.table is None or write.base.ref is not None:
        return None
    return (write.key, write.base.table_uuid, write.base.schema_id, _spec_id(write.base))


def merged_appends(txns: list[TxnState], mounted: ReadPlan | None) -> TxnState:
    """One autocommit transaction staging every member's files (all of one lane) on the freshest
    base known: the engine's mounted plan of the table when it is the same table, schema and
    partition spec (mounts only move forward, and a commit of the lane before this one mounted
    its snapshot), else the first member's. A blind append fits on any such head."""
    writes = [w for txn in txns for w in txn.writes.values() if w.added]
    first = writes[0]
    base = first.base
    if (mounted is not None and mounted.table is not None and mounted.table_uuid == base.table_uuid
            and mounted.schema_id == base.schema_id and _spec_id(mounted) == _spec_id(base)):
        base = mounted
    added: dict[str, Any] = {}
    for w in writes:
        added.update(w.added)
    merged = TxnState(autocommit=True)
    merged.pins[first.key] = base
    merged.writes[first.key] = StagedWrite(first.key, base, added=MappingProxyType(added),
                                           rows_added=sum(w.rows_added for w in writes))
    return merged


def _spec_id(plan: ReadPlan) -> int | None:
    table: Any = plan.table
    return None if table is None else int(table.metadata.default_spec_id)
