"""Two stages of a result stream running ahead of its sender, each at its own pace, within bounds.

A large DoGet has three kinds of work per chunk: take the rows from DataFusion, encode them into
HTTP/2 frames (both in worker threads), and write the frames (the event loop). Chained in lock
step — a chunk is taken only once the one before went to be encoded, encoded only once the one
before went to be sent — the sender waited for each chunk's take and then for its encoding:
~200 ms each of a 10M-row DoGet's ~730, with the CPUs partly idle. Here each stage is a task of
its own that goes on as soon as the next stage has room: a queue of `depth` items sits between
them. A slow reader therefore holds the query at most `2 * depth + 3` chunks ahead (one being
taken, one being encoded, one being sent, and the queues), and never the whole result.

Failures travel in order with the items: the consumer gets the exception where the item would
have been. Leaving the `async with` (done, failed or cancelled) cancels both stages.
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import Any, Generic, TypeVar

T = TypeVar("T")
U = TypeVar("U")


@dataclass(frozen=True)
class _Failed:
    error: BaseException


_END = object()


class Pipeline(Generic[T, U]):
    """`produce()` called until it says it is done, `transform` applied to each of its items,
    the results handed out in order by `next()` (None once all are out)."""

    def __init__(self, produce: Callable[[], Awaitable[tuple[T, bool]]],
                 transform: Callable[[T], Awaitable[U]], depth: int = 1) -> None:
        self._produce, self._transform = produce, transform
        self._produced: asyncio.Queue[Any] = asyncio.Queue(depth)
        self._transformed: asyncio.Queue[Any] = asyncio.Queue(depth)
        self._tasks: list[asyncio.Task[None]] = []

    async def __aenter__(self) -> Pipeline[T, U]:
        self._tasks = [asyncio.ensure_future(self._producing()), asyncio.ensure_future(self._transforming())]
        return self

    async def __aexit__(self, *exc: object) -> None:
        for task in self._tasks:
            task.cancel()
        await asyncio.gather(*self._tasks, return_exceptions=True)

    async def next(self) -> U | None:
        item = await self._transformed.get()
        if item is _END:
            self._transformed.put_nowait(_END)  # later calls see the end too
            return None
        if isinstance(item, _Failed):
            raise item.error
        return item

    async def _producing(self) -> None:
        try:
            done = False
            while not done:
                item, done = await self._produce()
                await self._produced.put(item)
            await self._produced.put(_END)
        except asyncio.CancelledError:
            raise
        except Exception as exc:
            await self._produced.put(_Failed(exc))

    async def _transforming(self) -> None:
        while True:
            item = await self._produced.get()
            if item is _END or isinstance(item, _Failed):
                await self._transformed.put(item)
                return
            try:
                result = await self._transform(item)
            except asyncio.CancelledError:
                raise
            except Exception as exc:
                await self._transformed.put(_Failed(exc))
                return
            await self._transformed.put(result)
