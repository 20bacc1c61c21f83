"""The Flight SQL listener: a grpclib server inside the trio process, under trio-asyncio.

grpclib is asyncio-only. `trio_asyncio.open_loop()` runs an asyncio loop on top of trio, so the
gRPC handlers share the process, the Engine and the worker-thread CapacityLimiter with pgwire;
they reach trio (worker threads) through `trio_asyncio.trio_as_aio`.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

import outcome
import trio

from icegres.config import Settings, refuse_open_trust, refuse_plaintext, superusers
from icegres.protocol.backoff import AuthBackoff
from icegres.protocol.flightsql.connections import Connections
from icegres.protocol.flightsql.drain import RELEASE_GRACE_S
from icegres.protocol.limits import Slots

if TYPE_CHECKING:
    from icegres.engine.lake import Engine
    from icegres.listeners import BoundPort

log = logging.getLogger("icegres.flightsql")

DEFAULT_FLIGHT_PORT = 50051


class FlightServer:
    def __init__(self, settings: Settings, engine: Engine, *, port: int | None = None,
                 limiter: trio.CapacityLimiter | None = None, bound: BoundPort | None = None,
                 backoff: AuthBackoff | None = None, slots: Slots | None = None) -> None:
        """`bound`: the listen sockets, bound at start-up (serve.py); without it `serve` binds
        --host and `port` (else --flight-port, else 50051) itself. `limiter`, `backoff` and
        `slots`: pgwire's, when both front ends run in one process, so that queries share the
        threads, failed logins over either protocol count against the same address, and
        connections over either against the same --max-connections."""
        refuse_open_trust(settings, "Flight SQL on ")
        refuse_plaintext(settings, "Flight SQL on ")
        self.settings = settings
        self.engine = engine
        self.bound = bound
        if bound is not None:
            self.port = bound.port
        else:  # 0 is a port (any free one), not "unset"
            self.port = port if port is not None else (
                settings.flight_port if settings.flight_port is not None else DEFAULT_FLIGHT_PORT)
        self.limiter = limiter or trio.CapacityLimiter(settings.query_threads)
        # `is None`, not `or`: an AuthBackoff remembering no address is falsy (it has a length).
        self.backoff = backoff if backoff is not None else AuthBackoff.for_settings(settings)
        if slots is None:
            slots = Slots(settings.max_connections, settings.superuser_reserved_connections, superusers(settings))
        trust = not (settings.users or settings.jwt_jwks)
        self.connections = Connections(slots, authentication_timeout_s=settings.authentication_timeout, trust=trust)
        self._service: Any = None  # while serving: the FlightSqlService, and its grpclib servers
        self._servers: list[Any] = []
        self.ssl = None
        if settings.tls_cert and settings.tls_key:
            from icegres.protocol.flightsql.tls import TlsConfigError, server_context

            try:
                self.ssl = server_context(settings.tls_cert, settings.tls_key)
            except TlsConfigError as exc:
                raise SystemExit(f"icegres: {exc}") from None

    async def drain(self, timeout_s: float) -> None:
        """Stop accepting connections and refuse new calls (flightsql/drain.py); return once no
        call runs and every query ticket issued was asked for, or after `timeout_s`. What still
        runs then is cancelled when `serve` is."""
        service = self._service
        if service is None:
            return
        service.drain.start()
        for server in self._servers:
            # asyncio's server alone: grpclib's close() would also cancel every running call.
            server._server.close()
        with trio.move_on_after(timeout_s):
            quiet_since = None
            while True:
                if service.busy():
                    quiet_since = None
                elif not service.drain.served:
                    break
                elif quiet_since is None:
                    quiet_since = trio.current_time()
                elif trio.current_time() - quiet_since >= RELEASE_GRACE_S:
                    break  # (drain.py: the client's ClosePreparedStatement comes after its query)
                await trio.sleep(0.02)
        if service.busy():
            log.info("drain: %d Flight SQL call(s) still running after %.1fs: cancelling them",
                     service.drain.running, timeout_s)

    @property
    def scheme(self) -> str:
        return "grpc+tls" if self.ssl is not None else "grpc"

    async def _run_sync_trio(self, fn: Callable[..., Any], *args: Any) -> Any:
        return await trio.to_thread.run_sync(fn, *args, limiter=self.limiter, abandon_on_cancel=True)

    async def run_sync(self, fn: Callable[..., Any], *args: Any) -> Any:
        """From an asyncio handler: `fn(*args)` in a worker thread behind the shared limiter.

        The usual path takes a free token of the limiter without waiting and hands `fn` to
        trio's thread cache directly; the result comes back as one `call_soon_threadsafe`.
        `trio_as_aio` + `trio.to_thread.run_sync` would add a trio task and an asyncio future
        bridged both ways (several scheduler passes) to every call, and a point lookup makes two
        (prepare, GetFlightInfo), a large DoGet one per chunk. When no token is free it takes that
        path, to wait in the limiter's FIFO like every other caller (pgwire's included).

        As with `abandon_on_cancel=True`, a cancelled caller leaves the thread to finish (a pull
        waiting inside a long DataFusion operator ends at once: engine/batches.py); the token is
        released when the thread ends, on the loop thread (trio-asyncio's loop runs inside trio,
        where the limiter lives).
        """
        from icegres.engine.jobs import cancellable_job

        return await cancellable_job(self._run_sync, fn, *args)

    async def _run_sync(self, fn: Callable[..., Any], *args: Any) -> Any:
        borrower = object()
        try:
            self.limiter.acquire_on_behalf_of_nowait(borrower)
        except trio.WouldBlock:
            import trio_asyncio

            return await trio_asyncio.trio_as_aio(self._run_sync_trio)(fn, *args)
        loop = asyncio.get_running_loop()
        future: asyncio.Future[Any] = loop.create_future()

        def finish(result: outcome.Outcome[Any]) -> None:  # on the loop thread
            self.limiter.release_on_behalf_of(borrower)
            if not future.done():
                if isinstance(result, outcome.Error):
                    future.set_exception(result.error)
                else:
                    future.set_result(result.value)

        def deliver(result: outcome.Outcome[Any]) -> None:  # in the worker thread
            try:
                loop.call_soon_threadsafe(finish, result)
            except RuntimeError:  # the loop closed meanwhile (shutdown): nothing waits any more
                pass

        try:
            trio.lowlevel.start_thread_soon(lambda: fn(*args), deliver)
        except BaseException:
            self.limiter.release_on_behalf_of(borrower)
            raise
        return await future

    async def serve(self, *, task_status: Any = trio.TASK_STATUS_IGNORED) -> None:
        """Listen until cancelled; `task_status.started()` once the port is bound."""
        import trio_asyncio

        from icegres.protocol.flightsql import h2send
        from icegres.protocol.flightsql.connections import GuardedServer
        from icegres.protocol.flightsql.service import CODEC, FlightSqlService

        h2send.install()  # DATA frames in batches: one syscall per ~256 KiB, not per 16 KiB frame
        async with trio_asyncio.open_loop():
            self._service = service = FlightSqlService(self)
            self._servers = servers = []
            if self.bound is not None:
                # One grpclib server per socket (an asyncio server takes one), one service.
                for sock in self.bound.listen():
                    servers.append(GuardedServer([service], codec=CODEC, connections=self.connections))
                    await trio_asyncio.aio_as_trio(servers[-1].start)(sock=sock, ssl=self.ssl)
            else:
                servers.append(GuardedServer([service], codec=CODEC, connections=self.connections))
                await trio_asyncio.aio_as_trio(servers[-1].start)(self.settings.host, self.port, ssl=self.ssl)
                if self.port == 0:
                    self.port = _bound_port(servers[-1])
            log.info("Flight SQL on %s://%s:%d (%s auth, result compression %s)", self.scheme,
                     self.settings.host, self.port, "password" if self.settings.users or self.settings.jwt_jwks else "trust",
                     self.settings.result_compression)
            task_status.started()
            try:
                await trio.sleep_forever()
            finally:
                for server in servers:
                    server.close()
                service.stop_speculations()
                with trio.CancelScope(shield=True), trio.move_on_after(5):
                    for server in servers:
                        await trio_asyncio.aio_as_trio(server.wait_closed)()


def _bound_port(server: Any) -> int:
    """The port a started grpclib server listens on (it has no public accessor)."""
    return int(server._server.sockets[0].getsockname()[1])
