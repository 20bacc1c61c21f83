"""DirectReply: exactly one of the worker thread and the session answers a statement."""

from __future__ import annotations

import socket
import threading

import pytest

from icegres.protocol.pgwire.direct import DirectReply

pytestmark = pytest.mark.unit


@pytest.fixture
def pair():
    a, b = socket.socketpair()
    a.setblocking(False)  # as trio keeps it
    yield a, b
    a.close()
    b.close()


def test_the_thread_writes_the_answer_when_nobody_refused(pair):
    a, b = pair
    reply = DirectReply(a.fileno())
    assert reply.send(b"answer")
    assert reply.unsent == b"" and reply.error is None
    assert b.recv(100) == b"answer"
    assert not reply.refuse()  # a cancel after the claim finds the statement answered


def test_a_refused_reply_sends_nothing(pair):
    a, b = pair
    reply = DirectReply(a.fileno())
    assert reply.refuse()
    assert not reply.send(b"answer")
    b.setblocking(False)
    with pytest.raises(BlockingIOError):
        b.recv(100)


def test_what_the_socket_does_not_take_is_handed_back(pair):
    a, b = pair
    a.setsockopt(socket.SOL_SOCKET, socket.SO_SNDBUF, 4096)
    payload = bytes(range(256)) * 8192  # 2 MiB: far more than the socket buffers hold
    reply = DirectReply(a.fileno())
    assert reply.send(payload)
    assert 0 < len(reply.unsent) < len(payload)
    received = bytearray()
    b.settimeout(5)
    while len(received) < len(payload) - len(reply.unsent):
        received += b.recv(1 << 16)
    assert bytes(received) + reply.unsent == payload


def test_a_closed_peer_is_an_error_not_an_exception(pair):
    a, b = pair
    b.close()
    reply = DirectReply(a.fileno())
    assert reply.send(b"x" * 100_000)
    assert isinstance(reply.error, OSError)


def test_racing_claims_and_refusals_always_pick_exactly_one_side(pair):
    a, b = pair
    for _ in range(300):
        reply = DirectReply(a.fileno())
        outcome: dict[str, bool] = {}
        go = threading.Barrier(2)

        def thread(reply: DirectReply, outcome: dict[str, bool], go: threading.Barrier) -> None:
            go.wait()
            outcome["sent"] = reply.send(b"!")

        t = threading.Thread(target=thread, args=(reply, outcome, go))
        t.start()
        go.wait()
        outcome["refused"] = reply.refuse()
        t.join()
        assert outcome["sent"] != outcome["refused"]
        if outcome["sent"]:
            assert b.recv(1) == b"!"
