"""A fuzzer of the whole startup and authentication phase, beside the frontend fuzzing of
test_session_fuzz.py: SSLRequest / GSSENCRequest / CancelRequest, StartupMessage parameters,
password, SASLInitialResponse and SASLResponse messages, random bytes, truncations and bad
lengths, fed to a real `Session` over an in-memory stream pair.

Two configurations run the same properties. The first server has neither TLS nor tokens, so it
answers SSLRequest with 'N' and asks for SCRAM. The second (`tls_world`) has a certificate and a
JWKS: SSLRequest is answered 'S' and the handshake runs in-process (trio's SSLStream), a
ClientHello as the first byte is PostgreSQL 17's direct TLS, and users without a SCRAM verifier
log in by OAUTHBEARER. Its inputs are scripts rather than bytes: SSLRequest followed by random
bytes or a truncated or corrupted ClientHello; a real handshake (an in-memory `ssl.SSLObject`
on the client's end of the pair) after 'S' or direct, with ALPN postgresql, another or none,
TLS 1.2 or 1.3, followed by fuzzed startup and authentication inside TLS; and OAUTHBEARER
initial responses carrying valid tokens, mutated ones, tokens signed by a stranger's key,
expired, for another role or audience, `alg: none`, garbage and huge ones, inside TLS or not.

Every input must end (within INPUT_S), never let an exception out of `Session.run`, answer in
well-formed backend framing (or, after 'S' or a direct ClientHello, a TLS record stream, whose
content must decrypt to well-formed framing after a real handshake), and give back what it held:
its connection slot, its place among the server's live sessions and its registration as a ready
one. Memory is bounded: RSS after the run is within RSS_GROWTH_MAX of after the warm-up.

Seeded, TigerBeetle-style: a failure prints its seed and input index, and
`ICEGRES_FUZZ_SEED=<seed> ICEGRES_FUZZ_INPUTS=<n>` reproduces it (the bytes OpenSSL puts in a
ClientHello are its own random, but what is cut or flipped where is the seed's). CI runs
CI_INPUTS of the first configuration and TLS_CI_INPUTS of the second; a deep run is
`ICEGRES_FUZZ_INPUTS=100000` (`--timeout=0`: past pytest's 300 s; docs/security.md records the
last ones).
"""

from __future__ import annotations

import contextlib
import json
import os
import random
import ssl
import struct
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import psutil
import pytest
import trio
import trio.testing

from icegres.config import Settings
from icegres.engine.catalog import Lakehouse
from icegres.engine.lake import Engine
from icegres.pg import scram
from icegres.protocol.pgwire import messages as m
from icegres.protocol.pgwire.server import PgServer
from icegres.protocol.pgwire.session import Session
from tests.support import idp
from tests.support import tls as test_tls

pytestmark = pytest.mark.unit

CI_INPUTS = 1500
TLS_CI_INPUTS = 600
INPUT_S = 5.0
RSS_GROWTH_MAX = 150 << 20
USERS = {"alice": "right-password"}


@pytest.fixture(scope="module")
def server(tmp_path_factory) -> PgServer:
    data_dir: Path = tmp_path_factory.mktemp("startupfuzz")
    engine = Engine(Lakehouse.embedded(data_dir))
    engine.refresh()
    # No back-off (inputs would wait on each other's failures) and a short authentication timeout.
    users = {user: scram.make_verifier(password) for user, password in USERS.items()}
    settings = Settings(data_dir=data_dir, users=users, auth_failure_delay_ms=0, authentication_timeout=2.0,
                        max_connections=5, superuser_reserved_connections=1)
    return PgServer(settings, engine)


@pytest.fixture(scope="module")
def tls_world(tmp_path_factory) -> TlsWorld:
    """The same server with TLS (a CA-signed P-256 certificate: cheap handshakes) and JWT logins
    (a JWKS file of an RSA and an EC key): alice keeps SCRAM (-PLUS inside TLS), users without a
    verifier get OAUTHBEARER."""
    data_dir: Path = tmp_path_factory.mktemp("startupfuzz-tls")
    keys_dir: Path = tmp_path_factory.mktemp("startupfuzz-keys")
    pki = test_tls.ca_signed(keys_dir / "pki", key_type="ec:prime256v1")
    rsa, ec = idp.SigningKey.rsa("fuzz-rsa"), idp.SigningKey.ec("fuzz-ec")
    stranger = idp.SigningKey.rsa("fuzz-rsa")  # the JWKS's kid, another key: a forger's
    jwks = keys_dir / "jwks.json"
    jwks.write_text(json.dumps(idp.jwks(rsa, ec)))
    engine = Engine(Lakehouse.embedded(data_dir))
    engine.refresh()
    users = {user: scram.make_verifier(password) for user, password in USERS.items()}
    settings = Settings(data_dir=data_dir, users=users, auth_failure_delay_ms=0, authentication_timeout=2.0,
                        max_connections=5, superuser_reserved_connections=1, tls_cert=str(pki.cert),
                        tls_key=str(pki.key), jwt_jwks=str(jwks), jwt_issuer=idp.ISSUER, jwt_audience=idp.AUDIENCE)
    contexts = []
    for alpn in (["postgresql"], ["http/1.1"], [], ["h2", "postgresql"]):
        for version in (ssl.TLSVersion.TLSv1_2, ssl.TLSVersion.TLSv1_3):
            context = ssl.create_default_context(cafile=str(pki.ca_cert))
            context.maximum_version = version
            if alpn:
                context.set_alpn_protocols(alpn)
            contexts.append(context)
    day = 86_400  # a deep run lasts minutes: the valid tokens must outlive it
    carol = OAUTH_USER.decode()
    refused = [
        idp.mint(rsa, idp.claims("alice", lifetime_s=day)),  # another role than the login's
        idp.mint(rsa, idp.claims(carol, lifetime_s=-3600)),
        idp.mint(ec, idp.claims(carol, lifetime_s=day, not_before_s=3600)),
        idp.mint(rsa, idp.claims(carol, aud="someone-else", lifetime_s=day)),
        idp.mint(rsa, idp.claims(carol, iss="https://evil.test", lifetime_s=day)),
        idp.mint(stranger, idp.claims(carol, lifetime_s=day)),
        idp.mint(stranger, idp.claims(carol, lifetime_s=day), kid="unknown"),
        idp.mint_unsigned(idp.claims(carol, lifetime_s=day), "fuzz-rsa"),
        idp.mint_hs256_with_public_key(rsa, idp.claims(carol, lifetime_s=day)),
    ]
    return TlsWorld(
        server=PgServer(settings, engine),
        contexts=tuple(contexts),
        hellos=tuple(_client_hello(context) for context in contexts),
        valid_tokens=tuple(idp.mint(key, idp.claims(carol, lifetime_s=day)).encode() for key in (rsa, ec)),
        refused_tokens=tuple(token.encode() for token in refused),
    )


def _client_hello(context: ssl.SSLContext) -> bytes:
    """The first flight of a client with this context: its ClientHello, in one record."""
    hello = ssl.MemoryBIO()
    client = context.wrap_bio(ssl.MemoryBIO(), hello, server_hostname="localhost")
    with contextlib.suppress(ssl.SSLWantReadError):
        client.do_handshake()
    return hello.read()


# --- inputs -------------------------------------------------------------------------------------


def _packet(body: bytes) -> bytes:
    return struct.pack("!i", len(body) + 4) + body


def _frame(kind: bytes, body: bytes) -> bytes:
    return kind + struct.pack("!i", len(body) + 4) + body


def _text(rng: random.Random) -> bytes:
    pick = rng.random()
    if pick < 0.5:
        return rng.choice([b"alice", b"bob", b"", b"icegres", b"postgres", b"x" * 70, "é".encode(), b"\xff\xfe"])
    return bytes(rng.randrange(256) for _ in range(rng.randrange(12)))


def _startup(rng: random.Random, user: bytes = b"alice") -> bytes:
    version = m.PROTOCOL_3_0 if rng.random() < 0.85 else rng.choice([0x00020000, 0x00030001, 0x00040000,
                                                                    rng.getrandbits(32) - (1 << 31)])
    params = []
    if rng.random() < 0.9:
        params.append((b"user", _text(rng) if rng.random() < 0.3 else user))
    if rng.random() < 0.6:
        params.append((b"database", rng.choice([b"icegres", b"postgres", b"nope", _text(rng)])))
    for _ in range(rng.randrange(4)):
        params.append(rng.choice([(b"application_name", _text(rng)), (b"options", rng.choice(
            [b"-c search_path=x", b"-c", b"--datestyle=ISO", _text(rng)])), (b"client_encoding", _text(rng)),
            (b"TimeZone", _text(rng)), (_text(rng), _text(rng)), (b"replication", b"true")]))
    body = struct.pack("!I", version & 0xFFFFFFFF)
    body += b"".join(k + b"\0" + v + b"\0" for k, v in params) + (b"\0" if rng.random() < 0.95 else b"")
    return _packet(body)


def _auth(rng: random.Random) -> bytes:
    pick = rng.random()
    if pick < 0.35:
        password = rng.choice([b"right-password", b"wrong", b"", b"right-password\0extra", _text(rng)])
        return _frame(b"p", password + (b"\0" if rng.random() < 0.9 else b""))
    if pick < 0.6:  # SASLInitialResponse
        mech = rng.choice([b"SCRAM-SHA-256", b"SCRAM-SHA-256-PLUS", b"OAUTHBEARER", _text(rng)])
        data = rng.choice([b"n,,n=,r=abcdef", b"p=tls-server-end-point,,n=,r=x", b"y,,n=*,r=", _text(rng),
                           b"n,,n=,r=" + b"A" * rng.randrange(2000)])
        length = rng.choice([len(data), -1, len(data) + 5, 0, 1 << 30])
        return _frame(b"p", mech + b"\0" + struct.pack("!i", length) + data)
    if pick < 0.8:  # SASLResponse
        return _frame(b"p", rng.choice([b"c=biws,r=abc,p=AAAA", b"c=eSws,r=,p=", _text(rng)]))
    return _frame(bytes([rng.randrange(256)]), _text(rng))


def make_input(rng: random.Random) -> bytes:
    parts = []
    for _ in range(rng.choice([0, 0, 0, 1, 1, 2])):
        parts.append(rng.choice([struct.pack("!ii", 8, m.SSL_REQUEST_CODE), struct.pack("!ii", 8, m.GSSENC_REQUEST_CODE)]))
    if rng.random() < 0.05:
        parts.append(struct.pack("!iiii", 16, m.CANCEL_REQUEST_CODE, rng.getrandbits(31), rng.getrandbits(31)))
    else:
        parts.append(_startup(rng))
        for _ in range(rng.randrange(4)):
            parts.append(_auth(rng))
        if rng.random() < 0.2:
            parts.append(_frame(b"Q", b"select 1\0"))
    return mutate(rng, b"".join(parts), rng.choice([0, 0, 0, 1, 2, 4]))


def mutate(rng: random.Random, payload: bytes, count: int) -> bytes:
    """`count` byte flips, truncations, insertions, bad lengths and runs of zeros."""
    data = bytearray(payload)
    for _ in range(count):
        op = rng.random()
        if not data:
            break
        at = rng.randrange(len(data))
        if op < 0.3:
            data[at] = rng.randrange(256)
        elif op < 0.5:
            del data[at:]
        elif op < 0.7:
            data[at:at] = bytes(rng.randrange(256) for _ in range(rng.randrange(1, 9)))
        elif op < 0.85 and at + 4 <= len(data):
            data[at:at + 4] = struct.pack("!i", rng.choice([-1, 0, 3, 4, 8, 10_001, 1 << 30, rng.getrandbits(31)]))
        else:
            data[at:at] = b"\0" * rng.randrange(1, 16)
    return bytes(data)


# --- the second configuration's inputs: TLS and OAUTHBEARER ------------------------------------------

OAUTH_USER = b"carol"  # no SCRAM verifier: with --jwt-jwks set, carol logs in by OAUTHBEARER (auth.py)
SSL_REQUEST = struct.pack("!ii", 8, m.SSL_REQUEST_CODE)
GSSENC_REQUEST = struct.pack("!ii", 8, m.GSSENC_REQUEST_CODE)
LOGIN = _packet(struct.pack("!i", m.PROTOCOL_3_0) + b"user\0carol\0database\0icegres\0\0")
B64URL = b"ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789-_"
TLS_RECORD_HANDSHAKE = 0x16


@dataclass(frozen=True)
class Send:
    """Bytes sent as they are: before TLS, or where a TLS handshake should be."""

    data: bytes


@dataclass(frozen=True)
class Await:
    """Wait for the server's answer to the encryption requests sent so far."""


@dataclass(frozen=True)
class Handshake:
    """A real TLS handshake with `context`, after the server's 'S' or at once (direct); the
    conversation then ends with close_notify or by dropping the connection."""

    context: ssl.SSLContext
    direct: bool
    close_notify: bool = True


@dataclass(frozen=True)
class Secure:
    """Bytes sent inside TLS (nothing when no handshake succeeded before)."""

    data: bytes


Step = Send | Await | Handshake | Secure


@dataclass(frozen=True)
class TlsWorld:
    """The second configuration: its server, the clients' TLS contexts (ALPN postgresql, another or
    none; TLS 1.2 or 1.3), a ClientHello of each, and bearer tokens."""

    server: PgServer
    contexts: tuple[ssl.SSLContext, ...]
    hellos: tuple[bytes, ...]
    valid_tokens: tuple[bytes, ...]  # carol's, signed by a key of the JWKS
    refused_tokens: tuple[bytes, ...]  # expired, another role, audience or issuer, a stranger's key, alg none...


def _bearer(rng: random.Random, world: TlsWorld) -> bytes:
    pick = rng.random()
    if pick < 0.35:
        return rng.choice(world.valid_tokens)
    if pick < 0.55:
        return rng.choice(world.refused_tokens)
    if pick < 0.8:  # a token mutated
        token = bytearray(rng.choice(world.valid_tokens + world.refused_tokens))
        for _ in range(rng.randrange(1, 4)):
            at = rng.randrange(len(token) or 1)
            op = rng.random()
            if op < 0.5 and token:
                token[at] = rng.choice(B64URL + b".=+/ ")
            elif op < 0.75:
                del token[at:at + rng.randrange(1, 40)]
            else:
                token[at:at] = rng.choice([b".", b"=", b"eyJ", bytes(token[:at])])
        return bytes(token)
    if pick < 0.9:
        return bytes(rng.choice(B64URL) for _ in range(rng.randrange(300)))
    if pick < 0.97:  # huge: beyond tokens.TOKEN_BYTES_MAX, about and beyond the auth message limit
        return b"e" * rng.choice([16 * 1024, 16 * 1024 + 1, 65_000, 65_600, 200_000])
    return bytes(rng.randrange(256) for _ in range(rng.randrange(64)))


def _oauthbearer(rng: random.Random, world: TlsWorld) -> bytes:
    """A SASLInitialResponse choosing OAUTHBEARER, mostly well formed, with a fuzzed bearer token."""
    pick = rng.random()
    if pick < 0.75:
        flag = rng.choice([b"n,,", b"n,,", b"y,,", b"n,a=carol,"])
        extra = rng.choice([b"", b"", b"host=localhost\x01port=5432\x01"])
        scheme = rng.choice([b"Bearer ", b"Bearer ", b"bearer ", b"Bearer  ", b"Basic ", b""])
        data = flag + b"\x01" + extra + b"auth=" + scheme + _bearer(rng, world) + b"\x01\x01"
    elif pick < 0.9:
        data = b"n,,\x01auth=\x01\x01"  # discovery: the client asks where to log in
    else:
        data = mutate(rng, b"n,,\x01auth=Bearer " + rng.choice(world.valid_tokens) + b"\x01\x01", rng.randrange(1, 4))
    length = len(data) if rng.random() < 0.9 else rng.choice([-1, 0, len(data) + 3, 1 << 30])
    return _frame(b"p", b"OAUTHBEARER\0" + struct.pack("!i", length) + data)


def _login(rng: random.Random, world: TlsWorld) -> bytes:
    """A startup packet and what authentication may hear next (OAUTHBEARER mostly), then perhaps a
    query and a Terminate, a few bytes of it mutated now and then."""
    if rng.random() < 0.6:
        parts = [LOGIN]
    else:
        parts = [_startup(rng, rng.choice([OAUTH_USER, OAUTH_USER, b"alice", b"bob"]))]
    parts.append(_oauthbearer(rng, world) if rng.random() < 0.85 else _auth(rng))
    for _ in range(rng.choice([0, 1, 1, 2])):  # the RFC's \x01 after an error, or more of anything
        parts.append(_frame(b"p", b"\x01") if rng.random() < 0.7 else rng.choice([_auth(rng), _oauthbearer(rng, world)]))
    if rng.random() < 0.3:
        parts.append(_frame(b"Q", b"select 1\0"))
    if rng.random() < 0.5:
        parts.append(_frame(b"X", b""))
    return mutate(rng, b"".join(parts), rng.choice([0, 0, 0, 0, 1, 2]))


def _broken_hello(rng: random.Random, world: TlsWorld) -> bytes:
    hello = rng.choice(world.hellos)
    pick = rng.random()
    if pick < 0.1:
        return hello  # whole, but the client never reads the answer
    if pick < 0.45:
        return hello[:rng.randrange(len(hello))]
    return mutate(rng, hello, rng.randrange(1, 5))


def make_tls_script(rng: random.Random, world: TlsWorld) -> tuple[Step, ...]:
    pick = rng.random()
    if pick < 0.35:  # SSLRequest, a real handshake, then startup and authentication inside TLS
        prefix = SSL_REQUEST if rng.random() < 0.9 else GSSENC_REQUEST + SSL_REQUEST
        if rng.random() < 0.05:  # bytes pipelined behind the request (CVE-2021-23214): 08P01 inside TLS
            prefix += rng.choice([LOGIN, _text(rng) or b"x"])
        payload = _login(rng, world)
        if rng.random() < 0.05:
            payload = SSL_REQUEST + payload  # a second SSLRequest, inside TLS: 0A000
        return (Send(prefix), Handshake(rng.choice(world.contexts), direct=False, close_notify=rng.random() < 0.8),
                Secure(payload))
    if pick < 0.5:  # direct TLS (PostgreSQL 17): hung up on unless ALPN chose postgresql
        return (Handshake(rng.choice(world.contexts), direct=True, close_notify=rng.random() < 0.8),
                Secure(_login(rng, world)))
    if pick < 0.62:  # SSLRequest, then a ClientHello truncated or corrupted
        return (Send(SSL_REQUEST), Await(), Send(_broken_hello(rng, world)))
    if pick < 0.72:  # direct: a broken ClientHello as the connection's first bytes
        return (Send(_broken_hello(rng, world)),)
    if pick < 0.8:  # SSLRequest then random bytes, after its answer or pipelined behind it
        junk = bytes(rng.randrange(256) for _ in range(rng.randrange(1, 300)))
        return (Send(SSL_REQUEST), Await(), Send(junk)) if rng.random() < 0.7 else (Send(SSL_REQUEST + junk),)
    return (Send(_login(rng, world)),)  # OAUTHBEARER outside TLS


def plain_script(rng: random.Random) -> tuple[Step, ...]:
    return (Send(make_input(rng)),)


# --- running one input ------------------------------------------------------------------------------


def check_framing(data: bytes) -> list[tuple[int, bytes]]:
    """The server's output: single-byte answers to SSL/GSSENC requests first, then whole messages
    (returned as type byte and body)."""
    i = 0
    while i < len(data) and data[i:i + 1] == b"N":
        i += 1
    out = []
    while i < len(data):
        assert len(data) - i >= 5, f"truncated header at {i}"
        (length,) = struct.unpack_from("!i", data, i + 1)
        assert length >= 4 and i + 1 + length <= len(data), f"truncated message at {i}"
        out.append((data[i], data[i + 5:i + 1 + length]))
        i += 1 + length
    return out


def check_records(data: bytes) -> None:
    """A TLS record stream: whole records of a known type and version, none oversized."""
    i = 0
    while i < len(data):
        assert len(data) - i >= 5, f"truncated TLS record header at {i}"
        kind, major, minor = data[i:i + 3]
        (length,) = struct.unpack_from("!H", data, i + 3)
        assert kind in (20, 21, 22, 23) and major == 3 and minor <= 4, f"not a TLS record at {i}: {data[i:i + 5]!r}"
        assert length <= (1 << 14) + 2048 and i + 5 + length <= len(data), f"truncated TLS record at {i}"
        i += 5 + length


@dataclass(frozen=True)
class Conversation:
    raw: bytes  # everything the server sent
    direct: bool  # the client's first byte began a TLS handshake record
    plain: bytes | None  # what the server sent inside TLS, decrypted (after a real handshake)

    def check(self) -> list[tuple[int, bytes]]:
        """Well-formed output (plaintext framing, or TLS records after 'S' or on a direct
        connection, and framing inside them); the backend messages that could be read."""
        i = 0
        while i < len(self.raw) and self.raw[i] == ord("N"):
            i += 1
        if self.raw[i:i + 1] == b"S":
            check_records(self.raw[i + 1:])
            messages = []
        elif self.direct:
            check_records(self.raw)
            messages = []
        else:
            messages = check_framing(self.raw)
        return messages + (check_framing(self.plain) if self.plain is not None else [])


class Client:
    """The client's end of a conversation: a task reads all the server sends; a real handshake
    drives an in-memory SSLObject over the same bytes, and decrypts the rest at the end."""

    def __init__(self, stream: trio.StapledStream) -> None:
        self.stream = stream
        self.received = bytearray()
        self.eof = False
        self.first: int | None = None  # the first byte sent
        self.tls: ssl.SSLObject | None = None
        self._arrived = trio.Event()
        self._incoming, self._outgoing = ssl.MemoryBIO(), ssl.MemoryBIO()
        self._fed = 0  # how much of `received` went into _incoming

    async def read_all(self) -> None:
        while not self.eof:
            try:
                chunk = await self.stream.receive_some(65536)
            except (trio.ClosedResourceError, trio.BrokenResourceError):
                chunk = b""
            self.received += chunk
            self.eof = not chunk
            self._arrived.set()
            self._arrived = trio.Event()

    async def _more(self, have: int) -> None:
        """Until more than `have` bytes arrived, or the server closed."""
        while len(self.received) <= have and not self.eof:
            await self._arrived.wait()

    async def send(self, data: bytes, chunking: int = 1 << 30) -> bool:
        """False once the server has hung up."""
        if self.first is None and data:
            self.first = data[0]
        if len(data) > 4096:  # a huge token, not a million sends
            chunking = max(chunking, len(data) >> 9)
        try:
            for at in range(0, len(data), chunking):
                await self.stream.send_all(data[at:at + chunking])
        except (trio.BrokenResourceError, trio.ClosedResourceError):
            return False
        return True

    async def answer(self) -> int | None:
        """Where the server's TLS begins: after its 'S' (past any 'N'); None if it answered
        otherwise or hung up."""
        while True:
            i = 0
            while i < len(self.received) and self.received[i] == ord("N"):
                i += 1
            if i < len(self.received):
                return i + 1 if self.received[i] == ord("S") else None
            if self.eof:
                return None
            await self._more(len(self.received))

    async def handshake(self, context: ssl.SSLContext, direct: bool, chunking: int) -> None:
        """A real handshake, its first flight (the ClientHello) sent `chunking` bytes at a time
        (a direct one then reaches the server's TLS layer partly from its framing buffer)."""
        start = 0 if direct else await self.answer()
        if start is None:
            return
        tls = context.wrap_bio(self._incoming, self._outgoing, server_hostname="localhost")
        self._fed = start
        with contextlib.suppress(ssl.SSLWantReadError):
            tls.do_handshake()
        if not await self.send(self._outgoing.read(), chunking):
            return
        while True:
            try:
                tls.do_handshake()
                break
            except ssl.SSLWantReadError:
                pass
            except ssl.SSLError:
                await self.send(self._outgoing.read())  # its alert
                return
            if not await self.send(self._outgoing.read()):
                return
            await self._more(self._fed)
            if len(self.received) == self._fed:
                return  # the server hung up mid-handshake
            self._incoming.write(bytes(self.received[self._fed:]))
            self._fed = len(self.received)
        self.tls = tls
        await self.send(self._outgoing.read())

    async def send_secure(self, data: bytes, chunking: int) -> None:
        if self.tls is None:
            return
        if len(data) > 4096:
            chunking = max(chunking, len(data) >> 9)
        for at in range(0, len(data), chunking):
            self.tls.write(data[at:at + chunking])  # one record each
            if not await self.send(self._outgoing.read()):
                return

    async def close(self, close_notify: bool) -> None:
        if self.tls is not None and close_notify:
            with contextlib.suppress(ssl.SSLError):  # SSLWantReadError: the server's is not awaited
                self.tls.unwrap()
            await self.send(self._outgoing.read())
        with contextlib.suppress(trio.BrokenResourceError, trio.ClosedResourceError):
            await self.stream.send_stream.aclose()

    def decrypted(self) -> bytes | None:
        """What the server sent inside TLS; an SSLError if its records do not decrypt."""
        if self.tls is None:
            return None
        self._incoming.write(bytes(self.received[self._fed:]))
        self._incoming.write_eof()
        out = bytearray()
        while True:
            try:
                chunk = self.tls.read(65536)
            except (ssl.SSLZeroReturnError, ssl.SSLEOFError, ssl.SSLWantReadError):
                break
            if not chunk:
                break
            out += chunk
        return bytes(out)


async def converse(server: PgServer, script: tuple[Step, ...], chunking: int) -> Conversation:
    client_end, server_end = trio.testing.memory_stream_pair()
    session = Session(server, server_end, "fuzz")
    client = Client(client_end)

    async def run() -> None:
        server.live.add(session)
        try:
            await session.run()
        finally:
            server.live.discard(session)

    close_notify = True
    with trio.fail_after(INPUT_S):
        async with trio.open_nursery() as nursery:
            nursery.start_soon(run)
            nursery.start_soon(client.read_all)
            for step in script:
                match step:
                    case Send(data=data):
                        if not await client.send(data, chunking):
                            break  # the session hung up first
                    case Await():
                        await client.answer()
                    case Handshake(context=context, direct=direct, close_notify=close_notify):
                        await client.handshake(context, direct, chunking)
                    case Secure(data=data):
                        await client.send_secure(data, chunking)
            await client.close(close_notify)
    return Conversation(bytes(client.received), client.first == TLS_RECORD_HANDSHAKE, client.decrypted())


def _label(data: bytes) -> str:
    """A first answer as the counts name it: the byte if printable ('N', 'S', 'E', 'R'), '0x16'
    for a TLS handshake record, '-' for nothing."""
    if not data:
        return "-"
    return chr(data[0]) if 0x20 < data[0] < 0x7F else f"0x{data[0]:02x}"


def run_inputs(server: PgServer, seed: int, count: int,
               make_script: Callable[[random.Random], tuple[Step, ...]] = plain_script) -> dict[str, int]:
    """Counts of first answers, and of: completed handshakes ('tls' and 'tls:<first answer inside>'),
    OAUTHBEARER offered ('oauth'), logins that reached ReadyForQuery ('login')."""
    rng = random.Random(seed)
    seen: dict[str, int] = {}

    async def main() -> None:
        for index in range(count):
            script = make_script(rng)
            chunking = rng.choice([1, 3, 64, 1 << 20])
            try:
                talk = await converse(server, script, chunking)
                messages = talk.check()
                assert server.slots.taken == 0, "a connection slot leaked"
                assert not server.live, "a session outlived its connection"
                assert not server.activity(""), "a session stayed registered"
            except BaseException as exc:
                raise AssertionError(f"seed={seed} input={index}: {script!r:.400}") from exc
            labels = [_label(talk.raw)]
            if talk.plain is not None:
                labels += ["tls", "tls:" + _label(talk.plain)]
            if any(kind == ord("R") and body[:4] == struct.pack("!i", 10) and b"OAUTHBEARER" in body
                   for kind, body in messages):
                labels.append("oauth")
            if any(kind == ord("Z") for kind, _ in messages):
                labels.append("login")
            for label in labels:
                seen[label] = seen.get(label, 0) + 1

    trio.run(main)
    return seen


def _seed_and_count(ci_inputs: int) -> tuple[int, int]:
    seed = int(os.environ.get("ICEGRES_FUZZ_SEED", "0")) or random.randrange(1 << 32)
    return seed, int(os.environ.get("ICEGRES_FUZZ_INPUTS", str(ci_inputs)))


def _measured(name: str, server: PgServer, seed: int, count: int,
              make_script: Callable[[random.Random], tuple[Step, ...]]) -> dict[str, int]:
    """`count` inputs after a warm-up of 200 (imports, the engine's first session); RSS bounded."""
    process = psutil.Process()
    run_inputs(server, seed ^ 0x5EED, 200, make_script)
    rss_before = process.memory_info().rss
    started = time.monotonic()
    seen = run_inputs(server, seed, count, make_script)
    elapsed = time.monotonic() - started
    growth = process.memory_info().rss - rss_before
    print(f"{name}: seed={seed} inputs={count} in {elapsed:.1f}s, counts {sorted(seen.items())}, "
          f"RSS growth {growth >> 20} MiB")
    assert growth < RSS_GROWTH_MAX
    return seen


def test_startup_phase_fuzz(server):
    seed, count = _seed_and_count(CI_INPUTS)
    seen = _measured("startup fuzz", server, seed, count, plain_script)
    assert "E" in seen and "R" in seen  # both refusals and authentication requests were reached


def test_startup_phase_fuzz_with_tls_and_oauthbearer(tls_world):
    seed, count = _seed_and_count(TLS_CI_INPUTS)
    seen = _measured("startup fuzz, TLS and OAUTHBEARER", tls_world.server, seed, count,
                     lambda rng: make_tls_script(rng, tls_world))
    # 'S' answers, direct handshakes answered in TLS, handshakes completed, OAUTHBEARER offered
    # and logins that went through, all reached.
    for label in ("S", "0x16", "tls", "oauth", "login"):
        assert seen.get(label), (label, seen)


@pytest.mark.parametrize("payload", [
    struct.pack("!ii", 8, m.SSL_REQUEST_CODE) * 3,
    _packet(struct.pack("!i", m.PROTOCOL_3_0) + b"user\0alice\0\0") + _frame(b"p", b"\0" * 10),
    _packet(struct.pack("!i", m.PROTOCOL_3_0) + b"user\0alice\0\0") + b"p" + struct.pack("!i", 1 << 30),
    struct.pack("!i", 10_001) + b"\0" * 20,
    b"\0\0\0\x08\x04\xd2\x16\x2f",
])
def test_regressions(server, payload):
    """Inputs worth keeping as they are (each ends cleanly)."""
    talk = trio.run(converse, server, (Send(payload),), 7)
    check_framing(talk.raw)
    assert server.slots.taken == 0
