"""hangup.hung_up: a peer that closed its end is noticed; bytes it pipelined are not a hang-up."""

from __future__ import annotations

import socket

from icegres.protocol.pgwire.hangup import hung_up


def test_a_closed_peer_is_a_hang_up_and_pending_bytes_are_not():
    ours, theirs = socket.socketpair()
    other, other_peer = socket.socketpair()
    try:
        other_peer.sendall(b"Q\0\0\0\x05x")  # a pipelined message, still connected
        assert hung_up([ours.fileno(), other.fileno()]) == set()
        theirs.close()
        assert hung_up([ours.fileno(), other.fileno()]) == {ours.fileno()}
    finally:
        for s in (ours, theirs, other, other_peer):
            s.close()


def test_nothing_to_watch():
    assert hung_up([]) == set()
