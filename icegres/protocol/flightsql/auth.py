"""Who a Flight SQL call comes from: Basic credentials, a bearer token we issued, or a JWT.

The same users and tokens as pgwire (docs/security.md, "Authentication"): Basic credentials are
checked against the users' SCRAM verifiers (a plain password verifies against one, as PostgreSQL's
`password` method does), a Basic password that is a JWT and `authorization: Bearer <JWT>` are
checked by protocol/tokens.py, whose role claim is then the user.

Basic auth may come on every call (clients that skip the Handshake): its PBKDF2 (~2 ms) runs in a
worker thread, and a success is remembered under an HMAC of the credentials with a key of this
process, so that the next call with them costs a dictionary lookup and the password is kept
nowhere. Failures log the user, the peer and a reason; never a password or token.

Every check of credentials (Basic, remembered or not; a JWT; a bearer token we never issued) is
answered in its client address's turn under the failed-login back-off (protocol/backoff.py), the
table pgwire's logins use in the same process, and counts as a failure or a success there. A
remembered Basic success waits its turn too: otherwise a guesser could tell a right password that
another client logged in with by its quick answer, and give up on every slower one. A bearer token
we issued is a login already made (a session, as an open pgwire connection is) and does not wait.
Refusals without a secret in them (no or malformed credentials) are not counted, as pgwire counts
no protocol violation.
"""

from __future__ import annotations

import asyncio
import base64
import binascii
import hashlib
import hmac
import logging
import secrets
from collections.abc import Awaitable, Callable
from typing import TYPE_CHECKING, Any

import trio
from grpclib.const import Status
from grpclib.exceptions import GRPCError

from icegres.pg.scram import parse_verifier, verify_plain
from icegres.protocol.flightsql.sessions import TOKENS_MAX, Bounded
from icegres.protocol.tokens import KeysUnavailable, TokenRejected, looks_like_jwt

if TYPE_CHECKING:
    from icegres.config import Settings
    from icegres.protocol.backoff import AuthBackoff
    from icegres.protocol.tokens import TokenValidator

log = logging.getLogger("icegres.auth")

CHECKED_MAX = 1024  # remembered Basic credentials (HMACs), least recently used forgotten


def _unauthenticated(message: str, sqlstate: str) -> GRPCError:
    return GRPCError(Status.UNAUTHENTICATED, f"{message} (SQLSTATE {sqlstate})")


async def _in_thread(fn: Callable[[], object]) -> object:
    # The loop's executor, not the query limiter: a login never waits behind running queries.
    return await asyncio.get_running_loop().run_in_executor(None, fn)


class FlightAuth:
    """The service's authenticator: `required` unless the server runs trust (loopback only).

    `addr` is the client's IP address (what the back-off counts by), `peer` its address and port
    as the log shows them."""

    def __init__(self, settings: Settings, tokens: TokenValidator | None, backoff: AuthBackoff,
                 authorization: Any = None) -> None:
        self.users = settings.users
        # The roles of the shared state (engine/authz.py): their verifiers and LOGIN attribute.
        self.authorization = authorization
        self.tokens = tokens
        self.backoff = backoff
        self.required = bool(self.users) or tokens is not None
        self._issued: Bounded[str, str] = Bounded(TOKENS_MAX)
        self._checked: Bounded[bytes, str] = Bounded(CHECKED_MAX)
        self._key = secrets.token_bytes(32)

    def issue(self, user: str) -> str:
        """A bearer token for `user` (the Handshake's answer), valid while remembered."""
        token = secrets.token_urlsafe(32)
        self._issued.put(token, user)
        return token

    def issued(self, token: str) -> str | None:
        return self._issued.get(token)

    async def basic(self, value: str, addr: str, peer: str) -> str:
        """The user a `Basic <base64 user:password>` value names, if the password is right;
        answered in `addr`'s turn under the back-off."""
        token = value.strip()
        try:
            # The Go client (ADBC) strips the base64 padding: put it back before decoding.
            raw = base64.b64decode(token + "=" * (-len(token) % 4), validate=True).decode()
        except (binascii.Error, UnicodeDecodeError, ValueError):
            raise _unauthenticated("malformed Basic credentials", "28000") from None
        user, sep, password = raw.partition(":")
        if not sep or not user:
            raise _unauthenticated("malformed Basic credentials", "28000")
        if not self.required:
            await self._may_log_in(user)
            return user  # trust: only ever on loopback (checked at server start), as in pgwire
        checked = await self._judged(addr, self._check_basic(user, password, peer))
        await self._may_log_in(checked)
        return checked

    async def _may_log_in(self, user: str) -> None:
        if self.authorization is not None and not await _in_thread(lambda: self.authorization.may_log_in(user)):
            raise _unauthenticated(f'role "{user}" is not permitted to log in', "28000")

    async def _check_basic(self, user: str, password: str, peer: str) -> str:
        if self.tokens is not None and looks_like_jwt(password):
            role = await self._token_role(password, peer)
            if role != user:
                log.warning('Flight SQL: token of role %r refused for user "%s" from %s', role, user, peer)
                raise _unauthenticated(f'password authentication failed for user "{user}"', "28P01")
            return user
        verifier = self.users.get(user)
        stored = ""
        if verifier is None and self.authorization is not None:
            # A role made by CREATE ROLE ... PASSWORD; its verifier is part of the memo's key, so
            # an ALTER ROLE ... PASSWORD retires what the old password was accepted for.
            stored = await _in_thread(lambda: self.authorization.verifier(user)) or ""
            verifier = parse_verifier(stored) if stored else None
        mark = hmac.digest(self._key, user.encode() + b"\0" + password.encode() + b"\0" + stored.encode(), "sha256")
        if self._checked.get(mark) == user:
            return user
        if verifier is None or not await _in_thread(lambda: verify_plain(verifier, password)):
            log.warning('Flight SQL: password authentication failed for user "%s" from %s', user, peer)
            raise _unauthenticated(f'password authentication failed for user "{user}"', "28P01")
        self._checked.put(mark, user)
        return user

    async def bearer(self, token: str, addr: str, peer: str) -> tuple[str, str] | None:
        """(session key, user) of a bearer token: one we issued, or a valid JWT. None when it is
        neither and authentication is off (trust)."""
        user = self._issued.get(token)
        if user is not None:
            return "token:" + token, user
        if self.tokens is not None and looks_like_jwt(token):
            role = await self._judged(addr, self._token_role(token, peer))
            # The session is named by a digest: the token itself is no dictionary key of ours.
            return "jwt:" + hashlib.sha256(token.encode()).hexdigest()[:32], role
        if self.required:
            log.warning("Flight SQL: bearer token from %s refused: not one this server issued (or forgotten)", peer)
            await self._answer(addr, ok=False)
            raise _unauthenticated("invalid or expired bearer token", "28000")
        return None

    async def _token_role(self, token: str, peer: str) -> str:
        assert self.tokens is not None
        try:
            return await self.tokens.role(token, _in_thread)
        except TokenRejected as err:
            log.warning("Flight SQL: bearer token from %s refused: %s", peer, err.reason)
            raise _unauthenticated("invalid or expired bearer token", "28000") from None
        except KeysUnavailable as err:
            log.warning("Flight SQL: bearer token from %s not checked: the JWKS could not be read (%s)", peer, err)
            raise _unauthenticated("the bearer token could not be checked", "28000") from None

    # --- the failed-login back-off ---------------------------------------------------------------

    async def _judged(self, addr: str, check: Awaitable[str]) -> str:
        """`check`'s user, or its UNAUTHENTICATED, answered in `addr`'s turn and counted (an
        unreadable JWKS too, as pgwire counts it)."""
        try:
            user = await check
        except GRPCError:
            await self._answer(addr, ok=False)
            raise
        await self._answer(addr, ok=True)
        return user

    async def _answer(self, addr: str, ok: bool) -> None:
        """Wait for `addr`'s turn, then record the answer (no await in between: backoff.py).

        The table is kept at trio's clock, as pgwire keeps it: trio-asyncio's loop runs inside
        trio, so the clock is readable from this asyncio handler. The wait is an asyncio sleep in
        the call's own task, never a thread's; the loop re-checks the clock because an asyncio
        timer may fire a little before its time."""
        at = self.backoff.book(addr, trio.current_time())
        while (left_s := at - trio.current_time()) > 0:
            await asyncio.sleep(left_s)
        self.backoff.record(addr, ok, trio.current_time())
