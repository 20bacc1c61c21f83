"""The trio accept loop: one task per connection, one shared engine, bounded query threads."""

from __future__ import annotations

import functools
import itertools
import logging
import os
from typing import TYPE_CHECKING

import trio

from icegres.config import Settings, refuse_open_trust, refuse_plaintext
from icegres.engine.jobs import cancellable_job
from icegres.engine.lake import SERVER_VERSION
from icegres.protocol import tokens
from icegres.protocol.pgwire.session import Session
from icegres.protocol.pgwire.tls import ServerTls

if TYPE_CHECKING:
    from icegres.engine.lake import Engine
    from icegres.listeners import BoundPort

log = logging.getLogger("icegres.pgwire")


class PgServer:
    def __init__(self, settings: Settings, engine: Engine, *, bound: BoundPort | None = None) -> None:
        """`bound`: the listen sockets, bound at start-up (serve.py); without it `serve` binds
        --host:--port itself."""
        refuse_open_trust(settings, "")
        refuse_plaintext(settings, "")
        self.settings = settings
        self.tls = ServerTls.load(settings)  # None: SSLRequest is answered 'N'  (tls.py)
        self.engine = engine
        self.bound = bound
        self.port = bound.port if bound is not None else settings.port
        self.server_version = SERVER_VERSION
        self.tokens = tokens.validator_for(settings)  # JWT logins: one JWKS cache for all sessions
        self.limiter = trio.CapacityLimiter(settings.query_threads)
        # `await run_sync(fn, *args)`: fn(*args) in a worker thread behind the query limiter. A
        # cancelled caller (CancelRequest, statement_timeout, a dropped client) leaves at once, and
        # the job's pulls inside a long DataFusion operator end too (engine/batches.py), freeing the
        # thread. Engine code (the write path) calls it without calling back into the front end.
        to_thread = functools.partial(trio.to_thread.run_sync, limiter=self.limiter, abandon_on_cancel=True)
        self.run_sync = functools.partial(cancellable_job, to_thread)
        self._sessions: dict[int, Session] = {}
        # Sessions running a statement, watched for a client that hangs up (hangup.py).
        self.running: set[Session] = set()
        # Backend PIDs only need to be unique per server; start from ours so logs line up.
        self._pids = itertools.count(os.getpid() * 1000 % 2_000_000_000 + 1)

    def next_pid(self) -> int:
        return next(self._pids) & 0x7FFFFFFF

    def register(self, session: Session) -> None:
        self._sessions[session.pid] = session

    def unregister(self, session: Session) -> None:
        self._sessions.pop(session.pid, None)

    def cancel(self, pid: int, secret: int) -> None:
        session = self._sessions.get(pid)
        if session is not None and session.secret == secret:
            session.cancel()

    async def handle(self, stream: trio.SocketStream) -> None:

        try:
            peer = stream.socket.getpeername()
        except OSError:
            peer = "?"
        try:
            stream.setsockopt(trio.socket.IPPROTO_TCP, trio.socket.TCP_NODELAY, 1)
        except (OSError, AttributeError):
            pass
        session = Session(self, stream, str(peer))
        try:
            await session.run()
        except Exception:  # a bug in one session must never take the server down
            log.exception("session %s failed", session.pid)

    async def serve(self, *, task_status=trio.TASK_STATUS_IGNORED) -> None:
        from icegres.protocol.pgwire import hangup

        if self.bound is not None:
            listeners = [trio.SocketListener(trio.socket.from_stdlib_socket(sock)) for sock in self.bound.listen()]
        else:
            listeners = await trio.open_tcp_listeners(self.settings.port, host=self.settings.host)
            self.port = listeners[0].socket.getsockname()[1]
        async with trio.open_nursery() as nursery:
            nursery.start_soon(hangup.watch, self.running)
            task_status.started(listeners)
            await trio.serve_listeners(self.handle, listeners)
