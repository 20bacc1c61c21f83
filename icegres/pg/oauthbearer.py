"""The OAUTHBEARER SASL mechanism (RFC 7628) as PostgreSQL 18's server speaks it (auth-oauth.c).

Pure: the client's messages in, what the server answers out. Token validation itself is the
caller's (protocol/tokens.py); this module only takes the exchange apart and puts the answers
together:

    client: n,,\\x01auth=Bearer <token>\\x01\\x01      (an empty auth= asks for discovery)
    server: AuthenticationSASLFinal on success, or on failure an AuthenticationSASLContinue with
            {"status":"invalid_token","openid-configuration":"<issuer>/.well-known/...","scope":"..."}
    client: \\x01                                     (the RFC's dummy reply to an error)
    server: ErrorResponse 28000
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass

from icegres.pg.errors import PgError

MECHANISM = "OAUTHBEARER"
MESSAGE_BYTES_MAX = 65535  # PG_MAX_AUTH_TOKEN_LENGTH
KVSEP = "\x01"

_PROTOCOL_VIOLATION = "08P01"
_FEATURE_NOT_SUPPORTED = "0A000"
_KEY = re.compile(r"[A-Za-z]+")
_VALUE = re.compile(r"[\x21-\x7e \t\r\n]*")
# RFC 6750 section 2.1: credentials = "Bearer" 1*SP b64token, the scheme case-insensitive.
_BEARER = re.compile(r"(?i:bearer) +([A-Za-z0-9\-._~+/]+=*)")


def _malformed(detail: str) -> PgError:
    return PgError(_PROTOCOL_VIOLATION, "malformed OAUTHBEARER message", detail=detail)


@dataclass(frozen=True)
class InitialResponse:
    """The client's first message, taken apart. `auth` is the whole auth= value: empty for a
    discovery request, else (if well formed) `Bearer <token>`."""

    auth: str

    @property
    def discovery(self) -> bool:
        return self.auth == ""

    def bearer_token(self) -> str | None:
        """The token of a well-formed `Bearer <b64token>` value, else None (a malformed token is
        a failed login, not a protocol error: its text is never echoed back or logged)."""
        found = _BEARER.fullmatch(self.auth)
        return found.group(1) if found else None


def parse_initial_response(data: bytes) -> InitialResponse:
    """The client-initial-response (gs2 header, kvsep, key=value pairs, kvsep), as PostgreSQL
    checks it; a malformed one raises PgError 08P01 (0A000 for an authzid)."""
    if not data:
        raise _malformed("The message is empty.")
    if len(data) > MESSAGE_BYTES_MAX:
        raise _malformed("The message is too long.")
    if b"\0" in data:
        raise _malformed("Message length does not match input length.")
    text = data.decode("latin-1")
    flag = text[:1]
    if flag == "p":
        raise _malformed("The server does not support channel binding for OAuth, but the client message "
                         "includes channel binding data.")
    if flag not in ("n", "y"):
        raise _malformed(f"Unexpected channel-binding flag \"{_sanitize(flag)}\".")
    if text[1:2] != ",":
        raise _malformed(f"Comma expected, but found character \"{_sanitize(text[1:2])}\".")
    rest = text[2:]
    if rest.startswith("a"):
        raise PgError(_FEATURE_NOT_SUPPORTED, "client uses authorization identity, but it is not supported")
    if not rest.startswith(","):
        raise _malformed(f"Unexpected attribute \"{_sanitize(rest[:1])}\" in client-first-message.")
    rest = rest[1:]
    if not rest.startswith(KVSEP):
        raise _malformed(f"Key-value separator expected, but found character \"{_sanitize(rest[:1])}\".")
    rest = rest[1:]
    auth: str | None = None
    while True:
        end = rest.find(KVSEP)
        if end < 0:
            if rest:
                raise _malformed("Message contains an unterminated key/value pair.")
            raise _malformed("Message did not contain a final terminator.")
        pair, rest = rest[:end], rest[end + 1:]
        if not pair:
            break  # the empty pair ends the list
        key, sep, value = pair.partition("=")
        if not sep:
            raise _malformed("Message contains a key without a value.")
        if not key:
            raise _malformed("Message contains an empty key name.")
        if not _KEY.fullmatch(key):
            raise _malformed("Message contains an invalid key name.")
        if not _VALUE.fullmatch(value):
            raise _malformed("Message contains an invalid value.")
        if key == "auth":
            if auth is not None:
                raise _malformed("Message contains multiple auth values.")
            auth = value
        # host= and port= (and anything unknown) are ignored, as RFC 7628 section 3.1 says.
    if auth is None:
        raise _malformed("Message does not contain an auth value.")
    if rest:
        raise _malformed("Message contains additional data after the final terminator.")
    return InitialResponse(auth)


def error_response(issuer: str, scope: str) -> bytes:
    """The server's failure answer (RFC 7628 section 3.2.2), pointing at the issuer's discovery
    document (a libpq 18 client checks that it names the issuer it was configured with)."""
    # As PostgreSQL builds it: the issuer as configured, suffix appended (libpq compares the issuer
    # it derives from this URI with its oauth_issuer byte for byte).
    discovery = issuer if "/.well-known/" in issuer else issuer + "/.well-known/openid-configuration"
    return json.dumps({"status": "invalid_token", "openid-configuration": discovery, "scope": scope}).encode()


def check_error_ack(data: bytes) -> None:
    """After an error response the only valid client message is a single kvsep."""
    if data != KVSEP.encode():
        raise _malformed("Client did not send a kvsep response.")


def _sanitize(text: str) -> str:
    return "".join(f"'{c}'" if 0x21 <= ord(c) <= 0x7E else f"0x{ord(c):02x}" for c in text[:1]) or "0x00"
