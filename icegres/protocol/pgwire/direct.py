"""A worker thread's own answer to a statement, sent straight to the client's socket.

A statement's result comes back to the trio loop from the worker thread that computed it, and the
loop, asleep in epoll for as long as the query ran, takes ~0.3 ms to wake on this machine (bench
`wakeups`: 0.05 ms at once, 0.30 ms after 10 ms idle) before it can send a single byte. The worker
thread is awake already. So when a statement's whole answer is known in the thread — its rows fit
in one chunk and nothing but ReadyForQuery follows — the thread writes it to the socket itself,
and the loop catches up afterwards.

Exactly one side answers. The thread claims the reply under a lock before it writes; the session,
if its statement is cancelled (CancelRequest, statement_timeout, a hang-up) while the thread runs,
refuses the reply under the same lock before it answers with an error. Whoever comes first wins:
a refused thread sends nothing, and a cancel that lands after the claim finds the statement
answered, as a cancel that reaches PostgreSQL after the last row does. The lock is held only
across non-blocking writes; what the socket buffer does not take is handed back to the loop.
"""

from __future__ import annotations

import enum
import os
import threading


class _State(enum.Enum):
    OPEN = "open"
    SENT = "sent"
    REFUSED = "refused"


class DirectReply:
    """One statement's chance to be answered from its worker thread."""

    def __init__(self, fd: int) -> None:
        self._fd = fd
        self._lock = threading.Lock()
        self._state = _State.OPEN
        self.unsent = b""  # what the socket did not take at once: the loop sends it
        self.error: OSError | None = None  # the connection failed mid-write

    def send(self, payload: bytes) -> bool:
        """From the worker thread: write `payload` unless the session refused. True if claimed
        (then the session must send `unsent` and nothing else for this statement)."""
        with self._lock:
            if self._state is not _State.OPEN:
                return False
            self._state = _State.SENT
            view = memoryview(payload)
            while view:
                try:
                    view = view[os.write(self._fd, view) :]
                except InterruptedError:
                    continue
                except BlockingIOError:
                    break
                except OSError as exc:
                    self.error = exc
                    return True
            self.unsent = bytes(view)
            return True

    def refuse(self) -> bool:
        """From the session, once it stops waiting: True if the thread will never answer; False
        if it has answered already (the statement completed)."""
        with self._lock:
            if self._state is _State.SENT:
                return False
            self._state = _State.REFUSED
            return True
