"""InOrder: an item given while one is being handled waits for it, then goes in order."""

from __future__ import annotations

import pytest

from icegres.machines.drivers.in_order import InOrder

pytestmark = pytest.mark.unit


def test_items_reported_while_handling_wait_for_the_item_in_progress() -> None:
    seen: list[str] = []

    def handle(item: str) -> None:
        seen.append(f"start {item}")
        if item == "a":
            run("b")  # reported by an effect of "a": after "a" is done
            run("c")
        seen.append(f"end {item}")

    run: InOrder[str] = InOrder(handle)
    run("a")
    assert seen == ["start a", "end a", "start b", "end b", "start c", "end c"]


def test_a_failing_item_leaves_the_rest_for_the_next_call() -> None:
    seen: list[str] = []

    def handle(item: str) -> None:
        if item == "a":
            run("b")
            raise RuntimeError("a failed")
        seen.append(item)

    run: InOrder[str] = InOrder(handle)
    with pytest.raises(RuntimeError):
        run("a")
    run("c")  # not stuck busy: "b", queued before the failure, goes first
    assert seen == ["b", "c"]
