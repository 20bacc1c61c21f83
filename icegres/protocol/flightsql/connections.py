"""Flight SQL's HTTP/2 connections against --max-connections and --authentication-timeout.

pgwire's rules (protocol/limits.py), carried over to a protocol whose unit is the call:

- A connection takes a slot at its first call (the first request HEADERS: they carry the
  credentials, as pgwire's startup packet carries the user) and keeps it until it closes. The
  slots are pgwire's: in `icegres serve` one `Slots` counts both front ends' connections, as one
  server. Beyond `--max-connections` that call, and any other on the connection, is answered
  RESOURCE_EXHAUSTED "sorry, too many clients already (SQLSTATE 53300)" — the gRPC status both
  pyarrow.flight and the ADBC driver show with its message — and then the server says GOAWAY.
- Superuser-reserved slots: a Flight connection is nobody's until a call on it authenticates, so
  the check is made there, once per connection, as pgwire makes it after authentication: a
  non-superuser who finds no more than `--superuser-reserved-connections` slots free gets
  RESOURCE_EXHAUSTED "remaining connection slots are reserved for non-replication superuser
  connections (SQLSTATE 53300)", the slot back, and the GOAWAY. Under trust everyone is a
  superuser, as in pgwire.
- From accept, a connection has `--authentication-timeout` to authenticate: a call whose
  credentials verify (Basic, a bearer token this server issued, a JWT; the Handshake is such a
  call). Under trust there are no credentials to check, and the first call the service answers
  counts, as pgwire's trust logs in with the startup packet. A connection that has not done so
  in time — silent, a bare HTTP/2 preface, or only calls refused UNAUTHENTICATED — is sent GOAWAY
  and closed, its slot (if it took one) with it. An authenticated connection is never timed out.
- A socket that made no call holds no slot (nor does pgwire's before its startup packet): idle
  sockets cannot lock out clients that log in; the authentication timeout closes them.
- Under TLS the clock starts at accept too, with the handshake inside it: asyncio's handshake
  timeout (60 s unless told) is set to the authentication timeout, and the timer that follows
  gets what the handshake left (pgwire's counts its TLS handshake the same way).

After a refusal the server sends GOAWAY and reads on, discarding, until the client closes (both
drivers do at once) or LINGER_S passes: closing at once could reset the connection under a
response the client has not read yet, and the 53300 would reach it as a bare "connection reset".
"""

from __future__ import annotations

import asyncio
import logging
from typing import TYPE_CHECKING, Any

from grpclib.server import Server

from icegres.pg.errors import PgError

if TYPE_CHECKING:
    from grpclib.protocol import H2Protocol
    from grpclib.server import Stream

    from icegres.protocol.limits import Slots

log = logging.getLogger("icegres.flightsql")

LINGER_S = 5.0  # after a refusal's GOAWAY, how long a client that does not close is waited for


class FlightConnection:
    """One HTTP/2 connection's standing: its slot, whether it authenticated, its timer."""

    def __init__(self, protocol: H2Protocol, peer: str) -> None:
        self.protocol = protocol
        self.peer = peer
        self.slot = False  # holds a --max-connections slot
        self.authenticated = False
        self.refusal: PgError | None = None  # the 53300 every call on it gets, once refused
        self.gone = False  # GOAWAY sent: what arrives is read and dropped
        self.timer: asyncio.TimerHandle | None = None


class Connections:
    """Every open Flight SQL connection of a server, keyed by grpclib's connection object.

    Used on the asyncio loop's thread only, which is trio's (trio-asyncio), where pgwire takes
    its slots too: no locks."""

    def __init__(self, slots: Slots, *, authentication_timeout_s: float, trust: bool) -> None:
        self.slots = slots
        self.authentication_timeout_s = authentication_timeout_s
        self.trust = trust
        self._open: dict[Any, FlightConnection] = {}

    def opened(self, protocol: H2Protocol, accepted_at: float | None = None) -> FlightConnection:
        """A connection is up (after its TLS handshake, if any): its timer runs out
        --authentication-timeout after `accepted_at` (the loop's time; default now)."""
        peer = protocol.connection.get_peer().addr()
        conn = FlightConnection(protocol, f"{peer[0]}:{peer[1]}" if peer else "?")
        self._open[protocol.connection] = conn
        loop = asyncio.get_running_loop()
        start = loop.time() if accepted_at is None else accepted_at
        conn.timer = loop.call_at(start + self.authentication_timeout_s, self._timed_out, conn)
        return conn

    def closed(self, conn: FlightConnection) -> None:
        self._open.pop(conn.protocol.connection, None)
        if conn.timer is not None:
            conn.timer.cancel()
        self._release(conn)

    def admit(self, stream: Stream) -> None:
        """A call starts: the connection's first takes its slot; raises PgError 53300 when there
        is none (or the connection was refused before), and the connection then goes."""
        conn = self._open.get(stream._stream.connection)
        if conn is None:  # closed under the call (a timeout, a drain): grpclib cancels it
            return
        if conn.refusal is None and not conn.slot:
            try:
                self.slots.take()
            except PgError as err:
                conn.refusal = err
            else:
                conn.slot = True
                if self.trust:
                    self._authenticated(conn)
        if conn.refusal is not None:
            self._refuse(conn)

    def authenticated(self, stream: Stream, user: str) -> None:
        """A call's credentials verified as `user`: the first such call ends the connection's
        authentication timeout and checks the reserved slots (PgError 53300, and it goes)."""
        conn = self._open.get(stream._stream.connection)
        if conn is None or conn.authenticated or not conn.slot:
            return
        try:
            self.slots.check_reserved(user)
        except PgError as err:
            conn.refusal = err
            self._release(conn)
            self._refuse(conn)
        self._authenticated(conn)

    def _authenticated(self, conn: FlightConnection) -> None:
        conn.authenticated = True
        if conn.timer is not None:
            conn.timer.cancel()
            conn.timer = None

    def _release(self, conn: FlightConnection) -> None:
        if conn.slot:
            conn.slot = False
            self.slots.release()

    def _refuse(self, conn: FlightConnection) -> None:
        """Raise the connection's refusal for this call; once the call has answered, GOAWAY."""
        assert conn.refusal is not None
        refusal = conn.refusal
        task = asyncio.current_task()
        if task is not None and not conn.gone:
            task.add_done_callback(lambda _: self._goodbye(conn, refusal.message.encode()))
        raise PgError(refusal.sqlstate, refusal.message)

    def _goodbye(self, conn: FlightConnection, why: bytes) -> None:
        """GOAWAY, then read and drop until the client closes, or close after LINGER_S."""
        if conn.gone or conn.protocol.connection.is_closing():
            return
        conn.gone = True
        _send_goaway(conn.protocol, why)
        if conn.timer is not None:
            conn.timer.cancel()
        conn.timer = asyncio.get_running_loop().call_later(LINGER_S, _close, conn.protocol, "refused")

    def _timed_out(self, conn: FlightConnection) -> None:
        conn.timer = None
        if conn.authenticated or conn.gone:
            return
        if conn.slot:  # pgwire logs only a timeout after its startup packet; here, after a call
            log.info("canceling authentication due to timeout (Flight SQL, %s)", conn.peer)
        conn.gone = True
        _send_goaway(conn.protocol, b"authentication timeout")
        _close(conn.protocol, "authentication timeout")


def _send_goaway(protocol: H2Protocol, why: bytes) -> None:
    try:
        protocol.connection._connection.close_connection(additional_data=why)
        protocol.connection.flush()
    except Exception:  # h2 closed already, or the transport is: the close below is what matters
        log.debug("GOAWAY not sent", exc_info=True)


def _close(protocol: H2Protocol, reason: str) -> None:
    """grpclib's own way out (a protocol error takes it): close the transport, cancel the calls."""
    protocol.processor.close(reason)


class _Guarded(asyncio.Protocol):
    """grpclib's H2Protocol with its connection's standing kept around it."""

    def __init__(self, inner: H2Protocol, connections: Connections) -> None:
        self.inner = inner
        self.connections = connections
        self.conn: FlightConnection | None = None
        # Made at accept; under TLS connection_made comes after the handshake.
        self.accepted_at = asyncio.get_running_loop().time()

    def connection_made(self, transport: Any) -> None:
        self.inner.connection_made(transport)
        self.conn = self.connections.opened(self.inner, self.accepted_at)

    def data_received(self, data: bytes) -> None:
        if self.conn is not None and self.conn.gone:
            return  # after our GOAWAY h2 would call any frame a protocol error, and close at once
        self.inner.data_received(data)

    def eof_received(self) -> bool | None:
        return self.inner.eof_received()

    def pause_writing(self) -> None:
        self.inner.pause_writing()

    def resume_writing(self) -> None:
        self.inner.resume_writing()

    def connection_lost(self, exc: BaseException | None) -> None:
        if self.conn is not None:
            self.connections.closed(self.conn)
        self.inner.connection_lost(exc)


class GuardedServer(Server):
    """grpclib's Server whose connections are counted and timed by `connections`."""

    def __init__(self, handlers: Any, *, connections: Connections, **kwargs: Any) -> None:
        super().__init__(handlers, **kwargs)
        self.connections = connections

    def _protocol_factory(self) -> Any:
        return _Guarded(super()._protocol_factory(), self.connections)

    async def start(self, host: str | None = None, port: int | None = None, *, sock: Any = None,
                    ssl: Any = None) -> None:
        """grpclib's `start` for TCP, with a TLS handshake bounded by the authentication timeout
        (grpclib's leaves asyncio's 60 s)."""
        if self._server is not None:
            raise RuntimeError("Server is already started")
        timeout_s = self.connections.authentication_timeout_s if ssl is not None else None
        self._server = await self._loop.create_server(self._protocol_factory, host, port, sock=sock, ssl=ssl,
                                                      ssl_handshake_timeout=timeout_s)
        self._server_closed_fut = self._loop.create_future()
