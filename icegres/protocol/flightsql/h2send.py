"""Coalesced HTTP/2 writes for grpclib's server: DATA frames in batches, small writes corked.

grpclib 0.4.9 writes every DATA frame to the transport as soon as h2 has made it: with the
16 KiB max frame the Go gRPC client (ADBC) advertises, a 1M-row result (~53 MB of Arrow) is
~3,300 `socket.send` calls from the event-loop thread, and profiling the server showed those
syscalls as the largest share of the loop's busy time. This `send_data` makes the same frames,
in the same order, under the same flow-control checks, but hands them to the transport in
batches of about FLUSH_BYTES — and always before it waits (for the peer's window or for the
transport to drain), so the peer never waits for bytes we are holding. It also slices a
memoryview instead of copying each chunk out of a BytesIO.

`install()` swaps the method on grpclib's Stream class (process-wide, idempotent); it declines
on any grpclib version other than the one it was written against.
"""

from __future__ import annotations

import logging
import socket
from typing import Any

from icegres.protocol.flightsql.messages import FRAME_HEADER_BYTES, Bytes, Framed

log = logging.getLogger("icegres.flightsql")

# Each write costs the loop ~30 us of Python (h2's state machines, the bookkeeping); 1 MiB writes
# instead of 256 KiB took a 10M-row DoGet from 972 to 918 ms (p50 of 6 alternating runs).
FLUSH_BYTES = 1 << 20
IOV_MAX = 1024  # pieces per sendmsg (Linux's UIO_MAXIOV)
CORK_BYTES_MAX = 16 << 10  # writes below this are held until the end of the loop pass
_GRPCLIB_VERSION = "0.4.9"
_H2_VERSION = "4.4.1"  # send_framed charges flow control the way this h2 does
_installed = False


async def send_data(self: Any, data: bytes, end_stream: bool = False) -> None:
    """grpclib.protocol.Stream.send_data, with DATA frames written in batches."""
    assert self.id is not None
    h2 = self._h2_connection
    view = memoryview(data)
    pos, last = 0, len(data)
    pending = 0

    def flush() -> None:
        nonlocal pending
        if pending:
            self._transport.write(h2.data_to_send())
            self.connection.data_send_process()
            pending = 0

    while True:
        if not self.connection.write_ready.is_set():
            flush()
            await self.connection.write_ready.wait()
        window = h2.local_flow_control_window(self.id)
        if not window > 0:  # the window can become negative
            flush()
            self.window_updated.clear()
            await self.window_updated.wait()
            continue
        size = min(window, h2.max_outbound_frame_size, last - pos)
        chunk = view[pos:pos + size]
        pos += size
        final = pos == last
        h2.send_data(self.id, chunk, end_stream=end_stream and final)
        self.data_sent += size
        self.connection.data_sent += size
        pending += size
        if final or pending >= FLUSH_BYTES:
            # `pending or final`: an empty final frame (end_stream with no data) is sent too.
            pending = max(pending, 1)
            flush()
        if final:
            return


async def send_framed(self: Any, framed: Framed, frame_size: int) -> None:
    """Send DATA frames made by `messages.http2_data_frames` for this stream, as they are.

    The frames were built (in a worker thread) with this stream's id, so here nothing is copied
    or re-framed: their pieces go to the transport, whole frames at a time, at most FLUSH_BYTES
    per write, under the same checks as `send_data` — the transport's write_ready and the peer's
    flow-control windows, which are charged here exactly as `H2Connection.send_data` charges
    them. Per 16 KiB frame, h2 would build a frame object and copy its payload three times on
    the event-loop thread, holding the GIL; that was the largest share of the loop's time in a
    large DoGet.
    """
    from h2.connection import ConnectionInputs
    from h2.stream import StreamInputs

    assert self.id is not None
    h2 = self._h2_connection
    count = len(framed.frame_at)
    payload_total = framed.size - count * FRAME_HEADER_BYTES
    per_write = max(1, FLUSH_BYTES // (frame_size + FRAME_HEADER_BYTES))
    frame = sent_payload = 0
    while frame < count:
        if not self.connection.write_ready.is_set():
            await self.connection.write_ready.wait()
            continue
        if h2.max_outbound_frame_size < frame_size:  # the peer cannot take these frames
            raise RuntimeError(f"peer's max frame size {h2.max_outbound_frame_size} < {frame_size}")
        budget = h2.local_flow_control_window(self.id)
        frames = payload = 0
        while frames < per_write and frame + frames < count:
            size = min(frame_size, payload_total - sent_payload - payload)
            if size > budget:
                break
            budget -= size
            payload += size
            frames += 1
        if not frames:
            self.window_updated.clear()
            await self.window_updated.wait()
            continue
        # What H2Connection.send_data + H2Stream.send_data do, minus making the frames.
        h2.state_machine.process_input(ConnectionInputs.SEND_DATA)
        h2_stream = h2._get_stream_by_id(self.id)  # StreamClosedError once reset, as in send_data
        h2_stream.state_machine.process_input(StreamInputs.SEND_DATA)
        h2_stream.outbound_flow_control_window -= payload
        h2.outbound_flow_control_window -= payload
        pending = h2.data_to_send()  # frames h2 queued (WINDOW_UPDATE, PING ack) go first
        if pending:
            self._transport.write(pending)
        write_pieces(self._transport, framed.pieces(frame, frame + frames),
                     payload + frames * FRAME_HEADER_BYTES)
        frame += frames
        sent_payload += payload
        self.data_sent += payload
        self.connection.data_sent += payload
        self.connection.data_send_process()


def write_pieces(transport: Any, pieces: list[Bytes], size: int) -> None:
    """Write `pieces` (`size` bytes in all) in order: gathered by the transport if it can,
    else joined."""
    gather = getattr(transport, "write_pieces", None)
    if gather is not None:
        gather(pieces, size)
    else:
        transport.write(b"".join(pieces))


class CorkedTransport:
    """A transport that gathers the small writes of one event-loop pass into one `send`.

    A unary call writes its response headers, its message and its trailers separately (three
    `send` calls, three TCP segments with TCP_NODELAY, three wake-ups of the client's reader); a
    small DoGet four. Held here, they leave together when the loop pass ends (`call_soon`),
    or at once when CORK_BYTES_MAX have gathered; a write of that size or more (a stream's
    DATA) goes out at once as it is, after what was held, so bulk bytes are never copied into
    a join (flow control and `write_ready` keep working on the real transport, which never
    holds more than it did, plus at most CORK_BYTES_MAX).
    """

    __slots__ = ("_loop", "_parts", "_size", "_scheduled", "transport")

    def __init__(self, transport: Any, loop: Any) -> None:
        self.transport = transport
        self._loop = loop
        self._parts: list[bytes] = []
        self._size = 0
        self._scheduled = False

    def write(self, data: bytes) -> None:
        if not data:
            return
        if len(data) >= CORK_BYTES_MAX:  # bulk data: no point holding it, nor copying it into a join
            self.flush()
            self.transport.write(data)
            return
        self._parts.append(data)
        self._size += len(data)
        if self._size >= CORK_BYTES_MAX:
            self.flush()
        elif not self._scheduled:
            self._scheduled = True
            self._loop.call_soon(self._flush_soon)

    def write_pieces(self, pieces: list[Bytes], size: int) -> None:
        """Write `pieces` in order without joining them, where the socket takes them at once.

        Small writes join the cork. A bulk write goes to the socket as one gathering `sendmsg`
        (the kernel copies each piece once) when nothing is queued ahead of it; whatever the
        socket does not take is joined and left to the transport, which sends it when the
        socket drains, as it would any write. On transports without a plain socket (TLS) the
        pieces are joined.
        """
        if size < CORK_BYTES_MAX:
            self.write(b"".join(pieces))
            return
        self.flush()
        sock = getattr(self.transport, "_sock", None)
        if not isinstance(sock, socket.socket) or self.transport.get_write_buffer_size() \
                or self.transport.is_closing():
            self.transport.write(b"".join(pieces))
            return
        rest = pieces
        while rest:
            batch = rest[:IOV_MAX]
            try:
                sent = sock.sendmsg(batch)
            except (BlockingIOError, InterruptedError):
                break
            except OSError:
                break  # the transport reports the broken connection its own way, below
            taken = 0
            while taken < len(batch) and sent >= len(batch[taken]):
                sent -= len(batch[taken])
                taken += 1
            if taken < len(batch):  # the socket is full: the rest waits in the transport
                rest = [memoryview(rest[taken])[sent:], *rest[taken + 1:]] if sent else rest[taken:]
                break
            rest = rest[taken:]
        if rest:
            self.transport.write(b"".join(rest))

    def _flush_soon(self) -> None:
        self._scheduled = False
        self.flush()

    def flush(self) -> None:
        if not self._parts:
            return
        parts, self._parts, self._size = self._parts, [], 0
        if self.transport.is_closing():
            return
        self.transport.write(parts[0] if len(parts) == 1 else b"".join(parts))

    def close(self) -> None:
        self.flush()
        self.transport.close()

    def abort(self) -> None:
        self._parts, self._size = [], 0
        self.transport.abort()

    def __getattr__(self, name: str) -> Any:
        return getattr(self.transport, name)


def _connection_made(original: Any) -> Any:
    def connection_made(self: Any, transport: Any) -> None:
        import asyncio

        original(self, CorkedTransport(transport, asyncio.get_event_loop()))

    return connection_made


def install() -> bool:
    """Use the coalescing send_data in grpclib's streams; False (and a log line) if not applied."""
    global _installed
    if _installed:
        return True
    import grpclib
    from grpclib import protocol

    if grpclib.__version__ != _GRPCLIB_VERSION:
        log.info("grpclib %s (not %s): DATA frames are written one by one", grpclib.__version__,
                 _GRPCLIB_VERSION)
        return False
    protocol.Stream.send_data = send_data  # type: ignore[method-assign]
    protocol.H2Protocol.connection_made = _connection_made(  # type: ignore[method-assign]
        protocol.H2Protocol.connection_made)
    _installed = True
    return True


def framed_ok() -> bool:
    """Whether `send_framed` may be used: installed, and the h2 whose bookkeeping it mirrors."""
    if not _installed:
        return False
    import h2

    return h2.__version__ == _H2_VERSION
