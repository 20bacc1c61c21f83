"""The connection's first bytes: the startup packet and what may come before it.

A client may ask for TLS or GSSAPI encryption (SSLRequest, GSSENCRequest) before its
StartupMessage, or send a CancelRequest instead of one. This module answers those and hands the
session the StartupMessage, or None when the connection carried a cancel and is done.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from icegres.protocol.pgwire import messages as m

if TYPE_CHECKING:
    from icegres.protocol.pgwire.port import ConnectionPort


async def receive_startup(conn: ConnectionPort) -> m.StartupMessage | None:
    while True:
        msg = conn.decoder.next_startup()
        if msg is None:
            await conn.recv_more()
            continue
        if isinstance(msg, m.SSLRequest | m.GSSENCRequest):
            # No TLS yet: 'N' tells the client to continue in plaintext on this connection.
            conn.send(b"N")
            await conn.flush()
            continue
        if isinstance(msg, m.CancelRequest):
            conn.server.cancel(msg.backend_pid, msg.secret_key)
            return None
        return msg
