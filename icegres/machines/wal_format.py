"""WAL record framing: pure bytes in, records out. No I/O.

One record, little-endian:

    magic      4  b"IGW1" (format version 1)
    body_len   u32
    lsn        u64
    body_crc   u32  checksum of the body
    header_crc u32  checksum of the 20 header bytes before it
    body       body_len bytes: tail_id_len u8, tail_id (ASCII), payload (opaque)

The checksum is zlib.crc32 (CRC-32/ISO-HDLC): neither the standard library nor pyarrow ships
CRC32C, and a pure-Python CRC32C would cost more than the fsync it protects. The magic names the
format version, so a later version can switch to CRC32C without ambiguity.

Why a separate header checksum: a torn final record must be cut, but a corrupt record in the middle
of a segment must refuse recovery. If the length were only covered by the body checksum, a bit flip
in a middle record's length could point past the end of the file and make every later (acked)
record look like the torn tail. With a verified header, the length is trustworthy; with an
unverified one we search the rest of the segment for any valid record before deciding it was the
tail.

A segment file is a run of records with consecutive LSNs and one tail id, named
`<first_lsn:020d>.<tail_id>.wal`, so a directory listing orders segments and names its tail even
when the newest segment is still empty.
"""

from __future__ import annotations

import re
import struct
import zlib
from dataclasses import dataclass
from typing import Any

__all__ = [
    "BODY_BYTES_MAX",
    "HEADER_BYTES",
    "MAGIC",
    "CorruptRecord",
    "IncompleteRecord",
    "InconsistentSegment",
    "MidSegmentCorruption",
    "Record",
    "SegmentScan",
    "WalFormatError",
    "checksum",
    "decode_record",
    "encode_record",
    "is_tail_id",
    "parse_segment_name",
    "record_bytes",
    "scan_segment",
    "segment_name",
    "verified_body",
    "verified_header",
]

MAGIC = b"IGW1"
_PREFIX = struct.Struct("<4sIQI")  # magic, body_len, lsn, body_crc: the span header_crc covers
_HEADER_CRC = struct.Struct("<I")
HEADER_BYTES = _PREFIX.size + _HEADER_CRC.size  # 24
BODY_BYTES_MAX = 1 << 30
LSN_MAX = (1 << 64) - 1
SEGMENT_SUFFIX = ".wal"
_TAIL_ID = re.compile(r"[A-Za-z0-9_-]{1,64}")
_SEGMENT_NAME = re.compile(r"(\d{20})\.([A-Za-z0-9_-]{1,64})\.wal")


class WalFormatError(Exception):
    """The only exception the decoding functions of this module raise."""


class IncompleteRecord(WalFormatError):
    """The bytes end inside a record (a torn write, or a read that stopped short)."""


class CorruptRecord(WalFormatError):
    """The bytes at this offset are not a record: wrong magic, a checksum mismatch, a bad body."""


def verified_header(
    view: memoryview, offset: int, magic: bytes, prefix: struct.Struct, header_crc: struct.Struct,
    incomplete: type[Exception], corrupt: type[Exception],
) -> tuple[Any, ...]:
    """The fields of the checksummed header at `offset` (magic first) of a framing that puts
    `magic` and its fields (`prefix`) under a CRC32 (`header_crc`). Raises `incomplete` when the
    bytes end inside a plausible header, `corrupt` for a wrong magic or checksum. The WAL's records
    and the quorum's frames share this layout and its rules."""
    available = len(view) - offset
    if offset < 0 or available <= 0:
        raise incomplete(f"no bytes at offset {offset}")
    header_bytes = prefix.size + header_crc.size
    if available < header_bytes:
        start = bytes(view[offset : offset + min(available, len(magic))])
        if not magic.startswith(start):
            raise corrupt(f"bad magic at offset {offset}")
        raise incomplete(f"{available} bytes of a {header_bytes}-byte header at {offset}")
    fields = prefix.unpack_from(view, offset)
    if fields[0] != magic:
        raise corrupt(f"bad magic at offset {offset}")
    (crc,) = header_crc.unpack_from(view, offset + prefix.size)
    if checksum(view[offset : offset + prefix.size]) != crc:
        raise corrupt(f"header checksum mismatch at offset {offset}")
    return fields


def verified_body(
    view: memoryview, offset: int, start: int, body_len: int, body_crc: int, noun: str,
    incomplete: type[Exception], corrupt: type[Exception],
) -> memoryview:
    """The body of `body_len` bytes at `start` of the `noun` at `offset`, its CRC32 verified."""
    end = start + body_len
    if end > len(view):
        raise incomplete(f"{noun} at {offset} needs {end - len(view)} more bytes")
    body = view[start:end]
    if checksum(body) != body_crc:
        raise corrupt(f"body checksum mismatch in {noun} at offset {offset}")
    return body


class MidSegmentCorruption(WalFormatError):
    """A corrupt record is followed by a valid one: acked data is damaged, never cut silently."""


class InconsistentSegment(WalFormatError):
    """Valid records that do not belong here: another tail's id, or LSNs out of sequence."""


@dataclass(frozen=True)
class Record:
    lsn: int
    tail_id: str
    payload: bytes

    def __post_init__(self) -> None:
        if not 1 <= self.lsn <= LSN_MAX:
            raise ValueError(f"LSN {self.lsn} out of range")
        if not is_tail_id(self.tail_id):
            raise ValueError(f"tail id {self.tail_id!r} must match [A-Za-z0-9_-]{{1,64}}")


def is_tail_id(tail_id: str) -> bool:
    return _TAIL_ID.fullmatch(tail_id) is not None


def checksum(data: bytes | memoryview) -> int:
    return zlib.crc32(data) & 0xFFFFFFFF


def record_bytes(tail_id: str, payload_bytes: int) -> int:
    """Encoded size of a record: what it adds to a segment."""
    return HEADER_BYTES + 1 + len(tail_id) + payload_bytes


def encode_record(record: Record) -> bytes:
    tail = record.tail_id.encode("ascii")
    body = bytes((len(tail),)) + tail + record.payload
    if len(body) > BODY_BYTES_MAX:
        raise ValueError(f"record body of {len(body)} bytes exceeds {BODY_BYTES_MAX}")
    prefix = _PREFIX.pack(MAGIC, len(body), record.lsn, checksum(body))
    return prefix + _HEADER_CRC.pack(checksum(prefix)) + body


def decode_record(data: bytes | memoryview, offset: int = 0) -> tuple[Record, int]:
    """The record starting at `offset` and the offset just past it.

    Raises IncompleteRecord when `data` ends inside a record whose start is plausible (a prefix of
    a header, or a verified header whose body runs past the end), CorruptRecord otherwise.
    Never returns a record whose checksums do not verify.
    """
    view = memoryview(data)
    _, body_len, lsn, body_crc = verified_header(
        view, offset, MAGIC, _PREFIX, _HEADER_CRC, IncompleteRecord, CorruptRecord
    )
    if body_len > BODY_BYTES_MAX or body_len < 2 or lsn == 0:
        raise CorruptRecord(f"impossible header at offset {offset}")
    start = offset + HEADER_BYTES
    body = verified_body(view, offset, start, body_len, body_crc, "record", IncompleteRecord, CorruptRecord)
    end = start + body_len
    tail_len = body[0]
    if not 1 <= tail_len <= body_len - 1:
        raise CorruptRecord(f"bad tail id length in record at offset {offset}")
    try:
        tail_id = bytes(body[1 : 1 + tail_len]).decode("ascii")
    except UnicodeDecodeError:
        raise CorruptRecord(f"tail id is not ASCII in record at offset {offset}") from None
    if not is_tail_id(tail_id):
        raise CorruptRecord(f"bad tail id in record at offset {offset}")
    return Record(lsn, tail_id, bytes(body[1 + tail_len :])), end


@dataclass(frozen=True)
class SegmentScan:
    records: tuple[Record, ...]
    valid_bytes: int  # where the last whole, verified record ends
    torn_bytes: int  # bytes after it, to be cut at recovery
    torn_reason: str = ""  # why they are not a record; "" when there are none

    @property
    def last_lsn(self) -> int | None:
        return self.records[-1].lsn if self.records else None


def scan_segment(
    data: bytes | memoryview, *, first_lsn: int | None = None, tail_id: str | None = None
) -> SegmentScan:
    """Every record of a segment, and where a torn or corrupt final record begins.

    The records must carry `tail_id` (when given) and consecutive LSNs starting at `first_lsn`
    (when given); otherwise InconsistentSegment. Bytes that are not a record are a torn tail only
    when no valid record of this tail with a higher LSN follows them anywhere in the segment;
    otherwise MidSegmentCorruption. Raises only WalFormatError subclasses.
    """
    view = memoryview(data)
    records: list[Record] = []
    offset = 0
    expected = first_lsn
    reason = ""
    while offset < len(view):
        try:
            record, end = decode_record(view, offset)
        except IncompleteRecord as exc:
            # A header prefix, or a verified header whose length runs past the end: nothing
            # after it can be a record of its own.
            reason = f"incomplete final record: {exc}"
            break
        except CorruptRecord as exc:
            last = records[-1].lsn if records else 0
            found = _find_valid_record(view, offset + 1, tail_id, last)
            if found is not None:
                at, later = found
                raise MidSegmentCorruption(
                    f"corrupt record at offset {offset} ({exc}) is followed by a valid record "
                    f"(LSN {later.lsn} at offset {at})"
                ) from None
            reason = f"corrupt final record: {exc}"
            break
        if tail_id is not None and record.tail_id != tail_id:
            raise InconsistentSegment(
                f"record at offset {offset} belongs to tail {record.tail_id!r}, not {tail_id!r}"
            )
        if expected is not None and record.lsn != expected:
            raise InconsistentSegment(
                f"record at offset {offset} has LSN {record.lsn}, expected {expected}"
            )
        records.append(record)
        expected = record.lsn + 1
        offset = end
    return SegmentScan(tuple(records), offset, len(view) - offset, reason)


def _find_valid_record(
    view: memoryview, start: int, tail_id: str | None, after_lsn: int
) -> tuple[int, Record] | None:
    raw = view.tobytes()  # only on corruption: the copy is cheap next to what it decides
    at = start
    while True:
        at = raw.find(MAGIC, at)
        if at < 0:
            return None
        try:
            record, _ = decode_record(view, at)
        except WalFormatError:
            at += 1
            continue
        if (tail_id is None or record.tail_id == tail_id) and record.lsn > after_lsn:
            return at, record
        at += 1


def segment_name(tail_id: str, first_lsn: int) -> str:
    if not is_tail_id(tail_id) or not 1 <= first_lsn <= LSN_MAX:
        raise ValueError(f"bad segment identity {tail_id!r} / {first_lsn}")
    return f"{first_lsn:020d}.{tail_id}{SEGMENT_SUFFIX}"


def parse_segment_name(name: str) -> tuple[int, str] | None:
    """(first_lsn, tail_id) of a segment file name; None for names that are not segments.

    A name ending in `.wal` that does not parse is a WalFormatError: something else writes here.
    """
    if not name.endswith(SEGMENT_SUFFIX):
        return None
    match = _SEGMENT_NAME.fullmatch(name)
    if match is None or int(match.group(1)) == 0:
        raise WalFormatError(f"{name!r} ends in {SEGMENT_SUFFIX} but is not a segment name")
    return int(match.group(1)), match.group(2)
