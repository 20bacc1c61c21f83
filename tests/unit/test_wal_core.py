"""Direct, deterministic tests of the WAL machine's pure core."""

from __future__ import annotations

from dataclasses import FrozenInstanceError

import pytest

from icegres.machines import tail_events, wal, wal_format
from icegres.machines.wal import (
    Acknowledge,
    AppendRequested,
    Config,
    CreateSegment,
    DeleteSegments,
    DirectorySynced,
    FailAppends,
    Fsync,
    FsyncDone,
    FsyncFailed,
    IoFailed,
    Phase,
    PoisonedTail,
    RefuseAppend,
    SegmentCreated,
    SegmentSynced,
    StartTimer,
    State,
    SyncDirectory,
    SyncSegment,
    TimerFired,
    WalProtocolError,
    WatermarkAdvanced,
    Write,
    WriteDone,
    health,
    recover,
    step,
)
from icegres.machines.wal_format import Record, encode_record, segment_name
from tests.support.purity import imported_roots

pytestmark = pytest.mark.unit

CONFIG = Config(segment_bytes_max=200, batch_bytes_max=100)
WINDOW = Config(segment_bytes_max=200, batch_bytes_max=100, group_fsync_window_seconds=0.01)


def opened(config: Config = CONFIG, files: dict[str, bytes] | None = None, wm: int = 0) -> State:
    r = recover(files or {}, config, watermark_lsn=wm, new_tail_id="t1")
    state, effects = r.state, r.effects
    while state.phase is Phase.OPENING:
        (effect,) = effects
        answer = {
            SyncSegment: lambda e: SegmentSynced(e.segment),
            CreateSegment: lambda e: SegmentCreated(e.first_lsn),
            SyncDirectory: lambda e: DirectorySynced(),
        }[type(effect)](effect)
        state, effects = step(state, answer)
    assert state.phase is Phase.IDLE and effects == []
    return state


def seg(first: int, *payloads: bytes) -> tuple[str, bytes]:
    data = b"".join(encode_record(Record(first + i, "t1", p)) for i, p in enumerate(payloads))
    return segment_name("t1", first), data


def test_fresh_directory_creates_the_first_segment_then_syncs_the_directory() -> None:
    r = recover({}, CONFIG, watermark_lsn=0, new_tail_id="t1")
    assert r.state.phase is Phase.OPENING and r.effects == [CreateSegment(1)] and r.replay == ()
    state, effects = step(r.state, SegmentCreated(1))
    assert effects == [SyncDirectory()]
    state, effects = step(state, DirectorySynced())
    assert state.phase is Phase.IDLE and state.next_lsn == 1 and health(state).ok


def test_append_is_acked_only_after_its_fsync() -> None:
    state, effects = step(opened(), AppendRequested(b"x"))
    assert state.phase is Phase.WRITING and isinstance(effects[0], Write)
    assert effects[0].offset == 0 and (effects[0].first_lsn, effects[0].last_lsn) == (1, 1)
    state, effects = step(state, WriteDone())
    assert state.phase is Phase.SYNCING and effects == [Fsync(1)]
    state, effects = step(state, FsyncDone())
    assert state.phase is Phase.IDLE and effects == [Acknowledge(1, 1)] and state.durable_lsn == 1


def test_appends_during_an_fsync_ride_the_next_one_together() -> None:
    state, _ = step(opened(), AppendRequested(b"a"))
    state, _ = step(state, WriteDone())
    for p in (b"b", b"c", b"d"):
        state, effects = step(state, AppendRequested(p))
        assert effects == [] and state.phase is Phase.SYNCING
    state, effects = step(state, FsyncDone())
    assert effects[0] == Acknowledge(1, 1)
    write = effects[1]
    assert isinstance(write, Write) and (write.first_lsn, write.last_lsn) == (2, 4)
    assert state.durable_lsn == 1  # 2..4 are not acked before their own fsync
    state, _ = step(state, WriteDone())
    state, effects = step(state, FsyncDone())
    assert effects == [Acknowledge(2, 4)]


def test_group_window_gathers_and_the_batch_bound_cuts_it_short() -> None:
    state, effects = step(opened(WINDOW), AppendRequested(b"a"))
    assert state.phase is Phase.GATHERING and effects == [StartTimer(1, 0.01)]
    state, effects = step(state, AppendRequested(b"b"))
    assert effects == []
    state, effects = step(state, TimerFired(1))
    assert isinstance(effects[0], Write) and effects[0].last_lsn == 2
    state, _ = step(state, WriteDone())
    state, _ = step(state, FsyncDone())
    state, effects = step(state, AppendRequested(b"c"))
    assert effects == [StartTimer(2, 0.01)]
    state, effects = step(state, AppendRequested(b"d" * 90))  # reaches batch_bytes_max
    assert isinstance(effects[0], Write) and effects[0].last_lsn == 3  # the big one waits
    state, effects = step(state, TimerFired(2))
    assert effects == [] and state.phase is Phase.WRITING  # stale
    with pytest.raises(WalProtocolError):
        step(state, TimerFired(3))


def test_segments_rotate_at_the_size_bound() -> None:
    state = opened()
    for _ in range(2):
        state, _ = step(state, AppendRequested(b"x" * 70))
        state, _ = step(state, WriteDone())
        state, _ = step(state, FsyncDone())
    state, effects = step(state, AppendRequested(b"x" * 70))
    assert state.phase is Phase.ROTATING and effects == [CreateSegment(3)]
    state, effects = step(state, SegmentCreated(3))
    assert isinstance(effects[0], Write) and effects[0].segment == 3 and effects[0].offset == 0
    assert [s.first_lsn for s in state.segments] == [1, 3]


def test_segments_are_deleted_only_when_wholly_below_the_watermark() -> None:
    state = opened()
    for _ in range(5):
        state, _ = step(state, AppendRequested(b"x" * 70))
        if state.phase is Phase.ROTATING:
            state, _ = step(state, SegmentCreated(state.next_lsn - 1))
        state, _ = step(state, WriteDone())
        state, _ = step(state, FsyncDone())
    assert [(s.first_lsn, s.last_lsn) for s in state.segments] == [(1, 2), (3, 4), (5, 5)]
    state, effects = step(state, WatermarkAdvanced(1))
    assert effects == []
    state, effects = step(state, WatermarkAdvanced(4))
    assert effects == [DeleteSegments((1, 3))]
    state, effects = step(state, WatermarkAdvanced(5))
    assert effects == [] and len(state.segments) == 1  # never the current segment
    state, effects = step(state, WatermarkAdvanced(2))
    assert effects == [] and state.watermark_lsn == 5  # stale: never backwards
    with pytest.raises(WalProtocolError):
        step(state, WatermarkAdvanced(6))  # beyond what was ever durable


def test_fsync_failure_poisons_for_good() -> None:
    state, _ = step(opened(), AppendRequested(b"a"))
    state, _ = step(state, WriteDone())
    state, _ = step(state, AppendRequested(b"b"))
    state, effects = step(state, FsyncFailed("EIO"))
    assert state.phase is Phase.POISONED
    (fail,) = effects
    assert (
        isinstance(fail, FailAppends) and fail.unknown == range(1, 2) and fail.failed == range(2, 3)
    )
    report = health(state)
    assert not report.ok and "fsync failed" in (report.reason or "")
    state, effects = step(state, AppendRequested(b"c"))
    assert isinstance(effects[0], RefuseAppend) and state.next_lsn == 3
    with pytest.raises(WalProtocolError):
        step(state, FsyncDone())  # no retry: nothing is outstanding any more


def test_write_failure_poisons() -> None:
    state, _ = step(opened(), AppendRequested(b"a"))
    state, effects = step(state, IoFailed("ENOSPC"))
    assert state.phase is Phase.POISONED and effects[0].unknown == range(1, 2)


def test_recover_replays_above_the_watermark_and_cuts_a_torn_tail() -> None:
    n1, d1 = seg(1, b"a", b"b")
    n2, d2 = seg(3, b"c", b"d")
    torn = d2 + seg(5, b"eeeee")[1][:-2]
    r = recover({n1: d1, n2: torn, "README": b"x"}, CONFIG, watermark_lsn=2)
    assert [x.lsn for x in r.replay] == [3, 4] and r.tail_id == "t1"
    assert r.cuts and r.cuts[0].valid_bytes == len(d2)
    assert r.effects == [SyncSegment(3, len(d2))]  # the covered segment is not even read
    state = opened(CONFIG, {n1: d1, n2: torn}, wm=2)
    assert state.next_lsn == 5 and state.durable_lsn == 4
    _, effects = step(state, WatermarkAdvanced(2))
    assert effects == [DeleteSegments((1,))]


def test_recover_refuses_a_poisoned_tail() -> None:
    n1, d1 = seg(1, b"a", b"b", b"c")
    bad = bytearray(d1)
    bad[3] ^= 1
    with pytest.raises(PoisonedTail, match="followed by a valid record"):
        recover({n1: bytes(bad)}, CONFIG, watermark_lsn=0)
    n2, d2 = seg(4, b"d")
    with pytest.raises(PoisonedTail, match="newer segments follow"):
        recover({n1: d1[:-1], n2: d2}, CONFIG, watermark_lsn=0)
    with pytest.raises(PoisonedTail, match="missing"):
        recover({n2: d2}, CONFIG, watermark_lsn=0)
    with pytest.raises(PoisonedTail, match="several tails"):
        recover({n1: d1, segment_name("t2", 9): b""}, CONFIG, watermark_lsn=0)


def test_lake_ahead_of_the_disk_never_reuses_lsns() -> None:
    n1, d1 = seg(1, b"a")
    r = recover({n1: d1}, CONFIG, watermark_lsn=5)
    assert r.replay == () and r.state.next_lsn == 6
    assert r.effects == [SyncSegment(1, len(d1))] and CreateSegment(6) in r.state.opening


def test_states_are_frozen_and_configs_validated() -> None:
    with pytest.raises(FrozenInstanceError):
        opened().phase = Phase.POISONED  # type: ignore[misc]
    with pytest.raises(ValueError):
        Config(segment_bytes_max=0)
    with pytest.raises(ValueError):
        Config(group_fsync_window_seconds=-1)
    with pytest.raises(WalProtocolError):
        step(State(config=CONFIG), AppendRequested(b"x"))


@pytest.mark.parametrize("module", [wal, wal_format, tail_events])
def test_the_core_imports_no_io(module) -> None:
    roots = imported_roots(module)
    allowed = {
        "__future__",
        "collections",
        "dataclasses",
        "enum",
        "typing",
        "icegres",
        "re",
        "struct",
        "zlib",
    }
    assert roots <= allowed, roots - allowed
