"""engine/executor.py's slots on trio: FIFO hand-over, a cancelled waiter leaves the queue, and a
slot handed to a waiter cancelled at that moment goes on to the next one."""

from __future__ import annotations

import pytest
import trio
import trio.testing

from icegres.engine.executor import Executors

pytestmark = pytest.mark.unit


def _slots(n: int, tmp_path) -> Executors:
    return Executors(n, 16 << 20, tmp_path / "spill")  # no process is started by these tests


def test_waiters_get_freed_slots_in_arrival_order(tmp_path):
    executors = _slots(1, tmp_path)
    order: list[str] = []

    async def wait(name: str) -> None:
        slot = await executors.wait_turn()
        order.append(name)
        await trio.sleep(1)
        executors.release_unused(slot)

    async def main() -> None:
        async with trio.open_nursery() as nursery:
            for name in "abc":
                nursery.start_soon(wait, name)
                await trio.sleep(0.1)
            assert executors.stats() == (1, 2)
        assert executors.stats() == (0, 0)

    trio.run(main, clock=trio.testing.MockClock(autojump_threshold=0))
    assert order == ["a", "b", "c"]


def test_a_cancelled_waiter_leaves_the_queue_and_a_handed_slot_moves_on(tmp_path):
    executors = _slots(1, tmp_path)
    got: list[str] = []

    async def main() -> None:
        held = await executors.wait_turn()
        with trio.move_on_after(1):
            await executors.wait_turn()  # times out in the queue: statement_timeout while queued
        assert executors.stats() == (1, 0)

        async def second() -> None:
            with trio.CancelScope() as scope:
                scopes.append(scope)
                await executors.wait_turn()
                got.append("second")  # never: cancelled as the slot is handed over

        async def third() -> None:
            slot = await executors.wait_turn()
            got.append("third")
            executors.release_unused(slot)

        scopes: list[trio.CancelScope] = []
        async with trio.open_nursery() as nursery:
            nursery.start_soon(second)
            await trio.sleep(0.1)
            nursery.start_soon(third)
            await trio.sleep(0.1)
            executors.release_unused(held)  # granted to second...
            scopes[0].cancel()  # ...which is cancelled before it runs: third gets it
        assert executors.stats() == (0, 0)

    trio.run(main, clock=trio.testing.MockClock(autojump_threshold=0))
    assert got == ["third"]


def test_a_plan_known_to_carry_big_in_memory_tables_runs_here_unserialised(tmp_path):
    """Serialising a plan encodes its in-memory tables holding the GIL (~28 ms per MB): a plan
    whose caller knows it carries more than INLINE_BYTES_MAX is never serialised, nor given a slot."""
    from icegres.engine.executor import INLINE_BYTES_MAX

    class Plan:
        def execution_plan(self):
            raise AssertionError("serialised")

    executors = _slots(1, tmp_path)
    assert executors.start(Plan(), None, INLINE_BYTES_MAX + 1) is None
    assert executors.stats() == (0, 0)
