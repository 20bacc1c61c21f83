"""Single values in PostgreSQL's text format, byte for byte as a PostgreSQL 15 backend renders
them (its *out functions): DateStyle ISO, IntervalStyle postgres, bytea_output hex, the session
TimeZone and extra_float_digits."""

from __future__ import annotations

import json
import math
import re
import uuid
from collections.abc import Sequence
from datetime import UTC, date, datetime, time, timedelta
from decimal import Decimal
from fractions import Fraction
from typing import Any

import numpy as np
import pyarrow as pa
from dateutil.relativedelta import relativedelta

from icegres.pg.clock import (
    _US_PER_DAY,
    _US_PER_S,
    _WIDE_CONTEXT,
    TextSettings,
    _civil_from_days,
    _Zone,
    _zone,
)
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
    JSON,
    JSONB,
    NUMERIC,
    OID,
    OIDVECTOR,
    REGPROC,
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
# Scalar text renderers (PostgreSQL's *out functions)


def _date_text(days: int) -> str:
    if days == 2**31 - 1:
        return "infinity"  # DATEVAL_NOEND
    if days == -(2**31):
        return "-infinity"
    y, m, d = _civil_from_days(days)
    # ISO DateStyle: years before 1 AD print as positive years with a trailing " BC".
    return f"{y:04d}-{m:02d}-{d:02d}" if y > 0 else f"{1 - y:04d}-{m:02d}-{d:02d} BC"


def _time_of_day_text(us: int) -> str:
    s, frac = divmod(us, _US_PER_S)
    h, rem = divmod(s, 3600)
    text = f"{h:02d}:{rem // 60:02d}:{rem % 60:02d}"
    return text + f".{frac:06d}".rstrip("0") if frac else text


def _offset_text(offset_s: int) -> str:
    sign = "+" if offset_s >= 0 else "-"
    h, rem = divmod(abs(offset_s), 3600)
    m, s = divmod(rem, 60)
    if s:
        return f"{sign}{h:02d}:{m:02d}:{s:02d}"
    return f"{sign}{h:02d}:{m:02d}" if m else f"{sign}{h:02d}"


def _timestamp_text(local_us: int, offset_s: int | None) -> str:
    """A timestamp given in local wall-clock µs since 1970; with the offset suffix for timestamptz."""
    if local_us == 2**63 - 1:
        return "infinity"  # DT_NOEND
    if local_us == -(2**63):
        return "-infinity"
    days, tod = divmod(local_us, _US_PER_DAY)
    y, m, d = _civil_from_days(days)
    text = f"{y if y > 0 else 1 - y:04d}-{m:02d}-{d:02d} {_time_of_day_text(tod)}"
    if offset_s is not None:
        text += _offset_text(offset_s)
    return text if y > 0 else text + " BC"  # " BC" goes after the zone, as PostgreSQL does


def _timestamptz_text(utc_us: int, zone: _Zone) -> str:
    if utc_us in (2**63 - 1, -(2**63)):
        return _timestamp_text(utc_us, None)
    off = zone.offset_at(utc_us)
    return _timestamp_text(utc_us + off * _US_PER_S, off)


def _float_text(v: float, float4: bool, extra_float_digits: int) -> str:
    """float4out/float8out."""
    if math.isnan(v):
        return "NaN"
    if math.isinf(v):
        return "Infinity" if v > 0 else "-Infinity"
    if not float4 and extra_float_digits > 0 and (v == 0 or 1e-4 <= abs(v) < 1e15):
        # Where float8out prints fixed notation, its shortest digits are repr's (both round-trip
        # exactly; below 2**53 no tie decides between candidates): only repr's ".0" differs.
        text = repr(v)
        return text[:-2] if text.endswith(".0") else text
    if extra_float_digits <= 0:
        # PostgreSQL's pre-12 style: printf %g with FLT_DIG/DBL_DIG + extra_float_digits digits.
        return f"{v:.{max(1, (6 if float4 else 15) + extra_float_digits)}g}"
    neg, digits, exp = _shortest_digits(v, float4)
    # Ryu's shortest digits, laid out like %g: fixed notation when -4 <= exponent < 6 (float4) or
    # 15 (float8) — the precision %g would use — scientific otherwise, with at least two exponent digits.
    sign = "-" if neg else ""
    if -4 <= exp < (6 if float4 else 15):
        if exp < 0:
            return f"{sign}0.{'0' * (-exp - 1)}{digits}"
        if len(digits) <= exp + 1:
            return sign + digits + "0" * (exp + 1 - len(digits))
        return f"{sign}{digits[: exp + 1]}.{digits[exp + 1 :]}"
    mantissa = digits[0] + ("." + digits[1:] if len(digits) > 1 else "")
    return f"{sign}{mantissa}e{'-' if exp < 0 else '+'}{abs(exp):02d}"


# Below these magnitudes no midpoint between adjacent floats has few enough significant digits to
# be a shortest candidate (a midpoint needs ~0.7 extra decimal digits per fractional bit).
_MIDPOINT_CANDIDATES_MIN = {False: 2.0**53, True: 2.0**22}


def _shortest_digits(v: float, float4: bool) -> tuple[bool, str, int]:
    """(negative, significant digits without trailing zeros, decimal exponent) of the shortest
    decimal that reads back as v — strictly: PostgreSQL's Ryu never relies on ties-to-even, so a
    candidate exactly halfway to a neighbouring float is not accepted (33556648 as float4 prints
    3.3556648e+07, not 3.355665e+07)."""
    ftype = np.float32 if float4 else np.float64
    s = np.format_float_scientific(ftype(v), unique=True, trim="0")
    neg, digits, exp = _split_scientific(s)
    if abs(v) < _MIDPOINT_CANDIDATES_MIN[float4] or not math.isfinite(v):
        return neg, digits, exp
    magnitude = Fraction(abs(v))
    with np.errstate(over="ignore"):
        below = Fraction(float(np.nextafter(ftype(abs(v)), ftype(0))))
        above_f = float(np.nextafter(ftype(abs(v)), ftype(np.inf)))
    # Past the largest finite float, Ryu's upper neighbour is one more ulp, not infinity.
    above = Fraction(above_f) if math.isfinite(above_f) else 2 * magnitude - below
    sign = -1 if neg else 1
    low, high = sorted(((magnitude + below) / 2 * sign, (magnitude + above) / 2 * sign))
    n = len(digits)
    while Fraction(f"{'-' if neg else ''}{digits[0]}.{digits[1:] or '0'}e{exp}") in (low, high):
        n += 1  # the correctly rounded n-digit decimal is the closest candidate of that length
        neg, digits, exp = _split_scientific(f"{v:.{n - 1}e}")
    return neg, digits, exp


def _split_scientific(s: str) -> tuple[bool, str, int]:
    neg = s.startswith("-")
    mant, _, exp = s.lstrip("-").partition("e")
    digits = mant.replace(".", "").rstrip("0") or "0"
    return neg, digits, int(exp)


def _numeric_text(v: Any) -> str:
    """numeric_out: plain notation, the value's scale kept (1.50 stays 1.50)."""
    if isinstance(v, int):
        return str(v)
    d = v if isinstance(v, Decimal) else Decimal(repr(v))
    if d.is_nan():
        return "NaN"
    if d.is_infinite():
        return "Infinity" if d > 0 else "-Infinity"
    if d.as_tuple().exponent > 0:  # type: ignore[operator]
        d = d.quantize(Decimal(1), context=_WIDE_CONTEXT)  # dscale is never negative in PG
    text = format(d, "f")
    return text[1:] if text.startswith("-") and d == 0 else text  # numeric has no negative zero


def _interval_text(months: int, days: int, us: int) -> str:
    """interval_out with IntervalStyle=postgres (EncodeInterval, INTSTYLE_POSTGRES)."""
    parts: list[str] = []
    prev_negative = False  # PG marks a positive field with '+' only right after a negative one

    def add(value: int, unit: str) -> None:
        nonlocal prev_negative
        if value == 0:
            return
        plus = "+" if prev_negative and value > 0 else ""
        parts.append(f"{plus}{value} {unit}{'s' if value != 1 else ''}")
        prev_negative = value < 0

    years = int(months / 12)  # C division truncates toward zero; so does the remainder's sign
    add(years, "year")
    add(months - years * 12, "mon")
    add(days, "day")
    if not parts or us != 0:
        neg = us < 0
        a = abs(us)
        h, rem = divmod(a // _US_PER_S, 3600)
        frac = a % _US_PER_S
        sign = "-" if neg else ("+" if prev_negative else "")
        text = f"{sign}{h:02d}:{rem // 60:02d}:{rem % 60:02d}"
        parts.append(text + f".{frac:06d}".rstrip("0") if frac else text)
    return " ".join(parts)


def _trunc_div(a: int, b: int) -> int:
    q = abs(a) // b
    return q if a >= 0 else -q


def _interval_parts(v: Any) -> tuple[int, int, int]:
    """(months, days, µs) of an interval-like Python value.

    A timedelta (Arrow duration) is an exact length of time, so it becomes µs only, as PostgreSQL's
    make_interval(secs => ...) would: 90000 s renders as 25:00:00, not 1 day 01:00:00.
    """
    if isinstance(v, timedelta):
        return 0, 0, (v.days * 86_400 + v.seconds) * _US_PER_S + v.microseconds
    if isinstance(v, relativedelta):
        us = ((v.hours * 60 + v.minutes) * 60 + v.seconds) * _US_PER_S + v.microseconds
        return v.years * 12 + v.months, v.days, us
    if isinstance(v, pa.MonthDayNano) or (isinstance(v, tuple) and len(v) == 3):
        months, days, nanos = v
        return months, days, _trunc_div(nanos, 1000)
    raise TypeError(f"not an interval: {v!r}")


def _bytea_text(v: bytes) -> str:
    return "\\x" + bytes(v).hex()


def _uuid_text(v: Any) -> str:
    return str(v if isinstance(v, uuid.UUID) else uuid.UUID(bytes=bytes(v)))


_ARRAY_SPECIAL = re.compile(r'[{}",\\ \t\n\r\v\f]')


def _array_element_text(s: str) -> str:
    # array_out quotes an element that is empty, spells NULL, or holds a brace, quote, comma,
    # backslash or whitespace; inside quotes only " and \ are escaped.
    if s == "" or s.upper() == "NULL" or _ARRAY_SPECIAL.search(s):
        return '"' + s.replace("\\", "\\\\").replace('"', '\\"') + '"'
    return s


def _array_text(v: Sequence[Any], elem: PgType, settings: TextSettings) -> str:
    items = []
    for x in v:
        if x is None:
            items.append("NULL")
        elif isinstance(x, (list, tuple)) and not isinstance(x, pa.MonthDayNano):
            items.append(_array_text(x, elem, settings))  # a sub-array of a multidimensional array
        else:
            items.append(_array_element_text(_text_value(x, elem, settings)))
    return "{" + ",".join(items) + "}"


def _json_text(v: Any) -> str:
    """Compact JSON like PostgreSQL's to_json: numbers bare, temporal values as ISO 8601 strings."""
    if v is None:
        return "null"
    if isinstance(v, bool):
        return "true" if v else "false"
    if isinstance(v, int):
        return str(v)
    if isinstance(v, float):
        text = _float_text(v, False, 1)
        return text if math.isfinite(v) else json.dumps(text)
    if isinstance(v, Decimal):
        return _numeric_text(v) if v.is_finite() else json.dumps(_numeric_text(v))
    if isinstance(v, str):
        return json.dumps(v, ensure_ascii=False)
    if isinstance(v, dict):
        return (
            "{"
            + ",".join(
                f"{json.dumps(str(k), ensure_ascii=False)}:{_json_text(x)}" for k, x in v.items()
            )
            + "}"
        )
    if isinstance(v, list) and v and all(isinstance(x, tuple) and len(x) == 2 for x in v):
        return _json_text({k: x for k, x in v})  # a map's as_py(): key/value pairs
    if isinstance(v, (list, tuple)):
        return "[" + ",".join(_json_text(x) for x in v) + "]"
    if isinstance(v, datetime):
        return json.dumps(v.isoformat())
    if isinstance(v, (date, time)):
        return json.dumps(v.isoformat())
    if isinstance(v, (bytes, bytearray, memoryview)):
        return json.dumps(_bytea_text(bytes(v)))
    if isinstance(v, uuid.UUID):
        return json.dumps(str(v))
    if isinstance(v, (timedelta, relativedelta, pa.MonthDayNano)):
        return json.dumps(_interval_text(*_interval_parts(v)))
    return json.dumps(str(v), ensure_ascii=False)


def _datetime_utc_us(v: datetime) -> int:
    if v.tzinfo is None or v.utcoffset() is None:
        return _naive_us(v)
    return _naive_us(v.astimezone(UTC).replace(tzinfo=None))


def _naive_us(v: datetime) -> int:
    days = v.toordinal() - 719_163  # date(1970, 1, 1).toordinal()
    return ((days * 86_400 + v.hour * 3600 + v.minute * 60 + v.second) * _US_PER_S) + v.microsecond


def _time_us(v: time) -> int:
    return ((v.hour * 60 + v.minute) * 60 + v.second) * _US_PER_S + v.microsecond


def _text_value(v: Any, t: PgType, settings: TextSettings) -> str:
    """Render one non-NULL Python value as PostgreSQL type `t` would print it."""
    oid = t.oid
    if _is_array(t):
        return _array_text(v, _element_type(t), settings)
    if oid in (INT2VECTOR.oid, OIDVECTOR.oid):
        return " ".join(str(int(x)) for x in v)  # int2vectorout: space-separated, no braces
    if oid == BOOL.oid:
        return "t" if v else "f"
    if oid in (INT2.oid, INT4.oid, INT8.oid, OID.oid, XID.oid, REGPROC.oid):
        return str(int(v))
    if oid in (FLOAT4.oid, FLOAT8.oid):
        return _float_text(float(v), oid == FLOAT4.oid, settings.extra_float_digits)
    if oid == NUMERIC.oid:
        return _numeric_text(v)
    if oid == BYTEA.oid:
        return _bytea_text(
            bytes(v) if isinstance(v, (bytes, bytearray, memoryview)) else str(v).encode()
        )
    if oid == DATE.oid:
        return _date_text(v.toordinal() - 719_163) if isinstance(v, date) else str(v)
    if oid == TIME.oid:
        return _time_of_day_text(_time_us(v)) if isinstance(v, time) else str(v)
    if oid == TIMETZ.oid:
        off = v.utcoffset() if isinstance(v, time) else None
        offset_s = int(off.total_seconds()) if off is not None else 0
        return _time_of_day_text(_time_us(v)) + _offset_text(offset_s)
    if oid == TIMESTAMP.oid:
        if isinstance(v, datetime) and v.tzinfo is not None:
            v = v.replace(tzinfo=None)  # a timestamp column keeps the wall-clock fields as stored
        return _timestamp_text(_naive_us(v), None)
    if oid == TIMESTAMPTZ.oid:
        return _timestamptz_text(_datetime_utc_us(v), _zone(settings.timezone))
    if oid == INTERVAL.oid:
        return _interval_text(*_interval_parts(v))
    if oid == UUID.oid:
        return _uuid_text(v)
    if oid in (JSON.oid, JSONB.oid):
        return v if isinstance(v, str) else _json_text(v)
    if isinstance(v, (bytes, bytearray, memoryview)):
        return bytes(v).decode("utf-8", "replace")
    return str(v)


def encode_text_value(value: object, pgtype: PgType, settings: TextSettings) -> bytes | None:
    """The text-format bytes PostgreSQL sends for `value` as `pgtype`; None for NULL.

    `value` is a Python object as pyarrow's as_py() returns it (also timedelta, relativedelta,
    uuid.UUID). Used for per-value fallbacks and for answers icegres makes up (SHOW, catalogs).
    """
    if value is None:
        return None
    return _text_value(value, pgtype, settings).encode("utf-8")
