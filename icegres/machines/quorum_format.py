"""Quorum-tail framing: the keeper wire protocol and the keeper's durable log. Pure bytes, no I/O.

One frame, little-endian (the layout of `wal_format` records, with a message kind in the body):

    magic      4  b"IGQ1" (format version 1)
    body_len   u32
    body_crc   u32  checksum of the body
    header_crc u32  checksum of the 12 header bytes before it
    body       body_len bytes: kind u8, then the message's fields

Fields: a term is `round u64, writer_len u8, writer` (ASCII `[A-Za-z0-9_-]`, empty only in the
zero term); a slot or watermark is a u64; a payload is `len u32, bytes`; a list is `count u32`
then its items. The kinds:

    1  Prepare   term, rejoins
    2  Accept    term, first_slot, count, payload*, last_slot, rejoins   (count >= 1)
    3  Trim      term, watermark
    4  CatchUp   rejoins                                      (keeper -> keeper)
    11 Promised  term, trimmed, rejoins, count, (slot, term, payload)*  (slots ascending, above trimmed)
    12 Accepted  term, first_slot, last_slot, rejoins         (first <= last)
    13 Rejected  term, promised
    14 Trimmed   term, watermark
    15 Snapshot  promised, trimmed, rejoins, count, (slot, term, payload)*  (keeper -> keeper)
    16 Refused   reason_len u16, reason (UTF-8)               (a catching-up keeper's answer)
    21 Persist   promised, trimmed, count, (slot, term, payload)*   (the keeper's log only)
    22 Persist   promised, trimmed, rejoins, count, (slot, term, payload)*   (with a rejoin count)

A Persist whose rejoin count is 0 is written as kind 21, so logs written before catch-ups existed
read back unchanged; kind 22 carries the count once a keeper took part in a catch-up.

The bytes come from the network and from disk: untrusted. Decoding raises only
`QuorumFormatError` subclasses: `IncompleteFrame` ("need more bytes": a prefix of a plausible
frame) or `CorruptFrame` (never a frame: close the connection, or cut / refuse at recovery). The
checksum is zlib.crc32, as in `wal_format` (and for the same reasons); a verified header makes the
length trustworthy, so one flipped bit cannot make a long body swallow the frames after it.

A keeper's log file is a run of Persist frames. `scan_log` returns them and where a torn or corrupt
final frame starts (cut at recovery); a bad frame followed by a valid one is `MidLogCorruption`:
acknowledged promises or records may be damaged, and the keeper refuses to start.
"""

from __future__ import annotations

import re
import struct
from dataclasses import dataclass

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

# The WAL's CRC32 and its checked-header framing: one definition of each.
from icegres.machines.wal_format import checksum, verified_body, verified_header

__all__ = [
    "BODY_BYTES_MAX",
    "HEADER_BYTES",
    "MAGIC",
    "CorruptFrame",
    "IncompleteFrame",
    "LogScan",
    "Message",
    "MidLogCorruption",
    "QuorumFormatError",
    "decode_frame",
    "encode_frame",
    "scan_log",
]

MAGIC = b"IGQ1"
_PREFIX = struct.Struct("<4sII")  # magic, body_len, body_crc: the span header_crc covers
_HEADER_CRC = struct.Struct("<I")
HEADER_BYTES = _PREFIX.size + _HEADER_CRC.size  # 16
BODY_BYTES_MAX = 256 * 1024 * 1024
U64_MAX = (1 << 64) - 1
_WRITER = re.compile(r"[A-Za-z0-9_-]{1,64}")
_U8 = struct.Struct("<B")
_U16 = struct.Struct("<H")
_U32 = struct.Struct("<I")
_U64 = struct.Struct("<Q")

Message = (
    Prepare
    | Accept
    | Trim
    | CatchUp
    | Promised
    | Accepted
    | Rejected
    | Trimmed
    | Snapshot
    | Refused
    | Persist
)

_KIND = {
    Prepare: 1,
    Accept: 2,
    Trim: 3,
    CatchUp: 4,
    Promised: 11,
    Accepted: 12,
    Rejected: 13,
    Trimmed: 14,
    Snapshot: 15,
    Refused: 16,
    Persist: 21,
}
_PERSIST_WITH_REJOINS = 22
REASON_BYTES_MAX = 1024


class QuorumFormatError(Exception):
    """The only exception the decoding functions of this module raise."""


class IncompleteFrame(QuorumFormatError):
    """The bytes end inside a plausible frame: read more (or, on disk, a torn write)."""


class CorruptFrame(QuorumFormatError):
    """The bytes at this offset are not a frame: bad magic or checksum, or a malformed body."""


class MidLogCorruption(QuorumFormatError):
    """A corrupt frame is followed by a valid one: durable state is damaged, never cut silently."""


# --- encoding ------------------------------------------------------------------------------------


def encode_frame(message: Message) -> bytes:
    """The frame of one message. Raises ValueError for a message that cannot be framed."""
    kind = _KIND.get(type(message))
    if kind is None:
        raise ValueError(f"not a quorum message: {message!r}")
    if isinstance(message, Persist) and message.rejoins:
        kind = _PERSIST_WITH_REJOINS
    out = bytearray(_U8.pack(kind))
    match message:
        case Prepare(term=term, rejoins=rejoins):
            _term(out, term)
            _u64(out, rejoins)
        case Accept(term=term, first_slot=first, payloads=payloads, rejoins=rejoins):
            if not payloads:
                raise ValueError("an Accept carries at least one record")
            _term(out, term)
            _slot(out, first)
            out += _U32.pack(len(payloads))
            for payload in payloads:
                _bytes(out, payload)
            _slot(out, first + len(payloads) - 1)
            _u64(out, rejoins)
        case Trim(term=term, watermark=watermark) | Trimmed(term=term, watermark=watermark):
            _term(out, term)
            _u64(out, watermark)
        case CatchUp(rejoins=rejoins):
            _u64(out, rejoins)
        case Promised(term=term, trimmed=trimmed, entries=entries, rejoins=rejoins):
            _term(out, term)
            _u64(out, trimmed)
            _u64(out, rejoins)
            _entries(out, entries, trimmed)
        case Snapshot(promised=promised, trimmed=trimmed, rejoins=rejoins, entries=entries):
            _term(out, promised)
            _u64(out, trimmed)
            _u64(out, rejoins)
            _entries(out, entries, trimmed)
        case Refused(reason=reason):
            raw = reason.encode("utf-8")[:REASON_BYTES_MAX]
            # Cut on a character boundary: the decoder is strict about UTF-8.
            raw = raw.decode("utf-8", "ignore").encode("utf-8")
            out += _U16.pack(len(raw)) + raw
        case Accepted(term=term, first_slot=first, last_slot=last, rejoins=rejoins):
            if last < first:
                raise ValueError("Accepted: last_slot < first_slot")
            _term(out, term)
            _slot(out, first)
            _slot(out, last)
            _u64(out, rejoins)
        case Rejected(term=term, promised=promised):
            _term(out, term)
            _term(out, promised)
        case Persist(promised=promised, trimmed=trimmed, entries=entries, rejoins=rejoins):
            _term(out, promised)
            _u64(out, trimmed)
            if rejoins:
                _u64(out, rejoins)
            _entries(out, entries, 0)
        case _:  # pragma: no cover - _KIND covers every class matched above
            raise ValueError(f"not a quorum message: {message!r}")
    if len(out) > BODY_BYTES_MAX:
        raise ValueError(f"frame body of {len(out)} bytes exceeds {BODY_BYTES_MAX}")
    prefix = _PREFIX.pack(MAGIC, len(out), checksum(out))
    return prefix + _HEADER_CRC.pack(checksum(prefix)) + bytes(out)


def _term(out: bytearray, term: Term) -> None:
    writer = term.writer.encode("ascii")
    if term.writer and not _WRITER.fullmatch(term.writer):
        raise ValueError(f"writer id {term.writer!r} must match [A-Za-z0-9_-]{{1,64}}")
    _u64(out, term.round)
    out += _U8.pack(len(writer)) + writer


def _u64(out: bytearray, value: int) -> None:
    if not 0 <= value <= U64_MAX:
        raise ValueError(f"{value} does not fit a u64")
    out += _U64.pack(value)


def _slot(out: bytearray, slot: int) -> None:
    if slot < 1:
        raise ValueError(f"slot {slot} must be >= 1")
    _u64(out, slot)


def _bytes(out: bytearray, data: bytes) -> None:
    out += _U32.pack(len(data)) + data


def _entries(out: bytearray, entries: tuple[Entry, ...], above: int) -> None:
    out += _U32.pack(len(entries))
    last = above
    for entry in entries:
        if entry.slot <= last:
            raise ValueError("entries must be in ascending slot order above the trim point")
        last = entry.slot
        _slot(out, entry.slot)
        _term(out, entry.term)
        _bytes(out, entry.payload)


# --- decoding ------------------------------------------------------------------------------------


class _Reader:
    def __init__(self, body: memoryview) -> None:
        self.body = body
        self.at = 1  # after the kind byte

    def take(self, n: int) -> memoryview:
        if n < 0 or self.at + n > len(self.body):
            raise CorruptFrame("the body ends inside a field")
        view = self.body[self.at : self.at + n]
        self.at += n
        return view

    def u8(self) -> int:
        return int(self.take(1)[0])

    def u16(self) -> int:
        return int(_U16.unpack(self.take(2))[0])

    def u32(self) -> int:
        return int(_U32.unpack(self.take(4))[0])

    def u64(self) -> int:
        return int(_U64.unpack(self.take(8))[0])

    def slot(self) -> int:
        slot = self.u64()
        if slot < 1:
            raise CorruptFrame("slot 0")
        return slot

    def term(self) -> Term:
        round_ = self.u64()
        raw = bytes(self.take(self.u8()))
        try:
            writer = raw.decode("ascii")
        except UnicodeDecodeError:
            raise CorruptFrame("a writer id is not ASCII") from None
        if writer and not _WRITER.fullmatch(writer):
            raise CorruptFrame("bad writer id")
        if not writer and round_:
            raise CorruptFrame("a term with a round needs a writer id")
        return Term(round_, writer)

    def payload(self) -> bytes:
        return bytes(self.take(self.u32()))

    def count(self, item_bytes_min: int) -> int:
        n = self.u32()
        # Bounded by what is left, so a forged count cannot make us loop or allocate for nothing.
        if n * item_bytes_min > len(self.body) - self.at:
            raise CorruptFrame(f"a count of {n} does not fit the body")
        return n

    def entries(self, above: int) -> tuple[Entry, ...]:
        out: list[Entry] = []
        last = above
        for _ in range(self.count(8 + 9 + 4)):
            slot = self.slot()
            if slot <= last:
                raise CorruptFrame("entries out of slot order")
            last = slot
            out.append(Entry(slot, self.term(), self.payload()))
        return tuple(out)

    def end(self) -> None:
        if self.at != len(self.body):
            raise CorruptFrame(f"{len(self.body) - self.at} trailing bytes in the body")


def _decode_body(body: memoryview) -> Message:
    kind = body[0]
    r = _Reader(body)
    message: Message
    if kind == 1:
        message = Prepare(r.term(), r.u64())
    elif kind == 2:
        term, first = r.term(), r.slot()
        n = r.count(4)
        if n < 1:
            raise CorruptFrame("an Accept without records")
        payloads = tuple(r.payload() for _ in range(n))
        if first + n - 1 > U64_MAX or r.slot() != first + n - 1:
            raise CorruptFrame("an Accept's last slot does not match its records")
        message = Accept(term, first, payloads, r.u64())
    elif kind == 3:
        message = Trim(r.term(), r.u64())
    elif kind == 4:
        message = CatchUp(r.u64())
    elif kind == 11:
        term, trimmed, rejoins = r.term(), r.u64(), r.u64()
        message = Promised(term, trimmed, r.entries(trimmed), rejoins)
    elif kind == 12:
        term, first, last = r.term(), r.slot(), r.slot()
        if last < first:
            raise CorruptFrame("Accepted: last_slot < first_slot")
        message = Accepted(term, first, last, r.u64())
    elif kind == 13:
        message = Rejected(r.term(), r.term())
    elif kind == 14:
        message = Trimmed(r.term(), r.u64())
    elif kind == 15:
        promised, trimmed, rejoins = r.term(), r.u64(), r.u64()
        message = Snapshot(promised, trimmed, rejoins, r.entries(trimmed))
    elif kind == 16:
        raw = bytes(r.take(r.u16()))
        if len(raw) > REASON_BYTES_MAX:
            raise CorruptFrame("a refusal's reason is too long")
        try:
            message = Refused(raw.decode("utf-8"))
        except UnicodeDecodeError:
            raise CorruptFrame("a refusal's reason is not UTF-8") from None
    elif kind == 21:
        promised, trimmed = r.term(), r.u64()
        message = Persist(promised, trimmed, r.entries(0))
    elif kind == _PERSIST_WITH_REJOINS:
        promised, trimmed, rejoins = r.term(), r.u64(), r.u64()
        if rejoins == 0:
            raise CorruptFrame("a kind-22 Persist with a rejoin count of 0")  # one encoding each
        message = Persist(promised, trimmed, r.entries(0), rejoins)
    else:
        raise CorruptFrame(f"unknown message kind {kind}")
    r.end()
    return message


def decode_frame(
    data: bytes | bytearray | memoryview, offset: int = 0, *, body_bytes_max: int = BODY_BYTES_MAX
) -> tuple[Message, int]:
    """The message framed at `offset` and the offset just past it.

    Raises IncompleteFrame when `data` ends inside a frame whose start is plausible (a prefix of a
    header, or a verified header whose body runs past the end), CorruptFrame otherwise, including
    a verified header announcing a body over `body_bytes_max`. Never returns a message whose
    checksums do not verify.
    """
    view = memoryview(data)
    _, body_len, body_crc = verified_header(view, offset, MAGIC, _PREFIX, _HEADER_CRC, IncompleteFrame, CorruptFrame)
    if body_len < 1 or body_len > min(body_bytes_max, BODY_BYTES_MAX):
        raise CorruptFrame(f"impossible body length {body_len} at offset {offset}")
    start = offset + HEADER_BYTES
    body = verified_body(view, offset, start, body_len, body_crc, "frame", IncompleteFrame, CorruptFrame)
    end = start + body_len
    try:
        return _decode_body(body), end
    except (ValueError, struct.error) as exc:  # a Term or Entry refusing a decoded field
        if isinstance(exc, QuorumFormatError):
            raise
        raise CorruptFrame(f"malformed frame at offset {offset}: {exc}") from None


# --- the keeper's log ----------------------------------------------------------------------------


@dataclass(frozen=True)
class LogScan:
    records: tuple[Persist, ...]
    valid_bytes: int  # where the last whole, verified frame ends
    torn_bytes: int  # bytes after it, to be cut at recovery
    torn_reason: str = ""


def scan_log(data: bytes | memoryview) -> LogScan:
    """Every Persist frame of a keeper log, and where a torn or corrupt final frame begins.

    Raises MidLogCorruption when bytes that are not a frame are followed by a valid frame, and
    CorruptFrame when a valid frame is not a Persist.
    """
    view = memoryview(data)
    records: list[Persist] = []
    offset = 0
    reason = ""
    while offset < len(view):
        try:
            message, end = decode_frame(view, offset)
        except IncompleteFrame as exc:
            reason = f"incomplete final frame: {exc}"
            break
        except CorruptFrame as exc:
            found = _find_valid_frame(view, offset + 1)
            if found is not None:
                raise MidLogCorruption(
                    f"corrupt frame at offset {offset} ({exc}) is followed by a valid frame at "
                    f"offset {found}"
                ) from None
            reason = f"corrupt final frame: {exc}"
            break
        if not isinstance(message, Persist):
            raise CorruptFrame(f"a {type(message).__name__} frame in a keeper log at {offset}")
        records.append(message)
        offset = end
    return LogScan(tuple(records), offset, len(view) - offset, reason)


def _find_valid_frame(view: memoryview, start: int) -> int | None:
    raw = view.tobytes()
    at = start
    while True:
        at = raw.find(MAGIC, at)
        if at < 0:
            return None
        try:
            decode_frame(view, at)
        except QuorumFormatError:
            at += 1
            continue
        return at
