"""Direct, deterministic tests of the commit machine's pure core: every spec transition at least once."""

from __future__ import annotations

import tomllib
from dataclasses import FrozenInstanceError, replace
from pathlib import Path

import pytest

from icegres.machines import commit
from icegres.machines.commit import (
    Abort,
    Acknowledge,
    CommitProtocolError,
    CommitRequest,
    CommitRequested,
    Config,
    DeleteFiles,
    Inspect,
    InspectFailed,
    InvariantViolation,
    Phase,
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
from tests.support.purity import imported_roots

pytestmark = pytest.mark.unit

ROOT = Path(__file__).resolve().parents[2]
SPEC = tomllib.loads((ROOT / "specs" / "commit.toml").read_text())
CONFIG = Config(
    max_attempts=3, max_inspect_attempts=2, backoff_initial_seconds=1.0, backoff_max_seconds=3.0
)

TAKEN: set[tuple[str, str, str]] = set()


def go(state: State, event) -> tuple[State, list]:
    """step(), remembering which transition it took."""
    new_state, effects = step(state, event)
    TAKEN.add((state.phase.value, type(event).__name__, new_state.phase.value))
    return new_state, effects


A = TableWrite("ns.a", "uuid-a", 10, 1, WriteKind.APPEND, added_files=frozenset({"a1"}))
B = TableWrite(
    "ns.b",
    "uuid-b",
    20,
    1,
    WriteKind.OVERWRITE,
    removed_files=frozenset({"b0", "b1"}),
    added_files=frozenset({"b2"}),
)
REQUEST = CommitRequest("tok", (A, B))
FILES = frozenset({"a1", "b2"})


def head(
    write: TableWrite, snapshot: int | None = None, *, token: bool = False, **changes
) -> TableHead:
    base = TableHead(
        write.table,
        True,
        write.table_uuid,
        write.base_snapshot if snapshot is None else snapshot,
        write.base_schema_id,
        live_removed=write.removed_files,
        has_token=token,
    )
    return replace(base, **changes)


def published(request: CommitRequest = REQUEST) -> State:
    state, _ = go(initial_state(CONFIG), CommitRequested(request))
    return state


def inspecting(request: CommitRequest = REQUEST, *, unknown: bool = False) -> State:
    event = PublishOutcomeUnknown("timeout") if unknown else PublishRejected("assert failed")
    state, _ = go(published(request), event)
    return state


# --- idle ----------------------------------------------------------------------------------------


def test_requested_publishes_attempt_1_on_the_bases() -> None:
    state, effects = go(initial_state(CONFIG), CommitRequested(REQUEST))
    assert state.phase is Phase.PUBLISHING and state.attempt == 1
    assert effects == [Publish(1, (("ns.a", 10), ("ns.b", 20)), ())]


def test_recover_inspects_first_and_never_publishes_blindly() -> None:
    state, effects = recover(REQUEST, CONFIG)
    TAKEN.add(("idle", "CommitRecovered", state.phase.value))
    assert state.phase is Phase.INSPECTING and state.maybe_applied
    assert effects == [Inspect(("ns.a", "ns.b"))]
    state, effects = go(state, TablesInspected((head(A, token=True), head(B, token=True))))
    assert state.phase is Phase.COMMITTED and effects == [Acknowledge()]


# --- publishing ----------------------------------------------------------------------------------


def test_succeeded_commits_and_acknowledges() -> None:
    state, effects = go(published(), PublishSucceeded())
    assert state.phase is Phase.COMMITTED and effects == [Acknowledge()]
    outcome = outcome_of(state)
    assert outcome is not None and outcome.committed and outcome.attempts == 1


def test_rejected_and_unknown_inspect_written_then_read_tables() -> None:
    request = CommitRequest(
        "tok", (A,), (ReadAssertion("ns.c", "uuid-c", 5), ReadAssertion("ns.a", "uuid-a", 10))
    )
    for event in (PublishRejected("no"), PublishOutcomeUnknown("timeout")):
        state, effects = go(published(request), event)
        assert state.phase is Phase.INSPECTING
        assert effects == [Inspect(("ns.a", "ns.c"))]
        assert state.maybe_applied == isinstance(event, PublishOutcomeUnknown)


def test_failed_waits_with_backoff_then_republishes_same_bases() -> None:
    state, effects = go(published(), PublishFailed("connection refused"))
    assert state.phase is Phase.WAITING_TO_PUBLISH and effects == [Wait(1.0)]
    state, effects = go(state, WaitElapsed())
    assert state.phase is Phase.PUBLISHING and effects == [Publish(2, (("ns.a", 10), ("ns.b", 20)))]
    state, effects = go(state, PublishFailed("connection refused"))
    assert effects == [Wait(2.0)]


def test_failed_at_the_bound_aborts_58030_and_deletes_files() -> None:
    state = published()
    for _ in range(CONFIG.max_attempts - 1):
        state, _ = go(state, PublishFailed("refused"))
        state, _ = go(state, WaitElapsed())
    state, effects = go(state, PublishFailed("refused"))
    assert state.phase is Phase.ABORTED and state.sqlstate == "58030"
    assert effects[0] == DeleteFiles(FILES)
    assert isinstance(effects[1], Abort) and effects[1].sqlstate == "58030"
    assert "refused" in effects[1].message


def test_backoff_is_capped() -> None:
    assert [CONFIG.backoff_seconds(n) for n in (1, 2, 3, 4)] == [1.0, 2.0, 3.0, 3.0]


# --- inspecting ----------------------------------------------------------------------------------


def test_token_everywhere_means_an_unknown_publish_landed() -> None:
    state, effects = go(
        inspecting(unknown=True),
        TablesInspected((head(A, 11, token=True), head(B, 21, token=True))),
    )
    assert state.phase is Phase.COMMITTED and effects == [Acknowledge()]


def test_token_in_some_tables_is_an_invariant_violation() -> None:
    with pytest.raises(InvariantViolation):
        step(inspecting(unknown=True), TablesInspected((head(A, 11, token=True), head(B))))


def test_token_in_every_surviving_table_commits_even_if_another_was_dropped() -> None:
    dropped = head(
        B, exists=False, table_uuid=None, snapshot=None, schema_id=None, live_removed=frozenset()
    )
    state, effects = go(
        inspecting(unknown=True), TablesInspected((head(A, 11, token=True), dropped))
    )
    assert state.phase is Phase.COMMITTED


def test_all_written_tables_replaced_after_unknown_reports_unknown_without_deleting() -> None:
    state, effects = go(
        inspecting(unknown=True),
        TablesInspected((head(A, table_uuid="uuid-new"), head(B, exists=False, table_uuid=None))),
    )
    assert state.phase is Phase.UNKNOWN and state.sqlstate == "08006"
    assert [type(e) for e in effects] == [ReportOutcomeUnknown]


def test_no_token_and_no_conflict_rebases_on_the_heads() -> None:
    state, effects = go(inspecting(), TablesInspected((head(A, 11), head(B, 25))))
    assert state.phase is Phase.PUBLISHING and not state.maybe_applied
    assert effects == [Publish(2, (("ns.a", 11), ("ns.b", 25)))]


@pytest.mark.parametrize(
    ("heads", "table", "reason"),
    [
        ((head(A, exists=False, table_uuid=None), head(B)), "ns.a", "dropped or replaced"),
        ((head(A, table_uuid="uuid-other"), head(B)), "ns.a", "dropped or replaced"),
        ((head(A), head(B, schema_id=2)), "ns.b", "schema changed"),
        ((head(A), head(B, 21, live_removed=frozenset({"b0"}))), "ns.b", "changed by another"),
    ],
)
def test_conflicts_abort_40001_naming_the_table(heads, table, reason) -> None:
    state, effects = go(inspecting(), TablesInspected(heads))
    assert state.phase is Phase.ABORTED and state.sqlstate == "40001"
    assert effects[0] == DeleteFiles(FILES)
    abort = effects[1]
    assert isinstance(abort, Abort) and abort.sqlstate == "40001"
    assert abort.message.startswith("could not serialize access due to concurrent update")
    assert f'"{table}"' in abort.message and reason in abort.detail


def test_moved_read_table_aborts_serializable() -> None:
    request = CommitRequest("tok", (A,), (ReadAssertion("ns.c", "uuid-c", 5),))
    c = TableHead("ns.c", True, "uuid-c", 6, 1)
    state, effects = go(inspecting(request), TablesInspected((head(A, 11), c)))
    assert state.phase is Phase.ABORTED and '"ns.c"' in state.message
    unmoved = replace(c, snapshot=5)
    state, effects = go(inspecting(request), TablesInspected((head(A, 11), unmoved)))
    assert effects == [Publish(2, (("ns.a", 11),), request.reads)]


def test_a_written_table_read_serializable_never_rebases() -> None:
    """Write skew within one table: two SERIALIZABLE blocks each read both rows and update a
    different one. The rewrites touch different files, so before this rule the second rebased
    and landed; PostgreSQL refuses it (40001)."""
    skew = replace(B, reads_table=True, serializable_read=True)
    request = CommitRequest("tok", (skew,))
    state, effects = go(inspecting(request), TablesInspected((head(skew, 21),)))
    assert state.phase is Phase.ABORTED and state.sqlstate == "40001"
    assert state.detail == "a table this transaction read was changed by another transaction"
    state, effects = go(inspecting(request), TablesInspected((head(skew, 20),)))  # its base: not moved
    assert effects == [Publish(2, (("ns.b", 20),))]
    with pytest.raises(ValueError, match="is a read of the table"):
        replace(B, serializable_read=True)


def test_rebasing_is_bounded() -> None:
    state = inspecting()
    for attempt in range(2, CONFIG.max_attempts + 1):
        state, effects = go(state, TablesInspected((head(A, 10 + attempt), head(B, 20 + attempt))))
        assert effects == [Publish(attempt, (("ns.a", 10 + attempt), ("ns.b", 20 + attempt)))]
        state, _ = go(state, PublishRejected("moved again"))
    state, effects = go(state, TablesInspected((head(A, 99), head(B, 99))))
    assert state.phase is Phase.ABORTED and state.sqlstate == "40001"
    assert "gave up after 3 attempts" in state.message and effects[0] == DeleteFiles(FILES)


BLIND = CommitRequest("blind", (A,))


def test_blind_append_overtaken_rebases_for_free_past_max_attempts() -> None:
    """Issue 25: another commit lands before each publish; a blind append is never refused for it."""
    state = inspecting(BLIND)
    for n in range(1, 3 * CONFIG.max_attempts):
        state, effects = go(state, TablesInspected((head(A, 10 + n),)))
        assert effects == [Publish(n + 1, (("ns.a", 10 + n),))]
        assert state.rebases == n and state.attempt - state.rebases == 1  # nothing charged
        state, _ = go(state, PublishRejected("assert-ref-snapshot-id failed"))
    state, effects = go(state, TablesInspected((head(A, 99),)))
    state, effects = go(state, PublishSucceeded())
    assert state.phase is Phase.COMMITTED and effects == [Acknowledge()]


def test_free_rebases_stop_at_max_rebases() -> None:
    config = replace(CONFIG, max_rebases=2)
    state, _ = go(initial_state(config), CommitRequested(BLIND))
    for n in range(1, 3):
        state, _ = go(state, PublishRejected("moved"))
        state, effects = go(state, TablesInspected((head(A, 10 + n),)))
        assert isinstance(effects[0], Publish)
    state, _ = go(state, PublishRejected("moved"))
    state, effects = go(state, TablesInspected((head(A, 50),)))
    assert state.phase is Phase.ABORTED and state.sqlstate == "40001"
    assert "gave up after 3 attempts" in state.message and "rebased 2 times" in state.detail
    assert effects[0] == DeleteFiles(frozenset({"a1"}))


def test_blind_append_rejected_on_unmoved_heads_is_charged_then_58030() -> None:
    """A catalog refusing for another reason than a moved head: bounded by max_attempts."""
    state = published(BLIND)
    for attempt in range(1, CONFIG.max_attempts):
        state, _ = go(state, PublishRejected("refused for no reason we can see"))
        state, effects = go(state, TablesInspected((head(A),)))
        assert effects == [Publish(attempt + 1, (("ns.a", 10),))] and state.rebases == 0
    state, _ = go(state, PublishRejected("refused for no reason we can see"))
    state, effects = go(state, TablesInspected((head(A),)))
    assert state.phase is Phase.ABORTED and state.sqlstate == "58030"
    assert "refused for no reason we can see" in state.message


def test_republish_after_an_unknown_outcome_is_charged_even_if_heads_moved() -> None:
    state = inspecting(BLIND, unknown=True)
    state, effects = go(state, TablesInspected((head(A, 11),)))
    assert effects == [Publish(2, (("ns.a", 11),))] and state.rebases == 0


def test_append_that_read_its_table_is_charged_and_sees_key_conflicts() -> None:
    keyed = replace(A, reads_table=True)
    request = CommitRequest("keyed", (keyed,))
    assert not request.blind and BLIND.blind and not REQUEST.blind
    state, effects = go(inspecting(request), TablesInspected((head(keyed, 11),)))
    assert effects == [Publish(2, (("ns.a", 11),))] and state.rebases == 0
    state, _ = go(state, PublishRejected("a concurrent commit inserted key (1,)"))
    state, effects = go(state, TablesInspected((head(keyed, 12, key_conflict=True),)))
    assert state.phase is Phase.ABORTED and state.sqlstate == "40001"
    assert '"ns.a"' in state.message and "inserted a key" in state.detail


def test_inspect_failed_waits_then_inspects_again() -> None:
    state, effects = go(inspecting(unknown=True), InspectFailed("503"))
    assert state.phase is Phase.WAITING_TO_INSPECT and effects == [Wait(1.0)]
    state, effects = go(state, WaitElapsed())
    assert state.phase is Phase.INSPECTING and effects == [Inspect(("ns.a", "ns.b"))]


def test_inspections_exhausted_after_unknown_report_08006_and_keep_files() -> None:
    state, _ = go(inspecting(unknown=True), InspectFailed("503"))
    state, _ = go(state, WaitElapsed())
    state, effects = go(state, InspectFailed("503"))
    assert state.phase is Phase.UNKNOWN
    assert effects == [ReportOutcomeUnknown("08006", "commit outcome unknown", state.detail)]
    outcome = outcome_of(state)
    assert outcome is not None and not outcome.committed and outcome.sqlstate == "08006"


def test_inspections_exhausted_after_rejection_abort_58030() -> None:
    state, _ = go(inspecting(), InspectFailed("503"))
    state, _ = go(state, WaitElapsed())
    state, effects = go(state, InspectFailed("503"))
    assert state.phase is Phase.ABORTED and state.sqlstate == "58030"
    assert effects[0] == DeleteFiles(FILES)


def test_a_successful_inspection_resets_the_inspect_budget() -> None:
    state, _ = go(inspecting(unknown=True), InspectFailed("503"))
    state, _ = go(state, WaitElapsed())
    state, _ = go(state, TablesInspected((head(A), head(B))))  # not landed: rebase
    state, _ = go(state, PublishOutcomeUnknown("timeout"))
    state, effects = go(state, InspectFailed("503"))
    assert state.phase is Phase.WAITING_TO_INSPECT


# --- protocol ------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    "event",
    [
        PublishSucceeded(),
        WaitElapsed(),
        TablesInspected(()),
        InspectFailed("x"),
        PublishFailed("x"),
    ],
)
def test_unexpected_events_are_protocol_errors(event) -> None:
    with pytest.raises(CommitProtocolError):
        step(initial_state(CONFIG), event)
    committed, _ = step(published(), PublishSucceeded())
    with pytest.raises(CommitProtocolError):
        step(committed, event)


def test_inspection_missing_a_table_is_a_protocol_error() -> None:
    with pytest.raises(CommitProtocolError):
        step(inspecting(), TablesInspected((head(A),)))


def test_states_and_requests_are_frozen_and_validated() -> None:
    with pytest.raises(FrozenInstanceError):
        initial_state(CONFIG).phase = Phase.COMMITTED  # type: ignore[misc]
    with pytest.raises(ValueError):
        CommitRequest("tok", ())
    with pytest.raises(ValueError):
        CommitRequest("tok", (A, A))
    with pytest.raises(ValueError):
        TableWrite("t", "u", None, 0, WriteKind.APPEND, removed_files=frozenset({"x"}))
    with pytest.raises(ValueError):
        Config(max_attempts=0)
    with pytest.raises(ValueError):
        Config(max_rebases=-1)


def test_the_core_imports_no_io() -> None:
    roots = imported_roots(commit)
    forbidden = {
        "trio",
        "os",
        "socket",
        "time",
        "pyiceberg",
        "datafusion",
        "asyncio",
        "threading",
        "random",
        "subprocess",
        "pathlib",
        "io",
        "logging",
    }
    assert not roots & forbidden, roots & forbidden
    assert roots <= {"__future__", "collections", "dataclasses", "enum", "typing"}, roots


def test_every_spec_transition_has_a_unit_test() -> None:
    """Keep last: the tests above took every (from, event, to) the spec lists, and nothing else."""
    listed = {(t["from"], t["event"], t["to"]) for t in SPEC["transition"]}
    assert TAKEN - listed == set()
    assert listed - TAKEN == set()
