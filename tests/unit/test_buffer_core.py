"""Direct, deterministic tests of the group-commit buffer's pure core."""

from __future__ import annotations

from dataclasses import FrozenInstanceError

import pytest

from icegres.machines import buffer
from icegres.machines.buffer import (
    Ack,
    AckPolicy,
    AdoptSnapshot,
    Appended,
    ArmTimer,
    BufferProtocolError,
    Config,
    Entry,
    FlushCommitted,
    FlushFailed,
    FlushTable,
    LanePhase,
    Phase,
    Refuse,
    ReportLost,
    ShutdownRequested,
    SnapshotAdopted,
    State,
    Stop,
    TimerFired,
    adoption_allowed,
    initial_state,
    lane_of,
    metrics,
    reader_view,
    recover,
    refusal,
    step,
    visible_entries,
)
from tests.support.purity import imported_roots

pytestmark = pytest.mark.unit

CONFIG = Config(
    window_ms=100,
    max_batch_rows=10,
    max_batch_bytes=1000,
    max_buffered_bytes=2000,
    max_flush_attempts=3,
    retry_backoff_initial_ms=10,
    retry_backoff_max_ms=15,
)
TAIL = Config(window_ms=100, ack=AckPolicy.TAIL)


def fresh(config: Config = CONFIG) -> State:
    return initial_state(config, "i1")


def append(state: State, entry_id: str, at: int, table: str = "ns.a", rows: int = 1, lsn=None):
    return step(state, Appended(entry_id, table, f"ref-{entry_id}", lsn, rows, rows * 100, at))


def ids(entries) -> list[str]:
    return [e.entry_id for e in entries]


def flushing(state: State = None, at: int = 100) -> tuple[State, FlushTable]:
    state = state or append(fresh(), "e1", 0)[0]
    state, effects = step(state, TimerFired(at))
    (flush,) = [e for e in effects if isinstance(e, FlushTable)]
    return state, flush


# --- appends, acks and timers --------------------------------------------------------------------


def test_append_acks_at_once_is_visible_and_arms_the_window() -> None:
    state, effects = append(fresh(), "e1", 5)
    assert effects == [Ack("e1"), ArmTimer(105)]
    assert lane_of(state, "ns.a").phase is LanePhase.BUFFERING
    assert reader_view(state, "ns.a") == (None, visible_entries(state, "ns.a"))
    assert ids(visible_entries(state, "ns.a")) == ["e1"]
    state, effects = append(state, "e2", 20)
    assert effects == [Ack("e2")]  # the armed timer already covers it
    state, effects = append(state, "e3", 30, table="ns.b")
    assert effects == [Ack("e3")]  # a later deadline: the timer re-arms when it fires


def test_timer_flushes_due_lanes_one_commit_each_and_rearms() -> None:
    state, _ = append(fresh(), "e1", 0)
    state, _ = append(state, "e2", 10)
    state, _ = append(state, "e3", 50, table="ns.b")
    state, effects = step(state, TimerFired(100))
    assert effects == [
        FlushTable("ns.a", "i1:ns.a:1", visible_entries(state, "ns.a"), None, 1),
        ArmTimer(150),
    ]
    assert ids(effects[0].entries) == ["e1", "e2"]
    assert state.timer_ms == 150 and not adoption_allowed(state, "ns.a")


def test_stray_timer_is_harmless() -> None:
    state, _ = append(fresh(), "e1", 0)
    after, effects = step(state, TimerFired(40))
    assert effects == [] and after.timer_ms == 100 and ids(visible_entries(after, "ns.a")) == ["e1"]


def test_row_and_byte_bounds_flush_early() -> None:
    state, effects = append(fresh(), "e1", 0, rows=10)
    assert [type(e) for e in effects] == [Ack, FlushTable]
    state, _ = append(fresh(), "e1", 0, rows=6)
    state, effects = append(state, "e2", 1, rows=4)
    assert [type(e) for e in effects] == [Ack, FlushTable] and ids(effects[1].entries) == [
        "e1",
        "e2",
    ]


def test_full_buffer_refuses_memory_appends_53000() -> None:
    state, _ = append(fresh(), "e1", 0, rows=9)
    state, _ = append(state, "e2", 0, table="ns.b", rows=9)
    assert refusal(state, 300) == ("53000", buffer.FULL_MESSAGE)
    state, effects = append(state, "e3", 0, table="ns.c", rows=3)
    assert effects == [Refuse("e3", "53000", buffer.FULL_MESSAGE)]
    assert visible_entries(state, "ns.c") == () and state.refused_appends == 1


def test_malformed_appends_are_protocol_errors() -> None:
    state, _ = append(fresh(), "e1", 10)
    with pytest.raises(BufferProtocolError, match="twice"):
        append(state, "e1", 10)
    with pytest.raises(BufferProtocolError, match="backwards"):
        append(state, "e2", 5)
    with pytest.raises(BufferProtocolError, match="memory policy"):
        append(state, "e2", 10, lsn=3)
    tail, _ = append(fresh(TAIL), "e1", 0, lsn=5)
    with pytest.raises(BufferProtocolError, match="needs the lsn"):
        append(tail, "e2", 0)
    with pytest.raises(BufferProtocolError, match="out of order"):
        append(tail, "e2", 0, lsn=5)


# --- flush outcomes and the reader protocol ------------------------------------------------------


def test_commit_keeps_rows_visible_until_readers_adopt() -> None:
    state, flush = flushing()
    state, _ = append(state, "e2", 110)
    with pytest.raises(BufferProtocolError, match="may have landed"):
        step(state, SnapshotAdopted("ns.a", 7, 110))
    state, effects = step(state, FlushCommitted("ns.a", flush.flush_id, 7, None, 130))
    assert effects == [AdoptSnapshot("ns.a", 7)]
    assert lane_of(state, "ns.a").phase is LanePhase.ADOPTING
    assert ids(visible_entries(state, "ns.a")) == [
        "e1",
        "e2",
    ]  # the reader is still on its snapshot
    state, effects = step(state, SnapshotAdopted("ns.a", 7, 131))
    assert reader_view(state, "ns.a")[0] == 7 and ids(visible_entries(state, "ns.a")) == ["e2"]
    assert effects == [ArmTimer(210)]  # e2's own window
    m = metrics(state)
    assert m.flushed_batches == 1 and m.flush_latency_ms_last == 30 and m.flushes_in_flight == 0
    state, effects = step(state, TimerFired(210))
    assert effects == [FlushTable("ns.a", "i1:ns.a:2", visible_entries(state, "ns.a"), None, 1)]


def test_a_stale_confirmation_is_a_no_op_even_mid_flush() -> None:
    state, _ = append(fresh(), "e1", 0)
    state, _ = step(state, SnapshotAdopted("ns.a", 4, 0))
    state, _ = flushing(state)
    after, effects = step(state, SnapshotAdopted("ns.a", 4, 101))
    assert effects == [] and after.lanes == state.lanes


def test_answers_must_match_the_outstanding_flush() -> None:
    state, flush = flushing()
    with pytest.raises(BufferProtocolError, match="no flush"):
        step(state, FlushCommitted("ns.a", "other", 3, None, 100))
    with pytest.raises(BufferProtocolError, match="watermark"):
        step(state, FlushCommitted("ns.a", flush.flush_id, 3, 9, 100))
    with pytest.raises(BufferProtocolError, match="must be retryable"):
        step(state, FlushFailed("ns.a", flush.flush_id, "08006", "?", False, 100, True))


def test_retryable_failures_back_off_resend_the_same_batch_then_report_in_doubt() -> None:
    state, flush = flushing()
    state, effects = step(state, FlushFailed("ns.a", flush.flush_id, "58030", "refused", True, 105))
    assert effects == [ArmTimer(115)] and lane_of(state, "ns.a").phase is LanePhase.RETRY_WAIT
    assert ids(visible_entries(state, "ns.a")) == ["e1"]
    state, effects = step(state, TimerFired(115))
    assert effects == [FlushTable("ns.a", flush.flush_id, flush.entries, None, 2)]
    state, effects = step(
        state, FlushFailed("ns.a", flush.flush_id, "08006", "t/o", True, 120, True)
    )
    assert effects == [ArmTimer(135)]  # capped at 15 ms
    state, _ = step(state, TimerFired(135))
    state, effects = step(
        state, FlushFailed("ns.a", flush.flush_id, "08006", "t/o", True, 140, True)
    )
    (report,) = effects
    assert report == ReportLost(
        "ns.a", flush.flush_id, flush.entries, "08006", "gave up after 3 flush attempts: t/o", True
    )
    assert visible_entries(state, "ns.a") == () and adoption_allowed(state, "ns.a")
    assert metrics(state).lost_entries == 1 and state.flush_failures == 3


def test_non_retryable_failure_is_reported_definite_and_the_rest_goes_on() -> None:
    state, flush = flushing()
    state, _ = append(state, "e2", 150)
    state, effects = step(
        state, FlushFailed("ns.a", flush.flush_id, "40001", "schema changed", False, 160)
    )
    assert effects[0] == ReportLost(
        "ns.a", flush.flush_id, flush.entries, "40001", "schema changed", False
    )
    assert effects[1] == ArmTimer(250) and lane_of(state, "ns.a").phase is LanePhase.BUFFERING


# --- shutdown, recovery, metrics -----------------------------------------------------------------


def test_shutdown_flushes_everything_refuses_and_stops_when_empty() -> None:
    state, _ = append(fresh(), "e1", 0)
    state, _ = append(state, "e2", 0, table="ns.b")
    state, effects = step(state, ShutdownRequested(10))
    assert state.phase is Phase.DRAINING and [type(e) for e in effects] == [FlushTable, FlushTable]
    after, refused = append(state, "e3", 11)
    assert refused == [Refuse("e3", "57P01", buffer.SHUTDOWN_MESSAGE)]
    for flush in effects:
        state, _ = step(state, FlushCommitted(flush.table, flush.flush_id, 5, None, 20))
    state, last = step(state, SnapshotAdopted("ns.a", 5, 21))
    assert state.phase is Phase.DRAINING and last == []
    state, last = step(state, SnapshotAdopted("ns.b", 5, 21))
    assert state.phase is Phase.STOPPED and last == [Stop()]
    with pytest.raises(BufferProtocolError, match="not accepted in stopped"):
        step(state, TimerFired(30))


def test_tail_policy_accepts_a_durable_record_during_shutdown() -> None:
    state, _ = step(fresh(TAIL), ShutdownRequested(0))
    assert state.phase is Phase.STOPPED
    state, _ = append(fresh(TAIL), "e1", 0, lsn=1)
    state, _ = step(state, ShutdownRequested(1))
    assert refusal(state, 1)[0] == "57P01"  # the front door refuses before the tail writes
    state, effects = append(state, "e2", 2, table="ns.b", lsn=2)
    assert effects[0] == Ack("e2") and effects[1].watermark == 2


def test_recover_replays_and_flushes_at_once() -> None:
    entries = [Entry("e7", "ns.a", 1, 100, 7, 999), Entry("e9", "ns.b", 2, 200, 9, 999)]
    state, effects = recover(TAIL, "i2", entries, (("ns.a", 3), ("ns.c", 4)), 50)
    assert [(e.table, e.watermark, e.flush_id) for e in effects] == [
        ("ns.a", 7, "i2:ns.a:1"),
        ("ns.b", 9, "i2:ns.b:1"),
    ]
    assert lane_of(state, "ns.c").adopted_seq == 4 and state.last_lsn == 9
    assert metrics(state).oldest_unflushed_age_ms == 0
    with pytest.raises(BufferProtocolError, match="only the tail"):
        recover(CONFIG, "i2", entries, (), 0)


def test_metrics_count_rows_age_and_bytes() -> None:
    state, _ = append(fresh(), "e1", 0, rows=3)
    state, _ = append(state, "e2", 40, table="ns.b", rows=2)
    state, _ = step(state, TimerFired(60))
    m = metrics(state)
    assert (m.buffered_entries, m.buffered_rows, m.held_bytes) == (2, 5, 500)
    assert m.oldest_unflushed_age_ms == 60 and m.flushes_in_flight == 0


def test_config_is_validated_and_state_is_frozen() -> None:
    with pytest.raises(ValueError):
        Config(max_flush_attempts=0)
    with pytest.raises(ValueError):
        Config(retry_backoff_initial_ms=10, retry_backoff_max_ms=5)
    with pytest.raises(ValueError):
        initial_state(CONFIG, "")
    with pytest.raises(FrozenInstanceError):
        fresh().phase = Phase.STOPPED  # type: ignore[misc]


def test_the_core_imports_no_io() -> None:
    imported = imported_roots(buffer)
    assert imported <= {"__future__", "collections", "dataclasses", "enum", "typing"}, imported
