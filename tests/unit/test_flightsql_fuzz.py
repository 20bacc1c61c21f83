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


def test_parameter_stream_after_garbage_schema_still_decodes():
    reader = M.IpcStreamReader()
    schema = pa.schema([("0", pa.int64())])
    reader.feed(fl.FlightData.FromString(M.schema_flight_data(schema)))
    with pytest.raises(M.BadCommand):
        reader.feed(fl.FlightData(data_header=b"\x00" * 16, data_body=b"junk"))
    batch = pa.record_batch({"0": [7]})
    assert reader.feed(fl.FlightData.FromString(M.batch_flight_data(batch))).to_pylist() == [{"0": 7}]
