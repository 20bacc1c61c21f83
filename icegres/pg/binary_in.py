"""PostgreSQL's binary receive functions for Bind parameters."""

from __future__ import annotations

import struct
import uuid
from collections.abc import Callable
from datetime import UTC, date, datetime, time, timedelta, timezone
from decimal import ROUND_DOWN, Decimal
from typing import Any

from dateutil.relativedelta import relativedelta

from icegres.pg.binary_out import (
    _NUMERIC_NAN,
    _NUMERIC_NEG,
    _NUMERIC_NINF,
    _NUMERIC_PINF,
    _NUMERIC_POS,
)
from icegres.pg.clock import (
    _TZDISP_LIMIT_S,
    _US_1970_TO_2000,
    _US_PER_DAY,
    _WIDE_CONTEXT,
    TextSettings,
)
from icegres.pg.errors import (
    DATATYPE_MISMATCH,
    DATETIME_FIELD_OVERFLOW,
    FEATURE_NOT_SUPPORTED,
    INDETERMINATE_DATATYPE,
    INTERNAL_ERROR,
    INVALID_BINARY_REPRESENTATION,
    INVALID_TIME_ZONE_DISPLACEMENT_VALUE,
    NAME_TOO_LONG,
    NUMERIC_VALUE_OUT_OF_RANGE,
    PROGRAM_LIMIT_EXCEEDED,
    PROTOCOL_VIOLATION,
)
from icegres.pg.text_in import (
    _NUMERIC_WEIGHT_MAX,
    _datetime_from_us,
    _fail,
    _interval_value,
    _parse_json,
    _time_from_us,
    _Unrepresentable,
    _utf8,
)
from icegres.pg.types import (
    _TYPES_BY_OID,
    BOOL,
    BPCHAR,
    BYTEA,
    CHAR,
    CSTRING,
    DATE,
    FLOAT4,
    FLOAT8,
    INT2,
    INT4,
    INT8,
    INTERVAL,
    JSON,
    JSONB,
    NAME,
    NUMERIC,
    OID,
    REGCLASS,
    REGPROC,
    REGTYPE,
    TEXT,
    TIME,
    TIMESTAMP,
    TIMESTAMPTZ,
    TIMETZ,
    UNKNOWN,
    UUID,
    VARCHAR,
    XID,
)

# --- binary format -----------------------------------------------------------------------------------


class _Reader:
    """pq_getmsg*: reading past the end is PostgreSQL's 'insufficient data left in message' (08P01)."""

    def __init__(self, raw: bytes) -> None:
        self.raw = raw
        self.pos = 0

    def take(self, n: int) -> bytes:
        if n < 0 or self.pos + n > len(self.raw):
            raise _fail(PROTOCOL_VIOLATION, "insufficient data left in message")
        b = self.raw[self.pos : self.pos + n]
        self.pos += n
        return b

    def unpack(self, fmt: str) -> Any:
        return struct.unpack(">" + fmt, self.take(struct.calcsize(">" + fmt)))[0]

    def rest(self) -> bytes:
        return self.take(len(self.raw) - self.pos)

    @property
    def remaining(self) -> int:
        return len(self.raw) - self.pos


def _recv_date(r: _Reader) -> date | _Unrepresentable:
    days = r.unpack("i")
    if days in (2**31 - 1, -(2**31)):
        return _Unrepresentable("infinite dates are not supported in icegres parameters")
    # date_recv's range is 4714-11-24 BC .. 5874897-12-31; Python's is years 1 .. 9999.
    if not -2_451_545 <= days <= 2_145_031_948:
        raise _fail(DATETIME_FIELD_OVERFLOW, "date out of range")
    ordinal = days + 730_120
    if not 1 <= ordinal <= date.max.toordinal():
        return _Unrepresentable(
            "dates outside years 1..9999 are not supported in icegres parameters"
        )
    return date.fromordinal(ordinal)


_TIMESTAMP_MIN_US = -211_813_488_000_000_000  # 4714-11-24 00:00 BC, relative to 2000-01-01
_TIMESTAMP_END_US = 9_223_371_331_200_000_000  # 294277-01-01 00:00, relative to 2000-01-01


def _recv_timestamp(r: _Reader, with_tz: bool) -> datetime | _Unrepresentable:
    us = r.unpack("q")
    if us in (2**63 - 1, -(2**63)):
        return _Unrepresentable("infinite timestamps are not supported in icegres parameters")
    if not _TIMESTAMP_MIN_US <= us < _TIMESTAMP_END_US:
        raise _fail(DATETIME_FIELD_OVERFLOW, "timestamp out of range")
    return _datetime_from_us(us + _US_1970_TO_2000, UTC if with_tz else None, "binary value")


def _recv_time_us(r: _Reader) -> int:
    us = r.unpack("q")
    if not 0 <= us <= _US_PER_DAY:
        raise _fail(DATETIME_FIELD_OVERFLOW, "time out of range")
    return us




def _recv_timetz(r: _Reader) -> time | _Unrepresentable:
    us = _recv_time_us(r)
    zone_west_s = r.unpack("i")
    if not -_TZDISP_LIMIT_S < zone_west_s < _TZDISP_LIMIT_S:
        raise _fail(INVALID_TIME_ZONE_DISPLACEMENT_VALUE, "time zone displacement out of range")
    return _time_from_us(us, timezone(timedelta(seconds=-zone_west_s)))


def _recv_interval(r: _Reader) -> timedelta | relativedelta:
    us, days, months = r.unpack("q"), r.unpack("i"), r.unpack("i")
    return _interval_value(months, days, us)


def _recv_numeric(r: _Reader) -> Decimal:
    """numeric_recv, with its checks in its order."""
    ndigits = r.unpack("H")
    weight = r.unpack("h")
    sign = r.unpack("H")
    if sign not in (_NUMERIC_POS, _NUMERIC_NEG, _NUMERIC_NAN, _NUMERIC_PINF, _NUMERIC_NINF):
        raise _fail(INVALID_BINARY_REPRESENTATION, 'invalid sign in external "numeric" value')
    dscale = r.unpack("H")
    if dscale & 0x3FFF != dscale:
        raise _fail(INVALID_BINARY_REPRESENTATION, 'invalid scale in external "numeric" value')
    digits = []
    for _ in range(ndigits):
        d = r.unpack("h")
        if not 0 <= d < 10_000:
            raise _fail(INVALID_BINARY_REPRESENTATION, 'invalid digit in external "numeric" value')
        digits.append(d)
    if sign == _NUMERIC_NAN:
        return Decimal("NaN")
    if sign in (_NUMERIC_PINF, _NUMERIC_NINF):
        return Decimal("-Infinity" if sign == _NUMERIC_NINF else "Infinity")
    if not any(digits):
        return Decimal((0, (0,), -dscale))
    text = "".join(f"{d:04d}" for d in digits)
    value = Decimal(f"{'-' if sign == _NUMERIC_NEG else ''}{text}E{4 * (weight - ndigits + 1)}")
    # numeric_recv truncates digits hidden by dscale, then shows exactly dscale fraction digits.
    value = value.quantize(Decimal((0, (1,), -dscale)), rounding=ROUND_DOWN, context=_WIDE_CONTEXT)
    if value == 0:
        return Decimal((0, (0,), -dscale))  # numeric has no negative zero
    if not -(2**15) <= value.adjusted() // 4 <= _NUMERIC_WEIGHT_MAX:
        raise _fail(NUMERIC_VALUE_OUT_OF_RANGE, "value overflows numeric format")  # make_result
    return value


def _recv_text(r: _Reader) -> str:
    return _utf8(r.rest())


def _recv_name(r: _Reader) -> str:
    s = _recv_text(r)
    if len(s.encode()) >= 64:
        raise _fail(NAME_TOO_LONG, "identifier too long")
    return s


def _recv_jsonb(r: _Reader) -> str:
    version = r.unpack("B")
    if version != 1:
        raise _fail(INTERNAL_ERROR, f"unsupported jsonb version number {version}")
    return _parse_json(_recv_text(r), True)


_MAXDIM = 6
_MAX_ARRAY_SIZE = 0x3FFFFFFF // 8  # MaxAllocSize / sizeof(Datum)


def _recv_array(r: _Reader, elem_oid: int, settings: TextSettings) -> list[Any]:
    """array_recv, with its checks in its order; nested lists for multidimensional arrays."""
    ndim = r.unpack("i")
    if ndim < 0:
        raise _fail(INVALID_BINARY_REPRESENTATION, f"invalid number of dimensions: {ndim}")
    if ndim > _MAXDIM:
        raise _fail(
            PROGRAM_LIMIT_EXCEEDED,
            f"number of array dimensions ({ndim}) exceeds the maximum allowed ({_MAXDIM})",
        )
    flags = r.unpack("i")
    if flags not in (0, 1):
        raise _fail(INVALID_BINARY_REPRESENTATION, "invalid array flags")
    got_elem = r.unpack("I")
    if got_elem != elem_oid:
        raise _fail(
            DATATYPE_MISMATCH,
            f"binary data has array element type {got_elem} instead of expected {elem_oid}",
        )
    dims, lbounds = [], []
    for _ in range(ndim):
        dims.append(r.unpack("i"))
        lbounds.append(r.unpack("i"))
    nitems = _array_nitems(dims)
    for dim, lbound in zip(dims, lbounds, strict=True):
        if not -(2**31) <= dim + lbound < 2**31:  # ArrayCheckBounds
            raise _fail(PROGRAM_LIMIT_EXCEEDED, f"array lower bound is too large: {lbound}")
    if nitems == 0:
        return []
    items: list[Any] = []
    for i in range(nitems):
        itemlen = r.unpack("i")
        if itemlen < -1 or itemlen > r.remaining:
            raise _fail(INVALID_BINARY_REPRESENTATION, "insufficient data left in message")
        if itemlen == -1:
            items.append(None)
            continue
        sub = _Reader(r.take(itemlen))
        items.append(_BINARY_DECODERS[elem_oid](sub, settings))
        if sub.remaining:
            raise _fail(
                INVALID_BINARY_REPRESENTATION, f"improper binary format in array element {i + 1}"
            )
    return _nest(items, dims)


def _array_nitems(dims: list[int]) -> int:
    """ArrayGetNItems: the running product must stay within int32 at every step."""
    too_big = _fail(
        PROGRAM_LIMIT_EXCEEDED, f"array size exceeds the maximum allowed ({_MAX_ARRAY_SIZE})"
    )
    n = 1 if dims else 0
    for dim in dims:
        if dim < 0:
            raise too_big
        n *= dim
        if n >= 2**31:
            raise too_big
    if n > _MAX_ARRAY_SIZE:
        raise too_big
    return n


def _nest(items: list[Any], dims: list[int]) -> list[Any]:
    if len(dims) <= 1:
        return items
    step = len(items) // dims[0]
    return [_nest(items[i : i + step], dims[1:]) for i in range(0, len(items), step)]


_BINARY_DECODERS: dict[int, Callable[[_Reader, TextSettings], Any]] = {
    BOOL.oid: lambda r, _: r.unpack("B") != 0,
    INT2.oid: lambda r, _: r.unpack("h"),
    INT4.oid: lambda r, _: r.unpack("i"),
    INT8.oid: lambda r, _: r.unpack("q"),
    OID.oid: lambda r, _: r.unpack("I"),
    XID.oid: lambda r, _: r.unpack("I"),
    REGPROC.oid: lambda r, _: r.unpack("I"),
    REGCLASS.oid: lambda r, _: r.unpack("I"),
    REGTYPE.oid: lambda r, _: r.unpack("I"),
    FLOAT4.oid: lambda r, _: r.unpack("f"),
    FLOAT8.oid: lambda r, _: r.unpack("d"),
    NUMERIC.oid: lambda r, _: _recv_numeric(r),
    TEXT.oid: lambda r, _: _recv_text(r),
    VARCHAR.oid: lambda r, _: _recv_text(r),
    BPCHAR.oid: lambda r, _: _recv_text(r),
    UNKNOWN.oid: lambda r, _: _recv_text(r),
    CSTRING.oid: lambda r, _: _recv_text(r),
    NAME.oid: lambda r, _: _recv_name(r),
    CHAR.oid: lambda r, _: r.rest()[:1].decode("latin-1"),
    BYTEA.oid: lambda r, _: r.rest(),
    DATE.oid: lambda r, _: _recv_date(r),
    TIME.oid: lambda r, _: _time_from_us(_recv_time_us(r)),
    TIMETZ.oid: lambda r, _: _recv_timetz(r),
    TIMESTAMP.oid: lambda r, _: _recv_timestamp(r, False),
    TIMESTAMPTZ.oid: lambda r, _: _recv_timestamp(r, True),
    INTERVAL.oid: lambda r, _: _recv_interval(r),
    UUID.oid: lambda r, _: uuid.UUID(bytes=r.take(16)),
    JSON.oid: lambda r, _: _parse_json(_recv_text(r), False),
    JSONB.oid: lambda r, _: _recv_jsonb(r),
}


def _decode_binary(raw: bytes, oid: int, settings: TextSettings) -> Any:
    r = _Reader(raw)
    decoder = _BINARY_DECODERS.get(oid)
    if decoder is not None:
        value = decoder(r, settings)
    else:
        t = _TYPES_BY_OID.get(oid)
        if oid == 0:
            raise _fail(
                INDETERMINATE_DATATYPE,
                "could not determine data type of a binary parameter sent as unspecified (OID 0)",
            )
        if (
            t is None
            or not t.element_oid
            or t.oid == NAME.oid
            or t.element_oid not in _BINARY_DECODERS
        ):
            raise _fail(
                FEATURE_NOT_SUPPORTED,
                f"binary format for parameters of type OID {oid} is not supported",
            )
        value = _recv_array(r, t.element_oid, settings)
    # exec_bind_message: a receive function that leaves bytes unread is an error.
    if r.remaining:
        raise _fail(INVALID_BINARY_REPRESENTATION, "incorrect binary data format in bind parameter")
    return value
