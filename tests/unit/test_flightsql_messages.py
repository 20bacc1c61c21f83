"""Flight SQL codecs: hand-encoded FlightData, Any-wrapped commands, IPC, fixed result schemas."""

from __future__ import annotations

import pyarrow as pa
import pytest
from google.protobuf import any_pb2
from grpclib.const import Status
from hypothesis import given
from hypothesis import strategies as st

from icegres.pg.errors import PgError
from icegres.protocol.flightsql import errors
from icegres.protocol.flightsql import icegres_flight_pb2 as fl
from icegres.protocol.flightsql import icegres_flight_sql_pb2 as sql
from icegres.protocol.flightsql import messages as M
from icegres.protocol.flightsql.result_stream import pull_messages
from icegres.protocol.flightsql.service import _grpc_error, like_regex

pytestmark = pytest.mark.unit


@given(header=st.binary(max_size=300), body=st.binary(max_size=3000), meta=st.binary(max_size=50),
       descriptor_cmd=st.binary(max_size=50))
def test_hand_encoded_flight_data_equals_protobuf(header, body, meta, descriptor_cmd):
    descriptor = fl.FlightDescriptor(type=fl.FlightDescriptor.CMD, cmd=descriptor_cmd) if descriptor_cmd else None
    ours = M.flight_data(header=header, body=body, app_metadata=meta,
                         descriptor=descriptor.SerializeToString() if descriptor else b"")
    reference = fl.FlightData(data_header=header, data_body=body, app_metadata=meta)
    if descriptor is not None:
        reference.flight_descriptor.CopyFrom(descriptor)
    assert fl.FlightData.FromString(ours) == reference
    assert ours == reference.SerializeToString()  # the same bytes, fields in field-number order


def test_body_tag_is_c2_3e():
    assert M.flight_data(body=b"x") == b"\xc2\x3e\x01x"


def test_batches_round_trip_through_flight_data():
    batch = pa.record_batch({"s": pa.array(["a", None, "c"], pa.string_view()), "i": [1, 2, 3]})
    schema = M.wire_schema(batch.schema)
    assert schema.field("s").type == pa.string()
    reader = M.IpcStreamReader()
    assert reader.feed(fl.FlightData.FromString(M.schema_flight_data(schema))) is None
    assert reader.schema == schema
    out = reader.feed(fl.FlightData.FromString(M.batch_flight_data(M.to_wire(batch, schema))))
    assert out.to_pydict() == {"s": ["a", None, "c"], "i": [1, 2, 3]}
    assert M.read_ipc_schema(M.schema_bytes(schema)) == schema


def test_wire_types_of_nested_views_and_dictionaries():
    t = pa.struct([pa.field("a", pa.list_(pa.string_view())), pa.field("d", pa.dictionary(pa.int8(), pa.string()))])
    assert M.wire_type(t) == pa.struct([pa.field("a", pa.list_(pa.string())), pa.field("d", pa.string())])
    assert M.wire_type(pa.binary_view()) == pa.binary()


def test_commands_round_trip_through_any():
    for message in (sql.CommandGetSqlInfo(info=[0, 8]), sql.CommandGetTables(include_schema=True, table_types=["TABLE"]),
                    sql.CommandStatementQuery(query="select 1"),
                    sql.ActionCreatePreparedStatementRequest(query="select $1")):
        packed = M.pack_any(message)
        assert b"type.googleapis.com/arrow.flight.protocol.sql." + message.DESCRIPTOR.name.encode() in packed
        assert M.decode_command(packed) == message


def test_unknown_and_unsupported_commands():
    def envelope(url: str) -> bytes:
        return any_pb2.Any(type_url=url).SerializeToString()

    with pytest.raises(M.UnsupportedCommand):
        M.decode_command(envelope("type.googleapis.com/arrow.flight.protocol.sql.CommandStatementSubstraitPlan"))
    with pytest.raises(M.BadCommand):
        M.decode_command(envelope("type.googleapis.com/Nope"))
    assert _grpc_error(M.BadCommand("x")).status is Status.INVALID_ARGUMENT
    assert _grpc_error(M.UnsupportedCommand("x")).status is Status.UNIMPLEMENTED


def test_sql_info_schema_is_exact():
    batch = M.sql_info_batch({0: "icegres", 3: True, 8: M.Int32(0), 100: M.Int32(5), 7: 9, 508: ["a"]}, [])
    assert batch.schema.equals(M.SQL_INFO_SCHEMA)
    assert not batch.schema.field("info_name").nullable and not batch.schema.field("value").nullable
    assert batch.column(0).to_pylist() == [0, 3, 7, 8, 100, 508]
    assert batch.column(1).type_codes.to_pylist() == [0, 1, 2, 3, 3, 4]
    assert batch.column(1).to_pylist() == ["icegres", True, 9, 0, 5, ["a"]]
    assert M.sql_info_batch({0: "x"}, [8, 0]).column(0).to_pylist() == [0]  # unknown ids are left out


def test_metadata_schemas_nullability():
    assert [f.nullable for f in M.TABLES_WITH_SCHEMA_SCHEMA] == [True, True, False, False, False]
    assert [f.nullable for f in M.DB_SCHEMAS_SCHEMA] == [True, False]
    assert not M.CATALOGS_SCHEMA.field(0).nullable and not M.TABLE_TYPES_SCHEMA.field(0).nullable


def test_sqlstate_to_status():
    assert errors.status_for("42P01") is Status.NOT_FOUND
    assert errors.status_for("42601") is Status.INVALID_ARGUMENT
    assert errors.status_for("0A000") is Status.UNIMPLEMENTED
    assert errors.status_for("28P01") is Status.UNAUTHENTICATED
    assert errors.status_for("40001") is Status.ABORTED
    assert errors.status_for("99999") is Status.INTERNAL
    err = _grpc_error(PgError("22012", "division by zero"))
    assert err.status is Status.INVALID_ARGUMENT and "SQLSTATE 22012" in err.message


def test_like_patterns():
    assert like_regex("tri%").fullmatch("trips")
    assert like_regex("d_mo").fullmatch("demo")
    assert not like_regex("d_mo").fullmatch("dmo")
    assert like_regex("a\\_b").fullmatch("a_b") and not like_regex("a\\_b").fullmatch("axb")
    assert like_regex("(.*)").fullmatch("(.*)") and not like_regex("(.*)").fullmatch("x")


class _Source:
    """A RowSource stand-in: take()/has_more() over a list of batches."""

    def __init__(self, batches):
        self.batches = list(batches)
        self.pending = None

    def take(self, limit):
        if self.pending is not None:
            batch, self.pending = self.pending, None
        elif self.batches:
            batch = self.batches.pop(0)
        else:
            return None
        if limit and batch.num_rows > limit:
            self.pending = batch.slice(limit)
            batch = batch.slice(0, limit)
        return batch

    def has_more(self):
        return self.pending is not None or bool(self.batches)


def test_pull_messages_gathers_and_caps_message_size():
    import threading

    schema = pa.schema([("s", pa.string())])
    small = [pa.record_batch({"s": pa.array(["x"] * 8192, pa.string_view())}) for _ in range(10)]
    messages, rows, done = pull_messages(_Source(small), schema, threading.Event())
    assert (len(messages), rows, done) == (2, 81920, True)  # 65536 rows, then the rest
    wide = pa.record_batch({"s": pa.array(["y" * 1000] * 10_000)})  # ~10 MB in one batch
    messages, rows, done = pull_messages(_Source([wide]), schema, threading.Event(), budget=1 << 40)
    assert rows == 10_000 and done
    assert all(len(m) < 4 << 20 for m in messages) and len(messages) >= 3
    stop = threading.Event()
    stop.set()
    assert pull_messages(_Source(small), schema, stop) == ([], 0, True)
