"""The staged-file machine: what may be deleted of the data files one write attempt staged.

A write stages Parquet files before the commit machine publishes them. If the process dies (or
the statement fails or is cancelled) between the two, nothing references those files, and before
this machine only the orphan GC's 3-day grace got rid of them. So every write attempt keeps a
*staging record* (engine/staging.py): the path of each file it is about to create, with its table
and that table's uuid, written before the file is created (it survives the process; a machine
crash may lose its last lines, leaving those files to the orphan GC), and the token of the
attempt's commit. This core decides, from a record and what the catalog shows, which of
the record's files to delete; a driver (`icegres.machines.drivers.staged`) does the I/O.
`specs/staged.toml` is the independent statement of this machine.

Why it is shaped this way:

- Two ways in. `RecordFound` is start-up recovery of a record left by a dead process (or by a
  statement whose commit outcome stayed unknown). `StatementEnded` is the statement's own end in
  a running process: it knows its verdict, so it needs no inspection: nothing was published or
  the commit machine proved it aborted -> every recorded file goes; committed -> the files the
  commit did not publish go (a transaction's rewrites of its own staged files); unknown -> the
  record is kept for the next start, and nothing is deleted.
- Recovery decides by what the catalog shows, never by what it remembers. It inspects each
  table of the record: same incarnation (uuid), whether the attempt's token is in some snapshot,
  and which of the record's files any snapshot in the metadata references (every snapshot of
  every ref, DELETED manifest entries too). It deletes only recorded files that no snapshot
  references. The token alone would not be proof enough: a blind append may have been published
  in another commit's token (group commit), and an expired snapshot takes its token with it
  while later snapshots still list its files. The token classifies the outcome (`landed`) for
  the report; the references decide.
- A record whose owner still runs is never acted on: its files may be mid-commit. Its owner is
  alive while it holds the lock on its run directory (the driver asks).
- A table dropped or replaced since: its files cannot be checked against its snapshots, so they
  are left to the orphan GC and the record is forgotten (it could never prove more later).
- Delete before forgetting: a crash between them runs the recovery again, which is idempotent
  (the files gone are no longer there to delete). A failed delete keeps the record.
- Time enters only as `WaitElapsed`.

Assumption the world must uphold (as for the commit machine): once a record's owner is dead, a
publish it sent can no longer apply later (a SQL catalog's transaction dies with its connection;
a REST catalog answered or timed out before the owner died).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, replace
from enum import Enum
from typing import Any

__all__ = [
    "Config",
    "DeleteFiles",
    "Effect",
    "Event",
    "FilesDeleted",
    "ForgetFailed",
    "ForgetRecord",
    "Inspect",
    "InspectFailed",
    "Phase",
    "RecordForgotten",
    "RecordFound",
    "ReportCleaned",
    "ReportKept",
    "StagedFile",
    "StagedProtocolError",
    "StagingRecord",
    "State",
    "StatementEnded",
    "TableSeen",
    "TablesInspected",
    "Verdict",
    "Wait",
    "WaitElapsed",
    "deletable",
    "initial_state",
    "recover",
    "step",
]


# --- the domain ----------------------------------------------------------------------------------


@dataclass(frozen=True)
class StagedFile:
    path: str
    table: str  # "namespace.name"
    table_uuid: str  # the incarnation the file was written for


@dataclass(frozen=True)
class StagingRecord:
    token: str  # the attempt's commit token (written into its snapshot summaries)
    files: tuple[StagedFile, ...] = ()

    @property
    def tables(self) -> tuple[str, ...]:
        return tuple(sorted({f.table for f in self.files}))

    @property
    def paths(self) -> frozenset[str]:
        return frozenset(f.path for f in self.files)


class Verdict(Enum):
    NONE = "none"  # no publish was ever sent: nothing can reference the files
    COMMITTED = "committed"
    ABORTED = "aborted"  # the commit machine proved nothing landed
    UNKNOWN = "unknown"  # a publish may have landed: only an inspection can tell, later


@dataclass(frozen=True)
class TableSeen:
    """What the world saw of one table of a record."""

    table: str
    exists: bool
    table_uuid: str | None
    has_token: bool = False  # the record's token is in some snapshot summary of the table
    referenced: frozenset[str] = frozenset()  # the record's files some snapshot of the table names


# --- events (past tense) -------------------------------------------------------------------------


@dataclass(frozen=True)
class RecordFound:
    """Start-up: a record in the staging directory. `owner_running`: its process holds its lock."""

    record: StagingRecord
    owner_running: bool


@dataclass(frozen=True)
class StatementEnded:
    """In process: the statement that owns `record` ended with `verdict`; its writer threads are
    done or refused (engine/staging.py). `published`: the files its committed request held."""

    record: StagingRecord
    verdict: Verdict
    published: frozenset[str] = frozenset()


@dataclass(frozen=True)
class TablesInspected:
    seen: tuple[TableSeen, ...]


@dataclass(frozen=True)
class InspectFailed:
    """A table, its metadata or a manifest could not be read: nothing may be decided (fail closed)."""

    message: str


@dataclass(frozen=True)
class WaitElapsed:
    pass


@dataclass(frozen=True)
class FilesDeleted:
    failed: frozenset[str] = frozenset()  # files still there after the attempt


@dataclass(frozen=True)
class RecordForgotten:
    pass


@dataclass(frozen=True)
class ForgetFailed:
    message: str


Event = (
    RecordFound
    | StatementEnded
    | TablesInspected
    | InspectFailed
    | WaitElapsed
    | FilesDeleted
    | RecordForgotten
    | ForgetFailed
)


# --- effects (imperative) ------------------------------------------------------------------------


@dataclass(frozen=True)
class Inspect:
    """Report a TableSeen per table, read fresh from the catalog and every snapshot's manifests."""

    tables: tuple[str, ...]


@dataclass(frozen=True)
class Wait:
    seconds: float


@dataclass(frozen=True)
class DeleteFiles:
    """Delete these staged files (a missing one counts as deleted). Answered by FilesDeleted."""

    files: frozenset[str]


@dataclass(frozen=True)
class ForgetRecord:
    """Remove the staging record. Answered by RecordForgotten or ForgetFailed."""

    token: str


@dataclass(frozen=True)
class ReportCleaned:
    """Terminal: the record is gone; `deleted` went, `kept` stay (referenced, or a table gone)."""

    deleted: frozenset[str]
    kept: frozenset[str]
    landed: bool


@dataclass(frozen=True)
class ReportKept:
    """Terminal: the record stays for a later recovery (owner running, outcome unknown, a failure)."""

    reason: str


Effect = Inspect | Wait | DeleteFiles | ForgetRecord | ReportCleaned | ReportKept


# --- state ---------------------------------------------------------------------------------------


@dataclass(frozen=True)
class Config:
    max_inspect_attempts: int = 5
    backoff_initial_seconds: float = 0.1
    backoff_max_seconds: float = 2.0

    def __post_init__(self) -> None:
        if self.max_inspect_attempts < 1:
            raise ValueError("max_inspect_attempts must be at least 1")
        if not 0 <= self.backoff_initial_seconds <= self.backoff_max_seconds:
            raise ValueError("need 0 <= backoff_initial_seconds <= backoff_max_seconds")

    def backoff_seconds(self, failures: int) -> float:
        return min(self.backoff_max_seconds, self.backoff_initial_seconds * 2 ** (failures - 1))


class Phase(Enum):
    IDLE = "idle"
    INSPECTING = "inspecting"
    WAITING_TO_INSPECT = "waiting_to_inspect"
    DELETING = "deleting"
    FORGETTING = "forgetting"
    CLEANED = "cleaned"
    KEPT = "kept"

    @property
    def terminal(self) -> bool:
        return self in (Phase.CLEANED, Phase.KEPT)


@dataclass(frozen=True)
class State:
    config: Config
    phase: Phase = Phase.IDLE
    record: StagingRecord | None = None
    inspect_failures: int = 0
    deleting: frozenset[str] = frozenset()  # the files of the outstanding (or last) DeleteFiles
    kept: frozenset[str] = frozenset()  # files decided to stay
    landed: bool = False  # the token was seen in a snapshot (or the statement committed)
    reason: str = ""


class StagedProtocolError(Exception):
    """An event the current state does not accept (a driver or world bug)."""


# --- the transition function ---------------------------------------------------------------------


def initial_state(config: Config | None = None) -> State:
    return State(config=config or Config())


def step(state: State, event: Event) -> tuple[State, list[Effect]]:
    """The only producer of a new State. A non-terminal result emits exactly one effect that is
    answered by an event; a terminal one emits one report. Raises StagedProtocolError for an event
    the state does not accept."""
    handler = _HANDLERS.get((state.phase, type(event)))
    if handler is None:
        raise StagedProtocolError(f"{type(event).__name__} is not accepted in {state.phase.value}")
    return handler(state, event)


def recover(record: StagingRecord, owner_running: bool, config: Config | None = None) -> tuple[State, list[Effect]]:
    """State for a record found at start-up: nothing is deleted before an inspection."""
    return step(initial_state(config), RecordFound(record, owner_running))


def deletable(record: StagingRecord, seen: dict[str, TableSeen]) -> tuple[frozenset[str], frozenset[str]]:
    """(files to delete, files to keep) of `record` given what the catalog shows of its tables:
    a file goes only if its table is the incarnation it was written for and no snapshot of it
    references the file."""
    delete, keep = set(), set()
    for f in record.files:
        head = seen[f.table]
        if head.exists and head.table_uuid == f.table_uuid and f.path not in head.referenced:
            delete.add(f.path)
        else:
            keep.add(f.path)
    return frozenset(delete), frozenset(keep)


def _on_found(state: State, event: RecordFound) -> tuple[State, list[Effect]]:
    state = replace(state, record=event.record)
    if event.owner_running:
        return _keep(state, "its process is still running: its files may be mid-commit")
    if not event.record.files:
        return _forget(state, frozenset())
    return _inspect(state)


def _on_ended(state: State, event: StatementEnded) -> tuple[State, list[Effect]]:
    record = event.record
    state = replace(state, record=record)
    if event.verdict is Verdict.UNKNOWN:
        return _keep(state, "the commit's outcome is unknown: the next start inspects it")
    if event.verdict is Verdict.COMMITTED:
        # Published files are the lake's; the rest (rewritten within the transaction) are not.
        state = replace(state, landed=True, kept=record.paths & event.published)
        return _delete_or_forget(state, record.paths - event.published)
    return _delete_or_forget(state, record.paths)


def _on_inspected(state: State, event: TablesInspected) -> tuple[State, list[Effect]]:
    record = _record(state)
    seen = {s.table: s for s in event.seen}
    missing = [t for t in record.tables if t not in seen]
    if missing:
        raise StagedProtocolError(f"inspection did not report tables {missing}")
    delete, keep = deletable(record, seen)
    landed = any(s.has_token for s in event.seen)
    state = replace(state, inspect_failures=0, kept=keep, landed=landed)
    return _delete_or_forget(state, delete)


def _on_inspect_failed(state: State, event: InspectFailed) -> tuple[State, list[Effect]]:
    failures = state.inspect_failures + 1
    if failures < state.config.max_inspect_attempts:
        state = replace(state, phase=Phase.WAITING_TO_INSPECT, inspect_failures=failures)
        return state, [Wait(state.config.backoff_seconds(failures))]
    state = replace(state, inspect_failures=failures)
    return _keep(state, f"could not inspect the catalog after {failures} tries: {event.message}")


def _on_wait_elapsed(state: State, event: WaitElapsed) -> tuple[State, list[Effect]]:
    return _inspect(state)


def _on_deleted(state: State, event: FilesDeleted) -> tuple[State, list[Effect]]:
    failed = event.failed & state.deleting
    if failed:
        return _keep(state, f"could not delete {len(failed)} staged files")
    return _forget(state, state.deleting)


def _on_forgotten(state: State, event: RecordForgotten) -> tuple[State, list[Effect]]:
    cleaned = replace(state, phase=Phase.CLEANED)
    return cleaned, [ReportCleaned(state.deleting, state.kept, state.landed)]


def _on_forget_failed(state: State, event: ForgetFailed) -> tuple[State, list[Effect]]:
    # The files are gone already; the record stays and the next start finds nothing to delete.
    return _keep(state, f"could not remove the staging record: {event.message}")


def _inspect(state: State) -> tuple[State, list[Effect]]:
    return replace(state, phase=Phase.INSPECTING), [Inspect(_record(state).tables)]


def _delete_or_forget(state: State, files: frozenset[str]) -> tuple[State, list[Effect]]:
    if not files:
        return _forget(state, frozenset())
    return replace(state, phase=Phase.DELETING, deleting=files), [DeleteFiles(files)]


def _forget(state: State, deleted: frozenset[str]) -> tuple[State, list[Effect]]:
    state = replace(state, phase=Phase.FORGETTING, deleting=deleted)
    return state, [ForgetRecord(_record(state).token)]


def _keep(state: State, reason: str) -> tuple[State, list[Effect]]:
    return replace(state, phase=Phase.KEPT, reason=reason), [ReportKept(reason)]


def _record(state: State) -> StagingRecord:
    if state.record is None:
        raise StagedProtocolError("no record in this state")
    return state.record


_Handler = Callable[[State, Any], tuple[State, list[Effect]]]

_HANDLERS: dict[tuple[Phase, type], _Handler] = {
    (Phase.IDLE, RecordFound): _on_found,
    (Phase.IDLE, StatementEnded): _on_ended,
    (Phase.INSPECTING, TablesInspected): _on_inspected,
    (Phase.INSPECTING, InspectFailed): _on_inspect_failed,
    (Phase.WAITING_TO_INSPECT, WaitElapsed): _on_wait_elapsed,
    (Phase.DELETING, FilesDeleted): _on_deleted,
    (Phase.FORGETTING, RecordForgotten): _on_forgotten,
    (Phase.FORGETTING, ForgetFailed): _on_forget_failed,
}
