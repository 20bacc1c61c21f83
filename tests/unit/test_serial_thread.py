"""SerialThread: a tail's blocking calls, in order, on one thread, never abandoned."""

from __future__ import annotations

import threading
import time

import pytest
import trio

from icegres.machines.drivers.serial_thread import SerialThread

pytestmark = pytest.mark.unit


async def test_calls_run_in_order_on_one_thread_and_return_or_raise() -> None:
    worker = SerialThread("test")
    seen: list[tuple[int, int]] = []

    def call(i: int) -> int:
        seen.append((i, threading.get_ident()))
        if i == 3:
            raise OSError("disk full")
        return i * 10

    async with trio.open_nursery() as nursery:
        results: dict[int, object] = {}

        async def one(i: int) -> None:
            try:
                results[i] = await worker.run(call, i)
            except OSError as exc:
                results[i] = exc

        for i in range(5):
            nursery.start_soon(one, i)
            await trio.sleep(0)  # submit in order
    assert [i for i, _ in seen] == [0, 1, 2, 3, 4]
    assert len({t for _, t in seen}) == 1 and seen[0][1] != threading.get_ident()
    assert results[4] == 40 and isinstance(results[3], OSError)
    worker.close()


async def test_a_cancelled_caller_still_waits_for_its_call() -> None:
    worker = SerialThread("test")
    finished = threading.Event()

    def slow() -> None:
        time.sleep(0.2)
        finished.set()

    with trio.move_on_after(0.01) as scope:
        await worker.run(slow)
        landed = finished.is_set()  # the write landed before the caller was let go
        await trio.sleep(0)  # and the cancel reaches it at its next checkpoint
    assert landed and scope.cancelled_caught
    worker.close()


async def test_a_closed_thread_ends_and_a_new_one_serves_later_calls() -> None:
    worker = SerialThread("test-close")
    first = await worker.run(threading.get_ident)
    worker.close()
    deadline = time.monotonic() + 5
    while any(t.ident == first for t in threading.enumerate()) and time.monotonic() < deadline:
        await trio.sleep(0.01)
    assert not any(t.ident == first for t in threading.enumerate())
    assert await worker.run(lambda: 7) == 7
    worker.close()


async def test_submitted_calls_answer_on_the_trio_thread_in_order() -> None:
    worker = SerialThread("test")
    answers: list[tuple[object, int]] = []
    trio_thread = threading.get_ident()
    all_in = trio.Event()

    def call(i: int) -> int:
        if i == 2:
            raise OSError("disk full")
        return i

    def done(result) -> None:
        try:
            answers.append((result.unwrap(), threading.get_ident()))
        except OSError as exc:
            answers.append((exc, threading.get_ident()))
        if len(answers) == 4:
            all_in.set()

    for i in range(4):
        worker.submit(call, i, done=done)  # no task waits on them
    with trio.fail_after(5):
        await all_in.wait()
    assert [a for a, _ in answers][:2] == [0, 1] and isinstance(answers[2][0], OSError) and answers[3][0] == 3
    assert {t for _, t in answers} == {trio_thread}
    worker.close()


async def test_drained_waits_for_every_submitted_call_to_be_answered() -> None:
    worker = SerialThread("test")
    answered: list[int] = []
    await worker.drained()  # nothing submitted: at once

    def slow(i: int) -> int:
        time.sleep(0.05)
        return i

    for i in range(3):
        worker.submit(slow, i, done=lambda result: answered.append(result.unwrap()))
    with trio.fail_after(5):
        await worker.drained()
    assert answered == [0, 1, 2]
    worker.close()
