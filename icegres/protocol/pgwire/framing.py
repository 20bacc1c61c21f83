"""Bytes -> frontend messages. Incomplete input is "need more data", never a blocking read.

The first message of a connection has no type byte (startup phase); after it every frame is
type byte + int32 length. Lengths are bounded so a hostile client cannot make us buffer gigabytes.
"""

from __future__ import annotations

import struct
from typing import Final

from icegres.pg.errors import PROTOCOL_VIOLATION, PgError
from icegres.protocol.pgwire import messages as m

NEED_DATA: Final = None
MAX_STARTUP_BYTES = 10_000  # PostgreSQL's own limit for a startup packet
MAX_MESSAGE_BYTES = 256 * 1024 * 1024
# A Query or Parse message longer than this is kept as the pieces it arrived in (MessagePieces),
# never copied into one buffer: copying, decoding or searching 50 MB is one C call of 10-60 ms that
# holds the GIL, and every other session's statement waits for each (protocol/pgwire/statements.py).
PIECES_BYTES = 64 * 1024


class FrameDecoder:
    def __init__(self) -> None:
        self._buf = bytearray()
        self.in_startup = True  # the session flips this after the startup message is handled
        # Authentication lowers it (auth.py): before a client has logged in, no message needs
        # more than PostgreSQL's 64 kB, and a stranger must not make us buffer 256 MiB.
        self.max_message_bytes = MAX_MESSAGE_BYTES
        self._pieces: list[bytes] | None = None  # a big Query's or Parse's body so far
        self._pieces_kind = b""
        self._pieces_need = 0  # how many of its bytes are still to come

    def feed(self, data: bytes) -> None:
        if self._pieces is not None and self._pieces_need:
            take = min(len(data), self._pieces_need)
            self._pieces.append(data if take == len(data) else data[:take])
            self._pieces_need -= take
            data = data[take:]
        if data:
            self._buf += data

    def first_byte(self) -> int | None:
        """The next buffered byte, not consumed (None when nothing is buffered)."""
        return self._buf[0] if self._buf else None

    def buffered(self) -> int:
        """How many bytes are buffered and not yet decoded."""
        return len(self._buf)

    def take_buffered(self) -> bytes:
        """Every buffered byte, removed: a direct TLS ClientHello goes to the TLS layer."""
        data = bytes(self._buf)
        self._buf.clear()
        return data

    def next_startup(self):
        """Next startup-phase message, or NEED_DATA."""
        if len(self._buf) < 4:
            return NEED_DATA
        (length,) = struct.unpack_from("!i", self._buf, 0)
        if length < 8 or length > MAX_STARTUP_BYTES:
            raise PgError(PROTOCOL_VIOLATION, "invalid length of startup packet")
        if len(self._buf) < length:
            return NEED_DATA
        body = bytes(self._buf[4:length])
        del self._buf[:length]
        return m.decode_startup(body)

    def sync_is_next(self) -> bool:
        """Whether the next buffered message is a whole Sync (what follows it does not matter)."""
        return bytes(self._buf[:5]) == b"S\x00\x00\x00\x04"

    def next_message(self) -> m.FrontendMessage | m.MessagePieces | None:
        """Next regular message, or NEED_DATA. A Query or Parse over PIECES_BYTES comes as
        MessagePieces."""
        if self._pieces is not None:
            if self._pieces_need:
                return NEED_DATA
            pieces, self._pieces = self._pieces, None
            return m.MessagePieces(self._pieces_kind, pieces)
        if len(self._buf) < 5:
            return NEED_DATA
        kind = bytes(self._buf[0:1])
        (length,) = struct.unpack_from("!i", self._buf, 1)
        if length < 4 or length > self.max_message_bytes:
            raise PgError(PROTOCOL_VIOLATION, f"invalid message length {length}")
        if kind in (b"Q", b"P") and length > PIECES_BYTES:
            body = length - 4
            first = bytes(memoryview(self._buf)[5 : 5 + body])  # what came with the header (< 1 MB)
            del self._buf[: 5 + len(first)]
            self._pieces, self._pieces_need, self._pieces_kind = [first], body - len(first), kind
            return self.next_message()
        if len(self._buf) < length + 1:
            return NEED_DATA
        body = bytes(memoryview(self._buf)[5 : length + 1])  # one copy, not a slice and a copy
        del self._buf[: length + 1]
        try:
            return m.decode_frontend(kind, body)
        except PgError as err:  # (its frame was whole: only a bad frame loses the message stream)
            if err.sqlstate == PROTOCOL_VIOLATION:
                raise
            return m.Unreadable(kind, err)

    def worth_a_thread(self, limit: int) -> bool:
        """Whether the next message is a regular message other than a Query or Parse, over `limit`
        bytes and all buffered: decoded in a worker thread (a 50 MB message's copy and UTF-8
        decoding would hold the event loop ~0.1-0.3 s). A big Query's or Parse's body is collected
        in pieces instead, and one not all there is not decoded yet."""
        if self._pieces is not None or len(self._buf) < 5 or self._buf[0] in (ord("Q"), ord("P")):
            return False
        (length,) = struct.unpack_from("!i", self._buf, 1)
        return length > limit and len(self._buf) >= length + 1
