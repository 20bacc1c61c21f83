"""What a session has yet to send, in order, without copying big messages on the event loop.

Small messages are appended to one buffer, as a bytearray would hold them. A big one (an
ErrorResponse quoting a 50 MB value, a DataRow of one) is kept as the object it is and sent from
there: appending it, then copying the buffer out to send it, were two copies of 50 MB on the loop,
each ~35 ms of faulting in fresh pages, during which every other session of the server waited
(issue 26). Positions (`len`, `truncate`) count every byte, big messages included.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    import trio

BIG = 1 << 20  # bytes: a message this long is kept, not copied


class Outbox:
    __slots__ = ("_buf", "_big", "_big_bytes")

    def __init__(self) -> None:
        self._buf = bytearray()
        self._big: list[tuple[int, bytes]] = []  # (where in _buf it goes, the message)
        self._big_bytes = 0

    def __iadd__(self, data: bytes) -> Outbox:
        if len(data) >= BIG:
            self._big.append((len(self._buf), bytes(data)))  # (bytes of bytes is the object itself)
            self._big_bytes += len(data)
        else:
            self._buf += data
        return self

    def extend(self, parts: Iterable[bytes]) -> None:
        for data in parts:
            self += data

    def __len__(self) -> int:
        return len(self._buf) + self._big_bytes

    def __bytes__(self) -> bytes:
        return b"".join(self.parts())

    def truncate(self, at: int) -> None:
        """Drop everything from position `at` on (a message boundary)."""
        before = 0  # bytes of the big messages before the one looked at
        for k, (offset, data) in enumerate(self._big):
            if at <= offset + before:
                del self._big[k:]
                self._big_bytes = before
                del self._buf[at - before:]
                return
            if at < offset + before + len(data):
                raise ValueError("an Outbox is truncated at a message boundary")
            before += len(data)
        del self._buf[at - before:]

    def clear(self) -> None:
        self._buf.clear()
        self._big.clear()
        self._big_bytes = 0

    def parts(self) -> list[bytes | memoryview]:
        """The pending bytes in order, as they are held (not copied)."""
        if not self._big:
            return [self._buf] if self._buf else []
        out: list[bytes | memoryview] = []
        view = memoryview(self._buf)
        at = 0
        for offset, data in self._big:
            if offset > at:
                out.append(view[at:offset])
            out.append(data)
            at = offset
        if at < len(self._buf):
            out.append(view[at:])
        return out

    def take(self) -> list[bytes | memoryview]:
        """The pending bytes (`parts`), and the outbox empty: what it held is theirs now."""
        out = self.parts()
        self._buf = bytearray()  # (a new one: the parts may be views of the old)
        self._big = []
        self._big_bytes = 0
        return out

    async def send_to(self, stream: trio.abc.SendStream) -> None:
        """Send what is pending, in order; the outbox is empty from the first await on."""
        for part in self.take():
            await stream.send_all(part)
