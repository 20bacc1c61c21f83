"""An in-memory catalog world and the input-driven harness for the commit machine's model tests.

`ModelCatalog` is a small Iceberg catalog: tables with a uuid, a schema id, a snapshot history
whose summaries carry commit tokens, and live data files; an atomic multi-table publish that checks
requirements; storage with staged and deleted files. Faults are not random inside it: they arrive
as harness inputs, so a recorded list of inputs replays a run exactly.

`CommitHarness.apply(input)` is the single entry point for hypothesis rules and trace replay alike.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from icegres.machines.commit import (
    Abort,
    Acknowledge,
    CommitRequest,
    CommitRequested,
    Config,
    DeleteFiles,
    Effect,
    Event,
    Inspect,
    InspectFailed,
    Publish,
    PublishFailed,
    PublishOutcomeUnknown,
    PublishRejected,
    PublishSucceeded,
    ReadAssertion,
    ReportOutcomeUnknown,
    State,
    TableHead,
    TablesInspected,
    TableWrite,
    Wait,
    WaitElapsed,
    WriteKind,
    initial_state,
    outcome_of,
    recover,
    step,
)
from tests.model.scaffold import Exercised, check_every_transition_exercised
from tests.model.trace import Spec

TABLES = ("ns.a", "ns.b", "ns.c")
SESSIONS = 3
# Small bounds, so that exhausting them is reachable in short random schedules.
MODEL_CONFIG = Config(
    max_attempts=3,
    max_rebases=3,
    max_inspect_attempts=2,
    backoff_initial_seconds=0.01,
    backoff_max_seconds=0.04,
)
PUBLISH_FAULTS = ("timeout_before_apply", "timeout_after_apply", "error_5xx", "refused")
INSPECT_FAULTS = ("inspect_failed",)
FAULTS = ("ok",) + PUBLISH_FAULTS + INSPECT_FAULTS
SETTLE_STEPS_MAX = 60
SEED_FILES = 3

# Every spec transition any harness took in this process (the run-scope coverage invariant).
EXERCISED: Exercised = set()


# --- the model catalog ---------------------------------------------------------------------------


@dataclass(frozen=True)
class ModelSnapshot:
    snapshot_id: int
    parent: int | None
    token: str | None  # the summary's commit token (foreign writers have their own)
    added: frozenset[str]
    removed: frozenset[str]


@dataclass
class ModelTable:
    name: str
    uuid: str
    schema_id: int = 0
    snapshots: list[ModelSnapshot] = field(default_factory=list)
    live: frozenset[str] = frozenset()

    @property
    def head(self) -> int | None:
        return self.snapshots[-1].snapshot_id if self.snapshots else None

    def has_token(self, token: str) -> bool:
        return any(s.token == token for s in self.snapshots)

    def add_snapshot(
        self, snapshot_id: int, token: str | None, added: frozenset[str], removed: frozenset[str]
    ) -> None:
        # Applied honestly even when `removed` is not live: the history checkers must see it.
        self.snapshots.append(ModelSnapshot(snapshot_id, self.head, token, added, removed))
        self.live = (self.live - removed) | added


class ModelCatalog:
    def __init__(self, tables: tuple[str, ...] = TABLES) -> None:
        self.tables: dict[str, ModelTable] = {}
        self.incarnations: dict[str, ModelTable] = {}  # by uuid, dropped ones included
        self.storage: set[str] = set()
        self.deleted: set[str] = set()
        # Primary-key values a data file holds (files of keyed writes and keyed foreign appends).
        self.file_keys: dict[str, frozenset[int]] = {}
        self._ids = 0
        for name in tables:
            seed = self.create_table(name)
            # Rows from the start, so that the first overwrites already have files to collide on.
            files = frozenset(self.stage_file("seed") for _ in range(SEED_FILES))
            seed.add_snapshot(self._next(), f"seed-{name}", files, frozenset())

    def _next(self) -> int:
        self._ids += 1
        return self._ids

    def create_table(self, name: str) -> ModelTable:
        table = ModelTable(name, uuid=f"uuid-{self._next()}")
        self.tables[name] = table
        self.incarnations[table.uuid] = table
        return table

    def stage_file(self, owner: str, keys: frozenset[int] = frozenset()) -> str:
        path = f"{owner}-{self._next()}.parquet"
        self.storage.add(path)
        if keys:
            self.file_keys[path] = keys
        return path

    def keys_of(self, files: frozenset[str]) -> frozenset[int]:
        return frozenset().union(*(self.file_keys.get(f, frozenset()) for f in files))

    def key_conflict(self, table: ModelTable, write: TableWrite) -> bool:
        """Keys of `write` that the table's head holds in files not its own: with keys checked
        free at staging, another commit inserted them since the write's base."""
        others = table.live - write.added_files
        return bool(self.keys_of(write.added_files) & self.keys_of(others))

    def delete_files(self, files: frozenset[str]) -> None:
        self.storage -= files
        self.deleted |= files

    def requirement_failure(self, request: CommitRequest, publish: Publish) -> str | None:
        bases = dict(publish.bases)
        for write in request.writes:
            table = self.tables.get(write.table)
            if table is None or table.uuid != write.table_uuid:
                return f"assert-table-uuid failed for {write.table}"
            if table.schema_id != write.base_schema_id:
                return f"assert-current-schema-id failed for {write.table}"
            if table.head != bases[write.table]:
                return f"assert-ref-snapshot-id failed for {write.table}"
        for guard in publish.guards:
            table = self.tables.get(guard.table)
            if table is None or table.uuid != guard.table_uuid or table.head != guard.snapshot:
                return f"read of {guard.table} no longer current"
        return None

    def publish(
        self, request: CommitRequest, publish: Publish
    ) -> PublishSucceeded | PublishRejected:
        """The atomic multi-table commit: every requirement holds and all apply, or nothing does."""
        failure = self.requirement_failure(request, publish)
        if failure is not None:
            return PublishRejected(failure)
        for write in request.writes:
            # The world re-checks the keys of a write that read its table on the head it builds on.
            if write.reads_table and self.key_conflict(self.tables[write.table], write):
                return PublishRejected(f"a concurrent commit to {write.table} inserted a key")
        for write in request.writes:
            removed = write.removed_files if write.kind is WriteKind.OVERWRITE else frozenset()
            self.tables[write.table].add_snapshot(
                self._next(), request.token, write.added_files, removed
            )
        return PublishSucceeded()

    def inspect(self, request: CommitRequest, tables: tuple[str, ...]) -> tuple[TableHead, ...]:
        writes = {w.table: w for w in request.writes}
        heads = []
        for name in tables:
            table = self.tables.get(name)
            if table is None:
                heads.append(TableHead(name, False, None, None, None))
                continue
            write = writes.get(name)
            removed = write.removed_files if write is not None else frozenset()
            keyed = write is not None and write.reads_table and table.uuid == write.table_uuid
            heads.append(
                TableHead(
                    name,
                    True,
                    table.uuid,
                    table.head,
                    table.schema_id,
                    live_removed=removed & table.live,
                    has_token=table.has_token(request.token),
                    key_conflict=keyed and self.key_conflict(table, write),
                )
            )
        return tuple(heads)

    # Foreign writers: other engines committing to the same tables.

    def foreign_append(self, name: str, key: int | None = None) -> None:
        table = self.tables[name]
        keys = frozenset() if key is None else frozenset({key})
        table.add_snapshot(
            self._next(), f"foreign-{self._ids}", frozenset({self.stage_file("f", keys)}), frozenset()
        )

    def foreign_overwrite(self, name: str, pick: int) -> None:
        table = self.tables[name]
        live = sorted(table.live)
        removed = frozenset({live[pick % len(live)]}) if live else frozenset()
        table.add_snapshot(
            self._next(), f"foreign-{self._ids}", frozenset({self.stage_file("f")}), removed
        )

    def schema_change(self, name: str) -> None:
        self.tables[name].schema_id += 1  # metadata only: the snapshot does not move

    def drop_recreate(self, name: str) -> None:
        # DROP TABLE without purge: the old incarnation's files stay where they are.
        self.create_table(name)


# --- the harness ---------------------------------------------------------------------------------


@dataclass
class CommitRecord:
    request: CommitRequest
    verdict: Effect | None = None  # Acknowledge, Abort or ReportOutcomeUnknown once told
    publishes: int = 0  # Publish effects of the current run of the machine (a crash restarts it)
    inspections: int = 0  # Inspect effects since the last Publish (or the run's start)
    most_publishes: int = 0  # the largest `publishes` of any run
    most_inspections: int = 0  # the largest `inspections` of any run
    # At a 40001 verdict: did the catalog show a conflict then (written table dropped, replaced
    # or its schema changed; a read moved)? And how many publishes had the run made?
    conflict_at_abort: bool | None = None
    publishes_at_abort: int = 0


@dataclass
class Session:
    index: int
    state: State | None = None
    pending: Effect | None = None  # the one outstanding effect an event answers
    may_have_landed: bool = False  # the harness's own view, independent of the core's

    @property
    def active(self) -> bool:
        return self.state is not None and not self.state.phase.terminal


class CommitHarness:
    def __init__(self, spec: Spec, config: Config = MODEL_CONFIG, sessions: int = SESSIONS) -> None:
        self.spec = spec
        self.config = config
        self.catalog = ModelCatalog()
        self.sessions = [Session(i) for i in range(sessions)]
        self.inputs: list[dict[str, Any]] = []
        self.commits: dict[str, CommitRecord] = {}
        self.steps: list[tuple[str, str, str, tuple[str, ...]]] = []
        self.blind_republishes: list[str] = []
        self._tokens = 0

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

    def idle_sessions(self) -> list[int]:
        return [s.index for s in self.sessions if not s.active]

    def pending_sessions(self) -> list[int]:
        return [s.index for s in self.sessions if s.active and s.pending is not None]

    def active_sessions(self) -> list[int]:
        return [s.index for s in self.sessions if s.active]

    # Inputs.

    def _op_begin(self, inp: dict[str, Any]) -> None:
        session = self.sessions[inp["session"]]
        if session.active:
            raise ValueError(f"session {session.index} is still committing")
        writes = []
        for w in inp["writes"]:
            table = self.catalog.tables[w["table"]]
            kind = WriteKind(w["kind"])
            removed: frozenset[str] = frozenset()
            if kind is WriteKind.OVERWRITE:
                live = sorted(table.live)[:8]
                removed = frozenset(f for i, f in enumerate(live) if w["remove_mask"] >> i & 1)
            # "keys": an append that checked these primary keys against the table (so it read
            # it); a key the head already holds would have been 23505 at the statement, so
            # only the free ones are inserted.
            keyed = kind is WriteKind.APPEND and "keys" in w
            keys = frozenset(w.get("keys", ())) - self.catalog.keys_of(table.live)
            added = frozenset(
                self.catalog.stage_file(f"s{session.index}", keys if i == 0 and keyed else frozenset())
                for i in range(w["add"])
            )
            writes.append(
                TableWrite(
                    table.name,
                    table.uuid,
                    table.head,
                    table.schema_id,
                    kind,
                    removed,
                    added,
                    reads_table=keyed or bool(w.get("serializable")),
                    serializable_read=bool(w.get("serializable")),
                )
            )
        reads = tuple(
            ReadAssertion(t, self.catalog.tables[t].uuid, self.catalog.tables[t].head)
            for t in inp.get("reads", ())
        )
        self._tokens += 1
        request = CommitRequest(f"c{self._tokens}", tuple(writes), reads)
        self.commits[request.token] = CommitRecord(request)
        session.state, session.pending, session.may_have_landed = (
            initial_state(self.config),
            None,
            False,
        )
        self._step(session, CommitRequested(request))

    def _op_perform(self, inp: dict[str, Any]) -> None:
        session = self.sessions[inp["session"]]
        effect, fault = session.pending, inp["fault"]
        if not session.active or effect is None:
            raise ValueError(f"session {session.index} has nothing to perform")
        request = self._request(session)
        event: Event
        match effect:
            case Publish():
                if fault == "refused":
                    event = PublishFailed("connection refused")
                elif fault in ("timeout_before_apply", "error_5xx"):
                    event = PublishOutcomeUnknown(fault)
                elif fault == "timeout_after_apply":
                    self.catalog.publish(request, effect)
                    event = PublishOutcomeUnknown(fault)
                else:
                    event = self.catalog.publish(request, effect)
            case Inspect(tables=tables):
                if fault == "inspect_failed":
                    event = InspectFailed("catalog unavailable")
                else:
                    event = TablesInspected(self.catalog.inspect(request, tables))
            case Wait():
                event = WaitElapsed()
            case _:
                raise AssertionError(f"unexpected pending effect {effect!r}")
        session.pending = None
        self._step(session, event)

    def _op_crash(self, inp: dict[str, Any]) -> None:
        """The session's process dies (after staging) and restarts with the request."""
        session = self.sessions[inp["session"]]
        if not session.active:
            raise ValueError(f"session {session.index} has no commit in flight")
        request = self._request(session)
        if inp["applied"] and isinstance(session.pending, Publish):
            self.catalog.publish(request, session.pending)  # it got out just before the crash
        session.may_have_landed = True
        record = self.commits[request.token]
        record.publishes = record.inspections = 0  # a new run of the machine
        state, effects = recover(request, self.config)
        self._record_step(session, initial_state(self.config), "CommitRecovered", state, effects)

    def _op_foreign_append(self, inp: dict[str, Any]) -> None:
        self.catalog.foreign_append(inp["table"], inp.get("key"))

    def _op_foreign_overwrite(self, inp: dict[str, Any]) -> None:
        self.catalog.foreign_overwrite(inp["table"], inp["pick"])

    def _op_schema_change(self, inp: dict[str, Any]) -> None:
        self.catalog.schema_change(inp["table"])

    def _op_drop_recreate(self, inp: dict[str, Any]) -> None:
        self.catalog.drop_recreate(inp["table"])

    def _op_settle(self, inp: dict[str, Any]) -> None:
        """Liveness: with faults gone, every session reaches a verdict within a bound."""
        for session in self.sessions:
            for _ in range(SETTLE_STEPS_MAX):
                if not session.active:
                    break
                self._op_perform({"session": session.index, "fault": "ok"})
            assert not session.active, f"session {session.index} did not settle: {session.state}"

    def _op_expect(self, inp: dict[str, Any]) -> None:
        """An assertion written into hand-made traces: the session's verdict so far."""
        session = self.sessions[inp["session"]]
        assert session.state is not None
        assert session.state.phase.value == inp["phase"], (session.state.phase, inp)
        if "sqlstate" in inp:
            assert session.state.sqlstate == inp["sqlstate"], (session.state, inp)

    # Stepping the core, checked against the spec.

    def _step(self, session: Session, event: Event) -> None:
        before = session.state
        assert before is not None
        if isinstance(event, PublishOutcomeUnknown):
            session.may_have_landed = True
        after, effects = step(before, event)
        if isinstance(event, TablesInspected) and not any(h.has_token for h in event.heads):
            session.may_have_landed = False
        self._record_step(session, before, type(event).__name__, after, effects)

    def _record_step(
        self, session: Session, before: State, event: str, after: State, effects: list[Effect]
    ) -> None:
        names = tuple(type(e).__name__ for e in effects)
        transition = self.spec.check_step(before.phase.value, event, after.phase.value, names)
        EXERCISED.add(("top", transition))
        self.steps.append((before.phase.value, event, after.phase.value, names))
        session.state, session.pending = after, None
        record = self.commits[self._request(session).token]
        for effect in effects:
            match effect:
                case Publish() | Inspect() | Wait():
                    assert session.pending is None, "two answerable effects at once"
                    if isinstance(effect, Publish) and session.may_have_landed:
                        self.blind_republishes.append(f"{record.request.token} after {event}")
                    session.pending = effect
                    self._count(record, effect)
                case DeleteFiles(files=files):
                    self.catalog.delete_files(files)
                case Acknowledge() | Abort() | ReportOutcomeUnknown():
                    assert record.verdict is None, "told the client twice"
                    record.verdict = effect
                    if isinstance(effect, Abort) and effect.sqlstate == "40001":
                        record.conflict_at_abort = self._visible_conflict(record.request)
                        record.publishes_at_abort = record.publishes
        assert (session.pending is None) == after.phase.terminal, (after.phase, effects)
        assert (outcome_of(after) is None) != after.phase.terminal

    def _request(self, session: Session) -> CommitRequest:
        assert session.state is not None and session.state.request is not None
        return session.state.request

    @staticmethod
    def _count(record: CommitRecord, effect: Effect) -> None:
        if isinstance(effect, Publish):
            record.publishes += 1
            record.inspections = 0
        elif isinstance(effect, Inspect):
            record.inspections += 1
        record.most_publishes = max(record.most_publishes, record.publishes)
        record.most_inspections = max(record.most_inspections, record.inspections)

    def _visible_conflict(self, request: CommitRequest) -> bool:
        """What the catalog shows now that forbids a rebase, judged without the core's help."""
        for w in request.writes:
            table = self.catalog.tables.get(w.table)
            if table is None or table.uuid != w.table_uuid or table.schema_id != w.base_schema_id:
                return True
        for r in request.reads:
            table = self.catalog.tables.get(r.table)
            if table is None or table.uuid != r.table_uuid or table.head != r.snapshot:
                return True
        return False


# --- invariants ----------------------------------------------------------------------------------


def _token_tables(h: CommitHarness, record: CommitRecord) -> list[bool]:
    """For each write of the commit: is its token in the incarnation it wrote to?"""
    return [
        h.catalog.incarnations[w.table_uuid].has_token(record.request.token)
        for w in record.request.writes
    ]


def check_atomic_across_tables(h: CommitHarness) -> None:
    for token, record in h.commits.items():
        present = _token_tables(h, record)
        assert all(present) or not any(present), f"{token} landed in only some tables: {present}"


def check_no_lost_update(h: CommitHarness) -> None:
    for table in h.catalog.incarnations.values():
        live: frozenset[str] = frozenset()
        for snap in table.snapshots:
            if snap.token in h.commits:
                assert snap.removed <= live, (
                    f"{snap.token} removed {sorted(snap.removed - live)} from {table.name}, "
                    "which another writer had already removed"
                )
            live = (live - snap.removed) | snap.added


def check_acknowledged_in_catalog(h: CommitHarness) -> None:
    for token, record in h.commits.items():
        if isinstance(record.verdict, Acknowledge):
            assert all(_token_tables(h, record)), f"{token} acknowledged but not in the catalog"


def check_aborted_leaves_nothing(h: CommitHarness) -> None:
    for token, record in h.commits.items():
        if isinstance(record.verdict, Abort):
            assert record.verdict.sqlstate in ("40001", "58030"), record.verdict
            assert not any(_token_tables(h, record)), f"{token} aborted but in the catalog"
            files = record.request.added_files
            assert files <= h.catalog.deleted and not files & h.catalog.storage, (
                f"{token} aborted but left staged files"
            )


def check_applied_at_most_once(h: CommitHarness) -> None:
    for table in h.catalog.incarnations.values():
        counts = Counter(s.token for s in table.snapshots if s.token in h.commits)
        twice = [t for t, n in counts.items() if n > 1]
        assert not twice, f"{twice} applied more than once to {table.name}"


def check_unknown_keeps_files(h: CommitHarness) -> None:
    # Stronger than asked: only an aborted commit ever deletes its files.
    for token, record in h.commits.items():
        if not isinstance(record.verdict, Abort):
            gone = record.request.added_files & h.catalog.deleted
            assert not gone, f"{token} ({type(record.verdict).__name__}) deleted {sorted(gone)}"


def check_live_files_exist(h: CommitHarness) -> None:
    for table in h.catalog.tables.values():
        missing = table.live - h.catalog.storage
        assert not missing, f"{table.name} references deleted files {sorted(missing)}"


def check_no_blind_republish(h: CommitHarness) -> None:
    assert not h.blind_republishes, f"published again before inspecting: {h.blind_republishes}"


def check_snapshot_isolated_history(h: CommitHarness) -> None:
    # Serial order = snapshot order per table (each commit's requirements pinned its base), so the
    # history is explained iff folding the snapshots reproduces the table and every removal was of
    # a file live at that point.
    for table in h.catalog.incarnations.values():
        live: frozenset[str] = frozenset()
        parent = None
        for snap in table.snapshots:
            assert snap.parent == parent, (
                f"{table.name}: snapshot {snap.snapshot_id} skips its parent"
            )
            assert snap.removed <= live, f"{table.name}: {snap.token} removed non-live files"
            live = (live - snap.removed) | snap.added
            parent = snap.snapshot_id
        assert live == table.live, f"{table.name}: live files are not the fold of its snapshots"


def check_blind_appends_outlast_concurrency(h: CommitHarness) -> None:
    for token, record in h.commits.items():
        if not record.request.blind or record.conflict_at_abort is None:
            continue
        # 40001 without a visible conflict: only once the free rebases ran out (each rebase is a
        # publish after the first, so at least max_rebases + 1 publishes).
        assert record.conflict_at_abort or record.publishes_at_abort > h.config.max_rebases, (
            f"{token}, blind appends only, got 40001 after {record.publishes_at_abort} publishes "
            "with no conflict in the catalog"
        )


def check_keys_stay_unique(h: CommitHarness) -> None:
    keyed = {
        token: {w.table_uuid: w for w in record.request.writes if w.reads_table}
        for token, record in h.commits.items()
    }
    for table in h.catalog.incarnations.values():
        live: frozenset[str] = frozenset()
        for snap in table.snapshots:
            write = keyed.get(snap.token or "", {}).get(table.uuid)
            if write is not None:
                clash = h.catalog.keys_of(snap.added) & h.catalog.keys_of(live)
                assert not clash, f"{snap.token} inserted keys {sorted(clash)} {table.name} held"
            live = (live - snap.removed) | snap.added


def check_serializable_reads_current(h: CommitHarness) -> None:
    read = {
        token: {w.table_uuid: w for w in record.request.writes if w.serializable_read}
        for token, record in h.commits.items()
    }
    for table in h.catalog.incarnations.values():
        for snap in table.snapshots:
            write = read.get(snap.token or "", {}).get(table.uuid)
            if write is not None:
                assert snap.parent == write.base_snapshot, (
                    f"{snap.token} read {table.name} at {write.base_snapshot} SERIALIZABLE and landed on {snap.parent}"
                )


def check_retries_bounded(h: CommitHarness) -> None:
    publishes_max = h.config.max_attempts + h.config.max_rebases
    for token, record in h.commits.items():
        assert record.most_publishes <= publishes_max, (
            f"{token} published {record.most_publishes} times in one run (bound {publishes_max})"
        )
        assert record.most_inspections <= h.config.max_inspect_attempts, (
            f"{token} inspected {record.most_inspections} times in a row"
        )


def check_spec_transitions_only(h: CommitHarness) -> None:
    allowed = {(t.source, t.event, t.target, t.effects) for t in h.spec.transitions}
    stray = [s for s in h.steps if s not in allowed]
    assert not stray, f"steps outside the spec: {stray}"


STEP_CHECKERS: dict[str, Callable[[CommitHarness], None]] = {
    "atomic_across_tables": check_atomic_across_tables,
    "no_lost_update": check_no_lost_update,
    "acknowledged_in_catalog": check_acknowledged_in_catalog,
    "aborted_leaves_nothing": check_aborted_leaves_nothing,
    "applied_at_most_once": check_applied_at_most_once,
    "unknown_keeps_files": check_unknown_keeps_files,
    "live_files_exist": check_live_files_exist,
    "no_blind_republish": check_no_blind_republish,
    "snapshot_isolated_history": check_snapshot_isolated_history,
    "blind_appends_outlast_concurrency": check_blind_appends_outlast_concurrency,
    "keys_stay_unique": check_keys_stay_unique,
    "serializable_reads_current": check_serializable_reads_current,
    "retries_bounded": check_retries_bounded,
    "spec_transitions_only": check_spec_transitions_only,
}
RUN_CHECKERS: dict[str, Callable[..., None]] = {
    "every_transition_exercised": check_every_transition_exercised,
}


def check_step_invariants(h: CommitHarness) -> None:
    for check in STEP_CHECKERS.values():
        check(h)


# --- a blocking world for the trio driver --------------------------------------------------------


class ThreadedModelWorld:
    """The ModelCatalog behind the driver's CommitWorld protocol, with scripted faults.

    `publish_faults` / `inspect_faults` are consumed one per call ("ok" when exhausted):
    "raise_before" / "raise_after" raise TimeoutError before / after applying; "refused" returns
    PublishFailed; "unknown_after" applies and returns PublishOutcomeUnknown; for inspect, "raise".
    """

    def __init__(
        self,
        catalog: ModelCatalog,
        publish_faults: tuple[str, ...] = (),
        inspect_faults: tuple[str, ...] = (),
        overtake: int = 0,
        overtake_key: int | None = None,
    ) -> None:
        self.catalog = catalog
        self.publish_faults = list(publish_faults)
        self.inspect_faults = list(inspect_faults)
        # Another writer's append lands just before each of our next `overtake` publishes.
        self.overtake = overtake
        self.overtake_key = overtake_key
        self.publishes: list[Publish] = []
        self.inspections = 0
        self.delete_calls: list[frozenset[str]] = []

    def publish(self, request: CommitRequest, publish: Publish) -> Event:
        self.publishes.append(publish)
        if self.overtake > 0:
            self.overtake -= 1
            for write in request.writes:
                self.catalog.foreign_append(write.table, self.overtake_key)
        fault = self.publish_faults.pop(0) if self.publish_faults else "ok"
        if fault == "raise_before":
            raise TimeoutError("read timed out")
        if fault == "refused":
            return PublishFailed("connection refused")
        result = self.catalog.publish(request, publish)
        if fault == "raise_after":
            raise TimeoutError("read timed out")
        if fault == "unknown_after":
            return PublishOutcomeUnknown("502 bad gateway")
        return result

    def inspect(self, request: CommitRequest, tables: tuple[str, ...]) -> tuple[TableHead, ...]:
        self.inspections += 1
        fault = self.inspect_faults.pop(0) if self.inspect_faults else "ok"
        if fault == "raise":
            raise ConnectionError("catalog unavailable")
        return self.catalog.inspect(request, tables)

    def delete_files(self, files: frozenset[str]) -> None:
        self.delete_calls.append(files)
        self.catalog.delete_files(files)


def stage_request(
    catalog: ModelCatalog,
    token: str,
    writes: list[tuple[str, str, int]],
    reads: tuple[str, ...] = (),
    keys: frozenset[int] | None = None,
) -> CommitRequest:
    """A request against the catalog's current heads: (table, kind, files removed) per write;
    `keys`: its appends checked these primary keys (they read their tables)."""
    table_writes = []
    for name, kind, remove_count in writes:
        table = catalog.tables[name]
        removed = frozenset(sorted(table.live)[:remove_count])
        table_writes.append(
            TableWrite(
                name,
                table.uuid,
                table.head,
                table.schema_id,
                WriteKind(kind),
                removed,
                frozenset({catalog.stage_file(token, keys or frozenset())}),
                reads_table=keys is not None,
            )
        )
    read_assertions = tuple(
        ReadAssertion(t, catalog.tables[t].uuid, catalog.tables[t].head) for t in reads
    )
    return CommitRequest(token, tuple(table_writes), read_assertions)
