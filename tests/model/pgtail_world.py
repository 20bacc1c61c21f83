"""An in-memory model database with faults and the input-driven harness for the Postgres tail.

`ModelDb` is the one tail's slice of PostgreSQL that matters: the rows (lsn -> epoch, payload,
checksum), the owner row (epoch, trimmed_lsn) and who holds the tail's advisory lock. Every
operation is atomic, as a transaction is. Faults arrive as harness inputs, so a recorded input
list replays a run exactly:

- a Commit can fail before COMMIT was sent (`abort`: nothing applied), or lose its connection
  during COMMIT with the transaction applied (`applied`) or not (`lost`): both answer "outcome
  unknown". A commit stays "slow" simply by not being performed while other inputs arrive;
- a ReadBack or a Trim can fail (`io_error`);
- the process can crash at any effect boundary, with its in-flight Commit applied or not
  (the reply died with the process), and restart: it claims the tail again and recovers;
- another writer can try to take the tail over: refused while this node holds the lock (`live`),
  or, when this node's lock was lost, it claims the tail (epoch + 1), commits records of its own
  and goes away, leaving this node fenced.

`PgTailHarness.apply(input)` is the single entry point for hypothesis rules and trace replay.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from icegres.machines.pgtail import (
    Acknowledge,
    AppendRequested,
    BatchAborted,
    BatchCommitted,
    Claim,
    Commit,
    CommitOutcomeUnknown,
    Config,
    Effect,
    Event,
    FailAppends,
    Fenced,
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
    health,
    recover,
    step,
)
from icegres.machines.wal_format import Record, checksum
from tests.model.scaffold import Exercised, check_every_transition_exercised
from tests.model.trace import Spec

TAIL_ID = "t1"
SETTLE_STEPS_MAX = 400

# Every spec transition any harness took in this process (the run-scope coverage invariant).
EXERCISED: Exercised = set()

FAULTS_BY_EFFECT = {
    "Commit": ("ok", "abort", "lost", "applied"),
    "ReadBack": ("ok", "io_error"),
    "Trim": ("ok", "io_error"),
    "StartTimer": ("ok",),
}
FAULTS = ("ok", "abort", "lost", "applied", "io_error")


def model_config() -> Config:
    # Small bounds, so that batch limits, attempt limits and trim batches are reached quickly.
    return Config(
        batch_records_max=3,
        batch_bytes_max=200,
        commit_attempts_max=3,
        retry_backoff_seconds=0.01,
        retry_backoff_seconds_max=0.04,
        trim_batch_max=2,
    )


# --- the model database --------------------------------------------------------------------------


@dataclass(frozen=True)
class Row:
    epoch: int
    payload: bytes
    checksum: int


class ModelDb:
    def __init__(self) -> None:
        self.rows: dict[int, Row] = {}
        self.epoch = 0  # the owner row's; 0: no owner row yet
        self.trimmed = 0
        self.lock: str | None = None  # who holds the tail's advisory lock

    def claim(self, who: str, watermark_lsn: int) -> Claim:
        """Take the lock, bump the epoch and read the tail (the driver's claim transaction)."""
        assert self.lock in (None, who), f"{who} claims a tail locked by {self.lock}"
        self.lock = who
        self.epoch += 1
        rows = tuple(
            StoredRow(lsn, r.payload, r.checksum, r.epoch)
            for lsn, r in sorted(self.rows.items())
            if lsn > watermark_lsn
        )
        return Claim(TAIL_ID, self.epoch, self.trimmed, max(self.rows, default=0), rows)

    def commit(self, effect: Commit) -> bool:
        """The batch transaction. False when the epoch check inserted nothing (fenced)."""
        if effect.epoch != self.epoch:
            return False
        assert not any(r.lsn in self.rows for r in effect.records), "duplicate LSN"
        for r in effect.records:
            self.rows[r.lsn] = Row(effect.epoch, r.payload, r.checksum)
        return True

    def has_rows(self, effect: Commit) -> bool:
        return any(r.lsn in self.rows for r in effect.records)

    def read_back(self, effect: ReadBack) -> tuple[tuple[int, int], ...]:
        return tuple(
            (lsn, row.checksum)
            for lsn in range(effect.first_lsn, effect.last_lsn + 1)
            if (row := self.rows.get(lsn)) is not None and row.epoch == effect.epoch
        )

    def trim(self, effect: Trim) -> list[int]:
        doomed = [lsn for lsn in self.rows if effect.after_lsn < lsn <= effect.through_lsn]
        for lsn in doomed:
            del self.rows[lsn]
        self.trimmed = max(self.trimmed, effect.through_lsn)
        return doomed

    def snapshot(self) -> tuple[Any, ...]:
        return (dict(self.rows), self.epoch, self.trimmed)


# --- the harness ---------------------------------------------------------------------------------


class PgTailHarness:
    def __init__(self, spec: Spec) -> None:
        self.spec = spec
        self.inputs: list[dict[str, Any]] = []
        self.steps: list[tuple[str, str, str, tuple[str, ...]]] = []
        self.db = ModelDb()
        self.config = model_config()
        self.state: State | None = None
        self.pending: list[Effect] = []  # effects the world still has to perform
        self.payloads = 0
        self.payload_of: dict[int, bytes] = {}  # the latest payload given each LSN by this node
        self.must_survive: dict[int, bytes] = {}  # acked or replayed, above the lake watermark
        self.failed: dict[int, tuple[int, bytes]] = {}  # definitely failed: (epoch, payload)
        self.lake_watermark = 0
        self.last_assigned = 0
        self.last_acked = 0
        self.core_watermark_seen = 0
        self.core_trimmed_seen = 0
        self.last_replay: list[int] = []
        self.refused_takeovers = 0
        self.violations: dict[str, list[str]] = {}

    # The one entry point.

    def apply(self, inp: dict[str, Any]) -> None:
        self.inputs.append(inp)
        handler = getattr(self, f"_op_{inp['op']}", None)
        if handler is None:
            raise ValueError(f"unknown input op {inp['op']!r}")
        handler(inp)
        check_step_invariants(self)

    def _violate(self, name: str, message: str) -> None:
        self.violations.setdefault(name, []).append(message)

    # Queries hypothesis rules use to build valid inputs.

    @property
    def running(self) -> bool:
        return self.state is not None and self.state.phase is not Phase.STARTING

    def flushable(self) -> int:
        """The highest LSN the lake may commit: a contiguous run of must-survive records."""
        lsn = self.lake_watermark
        while lsn + 1 in self.must_survive:
            lsn += 1
        return lsn

    # Inputs.

    def _op_open(self, inp: dict[str, Any]) -> None:
        assert self.state is None, "open once, first"
        self._recover()

    def _op_append(self, inp: dict[str, Any]) -> None:
        state = self._state()
        self.payloads += 1
        tag = f"p{self.payloads}:".encode()
        payload = (tag * (inp["size"] // len(tag) + 1))[: max(inp["size"], len(tag))]
        lsn = state.next_lsn
        poisoned = state.phase is Phase.POISONED
        self._step(AppendRequested(payload))
        if poisoned:
            return
        if lsn != self.last_assigned + 1:
            self._violate("lsns_dense", f"assigned {lsn} after {self.last_assigned}")
        self.last_assigned = lsn
        self.payload_of[lsn] = payload

    def _op_perform(self, inp: dict[str, Any]) -> None:
        if not self.pending:
            raise ValueError("nothing to perform")
        effect = self.pending.pop(inp["which"] % len(self.pending))
        fault = inp.get("fault", "ok")
        if fault not in FAULTS_BY_EFFECT[type(effect).__name__]:
            fault = "ok"
        self._step(self._perform(effect, fault))

    def _perform(self, effect: Effect, fault: str) -> Event:
        db = self.db
        match effect:
            case Commit():
                if fault == "abort":
                    return BatchAborted("connection lost before COMMIT")
                if fault == "lost":
                    return CommitOutcomeUnknown("connection lost during COMMIT (not applied)")
                if effect.epoch != db.epoch:
                    # The epoch check FOR SHARE finds no owner row of this epoch: no rows.
                    return Fenced(f"the owner row holds epoch {db.epoch}, not {effect.epoch}")
                if db.has_rows(effect):
                    # The driver's INSERT meets a unique violation: it reports "unknown".
                    return CommitOutcomeUnknown("duplicate key")
                db.commit(effect)
                if fault == "applied":
                    return CommitOutcomeUnknown("connection lost during COMMIT (applied)")
                return BatchCommitted()
            case ReadBack():
                if fault == "io_error":
                    return ReadBackFailed("connection refused")
                return ReadBackDone(db.read_back(effect))
            case Trim(after_lsn=after, through_lsn=through):
                if fault == "io_error":
                    return TrimFailed("connection refused")
                doomed = [lsn for lsn in db.rows if after < lsn <= through]
                above = sorted(lsn for lsn in doomed if lsn > self.lake_watermark)
                if above or through > self.lake_watermark:
                    self._violate(
                        "deleted_only_below_watermark",
                        f"trim through {through} deletes {above} above the lake's "
                        f"{self.lake_watermark}",
                    )
                db.trim(effect)
                return TrimDone(through)
            case StartTimer(timer=timer):
                return TimerFired(timer)
        raise AssertionError(f"not a performable effect {effect!r}")

    def _op_flush(self, inp: dict[str, Any]) -> None:
        """The lake commits records up to some LSN (its watermark is durable in the lake)."""
        top = self.flushable()
        span = top - self.lake_watermark
        if span > 0:
            self.lake_watermark += 1 + inp["pick"] % span
            for lsn in [lsn for lsn in self.must_survive if lsn <= self.lake_watermark]:
                del self.must_survive[lsn]
        if inp.get("deliver", True) and self.running:
            self._deliver(self.lake_watermark)

    def _op_deliver(self, inp: dict[str, Any]) -> None:
        """Tell the core the lake's watermark (or, `stale`, an older one)."""
        lsn = max(0, self.lake_watermark - 1) if inp.get("stale") else self.lake_watermark
        self._deliver(lsn)

    def _deliver(self, lsn: int) -> None:
        state = self._state()
        # This node learns the watermark from its own flushes: never beyond what it committed
        # (after a takeover the lake may hold the other writer's records).
        if state.phase is not Phase.POISONED:
            lsn = min(lsn, state.durable_lsn)
        self._step(WatermarkAdvanced(lsn))

    def _op_crash(self, inp: dict[str, Any]) -> None:
        """The process dies; its in-flight Commit reached the server and committed, or not."""
        if inp.get("applied"):
            for effect in self.pending:
                if isinstance(effect, Commit) and not self.db.has_rows(effect):
                    self.db.commit(effect)
        self.pending = []
        if self.db.lock == "node":
            self.db.lock = None  # its connections closed
        self._recover()

    def _op_takeover(self, inp: dict[str, Any]) -> None:
        """Another writer opens the tail."""
        if inp.get("live") and self.db.lock == "node":
            before = self.db.snapshot()
            self.refused_takeovers += 1  # the lock is taken: a clear refusal, nothing changes
            if self.db.snapshot() != before:
                self._violate("single_writer", "a refused takeover changed the tail")
            return
        # This node's connection (and with it the lock) was lost; the other writer claims.
        self.db.lock = None
        claim = self.db.claim("intruder", self.lake_watermark)
        try:
            recovery = recover(claim, self.config, watermark_lsn=self.lake_watermark)
        except PoisonedTail as exc:
            self._violate("recovery_exact", f"the intruder could not recover: {exc}")
            return
        self._check_recovery(recovery.replay, who="intruder")
        self.must_survive.update(
            (r.lsn, r.payload) for r in recovery.replay if r.lsn > self.lake_watermark
        )
        state = recovery.state
        for i in range(inp.get("records", 1)):
            payload = f"intruder{self.db.epoch}-{i}:".encode()
            lsn = state.next_lsn
            state, effects = step(state, AppendRequested(payload))
            while effects and isinstance(effects[-1], Commit):
                assert self.db.commit(effects[-1])
                state, effects = step(state, BatchCommitted())
            self.must_survive[lsn] = payload
        self.db.lock = None  # and goes away

    def _op_settle(self, inp: dict[str, Any]) -> None:
        """Liveness: with faults gone, every outstanding append is answered within a bound."""
        for _ in range(SETTLE_STEPS_MAX):
            if not self.pending:
                break
            self._op_perform({"which": 0, "fault": "ok"})
        assert not self.pending, f"did not settle: {self.pending}"
        state = self._state()
        assert state.phase in (Phase.IDLE, Phase.POISONED), state.phase
        assert not state.pending and not state.inflight

    def _op_expect(self, inp: dict[str, Any]) -> None:
        """An assertion written into hand-made traces."""
        state = self._state()
        if "phase" in inp:
            assert state.phase.value == inp["phase"], (state.phase, inp)
        if "durable_lsn" in inp:
            assert state.durable_lsn == inp["durable_lsn"], state
        if "replayed" in inp:
            assert self.last_replay == inp["replayed"], self.last_replay
        if "rows" in inp:
            assert sorted(self.db.rows) == inp["rows"], sorted(self.db.rows)
        if "refused_takeovers" in inp:
            assert self.refused_takeovers == inp["refused_takeovers"], self.refused_takeovers

    # Recovery.

    def _recover(self) -> None:
        claim = self.db.claim("node", self.lake_watermark)
        try:
            recovery = recover(claim, self.config, watermark_lsn=self.lake_watermark)
        except PoisonedTail as exc:
            # Nothing in the model loses rows: a refusal is a bug.
            self._violate("recovery_exact", f"refused to start an undamaged tail: {exc}")
            self.state = None
            return
        self._check_recovery(recovery.replay, who="node")
        self.last_replay = [r.lsn for r in recovery.replay]
        # Replayed records are the lake's to flush now: they must survive like acked ones.
        self.must_survive = {r.lsn: r.payload for r in recovery.replay}
        self.payload_of = {r.lsn: r.payload for r in recovery.replay}
        # A fresh incarnation: appends before the crash that recovery did not return are gone.
        self.last_assigned = recovery.state.next_lsn - 1
        self.last_acked = self.last_assigned
        self.core_watermark_seen = recovery.state.watermark_lsn
        self.core_trimmed_seen = recovery.state.trimmed_lsn
        self._record(State(config=self.config), "TailRecovered", recovery.state, recovery.effects)

    def _check_recovery(self, replay: tuple[Record, ...], *, who: str) -> None:
        name = "recovery_exact"
        got = {r.lsn: r.payload for r in replay}
        lsns = [r.lsn for r in replay]
        if lsns != list(range(self.lake_watermark + 1, self.lake_watermark + 1 + len(lsns))):
            self._violate(
                name, f"{who}: replay LSNs {lsns} not dense from {self.lake_watermark + 1}"
            )
        for lsn, payload in self.must_survive.items():
            if lsn > self.lake_watermark and got.get(lsn) != payload:
                self._violate(name, f"{who}: acked LSN {lsn} missing or changed after recovery")
        for record in replay:
            row = self.db.rows.get(record.lsn)
            if row is None or row.payload != record.payload:
                self._violate(name, f"{who}: LSN {record.lsn} replayed garbage")
            failed = self.failed.get(record.lsn)
            if row is not None and failed == (row.epoch, row.payload):
                self._violate(name, f"{who}: LSN {record.lsn} was a definitely failed append")

    # Stepping the core, checked against the spec.

    def _step(self, event: Event) -> None:
        before = self._state()
        after, effects = step(before, event)
        self._record(before, type(event).__name__, after, effects)

    def _record(self, before: State, event: str, after: State, effects: list[Effect]) -> None:
        names = tuple(type(e).__name__ for e in effects)
        transition = self.spec.check_step(before.phase.value, event, after.phase.value, names)
        EXERCISED.add(("top", transition))
        self.steps.append((before.phase.value, event, after.phase.value, names))
        if after.watermark_lsn < self.core_watermark_seen:
            self._violate(
                "watermark_monotonic", f"{after.watermark_lsn} < {self.core_watermark_seen}"
            )
        if after.trimmed_lsn < self.core_trimmed_seen:
            self._violate("watermark_monotonic", f"trimmed {after.trimmed_lsn} went back")
        self.core_watermark_seen = after.watermark_lsn
        self.core_trimmed_seen = after.trimmed_lsn
        self.state = after
        for effect in effects:
            match effect:
                case Acknowledge(first_lsn=first, last_lsn=last):
                    self._on_ack(before, after, first, last)
                case FailAppends(failed=failed):
                    for lsn in failed:
                        self.failed[lsn] = (after.epoch, self.payload_of[lsn])
                case RefuseAppend():
                    pass
                case _:
                    self.pending.append(effect)

    def _on_ack(self, before: State, after: State, first: int, last: int) -> None:
        if before.phase is Phase.POISONED:
            self._violate("nothing_acked_after_poison", f"acked {first}..{last} after poison")
        if first != self.last_acked + 1:
            self._violate("lsns_dense", f"acked {first}..{last} after {self.last_acked}")
        self.last_acked = last
        for lsn in range(first, last + 1):
            row = self.db.rows.get(lsn)
            if row is None or row.epoch != after.epoch or row.payload != self.payload_of[lsn]:
                self._violate("acked_only_after_commit", f"LSN {lsn} acked but not committed")
            if lsn > self.lake_watermark:
                self.must_survive[lsn] = self.payload_of[lsn]

    def _state(self) -> State:
        assert self.state is not None, "no tail (refused or not opened)"
        return self.state


# --- invariants ----------------------------------------------------------------------------------


def _no_violations(name: str) -> Callable[[PgTailHarness], None]:
    def check(h: PgTailHarness) -> None:
        assert not h.violations.get(name), f"{name}: {h.violations[name]}"

    return check


def check_lsns_dense(h: PgTailHarness) -> None:
    _no_violations("lsns_dense")(h)
    lsns = sorted(h.db.rows)
    if lsns:
        assert lsns == list(range(lsns[0], lsns[-1] + 1)), f"rows have gaps: {lsns}"
        assert lsns[0] == h.db.trimmed + 1, f"rows start at {lsns[0]}, trimmed {h.db.trimmed}"


def check_single_writer(h: PgTailHarness) -> None:
    _no_violations("single_writer")(h)
    epochs = [h.db.rows[lsn].epoch for lsn in sorted(h.db.rows)]
    assert epochs == sorted(epochs), f"writers interleave: epochs by LSN {epochs}"


def check_acked_records_committed(h: PgTailHarness) -> None:
    for lsn, payload in h.must_survive.items():
        if lsn <= h.lake_watermark:
            continue
        row = h.db.rows.get(lsn)
        assert row is not None and row.payload == payload, f"acked LSN {lsn} is not committed"
        assert row.checksum == checksum(payload), f"acked LSN {lsn} has a bad checksum"


def check_failure_reported_truthfully(h: PgTailHarness) -> None:
    for lsn, (epoch, payload) in h.failed.items():
        row = h.db.rows.get(lsn)
        assert row is None or (row.epoch, row.payload) != (epoch, payload), (
            f"LSN {lsn} was reported definitely failed but is committed"
        )


def check_nothing_acked_after_poison(h: PgTailHarness) -> None:
    _no_violations("nothing_acked_after_poison")(h)
    if h.state is not None and h.state.phase is Phase.POISONED:
        report = health(h.state)
        assert not report.ok and report.reason, report


def check_watermark_monotonic(h: PgTailHarness) -> None:
    _no_violations("watermark_monotonic")(h)
    if h.state is not None:
        assert h.state.watermark_lsn <= h.lake_watermark, (h.state.watermark_lsn, h.lake_watermark)


def check_spec_transitions_only(h: PgTailHarness) -> None:
    allowed = {(t.source, t.event, t.target, t.effects) for t in h.spec.transitions}
    stray = [s for s in h.steps if s not in allowed]
    assert not stray, f"steps outside the spec: {stray}"


STEP_CHECKERS: dict[str, Callable[[PgTailHarness], None]] = {
    "acked_only_after_commit": _no_violations("acked_only_after_commit"),
    "lsns_dense": check_lsns_dense,
    "single_writer": check_single_writer,
    "acked_records_committed": check_acked_records_committed,
    "failure_reported_truthfully": check_failure_reported_truthfully,
    "recovery_exact": _no_violations("recovery_exact"),
    "deleted_only_below_watermark": _no_violations("deleted_only_below_watermark"),
    "nothing_acked_after_poison": check_nothing_acked_after_poison,
    "watermark_monotonic": check_watermark_monotonic,
    "spec_transitions_only": check_spec_transitions_only,
}
RUN_CHECKERS: dict[str, Callable[..., None]] = {
    "every_transition_exercised": check_every_transition_exercised,
}


def check_step_invariants(h: PgTailHarness) -> None:
    for check in STEP_CHECKERS.values():
        check(h)
