"""SCRAM-SHA-256 as PostgreSQL speaks it (RFC 5802, RFC 7677): verifiers and the server's exchange.

Pure: bytes and strings in, bytes out, no I/O and no clock. The pgwire front end
(protocol/pgwire/auth.py) moves the messages; this module decides what they say.

A verifier is PostgreSQL's `rolpassword` format, `SCRAM-SHA-256$<iterations>:<salt>$<StoredKey>:
<ServerKey>` (base64 fields), so a verifier made by PostgreSQL works here and the other way round.
The server never holds the password: StoredKey checks the client's proof, ServerKey signs the
server's answer, and a plain password (the `password` method, Flight SQL's Basic auth) is checked by
deriving ServerKey from it with the verifier's salt and iterations, as PostgreSQL's
scram_verify_plain_password does.
"""

from __future__ import annotations

import base64
import binascii
import hashlib
import hmac
import secrets
import stringprep
import unicodedata
from dataclasses import dataclass, field
from enum import Enum

from icegres.pg.errors import PgError

MECHANISM = "SCRAM-SHA-256"
MECHANISM_PLUS = "SCRAM-SHA-256-PLUS"
CHANNEL_BINDING_TYPE = "tls-server-end-point"  # the only one PostgreSQL implements (RFC 5929)
ITERATIONS_DEFAULT = 4096  # PostgreSQL's scram_iterations default
SALT_BYTES = 16  # SCRAM_DEFAULT_SALT_LEN
NONCE_BYTES = 18  # SCRAM_RAW_NONCE_LEN
KEY_BYTES = 32  # SHA-256
MESSAGE_BYTES_MAX = 1024  # PG_MAX_SASL_MESSAGE_LENGTH: a longer SCRAM message is refused unread

_PROTOCOL_VIOLATION = "08P01"
_FEATURE_NOT_SUPPORTED = "0A000"


# --- verifiers -------------------------------------------------------------------------------


@dataclass(frozen=True)
class Verifier:
    """What the server stores for one user. repr shows no key material."""

    iterations: int
    salt: bytes = field(repr=False)
    stored_key: bytes = field(repr=False)
    server_key: bytes = field(repr=False)

    def format(self) -> str:
        """PostgreSQL's rolpassword text for this verifier."""
        b64 = _b64
        return (f"{MECHANISM}${self.iterations}:{b64(self.salt)}"
                f"${b64(self.stored_key)}:{b64(self.server_key)}")


def parse_verifier(text: str) -> Verifier | None:
    """A `SCRAM-SHA-256$<iter>:<salt>$<StoredKey>:<ServerKey>` text as a Verifier; None when the
    text is not in that format (then it is a plain password to the caller)."""
    scheme, sep, rest = text.partition("$")
    if scheme != MECHANISM or not sep:
        return None
    head, sep, keys = rest.partition("$")
    iterations_text, sep1, salt_text = head.partition(":")
    stored_text, sep2, server_text = keys.partition(":")
    if not (sep and sep1 and sep2) or not iterations_text.isdigit():
        return None
    try:
        salt = _unb64(salt_text)
        stored, server = _unb64(stored_text), _unb64(server_text)
    except ValueError:
        return None
    iterations = int(iterations_text)
    if iterations < 1 or not salt or len(stored) != KEY_BYTES or len(server) != KEY_BYTES:
        return None
    return Verifier(iterations, salt, stored, server)


def make_verifier(password: str, *, salt: bytes | None = None,
                  iterations: int = ITERATIONS_DEFAULT) -> Verifier:
    """The verifier of `password` (SASLprep'd as PostgreSQL does), with a fresh random salt unless
    one is given. PBKDF2 at 4096 iterations costs a few ms: call it at start-up or off the loop."""
    salt = secrets.token_bytes(SALT_BYTES) if salt is None else salt
    salted = salted_password(password, salt, iterations)
    return Verifier(iterations, salt, _h(client_key(salted)), server_key(salted))


def verify_plain(verifier: Verifier, password: str) -> bool:
    """Whether `password` is the one `verifier` was made from (constant-time comparison)."""
    salted = salted_password(password, verifier.salt, verifier.iterations)
    return hmac.compare_digest(server_key(salted), verifier.server_key)


def mock_verifier(user: str, server_secret: bytes, iterations: int = ITERATIONS_DEFAULT) -> Verifier:
    """A verifier for a user who has none, so that the exchange looks the same as for a real one.

    As PostgreSQL's scram_mock_salt: the salt is a hash of the user name and a per-server secret,
    stable across attempts (a probing client sees the same salt each time, as for a real user),
    and the keys are random, so no proof ever matches."""
    salt = hashlib.sha256(user.encode("utf-8", "surrogateescape") + server_secret).digest()[:SALT_BYTES]
    return Verifier(iterations, salt, secrets.token_bytes(KEY_BYTES), secrets.token_bytes(KEY_BYTES))


# --- the primitives (RFC 5802 section 3) ----------------------------------------------------------


def salted_password(password: str, salt: bytes, iterations: int) -> bytes:
    return hashlib.pbkdf2_hmac("sha256", saslprep(password), salt, iterations)


def client_key(salted: bytes) -> bytes:
    return hmac.digest(salted, b"Client Key", "sha256")


def server_key(salted: bytes) -> bytes:
    return hmac.digest(salted, b"Server Key", "sha256")


def client_proof(salted: bytes, auth_message: bytes) -> bytes:
    """What a client sends as p=: ClientKey XOR HMAC(StoredKey, AuthMessage)."""
    key = client_key(salted)
    return _xor(key, hmac.digest(_h(key), auth_message, "sha256"))


def server_signature(key: bytes, auth_message: bytes) -> bytes:
    return hmac.digest(key, auth_message, "sha256")


def _h(data: bytes) -> bytes:
    return hashlib.sha256(data).digest()


def _xor(a: bytes, b: bytes) -> bytes:
    return bytes(x ^ y for x, y in zip(a, b, strict=True))


def _b64(data: bytes) -> str:
    return base64.b64encode(data).decode("ascii")


def _unb64(text: str) -> bytes:
    try:
        return base64.b64decode(text.encode("ascii"), validate=True)
    except (binascii.Error, UnicodeEncodeError):
        raise ValueError("not base64") from None


# --- SASLprep (RFC 4013), as PostgreSQL's pg_saslprep --------------------------------------------

_PROHIBITED = (
    stringprep.in_table_c12, stringprep.in_table_c21_c22, stringprep.in_table_c3, stringprep.in_table_c4,
    stringprep.in_table_c5, stringprep.in_table_c6, stringprep.in_table_c7, stringprep.in_table_c8,
    stringprep.in_table_c9, stringprep.in_table_a1,
)


def saslprep(password: str) -> bytes:
    """The bytes hashed for `password`. PostgreSQL (server and libpq alike) SASLpreps a password
    and, when that fails (a prohibited or unassigned character, bad bidi), uses the raw bytes: so
    a password that cannot be prepared still works, identically on both sides. Pure ASCII skips
    the preparation entirely, as pg_saslprep's fast path does (control characters included)."""
    raw = password.encode("utf-8", "surrogateescape")
    if password.isascii():
        return raw
    prepared = _saslprep(password)
    return raw if prepared is None else prepared.encode("utf-8")


def _saslprep(text: str) -> str | None:
    mapped = "".join(" " if stringprep.in_table_c12(c) else c for c in text if not stringprep.in_table_b1(c))
    normal = unicodedata.normalize("NFKC", mapped)
    if not normal:
        return None
    if any(check(c) for c in normal for check in _PROHIBITED):
        return None
    if any(stringprep.in_table_d1(c) for c in normal):
        # Bidi (RFC 3454 section 6): RandALCat strings have no LCat and start and end RandALCat.
        if any(stringprep.in_table_d2(c) for c in normal):
            return None
        if not (stringprep.in_table_d1(normal[0]) and stringprep.in_table_d1(normal[-1])):
            return None
    return normal


# --- the server's exchange -----------------------------------------------------------------------


class Step(Enum):
    """Where a ServerExchange is: it expects the client-first-message, then the client-final-
    message, then it is done (one way or the other)."""

    CLIENT_FIRST = "client-first"
    CLIENT_FINAL = "client-final"
    DONE = "done"


def _malformed(detail: str) -> PgError:
    return PgError(_PROTOCOL_VIOLATION, "malformed SCRAM message", detail=detail)


@dataclass
class ServerExchange:
    """One SCRAM exchange, server side, as PostgreSQL's auth-scram.c runs it.

    `mechanism` is what the client chose from the mechanisms we offered; `channel_binding` is the
    tls-server-end-point data of this connection (None on plaintext: then we offered no -PLUS, and
    a client that asks for it is refused). `verifier` is the user's, or a mock one (`doomed`) for
    a user without one: the exchange runs to the end and fails there, as PostgreSQL's does, so a
    client cannot tell an unknown user from a wrong password.

    `client_first` and `client_final` return the server's next message; a protocol error raises
    PgError (08P01, or 0A000 for what PostgreSQL does not support); a wrong proof returns None
    from `client_final`.
    """

    mechanism: str
    verifier: Verifier
    channel_binding: bytes | None = None
    doomed: bool = False
    nonce: str = field(default_factory=lambda: _b64(secrets.token_bytes(NONCE_BYTES)))
    step: Step = Step.CLIENT_FIRST
    _cbind_flag: str = ""
    _cbind_header: str = ""
    _client_first_bare: str = ""
    _server_first: str = ""
    _combined_nonce: str = ""
    _plus: bool = field(default=False, init=False)

    def __post_init__(self) -> None:
        if self.mechanism == MECHANISM_PLUS and self.channel_binding is not None:
            self._plus = True
        elif self.mechanism == MECHANISM:
            self._plus = False
        else:
            raise PgError(_PROTOCOL_VIOLATION, "client selected an invalid SASL authentication mechanism")

    def client_first(self, data: bytes) -> bytes:
        """The client-first-message in; the server-first-message out."""
        if self.step is not Step.CLIENT_FIRST:
            raise _malformed("The client sent a message out of order.")
        text = _text(data)
        flag = text[:1]
        rest = text[1:]
        if flag == "n":
            if self._plus:
                raise _malformed("The client selected SCRAM-SHA-256-PLUS, but the SCRAM message does not "
                                 "include channel binding data.")
            header, rest = "n", rest
        elif flag == "y":
            if self._plus:
                raise _malformed("The client selected SCRAM-SHA-256-PLUS, but the SCRAM message does not "
                                 "include channel binding data.")
            if self.channel_binding is not None:
                # We offered -PLUS: a client that can bind yet believes we cannot was downgraded
                # by someone in between (RFC 5802 section 6).
                raise PgError(_PROTOCOL_VIOLATION, "SCRAM channel binding negotiation error",
                              detail="The client supports SCRAM channel binding but thinks the server does "
                                     "not.  However, this server does support channel binding.")
            header, rest = "y", rest
        elif flag == "p":
            if not self._plus:
                raise _malformed("The client selected SCRAM-SHA-256 without channel binding, but the SCRAM "
                                 "message includes channel binding data.")
            if not rest.startswith("="):
                raise _malformed("Expected \"=\" after attribute \"p\" in client-first-message.")
            cbname, sep, rest = rest[1:].partition(",")
            if not sep:
                raise _malformed("Expected \",\" after the channel binding name in client-first-message.")
            if cbname != CHANNEL_BINDING_TYPE:
                raise PgError(_PROTOCOL_VIOLATION, f'unsupported SCRAM channel-binding type "{_sanitize(cbname)}"')
            header, rest = f"p={cbname}", "," + rest
        else:
            raise _malformed(f"Unexpected channel-binding flag \"{_sanitize(flag)}\".")
        if not rest.startswith(","):
            raise _malformed(f"Comma expected, but found character \"{_sanitize(rest[:1])}\".")
        rest = rest[1:]
        if rest.startswith("a"):
            raise PgError(_FEATURE_NOT_SUPPORTED, "client uses authorization identity, but it is not supported")
        if not rest.startswith(","):
            raise _malformed(f"Unexpected attribute \"{_sanitize(rest[:1])}\" in client-first-message.")
        self._cbind_flag = flag
        self._cbind_header = header + ",,"
        bare = rest[1:]
        if bare.startswith("m"):
            raise PgError(_FEATURE_NOT_SUPPORTED, "client requires an unsupported SCRAM extension")
        attrs = bare.split(",")
        # The user name (n=) is ignored, as PostgreSQL ignores it: the startup packet's user is the
        # one authenticated (libpq sends it empty, pgjdbc sends "*").
        if len(attrs) < 2 or not attrs[0].startswith("n="):
            raise _malformed("Expected attribute \"n\" in client-first-message.")
        if not attrs[1].startswith("r="):
            raise _malformed("Expected attribute \"r\" in client-first-message.")
        client_nonce = attrs[1][2:]
        if not client_nonce or not all(0x21 <= ord(c) <= 0x7E and c != "," for c in client_nonce):
            raise _malformed("Client nonce contains invalid characters.")
        self._client_first_bare = bare
        self._combined_nonce = client_nonce + self.nonce
        self._server_first = (f"r={self._combined_nonce},s={_b64(self.verifier.salt)},"
                              f"i={self.verifier.iterations}")
        self.step = Step.CLIENT_FINAL
        return self._server_first.encode("ascii")

    def client_final(self, data: bytes) -> bytes | None:
        """The client-final-message in; the server-final-message out, or None when the proof is
        wrong (or the user had no verifier): the caller fails the login with 28P01."""
        if self.step is not Step.CLIENT_FINAL:
            raise _malformed("The client sent a message out of order.")
        self.step = Step.DONE
        text = _text(data)
        attrs = text.split(",")
        if not attrs[0].startswith("c="):
            raise _malformed("Expected attribute \"c\" in client-final-message.")
        try:
            cbind_input = _unb64(attrs[0][2:])
        except ValueError:
            raise _malformed("Malformed channel binding data in client-final-message.") from None
        if self._cbind_flag == "p":
            assert self.channel_binding is not None
            expected = self._cbind_header.encode("ascii") + self.channel_binding
            if not hmac.compare_digest(cbind_input, expected):
                raise PgError(_PROTOCOL_VIOLATION, "SCRAM channel binding check failed")
        elif cbind_input != self._cbind_header.encode("ascii"):
            # Without binding, c= must be the very header the client sent first ("n,," or "y,,").
            raise PgError(_PROTOCOL_VIOLATION,
                          "unexpected SCRAM channel-binding attribute in client-final-message")
        if len(attrs) < 2 or not attrs[1].startswith("r="):
            raise _malformed("Expected attribute \"r\" in client-final-message.")
        if attrs[1][2:] != self._combined_nonce:
            raise PgError(_PROTOCOL_VIOLATION, "invalid SCRAM response", detail="Nonce does not match.")
        proof_at = next((i for i, a in enumerate(attrs) if a.startswith("p=")), None)
        if proof_at is None:
            raise _malformed("Could not find proof in client-final-message.")
        if proof_at != len(attrs) - 1:
            raise _malformed("Garbage found at the end of client-final-message.")
        try:
            proof = _unb64(attrs[proof_at][2:])
        except ValueError:
            proof = b""
        if len(proof) != KEY_BYTES:
            raise _malformed("Malformed proof in client-final-message.")
        without_proof = ",".join(attrs[:proof_at])
        auth_message = ",".join((self._client_first_bare, self._server_first, without_proof)).encode("utf-8")
        signature = hmac.digest(self.verifier.stored_key, auth_message, "sha256")
        key = _xor(proof, signature)
        if not hmac.compare_digest(_h(key), self.verifier.stored_key) or self.doomed:
            return None
        return b"v=" + _b64(server_signature(self.verifier.server_key, auth_message)).encode("ascii")


def _text(data: bytes) -> str:
    if len(data) > MESSAGE_BYTES_MAX:
        raise _malformed("The message is too long.")
    try:
        return data.decode("utf-8")  # ASCII but for the (ignored) user name, which is UTF-8
    except UnicodeDecodeError:
        raise _malformed("The message is not valid UTF-8.") from None


def _sanitize(text: str) -> str:
    """A character of a client message fit for an error: printable ASCII as is, else its hex."""
    return "".join(c if 0x21 <= ord(c) <= 0x7E else f"0x{ord(c):02x}" for c in text[:64])
