"""The lanes of group commit (`icegres/engine/group_commit.py`), on trio's virtual clock: who
shares a commit, who leads it, what each member is told, and which transactions may share one."""

from __future__ import annotations

from types import MappingProxyType, SimpleNamespace
from typing import Any

import pyarrow as pa
import pytest
import trio
import trio.testing

from icegres.engine.group_commit import AppendGroups, lane_of, merged_appends
from icegres.engine.mounts import ReadPlan
from icegres.engine.txn import StagedWrite, TxnState

pytestmark = pytest.mark.unit

COMMIT_S = 1.0  # how long each fake commit takes, in virtual seconds


class Lake:
    """A fake `commit_batch`: records each batch and when it ran; fails the batches it is told to."""

    def __init__(self, fail: set[int] = frozenset()) -> None:  # type: ignore[assignment]
        self.batches: list[list[str]] = []
        self.fail = fail
        self.in_flight = 0
        self.most_in_flight = 0

    async def commit(self, items: list[str]) -> str:
        n = len(self.batches)
        self.batches.append(list(items))
        self.in_flight += 1
        self.most_in_flight = max(self.most_in_flight, self.in_flight)
        try:
            await trio.sleep(COMMIT_S)
        finally:
            self.in_flight -= 1
        if n in self.fail:
            raise RuntimeError(f"commit {n} failed")
        return f"commit {n}"


async def commit(groups: AppendGroups, lake: Lake, lane: Any, item: str) -> str:
    """What `engine/writes.py` does with a lane: join it; lead the commit if told to, and report
    its verdict; else take the verdict another member's commit got."""
    turn = await groups.join(lane, item)
    if not turn.leads:
        return turn.verdict()  # type: ignore[no-any-return]
    try:
        result = await lake.commit(turn.items)
    except BaseException as exc:
        groups.finish(turn, error=exc)
        raise
    groups.finish(turn, result)
    return result


async def _member(groups: AppendGroups, lake: Lake, lane: Any, item: str, delay: float,
                  told: dict[str, tuple[str, float]]) -> None:
    await trio.sleep(delay)
    try:
        verdict = await commit(groups, lake, lane, item)
    except RuntimeError as exc:
        verdict = f"error: {exc}"
    told[item] = (verdict, trio.current_time())


async def test_appends_that_wait_share_the_next_commit_first_come_first_served(autojump_clock) -> None:
    groups, lake, told = AppendGroups(), Lake(), {}
    start = trio.current_time()
    async with trio.open_nursery() as nursery:
        # a leads commit 0 at t=0; b, c, d queue during it and share commit 1 (b leads);
        # e arrives during commit 1 and gets commit 2.
        for item, delay in (("a", 0), ("b", 0.2), ("c", 0.5), ("d", 0.9), ("e", 1.5)):
            nursery.start_soon(_member, groups, lake, "t", item, delay, told)
    assert lake.batches == [["a"], ["b", "c", "d"], ["e"]]
    assert lake.most_in_flight == 1  # one commit in flight per lane
    assert {k: v[0] for k, v in told.items()} == {
        "a": "commit 0", "b": "commit 1", "c": "commit 1", "d": "commit 1", "e": "commit 2"}
    # Nobody is answered before the commit holding its item is done.
    assert {k: v[1] - start for k, v in told.items()} == {"a": 1.0, "b": 2.0, "c": 2.0, "d": 2.0, "e": 3.0}
    assert (groups.commits, groups.members) == (3, 5)
    assert not groups._lanes  # an idle lane is gone


async def test_a_failed_commit_fails_every_member_with_the_same_error(autojump_clock) -> None:
    groups, lake, told = AppendGroups(), Lake(fail={1}), {}
    async with trio.open_nursery() as nursery:
        for item, delay in (("a", 0), ("b", 0.1), ("c", 0.2), ("d", 1.5)):
            nursery.start_soon(_member, groups, lake, "t", item, delay, told)
    assert lake.batches == [["a"], ["b", "c"], ["d"]]
    assert {k: v[0] for k, v in told.items()} == {
        "a": "commit 0", "b": "error: commit 1 failed", "c": "error: commit 1 failed", "d": "commit 2"}


async def test_lanes_are_independent(autojump_clock) -> None:
    groups, lake, told = AppendGroups(), Lake(), {}
    async with trio.open_nursery() as nursery:
        for lane, item in (("t", "a"), ("u", "b"), ("t", "c"), ("u", "d")):
            nursery.start_soon(_member, groups, lake, lane, item, 0, told)
    assert sorted(map(sorted, lake.batches)) == [["a"], ["b"], ["c"], ["d"]]
    assert lake.most_in_flight == 2


async def test_a_cancelled_member_still_waits_for_its_verdict(autojump_clock) -> None:
    """Once handed to a lane, an item may be committed by another member's commit: its caller
    must learn that verdict, and a cancel must not make it report a failure (and delete files
    the lake references). The wait in `join` is shielded."""
    groups, lake = AppendGroups(), Lake()
    got: list[str] = []

    async def cancelled_follower() -> None:
        await trio.sleep(0.2)
        with trio.move_on_after(0.1) as scope:
            got.append(await commit(groups, lake, "t", "c"))  # b leads the commit that holds c
        assert scope.cancelled_caught is False  # nothing to catch: the verdict came first

    async with trio.open_nursery() as nursery:
        nursery.start_soon(commit, groups, lake, "t", "a")
        nursery.start_soon(_member, groups, lake, "t", "b", 0.1, {})
        nursery.start_soon(cancelled_follower)
    assert lake.batches == [["a"], ["b", "c"]] and got == ["commit 1"]


# --- which transactions share a lane -------------------------------------------------------------


def _plan(snapshot: int, *, uuid: str = "u1", schema_id: int = 0, spec_id: int = 0, pk: tuple[str, ...] = ()) -> ReadPlan:
    table = SimpleNamespace(metadata=SimpleNamespace(default_spec_id=spec_id))
    return ReadPlan(metadata_location=f"m{snapshot}", schema=pa.schema([]), field_ids=(), files=(),
                    primary_key=pk, snapshot_id=snapshot, table_uuid=uuid, schema_id=schema_id, table=table)


def _txn(base: ReadPlan, files: tuple[str, ...], **write: Any) -> TxnState:
    txn = TxnState(autocommit=True)
    key = ("ns", "t")
    txn.pins[key] = base
    txn.writes[key] = StagedWrite(key, base, added=MappingProxyType({f: object() for f in files}),
                                  rows_added=len(files), **write)
    return txn


def test_only_a_blind_append_to_one_table_has_a_lane() -> None:
    base = _plan(1)
    assert lane_of(_txn(base, ("f1",))) == (("ns", "t"), "u1", 0, 0)
    assert lane_of(_txn(base, ("f1",), read_rows=True)) is None  # INSERT ... SELECT from itself
    assert lane_of(_txn(_plan(1, pk=("id",)), ("f1",))) is None  # the key check read the table
    assert lane_of(_txn(base, ("f1",), removed=MappingProxyType({"f0": object()}))) is None
    assert lane_of(_txn(base, ("f1",), metadata_change=lambda tx: None)) is None
    serializable = _txn(base, ("f1",))
    serializable.serializable = True
    assert lane_of(serializable) is None
    tagged = _txn(base, ("f1",))
    tagged.snapshot_properties = {"icegres.tail-id": "x"}
    assert lane_of(tagged) is None
    two = _txn(base, ("f1",))
    two.writes[("ns", "u")] = StagedWrite(("ns", "u"), base, added=MappingProxyType({"g": object()}))
    assert lane_of(two) is None


def test_a_batch_is_every_file_on_the_freshest_compatible_base() -> None:
    old, new = _plan(1), _plan(2)
    members = [_txn(old, ("f1",)), _txn(new, ("f2", "f3"))]
    merged = merged_appends(members, mounted=new)
    (write,) = merged.writes.values()
    assert write.base is new and set(write.added) == {"f1", "f2", "f3"} and write.rows_added == 3
    assert write.is_blind_append and merged.autocommit and merged.pins[("ns", "t")] is new
    # A mount of another incarnation, schema or partition spec is not a base for these files.
    for other in (_plan(3, uuid="u2"), _plan(3, schema_id=1), _plan(3, spec_id=1), None):
        (write,) = merged_appends(members, mounted=other).writes.values()
        assert write.base is old
