"""FlightServer.run_sync: worker threads behind the limiter pgwire shares, from asyncio handlers."""

from __future__ import annotations

import threading

import pytest
import trio
import trio_asyncio

from icegres.protocol.flightsql.server import FlightServer

pytestmark = pytest.mark.unit


def _server(tokens: int) -> FlightServer:
    server = FlightServer.__new__(FlightServer)  # only the limiter matters to run_sync
    server.limiter = trio.CapacityLimiter(tokens)
    return server


def test_a_free_token_runs_the_call_in_a_worker_thread_and_is_given_back():
    server = _server(1)
    loop_thread: list[int] = []

    async def handler() -> None:
        loop_thread.append(threading.get_ident())
        assert await server.run_sync(threading.get_ident) != loop_thread[0]
        assert server.limiter.borrowed_tokens == 0
        assert await server.run_sync(lambda a, b: a + b, 2, 3) == 5
        with pytest.raises(ZeroDivisionError):
            await server.run_sync(lambda: 1 / 0)
        assert server.limiter.borrowed_tokens == 0

    async def main() -> None:
        async with trio_asyncio.open_loop():
            await trio_asyncio.aio_as_trio(handler)()

    trio.run(main)


def test_without_a_free_token_the_call_waits_in_the_limiter():
    server = _server(1)
    started = threading.Event()
    done: list[str] = []

    async def handler() -> None:
        done.append(await server.run_sync(lambda: started.set() or "ran"))

    async def main() -> None:
        async with trio_asyncio.open_loop():
            holder = object()
            await server.limiter.acquire_on_behalf_of(holder)  # pgwire's statement holds it
            async with trio.open_nursery() as nursery:
                nursery.start_soon(trio_asyncio.aio_as_trio(handler))
                await trio.sleep(0.2)
                assert not started.is_set() and not done
                server.limiter.release_on_behalf_of(holder)
            assert done == ["ran"]
            assert server.limiter.borrowed_tokens == 0

    trio.run(main)
