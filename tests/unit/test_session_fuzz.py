"""Arbitrary bytes against a live session: nothing escapes, the connection ends cleanly or errors.

The session runs for real (engine, planner, catalog) over an in-memory stream pair; hypothesis
chooses what the "client" sends after a valid startup — random frames, truncated frames, garbage.
"""

from __future__ import annotations

import struct
from pathlib import Path

import pyarrow as pa
import pytest
import trio
import trio.testing
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from icegres.config import Settings
from icegres.engine.catalog import Lakehouse
from icegres.engine.lake import Engine
from icegres.protocol.pgwire import messages as m
from icegres.protocol.pgwire.server import PgServer
from icegres.protocol.pgwire.session import Session

pytestmark = pytest.mark.unit


@pytest.fixture(scope="module")
def pg_server(tmp_path_factory) -> PgServer:
    data_dir: Path = tmp_path_factory.mktemp("fuzzlake")
    lakehouse = Lakehouse.embedded(data_dir)
    lakehouse.create_namespace_if_missing("demo")
    t = lakehouse.catalog.create_table(("demo", "t"), schema=pa.schema([pa.field("id", pa.int64()), pa.field("s", pa.string())]))
    t.append(pa.table({"id": [1, 2, 3], "s": ["a", None, "c"]}))
    engine = Engine(lakehouse)
    engine.refresh()
    return PgServer(Settings(data_dir=data_dir), engine)


def startup(user: str = "fuzz") -> bytes:
    body = struct.pack("!i", m.PROTOCOL_3_0) + b"user\0" + user.encode() + b"\0database\0icegres\0\0"
    return struct.pack("!i", len(body) + 4) + body


def frame(kind: bytes, body: bytes) -> bytes:
    return kind + struct.pack("!i", len(body) + 4) + body


def parse_backend(data: bytes) -> list[bytes]:
    """Split server output into message type bytes; asserts the framing is well formed."""
    kinds = []
    i = 0
    while i < len(data):
        if data[i : i + 1] == b"N" and not kinds:  # SSLRequest answer, unframed
            i += 1
            continue
        kind = data[i : i + 1]
        (length,) = struct.unpack_from("!i", data, i + 1)
        assert length >= 4 and i + 1 + length <= len(data), "truncated backend message"
        kinds.append(kind)
        i += 1 + length
    return kinds


async def converse(server: PgServer, payload: bytes, ssl_request: bool = False) -> list[bytes]:
    """`payload` to a session; `ssl_request`: an SSLRequest first, the rest sent once it is answered
    (bytes pipelined behind it are refused, as PostgreSQL refuses them: CVE-2021-23214)."""
    client, server_end = trio.testing.memory_stream_pair()
    session = Session(server, server_end, "fuzz")
    received = bytearray()
    answered = trio.Event()

    async def read_all() -> None:
        while True:
            try:
                chunk = await client.receive_some(65536)
            except trio.ClosedResourceError:
                return
            if not chunk:
                return
            received.extend(chunk)
            answered.set()

    with trio.fail_after(30):
        async with trio.open_nursery() as nursery:
            nursery.start_soon(session.run)
            nursery.start_soon(read_all)
            if ssl_request:
                await client.send_all(struct.pack("!ii", 8, m.SSL_REQUEST_CODE))
                await answered.wait()
            await client.send_all(payload)
            # Closing our send side ends the session's receive loop; run() must then return.
            await client.send_stream.aclose()
    return parse_backend(bytes(received))


messages = st.one_of(
    st.builds(lambda s: frame(b"Q", s.encode() + b"\0"), st.sampled_from([
        "select 1", "select * from demo.t", "select s from demo.t where id = 2", "show timezone",
        "begin", "commit", "rollback", "savepoint a", "select 1/0", "selec", "", ";", "set timezone = 'nowhere'",
        "declare c cursor for select 1", "fetch 1 from c", "copy (select 1) to stdout", "select $1",
    ]) | st.text(max_size=40)),
    st.builds(lambda name, sql: frame(b"P", name + b"\0" + sql + b"\0\0\0"), st.sampled_from([b"", b"s1"]),
              st.sampled_from([b"select 1", b"select * from demo.t where id = $1", b"bad sql", b""])),
    st.builds(lambda n: frame(b"B", b"\0" + n + b"\0" + b"\0\0" + b"\0\x01" + struct.pack("!i", 1) + b"1" + b"\0\0"),
              st.sampled_from([b"", b"s1"])),
    st.just(frame(b"D", b"S\0")), st.just(frame(b"D", b"P\0")), st.just(frame(b"E", b"\0\0\0\0\0")),
    st.just(frame(b"S", b"")), st.just(frame(b"H", b"")), st.just(frame(b"C", b"S\0")),
    st.builds(lambda k, body: frame(k, body), st.sampled_from([b"P", b"B", b"E", b"D", b"C", b"F", b"d", b"c", b"f", b"z"]),
              st.binary(max_size=30)),
    st.binary(max_size=12),
)


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(st.lists(messages, max_size=8), st.booleans())
def test_arbitrary_input_never_escapes(pg_server, msgs, ssl_first):
    payload = startup() + b"".join(msgs)
    kinds = trio.run(converse, pg_server, payload, ssl_first)
    assert kinds[:1] == [b"R"], kinds  # authentication ok came first
    assert b"Z" in kinds  # ready for query after startup
    # Every error is well formed; the session either keeps answering or ends after a FATAL error.


@settings(max_examples=100, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(st.binary(max_size=64))
def test_arbitrary_startup_bytes(pg_server, data):
    kinds = trio.run(converse, pg_server, data)
    assert set(kinds) <= {b"R", b"S", b"K", b"Z", b"E"}


def test_query_after_garbage_is_still_answered(pg_server):
    payload = startup() + frame(b"Q", b"select s from demo.t order by id\0")
    kinds = trio.run(converse, pg_server, payload)
    assert kinds.count(b"D") == 3 and kinds[-1] == b"Z"


def test_bytes_pipelined_behind_an_ssl_request_are_refused(pg_server):
    payload = struct.pack("!ii", 8, m.SSL_REQUEST_CODE) + startup()
    assert trio.run(converse, pg_server, payload) == [b"E"]
