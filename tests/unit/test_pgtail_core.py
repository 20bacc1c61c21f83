"""Direct, deterministic tests of the Postgres tail machine's pure core."""

from __future__ import annotations

from dataclasses import FrozenInstanceError

import pytest

from icegres.machines import pgtail
from icegres.machines.pgtail import (
    Acknowledge,
    AppendRequested,
    BatchAborted,
    BatchCommitted,
    Claim,
    Commit,
    CommitOutcomeUnknown,
    Config,
    FailAppends,
    Fenced,
    PgTailProtocolError,
    Phase,
    PoisonedTail,
    ReadBack,
    ReadBackDone,
    ReadBackFailed,
    RefuseAppend,
    StartTimer,
    State,
    StoredRow,
    TimerFired,
    Trim,
    TrimDone,
    TrimFailed,
    WatermarkAdvanced,
    backoff_seconds,
    health,
    recover,
    step,
)
from icegres.machines.wal_format import Record, checksum
from tests.support.purity import imported_roots

pytestmark = pytest.mark.unit

CONFIG = Config(
    batch_records_max=2,
    commit_attempts_max=3,
    retry_backoff_seconds=0.1,
    retry_backoff_seconds_max=0.3,
    trim_batch_max=3,
)


def row(lsn: int, payload: bytes, epoch: int = 1) -> StoredRow:
    return StoredRow(lsn, payload, checksum(payload), epoch)


def opened(rows: tuple[StoredRow, ...] = (), wm: int = 0, trimmed: int = 0) -> State:
    last = max((r.lsn for r in rows), default=0)
    return recover(Claim("t1", 2, trimmed, last, rows), CONFIG, watermark_lsn=wm).state


def run(state: State, *events) -> tuple[State, list]:
    effects: list = []
    for event in events:
        state, effects = step(state, event)
    return state, effects


def test_recover_a_fresh_tail_is_idle_at_lsn_1() -> None:
    r = recover(Claim("t1", 1, 0, 0, ()), CONFIG, watermark_lsn=0)
    assert r.state.phase is Phase.IDLE and r.state.next_lsn == 1 and r.effects == []
    assert r.replay == () and r.state.epoch == 1


def test_recover_replays_above_the_watermark_and_trims_below() -> None:
    rows = tuple(row(n, b"p%d" % n) for n in (3, 4, 5))
    r = recover(Claim("t1", 4, 0, 5, rows), CONFIG, watermark_lsn=3)
    assert r.replay == (Record(4, "t1", b"p4"), Record(5, "t1", b"p5"))
    assert r.state.next_lsn == 6 and r.state.durable_lsn == 5
    assert r.effects == [Trim(0, 3)]


def test_recover_continues_after_the_lake_when_rows_are_gone() -> None:
    r = recover(Claim("t1", 4, 9, 9, ()), CONFIG, watermark_lsn=12)
    assert r.state.next_lsn == 13 and r.replay == ()


@pytest.mark.parametrize(
    ("claim", "wm", "match"),
    [
        (Claim("t1", 2, 0, 3, (row(1, b"a"), row(3, b"c"))), 0, "missing"),
        (Claim("t1", 2, 0, 1, (StoredRow(1, b"a", 7, 1),)), 0, "checksum"),
        (Claim("t1", 2, 5, 5, ()), 3, "trimmed"),
        (Claim("t1", 2, 0, 4, (row(1, b"a"),)), 0, "rows up to LSN 4"),
    ],
)
def test_recover_refuses_missing_or_damaged_records(claim: Claim, wm: int, match: str) -> None:
    with pytest.raises(PoisonedTail, match=match):
        recover(claim, CONFIG, watermark_lsn=wm)


def test_group_commit_queues_behind_the_batch_in_flight() -> None:
    state, effects = run(opened(), AppendRequested(b"a"))
    assert state.phase is Phase.COMMITTING and effects == [Commit(2, state.inflight, 1, 1)]
    state, effects = run(state, AppendRequested(b"b"), AppendRequested(b"c"), AppendRequested(b"d"))
    assert effects == [] and [r.lsn for r in state.pending] == [2, 3, 4]
    state, effects = step(state, BatchCommitted())
    assert effects[0] == Acknowledge(1, 1)
    assert isinstance(effects[1], Commit) and (effects[1].first_lsn, effects[1].last_lsn) == (2, 3)
    state, effects = step(state, BatchCommitted())
    assert effects[0] == Acknowledge(2, 3) and effects[1].first_lsn == 4
    state, effects = step(state, BatchCommitted())
    assert effects == [Acknowledge(4, 4)] and state.phase is Phase.IDLE and state.durable_lsn == 4


def test_unknown_outcome_is_read_back_never_guessed() -> None:
    state, _ = run(opened(), AppendRequested(b"a"), AppendRequested(b"b"))
    state, effects = step(state, CommitOutcomeUnknown("connection lost"))
    assert state.phase is Phase.RESOLVING and effects == [ReadBack(2, 1, 1)]
    committed, effects = step(state, ReadBackDone(((1, checksum(b"a")),)))
    assert effects[0] == Acknowledge(1, 1) and isinstance(effects[1], Commit)
    retried, effects = step(state, ReadBackDone(()))
    assert retried.phase is Phase.COMMITTING and effects == [Commit(2, retried.inflight, 1, 1)]
    assert retried.attempts == 1
    wrong, effects = step(state, ReadBackDone(((1, 12345),)))
    assert wrong.phase is Phase.POISONED
    assert effects == [FailAppends(wrong.poison_reason, range(1, 2), range(2, 3))]


def test_aborted_batches_back_off_then_fail_definitely() -> None:
    state, _ = run(opened(), AppendRequested(b"a"), AppendRequested(b"b"))
    state, effects = step(state, BatchAborted("reset"))
    assert state.phase is Phase.RETRYING and effects == [StartTimer(1, 0.1)]
    state, effects = step(state, TimerFired(1))
    assert state.phase is Phase.COMMITTING and effects[0].first_lsn == 1
    state, effects = run(state, BatchAborted("reset"))
    assert effects == [StartTimer(2, 0.2)]
    state, effects = run(state, TimerFired(2), BatchAborted("reset"))
    assert state.phase is Phase.POISONED and "giving up" in state.poison_reason
    assert effects == [FailAppends(state.poison_reason, range(0), range(1, 3))]
    state, effects = step(state, AppendRequested(b"c"))
    assert isinstance(effects[0], RefuseAppend) and state.next_lsn == 3
    assert [backoff_seconds(CONFIG, n) for n in (1, 2, 3, 4)] == [0.1, 0.2, 0.3, 0.3]


def test_read_back_failures_retry_then_report_unknown() -> None:
    state, _ = run(opened(), AppendRequested(b"a"), CommitOutcomeUnknown("lost"))
    state, effects = step(state, ReadBackFailed("refused"))
    assert state.phase is Phase.RETRYING and effects == [StartTimer(1, 0.1)]
    state, effects = step(state, TimerFired(1))
    assert state.phase is Phase.RESOLVING and effects == [ReadBack(2, 1, 1)]
    state, effects = run(state, ReadBackFailed("refused"), TimerFired(2), ReadBackFailed("x"))
    assert effects == [FailAppends(state.poison_reason, range(1, 2), range(0))]
    assert not health(state).ok


def test_fenced_fails_the_batch_and_the_queue_definitely() -> None:
    state, _ = run(opened(), AppendRequested(b"a"), AppendRequested(b"b"))
    state, effects = step(state, Fenced("epoch 3"))
    assert effects == [FailAppends(state.poison_reason, range(0), range(1, 3))]
    assert "fenced" in health(state).reason
    state, effects = step(state, WatermarkAdvanced(0))
    assert effects == []


def test_trimming_in_batches_one_at_a_time() -> None:
    state, _ = run(opened(), *[AppendRequested(b"x")] * 3)
    state, _ = run(state, BatchCommitted(), BatchCommitted())
    state, _ = run(state, AppendRequested(b"y"), AppendRequested(b"z"), BatchCommitted())
    state, _ = step(state, BatchCommitted())
    assert state.durable_lsn == 5
    state, effects = step(state, WatermarkAdvanced(5))
    assert effects == [Trim(0, 3)]
    state, effects = step(state, WatermarkAdvanced(5))
    assert effects == []  # one trim in flight at a time
    state, effects = step(state, TrimDone(3))
    assert effects == [Trim(3, 5)]
    state, effects = step(state, TrimFailed("reset"))
    assert effects == [] and state.trimmed_lsn == 3
    state, effects = step(state, WatermarkAdvanced(4))  # stale, but retries the trim
    assert effects == [Trim(3, 5)] and state.watermark_lsn == 5
    state, effects = step(state, TrimDone(5))
    assert effects == [] and state.trimmed_lsn == 5


def test_protocol_errors() -> None:
    state = opened()
    with pytest.raises(PgTailProtocolError):
        step(state, BatchCommitted())
    with pytest.raises(PgTailProtocolError, match="beyond the durable"):
        step(state, WatermarkAdvanced(1))
    with pytest.raises(PgTailProtocolError):
        step(state, TrimDone(1))
    with pytest.raises(PgTailProtocolError):
        step(State(config=CONFIG), AppendRequested(b"a"))


def test_events_and_effects_are_frozen() -> None:
    with pytest.raises(FrozenInstanceError):
        AppendRequested(b"a").payload = b"b"  # type: ignore[misc]
    with pytest.raises(FrozenInstanceError):
        Trim(0, 1).through_lsn = 2  # type: ignore[misc]


def test_the_core_imports_no_io() -> None:
    imported = imported_roots(pgtail)
    assert not imported & {"trio", "os", "socket", "psycopg", "time", "asyncio", "pyiceberg"}
