"""A stateful model of expiry against the write tails' watermark (watermarks.py): random histories
of tail flushes (several tails), foreign commits, branches and rollbacks, cut by random expiries —
pyiceberg's way (the kept child's parent id is cleared) or a REST server's (the id is left
dangling) — and, after every step, each tail's watermark read from every ref's head equals the one
the full, never-expired history gives. A crash between the expiry's commit and its file deletion
changes no metadata, so it needs no rule of its own: the watermark lives in the commit."""

from __future__ import annotations

import json
from dataclasses import dataclass, field

import pytest
from hypothesis import settings
from hypothesis import strategies as st
from hypothesis.stateful import RuleBasedStateMachine, invariant, precondition, rule

from icegres.engine.maintenance import watermarks
from icegres.engine.maintenance.watermarks import TAIL_ID_PROPERTY, TAIL_LSN_PROPERTY

pytestmark = pytest.mark.unit

TAILS = ("wal-a", "wal-b", "q-c")


@dataclass
class Summary:
    values: dict[str, str]

    def get(self, key: str) -> str | None:
        return self.values.get(key)

    @property
    def additional_properties(self) -> dict[str, str]:
        return self.values


@dataclass
class Snapshot:
    snapshot_id: int
    parent_snapshot_id: int | None
    summary: Summary


@dataclass
class Metadata:
    snapshots: list[Snapshot] = field(default_factory=list)
    properties: dict[str, str] = field(default_factory=dict)

    def snapshot_by_id(self, snapshot_id: int | None) -> Snapshot | None:
        return next((s for s in self.snapshots if s.snapshot_id == snapshot_id), None)


class ExpiryAgainstWatermarks(RuleBasedStateMachine):
    def __init__(self) -> None:
        super().__init__()
        self.metadata = Metadata()
        self.parents: dict[int, int | None] = {}  # the full history, never expired
        self.summaries: dict[int, dict[str, str]] = {}
        self.refs: dict[str, int] = {}
        self.lsn = {t: 0 for t in TAILS}
        self.next_id = 1

    def _commit(self, ref: str, summary: dict[str, str]) -> None:
        sid, self.next_id = self.next_id, self.next_id + 1
        parent = self.refs.get(ref)
        self.parents[sid], self.summaries[sid] = parent, summary
        self.metadata.snapshots.append(Snapshot(sid, parent, Summary(summary)))
        self.refs[ref] = sid

    @rule(tail=st.sampled_from(TAILS), ref=st.sampled_from(("main", "dev")), step=st.integers(1, 5))
    def tail_flush(self, tail: str, ref: str, step: int) -> None:
        self.lsn[tail] += step
        self._commit(ref, {TAIL_ID_PROPERTY: tail, TAIL_LSN_PROPERTY: str(self.lsn[tail]),
                           "icegres.quorum-term": f"1/{self.lsn[tail]}"})

    @rule(ref=st.sampled_from(("main", "dev")))
    def foreign_commit(self, ref: str) -> None:
        self._commit(ref, {"operation": "append"})

    @precondition(lambda self: "main" in self.refs)
    @rule()
    def branch_dev_from_main(self) -> None:
        self.refs["dev"] = self.refs["main"]

    @precondition(lambda self: "main" in self.refs)
    @rule(back=st.integers(1, 4))
    def rollback_main(self, back: int) -> None:
        target = self.refs["main"]
        for _ in range(back):
            parent = self.metadata.snapshot_by_id(target).parent_snapshot_id  # type: ignore[union-attr]
            if self.metadata.snapshot_by_id(parent) is None:
                break
            target = parent
        self.refs["main"] = target

    @precondition(lambda self: self.metadata.snapshots)
    @rule(keep=st.integers(1, 3), data=st.data(), dangling=st.booleans())
    def expire(self, keep: int, data: st.DataObject, dangling: bool) -> None:
        kept = set(self.refs.values())
        for head in self.refs.values():
            snapshot, n = self.metadata.snapshot_by_id(head), 0
            while snapshot is not None and n < keep:
                kept.add(snapshot.snapshot_id)
                snapshot, n = self.metadata.snapshot_by_id(snapshot.parent_snapshot_id), n + 1
        candidates = [s.snapshot_id for s in self.metadata.snapshots if s.snapshot_id not in kept]
        if not candidates:
            return
        gone = set(data.draw(st.lists(st.sampled_from(candidates), min_size=1, unique=True)))
        updates, removals = watermarks.carry(self.metadata, gone)
        # What the catalog applies, in one commit.
        self.metadata.snapshots = [
            s if s.parent_snapshot_id not in gone or dangling else Snapshot(s.snapshot_id, None, s.summary)
            for s in self.metadata.snapshots if s.snapshot_id not in gone]
        self.metadata.properties.update(updates)
        for key in removals:
            self.metadata.properties.pop(key, None)

    @invariant()
    def every_refs_watermark_is_the_full_historys(self) -> None:
        for ref, head in self.refs.items():
            for tail in TAILS:
                expected = self._full_history_mark(head, tail)
                found = watermarks.tail_summary(self.metadata, self.metadata.snapshot_by_id(head), tail)
                got = None if found is None else (found[TAIL_LSN_PROPERTY], found.get("icegres.quorum-term"))
                assert got == expected, (ref, tail, got, expected)

    @invariant()
    def carried_marks_name_only_kept_snapshots_and_parse(self) -> None:
        ids = {s.snapshot_id for s in self.metadata.snapshots}
        for key, value in self.metadata.properties.items():
            assert int(key.removeprefix(watermarks.CARRIED_PREFIX)) in ids
            assert isinstance(json.loads(value), dict)

    def _full_history_mark(self, head: int | None, tail: str) -> tuple[str, str] | None:
        while head is not None:
            summary = self.summaries[head]
            if summary.get(TAIL_ID_PROPERTY) == tail:
                return summary[TAIL_LSN_PROPERTY], summary["icegres.quorum-term"]
            head = self.parents[head]
        return None


ExpiryAgainstWatermarks.TestCase.settings = settings(max_examples=300, stateful_step_count=40, deadline=None)
test_expiry_against_the_tails_watermark = ExpiryAgainstWatermarks.TestCase
