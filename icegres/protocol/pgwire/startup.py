"""The connection's first bytes: the startup packet and what may come before it.

A client may ask for TLS or GSSAPI encryption (SSLRequest, GSSENCRequest) before its
StartupMessage, start TLS directly (PostgreSQL 17: its first byte is a ClientHello), or send a
CancelRequest instead of one. The decisions are negotiation.py's (a pure machine); this module
reads the packets, performs its effects (answers, the TLS handshake, refusals) and hands the
session the StartupMessage, or None when the connection is done (a cancel, a failed handshake).
"""

from __future__ import annotations

import logging
from typing import TYPE_CHECKING

import trio

from icegres.pg import settings as guc
from icegres.pg.errors import PgError
from icegres.protocol.pgwire import messages as m
from icegres.protocol.pgwire import negotiation as n
from icegres.protocol.pgwire import tls

if TYPE_CHECKING:
    from icegres.protocol.pgwire.port import ConnectionPort

log = logging.getLogger("icegres.pgwire")


async def receive_startup(conn: ConnectionPort) -> m.StartupMessage | None:
    config = n.Config(tls=conn.server.tls is not None, tls_required=conn.server.settings.tls_required)
    state = n.State()
    while conn.decoder.buffered() == 0:
        await conn.recv_more()
    msg: m.StartupMessage | None = None
    event: n.Event | None = n.ClientHelloArrived() if conn.decoder.first_byte() == n.TLS_HANDSHAKE_RECORD else None
    while True:
        if event is None:
            event, msg = await _next_event(conn)
        state, effects = n.step(state, event, config)
        event = None
        for effect in effects:
            match effect:
                case n.Answer(byte=byte):
                    conn.send(byte)
                    await conn.flush()
                case n.StartTls(direct=direct):
                    assert conn.server.tls is not None
                    already = conn.decoder.take_buffered() if direct else b""
                    started = await tls.start_tls(conn.stream, conn.server.tls, already=already, direct=direct,
                                                  peer=conn.peer)
                    if started is None:
                        return None
                    conn.stream, conn.tls = started
                    event = n.HandshakeDone(conn.tls.alpn)
                case n.Refuse(error=error):
                    raise error
                case n.HangUp():
                    return None
                case n.Cancel(backend_pid=pid, secret_key=secret):
                    conn.server.cancel(pid, secret)
                    return None
                case n.Authenticate():
                    assert msg is not None
                    return msg


async def _next_event(conn: ConnectionPort) -> tuple[n.Event, m.StartupMessage | None]:
    """The next startup-phase packet as the machine's event (with the StartupMessage itself)."""
    while True:
        msg = conn.decoder.next_startup()
        if msg is not None:
            break
        await conn.recv_more()
    pipelined = conn.decoder.buffered() > 0
    if isinstance(msg, m.SSLRequest):
        return n.SSLRequested(pipelined), None
    if isinstance(msg, m.GSSENCRequest):
        return n.GSSENCRequested(pipelined), None
    if isinstance(msg, m.CancelRequest):
        return n.CancelReceived(msg.backend_pid, msg.secret_key), None
    user = msg.params.get("user", "")
    return n.StartupReceived(_client_host(conn), user, msg.params.get("database") or user), msg


def _client_host(conn: ConnectionPort) -> str:
    """The client's address as PostgreSQL writes it in an hba refusal ("127.0.0.1")."""
    sock = tls.raw_socket(conn.stream)
    try:
        return str(sock.getpeername()[0]) if sock is not None else "[local]"
    except (OSError, IndexError, TypeError):
        return "[local]"


async def initial_settings(conn: ConnectionPort, params: dict[str, str]) -> dict[str, str]:
    """The settings a session of the authenticated `conn.user` starts with (and RESET returns
    to), in PostgreSQL's order, a later source winning: the defaults, the server's own, those
    ALTER DATABASE / ALTER ROLE ... SET stored for this role in this database
    (pg_db_role_setting), then the client's: its `options` (command-line style), then the
    startup packet's parameters. A stored setting that no longer holds is skipped with a
    warning in the log, as PostgreSQL does; a client's bad one is FATAL."""
    server = conn.server
    settings = guc.defaults(server.server_version, conn.user, ssl=server.tls is not None)
    settings.update(server.engine.session_defaults)
    authorization = server.engine.authorization

    async def checked(key: str, value: str) -> guc.Change:
        # A role comes only with SET ROLE's membership check, whoever asks for it (a client's
        # `-c role=…`, a role's own ALTER ROLE … SET role): else any role could make itself any.
        change = guc.validate(key, value, settings, settings)
        if change.key == "role" and authorization is not None:
            await trio.to_thread.run_sync(authorization.check_set_role, conn.user, change.value)
        return change

    if authorization is not None:
        stored = await trio.to_thread.run_sync(authorization.session_settings, server.settings.database, conn.user)
        for key, value in stored:
            try:
                change = await checked(key.lower(), value)
            except PgError as err:
                log.warning('skipping setting "%s" of role "%s": %s', key, conn.user, err.message)
                continue
            settings[change.key] = change.value
    try:
        for key, value in guc.startup_options(params.get("options", "")):
            change = await checked(key, value)
            settings[change.key] = change.value
    except PgError as err:
        raise PgError(err.sqlstate, err.message, severity="FATAL", hint=err.hint) from None
    for key, value in params.items():
        k = key.lower()
        if k in ("user", "database", "replication", "options"):
            continue
        try:
            change = await checked(k, value)
        except PgError as err:
            if k in guc.READ_ONLY or k not in settings:
                continue  # PostgreSQL also ignores unknown startup GUCs from drivers politely
            raise PgError(err.sqlstate, err.message, severity="FATAL") from None
        settings[change.key] = change.value
    return settings
