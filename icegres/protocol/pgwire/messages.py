"""PostgreSQL protocol 3.0 messages: frozen dataclasses and pure encoders/decoders.

Frontend messages are decoded from one complete frame (type byte and length already split off by
framing.py); backend messages are encoded straight to bytes, since the session only ever sends them.
"""

from __future__ import annotations

import struct
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from typing import Any

from icegres.pg import big_str, encoding
from icegres.pg.errors import PROTOCOL_VIOLATION, PgError
from icegres.pg.text_arrays import PIECE_CHARS, utf8_pieces
from icegres.protocol.pgwire import errors_ahead

PROTOCOL_3_0 = 196608
SSL_REQUEST_CODE = 80877103
GSSENC_REQUEST_CODE = 80877104
CANCEL_REQUEST_CODE = 80877102


# --- frontend messages ---------------------------------------------------------------------


@dataclass(frozen=True)
class StartupMessage:
    protocol: int
    params: dict[str, str]


@dataclass(frozen=True)
class SSLRequest:
    pass


@dataclass(frozen=True)
class GSSENCRequest:
    pass


@dataclass(frozen=True)
class CancelRequest:
    backend_pid: int
    secret_key: int


@dataclass(frozen=True)
class Query:
    sql: str
    # A big Query's statements, split and compacted as it was decoded (statements.py); None: not yet.
    split: Any = field(default=None, compare=False, repr=False)


@dataclass(frozen=True)
class MessagePieces:
    """A big Query or Parse message's body as the pieces it arrived in, not yet decoded
    (framing.py); the list is emptied as it is read."""

    kind: bytes  # b"Q" or b"P"
    pieces: list[bytes]


@dataclass(frozen=True)
class Parse:
    name: str
    sql: str
    param_oids: tuple[int, ...]
    # A big Parse's statements, split and compacted as it was decoded (statements.py); None: not yet.
    split: Any = field(default=None, compare=False, repr=False)


@dataclass(frozen=True)
class Bind:
    portal: str
    statement: str
    param_formats: tuple[int, ...]
    params: tuple[bytes | None, ...]
    result_formats: tuple[int, ...]


@dataclass(frozen=True)
class Describe:
    kind: str  # 'S' statement or 'P' portal
    name: str


@dataclass(frozen=True)
class Execute:
    portal: str
    max_rows: int


@dataclass(frozen=True)
class Close:
    kind: str
    name: str


@dataclass(frozen=True)
class Sync:
    pass


@dataclass(frozen=True)
class Flush:
    pass


@dataclass(frozen=True)
class Terminate:
    pass


@dataclass(frozen=True)
class PasswordMessage:
    password: bytes  # raw: cleartext password NUL-terminated, or a SASL payload


@dataclass(frozen=True)
class SASLInitialResponse:
    """A 'p' message answering AuthenticationSASL: the mechanism chosen and its first data
    (None when the client sent none: length -1)."""

    mechanism: str
    data: bytes | None


@dataclass(frozen=True)
class SASLResponse:
    """A 'p' message answering AuthenticationSASLContinue."""

    data: bytes


@dataclass(frozen=True)
class CopyData:
    data: bytes


@dataclass(frozen=True)
class CopyDone:
    pass


@dataclass(frozen=True)
class CopyFail:
    message: str


@dataclass(frozen=True)
class FunctionCall:
    pass


@dataclass(frozen=True)
class Unreadable:
    """A Query or Parse whose text could not be read: bytes that are not UTF-8, or an E'…'
    string PostgreSQL refuses. Its frame was whole, so this is the message's error (an ERROR,
    not a FATAL protocol violation), answered as its statement's would be."""

    kind: bytes  # b"Q" or b"P"
    error: PgError


FrontendMessage = (
    Query | Parse | Bind | Describe | Execute | Close | Sync | Flush | Terminate
    | PasswordMessage | CopyData | CopyDone | CopyFail | FunctionCall | Unreadable
)


class _Reader:
    """Cursor over one frame body; every overrun is a protocol violation, never an IndexError."""

    __slots__ = ("buf", "pos")

    def __init__(self, buf: bytes) -> None:
        self.buf = buf
        self.pos = 0

    def _need(self, n: int) -> None:
        if n < 0 or self.pos + n > len(self.buf):
            raise PgError(PROTOCOL_VIOLATION, "invalid message format: message too short")

    def int16(self) -> int:
        self._need(2)
        (v,) = struct.unpack_from("!h", self.buf, self.pos)
        self.pos += 2
        return v

    def int32(self) -> int:
        self._need(4)
        (v,) = struct.unpack_from("!i", self.buf, self.pos)
        self.pos += 4
        return v

    def byte(self) -> str:
        self._need(1)
        v = self.buf[self.pos : self.pos + 1]
        self.pos += 1
        return v.decode("latin-1")

    def cstring(self) -> str:
        end = self.buf.find(b"\0", self.pos)
        if end < 0:
            raise PgError(PROTOCOL_VIOLATION, "invalid message format: unterminated string")
        raw = memoryview(self.buf)[self.pos : end]  # decoded in place: a Query may be 100s of MB
        self.pos = end + 1
        return encoding.utf8(raw)

    def raw(self, n: int) -> bytes:
        self._need(n)
        v = self.buf[self.pos : self.pos + n]
        self.pos += n
        return v

    def count(self) -> int:
        """A count of the items that follow (parameter types, formats, values): PostgreSQL reads
        it as an unsigned 16-bit number (pq_getmsgint(msg, 2)), so up to 65,535."""
        self._need(2)
        (n,) = struct.unpack_from("!H", self.buf, self.pos)
        self.pos += 2
        return n

    def done(self) -> None:
        if self.pos != len(self.buf):
            raise PgError(PROTOCOL_VIOLATION, "invalid message format: trailing bytes")


def decode_startup(body: bytes) -> StartupMessage | SSLRequest | GSSENCRequest | CancelRequest:
    r = _Reader(body)
    code = r.int32()
    if code == SSL_REQUEST_CODE:
        return SSLRequest()
    if code == GSSENC_REQUEST_CODE:
        return GSSENCRequest()
    if code == CANCEL_REQUEST_CODE:
        pid, key = r.int32(), r.int32()
        return CancelRequest(pid, key)
    if code >> 16 != 3:
        raise PgError(
            "0A000",
            f"unsupported frontend protocol {code >> 16}.{code & 0xFFFF}: "
            "server supports 3.0 to 3.0",
        )
    params: dict[str, str] = {}
    while True:
        key = r.cstring()
        if not key:
            break
        params[key] = r.cstring()
    return StartupMessage(code, params)


def decode_frontend(kind: bytes, body: bytes) -> FrontendMessage:
    r = _Reader(body)
    msg: FrontendMessage
    if kind == b"Q":
        msg = Query(r.cstring())
    elif kind == b"P":
        name, sql = r.cstring(), r.cstring()
        msg = Parse(name, sql, tuple(r.int32() & 0xFFFFFFFF for _ in range(r.count())))
    elif kind == b"B":
        portal, stmt = r.cstring(), r.cstring()
        formats = tuple(r.int16() for _ in range(r.count()))
        params: list[bytes | None] = []
        for _ in range(r.count()):
            n = r.int32()
            params.append(None if n == -1 else r.raw(n))
        results = tuple(r.int16() for _ in range(r.count()))
        msg = Bind(portal, stmt, formats, tuple(params), results)
    elif kind == b"D":
        msg = Describe(r.byte(), r.cstring())
        if msg.kind not in ("S", "P"):
            raise PgError(PROTOCOL_VIOLATION, f"invalid DESCRIBE message subtype {msg.kind!r}")
    elif kind == b"E":
        msg = Execute(r.cstring(), r.int32())
    elif kind == b"C":
        msg = Close(r.byte(), r.cstring())
        if msg.kind not in ("S", "P"):
            raise PgError(PROTOCOL_VIOLATION, f"invalid CLOSE message subtype {msg.kind!r}")
    elif kind == b"S":
        msg = Sync()
    elif kind == b"H":
        msg = Flush()
    elif kind == b"X":
        msg = Terminate()
    elif kind == b"p":
        return PasswordMessage(body)
    elif kind == b"d":
        return CopyData(body)
    elif kind == b"c":
        msg = CopyDone()
    elif kind == b"f":
        msg = CopyFail(r.cstring())
    elif kind == b"F":
        return FunctionCall()
    else:
        raise PgError(PROTOCOL_VIOLATION, f"invalid frontend message type {kind[0]}")
    r.done()
    return msg


# 'p' carries PasswordMessage, SASLInitialResponse, SASLResponse or GSSResponse: which one only
# the authentication exchange knows, so framing decodes it as a PasswordMessage (raw body) and the
# exchange reads the body with one of these.


def decode_password(msg: PasswordMessage) -> str:
    """The password of a PasswordMessage: one NUL-terminated string filling the message (as
    PostgreSQL checks: "invalid password packet size"). Bytes that are not UTF-8 are kept as
    surrogates, so they still compare (and hash) as the bytes sent."""
    body = msg.password
    if not body.endswith(b"\0") or body.index(b"\0") != len(body) - 1:
        raise PgError(PROTOCOL_VIOLATION, "invalid password packet size")
    return body[:-1].decode("utf-8", "surrogateescape")


def decode_sasl_initial(msg: PasswordMessage) -> SASLInitialResponse:
    r = _Reader(msg.password)
    mechanism = r.cstring()
    n = r.int32()
    data = None if n == -1 else r.raw(n)
    r.done()
    return SASLInitialResponse(mechanism, data)


def decode_sasl_response(msg: PasswordMessage) -> SASLResponse:
    return SASLResponse(msg.password)


# --- backend messages ------------------------------------------------------------------------


def _frame(kind: bytes, body: bytes) -> bytes:
    return kind + struct.pack("!i", len(body) + 4) + body


def _cstr(s: str) -> bytes:
    if len(s) <= PIECE_CHARS:
        return s.encode("utf-8").replace(b"\0", b"") + b"\0"
    return big_str.join_bytes(_cstr_parts(s))


def _cstr_parts(s: str) -> list[bytes]:
    """`_cstr(s)` in pieces: a long text (an error quoting a 50 MB value) is encoded a piece at
    a time (one encode of it held the GIL, and so every other session, 50-90 ms) and joined
    once, by whoever joins them with more (pg/big_str.py)."""
    if len(s) <= PIECE_CHARS:
        return [_cstr(s)]
    return [*(piece.replace(b"\0", b"") for piece in utf8_pieces(s)), b"\0"]


AUTH_OK = _frame(b"R", struct.pack("!i", 0))
AUTH_CLEARTEXT = _frame(b"R", struct.pack("!i", 3))
PARSE_COMPLETE = _frame(b"1", b"")
BIND_COMPLETE = _frame(b"2", b"")
CLOSE_COMPLETE = _frame(b"3", b"")
NO_DATA = _frame(b"n", b"")
PORTAL_SUSPENDED = _frame(b"s", b"")
EMPTY_QUERY = _frame(b"I", b"")
COPY_DONE = _frame(b"c", b"")


def auth_sasl(mechanisms: Iterable[str]) -> bytes:
    return _frame(b"R", struct.pack("!i", 10) + b"".join(_cstr(m) for m in mechanisms) + b"\0")


def auth_sasl_continue(data: bytes) -> bytes:
    return _frame(b"R", struct.pack("!i", 11) + data)


def auth_sasl_final(data: bytes) -> bytes:
    return _frame(b"R", struct.pack("!i", 12) + data)


def parameter_status(name: str, value: str) -> bytes:
    return _frame(b"S", _cstr(name) + _cstr(value))


def backend_key_data(pid: int, key: int) -> bytes:
    return _frame(b"K", struct.pack("!ii", pid, key))


def ready_for_query(status: str) -> bytes:
    return _frame(b"Z", status.encode("ascii"))


def command_complete(tag: str) -> bytes:
    return _frame(b"C", _cstr(tag))


def parameter_description(oids: Sequence[int]) -> bytes:
    return _frame(b"t", struct.pack(f"!H{len(oids)}I", len(oids), *oids))


@dataclass(frozen=True)
class FieldDescription:
    name: str
    type_oid: int
    type_size: int
    type_modifier: int = -1
    table_oid: int = 0
    column_attnum: int = 0
    format: int = 0


def row_description(fields: Sequence[FieldDescription]) -> bytes:
    parts = [struct.pack("!h", len(fields))]
    for f in fields:
        parts.append(_cstr(f.name))
        parts.append(
            struct.pack(
                "!IhIhih", f.table_oid, f.column_attnum, f.type_oid, f.type_size,
                f.type_modifier, f.format,
            )
        )
    return _frame(b"T", b"".join(parts))


# The ErrorResponse field carrying a statement's correlation id (statement_record.py). PostgreSQL
# uses S V C M D H P p q W s t c d n F L R and tells frontends to ignore a field type they do not
# know: libpq keeps it (PQresultErrorField(res, 'i')), psql, psycopg, asyncpg and pgjdbc show
# nothing more by default.
CORRELATION_FIELD = b"i"


def error_response(err: PgError, correlation_id: str | None = None) -> bytes:
    return b"".join(error_response_parts(err, correlation_id))


def error_response_parts(err: PgError, correlation_id: str | None = None) -> tuple[bytes, bytes, bytes]:
    """An ErrorResponse in three parts, its fields as they were encoded: sent one after the
    other, a big message is never copied to be framed (outbox.py)."""
    fields = errors_ahead.take(err, said(err))
    if fields is None:
        fields = notice_fields(err)
    tail = CORRELATION_FIELD + _cstr(correlation_id) + b"\0" if correlation_id else b"\0"
    return b"E" + struct.pack("!i", len(fields) + len(tail) + 4), fields, tail


def said(err: PgError) -> tuple[Any, ...]:
    """What an ErrorResponse is made from (errors_ahead.py: fields encoded ahead are used only
    while the error still says this)."""
    return (err.severity, err.sqlstate, id(err.message), len(err.message), err.detail, err.hint, err.position)


def notice_fields(err: PgError) -> bytes:
    """An ErrorResponse's or NoticeResponse's fields, without the terminator."""
    return big_str.join_bytes(_notice_fields(err))


def notice_response(err: PgError) -> bytes:
    return _frame(b"N", b"".join([*_notice_fields(err), b"\0"]))


def _notice_fields(err: PgError) -> list[bytes]:
    fields = [(b"S", err.severity), (b"V", err.severity), (b"C", err.sqlstate), (b"M", err.message)]
    if err.detail:
        fields.append((b"D", err.detail))
    if err.hint:
        fields.append((b"H", err.hint))
    if err.position:
        fields.append((b"P", str(err.position)))
    # (one join of the pieces: a message quoting a 50 MB value is copied once more, not per step)
    return [part for code, value in fields for part in (code, *_cstr_parts(value))]


def copy_out_response(ncols: int, fmt: int = 0) -> bytes:
    return _frame(b"H", struct.pack(f"!bh{ncols}h", fmt, ncols, *([fmt] * ncols)))


def copy_in_response(ncols: int, fmt: int = 0) -> bytes:
    return _frame(b"G", struct.pack(f"!bh{ncols}h", fmt, ncols, *([fmt] * ncols)))


def copy_data(data: bytes) -> bytes:
    return _frame(b"d", data)


def copy_data_header(length: int) -> bytes:
    """The first five bytes of a CopyData message whose payload of `length` bytes follows."""
    return b"d" + struct.pack("!i", length + 4)
