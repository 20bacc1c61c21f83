"""The trio accept loop: one task per connection, one shared engine, bounded query threads."""

from __future__ import annotations

import functools
import itertools
import logging
import os
from typing import TYPE_CHECKING

import trio

from icegres.config import Settings, refuse_open_trust, refuse_plaintext, superusers
from icegres.engine.activity import BackendActivity
from icegres.engine.jobs import cancellable_job
from icegres.engine.lake import SERVER_VERSION
from icegres.protocol import tokens
from icegres.protocol.backoff import AuthBackoff
from icegres.protocol.limits import Slots
from icegres.protocol.pgwire import activity
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
        self._sessions: dict[int, Session] = {}  # ready sessions (startup done), by backend pid
        self.live: set[Session] = set()  # every connection, from accept to close
        self.slots = Slots(settings.max_connections, settings.superuser_reserved_connections, superusers(settings))
        self.backoff = AuthBackoff.for_settings(settings)  # shared with Flight SQL in one process (serve.py)
        # Text work proportional to a statement's size (splitting, compacting: statements.py)
        # runs in threads of its own, never behind (or holding) a query thread.
        self.text_limiter = trio.CapacityLimiter(2)
        self._token: trio.lowlevel.TrioToken | None = None  # the loop, for signals from worker threads
        self._accepting: trio.CancelScope | None = None
        self.draining = False
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

    def sessions_of(self, user: str) -> int:
        """How many ready sessions `user` has on this server."""
        return sum(1 for s in self._sessions.values() if s.user == user)

    def cancel(self, pid: int, secret: int) -> None:
        session = self._sessions.get(pid)
        if session is not None and session.secret == secret:
            session.cancel()

    # --- the engine's ActivityPort (engine/activity.py), called from worker threads ------------

    def activity(self, viewer: str) -> list[BackendActivity]:
        """pg_stat_activity as user `viewer` sees it."""
        sees_all = self.slots.is_superuser(viewer)
        return [activity.row(s.pid, s.activity, database=self.settings.database, user=s.user,
                             application_name=s.settings.get("application_name", ""),
                             client=(s.client_addr, s.client_port), visible=sees_all or s.user == viewer)
                for s in sorted(list(self._sessions.values()), key=lambda s: s.pid)]

    def signal(self, pid: int, *, terminate: bool, by: str) -> bool:
        session = self._sessions.get(pid)
        if session is None or self._token is None:
            return False
        activity.check_signal(terminate=terminate, by=by, by_superuser=self.slots.is_superuser(by),
                              target=session.user, target_superuser=self.slots.is_superuser(session.user))
        act = session.terminate if terminate else session.cancel
        # The loop does it: sessions are the loop's, and this runs in a worker thread.
        self._token.run_sync_soon(act)
        return True

    # --- shutdown ----------------------------------------------------------------------------

    async def drain(self, timeout_s: float) -> None:
        """Stop accepting; end each session once its running statement is done (FATAL 57P01),
        and after `timeout_s` end the rest at once; return when every connection is closed."""
        self.draining = True
        if self._accepting is not None:
            self._accepting.cancel()
        for session in list(self.live):
            session.terminate(now=False)
        with trio.move_on_after(timeout_s):
            while self.live:
                await trio.sleep(0.02)
        if self.live:
            log.info("drain: %d session(s) still running after %.1fs: terminating them", len(self.live), timeout_s)
        for session in list(self.live):
            session.terminate(now=True)
        with trio.move_on_after(5):  # each sends its FATAL and closes; a stuck socket is not waited for
            while self.live:
                await trio.sleep(0.02)

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
        if isinstance(peer, tuple) and len(peer) >= 2:
            session.client_addr, session.client_port = str(peer[0]), int(peer[1])
        self.live.add(session)
        try:
            await session.run()
        except Exception:  # a bug in one session must never take the server down
            log.exception("session %s failed", session.pid)
        finally:
            self.live.discard(session)

    async def serve(self, *, task_status=trio.TASK_STATUS_IGNORED) -> None:
        from icegres.protocol.pgwire import hangup

        if self.bound is not None:
            listeners = [trio.SocketListener(trio.socket.from_stdlib_socket(sock)) for sock in self.bound.listen()]
        else:
            listeners = await trio.open_tcp_listeners(self.settings.port, host=self.settings.host)
            self.port = listeners[0].socket.getsockname()[1]
        self._token = trio.lowlevel.current_trio_token()
        async with trio.open_nursery() as nursery:
            nursery.start_soon(hangup.watch, self.running)
            async with trio.open_nursery() as connections:
                # Connections live in their own nursery: a drain stops accepting (closing the
                # listeners) while the sessions run on.
                with trio.CancelScope() as self._accepting:
                    task_status.started(listeners)
                    await trio.serve_listeners(self.handle, listeners, handler_nursery=connections)
            nursery.cancel_scope.cancel()
