"""A query result as Flight's FlightData messages, pulled from its RowSource in worker-thread
sized pieces: batches gathered into groups, groups encoded as IPC messages (compressed if asked)."""

from __future__ import annotations

import threading

import pyarrow as pa

from icegres.engine.row_source import RowSource
from icegres.protocol.flightsql import messages as M
from icegres.protocol.flightsql.ipc_gather import gather

# A DoGet message gathers DataFusion's 8k-row batches up to BATCH_ROWS rows, and stays under
# MESSAGE_BYTES: gRPC clients refuse messages over 4 MiB unless told otherwise.
BATCH_ROWS = 65_536
MESSAGE_BYTES = 3 << 20
CHUNK_BYTES = 8 << 20  # the FlightData one worker-thread hop prepares


def pull_messages(source: RowSource, schema: pa.Schema, stop: threading.Event,
                  budget: int = CHUNK_BYTES, compression: str | None = None,
                  stream_id: int | None = None) -> tuple[list[bytes], int, bool]:
    """Encode the next FlightData messages of a result (about `budget` bytes). Blocking.

    Returns (messages, rows, exhausted): `take_groups` then `encode_groups` in one thread.
    """
    groups, exhausted = take_groups(source, stop, budget)
    messages, rows = encode_groups(groups, schema, compression, stream_id)
    return messages, rows, exhausted


def take_groups(source: RowSource, stop: threading.Event,
                budget: int = CHUNK_BYTES) -> tuple[list[list[pa.RecordBatch]], bool]:
    """The next batches of a result, in groups of one message each (BATCH_ROWS rows, under
    MESSAGE_BYTES), about `budget` bytes of Arrow in all. Blocking: waits for DataFusion.

    Returns (groups, exhausted). `stop` (a cancelled DoGet) ends the take between batches.
    """
    groups: list[list[pa.RecordBatch]] = []
    size = 0
    while size < budget and not stop.is_set():
        parts: list[pa.RecordBatch] = []
        part_rows = part_bytes = 0
        while part_rows < BATCH_ROWS and part_bytes < MESSAGE_BYTES:
            # Whole batches, cut here once for both bounds: the rows cut off become the source's
            # pending rows (a cut by `take(limit)` and then by bytes would lose the first remainder).
            batch = source.take(0)
            if batch is None:
                break
            room = MESSAGE_BYTES - part_bytes
            # The buffers' total size bounds what the batch puts on the wire and costs nothing
            # to read; `nbytes`, exact for a slice, walks every string view (~16 us a batch,
            # ~40 ms of a 10M-row DoGet), so it is asked only when the bound does not fit.
            batch_bytes = batch.get_total_buffer_size()
            if batch_bytes > room:
                batch_bytes = batch.nbytes
            keep = min(batch.num_rows, BATCH_ROWS - part_rows)
            if batch_bytes > room:
                keep = min(keep, batch.num_rows * room // batch_bytes)
                if keep == 0:
                    if parts:
                        source.pending = batch  # it starts the next message
                        break
                    keep = 1  # a row bigger than a message goes alone
            if keep < batch.num_rows:
                source.pending = batch.slice(keep)
                batch_bytes = batch_bytes * keep // batch.num_rows
                batch = batch.slice(0, keep)
            parts.append(batch)
            part_rows += batch.num_rows
            part_bytes += batch_bytes
        if not parts:
            return groups, True
        groups.append(parts)
        size += part_bytes
    return groups, stop.is_set() or not source.has_more()


def encode_groups(groups: list[list[pa.RecordBatch]], schema: pa.Schema, compression: str | None = None,
                  stream_id: int | None = None) -> tuple[list[bytes], int]:
    """Each group as one FlightData message of `schema`'s types. Blocking (Arrow kernels).

    Returns (messages, rows). `compression` (--result-compression) compresses the IPC bodies here,
    in the worker thread. Uncompressed, a message's body is gathered from its batches' buffers
    (`ipc_gather`); only columns that must change (strings cast from views, several batches'
    strings and booleans) are copied. With `stream_id`, each message comes ready for the socket:
    gRPC-prefixed and cut into that HTTP/2 stream's DATA frames (`messages.http2_data_frames`,
    sent by `h2send.send_framed`) as pieces, so the kernel's copy into the socket is the body's
    first copy.
    """
    messages: list[bytes] = []
    rows = 0
    for parts in groups:
        gathered = gather(parts, schema) if compression is None else None
        if gathered is not None:
            pieces = M.gathered_flight_data_parts(gathered)
            rows += gathered.rows
        else:
            # Concatenate first, cast once: concatenating Utf8View columns copies only their
            # views, so the string bytes are copied by the cast alone, not by the cast and the concat.
            if len(parts) > 1 and not all(p.schema.equals(parts[0].schema) for p in parts[1:]):
                parts = [M.to_wire(p, schema) for p in parts]
            batch = M.to_wire(parts[0] if len(parts) == 1 else pa.concat_batches(parts), schema)
            pieces = M.batch_flight_data_parts(batch, compression)
            rows += batch.num_rows
        if stream_id is None:
            messages.append(b"".join(pieces))
        else:
            messages.append(M.http2_data_frames([pieces], stream_id))
    return messages, rows
