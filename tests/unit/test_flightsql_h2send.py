"""The coalescing DATA writer: every byte arrives, in order, under the peer's flow control."""

from __future__ import annotations

import asyncio

import h2.config
import h2.connection
import h2.events
import h2.settings
import pyarrow as pa
import pytest
from hypothesis import given
from hypothesis import strategies as st

from icegres.protocol.flightsql import h2send

pytestmark = pytest.mark.unit


class _Conn:
    def __init__(self) -> None:
        self.write_ready = asyncio.Event()
        self.write_ready.set()
        self.data_sent = 0

    def data_send_process(self) -> None:
        pass


class _Transport:
    def __init__(self) -> None:
        self.writes: list[bytes] = []

    def write(self, data: bytes) -> None:
        self.writes.append(data)


class _Stream:
    """What grpclib's Stream gives send_data: ids, the h2 connection, events, counters."""

    def __init__(self, server: h2.connection.H2Connection, stream_id: int) -> None:
        self.id = stream_id
        self._h2_connection = server
        self._transport = _Transport()
        self.connection = _Conn()
        self.window_updated = asyncio.Event()
        self.data_sent = 0


def _pair(window: int) -> tuple[h2.connection.H2Connection, h2.connection.H2Connection, int]:
    client = h2.connection.H2Connection(h2.config.H2Configuration(client_side=True))
    server = h2.connection.H2Connection(h2.config.H2Configuration(client_side=False))
    client.initiate_connection()
    client.update_settings({h2.settings.SettingCodes.INITIAL_WINDOW_SIZE: window})
    server.initiate_connection()
    server.receive_data(client.data_to_send())
    client.receive_data(server.data_to_send())
    server.receive_data(client.data_to_send())
    stream_id = client.get_next_available_stream_id()
    client.send_headers(stream_id, [(":method", "POST"), (":path", "/x"), (":scheme", "http"),
                                    (":authority", "t")])
    server.receive_data(client.data_to_send())
    server.send_headers(stream_id, [(":status", "200")])
    client.receive_data(server.data_to_send())
    return client, server, stream_id


@pytest.mark.parametrize("size, window", [(0, 65_535), (10, 65_535), (3_000_000, 65_535),
                                          (1_000_000, 20_000), (300_000, 1 << 24)])
def test_every_byte_arrives_in_order_under_flow_control(size, window):
    payload = bytes(i % 251 for i in range(size))

    async def run() -> tuple[bytes, bool, int]:
        client, server, stream_id = _pair(window)
        stream = _Stream(server, stream_id)
        received = bytearray()
        ended = False

        async def peer() -> None:
            nonlocal ended
            while not ended:
                await asyncio.sleep(0)
                while stream._transport.writes:
                    for event in client.receive_data(stream._transport.writes.pop(0)):
                        if isinstance(event, h2.events.DataReceived):
                            received.extend(event.data)
                            client.acknowledge_received_data(event.flow_controlled_length, stream_id)
                        if isinstance(event, h2.events.StreamEnded):
                            ended = True
                    # The client's WINDOW_UPDATEs reach the server, which wakes the sender.
                    server.receive_data(client.data_to_send())
                    stream.window_updated.set()

        sender = asyncio.create_task(h2send.send_data(stream, payload, end_stream=True))
        await asyncio.wait_for(asyncio.gather(sender, peer()), 30)
        return bytes(received), ended, len(stream._transport.writes)

    received, ended, _ = asyncio.run(run())
    assert ended and received == payload


def test_frames_are_written_in_batches():
    client, server, stream_id = _pair(1 << 24)
    client.increment_flow_control_window(1 << 24)
    server.receive_data(client.data_to_send())
    stream = _Stream(server, stream_id)
    asyncio.run(h2send.send_data(stream, b"x" * 2_000_000))
    frames = 2_000_000 // server.max_outbound_frame_size
    assert len(stream._transport.writes) <= 2_000_000 // h2send.FLUSH_BYTES + 1 < frames
    assert stream.data_sent == 2_000_000


def _grpc_messages(data: bytes) -> list[bytes]:
    out, pos = [], 0
    while pos < len(data):
        assert data[pos] == 0  # not compressed
        size = int.from_bytes(data[pos + 1:pos + 5], "big")
        out.append(data[pos + 5:pos + 5 + size])
        pos += 5 + size
    assert pos == len(data)
    return out


@pytest.mark.parametrize("sizes, window", [((0,), 65_535), ((10, 3), 65_535), ((3_000_000,), 65_535),
                                           ((1_000_000, 7, 40_000), 20_000), ((300_000, 16_379), 1 << 24)])
def test_prebuilt_frames_arrive_in_order_under_flow_control(sizes, window):
    from icegres.protocol.flightsql import messages as M

    bodies = [bytes((i * 7 + n) % 251 for i in range(n)) for n in sizes]

    async def run() -> bytes:
        client, server, stream_id = _pair(window)
        stream = _Stream(server, stream_id)
        received = bytearray()
        done = False

        async def peer() -> None:
            while not done or stream._transport.writes:
                await asyncio.sleep(0)
                while stream._transport.writes:
                    for event in client.receive_data(bytes(stream._transport.writes.pop(0))):
                        if isinstance(event, h2.events.DataReceived):
                            received.extend(event.data)
                            client.acknowledge_received_data(event.flow_controlled_length, stream_id)
                    server.receive_data(client.data_to_send())
                    stream.window_updated.set()

        async def send() -> None:
            nonlocal done
            framed = M.http2_data_frames([[b] for b in bodies], stream_id)
            await h2send.send_framed(stream, framed, M.FRAME_PAYLOAD_BYTES)
            done = True

        await asyncio.wait_for(asyncio.gather(send(), peer()), 30)
        # The stream is still open and its windows were charged exactly: h2 agrees.
        server.send_data(stream_id, b"", end_stream=True)
        return bytes(received)

    assert _grpc_messages(asyncio.run(run())) == bodies


def test_corked_transport_sends_one_loop_pass_in_one_write():
    class Sink:
        def __init__(self) -> None:
            self.writes: list[bytes] = []

        def write(self, data: bytes) -> None:
            self.writes.append(bytes(data))

        def is_closing(self) -> bool:
            return False

    async def run() -> list[bytes]:
        sink = Sink()
        corked = h2send.CorkedTransport(sink, asyncio.get_running_loop())
        corked.write(b"headers")
        corked.write(b"message")
        corked.write(b"trailers")
        assert sink.writes == []
        await asyncio.sleep(0)
        big = b"x" * h2send.CORK_BYTES_MAX
        corked.write(b"small")
        corked.write(big)  # bulk: the small part first, then this one as it is, at once
        return sink.writes

    assert asyncio.run(run()) == [b"headersmessagetrailers", b"small", b"x" * h2send.CORK_BYTES_MAX]


def _reference_frames(bodies: list[bytes], stream_id: int, frame_size: int) -> bytes:
    """The frames built the plain way: gRPC-prefixed messages, cut every frame_size bytes."""
    stream = b"".join(b"\0" + len(b).to_bytes(4, "big") + b for b in bodies)
    out = bytearray()
    for at in range(0, len(stream), frame_size):
        chunk = stream[at:at + frame_size]
        out += len(chunk).to_bytes(3, "big") + b"\0\0" + stream_id.to_bytes(4, "big") + chunk
    return bytes(out)


@given(sizes=st.lists(st.lists(st.integers(0, 3000), min_size=1, max_size=4), min_size=1, max_size=5),
       frame_size=st.sampled_from([16, 100, 1000, 16_384]))
def test_frames_are_pieces_of_the_plain_framing(sizes, frame_size):
    from icegres.protocol.flightsql import messages as M

    messages = [[bytes([len(m) % 251]) * n for n in m] for m in sizes]
    pieces = [[p if i % 2 else pa.py_buffer(p) for i, p in enumerate(m)] for m in messages]
    framed = M.http2_data_frames(pieces, 7, frame_size)
    want = _reference_frames([b"".join(m) for m in messages], 7, frame_size)
    assert framed.joined() == want and framed.size == len(want)
    # frame_at points at each frame's header; the pieces of frames i..j are those frames' bytes.
    step = frame_size + M.FRAME_HEADER_BYTES
    for k in range(len(framed.frame_at)):
        assert b"".join(framed.pieces(k, k + 1)) == want[k * step:(k + 1) * step]
    assert b"".join(framed.pieces(1, len(framed.frame_at))) == want[step:]


def test_frames_do_not_copy_the_payload():
    from icegres.protocol.flightsql import messages as M

    body = pa.py_buffer(bytes(50_000))
    framed = M.http2_data_frames([[body]], 1)
    views = [p for p in framed.iov if isinstance(p, memoryview) and len(p) > 5]
    assert all(v.obj is body for v in views) and sum(map(len, views)) == body.size


@pytest.mark.parametrize("sndbuf", [4096, 1 << 20])
def test_pieces_reach_a_slow_reader_whole_and_in_order(sndbuf):
    """write_pieces over a real socket: what sendmsg does not take waits in the transport."""
    import socket
    import threading

    pieces = [bytes([i % 251]) * (1 + (i * 7919) % 20_000) for i in range(600)]
    want = b"".join(pieces)
    ours, theirs = socket.socketpair()
    ours.setsockopt(socket.SOL_SOCKET, socket.SO_SNDBUF, sndbuf)
    received = bytearray()

    def read_slowly() -> None:
        while len(received) < len(want) + 5:
            data = theirs.recv(7_000)
            if not data:
                return
            received.extend(data)

    reader = threading.Thread(target=read_slowly)
    reader.start()

    async def run() -> None:
        loop = asyncio.get_running_loop()
        transport, _ = await loop.connect_accepted_socket(asyncio.Protocol, ours)
        corked = h2send.CorkedTransport(transport, loop)
        corked.write(b"hello")  # held by the cork: it must still go first
        corked.write_pieces([memoryview(p) for p in pieces], len(want))
        while transport.get_write_buffer_size():
            await asyncio.sleep(0.01)
        transport.close()

    asyncio.run(asyncio.wait_for(run(), 30))
    reader.join(30)
    theirs.close()
    assert bytes(received) == b"hello" + want
