"""An unnamed statement whose text repeats is answered at Parse from the session's memory of its
description, checked against the lake before anything is sent (protocol/pgwire/extended.py).

Every conversation here runs twice, each on a lake of its own built the same way: once as is, and
once with a session that remembers nothing (every Parse describes in a worker thread, as before
the memory existed). What the client receives after start-up must be the same bytes, whatever
changed in the lake between two Parses of the same text.
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
from icegres.protocol.pgwire import extended
from icegres.protocol.pgwire import messages as m
from icegres.protocol.pgwire.server import PgServer
from icegres.protocol.pgwire.session import Session

pytestmark = pytest.mark.unit

POINT = "select * from demo.t where id = $1"
READY = b"Z\x00\x00\x00\x05"


def frame(kind: bytes, body: bytes) -> bytes:
    return kind + struct.pack("!i", len(body) + 4) + body


def startup() -> bytes:
    body = struct.pack("!i", m.PROTOCOL_3_0) + b"user\0bench\0database\0icegres\0\0"
    return struct.pack("!i", len(body) + 4) + body


def parse(sql: str, oids: tuple[int, ...] = (), name: str = "") -> bytes:
    return frame(b"P", name.encode() + b"\0" + sql.encode() + b"\0" + struct.pack(f"!h{len(oids)}i", len(oids), *oids))


def bind(*values: str | None, statement: str = "", portal: str = "", binary_results: bool = False) -> bytes:
    body = portal.encode() + b"\0" + statement.encode() + b"\0" + struct.pack("!h", 0)
    body += struct.pack("!h", len(values))
    for v in values:
        body += struct.pack("!i", -1) if v is None else struct.pack("!i", len(v.encode())) + v.encode()
    body += struct.pack("!hh", 1, 1) if binary_results else struct.pack("!h", 0)
    return frame(b"B", body)


def describe(kind: str = "P", name: str = "") -> bytes:
    return frame(b"D", kind.encode() + name.encode() + b"\0")


def execute(max_rows: int = 0) -> bytes:
    return frame(b"E", b"\0" + struct.pack("!i", max_rows))


SYNC = frame(b"S", b"")
FLUSH = frame(b"H", b"")


def query(sql: str) -> bytes:
    return frame(b"Q", sql.encode() + b"\0")


def lookup(value: str | None, sql: str = POINT, oids: tuple[int, ...] = ()) -> bytes:
    """What pgbench -M extended and psycopg send for one execution."""
    return parse(sql, oids) + bind(value) + describe() + execute() + SYNC


def make_server(data_dir: Path) -> PgServer:
    lakehouse = Lakehouse.embedded(data_dir)
    lakehouse.create_namespace_if_missing("demo")
    lakehouse.create_namespace_if_missing("other")
    t = lakehouse.catalog.create_table(("demo", "t"), schema=pa.schema(
        [pa.field("id", pa.int64()), pa.field("s", pa.string()), pa.field("n", pa.int32())]))
    t.append(pa.table({"id": pa.array([1, 2, 3], pa.int64()), "s": ["a", None, "c"],
                       "n": pa.array([10, 20, 30], pa.int32())}))
    u = lakehouse.catalog.create_table(("other", "t"), schema=pa.schema(
        [pa.field("id", pa.int64()), pa.field("x", pa.float64())]))
    u.append(pa.table({"id": pa.array([1, 2], pa.int64()), "x": [0.5, 1.5]}))
    engine = Engine(lakehouse)
    engine.refresh()
    return PgServer(Settings(data_dir=data_dir), engine)


async def _converse(server: PgServer, payload: bytes, hops: list[str]) -> bytes:
    client, server_end = trio.testing.memory_stream_pair()
    session = Session(server, server_end, "test")
    real_in_thread = session.in_thread

    async def counted(fn, *args):
        hops.append(getattr(fn, "__name__", repr(fn)))
        return await real_in_thread(fn, *args)

    session.in_thread = counted  # type: ignore[method-assign]
    received = bytearray()

    async def read_all() -> None:
        while True:
            try:
                chunk = await client.receive_some(65536)
            except trio.ClosedResourceError:
                return
            if not chunk:
                return
            received.extend(chunk)

    with trio.fail_after(60):
        async with trio.open_nursery() as nursery:
            nursery.start_soon(session.run)
            nursery.start_soon(read_all)
            await client.send_all(startup())
            while READY not in received:
                await trio.sleep(0.001)
            hops.clear()
            await client.send_all(payload)
            await client.send_stream.aclose()
    out = bytes(received)
    return out[out.index(READY) + 6:]  # what came after start-up


def converse(data_dir: Path, payload: bytes, *, remember: bool, monkeypatch: pytest.MonkeyPatch,
             hops: list[str] | None = None) -> bytes:
    with monkeypatch.context() as patch:
        if not remember:
            patch.setattr(extended.Descriptions, "recall", lambda self, sql, given: None)
        return without_ids(trio.run(_converse, make_server(data_dir), payload, [] if hops is None else hops))


def without_ids(data: bytes) -> bytes:
    """`data` with each ErrorResponse's correlation id (field i, random per statement) taken out."""
    out = []
    for kind, body in messages(data):
        if kind == b"E":
            body = b"".join(f + b"\0" for f in body.split(b"\0")[:-1] if f and not f.startswith(b"i")) + b"\0"
        out.append(kind + struct.pack("!i", len(body) + 4) + body)
    return b"".join(out)


def both(tmp_path: Path, payload: bytes, monkeypatch: pytest.MonkeyPatch, name: str = "x") -> tuple[bytes, bytes]:
    """(with memory, without), each on a fresh lake."""
    got = converse(tmp_path / f"{name}-memory", payload, remember=True, monkeypatch=monkeypatch)
    want = converse(tmp_path / f"{name}-none", payload, remember=False, monkeypatch=monkeypatch)
    return got, want


def messages(data: bytes) -> list[tuple[bytes, bytes]]:
    """Backend output -> (type byte, body) per message."""
    out, i = [], 0
    while i < len(data):
        length = struct.unpack_from("!i", data, i + 1)[0]
        out.append((data[i:i + 1], data[i + 5:i + 1 + length]))
        i += 1 + length
    return out


def kinds(data: bytes) -> list[bytes]:
    return [kind for kind, _ in messages(data)]


SCENARIOS = {
    "repeats": lookup("1") + lookup("2") + lookup("99") + lookup("3"),
    "a column added between": lookup("1") + query("alter table demo.t add column z text") + lookup("2"),
    "a column dropped between": lookup("1") + query("alter table demo.t drop column s") + lookup("2"),
    "a parameter's type widened between": (
        parse("select id from demo.t where n = $1") + describe("S") + bind("10") + execute() + SYNC
        + query("alter table demo.t alter column n type bigint")
        + parse("select id from demo.t where n = $1") + describe("S") + bind("20") + execute() + SYNC),
    "the table dropped between": lookup("1") + query("drop table demo.t") + lookup("2") + lookup("3"),
    "rows committed between": lookup("1") + query("insert into demo.t values (4, 'd', 40)") + lookup("4"),
    "search_path moved between": (
        query("set search_path = demo") + lookup("1", "select * from t where id = $1")
        + query("set search_path = other") + lookup("1", "select * from t where id = $1")),
    "a bad value on the repeat": lookup("1") + lookup("not a number") + lookup("2"),
    "a bad value after DDL": lookup("1") + query("alter table demo.t add column z text") + lookup("x") + lookup("2"),
    "too many values": lookup("1") + parse(POINT) + bind("1", "2") + execute() + SYNC + lookup("3"),
    "a Flush after Parse": lookup("1") + parse(POINT) + FLUSH + bind("2") + describe() + execute() + SYNC,
    "a Flush after Parse, DDL first": (
        lookup("1") + query("alter table demo.t add column z text")
        + parse(POINT) + FLUSH + bind("2") + describe() + execute() + SYNC),
    "the statement described": lookup("1") + parse(POINT) + describe("S") + bind("2") + execute() + SYNC,
    "no Describe": lookup("1") + parse(POINT) + bind("2") + execute() + SYNC,
    "pg8000's three Syncs": lookup("1") + (parse(POINT) + FLUSH + SYNC + describe("S") + FLUSH + SYNC
                                           + bind("2") + FLUSH + execute() + FLUSH + SYNC),
    "Parse then Sync alone, after DDL": (
        lookup("1") + query("alter table demo.t add column z text") + parse(POINT) + SYNC + bind("2") + execute() + SYNC),
    "a row at a time": lookup("1") + parse("select * from demo.t where id > $1") + bind("0") + describe()
    + execute(1) + execute(1) + execute(0) + SYNC + parse("select * from demo.t where id > $1") + bind("1")
    + describe() + execute(1) + execute(0) + SYNC,
    "two Parses before an Execute": lookup("1") + parse(POINT) + bind("1") + parse(POINT) + bind("2") + execute() + SYNC,
    "closed between": lookup("1") + parse(POINT) + frame(b"C", b"S\0") + bind("2") + execute() + SYNC + lookup("3"),
    "binary results": lookup("1") + parse(POINT) + bind("2", binary_results=True) + describe() + execute() + SYNC,
    "client-given types": lookup("1", oids=(20,)) + lookup("2", oids=(20,)) + lookup("3", oids=(23,)),
    "inside a block": query("begin") + lookup("1") + lookup("2") + query("commit") + lookup("3"),
    "a simple query between": lookup("1") + parse(POINT) + bind("2") + query("select 1") + execute() + SYNC,
    "an error in the statement": lookup("1", "select 1/0 from demo.t where id = $1") * 2,
    "named statements beside": lookup("1") + parse(POINT, name="s1") + SYNC + lookup("2")
    + bind("3", statement="s1") + execute() + SYNC,
}


@pytest.mark.parametrize("scenario", list(SCENARIOS))
def test_the_client_receives_what_a_session_without_memory_sends(tmp_path, monkeypatch, scenario):
    got, want = both(tmp_path, SCENARIOS[scenario], monkeypatch)
    assert kinds(got) == kinds(want)
    assert got == want


def test_a_repeat_takes_one_thread_hop_not_two(tmp_path, monkeypatch):
    hops: list[str] = []
    converse(tmp_path / "a", lookup("1"), remember=True, monkeypatch=monkeypatch, hops=hops)
    assert len(hops) == 2  # Parse describes, Execute runs
    converse(tmp_path / "b", lookup("1") + lookup("2") + lookup("3"), remember=True, monkeypatch=monkeypatch,
             hops=hops)
    assert len(hops) == 4  # the repeats' Parses were answered from memory, checked in the Execute's job


def test_a_repeat_whose_description_changed_is_answered_again(tmp_path, monkeypatch):
    payload = lookup("1") + query("alter table demo.t add column z text") + lookup("2")
    got = converse(tmp_path / "a", payload, remember=True, monkeypatch=monkeypatch)
    # The second lookup's RowDescription has the new column: 4 fields, and no 3-field one was sent.
    fields = [struct.unpack_from("!h", body)[0] for kind, body in messages(got) if kind == b"T"]
    assert fields == [3, 4]
    assert kinds(got).count(b"1") == 2  # one ParseComplete per lookup: the dropped one never left


def test_the_memory_is_bounded():
    memory = extended.Descriptions()
    for i in range(extended.DESCRIBED_MAX + 10):
        memory.remember(f"select {i}", (), None, None)  # type: ignore[arg-type]
    assert memory.recall("select 0", ()) is None
    assert memory.recall(f"select {extended.DESCRIBED_MAX + 9}", ()) is not None


# Differential: arbitrary sequences of extended-protocol messages, lookups and statements that
# change the lake, with and without the memory.
_steps = st.sampled_from([
    lookup("1"), lookup("2"), lookup("x"), lookup(None), lookup("1", "select s from demo.t where id = $1"),
    parse(POINT), bind("1"), bind("2", binary_results=True), bind(), describe("S"), describe("P"), execute(),
    execute(1), SYNC, FLUSH, frame(b"C", b"S\0"), frame(b"C", b"P\0"),
    query("alter table demo.t add column z text"), query("alter table demo.t drop column s"),
    query("insert into demo.t values (5, 'e', 50)"), query("drop table demo.t"), query("begin"),
    query("commit"), query("select 1"),
])


@settings(max_examples=25, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(st.lists(_steps, min_size=1, max_size=10))
def test_any_conversation_is_answered_as_without_memory(tmp_path_factory, monkeypatch, steps):
    payload = b"".join(steps) + SYNC
    base = tmp_path_factory.mktemp("conv")
    got, want = both(base, payload, monkeypatch)
    assert got == want


@pytest.mark.parametrize("tail", [
    parse(POINT) + bind("2") + describe() + execute() + SYNC,  # checked in the Execute's job
    parse(POINT) + FLUSH + bind("2") + execute() + SYNC,  # checked before the Flush
], ids=["execute", "flush"])
def test_a_check_that_times_out_is_the_parses_error(tmp_path, monkeypatch, tail):
    import time as clock

    from icegres.protocol.pgwire import session as session_module

    real = extended.describe_query

    def slow(qctx, stmt, given, big=None):
        if qctx.env.settings.get("statement_timeout") not in (None, "0"):
            clock.sleep(0.5)
        return real(qctx, stmt, given, big)

    monkeypatch.setattr(extended, "describe_query", slow)
    monkeypatch.setattr(session_module, "describe_query", slow)
    payload = lookup("1") + query("set statement_timeout = 100") + tail + query("reset statement_timeout") + lookup("3")
    got, want = both(tmp_path, payload, monkeypatch)
    assert got == want
    assert b"57014" in got
