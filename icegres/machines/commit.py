"""The commit machine: atomic, conflict-checked publication of one write to the lake.

Every write — an autocommit INSERT/UPDATE/DELETE or a multi-table COMMIT — is handed here as a
`CommitRequest` whose data files are already staged. The core decides; a driver
(`icegres.machines.drivers.commit`) performs the effects against a catalog world and feeds the
results back as events. `specs/commit.toml` is the independent statement of this machine.

Why it is shaped this way:

- One Publish effect carries every touched table, so the world must publish them in ONE atomic
  catalog operation (a SQL-catalog transaction or REST `transactions/commit`) with requirements
  assert-table-uuid, assert-current-schema-id and assert-ref-snapshot-id(main) = base per table
  (and the same, without updates, for every SERIALIZABLE read). Atomicity across tables is
  therefore the catalog's; the core's job is to never publish twice what may already have landed.
- The request's token is written into every snapshot summary of the commit. After a rejection or an
  unknown outcome the core only trusts what an inspection of the catalog shows: token in every
  written table = committed; in none = not applied, so it may classify and rebase; in some = the
  catalog broke atomicity, which is an invariant violation, never something to paper over.
- Staged files are deleted only when the commit is known not to have landed. An unknown outcome
  keeps them: a landed commit may reference them.
- A blind append (it only adds files and read nothing of the table) fits on any head of the same
  table and schema: same data files, a fresh manifest list. So when a publish is rejected because
  another commit moved the head first, the core rebases it onto the new head without charging
  an attempt: another commit landed, so the lake as a whole made progress, and refusing the
  append for it would make appends fail under nothing but concurrency. What still ends the
  loop: rejections, failures and unknown outcomes that are not such progress are charged against
  `max_attempts`, and free rebases stop at `max_rebases`, a ceiling for a commit that keeps
  losing to an endless stream of others. Appends that read the table (a primary-key check, ON
  CONFLICT, a source that selects from it) keep the charged loop, and a key another commit
  inserted since their base is a conflict (`TableHead.key_conflict`).
- Time enters only as `WaitElapsed`; the core asks for a pause with `Wait(seconds)`.

Assumption the world must uphold: when it reports an outcome for a publish, that publish can no
longer apply later (it has been answered, rolled back, or its connection is closed for good).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, replace
from enum import Enum
from typing import Any

__all__ = [
    "Abort",
    "Acknowledge",
    "CommitOutcome",
    "CommitProtocolError",
    "CommitRecovered",
    "CommitRequest",
    "CommitRequested",
    "Config",
    "DeleteFiles",
    "Effect",
    "Event",
    "Inspect",
    "InspectFailed",
    "InvariantViolation",
    "Phase",
    "Publish",
    "PublishFailed",
    "PublishOutcomeUnknown",
    "PublishRejected",
    "PublishSucceeded",
    "ReadAssertion",
    "ReportOutcomeUnknown",
    "State",
    "TableHead",
    "TableWrite",
    "TablesInspected",
    "Wait",
    "WaitElapsed",
    "WriteKind",
    "initial_state",
    "outcome_of",
    "recover",
    "step",
]

SQLSTATE_SERIALIZATION_FAILURE = "40001"
SQLSTATE_IO_ERROR = "58030"
SQLSTATE_CONNECTION_FAILURE = "08006"

SERIALIZATION_MESSAGE = "could not serialize access due to concurrent update"
UNKNOWN_MESSAGE = "commit outcome unknown"


# --- the domain ----------------------------------------------------------------------------------


class WriteKind(Enum):
    APPEND = "append"  # blind append: only adds files, so it rebases onto any head
    OVERWRITE = "overwrite"  # copy-on-write UPDATE/DELETE: removes files, may add files


@dataclass(frozen=True)
class TableWrite:
    table: str  # "namespace.name"
    table_uuid: str  # pinned when the transaction first touched the table
    base_snapshot: int | None  # the snapshot the transaction read (None: the table was empty)
    base_schema_id: int
    kind: WriteKind
    removed_files: frozenset[str] = frozenset()  # OVERWRITE only
    added_files: frozenset[str] = frozenset()  # already in storage when the request is made
    # The write read the table's rows: a primary-key check, ON CONFLICT, a source selecting from
    # the table, a SERIALIZABLE read. A rebase changes what it read, so its rebases are charged
    # against max_attempts and the world reports keys others inserted since its base.
    reads_table: bool = False
    # A SERIALIZABLE transaction read this table: it lands only on the snapshot it read. Any other
    # commit to the table since may have changed what it read (write skew: two blocks that each
    # read both rows and each update a different one), so a moved head is 40001, never a rebase.
    serializable_read: bool = False

    def __post_init__(self) -> None:
        if self.serializable_read and not self.reads_table:
            raise ValueError(f"a SERIALIZABLE read of {self.table} is a read of the table")
        if self.kind is WriteKind.APPEND and self.removed_files:
            raise ValueError(f"an APPEND to {self.table} cannot remove files")

    @property
    def blind(self) -> bool:
        """Only adds files and read nothing of the table: any head of its table and schema takes it."""
        return self.kind is WriteKind.APPEND and not self.reads_table


@dataclass(frozen=True)
class ReadAssertion:
    """SERIALIZABLE: the read table must still be at `snapshot` when the commit lands."""

    table: str
    table_uuid: str
    snapshot: int | None


@dataclass(frozen=True)
class CommitRequest:
    token: str  # unique per commit; the world writes it into every snapshot summary it publishes
    writes: tuple[TableWrite, ...]
    reads: tuple[ReadAssertion, ...] = ()

    def __post_init__(self) -> None:
        if not self.writes:
            raise ValueError("a commit request must write at least one table")
        names = [w.table for w in self.writes]
        if len(set(names)) != len(names):
            raise ValueError(f"a commit request writes each table once: {names}")

    @property
    def written_tables(self) -> tuple[str, ...]:
        return tuple(w.table for w in self.writes)

    @property
    def inspected_tables(self) -> tuple[str, ...]:
        """Written tables, then read-only tables, each once, in request order."""
        seen = dict.fromkeys(self.written_tables)
        for r in self.reads:
            seen.setdefault(r.table)
        return tuple(seen)

    @property
    def added_files(self) -> frozenset[str]:
        return frozenset().union(*(w.added_files for w in self.writes))

    @property
    def blind(self) -> bool:
        """Every write is a blind append: a head another commit moved is no reason to refuse it."""
        return all(w.blind for w in self.writes)


@dataclass(frozen=True)
class TableHead:
    """What the world observed when inspecting one table."""

    table: str
    exists: bool
    table_uuid: str | None
    snapshot: int | None
    schema_id: int | None
    live_removed: frozenset[str] = frozenset()  # which of the write's removed_files are still live
    has_token: bool = False  # the request's token is in some snapshot summary of the table
    # Only for a write that reads the table: rows another commit added since the write's base
    # repeat a primary key the write inserts.
    key_conflict: bool = False


# --- events (past tense) -------------------------------------------------------------------------


@dataclass(frozen=True)
class CommitRequested:
    request: CommitRequest


@dataclass(frozen=True)
class CommitRecovered:
    """A process that crashed after staging `request` restarted; it may or may not have published."""

    request: CommitRequest


@dataclass(frozen=True)
class PublishSucceeded:
    pass


@dataclass(frozen=True)
class PublishRejected:
    """The catalog refused: a requirement failed. Definitely not applied."""

    message: str = ""


@dataclass(frozen=True)
class PublishFailed:
    """Definitely not applied (refused before sending, a 4xx other than a conflict)."""

    message: str


@dataclass(frozen=True)
class PublishOutcomeUnknown:
    """Timeout, dropped connection or 5xx after sending: it may or may not have applied."""

    message: str


@dataclass(frozen=True)
class TablesInspected:
    heads: tuple[TableHead, ...]


@dataclass(frozen=True)
class InspectFailed:
    message: str


@dataclass(frozen=True)
class WaitElapsed:
    pass


Event = (
    CommitRequested
    | CommitRecovered
    | PublishSucceeded
    | PublishRejected
    | PublishFailed
    | PublishOutcomeUnknown
    | TablesInspected
    | InspectFailed
    | WaitElapsed
)


# --- effects (imperative) ------------------------------------------------------------------------


@dataclass(frozen=True)
class Publish:
    """Build each written table's snapshot on `bases[table]` and publish all in one atomic operation.

    Requirements per written table: assert-table-uuid, assert-current-schema-id = base schema id,
    assert-ref-snapshot-id(main) = its base here; per read-only `guards` entry: assert-table-uuid and
    assert-ref-snapshot-id(main) = its snapshot. Answered by a Publish* event.
    """

    attempt: int
    bases: tuple[tuple[str, int | None], ...]
    guards: tuple[ReadAssertion, ...] = ()


@dataclass(frozen=True)
class Inspect:
    """Report a TableHead per table (has_token / live_removed relative to the request)."""

    tables: tuple[str, ...]


@dataclass(frozen=True)
class Wait:
    seconds: float


@dataclass(frozen=True)
class Acknowledge:
    """Tell the client the commit is durable in the catalog."""


@dataclass(frozen=True)
class Abort:
    """Tell the client the commit did not happen and never will."""

    sqlstate: str
    message: str
    detail: str = ""


@dataclass(frozen=True)
class ReportOutcomeUnknown:
    """Tell the client we could not find out whether the commit landed. Nothing is cleaned up."""

    sqlstate: str
    message: str
    detail: str = ""


@dataclass(frozen=True)
class DeleteFiles:
    """Delete staged data files that no catalog metadata references. Best effort."""

    files: frozenset[str]


Effect = Publish | Inspect | Wait | Acknowledge | Abort | ReportOutcomeUnknown | DeleteFiles


# --- state ---------------------------------------------------------------------------------------


@dataclass(frozen=True)
class Config:
    # Charged publish attempts: the first, retries after failures and unknown outcomes, rebases
    # of writes that read their table, and publishes after a rejection that moved no head.
    max_attempts: int = 5
    # Rebases of a blind append onto a head another commit moved since the rejected publish:
    # not charged, each follows another commit landing. The ceiling only ends a commit that keeps
    # losing to a stream of others (0: never rebase for free, e.g. a writer fenced at the lake).
    max_rebases: int = 1000
    # Inspections in a row before an unresolved outcome is reported as unknown.
    max_inspect_attempts: int = 5
    backoff_initial_seconds: float = 0.05
    backoff_max_seconds: float = 2.0

    def __post_init__(self) -> None:
        if self.max_attempts < 1 or self.max_inspect_attempts < 1:
            raise ValueError("attempt bounds must be at least 1")
        if self.max_rebases < 0:
            raise ValueError("max_rebases must be at least 0")
        if not 0 <= self.backoff_initial_seconds <= self.backoff_max_seconds:
            raise ValueError("need 0 <= backoff_initial_seconds <= backoff_max_seconds")

    def backoff_seconds(self, failures: int) -> float:
        """Pause after the `failures`-th failure in a row (1-based): doubling, capped."""
        return min(self.backoff_max_seconds, self.backoff_initial_seconds * 2 ** (failures - 1))


class Phase(Enum):
    IDLE = "idle"
    PUBLISHING = "publishing"  # a Publish is outstanding
    WAITING_TO_PUBLISH = "waiting_to_publish"  # backing off after a definite publish failure
    INSPECTING = "inspecting"  # an Inspect is outstanding
    WAITING_TO_INSPECT = "waiting_to_inspect"  # backing off after a failed inspection
    COMMITTED = "committed"
    ABORTED = "aborted"
    UNKNOWN = "unknown"

    @property
    def terminal(self) -> bool:
        return self in _TERMINAL


_TERMINAL = frozenset({Phase.COMMITTED, Phase.ABORTED, Phase.UNKNOWN})


@dataclass(frozen=True)
class State:
    config: Config
    phase: Phase = Phase.IDLE
    request: CommitRequest | None = None
    attempt: int = 0  # number of the latest Publish (0: none yet)
    rebases: int = 0  # of those, free rebases of a blind append (attempt - rebases are charged)
    bases: tuple[tuple[str, int | None], ...] = ()  # bases of the latest Publish
    last_failure: str = ""  # why the latest publish did not land, for the verdict's message
    publish_failures: int = 0  # definite publish failures in a row
    inspect_failures: int = 0  # failed inspections in a row
    # True while some publish may have applied without us having seen it in the catalog. While it
    # holds, the staged files must not be deleted and nothing may be published again.
    maybe_applied: bool = False
    sqlstate: str | None = None
    message: str | None = None
    detail: str = ""


@dataclass(frozen=True)
class CommitOutcome:
    """The terminal verdict a caller reports to the client."""

    phase: Phase  # COMMITTED, ABORTED or UNKNOWN
    attempts: int
    sqlstate: str | None = None
    message: str | None = None
    detail: str = ""

    @property
    def committed(self) -> bool:
        return self.phase is Phase.COMMITTED


class CommitProtocolError(Exception):
    """An event the current state does not accept (a driver or world bug)."""


class InvariantViolation(Exception):
    """The catalog shows something the machine's invariants exclude (e.g. half a commit)."""


# --- the transition function ---------------------------------------------------------------------


def initial_state(config: Config) -> State:
    return State(config=config)


def step(state: State, event: Event) -> tuple[State, list[Effect]]:
    """The only producer of a new State: apply `event`, return the next state and its effects.

    Effects are in the order they must be performed. A non-terminal result emits exactly one effect
    that is answered by an event (Publish, Inspect or Wait); a terminal result emits only effects
    that need no answer. Raises CommitProtocolError for an event the state does not accept, and
    InvariantViolation when an inspection shows a partially applied commit.
    """
    handler = _HANDLERS.get((state.phase, type(event)))
    if handler is None:
        raise CommitProtocolError(f"{type(event).__name__} is not accepted in {state.phase.value}")
    return handler(state, event)


def recover(request: CommitRequest, config: Config) -> tuple[State, list[Effect]]:
    """State for a request whose process crashed after staging: resolve by inspecting the token.

    Never re-publishes blindly: the first effect is an Inspect, and a publish happens only after
    the inspection has shown that nothing of this request landed.
    """
    return step(initial_state(config), CommitRecovered(request))


def outcome_of(state: State) -> CommitOutcome | None:
    """The verdict of a terminal state; None while the machine is still working."""
    if not state.phase.terminal:
        return None
    return CommitOutcome(
        phase=state.phase,
        attempts=state.attempt,
        sqlstate=state.sqlstate,
        message=state.message,
        detail=state.detail,
    )


def _on_requested(state: State, event: CommitRequested) -> tuple[State, list[Effect]]:
    request = event.request
    bases = tuple((w.table, w.base_snapshot) for w in request.writes)
    return _publish(replace(state, request=request), bases)


def _on_recovered(state: State, event: CommitRecovered) -> tuple[State, list[Effect]]:
    # The crashed process may have sent attempt 1 (or more); count one so bounds stay honest.
    return _inspect(replace(state, request=event.request, attempt=1, maybe_applied=True))


def _on_succeeded(state: State, event: PublishSucceeded) -> tuple[State, list[Effect]]:
    return _commit(state)


def _on_rejected(state: State, event: PublishRejected) -> tuple[State, list[Effect]]:
    return _inspect(replace(state, publish_failures=0, last_failure=event.message))


def _on_outcome_unknown(state: State, event: PublishOutcomeUnknown) -> tuple[State, list[Effect]]:
    return _inspect(
        replace(state, publish_failures=0, maybe_applied=True, last_failure=event.message)
    )


def _on_publish_failed(state: State, event: PublishFailed) -> tuple[State, list[Effect]]:
    failures = state.publish_failures + 1
    state = replace(state, last_failure=event.message)
    if _charged(state) >= state.config.max_attempts:
        return _abort(
            state,
            SQLSTATE_IO_ERROR,
            f"could not publish commit after {state.attempt} attempts: {event.message}",
        )
    seconds = state.config.backoff_seconds(failures)
    next_state = replace(state, phase=Phase.WAITING_TO_PUBLISH, publish_failures=failures)
    return next_state, [Wait(seconds)]


def _on_publish_wait_elapsed(state: State, event: WaitElapsed) -> tuple[State, list[Effect]]:
    # The failed publish definitely did not apply, so the same bases are still the right ones; if
    # the heads moved meanwhile, the catalog rejects and we rebase after inspecting.
    return _publish(state, state.bases)


def _on_inspected(state: State, event: TablesInspected) -> tuple[State, list[Effect]]:
    request = _request(state)
    heads = {h.table: h for h in event.heads}
    missing = [t for t in request.inspected_tables if t not in heads]
    if missing:
        raise CommitProtocolError(f"inspection did not report tables {missing}")
    state = replace(state, inspect_failures=0)
    # A dropped or replaced table cannot show our token any more, so only the incarnations we
    # wrote to are evidence. The catalog's atomicity makes one landed table proof of all.
    observable = [
        w.table for w in request.writes if _same_incarnation(heads[w.table], w.table_uuid)
    ]
    landed = [t for t in observable if heads[t].has_token]
    if landed and len(landed) == len(observable):
        # An earlier publish did land (its outcome was unknown or we crashed); never publish again.
        return _commit(state)
    if landed:
        raise InvariantViolation(
            f"commit {request.token} is in {landed} but not in all of {observable}"
        )
    if state.maybe_applied and not observable:
        # Every table we wrote was dropped since: whether our publish landed first is unknowable.
        detail = "every table the commit wrote was dropped or replaced before it could be checked"
        return _report_unknown(state, detail)
    # Nothing of ours is in the catalog, and no earlier publish can still apply (world contract).
    rejected = not state.maybe_applied  # the publish inspected for was answered by a rejection
    state = replace(state, maybe_applied=False)
    conflict = _find_conflict(request, heads)
    if conflict is not None:
        table, reason = conflict
        return _abort(
            state,
            SQLSTATE_SERIALIZATION_FAILURE,
            f'{SERIALIZATION_MESSAGE} on table "{table}"',
            reason,
        )
    bases = tuple((w.table, heads[w.table].snapshot) for w in request.writes)
    tables = ", ".join(request.written_tables)
    # Progress: another commit moved a head this publish was built on. A blind append rebases
    # onto it without charge; a rebase of anything else, a retry after an unknown outcome and a
    # rejection on heads that did not move are charged below.
    moved = rejected and bases != state.bases
    if request.blind and moved:
        if state.rebases < state.config.max_rebases:
            return _publish(replace(state, rebases=state.rebases + 1), bases)
        return _abort(
            state,
            SQLSTATE_SERIALIZATION_FAILURE,
            f"{SERIALIZATION_MESSAGE}: gave up after {state.attempt} attempts",
            f"other commits kept landing first on {tables}: rebased {state.rebases} times",
        )
    if _charged(state) >= state.config.max_attempts:
        if request.blind:
            # No other commit got in the way: the catalog kept refusing or timing out.
            return _abort(
                state,
                SQLSTATE_IO_ERROR,
                f"could not publish commit after {state.attempt} attempts: {state.last_failure}",
            )
        return _abort(
            state,
            SQLSTATE_SERIALIZATION_FAILURE,
            f"{SERIALIZATION_MESSAGE}: gave up after {state.attempt} attempts",
            f"tables kept changing under the commit: {tables}",
        )
    return _publish(state, bases)


def _on_inspect_failed(state: State, event: InspectFailed) -> tuple[State, list[Effect]]:
    failures = state.inspect_failures + 1
    if failures < state.config.max_inspect_attempts:
        seconds = state.config.backoff_seconds(failures)
        next_state = replace(state, phase=Phase.WAITING_TO_INSPECT, inspect_failures=failures)
        return next_state, [Wait(seconds)]
    state = replace(state, inspect_failures=failures)
    if state.maybe_applied:
        return _report_unknown(
            state, f"could not inspect the catalog after {failures} tries: {event.message}"
        )
    # Only rejections since the last inspection: we know nothing landed, we just cannot rebase.
    return _abort(
        state,
        SQLSTATE_IO_ERROR,
        f"could not inspect the catalog after a rejected commit: {event.message}",
    )


def _on_inspect_wait_elapsed(state: State, event: WaitElapsed) -> tuple[State, list[Effect]]:
    return _inspect(state)


def _charged(state: State) -> int:
    """Publish attempts that count against max_attempts: all but the free rebases."""
    return state.attempt - state.rebases


def _publish(state: State, bases: tuple[tuple[str, int | None], ...]) -> tuple[State, list[Effect]]:
    attempt = state.attempt + 1
    guards = _request(state).reads
    next_state = replace(state, phase=Phase.PUBLISHING, attempt=attempt, bases=bases)
    return next_state, [Publish(attempt, bases, guards)]


def _inspect(state: State) -> tuple[State, list[Effect]]:
    next_state = replace(state, phase=Phase.INSPECTING)
    return next_state, [Inspect(_request(state).inspected_tables)]


def _commit(state: State) -> tuple[State, list[Effect]]:
    committed = replace(
        state, phase=Phase.COMMITTED, maybe_applied=False, sqlstate=None, message=None, detail=""
    )
    return committed, [Acknowledge()]


def _report_unknown(state: State, detail: str) -> tuple[State, list[Effect]]:
    # No DeleteFiles: a landed commit may reference the staged files.
    unknown = replace(
        state,
        phase=Phase.UNKNOWN,
        sqlstate=SQLSTATE_CONNECTION_FAILURE,
        message=UNKNOWN_MESSAGE,
        detail=detail,
    )
    return unknown, [ReportOutcomeUnknown(SQLSTATE_CONNECTION_FAILURE, UNKNOWN_MESSAGE, detail)]


def _same_incarnation(head: TableHead, table_uuid: str) -> bool:
    return head.exists and head.table_uuid == table_uuid


def _abort(
    state: State, sqlstate: str, message: str, detail: str = ""
) -> tuple[State, list[Effect]]:
    if state.maybe_applied:
        raise InvariantViolation("refusing to abort a commit that may have landed")
    aborted = replace(state, phase=Phase.ABORTED, sqlstate=sqlstate, message=message, detail=detail)
    # Delete before telling the client, so that an aborted commit leaves no staged files behind.
    return aborted, [DeleteFiles(_request(state).added_files), Abort(sqlstate, message, detail)]


def _find_conflict(request: CommitRequest, heads: dict[str, TableHead]) -> tuple[str, str] | None:
    """The first table (request order) whose head forbids a rebase, with the reason."""
    for write in request.writes:
        head = heads[write.table]
        if not _same_incarnation(head, write.table_uuid):
            return write.table, "the table was dropped or replaced"
        if head.schema_id != write.base_schema_id:
            return write.table, "the table's schema changed"
        if write.kind is WriteKind.OVERWRITE and head.live_removed != write.removed_files:
            # Another writer already rewrote or deleted rows this write replaces: no lost update.
            return write.table, "rows this statement changed were changed by another transaction"
        if write.reads_table and head.key_conflict:
            return write.table, "another transaction inserted a key this statement inserts"
        if write.serializable_read and head.snapshot != write.base_snapshot:
            return write.table, "a table this transaction read was changed by another transaction"
    for read in request.reads:
        head = heads[read.table]
        if not _same_incarnation(head, read.table_uuid) or head.snapshot != read.snapshot:
            return read.table, "a table this transaction read was changed by another transaction"
    return None


def _request(state: State) -> CommitRequest:
    if state.request is None:
        raise CommitProtocolError("no request in this state")
    return state.request


_Handler = Callable[[State, Any], tuple[State, list[Effect]]]

_HANDLERS: dict[tuple[Phase, type], _Handler] = {
    (Phase.IDLE, CommitRequested): _on_requested,
    (Phase.IDLE, CommitRecovered): _on_recovered,
    (Phase.PUBLISHING, PublishSucceeded): _on_succeeded,
    (Phase.PUBLISHING, PublishRejected): _on_rejected,
    (Phase.PUBLISHING, PublishOutcomeUnknown): _on_outcome_unknown,
    (Phase.PUBLISHING, PublishFailed): _on_publish_failed,
    (Phase.WAITING_TO_PUBLISH, WaitElapsed): _on_publish_wait_elapsed,
    (Phase.INSPECTING, TablesInspected): _on_inspected,
    (Phase.INSPECTING, InspectFailed): _on_inspect_failed,
    (Phase.WAITING_TO_INSPECT, WaitElapsed): _on_inspect_wait_elapsed,
}
