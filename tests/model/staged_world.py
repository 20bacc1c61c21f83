"""A simulated lake, storage and staging directory for the staged-file machine; and the checkers
of `specs/staged.toml`.

One table (its uuid changes if it is dropped and recreated) whose metadata keeps a list of
snapshots, each with its commit token and its whole live file set (as manifests list EXISTING
entries), so "referenced" is the union of the retained snapshots' live sets. Storage is a set of
paths. Our server (runs r1, r2, ...) stages one write attempt at a time: `announce` appends the
next file to the attempt's durable record, `create` makes the announced file appear, `rewrite`
stages a replacement of its files (the old ones become the transaction's orphans), `publish`
ends it through the commit machine's four answers, `fail` ends it before publishing. Another
server commits (`foreign_commit`), stages a file it has not published (`foreign_staged`) and
compacts (`foreign_overwrite`); `expire` drops every snapshot but the head and deletes what only
they referenced; `drop_recreate` replaces the table. `crash` kills our process (the machine in
flight is lost, the records stay); `restart` starts a run that recovers every record of a dead run
(one machine at a time, each effect answered by `perform` with a fault or not); `peek` is a second
process starting on the same data directory while ours runs; `torn` a crash mid-append of a
record's first line.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from icegres.machines.staged import (
    Config,
    DeleteFiles,
    Effect,
    Event,
    FilesDeleted,
    ForgetFailed,
    ForgetRecord,
    Inspect,
    InspectFailed,
    Phase,
    RecordForgotten,
    RecordFound,
    ReportCleaned,
    ReportKept,
    StagedFile,
    StagingRecord,
    State,
    StatementEnded,
    TableSeen,
    TablesInspected,
    Verdict,
    Wait,
    WaitElapsed,
    initial_state,
    step,
)
from tests.model.scaffold import Exercised, check_every_transition_exercised
from tests.model.trace import Spec

TABLE = "ns.t"
CONFIG = Config(max_inspect_attempts=2, backoff_initial_seconds=0.1, backoff_max_seconds=0.2)
FAULTS = ("ok", "inspect_failed", "delete_failed", "forget_failed")
PUBLISH = ("ok", "rejected", "lost_applied", "lost_not_applied")

EXERCISED: Exercised = set()


@dataclass
class Snapshot:
    token: str
    live: frozenset[str]


@dataclass
class Attempt:
    token: str
    run: str
    announced: list[str] = field(default_factory=list)  # in the record, in order
    request: set[str] = field(default_factory=set)  # the files its commit would publish
    orphans: set[str] = field(default_factory=set)  # rewritten within the transaction


@dataclass
class Cleanup:
    """One machine in flight: whose record, and how it started."""

    record: StagingRecord
    state: State
    pending: Effect | None
    by_owner: bool  # StatementEnded (the owner itself) or RecordFound (recovery)
    owner_running: bool
    inspects_in_a_row: int = 0


@dataclass
class StagedHarness:
    spec: Spec
    inputs: list[dict[str, Any]] = field(default_factory=list)
    steps: list[tuple[Any, ...]] = field(default_factory=list)
    uuid: str = "u0"
    snapshots: list[Snapshot] = field(default_factory=list)
    storage: set[str] = field(default_factory=set)
    file_uuid: dict[str, str] = field(default_factory=dict)  # our files' table incarnation
    records: dict[str, tuple[str, list[StagedFile]]] = field(default_factory=dict)  # token -> (run, files)
    runs: list[str] = field(default_factory=lambda: ["r1"])
    running: str | None = "r1"
    attempt: Attempt | None = None
    cleanup: Cleanup | None = None
    queue: list[tuple[StagingRecord, bool]] = field(default_factory=list)  # recoveries still to run
    unknown: set[str] = field(default_factory=set)  # tokens whose outcome our process never learnt
    verdicts: list[str] = field(default_factory=list)
    serial: int = 0
    deleted_by_recovery: int = 0
    forgotten: dict[str, bool] = field(default_factory=dict)  # token -> forgotten by its owner itself
    # Off only in the test that shows the checker catches it: a file created before its record.
    record_first: bool = True

    # --- the one entry point ----------------------------------------------------------------

    def apply(self, inp: dict[str, Any]) -> None:
        self.inputs.append(inp)
        op = inp["op"]
        handler = getattr(self, f"_{op}", None)
        if handler is None:
            raise ValueError(f"unknown input {inp}")
        args = {k: v for k, v in inp.items() if k != "op"}
        handler(**args)
        check_step_invariants(self)

    # --- the table ----------------------------------------------------------------------------

    def live(self) -> frozenset[str]:
        return self.snapshots[-1].live if self.snapshots else frozenset()

    def referenced(self) -> set[str]:
        return set().union(*(s.live for s in self.snapshots)) if self.snapshots else set()

    def _next(self, prefix: str) -> str:
        self.serial += 1
        return f"{prefix}{self.serial}"

    def _foreign_commit(self) -> None:
        path = self._next("theirs-")
        self.storage.add(path)
        self.snapshots.append(Snapshot(self._next("ft"), self.live() | {path}))

    def _foreign_staged(self) -> None:
        self.storage.add(self._next("theirs-staged-"))

    def _foreign_overwrite(self) -> None:
        """A compaction by another server: the oldest live file replaced by a new one."""
        if not self.live():
            return
        gone = sorted(self.live())[0]
        path = self._next("theirs-")
        self.storage.add(path)
        self.snapshots.append(Snapshot(self._next("ft"), (self.live() - {gone}) | {path}))

    def _expire(self) -> None:
        if len(self.snapshots) < 2:
            return
        before = self.referenced()
        self.snapshots = self.snapshots[-1:]
        self.storage -= before - self.referenced()

    def _drop_recreate(self) -> None:
        if self.attempt is not None or self.cleanup is not None:
            return  # (a write in flight would fail on the table's uuid: not this model's subject)
        self.uuid = self._next("u")
        self.snapshots = []  # the old files stay in storage: a drop without purge

    # --- our write attempt ---------------------------------------------------------------------

    def _begin(self) -> None:
        if self.running is None or self.attempt is not None or self.cleanup is not None:
            return
        self.attempt = Attempt(self._next("t"), self.running)

    def _announce(self) -> None:
        a = self.attempt
        if a is None or len(a.announced) > len(a.request | a.orphans):
            return  # one announced file at a time is being written
        path = self._next("ours-")
        if self.record_first:
            self._record(a, path)
        a.announced.append(path)
        if not self.record_first:
            self.storage.add(path)
            self.file_uuid[path] = self.uuid
            self._record(a, path)
            a.request.add(path)

    def _record(self, a: Attempt, path: str) -> None:
        run, files = self.records.setdefault(a.token, (a.run, []))
        files.append(StagedFile(path, TABLE, self.uuid))

    def _create(self) -> None:
        a = self.attempt
        if a is None or len(a.announced) == len(a.request | a.orphans):
            return
        path = a.announced[-1]
        self.storage.add(path)
        self.file_uuid[path] = self.uuid
        a.request.add(path)

    def _rewrite(self) -> None:
        """The transaction rewrites its staged files into one (an UPDATE after its INSERT)."""
        a = self.attempt
        if a is None or not a.request or len(a.announced) > len(a.request | a.orphans):
            return
        old = set(a.request)
        self._announce()
        self._create()
        a.request -= old
        a.orphans |= old

    def _fail(self) -> None:
        a = self.attempt
        if a is None or len(a.announced) > len(a.request | a.orphans):
            return  # (a file still being written: its writer deletes it, engine/staging.py)
        self.attempt = None
        self._start_owner(a, Verdict.NONE, frozenset())

    def _publish(self, outcome: str) -> None:
        a = self.attempt
        if a is None or not a.request or len(a.announced) > len(a.request | a.orphans):
            return
        self.attempt = None
        if outcome in ("ok", "lost_applied"):
            self.snapshots.append(Snapshot(a.token, self.live() | frozenset(a.request)))
        if outcome == "ok":
            self._start_owner(a, Verdict.COMMITTED, frozenset(a.request))
        elif outcome == "rejected":
            self._start_owner(a, Verdict.ABORTED, frozenset())
        else:
            self.unknown.add(a.token)
            self._start_owner(a, Verdict.UNKNOWN, frozenset())

    def _start_owner(self, a: Attempt, verdict: Verdict, published: frozenset[str]) -> None:
        if a.token not in self.records:
            return  # it never staged a file
        record = self._record_of(a.token)
        state, effects = self._step(initial_state(CONFIG), StatementEnded(record, verdict, published))
        self.cleanup = Cleanup(record, state, None, by_owner=True, owner_running=True)
        self._absorb(effects)

    def _record_of(self, token: str) -> StagingRecord:
        return StagingRecord(token, tuple(self.records[token][1]))

    # --- crash, restart, a second process --------------------------------------------------------

    def _torn(self) -> None:
        """Our process dies mid-append of its attempt's first line: the record file exists, and
        reading it drops the torn line (engine/staging.py `read_record`), so it names no file."""
        a = self.attempt
        if a is None or a.announced:
            return
        self.records[a.token] = (a.run, [])
        self._crash()

    def _crash(self) -> None:
        if self.running is None:
            return
        self.running = None
        self.attempt = None  # a file announced but not created never appears
        self.cleanup = None
        self.queue = []

    def _restart(self) -> None:
        if self.running is not None:
            return
        run = f"r{len(self.runs) + 1}"
        self.runs.append(run)
        self.running = run
        self.queue = [(self._record_of(t), False) for t, (owner, _) in sorted(self.records.items()) if owner != run]
        self._next_recovery()

    def _peek(self) -> None:
        """Another process starts on this data directory while ours runs: it must leave every
        record of our run alone."""
        if self.running is None or self.cleanup is not None:
            return
        for token, (owner, _) in sorted(self.records.items()):
            if owner == self.running:
                self.queue.append((self._record_of(token), True))
        self._next_recovery()

    def _next_recovery(self) -> None:
        while self.cleanup is None and self.queue:
            record, owner_running = self.queue.pop(0)
            if record.token not in self.records:
                continue
            state, effects = self._step(initial_state(CONFIG), RecordFound(record, owner_running))
            self.cleanup = Cleanup(record, state, None, by_owner=False, owner_running=owner_running)
            self._absorb(effects)

    # --- the machine's effects ------------------------------------------------------------------

    def _perform(self, fault: str = "ok") -> None:
        c = self.cleanup
        if c is None or c.pending is None:
            return
        effect, c.pending = c.pending, None
        event: Event
        match effect:
            case Inspect():
                if fault == "inspect_failed":
                    event = InspectFailed("manifest unreadable")
                else:
                    paths = {f.path for f in c.record.files}
                    has = any(s.token == c.record.token for s in self.snapshots)
                    event = TablesInspected((TableSeen(TABLE, True, self.uuid, has, frozenset(paths & self.referenced())),))
            case Wait():
                event = WaitElapsed()
            case DeleteFiles(files=files):
                check_deletion(self, c, files)
                if fault == "delete_failed":
                    kept = frozenset(sorted(files)[:1])
                    self.storage -= files - kept
                    event = FilesDeleted(kept & self.storage)
                else:
                    self.storage -= files
                    event = FilesDeleted()
                if not c.by_owner:
                    self.deleted_by_recovery += len(files)
            case ForgetRecord(token=token):
                if fault == "forget_failed":
                    event = ForgetFailed("disk full")
                else:
                    self.records.pop(token, None)
                    self.forgotten[token] = c.by_owner
                    event = RecordForgotten()
            case _:
                raise AssertionError(f"unanswerable {effect}")
        state, effects = self._step(c.state, event)
        c.state = state
        self._absorb(effects)

    def _step(self, before: State, event: Event) -> tuple[State, list[Effect]]:
        after, effects = step(before, event)
        t = self.spec.check_step(before.phase.value, type(event).__name__, after.phase.value,
                                 tuple(type(e).__name__ for e in effects))
        EXERCISED.add(("top", t))
        self.steps.append(("top", t.source, t.event, t.target, t.effects))
        if isinstance(event, StatementEnded) and event.verdict is Verdict.UNKNOWN:
            assert not any(isinstance(e, DeleteFiles | ForgetRecord) for e in effects), "unknown_keeps_files"
        if isinstance(event, RecordFound) and event.owner_running:
            assert not any(isinstance(e, DeleteFiles | ForgetRecord) for e in effects), "running_owner_untouched"
        return after, effects

    def _absorb(self, effects: list[Effect]) -> None:
        c = self.cleanup
        assert c is not None
        for effect in effects:
            if isinstance(effect, ReportCleaned | ReportKept):
                self.verdicts.append(type(effect).__name__)
                if isinstance(effect, ReportCleaned) and not c.by_owner:
                    check_cleaned_leaves_no_staged(self, c)
                self.cleanup = None
                self._next_recovery()
                return
            if isinstance(effect, Inspect):
                c.inspects_in_a_row += 1
            elif not isinstance(effect, Wait):
                c.inspects_in_a_row = 0
            assert c.pending is None, "one answered effect at a time"
            c.pending = effect


# --- checkers ------------------------------------------------------------------------------------


def check_deletion(h: StagedHarness, c: Cleanup, files: frozenset[str]) -> None:
    """At every DeleteFiles: only the record's files, none referenced, none of a running owner's
    (unless the owner itself, which knows its verdict), none of a commit that may have landed."""
    assert files <= c.record.paths, ("deletes_only_recorded", files - c.record.paths)
    assert not files & h.referenced(), ("referenced_never_deleted", files & h.referenced())
    if not c.by_owner:
        assert not c.owner_running, "running_owner_untouched"


def check_referenced_never_deleted(h: StagedHarness) -> None:
    missing = h.referenced() - h.storage
    assert not missing, f"files a snapshot references are gone: {sorted(missing)}"


def check_deletes_only_recorded(h: StagedHarness) -> None:
    """Another server's files, committed or only staged, are never ours to delete."""
    theirs_staged = {p for p in h.storage if p.startswith("theirs-staged-")}
    made = sum(1 for i in h.inputs if i["op"] == "foreign_staged")
    assert len(theirs_staged) == made, "another server's staged file was deleted"


def check_running_owner_untouched(h: StagedHarness) -> None:
    a = h.attempt
    if a is not None:
        created = a.request | a.orphans
        assert created <= h.storage, f"a running attempt's files were deleted: {sorted(created - h.storage)}"


def check_unknown_keeps_files(h: StagedHarness) -> None:
    """A record whose outcome our process never learnt stays until a recovery (after a crash)
    decides it: its owner never forgets it, so it never deletes its files either."""
    for token in h.unknown:
        assert h.forgotten.get(token) is not True, f"the owner forgot {token} whose outcome it did not know"


def check_recorded_before_written(h: StagedHarness) -> None:
    named = {f.path for _, files in h.records.values() for f in files}
    for path in h.storage:
        if not path.startswith("ours-") or path in named or path in h.referenced():
            continue
        # A dropped or replaced table's files are the orphan GC's (its snapshots are gone).
        if h.file_uuid.get(path) != h.uuid:
            continue
        raise AssertionError(f"recorded_before_written: {path} is in storage, in no record and no snapshot")


def check_cleaned_leaves_no_staged(h: StagedHarness, c: Cleanup) -> None:
    left = {p for p in c.record.paths & h.storage if h.file_uuid.get(p) == h.uuid} - h.referenced()
    assert not left, f"cleaned_leaves_no_staged: {sorted(left)}"


def check_inspections_bounded(h: StagedHarness) -> None:
    c = h.cleanup
    if c is not None:
        assert c.inspects_in_a_row <= CONFIG.max_inspect_attempts


def check_spec_transitions_only(h: StagedHarness) -> None:
    """Checked at every step by `spec.check_step` in `_step`."""


STEP_CHECKERS = {
    "referenced_never_deleted": check_referenced_never_deleted,
    "deletes_only_recorded": check_deletes_only_recorded,
    "running_owner_untouched": check_running_owner_untouched,
    "unknown_keeps_files": check_unknown_keeps_files,
    "recorded_before_written": check_recorded_before_written,
    "cleaned_leaves_no_staged": lambda h: None,  # at every recovery's ReportCleaned (check_cleaned_leaves_no_staged)
    "inspections_bounded": check_inspections_bounded,
    "spec_transitions_only": check_spec_transitions_only,
}
RUN_CHECKERS = {"every_transition_exercised": check_every_transition_exercised}


def check_step_invariants(h: StagedHarness) -> None:
    for check in STEP_CHECKERS.values():
        check(h)


def settled_clean(h: StagedHarness) -> None:
    """After the liveness phase: no staged file of ours that nothing references is left in the
    table's current incarnation, and no record."""
    assert h.cleanup is None and not h.queue, (h.cleanup, h.queue)
    assert not h.records, sorted(h.records)
    left = {p for p in h.storage if p.startswith("ours-") and h.file_uuid.get(p) == h.uuid} - h.referenced()
    assert not left, f"staged files left after recovery: {sorted(left)}"


_ = Phase  # (the phases are checked through the spec)
