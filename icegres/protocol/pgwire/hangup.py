"""Noticing a client that went away while its statement runs.

A session reads its socket only between statements, so a client that disconnects (or is killed)
during a long query was noticed only when the first result bytes failed to send; a query with no
batch for hours kept its worker thread and both engine threads all that time. PostgreSQL's answer
is `client_connection_check_interval`: poll the socket for a hang-up while a query runs. Here one
task per server polls the sockets of the sessions that are running a statement, every
CHECK_INTERVAL_S, and a session whose peer hung up is cancelled like a CancelRequest would (its
pulls end and its thread is freed: engine/batches.py), then closed without an answer.
"""

from __future__ import annotations

import select
from collections.abc import Iterable, Set
from typing import Protocol

import trio

CHECK_INTERVAL_S = 0.5
# POLLRDHUP: the peer closed its end (Linux); POLLHUP/POLLERR: reset or gone. Bytes the client
# pipelined (POLLIN) are not a hang-up: they wait for the next statement.
_GONE = select.POLLHUP | select.POLLERR | getattr(select, "POLLRDHUP", 0)


class Running(Protocol):
    def socket_fd(self) -> int: ...

    def hang_up(self) -> None: ...


def hung_up(fds: Iterable[int]) -> set[int]:
    """The file descriptors among `fds` whose peer has gone (a zero-timeout poll)."""
    poller = select.poll()
    for fd in fds:
        poller.register(fd, _GONE)
    return {fd for fd, events in poller.poll(0) if events & _GONE}


async def watch(running: Set[Running]) -> None:
    """Forever: every CHECK_INTERVAL_S, hang up the running sessions whose client is gone."""
    while True:
        await trio.sleep(CHECK_INTERVAL_S)
        if not running:
            continue
        by_fd = {}
        for session in list(running):
            try:
                by_fd[session.socket_fd()] = session
            except (OSError, AttributeError):  # closed (or no socket): its own I/O ends it
                continue
        for fd in hung_up(by_fd):
            by_fd[fd].hang_up()
