"""What the pgwire session's helpers may call on a session, and what a session may call on its
server: small protocols, so that `writes`, `copy` and `transaction` never reach into `Session`
(and `session` never imports `server`)."""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING, Any, Protocol

if TYPE_CHECKING:
    from icegres.config import Settings
    from icegres.engine.lake import Engine
    from icegres.engine.query import QueryContext
    from icegres.engine.txblock_driver import TxBlock
    from icegres.pg.clock import TextSettings
    from icegres.protocol.backoff import AuthBackoff
    from icegres.protocol.limits import Slots
    from icegres.protocol.pgwire.messages import FrontendMessage
    from icegres.protocol.pgwire.tls import ServerTls, TlsInfo
    from icegres.protocol.tokens import TokenValidator


class ServerPort(Protocol):
    """The pgwire server as its sessions see it."""

    settings: Settings
    engine: Engine
    server_version: str
    tls: ServerTls | None  # --tls-cert/--tls-key loaded; None: plaintext only
    tokens: TokenValidator | None  # JWT logins (--jwt-jwks), shared by the server's sessions
    running: set[Any]  # sessions running a statement (hangup.py watches their sockets)
    slots: Slots  # --max-connections (protocol/limits.py)
    backoff: AuthBackoff  # failed-login back-off per client address (protocol/backoff.py)
    text_limiter: Any  # trio.CapacityLimiter of the threads that split big statements (statements.py)
    draining: bool  # a shutdown began: sessions end once their statement is done

    def next_pid(self) -> int: ...

    def register(self, session: Any) -> None: ...

    def unregister(self, session: Any) -> None: ...

    def sessions_of(self, user: str) -> int: ...

    def cancel(self, pid: int, secret: int) -> None:
        """A CancelRequest: cancel the session with this pid if the secret matches."""
        ...

    async def run_sync(self, fn: Callable[..., Any], *args: Any) -> Any:
        """`fn(*args)` in a worker thread behind the query limiter; cancellable."""
        ...


class ConnectionPort(Protocol):
    """A connection before its session starts: the startup packet, TLS and authentication."""

    server: ServerPort
    stream: Any  # trio.abc.Stream; replaced by the TLS stream once a handshake is done
    tls: TlsInfo | None  # set by that handshake: what was negotiated, the channel binding data
    decoder: Any  # framing.FrameDecoder
    peer: str
    client_addr: str  # the client's address, for the failed-login back-off
    user: str

    def send(self, data: bytes) -> None: ...

    async def flush(self) -> None: ...

    async def recv_more(self) -> None:
        """Read more bytes from the client into the decoder (ConnectionClosed at EOF)."""
        ...

    def channel_binding(self) -> bytes | None:
        """The tls-server-end-point channel binding data (RFC 5929) of this connection: the hash
        of the server's certificate when the connection is on TLS, None on plaintext. SCRAM
        offers SCRAM-SHA-256-PLUS only when it is not None."""
        ...


class TracePort(Protocol):
    """A session's statement records, as its helpers see them."""

    def completed(self, tag: str) -> bytes:
        """The CommandComplete for `tag`, noted as the running statement's outcome."""
        ...


class SessionPort(Protocol):
    """A session as the write path and COPY see it: its engine context, settings and
    transaction block, the messages it sends and receives, and its worker threads."""

    server: ServerPort
    qctx: QueryContext
    settings: dict[str, str]
    initial_settings: dict[str, str]  # as the startup packet left them (RESET ALL)
    block: TxBlock  # the session's transaction block (machines/txblock.py, driven here)
    portals: dict[str, Any]  # the block ends them
    cursors: dict[str, Any]  # the block ends those without HOLD
    trace: TracePort  # the running statement's record (statement_log.Trace)

    def send(self, data: bytes) -> None: ...

    async def flush(self) -> None: ...

    async def maybe_flush(self) -> None:
        """Flush if enough output is buffered (streaming results)."""
        ...

    async def next_message(self) -> FrontendMessage:
        """The client's next message (COPY data)."""
        ...

    async def in_thread(self, fn: Callable[..., Any], *args: Any) -> Any:
        """`fn(*args)` in a worker thread, with the session marked running (cancel, hang-up)."""
        ...

    def set_setting(self, key: str, value: str | None) -> str:
        """Validate and apply a SET; the name of the setting assigned."""
        ...

    def text_settings(self) -> TextSettings:
        """The settings values are rendered in (TimeZone, extra_float_digits)."""
        ...
