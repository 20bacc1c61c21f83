"""TLS for pgwire: the server's context, the handshake (trio's SSLStream, in-process), and what a
session knows about its TLS afterwards.

The handshake runs on the trio loop like any other I/O of the connection, under a deadline of
its own (HANDSHAKE_TIMEOUT_S), so a client that opens a socket, asks for TLS and then says
nothing, or sends half a ClientHello, costs one sleeping task until then and never delays
another session. It sits inside whatever deadline the server puts on a connection's start-up.
"""

from __future__ import annotations

import logging
import ssl
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import trio

from icegres.pg.channel_binding import tls_server_end_point
from icegres.protocol.pgwire.negotiation import ALPN_POSTGRESQL
from icegres.tls import TlsConfigError, certificate_der, server_context

if TYPE_CHECKING:
    from icegres.config import Settings

log = logging.getLogger("icegres.pgwire")

HANDSHAKE_TIMEOUT_S = 10.0  # a TLS handshake takes a few round trips; a stalled one is dropped
CLOSE_NOTIFY_TIMEOUT_S = 1.0  # sending close_notify to a client that stopped reading gives up


@dataclass(frozen=True)
class ServerTls:
    """The pgwire server's TLS: its context (ALPN `postgresql`) and its certificate's DER bytes."""

    context: ssl.SSLContext
    cert_der: bytes

    @classmethod
    def load(cls, settings: Settings) -> ServerTls | None:
        """From --tls-cert/--tls-key (the same files Flight SQL serves); None without them. A file
        that cannot be used stops the server with its reason."""
        if not (settings.tls_cert and settings.tls_key):
            return None
        try:
            return cls(server_context(settings.tls_cert, settings.tls_key, alpn=(ALPN_POSTGRESQL,)),
                       certificate_der(settings.tls_cert))
        except TlsConfigError as exc:
            raise SystemExit(f"icegres: {exc}") from None


@dataclass(frozen=True)
class TlsInfo:
    """A session's TLS, once its handshake is done (`Session.tls`; None on a plaintext one)."""

    version: str  # "TLSv1.3"
    cipher: str
    bits: int
    alpn: str | None  # "postgresql" when the client offered it
    direct: bool  # PostgreSQL 17's direct negotiation (no SSLRequest)
    server_cert_der: bytes  # the certificate the server presented

    def channel_binding(self) -> bytes | None:
        """SCRAM-SHA-256-PLUS's tls-server-end-point data for this connection (RFC 5929). None
        for a certificate whose signature names no single hash (RSASSA-PSS, Ed25519): it has no
        such data, and SCRAM is then offered without -PLUS on this connection."""
        try:
            return tls_server_end_point(self.server_cert_der)
        except ValueError:
            return None


class _Replaying(trio.abc.Stream):
    """A transport that first returns bytes already read from it: a direct ClientHello arrives
    before we know it is one, so the framing buffer hands it back to the TLS layer."""

    def __init__(self, stream: trio.abc.Stream, already: bytes) -> None:
        self.transport_stream = stream
        self._already = already

    async def receive_some(self, max_bytes: int | None = None) -> bytes:
        if self._already:
            n = len(self._already) if max_bytes is None else max_bytes
            data, self._already = self._already[:n], self._already[n:]
            return data
        return await self.transport_stream.receive_some(max_bytes)

    async def send_all(self, data: bytes | bytearray | memoryview) -> None:
        await self.transport_stream.send_all(data)

    async def wait_send_all_might_not_block(self) -> None:
        await self.transport_stream.wait_send_all_might_not_block()

    async def aclose(self) -> None:
        await self.transport_stream.aclose()


class TlsConnection(trio.abc.Stream):
    """A session's stream once TLS is on: trio's SSLStream, closed the way PostgreSQL closes
    (close_notify, then the socket) but never waiting long on a client that stopped reading:
    a session's close runs shielded from cancellation."""

    def __init__(self, tls: trio.SSLStream) -> None:
        self.tls_stream = tls
        self.transport_stream = tls.transport_stream

    async def receive_some(self, max_bytes: int | None = None) -> bytes:
        return await self.tls_stream.receive_some(max_bytes)

    async def send_all(self, data: bytes | bytearray | memoryview) -> None:
        await self.tls_stream.send_all(data)

    async def wait_send_all_might_not_block(self) -> None:
        await self.tls_stream.wait_send_all_might_not_block()

    async def aclose(self) -> None:
        with trio.move_on_after(CLOSE_NOTIFY_TIMEOUT_S):
            try:
                await self.tls_stream.aclose()
                return
            except (trio.BrokenResourceError, trio.ClosedResourceError, OSError):
                pass
        await trio.aclose_forcefully(self.transport_stream)


def raw_socket(stream: Any) -> Any:
    """The socket under `stream` and any TLS layers over it, or None (a test's memory stream)."""
    while stream is not None and getattr(stream, "socket", None) is None:
        stream = getattr(stream, "transport_stream", None)
    return None if stream is None else stream.socket


async def start_tls(stream: trio.abc.Stream, server: ServerTls, *, already: bytes = b"",
                    direct: bool = False, peer: str = "?") -> tuple[TlsConnection, TlsInfo] | None:
    """The server side of a TLS handshake over `stream` (`already`: bytes of it read before we
    knew they were TLS). The TLS stream and what was negotiated, or None if the handshake failed
    or took longer than HANDSHAKE_TIMEOUT_S (the caller closes the connection; nothing can be
    said to a client whose handshake failed)."""
    transport: trio.abc.Stream = _Replaying(stream, already) if already else stream
    tls = trio.SSLStream(transport, server.context, server_side=True)
    with trio.move_on_after(HANDSHAKE_TIMEOUT_S) as deadline:
        try:
            await tls.do_handshake()
        except (trio.BrokenResourceError, trio.ClosedResourceError) as exc:
            cause = exc.__cause__ or exc
            log.info("TLS handshake with %s failed: %s", peer, cause)
            return None
    if deadline.cancelled_caught:
        log.info("TLS handshake with %s did not finish within %s s", peer, HANDSHAKE_TIMEOUT_S)
        return None
    version, cipher = tls.version() or "", tls.cipher() or ("", "", 0)
    info = TlsInfo(version=version, cipher=cipher[0], bits=int(cipher[2] or 0),
                   alpn=tls.selected_alpn_protocol(), direct=direct, server_cert_der=server.cert_der)
    log.debug("TLS with %s: %s %s, ALPN %s, %s", peer, info.version, info.cipher, info.alpn,
              "direct" if direct else "after SSLRequest")
    return TlsConnection(tls), info
