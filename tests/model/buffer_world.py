"""An in-memory lake and the input-driven harness for the buffer machine's model tests.

`ModelLake` holds, per table, a snapshot history (global sequence numbers) whose summaries carry
the flush id (commit token), the entry ids and the lsn watermark of each flush; foreign writers add
snapshots of their own. Faults are not random inside it: they arrive as harness inputs, so a
recorded list of inputs replays a run exactly.

`BufferHarness.apply(input)` is the single entry point for hypothesis rules and trace replay alike.
Every core step is checked against both levels of `specs/buffer.toml` (the machine-wide phase and
the per-table lanes), and every step invariant is checked after every input.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass, field, replace
from typing import Any

from icegres.machines.buffer import (
    Ack,
    AckPolicy,
    AdoptSnapshot,
    Appended,
    ArmTimer,
    Config,
    Effect,
    Entry,
    Event,
    FlushCommitted,
    FlushFailed,
    FlushRequested,
    FlushTable,
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
    recover,
    refusal,
    step,
    visible_entries,
)
from tests.model.scaffold import Exercised, check_every_transition_exercised
from tests.model.trace import Spec, load_spec, load_spec_section

TABLES = ("ns.a", "ns.b", "ns.c")
WRITERS = 3
READERS = 2
BYTES_PER_ROW = 100
# Small bounds, so that every one of them is reachable in short random schedules.
MODEL_CONFIG = Config(
    window_ms=100,
    max_batch_rows=6,
    max_batch_bytes=6 * BYTES_PER_ROW,
    max_buffered_bytes=14 * BYTES_PER_ROW,
    max_flush_attempts=3,
    retry_backoff_initial_ms=10,
    retry_backoff_max_ms=40,
)
FLUSH_FAULTS = (
    "ok",
    "timeout_before_apply",
    "timeout_after_apply",
    "refused",
    "schema_changed",
    "table_dropped",
)
SETTLE_STEPS_MAX = 200

# Every spec transition any harness took in this process, by level ("top" or "lane").
EXERCISED: Exercised = set()


def load_specs() -> tuple[Spec, Spec]:
    """specs/buffer.toml: the machine-wide phases and its [lane] section (same file, same hash)."""
    top = load_spec("buffer")
    return top, load_spec_section(top, "lane")


MACHINE_EFFECTS = (Refuse, ArmTimer, Stop)


# --- the model lake ------------------------------------------------------------------------------


@dataclass(frozen=True)
class LakeSnapshot:
    seq: int
    flush_id: str | None  # None: a foreign writer's commit
    entry_ids: tuple[str, ...]
    watermark: int | None


class ModelLake:
    def __init__(self, tables: tuple[str, ...] = TABLES) -> None:
        self.seq = 0
        self.tables: dict[str, list[LakeSnapshot]] = {}
        for name in tables:
            self.tables[name] = []
            self.foreign_commit(name)

    def _next(self) -> int:
        self.seq += 1
        return self.seq

    def head(self, table: str) -> int:
        return self.tables[table][-1].seq

    def find(self, table: str, flush_id: str) -> int | None:
        for snap in self.tables[table]:
            if snap.flush_id == flush_id:
                return snap.seq
        return None

    def commit(self, effect: FlushTable) -> int:
        """Apply a flush once: a token already present is the answer (resolution by token)."""
        found = self.find(effect.table, effect.flush_id)
        if found is not None:
            return found
        ids = tuple(e.entry_id for e in effect.entries)
        snap = LakeSnapshot(self._next(), effect.flush_id, ids, effect.watermark)
        self.tables[effect.table].append(snap)
        return snap.seq

    def foreign_commit(self, table: str) -> None:
        self.tables[table].append(LakeSnapshot(self._next(), None, (), None))

    def rows_at(self, table: str, seq: int) -> Counter[str]:
        rows: Counter[str] = Counter()
        for snap in self.tables[table]:
            if snap.seq <= seq:
                rows.update(snap.entry_ids)
        return rows

    def all_rows(self) -> Counter[str]:
        rows: Counter[str] = Counter()
        for snaps in self.tables.values():
            for snap in snaps:
                rows.update(snap.entry_ids)
        return rows

    def watermark(self, table: str) -> int | None:
        marks = [s.watermark for s in self.tables[table] if s.watermark is not None]
        return max(marks, default=None)


# --- the harness ---------------------------------------------------------------------------------


@dataclass
class EntryRecord:
    entry_id: str
    table: str
    writer: int
    index: int  # global append order
    lsn: int | None
    rows: int = 1
    status: str = "sent"  # sent, acked, refused
    reported: str | None = None  # None, "lost" or "in_doubt"
    after_shutdown: bool = False


@dataclass
class Observation:
    reader: int
    table: str
    seq: int
    rows: tuple[str, ...]


@dataclass
class BufferHarness:
    top: Spec
    lane: Spec
    config: Config = MODEL_CONFIG
    lake: ModelLake = field(default_factory=ModelLake)
    inputs: list[dict[str, Any]] = field(default_factory=list)
    steps: list[tuple[str, str, str, str, tuple[str, ...]]] = field(default_factory=list)

    def __post_init__(self) -> None:
        self.incarnations = 1
        self.state: State = initial_state(self.config, "i1")
        self.now_ms = 0
        self.entries: dict[str, EntryRecord] = {}
        self.lsn = 0
        self.reader_seq = {t: self.lake.head(t) for t in TABLES}
        self.flushes: dict[str, FlushTable] = {}  # outstanding, by table
        self.adopts: dict[str, AdoptSnapshot] = {}  # outstanding, by table
        self.attempts: dict[str, list[tuple[tuple[str, ...], int | None]]] = {}
        self.timer_ms: int | None = None
        self.shutdown = False
        self.stopped = False
        self.forced: set[str] = set()  # entries pending when a FlushRequested named their table
        self.violations: list[str] = []
        self.core_watermarks: dict[str, int] = {}
        self.observations: list[Observation] = []

    # The one entry point.

    def apply(self, inp: dict[str, Any]) -> None:
        self.inputs.append(inp)
        op = inp["op"]
        handler = getattr(self, f"_op_{op}", None)
        if handler is None:
            raise ValueError(f"unknown input op {op!r}")
        handler(inp)
        check_step_invariants(self)

    # Queries hypothesis rules use to build valid inputs.

    @property
    def tail(self) -> bool:
        return self.config.ack is AckPolicy.TAIL

    def running(self) -> bool:
        return not self.stopped

    def flush_tables(self) -> list[str]:
        return sorted(self.flushes)

    def adopt_tables(self) -> list[str]:
        return sorted(self.adopts)

    # Inputs.

    def _op_configure(self, inp: dict[str, Any]) -> None:
        if len(self.inputs) != 1:
            raise ValueError("configure must be the first input")
        self.config = replace(self.config, ack=AckPolicy(inp["ack"]))
        self.state = initial_state(self.config, "i1")

    def _op_tick(self, inp: dict[str, Any]) -> None:
        self.now_ms += inp["ms"]

    def _op_append(self, inp: dict[str, Any]) -> None:
        table, rows = inp["table"], inp["rows"]
        entry_id = f"e{len(self.entries) + 1}"
        record = EntryRecord(entry_id, table, inp["writer"], len(self.entries), None, rows)
        record.after_shutdown = self.shutdown
        self.entries[entry_id] = record
        size = rows * BYTES_PER_ROW
        if self.stopped:
            record.status = "refused"  # the driver answers for a stopped core
            return
        if self.tail:
            # The front door asks before the tail writes: a durable record cannot be refused.
            if refusal(self.state, size) is not None:
                record.status = "refused"
                return
            self.lsn += 1
            record.lsn = self.lsn
        self._step(
            Appended(entry_id, table, f"rows-{entry_id}", record.lsn, rows, size, self.now_ms)
        )

    def _op_fire_timer(self, inp: dict[str, Any]) -> None:
        """The driver's timer goes off at its deadline (the clock jumps there if it was earlier)."""
        if self.timer_ms is None or self.stopped:
            return
        self.now_ms = max(self.now_ms, self.timer_ms)
        self.timer_ms = None
        self._step(TimerFired(self.now_ms))

    def _op_force(self, inp: dict[str, Any]) -> None:
        """An UPDATE/DELETE/DDL needs the table's pending entries in the lake now."""
        if self.stopped:
            return
        self.forced.update(e.entry_id for e in lane_of(self.state, inp["table"]).pending)
        self._step(FlushRequested(inp["table"], self.now_ms))

    def _op_stray_timer(self, inp: dict[str, Any]) -> None:
        """A wake-up with nothing necessarily due (a stale timer, a scheduler hiccup)."""
        if self.stopped:
            return
        if self.timer_ms is not None and self.now_ms >= self.timer_ms:
            self.timer_ms = None
        self._step(TimerFired(self.now_ms))

    def _op_perform(self, inp: dict[str, Any]) -> None:
        """Carry out the table's outstanding FlushTable, with a fault."""
        table, fault = inp["table"], inp["fault"]
        effect = self.flushes.pop(table, None)
        if effect is None:
            raise ValueError(f"no flush outstanding for {table}")
        event: Event
        found = self.lake.find(table, effect.flush_id)
        if fault == "timeout_after_apply":
            self.lake.commit(effect)
            event = self._failed(effect, "08006", "commit timed out", True, unknown=True)
        elif fault == "timeout_before_apply":
            event = self._failed(effect, "08006", "commit timed out", True, unknown=True)
        elif found is not None or fault == "ok":
            # A retry resolves by its token first: a batch that landed is reported committed.
            seq = self.lake.commit(effect)
            event = FlushCommitted(table, effect.flush_id, seq, effect.watermark, self.now_ms)
        elif fault == "refused":
            event = self._failed(effect, "58030", "connection refused", True)
        elif fault == "schema_changed":
            event = self._failed(effect, "40001", "the table's schema changed", False)
        elif fault == "table_dropped":
            event = self._failed(effect, "42P01", f'relation "{table}" does not exist', False)
        else:
            raise ValueError(f"unknown flush fault {fault!r}")
        self._step(event)

    def _failed(
        self, effect: FlushTable, sqlstate: str, message: str, retryable: bool, unknown=False
    ) -> FlushFailed:
        return FlushFailed(
            effect.table, effect.flush_id, sqlstate, message, retryable, self.now_ms, unknown
        )

    def _op_adopt(self, inp: dict[str, Any]) -> None:
        """Carry out the table's outstanding AdoptSnapshot: readers switch to exactly that snapshot."""
        effect = self.adopts.pop(inp["table"], None)
        if effect is None:
            raise ValueError(f"no adoption outstanding for {inp['table']}")
        self._adopt(effect.table, effect.snapshot_seq)

    def _op_refresh(self, inp: dict[str, Any]) -> None:
        """Readers switch on their own (freshness) to a newer snapshot, when the buffer allows it."""
        table = inp["table"]
        if self.stopped or not adoption_allowed(self.state, table):
            return
        newer = [s.seq for s in self.lake.tables[table] if s.seq > self.reader_seq[table]]
        if newer:
            self._adopt(table, newer[inp["pick"] % len(newer)])

    def _adopt(self, table: str, seq: int) -> None:
        if seq > self.reader_seq[table]:
            self.reader_seq[table] = seq
        if not self.stopped:
            self._step(SnapshotAdopted(table, seq, self.now_ms))

    def _op_confirm(self, inp: dict[str, Any]) -> None:
        """A late or repeated report of the snapshot the readers are already on (always harmless)."""
        table = inp["table"]
        if not self.stopped and lane_of(self.state, table).adopted_seq is not None:
            self._step(SnapshotAdopted(table, self.reader_seq[table], self.now_ms))

    def _op_late_durable_append(self, inp: dict[str, Any]) -> None:
        """Tail policy: a record admitted and made durable before the shutdown reaches the core after."""
        if not self.tail or self.stopped:
            raise ValueError("late durable appends are a tail-policy, running-buffer input")
        table, rows = inp["table"], inp["rows"]
        entry_id = f"e{len(self.entries) + 1}"
        self.lsn += 1
        record = EntryRecord(entry_id, table, inp["writer"], len(self.entries), self.lsn, rows)
        self.entries[entry_id] = record
        size = rows * BYTES_PER_ROW
        self._step(Appended(entry_id, table, f"rows-{entry_id}", self.lsn, rows, size, self.now_ms))

    def _op_foreign_commit(self, inp: dict[str, Any]) -> None:
        self.lake.foreign_commit(inp["table"])

    def _op_read(self, inp: dict[str, Any]) -> None:
        """A reader captures its view of a table (snapshot + buffered entries at one instant)."""
        table = inp["table"]
        rows = self.lake.rows_at(table, self.reader_seq[table])
        rows.update(e.entry_id for e in visible_entries(self.state, table))
        self.observations.append(
            Observation(
                inp["reader"], table, self.reader_seq[table], tuple(sorted(rows.elements()))
            )
        )

    def _op_shutdown(self, inp: dict[str, Any]) -> None:
        if self.stopped:
            return
        self.shutdown = True
        self._step(ShutdownRequested(self.now_ms))

    def _op_restart(self, inp: dict[str, Any]) -> None:
        """Tail policy: the process dies (its outstanding flush `applied` or not) and replays."""
        if not self.tail:
            raise ValueError("only a tail-policy buffer survives a crash")
        if inp["applied"]:
            for effect in self.flushes.values():
                self.lake.commit(effect)
        replay = []
        for record in self.entries.values():
            mark = self.lake.watermark(record.table)
            if record.status != "acked" or record.reported is not None:
                continue
            assert record.lsn is not None
            if mark is None or record.lsn > mark:
                replay.append(
                    Entry(
                        record.entry_id,
                        record.table,
                        record.rows,
                        record.rows * BYTES_PER_ROW,
                        record.lsn,
                        0,
                        f"rows-{record.entry_id}",
                    )
                )
        replay.sort(key=lambda e: e.lsn or 0)
        heads = tuple((t, self.lake.head(t)) for t in TABLES)
        self.incarnations += 1
        self.flushes, self.adopts, self.timer_ms = {}, {}, None
        self.shutdown = self.stopped = False
        self.forced = set()
        self.reader_seq = dict(heads)
        self.core_watermarks = {}
        before = initial_state(self.config, f"i{self.incarnations}")
        after, effects = recover(self.config, before.incarnation, replay, heads, self.now_ms)
        self._record(before, "Recovered", None, after, effects)
        self.state = after
        self._absorb(None, effects)

    def _op_settle(self, inp: dict[str, Any]) -> None:
        """Liveness: shut down, then with no more faults the buffer must drain and stop."""
        if not self.stopped and not self.shutdown:
            self._op_shutdown({})
        for _ in range(SETTLE_STEPS_MAX):
            if self.stopped:
                break
            if self.flushes:
                self._op_perform({"table": self.flush_tables()[0], "fault": "ok"})
            elif self.adopts:
                self._op_adopt({"table": self.adopt_tables()[0]})
            elif self.timer_ms is not None:
                self._op_fire_timer({})
            else:
                raise AssertionError(f"the buffer is stuck while draining: {self.state}")
        assert self.stopped, f"the buffer did not stop: {self.state}"

    def _op_expect(self, inp: dict[str, Any]) -> None:
        """An assertion written into hand-made traces."""
        if "phase" in inp:
            assert self.state.phase.value == inp["phase"], (self.state.phase, inp)
        for table, phase in inp.get("lanes", {}).items():
            assert lane_of(self.state, table).phase.value == phase, (table, self.state, inp)
        for entry_id, status in inp.get("entries", {}).items():
            record = self.entries[entry_id]
            assert (record.reported or record.status) == status, (record, inp)

    # Stepping the core, checked against both levels of the spec.

    def _step(self, event: Event) -> None:
        before = self.state
        if isinstance(event, FlushCommitted | FlushFailed):
            self.flushes.pop(event.table, None)
        after, effects = step(before, event)
        self._record(before, type(event).__name__, event, after, effects)
        self.state = after
        self._absorb(event, effects)

    def _record(
        self,
        before: State,
        event_name: str,
        event: Event | None,
        after: State,
        effects: list[Effect],
    ) -> None:
        machine = tuple(type(e).__name__ for e in effects if isinstance(e, MACHINE_EFFECTS))
        t = self.top.check_step(before.phase.value, event_name, after.phase.value, machine)
        EXERCISED.add(("top", t))
        self.steps.append(("top", t.source, t.event, t.target, t.effects))
        per_lane: dict[str, list[str]] = {}
        for effect in effects:
            if isinstance(effect, Ack):
                table = self.entries[effect.entry_id].table
            elif isinstance(effect, FlushTable | AdoptSnapshot | ReportLost):
                table = effect.table
            else:
                continue
            per_lane.setdefault(table, []).append(type(effect).__name__)
        named = getattr(event, "table", None)
        refused = any(isinstance(e, Refuse) for e in effects)
        tables = set(per_lane) | {lane.table for lane in before.lanes + after.lanes}
        if named is not None:
            tables.add(named)
        for table in sorted(tables):
            source = lane_of(before, table).phase.value
            target = lane_of(after, table).phase.value
            emitted = tuple(per_lane.get(table, ()))
            own = table == named and not refused
            if source == target and not emitted and not own:
                continue
            t = self.lane.check_step(source, event_name, target, emitted)
            EXERCISED.add(("lane", t))
            self.steps.append(("lane", t.source, t.event, t.target, t.effects))

    def _absorb(self, event: Event | None, effects: list[Effect]) -> None:
        for effect in effects:
            match effect:
                case Ack(entry_id=entry_id):
                    record = self.entries[entry_id]
                    if record.status != "sent":
                        self.violations.append(f"{entry_id} answered twice")
                    record.status = "acked"
                    if record.after_shutdown:
                        self.violations.append(f"{entry_id} acked during shutdown")
                case Refuse(entry_id=entry_id):
                    record = self.entries[entry_id]
                    if record.status != "sent":
                        self.violations.append(f"{entry_id} answered twice")
                    record.status = "refused"
                case FlushTable():
                    if effect.table in self.flushes:
                        self.violations.append(f"two flushes outstanding for {effect.table}")
                    if any(e.table != effect.table for e in effect.entries):
                        self.violations.append(f"{effect.flush_id} mixes tables")
                    self.flushes[effect.table] = effect
                    ids = tuple(e.entry_id for e in effect.entries)
                    self.attempts.setdefault(effect.flush_id, []).append((ids, effect.watermark))
                case AdoptSnapshot():
                    self.adopts[effect.table] = effect
                case ReportLost():
                    for entry in effect.entries:
                        self.entries[entry.entry_id].reported = (
                            "in_doubt" if effect.in_doubt else "lost"
                        )
                case ArmTimer(deadline_ms=deadline):
                    self.timer_ms = deadline
                case Stop():
                    self.stopped = True
                    self.adopts.clear()
        if self.stopped:
            self.timer_ms = None
        if isinstance(event, Appended) and self.entries[event.entry_id].status == "sent":
            self.violations.append(f"{event.entry_id} neither acked nor refused")


# --- invariants ----------------------------------------------------------------------------------


def _acked(h: BufferHarness) -> list[EntryRecord]:
    return [r for r in h.entries.values() if r.status == "acked"]


def check_no_silent_drop(h: BufferHarness) -> None:
    in_lake = h.lake.all_rows()
    visible = {e.entry_id for lane in h.state.lanes for e in visible_entries(h.state, lane.table)}
    for record in _acked(h):
        if record.reported is None:
            assert record.entry_id in visible or in_lake[record.entry_id], (
                f"{record.entry_id} was acked and is now nowhere: not buffered, not in the lake, "
                "not reported"
            )


def check_committed_at_most_once(h: BufferHarness) -> None:
    twice = [e for e, n in h.lake.all_rows().items() if n > 1]
    assert not twice, f"entries committed more than once: {twice}"


def check_reader_sees_acked_rows_exactly_once(h: BufferHarness) -> None:
    views = {}
    for table in TABLES:
        rows = h.lake.rows_at(table, h.reader_seq[table])
        rows.update(e.entry_id for e in visible_entries(h.state, table))
        views[table] = rows
    for record in h.entries.values():
        seen = views[record.table][record.entry_id]
        if record.status != "acked" or record.reported == "lost":
            assert seen == 0, f"a reader sees {record.entry_id} ({record.status}, reported "
            f"{record.reported}) {seen} times"
        elif record.reported == "in_doubt":
            assert seen <= 1, f"a reader sees in-doubt {record.entry_id} {seen} times"
        else:
            assert seen == 1, (
                f"a reader of {record.table} sees acked {record.entry_id} {seen} times"
            )
    for obs in h.observations:
        counts = Counter(obs.rows)
        assert all(n == 1 for n in counts.values()), f"reader {obs.reader} saw duplicates {obs}"


def check_one_commit_per_table_per_flush(h: BufferHarness) -> None:
    tokens = Counter(
        s.flush_id for snaps in h.lake.tables.values() for s in snaps if s.flush_id is not None
    )
    twice = [t for t, n in tokens.items() if n > 1]
    assert not twice, f"flushes that landed as more than one snapshot: {twice}"
    bad = [v for v in h.violations if "flush" in v or "mixes" in v]
    assert not bad, bad


def check_retry_is_the_same_batch(h: BufferHarness) -> None:
    for flush_id, attempts in h.attempts.items():
        assert all(a == attempts[0] for a in attempts), f"{flush_id} changed between attempts"


def check_lake_holds_a_prefix(h: BufferHarness) -> None:
    for table, snaps in h.lake.tables.items():
        order = [h.entries[e].index for s in snaps for e in s.entry_ids]
        assert order == sorted(order), f"{table}: the lake holds entries out of append order"
        committed: set[str] = set()
        for snap in snaps:
            committed |= set(snap.entry_ids)
            if snap.watermark is None:
                continue
            for record in h.entries.values():
                if (
                    record.table == table
                    and record.status == "acked"
                    and record.reported is None
                    and record.lsn is not None
                    and record.lsn <= snap.watermark
                ):
                    assert record.entry_id in committed, (
                        f"{table}: watermark {snap.watermark} of {snap.flush_id} claims "
                        f"{record.entry_id} (lsn {record.lsn}) which is not in the lake"
                    )


def check_watermark_only_forward(h: BufferHarness) -> None:
    for table, snaps in h.lake.tables.items():
        marks = [s.watermark for s in snaps if s.watermark is not None]
        assert marks == sorted(set(marks)), f"{table}: watermarks {marks} do not strictly increase"
    for lane in h.state.lanes:
        mark = lane.lake_watermark
        if mark is None:
            continue
        before = h.core_watermarks.get(lane.table)
        assert before is None or mark >= before, f"{lane.table}: watermark went back"
        h.core_watermarks[lane.table] = mark


def check_nothing_acked_during_shutdown(h: BufferHarness) -> None:
    bad = [v for v in h.violations if "during shutdown" in v]
    assert not bad, bad
    for record in h.entries.values():
        if record.after_shutdown:
            assert record.status != "acked", f"{record.entry_id} acked after shutdown began"


def check_drained_when_stopped(h: BufferHarness) -> None:
    if not h.stopped:
        return
    assert h.state.phase is Phase.STOPPED
    in_lake = h.lake.all_rows()
    for record in _acked(h):
        if record.reported is None:
            assert in_lake[record.entry_id] == 1, f"stopped without committing {record.entry_id}"
    for lane in h.state.lanes:
        assert not visible_entries(h.state, lane.table), f"stopped with {lane.table} buffered"


def check_requested_flush_never_waits_for_the_window(h: BufferHarness) -> None:
    for lane in h.state.lanes:
        if lane.batch is None:
            waiting = [e.entry_id for e in lane.pending if e.entry_id in h.forced]
            assert not waiting, f"{lane.table}: {waiting} wait for the window after a FlushRequested"


def check_spec_transitions_only(h: BufferHarness) -> None:
    allowed = {("top", t.source, t.event, t.target, t.effects) for t in h.top.transitions} | {
        ("lane", t.source, t.event, t.target, t.effects) for t in h.lane.transitions
    }
    stray = [s for s in h.steps if s not in allowed]
    assert not stray, f"steps outside the spec: {stray}"
    answers = [v for v in h.violations if "answered" in v or "neither" in v]
    assert not answers, answers


STEP_CHECKERS: dict[str, Callable[[BufferHarness], None]] = {
    "no_silent_drop": check_no_silent_drop,
    "committed_at_most_once": check_committed_at_most_once,
    "reader_sees_acked_rows_exactly_once": check_reader_sees_acked_rows_exactly_once,
    "one_commit_per_table_per_flush": check_one_commit_per_table_per_flush,
    "retry_is_the_same_batch": check_retry_is_the_same_batch,
    "lake_holds_a_prefix": check_lake_holds_a_prefix,
    "watermark_only_forward": check_watermark_only_forward,
    "nothing_acked_during_shutdown": check_nothing_acked_during_shutdown,
    "drained_when_stopped": check_drained_when_stopped,
    "requested_flush_never_waits_for_the_window": check_requested_flush_never_waits_for_the_window,
    "spec_transitions_only": check_spec_transitions_only,
}
RUN_CHECKERS: dict[str, Callable[..., None]] = {
    "every_transition_exercised": check_every_transition_exercised,
}


def check_step_invariants(h: BufferHarness) -> None:
    for check in STEP_CHECKERS.values():
        check(h)
