"""The DoGet pipeline's two stages: order, bounds, failures in place, and cancellation on exit."""

from __future__ import annotations

import asyncio

import pytest

from icegres.protocol.flightsql.pipeline import Pipeline

pytestmark = pytest.mark.unit


def _counting(n: int, fail_at: int | None = None):
    made: list[int] = []

    async def produce() -> tuple[int, bool]:
        await asyncio.sleep(0)
        k = len(made)
        if k == fail_at:
            raise ValueError(f"produce {k}")
        made.append(k)
        return k, k == n - 1

    return made, produce


async def _square(x: int) -> int:
    await asyncio.sleep(0)
    return x * x


def test_every_item_comes_out_transformed_and_in_order():
    async def run() -> list[int | None]:
        _, produce = _counting(7)
        out: list[int | None] = []
        async with Pipeline(produce, _square) as chunks:
            while (item := await chunks.next()) is not None:
                out.append(item)
            out.append(await chunks.next())  # the end stays the end
        return out

    assert asyncio.run(run()) == [k * k for k in range(7)] + [None]


@pytest.mark.parametrize("depth", [1, 2, 3])
def test_a_consumer_that_stops_reading_holds_the_stages_within_their_bound(depth):
    transformed: list[int] = []

    async def transform(x: int) -> int:
        transformed.append(x)
        return x

    async def run() -> tuple[int, int]:
        made, produce = _counting(1000)
        async with Pipeline(produce, transform, depth) as chunks:
            assert await chunks.next() == 0
            for _ in range(200):  # let both stages run as far as they can
                await asyncio.sleep(0)
            return len(made), len(transformed)

    made, done = asyncio.run(run())
    # Taken by the consumer: 1. Then: `depth` transformed in the queue, one transformed waiting
    # to be put, `depth` produced in the queue, one produced waiting to be put.
    assert done == 1 + depth + 1
    assert made == done + depth + 1


@pytest.mark.parametrize("stage", ["produce", "transform"])
def test_a_failure_comes_out_where_its_item_would_have(stage):
    async def transform(x: int) -> int:
        if stage == "transform" and x == 3:
            raise ValueError("transform 3")
        return x

    async def run() -> tuple[list[int], str]:
        _, produce = _counting(10, fail_at=3 if stage == "produce" else None)
        out: list[int] = []
        async with Pipeline(produce, transform) as chunks:
            try:
                while (item := await chunks.next()) is not None:
                    out.append(item)
            except ValueError as exc:
                return out, str(exc)
        return out, "no failure"

    assert asyncio.run(run()) == ([0, 1, 2], f"{stage} 3")


def test_leaving_cancels_both_stages():
    cancelled: list[str] = []

    async def produce() -> tuple[int, bool]:
        try:
            await asyncio.Event().wait()  # a take that never returns
        except asyncio.CancelledError:
            cancelled.append("produce")
            raise
        return 0, True

    async def run() -> None:
        pipeline = Pipeline(produce, _square)
        async with pipeline:
            await asyncio.sleep(0)
        assert all(task.done() for task in pipeline._tasks)

    asyncio.run(run())
    assert cancelled == ["produce"]


def test_a_cancelled_consumer_cancels_the_stages():
    cancelled: list[str] = []

    async def produce() -> tuple[int, bool]:
        try:
            await asyncio.sleep(3600)
        except asyncio.CancelledError:
            cancelled.append("produce")
            raise
        return 0, True

    async def consume() -> None:
        async with Pipeline(produce, _square) as chunks:
            await chunks.next()

    async def run() -> None:
        task = asyncio.ensure_future(consume())
        await asyncio.sleep(0.01)
        task.cancel()
        with pytest.raises(asyncio.CancelledError):
            await task

    asyncio.run(run())
    assert cancelled == ["produce"]
