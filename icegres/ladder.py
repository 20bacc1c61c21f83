"""The write ladder's trio side: the group-commit buffer and its tail (the local WAL, PostgreSQL
or a quorum of keepers) wired to the lake.

`--write-buffer-ms N` (issue 6, rung 1), `--tail-dir PATH` (rung 2), `--tail-url
postgresql://…` (rung 3: the same log in a PostgreSQL table, `machines/drivers/pgtail.py`) and
`--tail-quorum` (issue 8). The server's wiring (`icegres/serve.py`) opens the tail, any `Tail`
(`machines/drivers/tail.py`); `open_ladder` starts a `BufferDriver` over it and replays it before
the server accepts connections, and attaches the ladder to the engine as its `WriteLadderPort`
(`engine/ladder_port.py`); `WriteLadder.shutdown` drains it on SIGTERM/SIGINT. What goes through
it, and why:

- Autocommit INSERT and COPY FROM into tables without a primary key (`writes.run_write`,
  `writes.copy_from`). The rows are computed and conformed exactly as the synchronous path does,
  then get an LSN — from the tail, once an fsync (WAL) or a COMMIT (PostgreSQL) covers their
  record, or from an in-process counter — and are appended to the buffer; the client is acked
  when the buffer acks.
  Primary-key tables stay synchronous: the key check must see every committed row, and a
  buffered row of another session would be a key the lake does not hold yet.
  Transaction blocks stay synchronous: a COMMIT staged in the tail would be acknowledged before the
  commit machine detected a conflict.
- A flush (one per table per batch) writes the batch's rows as data files and commits them through
  the commit machine with the batch's flush id as the commit token and the watermark in the
  snapshot summary (`icegres.tail-id`, `icegres.tail-lsn` = the batch's highest LSN), in the same
  atomic commit. From attempt 2 on it resolves by the token first (`run_recovery`), so a batch whose
  earlier attempt landed despite a timeout is never applied twice. After the commit the snapshot is
  mounted before the flush reports done.
- Readers see buffered rows exactly once: a statement takes the buffer's visible entries of the
  tables it reads FIRST, then the mounted plan, and unions the plan with the entries whose LSN is
  above the plan's watermark (`lake_watermark`). A table's batches land as a prefix of its appends
  in LSN order and mounts only move forward, so an entry is in the plan iff its LSN is at or below
  the plan's watermark: no duplicate while a flush is in flight, no gap after it.
- Replay: with a tail, every record above its table's lake watermark is handed back to the buffer
  (no second tail write) and flushed before serving. The tail is told it may trim up to the highest
  LSN L such that every record <= L is in the lake.
- The Postgres tail's id is the row key of its log (`serve.pg_tail_id`): derived from the catalog
  and the data directory, so a restart of the same deployment (on this node or a replacement with
  the same configuration) finds its records, and a second live server of the same deployment is
  refused. It is opened with the trim point it persisted as its watermark
  (`drivers/pgtail.claim_pg_tail`): rows at or below it were deleted only once every record <= it
  was in the lake, which is the WAL's rule for deleting a segment; exactly-once is then decided per
  table by the lake watermark, as for the WAL.
- Lake fencing: the quorum and the Postgres tail are held by writers in turn (`LakeFencedTail`),
  so each of their flushes asserts the writer's term (the quorum term, the Postgres tail's claim
  epoch) on the head it publishes on, and a higher term there refuses it (`_lake_fence`).

All blocking work (Arrow, Parquet, pyiceberg) runs in worker threads behind a limiter of its own,
so a flush never waits for the query threads that statements waiting on a flush may hold.
"""

from __future__ import annotations

import heapq
import itertools
import json
import logging
import time
from collections.abc import AsyncIterator, Callable
from contextlib import asynccontextmanager
from dataclasses import dataclass, replace
from typing import TYPE_CHECKING, Any

import pyarrow as pa
import trio

from icegres.engine.ladder_port import Buffered
from icegres.engine.maintenance.watermarks import TAIL_ID_PROPERTY, TAIL_LSN_PROPERTY, tail_summary
from icegres.machines.buffer import AckPolicy, Config, FlushTable, ReportLost, visible_entries
from icegres.machines.drivers.buffer import (
    BufferDriver,
    BufferRefused,
    FlushDone,
    FlushError,
    FlushResult,
)
from icegres.machines.drivers.tail import (
    PG_TAIL_EPOCH_PROPERTY,
    QUORUM_TERM_PROPERTY,
    AppendFailed,
    LakeFencedTail,
    Tail,
)
from icegres.pg.errors import PgError

if TYPE_CHECKING:
    from icegres.engine.lake import Engine
    from icegres.engine.mounts import ReadPlan

__all__ = [
    "PG_TAIL_EPOCH_PROPERTY",
    "QUORUM_TERM_PROPERTY",
    "TAIL_ID_PROPERTY",
    "TAIL_LSN_PROPERTY",
    "WriteLadder",
    "decode_payload",
    "encode_payload",
    "lake_watermark",
    "open_ladder",
]

log = logging.getLogger("icegres.ladder")

Key = tuple[str, str]

# A lake-fenced tail's writer term goes in its `term_property` (docs/quorum-protocol.md, lake
# fencing): QUORUM_TERM_PROPERTY for the quorum tail, PG_TAIL_EPOCH_PROPERTY for the Postgres tail.
# SQLSTATE of a flush the lake refused because a higher writer term published (never retried).
FENCED_SQLSTATE = "25006"
_TABLE_METADATA = b"icegres.table"
# A flush the lake refuses for good (the table is gone, the rows no longer fit it). A 40001 on a
# blind append means the schema moved: re-staging conforms the rows to the new one, so it retries.
_NON_RETRYABLE = frozenset({"42P01", "42804", "23502", "22P02", "22003", FENCED_SQLSTATE})
_FLUSH_THREADS = 4
_WATERMARK_CACHE_MAX = 4096


# --- the WAL payload ------------------------------------------------------------------------------


def encode_payload(key: Key, rows: pa.Table) -> bytes:
    """An Arrow IPC stream of the rows; the target table rides in the schema metadata."""
    head = _schema_message(key, rows.schema)
    if head is None:
        schema = _payload_schema(key, rows.schema)
        sink = pa.BufferOutputStream()
        with pa.ipc.new_stream(sink, schema) as writer:
            writer.write_table(rows.replace_schema_metadata(schema.metadata))
        return sink.getvalue().to_pybytes()
    # The same bytes an IPC stream writer makes (schema message, one message per batch, end of
    # stream), with the schema message made once per table and schema: ~2 µs instead of ~15,
    # on the event loop, for every acknowledged statement.
    return b"".join([head, *(b.serialize().to_pybytes() for b in rows.to_batches()), _END_OF_STREAM])


_END_OF_STREAM = b"\xff\xff\xff\xff\x00\x00\x00\x00"
_schema_messages: dict[Key, tuple[pa.Schema, bytes | None]] = {}


def _payload_schema(key: Key, schema: pa.Schema) -> pa.Schema:
    return schema.with_metadata({**(schema.metadata or {}), _TABLE_METADATA: json.dumps(list(key)).encode()})


def _schema_message(key: Key, schema: pa.Schema) -> bytes | None:
    """The serialized schema message of `key`'s payloads of `schema`; None when batches cannot be
    serialized alone (dictionary columns need their dictionary messages: the writer's path)."""
    cached = _schema_messages.get(key)
    if cached is not None and cached[0].equals(schema, check_metadata=True):
        return cached[1]
    head = None
    if not any(pa.types.is_dictionary(f.type) for f in schema):
        head = _payload_schema(key, schema).serialize().to_pybytes()
    if len(_schema_messages) >= 1024:
        _schema_messages.clear()
    _schema_messages[key] = (schema, head)
    return head


def decode_payload(payload: bytes) -> tuple[Key, pa.Table]:
    rows = pa.ipc.open_stream(payload).read_all()
    metadata = dict(rows.schema.metadata or {})
    ns, name = json.loads(metadata.pop(_TABLE_METADATA))
    return (ns, name), rows.replace_schema_metadata(metadata or None)


# --- the lake's watermark ---------------------------------------------------------------------------


def lake_watermark(plan: ReadPlan | None, tail_id: str) -> int:
    """The highest LSN of `tail_id` the plan's snapshot holds: the `icegres.tail-lsn` of the newest
    ancestor snapshot written by that tail, or what an expiry carried past the history it removed
    (engine/maintenance/watermarks.py); 0 if none. Blocking (walks snapshot metadata)."""
    table: Any = None if plan is None else plan.table
    if table is None:
        return 0
    summary = tail_summary(table.metadata, _head_snapshot(plan), tail_id)
    return int(summary.get(TAIL_LSN_PROPERTY) or 0) if summary is not None else 0


def _head_snapshot(plan: ReadPlan) -> Any:
    """The snapshot a plan's rows go on top of: main's head, or its branch's (a branch's rows
    are buffered under (schema, "t@b") and flushed to that branch: the watermark is per ref)."""
    from icegres.engine.branch_writes import head_of

    metadata = plan.table.metadata  # type: ignore[attr-defined]
    head = head_of(metadata, plan.ref)
    return metadata.snapshot_by_id(head) if head is not None else None


def branch_of(key: Key) -> tuple[Key, str] | None:
    """The table a buffered key (schema, "t@b") is a branch of, and the branch, by its name;
    None for a table's main. (A table really named "a@b" is main of itself: `_plan` finds it
    mounted first.)"""
    base, _, ref = key[1].rpartition("@")
    return ((key[0], base), ref) if base and ref else None


# --- the ladder -----------------------------------------------------------------------------------


@dataclass
class _Latency:
    count: int = 0
    last_ms: float = 0.0
    max_ms: float = 0.0
    total_ms: float = 0.0

    def add(self, ms: float) -> None:
        self.count += 1
        self.last_ms = ms
        self.max_ms = max(self.max_ms, ms)
        self.total_ms += ms

    def as_dict(self, prefix: str) -> dict[str, float]:
        return {
            f"{prefix}_count": self.count,
            f"{prefix}_ms_last": round(self.last_ms, 3),
            f"{prefix}_ms_max": round(self.max_ms, 3),
            f"{prefix}_ms_avg": round(self.total_ms / self.count, 3) if self.count else 0.0,
        }


class WriteLadder:
    """The buffer (and optional `Tail`: the WAL, the Postgres tail or the quorum tail) of one
    server, as the engine's `WriteLadderPort`. Create it with `open_ladder`."""

    def __init__(self, engine: Engine, window_ms: int, tail: Tail | None = None) -> None:
        self.engine = engine
        self.tail = tail
        # A tail that writers hold in turn (the quorum's, the Postgres tail's): a stale writer is
        # fenced at the lake, so every flush asserts this writer's term there (`_lake_fence`).
        self._lake_fenced = tail if isinstance(tail, LakeFencedTail) else None
        from icegres import faults

        if faults.broken("lake-fencing"):
            self._lake_fenced = None  # on purpose: flush as if this writer held its tail alone
        self.driver = BufferDriver(
            Config(window_ms=window_ms, ack=AckPolicy.TAIL if tail is not None else AckPolicy.MEMORY),
            self._flush,
            on_lost=self._on_lost,
        )
        # Without a tail the LSNs are this process's own: its incarnation names them in the lake.
        self.tail_id = tail.tail_id if tail is not None else f"mem-{self.driver.state.incarnation}"
        self._memory_lsns = itertools.count(1)
        self._keys: dict[str, Key] = {}
        self._staged: dict[str, tuple[Any, Any]] = {}  # flush id -> (txn, request), across retries
        self._seq = itertools.count(1)  # the buffer's adoption generations (not Iceberg seq numbers)
        self._watermarks: dict[str, int] = {}  # metadata location -> lake watermark of our tail
        self._limiter = trio.CapacityLimiter(_FLUSH_THREADS)
        self._token: Any = None
        # Tail mode: records enter the buffer in LSN order (group fsync wakes writers in any order).
        self._turn_next = tail.next_lsn if tail is not None else 0
        self._turn_done: set[int] = set()
        self._turn_waiters: dict[int, trio.Event] = {}
        # LSNs handed to the tail and not yet known to be in the lake (min-heap + live set).
        self._outstanding: set[int] = set()
        self._outstanding_heap: list[int] = []
        self._trimmed = 0
        self._fsync = _Latency()
        self._flush_latency = _Latency()
        self.replayed_records = 0
        # The last tail append's failure, cleared by the next success: /health reports it (a
        # quorum writer that lost its majority is still "leading" until a write finds out).
        self.tail_failure: str | None = None
        # Told of each table a flush committed files to (`serve --maintain`'s scheduler: a table
        # written by many small flushes is looked at, and compacted, sooner).
        self.flushed: Callable[[Key], None] | None = None

    # --- lifecycle ------------------------------------------------------------------------------

    async def run(self, *, task_status: trio.TaskStatus[None] = trio.TASK_STATUS_IGNORED) -> None:
        self._token = trio.lowlevel.current_trio_token()
        await self.driver.run(task_status=task_status)

    async def replay(self) -> int:
        """With a tail: re-append every recovered record above its table's lake watermark (no
        second tail write) and wait until all of them are in the lake. Returns how many."""
        tail = self.tail
        if tail is None:
            return 0
        records = list(tail.replay)
        decoded = await trio.to_thread.run_sync(lambda: [(r.lsn, *decode_payload(r.payload)) for r in records])
        keys = {key for _, key, _ in decoded}
        await trio.to_thread.run_sync(self.engine.refresh, None)
        plans = await trio.to_thread.run_sync(lambda: {key: self._plan(key) for key in keys})
        marks = await trio.to_thread.run_sync(lambda: {key: self.watermark(plans[key]) for key in keys})
        from icegres import faults

        ignore_marks = faults.broken("replay-watermark")
        entries = []
        for lsn, key, rows in decoded:
            if lsn <= marks[key] and not ignore_marks:
                continue  # its flush committed before the crash: in the lake already
            if plans[key] is None:
                log.error("tail record %d names %s.%s, which no longer exists: not replayed", lsn, *key)
                continue
            table = self._table(key)
            entries.append((table, Buffered(key, lsn, rows), lsn, rows.num_rows, rows.nbytes))
            self._reserve(lsn)
        self.replayed_records = len(entries)
        if entries:
            log.info("replaying %d %s tail records into the lake before serving", len(entries), tail.kind)
            self.driver.replay(entries)
            # `last_lsn` is set once the core has taken the replay (the predicate must not hold
            # on the state from before it).
            await self.driver.wait_until(
                lambda s: s.last_lsn is not None and all(not lane.pending and lane.batch is None for lane in s.lanes)
            )
        self._advance_trim()
        return len(entries)

    async def shutdown(self) -> None:
        """Refuse new buffered writes (57P01), flush every table, return when all is in the lake."""
        await self.driver.shutdown()
        self._advance_trim()

    def stats(self) -> dict[str, Any]:
        """Counters for /metrics: buffered rows, oldest un-flushed age, flush and fsync latency…
        and the tail's health for /health."""
        m = self.driver.metrics()
        out: dict[str, Any] = {
            "buffered_entries": m.buffered_entries,
            "buffered_rows": m.buffered_rows,
            "buffered_bytes": m.held_bytes,
            "oldest_unflushed_age_ms": m.oldest_unflushed_age_ms or 0,
            "flushes_in_flight": m.flushes_in_flight,
            "flushed_batches": m.flushed_batches,
            "flushed_rows": m.flushed_rows,
            "flush_failures": m.flush_failures,
            "lost_entries": m.lost_entries,
            "refused_appends": m.refused_appends,
            "replayed_records": self.replayed_records,
            "tail": self.tail.kind if self.tail is not None else "memory",
            "tail_id": self.tail_id,
        }
        out.update(self._flush_latency.as_dict("flush_latency"))
        if self.tail is not None:
            out.update(self._fsync.as_dict("fsync_latency"))
            health = self.tail.health()
            out["durable_lsn"] = health.durable_lsn
            out["tail_ok"] = health.ok
            out["tail_failure"] = self.tail_failure
            out["tail_phase"] = health.phase
            out["tail_reason"] = health.reason
            out.update(self.tail.stats())
        return out

    # --- the front door (trio) ------------------------------------------------------------------

    async def append(self, key: Key, rows: pa.Table) -> None:
        """Buffer one statement's conformed rows; returns once they are acknowledged (visible to
        every reader of this server, and durable in the tail when there is one). PgError if not."""
        if rows.num_rows == 0:
            return
        table = self._table(key)
        size = rows.nbytes
        refused = self.driver.refusal(size)
        if refused is not None:
            raise PgError(*refused)
        try:
            if self.tail is None:
                # Shielded from here: once submitted, the entry is acked whether or not we wait.
                with trio.CancelScope(shield=True):
                    lsn = next(self._memory_lsns)
                    entry = self.driver.submit(table, Buffered(key, lsn, rows), rows.num_rows, size)
                    await self.driver.acked(entry)
                return
            await self._append_durable(key, table, rows, size)
        except BufferRefused as exc:
            raise PgError(exc.sqlstate, exc.message) from None

    async def _append_durable(self, key: Key, table: str, rows: pa.Table, size: int) -> None:
        tail = self.tail
        assert tail is not None
        payload = encode_payload(key, rows) if size < 1 << 16 else await trio.to_thread.run_sync(encode_payload, key, rows)
        # Shielded: a durable record must reach the buffer (and keep the LSN order moving) even if
        # its client gave up; otherwise it would reappear only at the next restart.
        with trio.CancelScope(shield=True):
            lsn = tail.next_lsn  # what append() assigns: it steps the core before any await
            self._reserve(lsn)
            started = time.perf_counter()
            try:
                got = await tail.append(payload)
            except AppendFailed as exc:
                self.tail_failure = str(exc)
                if not exc.outcome_unknown:
                    self._outstanding.discard(lsn)  # never written: nothing to keep the WAL for
                self._turn_finished(lsn)
                raise PgError("58030", f"could not make the write durable in the {tail.kind} tail: {exc}",
                              detail="the tail stops acknowledging after an I/O failure; see the server log") from None
            self._fsync.add((time.perf_counter() - started) * 1000)
            self.tail_failure = None
            assert got == lsn, (got, lsn)
            await self._my_turn(lsn)
            try:
                entry = self.driver.submit(table, Buffered(key, lsn, rows), rows.num_rows, size, lsn)
            finally:
                self._turn_finished(lsn)
            await self.driver.acked(entry)

    async def _my_turn(self, lsn: int) -> None:
        while self._turn_next < lsn:
            event = self._turn_waiters.setdefault(lsn, trio.Event())
            await event.wait()

    def _turn_finished(self, lsn: int) -> None:
        self._turn_done.add(lsn)
        while self._turn_next in self._turn_done:
            self._turn_done.discard(self._turn_next)
            self._turn_next += 1
        waiter = self._turn_waiters.pop(self._turn_next, None)
        if waiter is not None:
            waiter.set()

    # --- readers (worker threads) ---------------------------------------------------------------

    def has_entries(self) -> bool:
        return any(lane.pending or lane.batch is not None for lane in self.driver.state.lanes)

    def visible(self, refs: set[Key] | None) -> dict[Key, tuple[Buffered, ...]]:
        """The acked entries each table in `refs` (None: all) must be unioned with, from one
        instant of the buffer. Take them BEFORE reading the mounted plan (module docstring)."""
        state = self.driver.state
        out: dict[Key, tuple[Buffered, ...]] = {}
        for lane in state.lanes:
            key = self._keys.get(lane.table)
            if key is None or (refs is not None and key not in refs):
                continue
            entries = visible_entries(state, lane.table)
            if entries:
                out[key] = tuple(e.rows_ref for e in entries)
        return out

    def watermark(self, plan: ReadPlan | None) -> int:
        """The lake watermark of this ladder's tail in `plan`'s snapshot (cached per snapshot)."""
        if plan is None:
            return 0
        cached = self._watermarks.get(plan.metadata_location)
        if cached is None:
            cached = lake_watermark(plan, self.tail_id)
            if len(self._watermarks) > _WATERMARK_CACHE_MAX:
                self._watermarks.clear()
            self._watermarks[plan.metadata_location] = cached
        return cached

    def settle_blocking(self, refs: set[Key] | None) -> None:
        """From a worker thread: wait until the rows buffered now for `refs` are in the lake."""
        if self._token is None or not self.visible(refs):
            return
        trio.from_thread.run(self.settle, refs, trio_token=self._token)

    async def settle(self, refs: set[Key] | None) -> None:
        """Wait until every entry visible now for `refs` (None: all) is committed and mounted (or
        reported lost). UPDATE/DELETE/DDL and transaction blocks call this before they pin."""
        state = self.driver.state
        ids = {
            e.entry_id
            for lane in state.lanes
            if self._settles(lane.table, refs)
            for e in visible_entries(state, lane.table)
        }
        if not ids:
            return
        for lane in state.lanes:
            if lane.pending and self._settles(lane.table, refs):
                self.driver.request_flush(lane.table)

        def settled(s: Any) -> bool:
            return not any(e.entry_id in ids for lane in s.lanes for e in visible_entries(s, lane.table))

        await self.driver.wait_until(settled)

    def _settles(self, table: str, refs: set[Key] | None) -> bool:
        """Does settling `refs` take lane `table`: one of them, or a branch of one (a table's
        DDL, procedures and rewrites settle its branches' rows too)."""
        if refs is None:
            return True
        key = self._keys.get(table)
        branch = branch_of(key) if key is not None else None
        return key is not None and (key in refs or (branch is not None and branch[0] in refs))

    # --- the flush (injected into the BufferDriver) ---------------------------------------------

    async def _flush(self, effect: FlushTable) -> FlushResult:
        from icegres.engine.lake_world import LakeWorld
        from icegres.machines.commit import Config as CommitConfig
        from icegres.machines.commit import Phase
        from icegres.machines.drivers.commit import run_commit, run_recovery

        key = self._keys[effect.table]
        batch = [e.rows_ref for e in effect.entries]
        watermark = max(b.lsn for b in batch)
        started = time.perf_counter()
        staged = self._staged.get(effect.flush_id)
        fenced_at_lake = self._lake_fenced is not None
        if staged is None:
            if fenced_at_lake and effect.attempt > 1:
                # Re-staged after a refusal: on the catalog's head, not on a stale mount.
                await self._thread(self.engine.refresh, {key})
            try:
                staged = await self._thread(self._stage, key, batch, effect.flush_id, watermark)
            except PgError as exc:
                return FlushError(exc.sqlstate, exc.message, exc.sqlstate not in _NON_RETRYABLE)
            except Exception as exc:
                # One line per retry: an outage would otherwise print a traceback every window.
                log.warning("flush %s: staging failed, will retry: %s", effect.flush_id, _describe(exc))
                log.debug("flush %s: staging failure", effect.flush_id, exc_info=True)
                return FlushError("58030", _describe(exc), True)
            if staged is None:
                # Fenced at the lake: another writer of the tail already put this whole batch there.
                for b in batch:
                    self._outstanding.discard(b.lsn)
                self._advance_trim()
                return FlushDone(next(self._seq))
            self._staged[effect.flush_id] = staged
        txn, request = staged
        world = LakeWorld(self.engine.lakehouse, txn)
        run = run_commit if effect.attempt == 1 else run_recovery
        # Fenced at the lake: no rebase. The publish asserts the head the fence was
        # checked on; a moved head aborts, and the retry checks the fence again on the new head.
        # A retry runs as a recovery, which charges the earlier attempt before it looks for the
        # token: it needs a second attempt to publish at all (with one, every retry gave up after
        # looking, and a flush that lost one race to another commit was dropped after its tries).
        config = CommitConfig(max_attempts=1 if effect.attempt == 1 else 2, max_rebases=0) \
            if fenced_at_lake else CommitConfig()
        outcome = await run(request, world, config)
        if not outcome.committed:
            message = outcome.message or "commit failed"
            if outcome.phase is Phase.UNKNOWN:
                return FlushError("08006", message, True, outcome_unknown=True)
            self._staged.pop(effect.flush_id, None)  # the machine deleted the staged files
            sqlstate = outcome.sqlstate or "XX000"
            return FlushError(sqlstate, message, sqlstate not in _NON_RETRYABLE)
        try:
            await self._thread(self._mount, world, key, watermark)
        except Exception as exc:
            # Committed, not mounted: the retry resolves by the token and mounts again.
            log.warning("flush %s committed but could not be mounted", effect.flush_id, exc_info=True)
            return FlushError("08006", f"committed, not yet visible: {_describe(exc)}", True, outcome_unknown=True)
        self._staged.pop(effect.flush_id, None)
        self._flush_latency.add((time.perf_counter() - started) * 1000)
        if self.flushed is not None:
            self.flushed(key)
        if self.tail is not None:
            from icegres import faults

            await trio.to_thread.run_sync(faults.point, "after-flush-commit")
            for b in batch:
                self._outstanding.discard(b.lsn)
            self._advance_trim()
        return FlushDone(next(self._seq))

    def _stage(self, key: Key, batch: list[Buffered], flush_id: str, watermark: int) -> tuple[Any, Any] | None:
        """Write the batch's rows as data files on the mounted head; the commit request to publish
        (None: a lake-fenced tail's batch that is wholly in the lake already)."""
        from icegres.engine import dml
        from icegres.engine.assign import conform
        from icegres.engine.lake_world import commit_request
        from icegres.engine.txn import TxnState

        plan = self.engine.read_plan(*key)
        if plan is None and branch_of(key) is None:
            self.engine.refresh({key})
            plan = self.engine.read_plan(*key)
        if plan is None:
            plan = self._plan(key, errors=True)
        if plan is None or plan.table is None:
            raise PgError("42P01", f'relation "{key[0]}.{key[1]}" does not exist')
        properties = {TAIL_ID_PROPERTY: self.tail_id, TAIL_LSN_PROPERTY: str(watermark)}
        fenced = self._lake_fenced
        if fenced is not None:
            batch = self._lake_fence(fenced, plan, batch, key)
            if not batch:
                return None
            properties[fenced.term_property] = fenced.writer_term
        # Conformed again to the table as it is now: a column added since reads as NULL.
        parts = [conform(b.rows, plan, key) for b in batch]
        rows = pa.concat_tables(parts) if len(parts) > 1 else parts[0]
        txn = TxnState(autocommit=True)
        txn.pins[key] = plan
        dml.append(txn, key, rows)
        txn.snapshot_properties = properties
        request = commit_request(txn)
        assert request is not None
        return txn, replace(request, token=flush_id)

    def _lake_fence(self, tail: LakeFencedTail, plan: ReadPlan, batch: list[Buffered],
                    key: Key) -> list[Buffered]:
        """Lake-side fencing of a writer whose tail writers hold in turn (the quorum's, the
        Postgres tail's), on the head the flush will assert: refuse if a higher writer term
        published to this table (PgError 25006, and the tail stops appending); drop the records
        another writer of the same tail already put there (an LSN names one record of a tail:
        the quorum's chosen slot, the Postgres tail's committed row). Blocking."""
        # The newest flush of the tail has the highest term: terms only grow along a table's history.
        summary = tail_summary(plan.table.metadata, _head_snapshot(plan), self.tail_id)  # type: ignore[union-attr]
        if summary is None:
            return batch
        published = summary.get(tail.term_property)
        if published and tail.outranked_by(published):
            reason = (f"writer term {published} published to {key[0]}.{key[1]}, above this writer's "
                      f"term {tail.writer_term}")
            tail.fence(reason)
            raise PgError(FENCED_SQLSTATE, f"this writer was fenced: {reason}")
        mark = int(summary.get(TAIL_LSN_PROPERTY) or 0)
        return [b for b in batch if b.lsn > mark]

    def _mount(self, world: Any, key: Key, watermark: int) -> None:
        """Make the engine read a snapshot that holds the batch before the flush reports done."""
        world.adopt(self.engine)  # mounts at once when the commit landed on the mounted head
        if self.watermark(self._plan(key)) >= watermark:
            return
        self.engine.refresh({key} if branch_of(key) is None else set())  # rebased, or moved: load it
        if self.watermark(self._plan(key)) < watermark:
            raise RuntimeError(f"the mounted snapshot of {key[0]}.{key[1]} does not hold LSN {watermark}")

    def _on_lost(self, report: ReportLost) -> None:
        log.error(
            "write buffer: %d acked entries (%d rows) of %s %s (flush %s): %s %s",
            len(report.entries), sum(e.row_count for e in report.entries), report.table,
            "may not have reached the lake" if report.in_doubt else "did not reach the lake",
            report.flush_id, report.sqlstate, report.message,
        )
        # The tail must not resurrect them at the next start: let the trim pass them.
        for entry in report.entries:
            self._outstanding.discard(entry.rows_ref.lsn)
        self._advance_trim()

    # --- helpers --------------------------------------------------------------------------------

    def _plan(self, key: Key, *, errors: bool = False) -> ReadPlan | None:
        """The head `key`'s rows go to: the mounted table, else for (schema, "t@b") branch b of t
        as the catalog has it now (branch_writes.py). None if neither exists (`errors`: the
        PgError saying why, for a flush to report). Blocking."""
        plan = self.engine.read_plan(*key)
        branch = branch_of(key)
        if plan is not None or branch is None:
            return plan
        from icegres.engine.branch_writes import branch_plan

        try:
            return branch_plan(self.engine, *branch)
        except PgError:
            if errors:
                raise
            return None

    def _table(self, key: Key) -> str:
        table = f"{key[0]}.{key[1]}"
        self._keys.setdefault(table, key)
        return table

    def _reserve(self, lsn: int) -> None:
        self._outstanding.add(lsn)
        heapq.heappush(self._outstanding_heap, lsn)

    def _advance_trim(self) -> None:
        """Tell the tail the highest LSN L such that every record <= L is in the lake."""
        tail = self.tail
        if tail is None:
            return
        heap = self._outstanding_heap
        while heap and heap[0] not in self._outstanding:
            heapq.heappop(heap)
        low = heap[0] - 1 if heap else tail.next_lsn - 1
        if low > self._trimmed:
            self._trimmed = low
            tail.advance_watermark(low)

    async def _thread(self, fn: Any, *args: Any) -> Any:
        return await trio.to_thread.run_sync(fn, *args, limiter=self._limiter)


def _describe(exc: BaseException) -> str:
    return f"{type(exc).__name__}: {exc}" if str(exc) else type(exc).__name__


@asynccontextmanager
async def open_ladder(
    engine: Engine, *, write_buffer_ms: int, tail: Tail | None = None
) -> AsyncIterator[WriteLadder | None]:
    """The server's write ladder over `tail` (None: acks from memory) for the block, or None when
    the buffer is off.

    On entry the buffer runs and every tail record not yet in the lake has been replayed and
    flushed; the engine reads through the ladder (`Engine.attach_ladder`) for the block. On a
    normal exit the buffer is drained (everything flushed) before the block ends, so before the
    caller closes the tail.
    """
    if write_buffer_ms <= 0:
        yield None
        return
    async with trio.open_nursery() as nursery:
        ladder = WriteLadder(engine, write_buffer_ms, tail)
        await nursery.start(ladder.run)
        await ladder.replay()
        async with _serving(engine, ladder):
            yield ladder


@asynccontextmanager
async def _serving(engine: Engine, ladder: WriteLadder) -> AsyncIterator[None]:
    engine.attach_ladder(ladder)
    try:
        yield
    finally:
        # Drain while readers still see the buffer, so no acked row is ever out of sight.
        with trio.CancelScope(shield=True):
            await ladder.shutdown()
        engine.attach_ladder(None)
