"""Flight SQL transport options: ZSTD result bodies, TLS contexts, and their configuration checks."""

from __future__ import annotations

import ssl
import threading

import pyarrow as pa
import pytest

from icegres.config import resolve
from icegres.engine.row_source import RowSource
from icegres.protocol.flightsql import icegres_flight_pb2 as fl
from icegres.protocol.flightsql import messages as M
from icegres.protocol.flightsql.result_stream import pull_messages
from icegres.protocol.flightsql.tls import TlsConfigError, server_context
from tests.support.tls import self_signed

pytestmark = pytest.mark.unit


def _batch(rows: int) -> pa.RecordBatch:
    return pa.record_batch({"id": pa.array(range(rows), pa.int64()),
                            "city": pa.array([f"city-{i % 7}" for i in range(rows)], pa.string_view())})


def _decode(schema: pa.Schema, messages: list[bytes]) -> pa.Table:
    reader = M.IpcStreamReader()
    reader.feed(fl.FlightData.FromString(M.schema_flight_data(schema)))
    return pa.Table.from_batches([reader.feed(fl.FlightData.FromString(m)) for m in messages], schema=schema)


@pytest.mark.parametrize("compression", [None, "zstd"])
def test_pulled_messages_decode_with_and_without_compression(compression):
    batch = _batch(200_000)
    schema = M.wire_schema(batch.schema)
    source = RowSource(batch.schema, iter(pa.Table.from_batches([batch]).to_batches(max_chunksize=8192)))
    messages, rows, exhausted = pull_messages(source, schema, threading.Event(), 64 << 20, compression)
    assert (rows, exhausted) == (200_000, True)
    table = _decode(schema, messages)
    assert table.column("id").to_pylist() == list(range(200_000))
    assert table.column("city").to_pylist()[:8] == [f"city-{i % 7}" for i in range(8)]


def test_zstd_bodies_are_smaller_and_marked_compressed():
    batch = M.to_wire(_batch(100_000), M.wire_schema(_batch(1).schema))
    plain = fl.FlightData.FromString(M.batch_flight_data(batch))
    packed = fl.FlightData.FromString(M.batch_flight_data(batch, "zstd"))
    assert len(packed.data_body) < len(plain.data_body) / 2
    assert packed.data_header != plain.data_header  # the header carries BodyCompression


def test_result_compression_and_tls_options_are_checked():
    assert resolve({}, {}).result_compression == "none"
    assert resolve({"result_compression": "ZSTD"}, {}).result_compression == "zstd"
    assert resolve({}, {"ICEGRES_RESULT_COMPRESSION": "zstd"}).result_compression == "zstd"
    with pytest.raises(ValueError, match="--result-compression must be one of none, zstd"):
        resolve({"result_compression": "gzip"}, {})
    with pytest.raises(ValueError, match="--tls-cert and --tls-key go together"):
        resolve({"tls_cert": "c.pem"}, {})
    assert resolve({"tls_cert": "c.pem", "tls_key": "k.pem"}, {}).tls_key == "k.pem"


def test_server_context_offers_h2_and_reports_bad_files(tmp_path):
    cert, key = self_signed(tmp_path / "tls")
    context = server_context(str(cert), str(key))
    assert isinstance(context, ssl.SSLContext) and context.minimum_version >= ssl.TLSVersion.TLSv1_2
    with pytest.raises(TlsConfigError, match="no such file"):
        server_context(str(tmp_path / "missing.pem"), str(key))
    other_cert, _ = self_signed(tmp_path / "other")
    with pytest.raises(TlsConfigError, match="cannot use certificate"):
        server_context(str(other_cert), str(key))  # a key that is not the certificate's
