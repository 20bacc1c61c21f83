"""The Postgres tail driver against a real PostgreSQL 15: append, ack, restart, replay, trim,
a second writer refused and fenced, and the write connection killed mid-batch (before COMMIT and
during COMMIT) with pg_terminate_backend from another connection."""

from __future__ import annotations

from typing import Any

import psycopg
import pytest
import trio

from icegres.machines.drivers.pgtail import (
    AppendFailed,
    PsycopgBackend,
    TailOwned,
    open_pg_tail,
)
from icegres.machines.pgtail import (
    BatchAborted,
    BatchCommitted,
    CommitOutcomeUnknown,
    Config,
    Event,
    Fenced,
    PoisonedTail,
    ReadBackDone,
)
from icegres.machines.wal_format import checksum
from tests.support.postgres import PostgresServer

pytestmark = pytest.mark.e2e

FAST = Config(retry_backoff_seconds=0.05, retry_backoff_seconds_max=0.5, commit_attempts_max=40)


def _admin(dsn: str, query: str, params: Any = None) -> list[tuple[Any, ...]]:
    with psycopg.connect(dsn, autocommit=True) as conn:
        cur = conn.execute(query, params)
        return cur.fetchall() if cur.description else []


async def admin(dsn: str, query: str, params: Any = None) -> list[tuple[Any, ...]]:
    return await trio.to_thread.run_sync(_admin, dsn, query, params)


async def wait_for(dsn: str, query: str, params: Any = None, seconds: float = 10) -> Any:
    """Poll until the query returns a row; that row."""
    with trio.fail_after(seconds):
        while True:
            rows = await admin(dsn, query, params)
            if rows:
                return rows[0]
            await trio.sleep(0.02)


class RecordingBackend(PsycopgBackend):
    """The real backend, keeping every event it answered with."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.events: list[Event] = []

    # The blocking halves, so that a COMMIT submitted without a task (submit_commit) is kept too.
    def _commit(self, effect: Any) -> Event:
        event = super()._commit(effect)
        self.events.append(event)
        return event

    def _read_back(self, effect: Any) -> Event:
        event = super()._read_back(effect)
        self.events.append(event)
        return event


WRITER_PID = "SELECT pid FROM pg_stat_activity WHERE application_name = %s AND backend_type = 'client backend'"


async def test_append_ack_restart_replay_trim(real_postgres: PostgresServer) -> None:
    dsn = real_postgres.dsn()
    table = "tail_basic"
    acked: dict[int, bytes] = {}

    async def writer(tail: Any, i: int) -> None:
        for j in range(10):
            payload = f"w{i}-{j}".encode() * 10
            acked[await tail.append(payload)] = payload

    async with open_pg_tail(dsn, FAST, tail_id="a", table=table) as tail:
        assert tail.replay == () and tail.epoch == 1
        async with trio.open_nursery() as nursery:
            for i in range(8):
                nursery.start_soon(writer, tail, i)
        assert sorted(acked) == list(range(1, 81)) and tail.durable_lsn == 80
        assert tail.health().ok
    rows = await admin(dsn, f"SELECT lsn, payload, checksum, epoch FROM {table} ORDER BY lsn")
    assert [(r[0], bytes(r[1])) for r in rows] == sorted(acked.items())
    assert all(r[2] == checksum(bytes(r[1])) and r[3] == 1 for r in rows)

    # Restart: the lake has 1..30; 31..80 are replayed, the epoch moves on, LSNs continue.
    async with open_pg_tail(
        dsn, FAST, tail_id="a", table=table, watermark_lsn=lambda t: 30
    ) as tail:
        assert [(r.lsn, r.payload) for r in tail.replay] == [(k, acked[k]) for k in range(31, 81)]
        assert tail.epoch == 2
        assert await tail.append(b"more") == 81
        tail.advance_watermark(75)  # trimmed in the background
        await wait_for(dsn, f"SELECT 1 FROM {table}_owner WHERE tail_id = 'a' AND trimmed_lsn = 75")
    assert [r[0] for r in await admin(dsn, f"SELECT lsn FROM {table} ORDER BY lsn")] == list(
        range(76, 82)
    )
    # Another tail id in the same table is independent.
    async with open_pg_tail(dsn, FAST, tail_id="b", table=table) as other:
        assert other.replay == () and await other.append(b"b1") == 1
    # A lake whose watermark is behind what was trimmed: refuse, never replay around a hole.
    with pytest.raises(PoisonedTail):
        async with open_pg_tail(dsn, FAST, tail_id="a", table=table, watermark_lsn=10):
            pass
    async with open_pg_tail(dsn, FAST, tail_id="a", table=table, watermark_lsn=75) as tail:
        assert [r.lsn for r in tail.replay] == list(range(76, 82))


async def test_second_writer_refused_then_fenced_after_takeover(
    real_postgres: PostgresServer,
) -> None:
    dsn = real_postgres.dsn()
    table = "tail_takeover"
    async with open_pg_tail(dsn, FAST, tail_id="t", table=table) as first:
        assert await first.append(b"one") == 1
        with pytest.raises(TailOwned, match="another live writer"):
            async with open_pg_tail(dsn, FAST, tail_id="t", table=table):
                pass
        assert await first.append(b"two") == 2  # the refusal changed nothing
        # The first writer's session dies (its node is cut off): the lock goes with it.
        (pid,) = await wait_for(dsn, WRITER_PID, ("icegres-tail:t:writer",))
        await admin(dsn, "SELECT pg_terminate_backend(%s)", (pid,))
        await wait_for(
            dsn,
            "SELECT 1 WHERE NOT EXISTS (SELECT 1 FROM pg_stat_activity WHERE pid = %s)",
            (pid,),
        )
        async with open_pg_tail(dsn, FAST, tail_id="t", table=table) as second:
            assert [(r.lsn, r.payload) for r in second.replay] == [(1, b"one"), (2, b"two")]
            assert second.epoch == 2
            with pytest.raises(AppendFailed) as failed:
                await first.append(b"stale writer")
            assert failed.value.outcome_unknown is False and "fenced" in str(failed.value)
            report = first.health()
            assert not report.ok and report.phase == "poisoned"
            assert await second.append(b"three") == 3
    rows = await admin(dsn, f"SELECT lsn, payload, epoch FROM {table} ORDER BY lsn")
    assert [(r[0], bytes(r[1]), r[2]) for r in rows] == [
        (1, b"one", 1),
        (2, b"two", 1),
        (3, b"three", 2),
    ]


async def test_a_deposed_writer_trims_nothing_and_a_lake_fenced_one_stops(
    real_postgres: PostgresServer,
) -> None:
    """After a takeover the old writer's watermark is not the lake's word (the lake refused its
    flushes, or it reported them lost): its trim must leave the rows its successor replays."""
    dsn = real_postgres.dsn()
    table = "tail_deposed_trim"
    async with open_pg_tail(dsn, FAST, tail_id="d", table=table) as first:
        assert [await first.append(b"one"), await first.append(b"two")] == [1, 2]
        assert first.writer_term == "1" and first.outranked_by("10") and not first.outranked_by("1")
        (pid,) = await wait_for(dsn, WRITER_PID, ("icegres-tail:d:writer",))
        await admin(dsn, "SELECT pg_terminate_backend(%s)", (pid,))
        await wait_for(dsn, "SELECT 1 WHERE NOT EXISTS (SELECT 1 FROM pg_stat_activity WHERE pid = %s)", (pid,))
        async with open_pg_tail(dsn, FAST, tail_id="d", table=table) as second:
            assert [r.lsn for r in second.replay] == [1, 2] and second.writer_term == "2"
            first.advance_watermark(2)  # deposed, not yet told: its trim transaction refuses
            with trio.fail_after(10):
                while first.state.trim_through:
                    await trio.sleep(0.02)
            assert first.state.trimmed_lsn == 0
            first.fence("epoch 2 published to s.t, above this writer's epoch 1")
            shown = first.health()
            assert not shown.ok and shown.phase == "fenced" and "epoch 2" in (shown.reason or "")
            with pytest.raises(AppendFailed, match="fenced") as failed:
                await first.append(b"stale writer")
            assert failed.value.outcome_unknown is False
            first.advance_watermark(2)  # a fenced writer does not even try
            assert first.state.trim_through == 0
    rows = await admin(dsn, f"SELECT lsn FROM {table} ORDER BY lsn")
    assert [r[0] for r in rows] == [1, 2]
    assert await admin(dsn, f"SELECT trimmed_lsn FROM {table}_owner WHERE tail_id = 'd'") == [(0,)]

async def test_connection_killed_in_the_batch_insert_is_read_back_and_retried(
    real_postgres: PostgresServer,
) -> None:
    """The batch is one autocommit INSERT: a backend killed in it may or may not have committed
    (a FATAL can follow the commit), so the outcome is unknown and the read-back decides."""
    dsn = real_postgres.dsn()
    table = "tail_kill_insert"
    backend = RecordingBackend(dsn, "k", table=table)
    async with open_pg_tail(backend, FAST, tail_id="k") as tail:
        assert await tail.append(b"first") == 1
        # Hold the owner table so that the next batch blocks in its INSERT (its FOR SHARE).
        blocker = await trio.to_thread.run_sync(psycopg.connect, dsn)
        try:
            await trio.to_thread.run_sync(
                blocker.execute, f"LOCK TABLE {table}_owner IN EXCLUSIVE MODE"
            )
            results: list[int] = []

            async def append() -> None:
                results.append(await tail.append(b"second"))

            async with trio.open_nursery() as nursery:
                nursery.start_soon(append)
                (pid,) = await wait_for(
                    dsn,
                    WRITER_PID + " AND wait_event_type = 'Lock'",
                    ("icegres-tail:k:writer",),
                )
                await admin(dsn, "SELECT pg_terminate_backend(%s)", (pid,))
                await trio.sleep(0.1)
                await trio.to_thread.run_sync(blocker.rollback)  # releases the table lock
        finally:
            await trio.to_thread.run_sync(blocker.close)
        assert results == [2]
        kinds = [type(e) for e in backend.events]
        assert kinds[0] is BatchCommitted and kinds[-1] is BatchCommitted and Fenced not in kinds
        unknown = kinds.index(CommitOutcomeUnknown)
        # Blocked on the lock, it never committed: the read-back finds nothing, the batch is retried.
        done = [e for e in backend.events[unknown:] if isinstance(e, ReadBackDone)]
        assert done and done[0].found == ()
    rows = await admin(dsn, f"SELECT lsn, payload FROM {table} ORDER BY lsn")
    assert [(r[0], bytes(r[1])) for r in rows] == [(1, b"first"), (2, b"second")]


async def test_connection_killed_during_commit_is_read_back(real_postgres: PostgresServer) -> None:
    """The batch's commit is running when the backend dies: outcome unknown, resolved by reading back."""
    dsn = real_postgres.dsn()
    table = "tail_kill_commit"
    backend = RecordingBackend(dsn, "c", table=table)
    async with open_pg_tail(backend, FAST, tail_id="c") as tail:
        assert await tail.append(b"first") == 1
        # A deferred constraint trigger runs at the commit (of the autocommit INSERT): it sleeps
        # while the flag row exists.
        await admin(
            dsn,
            f"""
            CREATE TABLE {table}_slow (flag int);
            INSERT INTO {table}_slow VALUES (1);
            CREATE FUNCTION {table}_sleep() RETURNS trigger LANGUAGE plpgsql AS $$
            BEGIN
              IF EXISTS (SELECT 1 FROM {table}_slow) THEN PERFORM pg_sleep(30); END IF;
              RETURN NULL;
            END $$;
            CREATE CONSTRAINT TRIGGER slow_commit AFTER INSERT ON {table}
              DEFERRABLE INITIALLY DEFERRED FOR EACH ROW EXECUTE FUNCTION {table}_sleep();
            """,
        )
        results: list[int] = []

        async def append(payload: bytes) -> None:
            results.append(await tail.append(payload))

        async with trio.open_nursery() as nursery:
            nursery.start_soon(append, b"second")
            (pid,) = await wait_for(
                dsn,
                WRITER_PID + " AND state = 'active' AND wait_event = 'PgSleep'",
                ("icegres-tail:c:writer",),
            )
            nursery.start_soon(append, b"third")  # queued behind the batch in flight
            await trio.sleep(0.05)
            await admin(dsn, f"DELETE FROM {table}_slow")
            await admin(dsn, "SELECT pg_terminate_backend(%s)", (pid,))
        assert sorted(results) == [2, 3]
        kinds = [type(e) for e in backend.events]
        unknown = kinds.index(CommitOutcomeUnknown)
        # The killed commit did not happen: the read-back finds nothing, the batch is retried.
        assert ReadBackDone in kinds[unknown:]
        done = [e for e in backend.events if isinstance(e, ReadBackDone)]
        assert done[-1].found == ()
        assert kinds[-1] is BatchCommitted and Fenced not in kinds
        assert tail.health().ok and tail.durable_lsn == 3
    rows = await admin(dsn, f"SELECT lsn, payload FROM {table} ORDER BY lsn")
    assert [(r[0], bytes(r[1])) for r in rows] == [(1, b"first"), (2, b"second"), (3, b"third")]


async def test_read_back_of_a_committed_batch_finds_it(real_postgres: PostgresServer) -> None:
    """The resolution query itself: a committed batch's LSNs are found with their checksums."""
    from icegres.machines.pgtail import ReadBack

    dsn = real_postgres.dsn()
    backend = PsycopgBackend(dsn, "r", table="tail_read_back")
    async with open_pg_tail(backend, FAST, tail_id="r") as tail:
        for p in (b"a", b"b", b"c"):
            await tail.append(p)
        event = await backend.read_back(ReadBack(tail.epoch, 1, 3))
        assert event == ReadBackDone(
            ((1, checksum(b"a")), (2, checksum(b"b")), (3, checksum(b"c")))
        )
        assert await backend.read_back(ReadBack(tail.epoch + 1, 1, 3)) == ReadBackDone(())


async def test_batch_insert_answered_with_an_error_is_aborted_and_retried(
    real_postgres: PostgresServer,
) -> None:
    """An error the server answers with rolled the batch back for sure: BatchAborted, no read-back."""
    dsn = real_postgres.dsn()
    table = "tail_insert_error"
    backend = RecordingBackend(dsn, "e", table=table)
    async with open_pg_tail(backend, FAST, tail_id="e") as tail:
        assert await tail.append(b"first") == 1
        # A sequence is not transactional: the trigger fails the next batch's INSERT exactly once.
        await admin(
            dsn,
            f"""
            CREATE SEQUENCE {table}_tries;
            CREATE FUNCTION {table}_fail_once() RETURNS trigger LANGUAGE plpgsql AS $$
            BEGIN
              IF nextval('{table}_tries') = 1 THEN RAISE EXCEPTION 'injected failure'; END IF;
              RETURN NEW;
            END $$;
            CREATE TRIGGER fail_once BEFORE INSERT ON {table}
              FOR EACH ROW EXECUTE FUNCTION {table}_fail_once();
            """,
        )
        assert await tail.append(b"second") == 2
        kinds = [type(e) for e in backend.events]
        assert kinds == [BatchCommitted, BatchAborted, BatchCommitted]
    rows = await admin(dsn, f"SELECT lsn, payload FROM {table} ORDER BY lsn")
    assert [(r[0], bytes(r[1])) for r in rows] == [(1, b"first"), (2, b"second")]
