"""Answers a worker thread writes straight to the socket (pgwire/direct.py), seen from the wire.

A lone query's answer may leave from its worker thread rather than the event loop. These tests
drive the cases where that could go wrong: an earlier answer still queued, an answer bigger than
the socket takes at once, a setting the client must hear about, and cancels racing the thread.
"""

from __future__ import annotations

import random
import socket
import struct
import threading
import time
from collections.abc import Iterator

import psycopg
import pytest

from tests.e2e.expected import trip
from tests.support.icegres_server import IcegresServer, running_icegres

pytestmark = pytest.mark.e2e


@pytest.fixture(scope="module")
def server(seeded_dir) -> Iterator[IcegresServer]:
    with running_icegres(seeded_dir) as srv:
        yield srv


def _message(kind: bytes, body: bytes) -> bytes:
    return kind + struct.pack("!i", len(body) + 4) + body


def _query(sql: str) -> bytes:
    return _message(b"Q", sql.encode() + b"\0")


class RawClient:
    """Protocol 3.0 by hand: what a driver would hide (message order, packet boundaries)."""

    def __init__(self, server: IcegresServer, rcvbuf: int | None = None) -> None:
        self.sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
        if rcvbuf is not None:
            self.sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, rcvbuf)
        self.sock.settimeout(30)
        self.sock.connect((server.host, server.port))
        self.buf = b""
        body = struct.pack("!i", 196608) + b"user\0icegres\0database\0icegres\0\0"
        self.sock.sendall(struct.pack("!i", len(body) + 4) + body)
        self.until_ready()

    def read(self) -> tuple[bytes, bytes]:
        while len(self.buf) < 5 or len(self.buf) < 1 + struct.unpack_from("!i", self.buf, 1)[0]:
            data = self.sock.recv(1 << 16)
            assert data, "server closed the connection"
            self.buf += data
        length = struct.unpack_from("!i", self.buf, 1)[0]
        kind, body, self.buf = self.buf[:1], self.buf[5 : 1 + length], self.buf[1 + length :]
        return kind, body

    def until_ready(self) -> list[tuple[bytes, bytes]]:
        got = []
        while True:
            kind, body = self.read()
            got.append((kind, body))
            if kind == b"Z":
                return got

    def close(self) -> None:
        self.sock.sendall(_message(b"X", b""))
        self.sock.close()


def test_an_answer_queued_before_a_direct_one_leaves_first(server):
    # One packet: an extended-protocol Execute with no Sync after it (its answer waits in the
    # session's buffer for a Sync or Flush), then a Query whose worker thread is ready to write.
    client = RawClient(server)
    client.sock.sendall(
        _message(b"P", b"\0select 7\0\0\0")
        + _message(b"B", b"\0\0\0\0\0\0\0\0")
        + _message(b"E", b"\0\0\0\0\0")
        + _query("select 42")
    )
    answer = client.until_ready()
    assert [k for k, _ in answer] == [b"1", b"2", b"D", b"C", b"T", b"D", b"C", b"Z"]
    assert answer[2][1].endswith(b"7") and answer[5][1].endswith(b"42")
    client.close()


def test_an_answer_bigger_than_the_socket_takes_arrives_whole(server):
    # ~0.4 MB of rows in one chunk, to a client with a tiny receive buffer that reads late: the
    # thread's write stops short and the event loop sends the rest.
    client = RawClient(server, rcvbuf=4096)
    client.sock.sendall(_query("select * from demo.trips where id <= 3000 order by id"))
    time.sleep(0.5)
    answer = client.until_ready()
    kinds = [k for k, _ in answer]
    assert kinds[0] == b"T" and kinds[-2:] == [b"C", b"Z"]
    assert kinds.count(b"D") == 3000
    assert answer[-2][1] == b"SELECT 3000\0"
    assert answer[-1][1] == b"I"
    # The session is in step afterwards.
    client.sock.sendall(_query("select 1"))
    assert [k for k, _ in client.until_ready()] == [b"T", b"D", b"C", b"Z"]
    client.close()


def test_set_config_on_a_reported_setting_sends_parameter_status(server):
    client = RawClient(server)
    client.sock.sendall(_query("select set_config('application_name', 'from_set_config', false)"))
    answer = client.until_ready()
    # As PostgreSQL 14+: the ParameterStatus comes after CommandComplete, before ReadyForQuery.
    assert [k for k, _ in answer] == [b"T", b"D", b"C", b"S", b"Z"]
    assert answer[3][1] == b"application_name\0from_set_config\0"
    client.sock.sendall(_query("set application_name = 'from_set'"))
    assert [k for k, _ in client.until_ready()] == [b"C", b"S", b"Z"]
    client.close()
    with psycopg.connect(server.dsn(), autocommit=True) as conn:
        conn.execute("select set_config('application_name', 'seen_by_psycopg', false)")
        assert conn.info.parameter_status("application_name") == "seen_by_psycopg"


def _parse(sql: str) -> bytes:
    return _message(b"P", b"\0" + sql.encode() + b"\0\0\0")


def _bind() -> bytes:
    return _message(b"B", b"\0\0" + b"\0\0" + b"\0\0" + b"\0\0")  # no formats, params, results


def _execute(max_rows: int = 0) -> bytes:
    return _message(b"E", b"\0" + struct.pack("!i", max_rows))


DESCRIBE_PORTAL = _message(b"D", b"P\0")
SYNC = _message(b"S", b"")
FLUSH = _message(b"H", b"")


def _kinds(answer: list[tuple[bytes, bytes]]) -> list[bytes]:
    return [k for k, _ in answer]


def test_an_extended_query_with_its_sync_is_answered_whole_and_in_order(server):
    client = RawClient(server)
    client.sock.sendall(_parse("select city from demo.cities order by city limit 2") + _bind()
                        + DESCRIBE_PORTAL + _execute() + SYNC)
    answer = client.until_ready()
    assert _kinds(answer) == [b"1", b"2", b"T", b"D", b"D", b"C", b"Z"]
    assert answer[-2][1] == b"SELECT 2\0" and answer[-1][1] == b"I"
    # Without Describe, and two sequences pipelined in one packet: each answered in turn.
    client.sock.sendall(_parse("select 5") + _bind() + _execute() + SYNC
                        + _parse("select 6") + _bind() + _execute() + SYNC)
    first, second = client.until_ready(), client.until_ready()
    assert _kinds(first) == _kinds(second) == [b"1", b"2", b"D", b"C", b"Z"]
    assert first[2][1].endswith(b"5") and second[2][1].endswith(b"6")
    client.sock.sendall(_query("select 1"))
    assert _kinds(client.until_ready()) == [b"T", b"D", b"C", b"Z"]
    client.close()


def test_extended_queries_the_thread_must_not_answer_still_answer_right(server):
    client = RawClient(server)
    # A Flush before the Sync: the rows go out at the Flush, ReadyForQuery at the Sync.
    client.sock.sendall(_parse("select 7") + _bind() + _execute() + FLUSH)
    assert [client.read()[0] for _ in range(4)] == [b"1", b"2", b"D", b"C"]
    client.sock.sendall(SYNC)
    assert _kinds(client.until_ready()) == [b"Z"]
    # A row limit: the portal is suspended, then run to its end.
    client.sock.sendall(_parse("select id from demo.trips where id <= 3 order by id") + _bind()
                        + _execute(2) + _execute(0) + SYNC)
    answer = client.until_ready()
    assert _kinds(answer) == [b"1", b"2", b"D", b"D", b"s", b"D", b"C", b"Z"]
    assert answer[-2][1] == b"SELECT 3\0"
    # An error while executing: what was queued before it, then the error, then ReadyForQuery.
    client.sock.sendall(_parse("select 1 / (id - id) from demo.trips where id = 1") + _bind()
                        + _execute() + SYNC)
    answer = client.until_ready()
    assert _kinds(answer) == [b"1", b"2", b"E", b"Z"]
    assert b"22012" in answer[2][1]
    # Inside a transaction block: the block's status comes back.
    client.sock.sendall(_query("begin"))
    client.until_ready()
    client.sock.sendall(_parse("select 8") + _bind() + _execute() + SYNC)
    answer = client.until_ready()
    assert _kinds(answer) == [b"1", b"2", b"D", b"C", b"Z"] and answer[-1][1] == b"T"
    client.sock.sendall(_query("rollback"))
    assert client.until_ready()[-1][1] == b"I"
    client.close()


QUICK = [
    ("select 1", [(1,)], None),
    ("select count(*) from demo.cities", [(20,)], None),
    ("select id, passengers from demo.trips where id = 4242", [(4242, trip(4242)["passengers"])], None),
    ("select id, passengers from demo.trips where id = %s", [(4242, trip(4242)["passengers"])], (4242,)),
]


def test_cancels_racing_quick_answers_never_desynchronise_the_session(server):
    # statement_timeout of 1 ms and a stream of CancelRequests land before, during and after
    # each statement's thread answers: every statement gets exactly one answer, either its rows
    # or 57014, and the next statement's answer is its own.
    rng = random.Random(7)
    answered = cancelled = 0
    with psycopg.connect(server.dsn(), autocommit=True) as conn:
        stop = threading.Event()

        def cancel_often() -> None:
            while not stop.is_set():
                conn.cancel()
                time.sleep(rng.uniform(0.001, 0.008))

        canceller = threading.Thread(target=cancel_often)
        canceller.start()
        try:
            for i in range(400):
                sql, expected, params = QUICK[i % len(QUICK)]
                try:
                    if i % 3:
                        conn.execute("set statement_timeout = 1")
                    assert conn.execute(sql, params).fetchall() == expected
                    answered += 1
                except psycopg.errors.QueryCanceled:
                    cancelled += 1
                finally:
                    try:
                        conn.execute("set statement_timeout = 0")
                    except psycopg.errors.QueryCanceled:
                        pass
        finally:
            stop.set()
            canceller.join()
        conn.execute("set statement_timeout = 0")
        assert conn.execute("select 7").fetchone() == (7,)
    assert answered > 0


def test_psycopg_pipeline_mode_gets_every_answer_in_order(server):
    # Pipeline mode sends several Parse/Bind/Describe/Execute groups and one Sync: only the last
    # Execute has the Sync behind it, so the earlier answers are queued when its thread writes.
    with psycopg.connect(server.dsn(), autocommit=True) as conn:
        with conn.pipeline():
            cursors = [conn.execute("select id, city from demo.trips where id = %s", (i,)) for i in (11, 12, 13)]
            total = conn.execute("select count(*) from demo.cities")
        assert [c.fetchall() for c in cursors] == [[(i, trip(i)["city"])] for i in (11, 12, 13)]
        assert total.fetchall() == [(20,)]
        assert conn.execute("select 9").fetchone() == (9,)
