"""A malformed command never crashes the server: the decoder's only failure is BadCommand.

Whatever bytes a client puts in FlightDescriptor.cmd, a Ticket or an action body, decoding either
yields a known Flight SQL message or raises BadCommand, which the service answers with
INVALID_ARGUMENT (UNIMPLEMENTED for known but unserved commands).
"""

from __future__ import annotations

import pyarrow as pa
import pytest
from google.protobuf import any_pb2
from google.protobuf.message import Message
from grpclib.const import Status
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from icegres.protocol.flightsql import icegres_flight_pb2 as fl
from icegres.protocol.flightsql import messages as M
from icegres.protocol.flightsql.service import _grpc_error

pytestmark = pytest.mark.unit

_NAMES = [*M.COMMANDS, *M.KNOWN_UNSUPPORTED, "Nope", ""]
_PREFIXES = ["type.googleapis.com/arrow.flight.protocol.sql.", "type.googleapis.com/", "", "x/"]


def _check(data: bytes) -> None:
    try:
        decoded = M.decode_command(data)
    except M.BadCommand as exc:
        status = _grpc_error(exc).status
        assert status in (Status.INVALID_ARGUMENT, Status.UNIMPLEMENTED)
        return
    assert isinstance(decoded, Message)
    assert type(decoded) in M.COMMANDS.values()


@settings(max_examples=500, suppress_health_check=[HealthCheck.too_slow])
@given(st.binary(max_size=512))
def test_arbitrary_bytes(data):
    _check(data)


@settings(max_examples=500)
@given(prefix=st.sampled_from(_PREFIXES), name=st.sampled_from(_NAMES), value=st.binary(max_size=256))
def test_any_envelopes_with_garbage_values(prefix, name, value):
    _check(any_pb2.Any(type_url=prefix + name, value=value).SerializeToString())


@settings(max_examples=300)
@given(name=st.sampled_from(list(M.COMMANDS)), mutation=st.binary(max_size=64), cut=st.integers(0, 200))
def test_truncated_and_extended_valid_commands(name, mutation, cut):
    cls = M.COMMANDS[name]
    message = cls()
    for field in cls.DESCRIPTOR.fields:
        if field.type == field.TYPE_MESSAGE:
            if field.message_type.GetOptions().map_entry:  # CommandStatementIngest.options
                getattr(message, field.name)["key"] = "value"
            else:  # CommandStatementIngest.table_definition_options: enums set to 1
                nested = getattr(message, field.name)
                for inner in field.message_type.fields:
                    setattr(nested, inner.name, 1)
            continue
        if field.type == field.TYPE_STRING:
            value = "select 1"
        elif field.type == field.TYPE_BYTES:
            value = b"\x01\x02"
        elif field.type == field.TYPE_BOOL:
            value = True
        else:
            value = 1
        if field.is_repeated:
            getattr(message, field.name).append(value)
        else:
            setattr(message, field.name, value)
    packed = M.pack_any(message)
    _check(packed[:cut] + mutation)
    _check(packed + mutation)


@settings(max_examples=300)
@given(header=st.binary(max_size=200), body=st.binary(max_size=200))
def test_ipc_stream_reader_rejects_garbage_cleanly(header, body):
    reader = M.IpcStreamReader()
    try:
        reader.feed(fl.FlightData(data_header=header, data_body=body))
    except M.BadCommand:
        pass


_VALID = pa.record_batch({
    "s": pa.array(["ab", None, "a longer string", ""]),
    "l": pa.array([[1, 2], None, [], [3]], pa.list_(pa.int32())),
    "b": pa.array([b"\x00", b"xyz", None, b""], pa.binary()),
    "i": pa.array([1, None, 3, 4], pa.int64()),
})


@settings(max_examples=400, deadline=None)
@given(flips=st.lists(st.tuples(st.integers(0, 10_000), st.integers(0, 255)), min_size=1, max_size=6))
def test_a_well_framed_batch_with_garbled_buffers_is_refused_or_valid(flips):
    # The header stays valid, so Arrow's reader accepts the buffers; what they hold (offsets past
    # the data, list offsets past the child) must be refused here, not read by a later kernel.
    data = fl.FlightData.FromString(M.batch_flight_data(_VALID))
    body = bytearray(data.data_body)
    for at, value in flips:
        body[at % len(body)] = value
    reader = M.IpcStreamReader()
    reader.feed(fl.FlightData.FromString(M.schema_flight_data(_VALID.schema)))
    try:
        batch = reader.feed(fl.FlightData(data_header=data.data_header, data_body=bytes(body)))
    except M.BadCommand:
        return
    assert batch is not None
    batch.to_pylist()  # every value readable


def test_parameter_stream_after_garbage_schema_still_decodes():
    reader = M.IpcStreamReader()
    schema = pa.schema([("0", pa.int64())])
    reader.feed(fl.FlightData.FromString(M.schema_flight_data(schema)))
    with pytest.raises(M.BadCommand):
        reader.feed(fl.FlightData(data_header=b"\x00" * 16, data_body=b"junk"))
    batch = pa.record_batch({"0": [7]})
    assert reader.feed(fl.FlightData.FromString(M.batch_flight_data(batch))).to_pylist() == [{"0": 7}]


# --- DoPut: the command in the first message's descriptor, then an IPC stream -------------------

class _Stream:
    """The part of a grpclib server stream DoPut reads: queued FlightData messages, then None."""

    def __init__(self, messages: list[fl.FlightData]) -> None:
        self._messages = list(messages)

    async def recv_message(self) -> fl.FlightData | None:
        return self._messages.pop(0) if self._messages else None


def _read(messages: list[fl.FlightData], limit: int = 1 << 20):
    import asyncio

    from icegres.protocol.flightsql.writes import _read_ipc

    stream = _Stream(messages[1:])
    return asyncio.run(_read_ipc(stream, messages[0], limit))


def _put_check(messages: list[fl.FlightData]) -> None:
    """Decoding a DoPut either yields a schema and batches of that schema, or fails with a status
    that says the client sent something wrong — never INTERNAL, never anything else."""
    from grpclib.exceptions import GRPCError

    try:
        schema, batches = _read(messages)
    except M.BadCommand as exc:
        assert _grpc_error(exc).status in (Status.INVALID_ARGUMENT, Status.UNIMPLEMENTED)
        return
    except GRPCError as exc:
        assert exc.status is Status.RESOURCE_EXHAUSTED
        return
    for batch in batches:
        assert schema is not None and batch.schema.equals(schema)


def _descriptor_check(data: bytes) -> None:
    from icegres.protocol.flightsql.service import FlightSqlService

    try:
        descriptor = fl.FlightDescriptor.FromString(data)
    except Exception:
        return  # grpclib's codec refuses it before any handler runs
    try:
        command = FlightSqlService._command(None, descriptor)  # type: ignore[arg-type]
    except M.BadCommand as exc:
        assert _grpc_error(exc).status in (Status.INVALID_ARGUMENT, Status.UNIMPLEMENTED)
        return
    assert type(command) in M.COMMANDS.values()


_SCHEMA = pa.schema([("0", pa.int64()), ("1", pa.string())])
_BATCH = pa.record_batch([pa.array([1, 2]), pa.array(["a", None])], schema=_SCHEMA)


@settings(max_examples=300)
@given(st.binary(max_size=300))
def test_doput_descriptors_of_arbitrary_bytes(data):
    _descriptor_check(data)


@settings(max_examples=300)
@given(name=st.sampled_from(["CommandStatementUpdate", "CommandPreparedStatementUpdate",
                             "CommandStatementIngest"]),
       value=st.binary(max_size=200), cut=st.integers(0, 300))
def test_doput_commands_truncated_and_garbled(name, value, cut):
    from google.protobuf import any_pb2

    envelope = any_pb2.Any(type_url=M.TYPE_URL_PREFIX + M.SQL_PACKAGE + name, value=value).SerializeToString()
    for cmd in (envelope, envelope[:cut]):
        _descriptor_check(fl.FlightDescriptor(type=fl.FlightDescriptor.CMD, cmd=cmd).SerializeToString())


def test_ingest_command_round_trips_with_every_option():
    from icegres.protocol.flightsql import icegres_flight_sql_writes_pb2 as wr

    options = wr.CommandStatementIngest.TableDefinitionOptions
    for if_not_exist in options.TableNotExistOption.values():
        for if_exists in options.TableExistsOption.values():
            command = wr.CommandStatementIngest(
                table_definition_options=options(if_not_exist=if_not_exist, if_exists=if_exists),
                table="t", schema="s", catalog="icegres", temporary=False, transaction_id=b"x")
            command.options["k"] = "v"
            decoded = M.decode_command(M.pack_any(command))
            assert decoded == command


_PIECES = [
    fl.FlightData.FromString(M.schema_flight_data(_SCHEMA)),
    fl.FlightData.FromString(M.batch_flight_data(_BATCH)),
    fl.FlightData.FromString(M.schema_flight_data(pa.schema([("x", pa.float64())]))),
    fl.FlightData(),
    fl.FlightData(app_metadata=b"\x01"),
]


@settings(max_examples=400, suppress_health_check=[HealthCheck.too_slow])
@given(st.lists(st.one_of(
    st.sampled_from(_PIECES),
    st.builds(lambda h, b: fl.FlightData(data_header=h, data_body=b), st.binary(max_size=120), st.binary(max_size=120)),
    st.builds(lambda cut: fl.FlightData(data_header=_PIECES[1].data_header[:cut], data_body=_PIECES[1].data_body),
              st.integers(0, 200)),
    st.builds(lambda cut: fl.FlightData(data_header=_PIECES[1].data_header, data_body=_PIECES[1].data_body[:cut]),
              st.integers(0, 64)),
), min_size=1, max_size=6))
def test_doput_ipc_streams_of_valid_garbled_and_mixed_messages(messages):
    _put_check(messages)


def test_doput_stream_limits_and_second_schema():
    from grpclib.exceptions import GRPCError

    schema, batches = _read([_PIECES[0], _PIECES[1], _PIECES[1]])
    assert schema == _SCHEMA and sum(b.num_rows for b in batches) == 4
    assert _read([fl.FlightData()]) == (None, [])  # descriptor only (CommandStatementUpdate)
    with pytest.raises(M.BadCommand, match="second schema"):
        _read([_PIECES[0], _PIECES[1], _PIECES[2]])
    with pytest.raises(GRPCError) as exc:
        _read([_PIECES[0], *[_PIECES[1]] * 8], limit=200)
    assert exc.value.status is Status.RESOURCE_EXHAUSTED
