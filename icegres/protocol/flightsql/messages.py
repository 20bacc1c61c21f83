"""Flight SQL messages: commands in and out of google.protobuf.Any, FlightData by hand, IPC.

Pure functions over bytes, protobuf messages and Arrow objects: no I/O, no engine. Everything a
client sends passes through `decode_command` / `decode_action_body`, which either return a known
message or raise `BadCommand` (the server answers INVALID_ARGUMENT) — never anything else.
"""

from __future__ import annotations

from dataclasses import dataclass

import pyarrow as pa
from google.protobuf import any_pb2
from google.protobuf.message import Message

from icegres.protocol.flightsql import icegres_flight_pb2 as fl
from icegres.protocol.flightsql import icegres_flight_sql_metadata_pb2 as meta
from icegres.protocol.flightsql import icegres_flight_sql_pb2 as sql
from icegres.protocol.flightsql import icegres_flight_sql_writes_pb2 as writes
from icegres.protocol.flightsql.ipc_gather import Bytes, Gathered

TYPE_URL_PREFIX = "type.googleapis.com/"
SQL_PACKAGE = "arrow.flight.protocol.sql."

# The Flight SQL messages a client may send inside Any, by their upstream names.
COMMANDS: dict[str, type[Message]] = {
    cls.DESCRIPTOR.name: cls
    for cls in (
        sql.CommandGetSqlInfo,
        sql.CommandGetCatalogs,
        sql.CommandGetDbSchemas,
        sql.CommandGetTables,
        sql.CommandGetTableTypes,
        sql.CommandStatementQuery,
        sql.TicketStatementQuery,
        sql.CommandPreparedStatementQuery,
        sql.CommandStatementUpdate,
        sql.CommandPreparedStatementUpdate,
        sql.ActionCreatePreparedStatementRequest,
        sql.ActionClosePreparedStatementRequest,
        sql.ActionBeginTransactionRequest,
        sql.ActionEndTransactionRequest,
        writes.ActionBeginSavepointRequest,
        writes.ActionEndSavepointRequest,
        meta.CommandGetXdbcTypeInfo,
        meta.CommandGetPrimaryKeys,
        meta.CommandGetExportedKeys,
        meta.CommandGetImportedKeys,
        meta.CommandGetCrossReference,
        writes.CommandStatementIngest,
    )
}

# Commands whose name we know but do not serve yet: UNIMPLEMENTED rather than INVALID_ARGUMENT.
KNOWN_UNSUPPORTED = frozenset({
    "CommandStatementSubstraitPlan",
    "ActionCreatePreparedSubstraitPlanRequest",
    "ActionCancelQueryRequest",
})

COMMAND_BYTES_MAX = 16 << 20  # a command is SQL text and a few names: anything bigger is abuse


class BadCommand(ValueError):
    """A command, ticket or action body that is not a well-formed Flight SQL message."""


class UnsupportedCommand(BadCommand):
    """A well-formed Flight SQL message this server does not implement (yet)."""


def pack_any(message: Message) -> bytes:
    """`message` inside google.protobuf.Any, under its upstream Flight SQL type URL."""
    envelope = any_pb2.Any(type_url=TYPE_URL_PREFIX + SQL_PACKAGE + message.DESCRIPTOR.name,
                           value=message.SerializeToString())
    return envelope.SerializeToString()


def decode_command(data: bytes) -> Message:
    """The Flight SQL message inside an Any-wrapped command, ticket or action body."""
    if len(data) > COMMAND_BYTES_MAX:
        raise BadCommand(f"command of {len(data)} bytes is too large")
    try:
        envelope = any_pb2.Any.FromString(data)
    except Exception as exc:  # DecodeError, and whatever else a corrupt buffer provokes
        raise BadCommand(f"not a google.protobuf.Any: {exc}") from None
    url = envelope.type_url
    if not url.startswith(TYPE_URL_PREFIX + SQL_PACKAGE):
        raise BadCommand(f"unknown command type {url[:200]!r}")
    name = url[len(TYPE_URL_PREFIX + SQL_PACKAGE):]
    cls = COMMANDS.get(name)
    if cls is None:
        if name in KNOWN_UNSUPPORTED:
            raise UnsupportedCommand(f"{name} is not supported by this server yet")
        raise BadCommand(f"unknown command type {url[:200]!r}")
    return parse(cls, envelope.value)


def parse(cls: type[Message], data: bytes) -> Message:
    """`cls` decoded from `data`, or BadCommand."""
    try:
        return cls.FromString(data)
    except Exception as exc:
        raise BadCommand(f"malformed {cls.DESCRIPTOR.name}: {exc}") from None


# --- FlightData, encoded by hand ---------------------------------------------------------------

def _varint(value: int) -> bytes:
    out = bytearray()
    while value > 0x7F:
        out.append((value & 0x7F) | 0x80)
        value >>= 7
    out.append(value)
    return bytes(out)


_DESCRIPTOR_TAG = b"\x0a"  # field 1, length-delimited
_HEADER_TAG = b"\x12"  # field 2
_APP_METADATA_TAG = b"\x1a"  # field 3
_BODY_TAG = b"\xc2\x3e"  # field 1000: (1000 << 3 | 2) as a varint


def flight_data_parts(header: Bytes = b"", body: Bytes = b"", app_metadata: bytes = b"",
                      descriptor: bytes = b"") -> list[Bytes]:
    """A FlightData message as the pieces that, joined, are its serialization (nothing copied)."""
    parts: list[Bytes] = []
    for tag, value in ((_DESCRIPTOR_TAG, descriptor), (_HEADER_TAG, header),
                       (_APP_METADATA_TAG, app_metadata), (_BODY_TAG, body)):
        size = len(value) if not isinstance(value, pa.Buffer) else value.size
        if size:
            parts += (tag, _varint(size), value)
    return parts


def gathered_flight_data_parts(message: Gathered) -> list[Bytes]:
    """A FlightData message of a gathered record batch (`ipc_gather`), as pieces."""
    return [_HEADER_TAG, _varint(len(message.header)), message.header,
            _BODY_TAG, _varint(message.body_size), *message.body]


def flight_data(header: Bytes = b"", body: Bytes = b"", app_metadata: bytes = b"",
                descriptor: bytes = b"") -> bytes:
    """A serialized FlightData message, built with one join: the Arrow body is copied once."""
    return b"".join(flight_data_parts(header, body, app_metadata, descriptor))


# --- gRPC messages in HTTP/2 DATA frames ---------------------------------------------------------

FRAME_HEADER_BYTES = 9
# 16 KiB is the smallest SETTINGS_MAX_FRAME_SIZE a peer may advertise (RFC 9113 6.5.2) and what the
# Go client (ADBC) advertises, so frames of this payload are valid for every client. It is also
# below the smallest initial flow-control window (65,535), so a whole frame always fits eventually.
FRAME_PAYLOAD_BYTES = 16_384


@dataclass(frozen=True)
class Framed:
    """HTTP/2 DATA frames as the pieces that, sent in order, are their bytes (`http2_data_frames`).

    `iov` alternates frame headers and payload slices (a frame's payload may span several
    pieces); frame k starts at `iov[frame_at[k]]`. Nothing in it is a copy of the payload: the
    slices point into the messages' own buffers, and the kernel copies them once, from a
    gathering `sendmsg` (`h2send.CorkedTransport.write_pieces`).
    """

    iov: list[Bytes]
    frame_at: list[int]
    size: int  # bytes on the wire, frame headers included

    def pieces(self, first: int, last: int) -> list[Bytes]:
        """The pieces of frames first..last-1."""
        start = self.frame_at[first] if first < len(self.frame_at) else len(self.iov)
        end = self.frame_at[last] if last < len(self.frame_at) else len(self.iov)
        return self.iov[start:end]

    def joined(self) -> bytes:
        return b"".join(self.iov)


def http2_data_frames(messages: list[list[Bytes]], stream_id: int,
                      frame_size: int = FRAME_PAYLOAD_BYTES) -> Framed:
    """gRPC messages (each the pieces of one serialized message) as HTTP/2 DATA frames of stream
    `stream_id`: what goes on the socket, as pieces, none of them copied.

    Each message gets gRPC's 5-byte prefix (not compressed, length); the frames then cut that
    byte stream every `frame_size` bytes — a frame may hold the end of one message and the start
    of the next, as HTTP/2 allows. Every frame is full but the last, so the sender can tell the
    payload, which flow control counts, from the frame count alone. No
    frame carries END_STREAM: gRPC ends the stream with its trailers.

    Before, the frames were one buffer the payload was copied into (numpy, strided); in a
    10M-row DoGet that copy and its per-piece remainders were the largest share of the worker
    threads' time.
    """
    stream: list[memoryview] = []
    total = 0
    for parts in messages:
        size = sum(p.size if isinstance(p, pa.Buffer) else len(p) for p in parts)
        stream.append(memoryview(b"\0" + size.to_bytes(4, "big")))
        stream.extend(memoryview(p) for p in parts)
        total += 5 + size
    sid = (stream_id & 0x7FFFFFFF).to_bytes(4, "big")
    # Frame header: length (24 bits), type DATA (0), no flags, stream id.
    full_header = frame_size.to_bytes(3, "big") + b"\0\0" + sid
    full, rest = divmod(total, frame_size)
    iov: list[Bytes] = []
    frame_at: list[int] = []
    room = 0  # payload the current frame still takes
    for part in stream:
        n, i = len(part), 0
        while i < n:
            if room == 0:
                frame_at.append(len(iov))
                last = len(frame_at) > full
                iov.append(rest.to_bytes(3, "big") + b"\0\0" + sid if last else full_header)
                room = rest if last else frame_size
            take = min(room, n - i)
            iov.append(part[i:i + take] if take < n else part)
            i += take
            room -= take
    return Framed(iov, frame_at, total + FRAME_HEADER_BYTES * len(frame_at))


# --- Arrow IPC ---------------------------------------------------------------------------------

def schema_bytes(schema: pa.Schema) -> bytes:
    """The IPC-encapsulated Schema message of FlightInfo.schema and prepared statement results."""
    return schema.serialize().to_pybytes()


def schema_flight_data(schema: pa.Schema) -> bytes:
    """The first FlightData of a DoGet stream: the schema message, no body."""
    return flight_data(header=pa.ipc.read_message(schema.serialize()).metadata)


def batch_flight_data(batch: pa.RecordBatch, compression: str | None = None) -> bytes:
    """One record batch as FlightData: the IPC message's flatbuffer header and its body.

    With `compression` ("zstd" or "lz4_frame") the body's buffers are compressed as the IPC
    format allows (the header's BodyCompression tells readers); CPU-heavy, so call it from a
    worker thread."""
    return b"".join(batch_flight_data_parts(batch, compression))


def batch_flight_data_parts(batch: pa.RecordBatch, compression: str | None = None) -> list[Bytes]:
    """`batch_flight_data` as pieces (the body is the IPC buffer itself, not a copy)."""
    if compression is None:
        message = pa.ipc.read_message(batch.serialize())
    else:
        message = _compressed_message(batch, compression)
    return flight_data_parts(header=message.metadata, body=message.body)


def _compressed_message(batch: pa.RecordBatch, compression: str) -> pa.ipc.Message:
    # RecordBatch.serialize takes no write options: write a one-batch stream and take its second
    # message (the first is the schema).
    sink = pa.BufferOutputStream()
    options = pa.ipc.IpcWriteOptions(compression=compression, use_threads=False)
    with pa.ipc.new_stream(sink, batch.schema, options=options) as writer:
        writer.write_batch(batch)
    reader = pa.ipc.MessageReader.open_stream(sink.getvalue())
    reader.read_next_message()
    return reader.read_next_message()


def read_ipc_schema(data: bytes) -> pa.Schema:
    try:
        return pa.ipc.read_schema(pa.py_buffer(data))
    except Exception as exc:
        raise BadCommand(f"malformed IPC schema: {exc}") from None


@dataclass
class IpcStreamReader:
    """Decodes a DoPut's FlightData messages (schema first, then record batches)."""

    schema: pa.Schema | None = None

    def feed(self, data: fl.FlightData) -> pa.RecordBatch | None:
        if not data.data_header:
            return None
        try:
            message = pa.ipc.read_message(_encapsulate(data.data_header, data.data_body))
            if message.type == "schema":
                self.schema = pa.ipc.read_schema(message)
                return None
            if message.type != "record batch":
                raise BadCommand(f"unexpected IPC message {message.type!r} (dictionaries are not supported)")
            if self.schema is None:
                raise BadCommand("record batch before the schema")
            batch = pa.ipc.read_record_batch(message, self.schema)
            # Arrow's IPC reader checks that the buffers fit in the body, not what is in them: a
            # string column whose offsets point past its data read back "fine", and the first
            # kernel to touch it read out of bounds and took the server down (SIGSEGV).
            batch.validate(full=True)
            return batch
        except BadCommand:
            raise
        except Exception as exc:
            raise BadCommand(f"malformed IPC stream: {exc}") from None


def _encapsulate(header: bytes, body: bytes) -> pa.Buffer:
    padding = (-len(header)) % 8
    return pa.py_buffer(b"".join((b"\xff\xff\xff\xff", (len(header) + padding).to_bytes(4, "little"),
                                  header, b"\0" * padding, body)))


def wire_type(t: pa.DataType) -> pa.DataType:
    """The type a result column has on the wire.

    DataFusion scans strings as Utf8View; ADBC reads it but maps it to no XDBC type, so the wire
    carries plain utf8 (binary likewise). Dictionaries are decoded: a DoGet stream sends no
    dictionary batches."""
    if pa.types.is_string_view(t):
        return pa.string()
    if pa.types.is_binary_view(t):
        return pa.binary()
    if pa.types.is_dictionary(t):
        return wire_type(t.value_type)
    if pa.types.is_list(t) or pa.types.is_large_list(t) or pa.types.is_list_view(t):
        item = t.value_field
        inner = item.with_type(wire_type(item.type))
        return pa.large_list(inner) if pa.types.is_large_list(t) else pa.list_(inner)
    if pa.types.is_fixed_size_list(t):
        item = t.value_field
        return pa.list_(item.with_type(wire_type(item.type)), t.list_size)
    if pa.types.is_struct(t):
        return pa.struct([f.with_type(wire_type(f.type)) for f in t])
    if pa.types.is_map(t):
        return pa.map_(t.key_field.with_type(wire_type(t.key_type)),
                       t.item_field.with_type(wire_type(t.item_type)), t.keys_sorted)
    return t


def wire_schema(schema: pa.Schema) -> pa.Schema:
    """The one schema a result has on the wire: FlightInfo, prepare results and the stream."""
    return pa.schema([f.with_type(wire_type(f.type)) for f in schema], schema.metadata)


def to_wire(batch: pa.RecordBatch, schema: pa.Schema) -> pa.RecordBatch:
    """`batch` with exactly `schema`'s types (a no-op when they already agree)."""
    if batch.schema.equals(schema, check_metadata=False):
        return batch
    columns = [col if col.type == f.type else col.cast(f.type) for col, f in zip(batch.columns, schema, strict=True)]
    return pa.RecordBatch.from_arrays(columns, schema=schema)


# --- fixed result schemas (the ADBC driver checks them exactly, nullability included) ----------

CATALOGS_SCHEMA = pa.schema([pa.field("catalog_name", pa.string(), nullable=False)])
DB_SCHEMAS_SCHEMA = pa.schema([
    pa.field("catalog_name", pa.string()),
    pa.field("db_schema_name", pa.string(), nullable=False),
])
TABLES_SCHEMA = pa.schema([
    pa.field("catalog_name", pa.string()),
    pa.field("db_schema_name", pa.string()),
    pa.field("table_name", pa.string(), nullable=False),
    pa.field("table_type", pa.string(), nullable=False),
])
TABLES_WITH_SCHEMA_SCHEMA = TABLES_SCHEMA.append(pa.field("table_schema", pa.binary(), nullable=False))
TABLE_TYPES_SCHEMA = pa.schema([pa.field("table_type", pa.string(), nullable=False)])

SQL_INFO_VALUE_TYPE = pa.dense_union([
    pa.field("string_value", pa.string()),
    pa.field("bool_value", pa.bool_()),
    pa.field("bigint_value", pa.int64()),
    pa.field("int32_bitmask", pa.int32()),
    pa.field("string_list", pa.list_(pa.string())),
    pa.field("int32_to_int32_list_map", pa.map_(pa.int32(), pa.list_(pa.int32()))),
], type_codes=[0, 1, 2, 3, 4, 5])
SQL_INFO_SCHEMA = pa.schema([
    pa.field("info_name", pa.uint32(), nullable=False),
    pa.field("value", SQL_INFO_VALUE_TYPE, nullable=False),
])


@dataclass(frozen=True)
class Int32:
    """A SqlInfo value that travels as int32_bitmask (enums such as FLIGHT_SQL_SERVER_TRANSACTION)."""

    value: int


SqlInfoValue = str | bool | int | Int32 | list[str]


def sql_info_batch(values: dict[int, SqlInfoValue], wanted: list[int]) -> pa.RecordBatch:
    """GetSqlInfo's result for the ids in `wanted` (all when empty) that this server knows."""
    ids = [i for i in (wanted or sorted(values)) if i in values]
    children: list[list] = [[] for _ in range(6)]
    codes: list[int] = []
    offsets: list[int] = []
    for info in ids:
        value = values[info]
        if isinstance(value, bool):
            code = 1
        elif isinstance(value, str):
            code = 0
        elif isinstance(value, Int32):
            code, value = 3, value.value
        elif isinstance(value, int):
            code = 2
        else:
            code = 4
        codes.append(code)
        offsets.append(len(children[code]))
        children[code].append(value)
    arrays = [pa.array(values_, type=f.type) for values_, f in zip(children, SQL_INFO_VALUE_TYPE, strict=True)]
    union = pa.UnionArray.from_dense(
        pa.array(codes, pa.int8()), pa.array(offsets, pa.int32()), arrays,
        [f.name for f in SQL_INFO_VALUE_TYPE], [0, 1, 2, 3, 4, 5],
    )
    return pa.RecordBatch.from_arrays([pa.array(ids, pa.uint32()), union], schema=SQL_INFO_SCHEMA)


# --- session options ---------------------------------------------------------------------------

def option_value(value: fl.SessionOptionValue) -> object:
    kind = value.WhichOneof("option_value")
    if kind is None:
        return None
    if kind == "string_list_value":
        return list(value.string_list_value.values)
    return getattr(value, kind)


def string_option(text: str) -> fl.SessionOptionValue:
    return fl.SessionOptionValue(string_value=text)
