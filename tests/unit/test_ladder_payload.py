"""A tail record's payload: an Arrow IPC stream of the rows, the target table in its metadata."""

from __future__ import annotations

import pyarrow as pa
import pytest

from icegres.ladder import decode_payload, encode_payload

pytestmark = pytest.mark.unit

SCHEMA = pa.schema([pa.field("id", pa.int64(), nullable=False), pa.field("v", pa.string()),
                    pa.field("at", pa.timestamp("us", tz="UTC")), pa.field("xs", pa.list_(pa.int32()))])


def _written(key, rows: pa.Table) -> bytes:
    """What an IPC stream writer makes of the same rows (the format replay has always read)."""
    import json

    schema = rows.schema.with_metadata({**(rows.schema.metadata or {}), b"icegres.table": json.dumps(list(key)).encode()})
    sink = pa.BufferOutputStream()
    with pa.ipc.new_stream(sink, schema) as writer:
        writer.write_table(rows.replace_schema_metadata(schema.metadata))
    return sink.getvalue().to_pybytes()


@pytest.mark.parametrize("rows", [
    pa.table({"id": [1], "v": ["x"], "at": [None], "xs": [[1, 2]]}, schema=SCHEMA),
    pa.table({"id": [1, 2, 3], "v": [None, "é", ""], "at": [0, 1, None], "xs": [None, [], [3]]}, schema=SCHEMA),
    pa.concat_tables([pa.table({"id": [i], "v": [str(i)], "at": [i], "xs": [[i]]}, schema=SCHEMA) for i in range(3)]),
    pa.table({"id": [7]}, schema=pa.schema([pa.field("id", pa.int64())], metadata={b"k": b"v"})),
])
def test_payloads_are_the_bytes_an_ipc_stream_writer_makes_and_decode_back(rows: pa.Table) -> None:
    for key in [("ns", "t"), ("ns", "other"), ("ns", "t")]:  # a cached schema message is reused
        payload = encode_payload(key, rows)
        assert payload == _written(key, rows)
        got_key, got = decode_payload(payload)
        assert got_key == key and got.equals(rows) and got.schema.equals(rows.schema, check_metadata=True)


def test_a_new_schema_of_the_same_table_gets_its_own_schema_message() -> None:
    key = ("ns", "grows")
    before = pa.table({"id": [1]})
    after = pa.table({"id": [2], "extra": ["x"]})
    for rows in (before, after, before):
        assert decode_payload(encode_payload(key, rows))[1].equals(rows)


def test_dictionary_columns_take_the_writers_path() -> None:
    rows = pa.table({"d": pa.array(["a", "b", "a"]).dictionary_encode()})
    assert decode_payload(encode_payload(("ns", "d"), rows))[1].equals(rows)
