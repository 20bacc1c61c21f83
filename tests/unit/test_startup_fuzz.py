"""A fuzzer of the whole startup and authentication phase, beside the frontend fuzzing of
test_session_fuzz.py: SSLRequest / GSSENCRequest / CancelRequest, StartupMessage parameters,
password, SASLInitialResponse and SASLResponse messages, random bytes, truncations and bad
lengths, fed to a real `Session` over an in-memory stream pair.

Every input must end (within INPUT_S), never let an exception out of `Session.run`, answer in
well-formed backend framing, and give back what it held: its connection slot and its place among
the server's live sessions. Memory is bounded: RSS after the run is within RSS_GROWTH_MAX of
after the warm-up.

Seeded, TigerBeetle-style: a failure prints its seed and input index, and
`ICEGRES_FUZZ_SEED=<seed> ICEGRES_FUZZ_INPUTS=<n>` reproduces it. CI runs CI_INPUTS; a deep run
is `ICEGRES_FUZZ_INPUTS=100000` (docs/security.md records the last one).
"""

from __future__ import annotations

import os
import random
import struct
import time
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

pytestmark = pytest.mark.unit

CI_INPUTS = 1500
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


def _startup(rng: random.Random) -> bytes:
    version = m.PROTOCOL_3_0 if rng.random() < 0.85 else rng.choice([0x00020000, 0x00030001, 0x00040000,
                                                                    rng.getrandbits(32) - (1 << 31)])
    params = []
    if rng.random() < 0.9:
        params.append((b"user", _text(rng) if rng.random() < 0.3 else b"alice"))
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
    data = bytearray(b"".join(parts))
    for _ in range(rng.choice([0, 0, 0, 1, 2, 4])):  # mutations
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


# --- running one input ------------------------------------------------------------------------------


def check_framing(data: bytes) -> None:
    """The server's output: single-byte answers to SSL/GSSENC requests first, then whole messages."""
    i = 0
    while i < len(data) and data[i:i + 1] == b"N":
        i += 1
    while i < len(data):
        assert len(data) - i >= 5, f"truncated header at {i}"
        (length,) = struct.unpack_from("!i", data, i + 1)
        assert length >= 4 and i + 1 + length <= len(data), f"truncated message at {i}"
        i += 1 + length


async def converse(server: PgServer, payload: bytes, chunking: int) -> bytes:
    client, server_end = trio.testing.memory_stream_pair()
    session = Session(server, server_end, "fuzz")
    received = bytearray()

    async def read_all() -> None:
        while True:
            try:
                chunk = await client.receive_some(65536)
            except (trio.ClosedResourceError, trio.BrokenResourceError):
                return
            if not chunk:
                return
            received.extend(chunk)

    async def run() -> None:
        server.live.add(session)
        try:
            await session.run()
        finally:
            server.live.discard(session)

    with trio.fail_after(INPUT_S):
        async with trio.open_nursery() as nursery:
            nursery.start_soon(run)
            nursery.start_soon(read_all)
            try:
                for at in range(0, len(payload), chunking):
                    await client.send_all(payload[at:at + chunking])
                await client.send_stream.aclose()
            except (trio.BrokenResourceError, trio.ClosedResourceError):
                pass  # the session hung up first
    return bytes(received)


def run_inputs(server: PgServer, seed: int, count: int) -> dict[str, int]:
    rng = random.Random(seed)
    seen: dict[str, int] = {}

    async def main() -> None:
        for index in range(count):
            payload = make_input(rng)
            chunking = rng.choice([1, 3, 64, 1 << 20])
            try:
                out = await converse(server, payload, chunking)
                check_framing(out)
                assert server.slots.taken == 0, "a connection slot leaked"
                assert not server.live, "a session outlived its connection"
            except BaseException as exc:
                raise AssertionError(f"seed={seed} input={index}: {payload[:200]!r}") from exc
            first = out[:1].decode("latin-1") or "-"
            seen[first] = seen.get(first, 0) + 1

    trio.run(main)
    return seen


def test_startup_phase_fuzz(server):
    seed = int(os.environ.get("ICEGRES_FUZZ_SEED", "0")) or random.randrange(1 << 32)
    count = int(os.environ.get("ICEGRES_FUZZ_INPUTS", str(CI_INPUTS)))
    process = psutil.Process()
    run_inputs(server, seed ^ 0x5EED, 200)  # warm-up: imports, the engine's first session
    rss_before = process.memory_info().rss
    started = time.monotonic()
    seen = run_inputs(server, seed, count)
    elapsed = time.monotonic() - started
    growth = process.memory_info().rss - rss_before
    print(f"startup fuzz: seed={seed} inputs={count} in {elapsed:.1f}s, first bytes {sorted(seen.items())}, "
          f"RSS growth {growth >> 20} MiB")
    assert growth < RSS_GROWTH_MAX
    assert "E" in seen and "R" in seen  # both refusals and authentication requests were reached


@pytest.mark.parametrize("payload", [
    struct.pack("!ii", 8, m.SSL_REQUEST_CODE) * 3,
    _packet(struct.pack("!i", m.PROTOCOL_3_0) + b"user\0alice\0\0") + _frame(b"p", b"\0" * 10),
    _packet(struct.pack("!i", m.PROTOCOL_3_0) + b"user\0alice\0\0") + b"p" + struct.pack("!i", 1 << 30),
    struct.pack("!i", 10_001) + b"\0" * 20,
    b"\0\0\0\x08\x04\xd2\x16\x2f",
])
def test_regressions(server, payload):
    """Inputs worth keeping as they are (each ends cleanly)."""
    out = trio.run(converse, server, payload, 7)
    check_framing(out)
    assert server.slots.taken == 0
