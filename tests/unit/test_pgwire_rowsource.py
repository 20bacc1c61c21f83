"""RowSource.pull: batches gathered for encoding, limits, and the exhausted flag."""

from __future__ import annotations

import pyarrow as pa
import pytest

from icegres.protocol.pgwire import results
from icegres.protocol.pgwire.results import RowSource
from icegres.protocol.pgwire.types import TextSettings, encode_data_rows

pytestmark = pytest.mark.unit


def batches(sizes: list[int]) -> list[pa.RecordBatch]:
    out, start = [], 0
    for n in sizes:
        out.append(pa.record_batch([pa.array(range(start, start + n), pa.int64())], names=["id"]))
        start += n
    return out


def encoder(calls: list[int]):
    def encode(batch: pa.RecordBatch) -> bytes:
        calls.append(batch.num_rows)
        return encode_data_rows(batch, [0], TextSettings())

    return encode


def test_small_batches_are_encoded_together_and_bytes_are_unchanged(monkeypatch) -> None:
    monkeypatch.setattr(results, "ENCODE_ROWS", 25)
    parts = batches([10, 10, 10, 10, 3])
    calls: list[int] = []
    source = RowSource(parts[0].schema, iter(parts))
    chunks = []
    while True:
        chunk = source.pull(0, encoder(calls))
        chunks.append(chunk)
        if chunk.exhausted:
            break
    assert calls == [30, 13]  # gathered until ENCODE_ROWS, then what was left
    expected = b"".join(encode_data_rows(b, [0], TextSettings()) for b in parts)
    assert b"".join(c.data for c in chunks) == expected
    assert sum(c.rows for c in chunks) == 43


def test_limit_is_exact_and_the_rest_stays_for_the_next_pull(monkeypatch) -> None:
    monkeypatch.setattr(results, "ENCODE_ROWS", 1000)
    parts = batches([10, 10, 10])
    calls: list[int] = []
    source = RowSource(parts[0].schema, iter(parts))
    first = source.pull(15, encoder(calls))
    assert (first.rows, first.exhausted) == (15, False)
    rest = source.pull(0, encoder(calls))
    assert (rest.rows, rest.exhausted) == (15, True)
    assert calls == [15, 15]


def test_a_batch_of_another_schema_is_not_concatenated(monkeypatch) -> None:
    monkeypatch.setattr(results, "ENCODE_ROWS", 1000)
    a = batches([5])[0]
    b = pa.record_batch([pa.array(["x", "y"])], names=["id"])
    calls: list[int] = []
    source = RowSource(a.schema, iter([a, b]))
    chunk = source.pull(0, encoder(calls))
    assert calls == [5, 2]
    assert (chunk.rows, chunk.exhausted) == (7, True)
