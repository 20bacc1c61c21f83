"""Single values in PostgreSQL's binary format (its *send functions)."""

from __future__ import annotations

import struct
import uuid
from collections.abc import Sequence
from decimal import Decimal
from typing import Any

from icegres.pg.clock import _US_1970_TO_2000, TextSettings
from icegres.pg.errors import ARRAY_SUBSCRIPT_ERROR, PgError
from icegres.pg.text_out import _datetime_utc_us, _interval_parts, _naive_us, _text_value, _time_us
from icegres.pg.types import (
    BOOL,
    BYTEA,
    DATE,
    FLOAT4,
    FLOAT8,
    INT2,
    INT2VECTOR,
    INT4,
    INT8,
    INTERVAL,
    JSONB,
    NUMERIC,
    OID,
    OIDVECTOR,
    REGCLASS,
    REGPROC,
    REGTYPE,
    TIME,
    TIMESTAMP,
    TIMESTAMPTZ,
    TIMETZ,
    UUID,
    XID,
    PgType,
    _element_type,
    _is_array,
)

# --------------------------------------------------------------------------------------------------
# Scalar binary renderers (PostgreSQL's *send functions)

_NUMERIC_POS, _NUMERIC_NEG, _NUMERIC_NAN, _NUMERIC_PINF, _NUMERIC_NINF = (
    0x0000,
    0x4000,
    0xC000,
    0xD000,
    0xF000,
)


def _numeric_send(v: Any) -> bytes:
    """numeric_send: ndigits, weight, sign, dscale, then base-10000 digits, all int16 big-endian."""
    d = v if isinstance(v, Decimal) else Decimal(v) if isinstance(v, int) else Decimal(repr(v))
    if d.is_nan():
        return struct.pack(">hhHH", 0, 0, _NUMERIC_NAN, 0)
    if d.is_infinite():
        return struct.pack(">hhHH", 0, 0, _NUMERIC_NINF if d < 0 else _NUMERIC_PINF, 0)
    sign_bit, digit_tuple, exp = d.as_tuple()
    assert isinstance(exp, int)
    dscale = max(0, -exp)
    digits = "".join(map(str, digit_tuple)).lstrip("0")
    if not digits:
        return struct.pack(">hhHH", 0, 0, _NUMERIC_POS, dscale)
    if exp > 0:
        digits += "0" * exp
        exp = 0
    # Align the point to a base-10000 digit boundary on both sides (strings: no int size limits).
    digits += "0" * (exp % 4)  # pad the fraction (-exp digits) to a multiple of four
    frac_groups = (-exp + 3) // 4
    digits = "0" * (-len(digits) % 4) + digits
    groups = [int(digits[i : i + 4]) for i in range(0, len(digits), 4)]
    weight = len(groups) - frac_groups - 1
    while groups[0] == 0:
        groups.pop(0)  # leading zero digits (0.0001 has weight -1 and one digit)
        weight -= 1
    while groups[-1] == 0:
        groups.pop()  # PostgreSQL strips trailing zero digits; dscale keeps the printed scale
    sign = _NUMERIC_NEG if sign_bit else _NUMERIC_POS
    return struct.pack(f">hhHH{len(groups)}h", len(groups), weight, sign, dscale, *groups)


def _interval_send(months: int, days: int, us: int) -> bytes:
    return struct.pack(">qii", us, days, months)


def _array_dims(v: Sequence[Any], depth: int) -> list[int]:
    dims = [len(v)]
    if depth > 1 and v:
        sub = [_array_dims(x, depth - 1) if isinstance(x, (list, tuple)) else [] for x in v]
        if any(not isinstance(x, (list, tuple)) for x in v) or any(s != sub[0] for s in sub):
            raise PgError(
                ARRAY_SUBSCRIPT_ERROR,
                "multidimensional arrays must have array expressions with matching dimensions",
            )
        dims += sub[0]
    return dims


def _flatten(v: Sequence[Any], depth: int) -> list[Any]:
    if depth == 1:
        return list(v)
    return [y for x in v for y in _flatten(x, depth - 1)]


def _array_send(v: Sequence[Any], depth: int, elem: PgType, settings: TextSettings) -> bytes:
    """array_send: ndim, has-nulls flag, element OID, (dim, lower bound 1) per dimension, elements."""
    dims = _array_dims(v, depth)
    if 0 in dims:
        return struct.pack(">iiI", 0, 0, elem.oid)  # any empty array is zero-dimensional in PG
    items = _flatten(v, len(dims))
    out = [b""]
    has_null = False
    for x in items:
        if x is None:
            has_null = True
            out.append(b"\xff\xff\xff\xff")
        else:
            b = _binary_value(x, elem, settings)
            out.append(struct.pack(">i", len(b)) + b)
    out[0] = struct.pack(">iiI", len(dims), int(has_null), elem.oid) + b"".join(
        struct.pack(">ii", d, 1) for d in dims
    )
    return b"".join(out)


def _binary_value(v: Any, t: PgType, settings: TextSettings, depth: int = 1) -> bytes:
    """Render one non-NULL Python value in PostgreSQL's binary format for type `t`."""
    oid = t.oid
    if _is_array(t) or oid in (INT2VECTOR.oid, OIDVECTOR.oid):  # the vectors send as arrays
        return _array_send(v, depth, _element_type(t), settings)
    if oid == BOOL.oid:
        return b"\x01" if v else b"\x00"
    if oid == INT2.oid:
        return struct.pack(">h", v)
    if oid == INT4.oid:
        return struct.pack(">i", v)
    if oid == INT8.oid:
        return struct.pack(">q", v)
    if oid in (OID.oid, XID.oid, REGPROC.oid, REGCLASS.oid, REGTYPE.oid):
        return struct.pack(">I", v)
    if oid == FLOAT4.oid:
        return struct.pack(">f", v)
    if oid == FLOAT8.oid:
        return struct.pack(">d", v)
    if oid == NUMERIC.oid:
        return _numeric_send(v)
    if oid == BYTEA.oid:
        return bytes(v)
    if oid == DATE.oid:
        return struct.pack(">i", v.toordinal() - 730_120)  # date(2000, 1, 1).toordinal()
    if oid == TIME.oid:
        return struct.pack(">q", _time_us(v))
    if oid == TIMETZ.oid:
        off = v.utcoffset()
        # timetz_send's zone is seconds WEST of UTC: the opposite sign of utcoffset().
        return struct.pack(">qi", _time_us(v), -int(off.total_seconds()) if off is not None else 0)
    if oid == TIMESTAMP.oid:
        return struct.pack(">q", _naive_us(v.replace(tzinfo=None)) - _US_1970_TO_2000)
    if oid == TIMESTAMPTZ.oid:
        return struct.pack(">q", _datetime_utc_us(v) - _US_1970_TO_2000)
    if oid == INTERVAL.oid:
        return _interval_send(*_interval_parts(v))
    if oid == UUID.oid:
        return v.bytes if isinstance(v, uuid.UUID) else bytes(v)
    if oid == JSONB.oid:
        return b"\x01" + _text_value(v, t, settings).encode()  # jsonb_send: version 1, then text
    return _text_value(v, t, settings).encode()  # text, varchar, name, json: the text bytes
