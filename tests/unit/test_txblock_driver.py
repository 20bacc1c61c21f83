"""The transaction block driver: the machine's effects land on the engine's TxnState and the port."""

from __future__ import annotations

from typing import Any

import pytest
import trio

from icegres.engine.txblock_driver import Ending, TxBlock, finish
from icegres.engine.txn import TxnState
from icegres.machines import txblock as block
from icegres.pg.errors import PgError

pytestmark = pytest.mark.unit


class Port:
    def __init__(self) -> None:
        self.calls: list[tuple[Any, ...]] = []
        self.bound: TxnState | None = None

    def new_txn(self, isolation: str | None) -> TxnState:
        self.calls.append(("new_txn", isolation))
        return TxnState(serializable=isolation == "serializable")

    def bind(self, txn: TxnState | None) -> None:
        self.bound = txn

    def warn(self, sqlstate: str, message: str) -> None:
        self.calls.append(("warn", sqlstate))

    def restore_settings(self, values: tuple[tuple[str, str], ...]) -> None:
        self.calls.append(("restore", values))

    def close_portals(self, block_only: bool) -> None:
        self.calls.append(("close", block_only))


def test_a_block_starts_binds_and_ends_its_transaction() -> None:
    port = Port()
    tx = TxBlock(port)
    assert tx.feed(block.BeginRequested("serializable")) is None
    assert tx.status == "T" and tx.txn is port.bound and tx.txn is not None and tx.txn.serializable
    txn = tx.txn
    ending = tx.feed(block.CommitRequested())
    assert ending == Ending(txn, publish=True) and tx.txn is None and port.bound is None
    assert port.calls[-2:] == [("restore", ()), ("close", True)]


def test_savepoint_effects_move_the_engine_marks() -> None:
    tx = TxBlock(Port())
    tx.feed(block.BeginRequested())
    for name in ("a", "b", "a"):
        tx.feed(block.SavepointDeclared(name))
    assert tx.txn is not None and [name for name, _ in tx.txn.marks] == ["a", "b", "a"]
    tx.feed(block.RolledBackTo("b"))
    assert [name for name, _ in tx.txn.marks] == ["a", "b"]
    tx.feed(block.SavepointReleased("a"))
    assert tx.txn.marks == [] and tx.state.savepoints == ()


def test_a_refusal_raises_the_clients_error_and_changes_nothing() -> None:
    tx = TxBlock(Port())
    tx.feed(block.BeginRequested())
    tx.feed(block.StatementFailed())
    before = tx.state
    with pytest.raises(PgError) as refused:
        tx.feed(block.StatementStarted())
    assert refused.value.sqlstate == "25P02" and tx.state == before
    ending = tx.feed(block.CommitRequested())
    assert ending is not None and not ending.publish and ending.rolled_back


def test_warnings_and_syncs_go_to_the_port() -> None:
    port = Port()
    tx = TxBlock(port)
    assert tx.feed(block.CommitRequested()) is None
    tx.feed(block.SyncReceived())
    assert port.calls == [("warn", "25P01"), ("close", True), ("close", False)]


def test_finish_of_an_empty_block_touches_nothing() -> None:
    class Host:
        qctx = None

        async def run(self, fn: Any, *args: Any) -> Any:
            raise AssertionError("nothing was staged: nothing to delete or publish")

    tx = TxBlock(Port())
    tx.feed(block.BeginRequested())
    ending = tx.feed(block.RollbackRequested())
    assert ending is not None and not ending.publish

    async def main() -> None:
        await finish(Host(), ending)  # type: ignore[arg-type]
        await finish(Host(), None)  # type: ignore[arg-type]

    trio.run(main)
