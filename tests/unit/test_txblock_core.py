"""The transaction block core on its own: PostgreSQL's exact texts, refusals, purity.

The model test (tests/model/test_txblock.py) drives it through whole sessions against a reference;
these pin what a reader checks first."""

from __future__ import annotations

from dataclasses import FrozenInstanceError

import pytest

from icegres.machines import txblock
from icegres.machines.txblock import (
    BeginRequested,
    CommitRequested,
    Config,
    DiscardWrites,
    ImplicitBlockEnded,
    MarkSavepoint,
    Notice,
    Phase,
    PublishWrites,
    Refuse,
    RestoreSavepoint,
    RestoreSettings,
    RolledBackTo,
    SavepointDeclared,
    SavepointReleased,
    SettingChanged,
    StartTransaction,
    State,
    StatementFailed,
    StatementStarted,
    TxBlockProtocolError,
    WriteStarted,
    initial_state,
    recover,
    step,
    transaction_status,
)
from tests.support.purity import imported_roots


def run(state: State, *events: object) -> tuple[State, list[object]]:
    effects: list[object] = []
    for event in events:
        state, out = step(state, event)  # type: ignore[arg-type]
        effects += out
    return state, effects


def test_begin_starts_a_transaction_and_a_second_begin_warns() -> None:
    state, effects = step(initial_state(), BeginRequested("serializable", read_only=False))
    assert effects == [StartTransaction("serializable")] and transaction_status(state) == "T"
    again, effects = step(state, BeginRequested())
    assert again == state
    assert effects == [Notice("25001", "there is already a transaction in progress")]


def test_commit_and_rollback_outside_a_block_warn() -> None:
    for event in (CommitRequested(), txblock.RollbackRequested()):
        state, effects = step(initial_state(), event)
        assert state.idle and effects[0] == Notice("25P01", "there is no transaction in progress")


def test_a_failed_block_refuses_all_but_its_exits_and_commit_rolls_back() -> None:
    failed, _ = run(initial_state(), BeginRequested(), StatementFailed())
    assert transaction_status(failed) == "E"
    aborted = "current transaction is aborted, commands ignored until end of transaction block"
    assert step(failed, StatementStarted()) == (failed, [Refuse("25P02", aborted)])
    assert step(failed, StatementStarted(exits_block=True)) == (failed, [])
    assert step(failed, SavepointDeclared("a"))[1] == [Refuse("25P02", aborted)]
    done, effects = step(failed, CommitRequested())
    assert done.idle and [type(e).__name__ for e in effects] == [
        "RestoreSettings",
        "CloseBlockPortals",
        "DiscardWrites",
        "ReportRolledBack",
    ]


def test_savepoints_outside_a_block_are_errors_with_postgresql_texts() -> None:
    idle = initial_state()
    assert step(idle, SavepointDeclared("a"))[1] == [
        Refuse("25P01", "SAVEPOINT can only be used in transaction blocks")
    ]
    assert step(idle, SavepointReleased("a"))[1] == [
        Refuse("25P01", "RELEASE SAVEPOINT can only be used in transaction blocks")
    ]
    assert step(idle, RolledBackTo("a"))[1] == [
        Refuse("25P01", "ROLLBACK TO SAVEPOINT can only be used in transaction blocks")
    ]


def test_the_newest_savepoint_of_a_name_wins_and_rollback_to_revives_a_failed_block() -> None:
    state, effects = run(
        initial_state(),
        BeginRequested(),
        SavepointDeclared("a"),
        SavepointDeclared("b"),
        SavepointDeclared("a"),
    )
    assert state.savepoints == ("a", "b", "a") and effects[-1] == MarkSavepoint("a")
    failed, _ = step(state, StatementFailed())
    revived, effects = step(failed, RolledBackTo("a"))
    assert revived.phase is Phase.IN_BLOCK and effects == [RestoreSavepoint(2)]
    released, _ = step(revived, SavepointReleased("b"))
    assert released.savepoints == ("a",)
    assert step(released, SavepointReleased("b"))[1] == [
        Refuse("3B001", 'savepoint "b" does not exist')
    ]


def test_a_savepoint_beyond_the_bound_is_refused() -> None:
    state, _ = run(
        initial_state(Config(savepoints_max=1)), BeginRequested(), SavepointDeclared("a")
    )
    again, effects = step(state, SavepointDeclared("b"))
    assert again == state and effects[0].sqlstate == "53400"  # type: ignore[attr-defined]


def test_set_local_outside_a_block_warns_and_lapses() -> None:
    change = SettingChanged(local=True, changes=(("timezone", "UTC", "Asia/Tokyo"),))
    state, effects = step(initial_state(), change)
    assert state.idle and effects == [
        Notice("25P01", "SET LOCAL can only be used in transaction blocks"),
        RestoreSettings((("timezone", "UTC"),)),
    ]


def test_commit_keeps_the_last_plain_set_and_rollback_restores_all() -> None:
    state, _ = run(
        initial_state(),
        BeginRequested(),
        SettingChanged(local=True, changes=(("timezone", "UTC", "Asia/Tokyo"),)),
        SettingChanged(local=False, changes=(("timezone", "Asia/Tokyo", "Asia/Tokyo"),)),
        SettingChanged(local=True, changes=(("search_path", "public", "dd"),)),
        SettingChanged(local=False, changes=(("application_name", "", "a"),)),
        SettingChanged(local=True, changes=(("application_name", "a", "b"),)),
    )
    committed = dict(step(state, CommitRequested())[1][0].values)  # type: ignore[attr-defined]
    assert committed == {"timezone": "Asia/Tokyo", "search_path": "public", "application_name": "a"}
    rolled_back = dict(step(state, txblock.RollbackRequested())[1][0].values)  # type: ignore[attr-defined]
    assert rolled_back == {"timezone": "UTC", "search_path": "public", "application_name": ""}


def test_read_only_refuses_writes_in_and_outside_blocks() -> None:
    refused = [Refuse("25006", "cannot execute INSERT in a read-only transaction")]
    assert step(initial_state(), WriteStarted("INSERT", default_read_only=True))[1] == refused
    assert step(initial_state(), WriteStarted("INSERT"))[1] == []
    block, _ = step(initial_state(), BeginRequested(read_only=True))
    assert step(block, WriteStarted("INSERT"))[1] == refused
    implicit, _ = step(initial_state(), txblock.ImplicitBlockStarted(read_only=True))
    assert step(implicit, WriteStarted("INSERT"))[1] == refused


def test_the_implicit_block_commits_unless_a_statement_failed() -> None:
    implicit, _ = step(initial_state(), txblock.ImplicitBlockStarted())
    assert transaction_status(implicit) == "T"
    assert step(implicit, ImplicitBlockEnded())[1][-1] == PublishWrites()
    failed, _ = step(implicit, StatementFailed())
    assert transaction_status(failed) == "E"
    assert step(failed, ImplicitBlockEnded())[1][-1] == DiscardWrites()


def test_events_a_phase_does_not_accept_are_protocol_errors() -> None:
    with pytest.raises(TxBlockProtocolError):
        step(initial_state(), ImplicitBlockEnded())
    failed, _ = run(initial_state(), BeginRequested(), StatementFailed())
    with pytest.raises(TxBlockProtocolError):  # a SET is gated before it is applied
        step(failed, SettingChanged(False, ()))


def test_recover_is_idle_and_states_are_frozen() -> None:
    assert (
        recover() == initial_state()
        and recover(Config(savepoints_max=3)).config.savepoints_max == 3
    )
    with pytest.raises(FrozenInstanceError):
        initial_state().phase = Phase.FAILED  # type: ignore[misc]
    with pytest.raises(ValueError):
        Config(savepoints_max=0)


def test_the_core_imports_no_io() -> None:
    assert imported_roots(txblock) <= {"__future__", "collections", "dataclasses", "enum", "typing"}
