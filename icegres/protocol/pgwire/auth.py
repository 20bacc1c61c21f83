"""Authentication of a connection that sent its StartupMessage, before any setting is applied.

Which exchange a login goes through, as one pg_hba.conf would pick it (docs/security.md):

| the startup user                    | --auth-method scram-sha-256     | --auth-method password       |
|-------------------------------------|---------------------------------|------------------------------|
| has a verifier (--password-file)    | SASL SCRAM-SHA-256 (-PLUS on TLS)| cleartext: password or a JWT |
| has none, --jwt-jwks set            | SASL OAUTHBEARER (PostgreSQL 18)| cleartext: a JWT             |
| has none, no --jwt-jwks             | SCRAM with a mock salt, failing | cleartext, failing           |
| no users and no --jwt-jwks at all   | trust (loopback only)           | trust (loopback only)        |

The messages go over the connection here; what they say is decided by the pure cores
(pg/scram.py, pg/oauthbearer.py) and tokens are judged by protocol/tokens.py. No password, proof,
verifier or token is ever logged: failures log the user, the peer and a reason.
"""

from __future__ import annotations

import logging
import secrets
from typing import TYPE_CHECKING

import trio

from icegres.pg import errors as E
from icegres.pg import oauthbearer, scram
from icegres.pg.errors import PgError
from icegres.protocol.pgwire import messages as m
from icegres.protocol.tokens import KeysUnavailable, TokenRejected, looks_like_jwt

if TYPE_CHECKING:
    from icegres.protocol.pgwire.port import ConnectionPort
    from icegres.protocol.tokens import TokenValidator

log = logging.getLogger("icegres.auth")

# PG_MAX_AUTH_TOKEN_LENGTH: the largest message a client may send before it has logged in.
AUTH_MESSAGE_BYTES_MAX = 65535 + 4
# The mock salt of users without a verifier is derived from this, stable for the process's life
# (PostgreSQL uses its cluster's mock_auth_nonce the same way).
_MOCK_SECRET = secrets.token_bytes(32)


async def authenticate(conn: ConnectionPort) -> None:
    """Return once the startup user has proved who they are; PgError (FATAL to the client)
    otherwise. Trust (no users, no tokens) returns at once: only ever allowed on loopback."""
    settings = conn.server.settings
    validator = conn.server.tokens
    authorization = conn.server.engine.authorization
    if not settings.users and validator is None:
        await _may_log_in(conn, authorization)
        return
    decoder = conn.decoder
    decoder.max_message_bytes, saved = AUTH_MESSAGE_BYTES_MAX, decoder.max_message_bytes
    # Every answer waits for this address's turn under the failed-login back-off (protocol/backoff.py);
    # an OAuth discovery round (libpq's first connection, by design refused) is no failure.
    backoff = conn.server.backoff
    try:
        verifier = settings.users.get(conn.user)
        if verifier is None and authorization is not None:
            # A role made by CREATE ROLE ... PASSWORD: its verifier is in the shared state.
            stored = await trio.to_thread.run_sync(authorization.verifier, conn.user)
            verifier = scram.parse_verifier(stored) if stored else None
        if settings.auth_method == "password":
            await _password(conn, verifier, validator)
        elif verifier is None and validator is not None:
            await _oauthbearer(conn, validator)
        else:
            await _scram(conn, verifier)
    except _Discovery:
        raise
    except PgError as err:
        if err.sqlstate in (E.INVALID_PASSWORD, E.INVALID_AUTHORIZATION):
            await backoff.before_answer(conn.client_addr)
            backoff.failed(conn.client_addr)
        raise
    finally:
        decoder.max_message_bytes = saved
    await backoff.before_answer(conn.client_addr)
    backoff.succeeded(conn.client_addr)
    await _may_log_in(conn, authorization)


async def _may_log_in(conn: ConnectionPort, authorization: object) -> None:
    """A role of the shared state without LOGIN, or at its CONNECTION LIMIT (counted on this
    server), is refused after it proved who it is, with PostgreSQL's message
    (InitializeSessionUserId)."""
    if authorization is None:
        return
    allowed, limit = await trio.to_thread.run_sync(
        lambda: (authorization.may_log_in(conn.user), authorization.connection_limit(conn.user)))  # type: ignore[attr-defined]
    if not allowed:
        raise PgError(E.INVALID_AUTHORIZATION, f'role "{conn.user}" is not permitted to log in')
    if 0 <= limit <= conn.server.sessions_of(conn.user):  # (its own session is not counted yet)
        raise PgError(E.TOO_MANY_CONNECTIONS, f'too many connections for role "{conn.user}"')


class _Discovery(PgError):
    """The refusal that ends an OAUTHBEARER discovery round (the client asked where to log in)."""


def _password_failed(conn: ConnectionPort, reason: str) -> PgError:
    log.warning('password authentication failed for user "%s" from %s: %s', conn.user, conn.peer, reason)
    return PgError(E.INVALID_PASSWORD, f'password authentication failed for user "{conn.user}"')


async def _scram(conn: ConnectionPort, verifier: scram.Verifier | None) -> None:
    binding = conn.channel_binding()
    offered = [scram.MECHANISM_PLUS, scram.MECHANISM] if binding is not None else [scram.MECHANISM]
    conn.send(m.auth_sasl(offered))
    await conn.flush()
    first = m.decode_sasl_initial(await _expect_p(conn))
    if first.mechanism not in offered:
        raise PgError(E.PROTOCOL_VIOLATION, "client selected an invalid SASL authentication mechanism")
    # A user without a verifier still gets a whole exchange, with a salt that does not change
    # between attempts: an unknown user and a wrong password look the same from outside.
    exchange = scram.ServerExchange(
        first.mechanism, verifier or scram.mock_verifier(conn.user, _MOCK_SECRET), binding,
        doomed=verifier is None,
    )
    data = first.data if first.data is not None else await _challenge(conn, b"")
    conn.send(m.auth_sasl_continue(exchange.client_first(data)))
    await conn.flush()
    final = exchange.client_final(m.decode_sasl_response(await _expect_p(conn)).data)
    if final is None:
        raise _password_failed(conn, "no verifier for the user" if verifier is None else "wrong SCRAM proof")
    conn.send(m.auth_sasl_final(final))


async def _password(conn: ConnectionPort, verifier: scram.Verifier | None,
                    validator: TokenValidator | None) -> None:
    conn.send(m.AUTH_CLEARTEXT)
    await conn.flush()
    password = m.decode_password(await _expect_p(conn))
    if not password:
        raise _password_failed(conn, "empty password")
    if validator is not None and looks_like_jwt(password):
        try:
            role = await validator.role(password, _in_thread)
        except TokenRejected as err:
            raise _password_failed(conn, f"token rejected: {err.reason}") from None
        except KeysUnavailable as err:
            log.warning('authentication failed for user "%s" from %s: the JWKS could not be read (%s)',
                        conn.user, conn.peer, err)
            raise PgError(E.INVALID_AUTHORIZATION,
                          f'authentication failed for user "{conn.user}": the token could not be checked') from None
        if role != conn.user:
            raise _password_failed(conn, f"the token's role is {role!r}")
        return
    # PBKDF2 (4096 rounds, ~2 ms): off the event loop, so a burst of logins stalls no session.
    if verifier is None or not await trio.to_thread.run_sync(scram.verify_plain, verifier, password):
        raise _password_failed(conn, "no verifier for the user" if verifier is None else "wrong password")


async def _oauthbearer(conn: ConnectionPort, validator: TokenValidator) -> None:
    conn.send(m.auth_sasl([oauthbearer.MECHANISM]))
    await conn.flush()
    first = m.decode_sasl_initial(await _expect_p(conn))
    if first.mechanism != oauthbearer.MECHANISM:
        raise PgError(E.PROTOCOL_VIOLATION, "client selected an invalid SASL authentication mechanism")
    data = first.data if first.data is not None else await _challenge(conn, b"")
    response = oauthbearer.parse_initial_response(data)
    reason = await _judge_bearer(conn, validator, response)
    if reason is None:
        return  # success carries no AuthenticationSASLFinal data in OAUTHBEARER
    config = validator.config
    ack = await _challenge(conn, oauthbearer.error_response(config.issuer, conn.server.settings.oauth_scope))
    oauthbearer.check_error_ack(ack)
    message = f'OAuth bearer authentication failed for user "{conn.user}"'
    if response.discovery:
        log.debug('OAuth issuer discovery requested by user "%s" from %s', conn.user, conn.peer)
        raise _Discovery(E.INVALID_AUTHORIZATION, message)
    log.warning('OAuth bearer authentication failed for user "%s" from %s: %s', conn.user, conn.peer, reason)
    raise PgError(E.INVALID_AUTHORIZATION, message)


async def _judge_bearer(conn: ConnectionPort, validator: TokenValidator,
                        response: oauthbearer.InitialResponse) -> str | None:
    """None when the response carries a token naming the user, else why not (for the log)."""
    if response.discovery:
        return "discovery"
    token = response.bearer_token()
    if token is None:
        return "malformed bearer token"
    try:
        role = await validator.role(token, _in_thread)
    except TokenRejected as err:
        return f"token rejected: {err.reason}"
    except KeysUnavailable as err:
        return f"the JWKS could not be read ({err})"
    return None if role == conn.user else f"the token's role is {role!r}"


async def _challenge(conn: ConnectionPort, data: bytes) -> bytes:
    """Send AuthenticationSASLContinue with `data`; the client's SASLResponse."""
    conn.send(m.auth_sasl_continue(data))
    await conn.flush()
    return m.decode_sasl_response(await _expect_p(conn)).data


async def _expect_p(conn: ConnectionPort) -> m.PasswordMessage:
    msg = await _next_message(conn)
    if not isinstance(msg, m.PasswordMessage):
        # PostgreSQL: "expected password response, got message type %d" (and SASL response).
        raise PgError(E.PROTOCOL_VIOLATION, "expected password response")
    return msg


async def _in_thread(fn) -> None:
    # Token checks may read the JWKS (a URL: up to tokens.FETCH_TIMEOUT_S): a worker thread of
    # its own, not the query limiter's, so neither queries nor logins wait on each other.
    await trio.to_thread.run_sync(fn, abandon_on_cancel=True)


async def _next_message(conn: ConnectionPort) -> m.FrontendMessage:
    while True:
        msg = conn.decoder.next_message()
        if msg is not None:
            return msg
        await conn.recv_more()
