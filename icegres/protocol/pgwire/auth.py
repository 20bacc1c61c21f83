"""Authentication of a connection that sent its StartupMessage, before any setting is applied."""

from __future__ import annotations

import hmac
from typing import TYPE_CHECKING

from icegres.pg import errors as E
from icegres.pg.errors import PgError
from icegres.protocol.pgwire import messages as m

if TYPE_CHECKING:
    from icegres.protocol.pgwire.port import ConnectionPort


async def authenticate(conn: ConnectionPort) -> None:
    users = conn.server.settings.users
    if not users:
        return  # trust: only ever allowed on loopback (checked at server start)
    conn.send(m.AUTH_CLEARTEXT)
    await conn.flush()
    msg = await _next_message(conn)
    if not isinstance(msg, m.PasswordMessage):
        raise PgError(E.PROTOCOL_VIOLATION, "expected password response")
    given = msg.password.rstrip(b"\0")
    expected = users.get(conn.user)
    ok = expected is not None and hmac.compare_digest(given, expected.encode())
    # The answer waits for this address's turn under the failed-login back-off (backoff.py).
    backoff = conn.server.backoff
    await backoff.before_answer(conn.client_addr)
    if not ok:
        backoff.failed(conn.client_addr)
        raise PgError(E.INVALID_PASSWORD, f'password authentication failed for user "{conn.user}"')
    backoff.succeeded(conn.client_addr)


async def _next_message(conn: ConnectionPort) -> m.FrontendMessage:
    while True:
        msg = conn.decoder.next_message()
        if msg is not None:
            return msg
        await conn.recv_more()
