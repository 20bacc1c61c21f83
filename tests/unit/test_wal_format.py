"""The WAL record framing: round trips, torn vs corrupt, and a decoder fuzzed with arbitrary bytes."""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from icegres.machines.wal_format import (
    HEADER_BYTES,
    CorruptRecord,
    IncompleteRecord,
    InconsistentSegment,
    MidSegmentCorruption,
    Record,
    WalFormatError,
    decode_record,
    encode_record,
    parse_segment_name,
    record_bytes,
    scan_segment,
    segment_name,
)

pytestmark = pytest.mark.unit


def seg(*payloads: bytes, first: int = 1, tail: str = "t1") -> bytes:
    return b"".join(encode_record(Record(first + i, tail, p)) for i, p in enumerate(payloads))


@given(lsn=st.integers(1, 2**64 - 1), payload=st.binary(max_size=300))
def test_roundtrip(lsn: int, payload: bytes) -> None:
    data = encode_record(Record(lsn, "tail-1", payload))
    assert len(data) == record_bytes("tail-1", len(payload))
    assert decode_record(data + b"junk") == (Record(lsn, "tail-1", payload), len(data))


def test_every_strict_prefix_is_incomplete_never_a_record() -> None:
    data = encode_record(Record(7, "t1", b"hello world"))
    for n in range(1, len(data)):
        with pytest.raises(IncompleteRecord):
            decode_record(data[:n])


def test_flipped_bits_are_corrupt() -> None:
    data = encode_record(Record(7, "t1", b"hello world"))
    for at in range(len(data)):
        flipped = bytearray(data)
        flipped[at] ^= 0x10
        with pytest.raises(WalFormatError):
            decode_record(bytes(flipped))


def test_scan_cuts_a_torn_or_corrupt_final_record() -> None:
    good = seg(b"a", b"b")
    torn = good + seg(b"c", first=3)[:-3]
    scan = scan_segment(torn, first_lsn=1, tail_id="t1")
    assert [r.payload for r in scan.records] == [b"a", b"b"]
    assert scan.valid_bytes == len(good) and scan.torn_bytes == len(torn) - len(good)
    assert "incomplete" in scan.torn_reason
    for tail in (b"\0" * 40, b"\xff" * 5, bytes(range(60))):
        scan = scan_segment(good + tail, first_lsn=1, tail_id="t1")
        assert scan.valid_bytes == len(good) and scan.torn_bytes == len(tail)
    # A complete final record whose body is damaged is a torn write too.
    last = bytearray(seg(b"c" * 20, first=3))
    last[-1] ^= 1
    scan = scan_segment(good + bytes(last), first_lsn=1, tail_id="t1")
    assert scan.valid_bytes == len(good) and "corrupt" in scan.torn_reason


def test_corruption_followed_by_a_valid_record_is_mid_segment() -> None:
    data = bytearray(seg(b"a", b"b", b"c"))
    for at in (0, 6, HEADER_BYTES + 3):  # magic, the length field, the body
        damaged = bytearray(data)
        damaged[at] ^= 4
        with pytest.raises(MidSegmentCorruption):
            scan_segment(bytes(damaged), first_lsn=1, tail_id="t1")


def test_foreign_tail_and_lsn_gaps_are_inconsistent() -> None:
    with pytest.raises(InconsistentSegment):
        scan_segment(seg(b"a", tail="other"), first_lsn=1, tail_id="t1")
    with pytest.raises(InconsistentSegment):
        scan_segment(seg(b"a") + seg(b"b", first=3), first_lsn=1, tail_id="t1")
    with pytest.raises(InconsistentSegment):
        scan_segment(seg(b"a", first=2), first_lsn=1, tail_id="t1")


def test_segment_names() -> None:
    name = segment_name("t1", 42)
    assert name == "00000000000000000042.t1.wal" and parse_segment_name(name) == (42, "t1")
    assert parse_segment_name("notes.txt") is None
    with pytest.raises(WalFormatError):
        parse_segment_name("garbage.wal")
    with pytest.raises(ValueError):
        segment_name("bad id", 1)
    with pytest.raises(ValueError):
        Record(0, "t1", b"")


def _verifies(data: bytes, start: int, end: int, record: Record) -> bool:
    return encode_record(record) == data[start:end]


@settings(max_examples=1500)
@given(data=st.binary(max_size=400), offset=st.integers(0, 50))
def test_fuzz_decoder_raises_only_its_own_errors(data: bytes, offset: int) -> None:
    try:
        record, end = decode_record(data, offset)
    except WalFormatError:
        return
    assert _verifies(data, offset, end, record)


@settings(max_examples=800)
@given(
    payloads=st.lists(st.binary(max_size=40), max_size=4),
    noise=st.binary(max_size=80),
    at=st.integers(0, 400),
    flips=st.lists(st.integers(0, 10_000), max_size=3),
)
def test_fuzz_scan_never_yields_garbage(
    payloads: list[bytes], noise: bytes, at: int, flips: list[int]
) -> None:
    data = bytearray(seg(*payloads))
    data[at:at] = noise
    for flip in flips:
        if data:
            data[flip % len(data)] ^= 1 << (flip % 8)
    try:
        scan = scan_segment(bytes(data), tail_id="t1")
    except WalFormatError:
        return
    offset = 0
    for record in scan.records:
        _, end = decode_record(bytes(data), offset)
        assert _verifies(bytes(data), offset, end, record)
        offset = end
    assert offset == scan.valid_bytes and scan.valid_bytes + scan.torn_bytes == len(data)


def test_corrupt_and_incomplete_are_format_errors() -> None:
    assert issubclass(CorruptRecord, WalFormatError) and issubclass(
        IncompleteRecord, WalFormatError
    )
