"""Coalesced HTTP/2 DATA writes for grpclib's server streams (DoGet throughput).

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
from typing import Any

log = logging.getLogger("icegres.flightsql")

FLUSH_BYTES = 256 << 10
_GRPCLIB_VERSION = "0.4.9"
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
    _installed = True
    return True
