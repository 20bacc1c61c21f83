"""The quorum framing: round trips of every message, torn vs corrupt, a fuzzed decoder."""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from icegres.machines.quorum import (
    Accept,
    Accepted,
    CatchUp,
    Entry,
    Persist,
    Prepare,
    Promised,
    Refused,
    Rejected,
    Snapshot,
    Term,
    Trim,
    Trimmed,
)
from icegres.machines.quorum_format import (
    HEADER_BYTES,
    CorruptFrame,
    IncompleteFrame,
    MidLogCorruption,
    QuorumFormatError,
    decode_frame,
    encode_frame,
    scan_log,
)

pytestmark = pytest.mark.unit

writers = st.text("abcXYZ019_-", min_size=1, max_size=64)
terms = st.builds(Term, st.integers(1, 2**64 - 1), writers) | st.just(Term(0, ""))
slots = st.integers(1, 2**40)
payloads = st.binary(max_size=200)


@st.composite
def entry_lists(draw, above: int = 0):
    chosen = sorted(draw(st.sets(st.integers(above + 1, above + 10_000), max_size=6)))
    return tuple(Entry(s, draw(terms), draw(payloads)) for s in chosen)


@st.composite
def messages(draw):
    kind = draw(
        st.sampled_from(
            ("prepare", "accept", "trim", "promised", "accepted", "rejected", "trimmed", "persist")
            + ("catch_up", "snapshot", "refused")
        )
    )
    term = draw(terms)
    rejoins = draw(st.integers(0, 2**64 - 1))
    if kind == "prepare":
        return Prepare(term, rejoins)
    if kind == "catch_up":
        return CatchUp(rejoins)
    if kind == "snapshot":
        trimmed = draw(st.integers(0, 2**40))
        return Snapshot(term, trimmed, rejoins, draw(entry_lists(trimmed)))
    if kind == "refused":
        return Refused(draw(st.text(max_size=40)))
    if kind == "accept":
        return Accept(
            term, draw(slots), tuple(draw(st.lists(payloads, min_size=1, max_size=5))), rejoins
        )
    if kind == "trim":
        return Trim(term, draw(st.integers(0, 2**64 - 1)))
    if kind == "trimmed":
        return Trimmed(term, draw(st.integers(0, 2**64 - 1)))
    if kind == "promised":
        trimmed = draw(st.integers(0, 2**40))
        return Promised(term, trimmed, draw(entry_lists(trimmed)), rejoins)
    if kind == "accepted":
        first = draw(slots)
        return Accepted(term, first, first + draw(st.integers(0, 100)), rejoins)
    if kind == "rejected":
        return Rejected(term, draw(terms))
    return Persist(term, draw(st.integers(0, 2**40)), draw(entry_lists()), rejoins)


@settings(max_examples=400)
@given(message=messages())
def test_every_message_roundtrips(message) -> None:
    data = encode_frame(message)
    assert decode_frame(data + b"next") == (message, len(data))


def test_each_kind_roundtrips_once() -> None:
    t, u = Term(3, "w1"), Term(4, "w2")
    for message in (
        Prepare(t),
        Accept(t, 7, (b"a", b"", b"ccc")),
        Trim(t, 0),
        Promised(t, 2, (Entry(3, u, b"x"), Entry(9, t, b""))),
        Accepted(t, 7, 9),
        Rejected(t, u),
        Trimmed(t, 5),
        Persist(u, 0, (Entry(1, u, b"p"),)),
        Persist(Term(0, ""), 0),
    ):
        assert decode_frame(encode_frame(message))[0] == message


def test_unframeable_messages_are_refused() -> None:
    t = Term(1, "w")
    for bad in (
        Accept(t, 1, ()),
        Accept(t, 0, (b"x",)),
        Accepted(t, 5, 4),
        Prepare(Term(1, "bad id")),
        Promised(t, 5, (Entry(5, t, b"x"),)),  # at or below the trim point
        Persist(t, 0, (Entry(2, t, b"x"), Entry(1, t, b"y"))),
    ):
        with pytest.raises(ValueError):
            encode_frame(bad)


def test_every_strict_prefix_is_incomplete() -> None:
    data = encode_frame(Accept(Term(1, "w1"), 4, (b"hello", b"world")))
    for n in range(1, len(data)):
        with pytest.raises(IncompleteFrame):
            decode_frame(data[:n])


def test_flipped_bits_are_corrupt() -> None:
    data = encode_frame(Promised(Term(2, "w1"), 1, (Entry(2, Term(1, "w0"), b"abc"),)))
    for at in range(len(data)):
        for bit in (0x01, 0x80):
            flipped = bytearray(data)
            flipped[at] ^= bit
            with pytest.raises(QuorumFormatError):
                decode_frame(bytes(flipped))


def test_a_stream_decodes_frame_by_frame() -> None:
    msgs = [Prepare(Term(1, "a")), Accepted(Term(1, "a"), 1, 1), Trim(Term(1, "a"), 1)]
    stream = b"".join(encode_frame(m) for m in msgs)
    got, offset = [], 0
    while offset < len(stream):
        message, offset = decode_frame(stream, offset)
        got.append(message)
    assert got == msgs


def test_body_limit_is_enforced_on_a_verified_header() -> None:
    data = encode_frame(Accept(Term(1, "a"), 1, (b"x" * 100,)))
    with pytest.raises(CorruptFrame, match="impossible body length"):
        decode_frame(data, body_bytes_max=50)


def test_scan_log_cuts_a_torn_tail_and_refuses_mid_log_damage() -> None:
    t = Term(1, "w")
    frames = [encode_frame(Persist(t, 0, (Entry(i, t, b"r%d" % i),))) for i in range(1, 4)]
    good = b"".join(frames[:2])
    torn = good + frames[2][:-2]
    scan = scan_log(torn)
    assert len(scan.records) == 2 and scan.valid_bytes == len(good)
    assert scan.torn_bytes == len(torn) - len(good) and "incomplete" in scan.torn_reason
    damaged = bytearray(b"".join(frames))
    damaged[HEADER_BYTES + 3] ^= 1  # inside the first frame's body; two valid frames follow
    with pytest.raises(MidLogCorruption):
        scan_log(bytes(damaged))
    with pytest.raises(CorruptFrame):
        scan_log(encode_frame(Prepare(t)))  # not a Persist: not a keeper log


@settings(max_examples=2000)
@given(data=st.binary(max_size=300), offset=st.integers(0, 40))
def test_fuzz_decoder_raises_only_its_own_errors(data: bytes, offset: int) -> None:
    try:
        message, end = decode_frame(data, offset)
    except QuorumFormatError:
        return
    assert offset < end <= len(data)
    assert encode_frame(message) == data[offset:end]


@settings(max_examples=800)
@given(message=messages(), at=st.integers(0, 10_000), value=st.integers(0, 255))
def test_fuzz_damaged_frames_never_decode_to_something_else(message, at: int, value: int) -> None:
    data = bytearray(encode_frame(message))
    at %= len(data)
    data[at] = value
    try:
        decoded, _ = decode_frame(bytes(data))
    except QuorumFormatError:
        return
    assert decoded == message  # only a no-op overwrite decodes


@settings(max_examples=300)
@given(
    kind=st.sampled_from((1, 2, 3, 4, 11, 12, 13, 14, 15, 16, 21, 22)), rest=st.binary(max_size=120)
)
def test_fuzz_checksummed_garbage_bodies(kind: int, rest: bytes) -> None:
    """Past the checksums: a well-framed body of garbage still only raises format errors."""
    import struct
    import zlib

    body = bytes((kind,)) + rest
    prefix = struct.pack("<4sII", b"IGQ1", len(body), zlib.crc32(body))
    frame = prefix + struct.pack("<I", zlib.crc32(prefix)) + body
    try:
        message, end = decode_frame(frame)
    except QuorumFormatError:
        return
    assert end == len(frame) and encode_frame(message) == frame
