"""An Arrow IPC RecordBatch message for several batches, gathered from their own buffers.

A DoGet message joins DataFusion's ~8k-row batches into one of up to 64k rows. Concatenating them
and then `RecordBatch.serialize()` copied every fixed-width column twice before the HTTP/2 frames
copied it again. The IPC body is only each column's buffers one after another, 8-byte aligned,
described by a small flatbuffer header; so here the header is written directly and the body is a
list of pieces that point into the batches' buffers. A fixed-width column's data is the parts'
data buffers in order, and the frames are slices of the pieces (`messages.http2_data_frames`),
so such a column's first copy is the kernel's, into the socket.

Pure functions of Arrow objects. Columns of other shapes (strings and booleans from several
batches, or sliced) are concatenated per column first, which copies only that column; types this
module does not describe (nested, dictionary, view, null) make `gather` return None, and the
caller serializes the concatenated batch as before.

The header follows Arrow's Message.fbs (MetadataVersion V5): Message {version, header_type =
RecordBatch, header, bodyLength} and RecordBatch {length, nodes: [FieldNode], buffers: [Buffer]},
laid out forwards with every scalar, table and vector aligned as flatbuffers require.
"""

from __future__ import annotations

import struct
from dataclasses import dataclass

import pyarrow as pa
import pyarrow.compute as pc

Bytes = bytes | pa.Buffer | memoryview  # a piece of a serialized message (messages.py too)

_ALIGN = 8
_METADATA_V5 = 4
_HEADER_RECORD_BATCH = 3
_ZEROS = bytes(_ALIGN)


@dataclass(frozen=True)
class Gathered:
    """One record batch message: its flatbuffer header and its body as pieces."""

    header: bytes
    body: list[Bytes]
    body_size: int
    rows: int


def gather(parts: list[pa.RecordBatch], schema: pa.Schema) -> Gathered | None:
    """The IPC message of `parts`, concatenated and cast to `schema`'s types, or None when a
    column's type is not one this module lays out (the caller falls back to `serialize`)."""
    if not all(_laid_out(f.type) for f in schema):
        return None
    rows = sum(p.num_rows for p in parts)
    if rows == 0:
        return None
    body = _Body()
    nodes: list[tuple[int, int]] = []
    for i, field in enumerate(schema):
        t = field.type
        arrays = [p.column(i) for p in parts]
        if any(a.type != t for a in arrays):
            # Views (what DataFusion scans strings as) are concatenated first, so their bytes
            # are copied once, by the cast.
            if any(a.type != arrays[0].type for a in arrays):
                arrays = [a if a.type == t else a.cast(t) for a in arrays]
            arrays = [pa.concat_arrays(arrays).cast(t)]
        nulls = sum(a.null_count for a in arrays)
        nodes.append((rows, nulls))
        body.add([] if nulls == 0 else [_validity(arrays)], 0 if nulls == 0 else _bitmap_bytes(rows))
        if _fixed_width(t):
            if any(a.buffers()[1] is None for a in arrays):
                return None
            width = t.bit_width // 8
            body.add([a.buffers()[1].slice(a.offset * width, len(a) * width) for a in arrays], rows * width)
            continue
        if len(arrays) > 1 or arrays[0].offset or not _offsets_from_zero(arrays[0]):
            arrays = [pa.concat_arrays(arrays)]  # one fresh array: offset 0, offsets from 0
        buffers = arrays[0].buffers()
        if pa.types.is_boolean(t):
            body.add([buffers[1].slice(0, _bitmap_bytes(rows))], _bitmap_bytes(rows))
        else:  # (large_)string / (large_)binary: offsets, then data
            width = _offset_width(t)
            used = _offset_at(buffers[1], rows, width)
            body.add([buffers[1].slice(0, (rows + 1) * width)], (rows + 1) * width)
            body.add([buffers[2].slice(0, used)] if used else [], used)
    return Gathered(record_batch_header(rows, nodes, body.spans, body.size), body.pieces, body.size, rows)


class _Body:
    """Buffers laid end to end, each padded to 8 bytes, and where each one is."""

    def __init__(self) -> None:
        self.pieces: list[Bytes] = []
        self.spans: list[tuple[int, int]] = []
        self.size = 0

    def add(self, pieces: list[Bytes], length: int) -> None:
        self.spans.append((self.size, length))
        self.pieces.extend(p for p in pieces if len(p))
        pad = -length % _ALIGN
        if pad:
            self.pieces.append(_ZEROS[:pad])
        self.size += length + pad


def _bitmap_bytes(rows: int) -> int:
    return (rows + 7) // 8


def _validity(arrays: list[pa.Array]) -> pa.Buffer:
    """The validity bitmap of `arrays` end to end (a fresh boolean array's bits, offset 0)."""
    valid = pa.concat_arrays([pc.is_valid(a) for a in arrays])
    return valid.buffers()[1].slice(0, _bitmap_bytes(len(valid)))


def _offset_width(t: pa.DataType) -> int:
    return 8 if pa.types.is_large_string(t) or pa.types.is_large_binary(t) else 4


def _offset_at(offsets: pa.Buffer, index: int, width: int) -> int:
    return int.from_bytes(offsets.slice(index * width, width).to_pybytes(), "little", signed=True)


def _offsets_from_zero(a: pa.Array) -> bool:
    """Whether a string array's offsets start at 0 (Arrow's Rust side slices offsets buffers
    themselves, so an array at offset 0 may still start further into its data)."""
    return pa.types.is_boolean(a.type) or _offset_at(a.buffers()[1], 0, _offset_width(a.type)) == 0


def _fixed_width(t: pa.DataType) -> bool:
    """Types laid out as validity + one data buffer of whole bytes per value."""
    if pa.types.is_interval(t):
        return False
    return (pa.types.is_integer(t) or pa.types.is_floating(t) or pa.types.is_temporal(t)
            or pa.types.is_decimal(t) or pa.types.is_fixed_size_binary(t))


def _laid_out(t: pa.DataType) -> bool:
    """Types whose IPC layout this module writes."""
    return (
        _fixed_width(t)
        or pa.types.is_boolean(t)
        or pa.types.is_string(t) or pa.types.is_large_string(t)
        or pa.types.is_binary(t) or pa.types.is_large_binary(t)
    )


def record_batch_header(rows: int, nodes: list[tuple[int, int]], buffers: list[tuple[int, int]],
                        body_size: int) -> bytes:
    """The flatbuffer of an IPC Message whose header is a RecordBatch (no compression).

    Layout, all offsets from the start (vtables before their tables, vectors after):
      0  root offset -> Message table at 16
      4  Message vtable (6 u16)           16  Message table: soffset, header, bodyLength, version, type
      40 RecordBatch vtable (5 u16)       56  RecordBatch table: soffset, nodes, length, buffers
      84 nodes vector (count, then 16-byte FieldNodes from 88), then the buffers vector likewise.
    """
    nodes_at = 84
    buffers_at = nodes_at + 4 + 16 * len(nodes) + 4  # after the nodes, count aligned to 8 + 4
    out = bytearray(buffers_at + 4 + 16 * len(buffers))
    struct.pack_into("<I", out, 0, 16)
    # Message vtable: its size, the table's size, then field offsets: version, header_type,
    # header, bodyLength.
    struct.pack_into("<6H", out, 4, 12, 20, 16, 18, 4, 8)
    struct.pack_into("<iIqhB", out, 16, 16 - 4, 56 - 20, body_size, _METADATA_V5, _HEADER_RECORD_BATCH)
    # RecordBatch vtable: length, nodes, buffers.
    struct.pack_into("<5H", out, 40, 10, 20, 8, 4, 16)
    struct.pack_into("<iIqI", out, 56, 56 - 40, nodes_at - 60, rows, buffers_at - 72)
    struct.pack_into("<I", out, nodes_at, len(nodes))
    for k, (length, nulls) in enumerate(nodes):
        struct.pack_into("<qq", out, nodes_at + 4 + 16 * k, length, nulls)
    struct.pack_into("<I", out, buffers_at, len(buffers))
    for k, (offset, length) in enumerate(buffers):
        struct.pack_into("<qq", out, buffers_at + 4 + 16 * k, offset, length)
    return bytes(out)
