"""PostgreSQL's text input functions for Bind parameters and COPY fields: each raises only
`PgError`, with the SQLSTATE PostgreSQL uses for the same text."""

from __future__ import annotations

import functools
import json
import math
import re
import uuid
import zoneinfo
from collections.abc import Callable
from dataclasses import dataclass
from datetime import UTC, date, datetime, time, timedelta, timezone, tzinfo
from decimal import Decimal, InvalidOperation
from typing import Any

import numpy as np
from dateutil.relativedelta import relativedelta

from icegres.pg import encoding
from icegres.pg.clock import (
    _EPOCH_NAIVE,
    _PY_MAX_US,
    _PY_MIN_US,
    _TZDISP_LIMIT_S,
    _US_PER_DAY,
    _US_PER_S,
    _UTC_NAMES,
    _WIDE_CONTEXT,
    TextSettings,
    _days_from_civil,
    _Zone,
    _zone,
)
from icegres.pg.errors import (
    DATETIME_FIELD_OVERFLOW,
    INTERVAL_FIELD_OVERFLOW,
    INVALID_DATETIME_FORMAT,
    INVALID_PARAMETER_VALUE,
    INVALID_TEXT_REPRESENTATION,
    INVALID_TIME_ZONE_DISPLACEMENT_VALUE,
    NUMERIC_VALUE_OUT_OF_RANGE,
    UNTRANSLATABLE_CHARACTER,
    PgError,
)
from icegres.pg.text_out import _naive_us
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
    INT2VECTOR,
    INT4,
    INT8,
    INTERVAL,
    JSON,
    JSONB,
    NAME,
    NUMERIC,
    OID,
    OIDVECTOR,
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
    PgType,
    _element_type,
    _is_array,
)

# --------------------------------------------------------------------------------------------------
# Bind parameters


@dataclass(frozen=True)
class _Unrepresentable:
    """A value PostgreSQL accepts but Python cannot hold (infinities, years outside 1..9999, time
    24:00:00). Decoders return it rather than raise so that PostgreSQL's own errors for the rest of
    the input (trailing bytes, a later array element) still win; decode_param then raises 22008."""

    message: str


def _check_representable(value: Any) -> None:
    if isinstance(value, _Unrepresentable):
        raise PgError(DATETIME_FIELD_OVERFLOW, value.message)
    if isinstance(value, list):
        for x in value:
            _check_representable(x)


def _fail(sqlstate: str, message: str) -> PgError:
    return PgError(sqlstate, message)


def _quote(s: str) -> str:
    return '"' + s + '"'


def _invalid(type_name: str, s: str, sqlstate: str = INVALID_TEXT_REPRESENTATION) -> PgError:
    return PgError(sqlstate, f"invalid input syntax for type {type_name}: {_quote(s)}")


_PG_SPACE = " \t\n\r\v\f"  # C isspace() in the C locale, which PostgreSQL's parsers use


def _utf8(raw: bytes) -> str:
    """pq_getmsgtext / input: client and server encodings are both UTF8, so only validate."""
    return encoding.utf8(raw)


# --- text format -------------------------------------------------------------------------------------

_BOOL_WORDS = {
    "t": True,
    "true": True,
    "y": True,
    "yes": True,
    "on": True,
    "1": True,
    "f": False,
    "false": False,
    "n": False,
    "no": False,
    "off": False,
    "0": False,
}


def parse_bool(s: str) -> bool:
    """PostgreSQL's boolean input (parse_bool_with_len): any unambiguous prefix of true/false/yes/no,
    'on'/'off' from two letters; 22P02 otherwise."""
    w = s.strip(_PG_SPACE).lower()
    if w in _BOOL_WORDS:
        return _BOOL_WORDS[w]
    for word, value in (("true", True), ("false", False), ("yes", True), ("no", False)):
        if w and word.startswith(w):
            return value
    if len(w) >= 2 and "off".startswith(w):
        return False
    raise _invalid("boolean", s)


_INT_RANGES = {INT2.oid: ("smallint", 16), INT4.oid: ("integer", 32), INT8.oid: ("bigint", 64)}
_INT_RE = re.compile(r"[ \t\n\r\v\f]*([+-]?)([0-9]*)(.*)", re.DOTALL)


def _parse_int(s: str, oid: int) -> int:
    """pg_strtoint16/32/64 (PostgreSQL 15: no underscores, no hex), with their error order:
    overflow while reading digits, then trailing garbage, then the one positive value too big."""
    name, bits = _INT_RANGES[oid]
    m = _INT_RE.fullmatch(s)
    assert m is not None
    sign, digits, rest = m.groups()
    if not digits:
        raise _invalid(name, s)
    magnitude = int(digits)
    limit = 1 << (bits - 1)
    out_of_range = _fail(
        NUMERIC_VALUE_OUT_OF_RANGE, f"value {_quote(s)} is out of range for type {name}"
    )
    if magnitude > limit:
        raise out_of_range
    if rest.strip(_PG_SPACE):
        raise _invalid(name, s)
    if sign != "-" and magnitude == limit:
        raise out_of_range
    return -magnitude if sign == "-" else magnitude


def _parse_oid(s: str) -> int:
    """oidin: strtoul (so '-1' wraps), accepted if it fits 32 bits signed or unsigned."""
    m = _INT_RE.fullmatch(s)
    assert m is not None
    sign, digits, rest = m.groups()
    if not digits:
        raise _invalid("oid", s)
    magnitude = int(digits)
    out_of_range = _fail(
        NUMERIC_VALUE_OUT_OF_RANGE, f"value {_quote(s)} is out of range for type oid"
    )
    if magnitude >= 1 << 64:
        raise out_of_range  # strtoul's ERANGE, reported before trailing garbage
    if rest.strip(_PG_SPACE):
        raise _invalid("oid", s)
    cvt = (-magnitude) % (1 << 64) if sign == "-" else magnitude
    result = cvt & 0xFFFFFFFF
    sign_extended = result | (0xFFFFFFFF00000000 if result & 0x80000000 else 0)
    if cvt not in (result, sign_extended):
        raise out_of_range
    return result


# The longest prefix strtod() consumes (glibc): nan(...), inf[inity], hex floats, decimals. An
# 'e' or 'p' without exponent digits, or '0x' without hex digits, is left unconsumed.
_STRTOD_PREFIX = re.compile(
    r"[+-]?(?:(?P<nan>nan(?:\([0-9a-z_]*\))?)|(?P<inf>inf(?:inity)?)"
    r"|(?P<hex>0x(?:[0-9a-f]+\.?[0-9a-f]*|\.[0-9a-f]+)(?:p[+-]?[0-9]+)?)"
    r"|(?P<dec>(?:[0-9]+\.?[0-9]*|\.[0-9]+)(?:e[+-]?[0-9]+)?))",
    re.IGNORECASE,
)


def _parse_float(s: str, oid: int) -> float:
    """float4in/float8in: strtod/strtof, then PostgreSQL's checks in its order — a result that
    overflowed or underflowed to zero (ERANGE) is 22003 even before trailing garbage is noticed."""
    name = "real" if oid == FLOAT4.oid else "double precision"
    w = s.lstrip(_PG_SPACE)
    m = _STRTOD_PREFIX.match(w)
    if not m:
        raise _invalid(name, s)
    number = m.group(0)
    negative = number.startswith("-")
    if m.group("nan"):
        v = math.nan
    elif m.group("inf"):
        v = -math.inf if negative else math.inf
    else:
        if m.group("hex"):
            try:
                v = float.fromhex(number)
            except OverflowError:
                v = -math.inf if negative else math.inf
            mantissa = re.split("[pP]", number)[0][number.lower().index("x") + 1 :]
        else:
            v = float(number)
            mantissa = re.split("[eE]", number)[0]
        if oid == FLOAT4.oid:
            v = _to_float32(v)
        if math.isinf(v) or (v == 0.0 and re.search("[1-9a-fA-F]", mantissa)):
            raise _fail(
                NUMERIC_VALUE_OUT_OF_RANGE, f"{_quote(number)} is out of range for type {name}"
            )
    if w[m.end() :].strip(_PG_SPACE):
        raise _invalid(name, s)
    return v


def _to_float32(v: float) -> float:
    with np.errstate(over="ignore", under="ignore"):
        return float(np.float32(v))


# numeric_in reads the exponent with strtol, which skips whitespace: '1e 5' is 100000.
_NUMERIC_RE = re.compile(r"([+-]?)([0-9]*)(?:\.([0-9]*))?(?:[eE][ \t\n\r\v\f]*([+-]?[0-9]+))?")
_NUMERIC_SPECIAL = {
    "nan": Decimal("NaN"),
    "infinity": Decimal("Infinity"),
    "+infinity": Decimal("Infinity"),
    "-infinity": Decimal("-Infinity"),
    "inf": Decimal("Infinity"),
    "+inf": Decimal("Infinity"),
    "-inf": Decimal("-Infinity"),
}
_NUMERIC_WEIGHT_MAX = 2**15 - 1  # base-10000 digits before the point, minus one, must fit int16
_NUMERIC_DSCALE_MAX = 0x3FFF


def _parse_numeric(s: str) -> Decimal:
    """numeric_in: the value with PostgreSQL's display scale (digits after the point)."""
    w = s.strip(_PG_SPACE)
    special = _NUMERIC_SPECIAL.get(w.lower())
    if special is not None:
        return special
    m = _NUMERIC_RE.fullmatch(w)
    if not m or not (m.group(2) or m.group(3)):
        raise _invalid("numeric", s)
    sign, int_digits, frac_digits, exp_text = m.group(1), m.group(2), m.group(3) or "", m.group(4)
    exponent = int(exp_text) if exp_text else 0
    if abs(exponent) >= (2**31 - 1) // 2:
        raise _fail(NUMERIC_VALUE_OUT_OF_RANGE, "value overflows numeric format")
    dscale = max(0, len(frac_digits) - exponent)
    digits = (int_digits + frac_digits).lstrip("0")
    if dscale > _NUMERIC_DSCALE_MAX:
        raise _fail(NUMERIC_VALUE_OUT_OF_RANGE, "value overflows numeric format")
    if not digits:
        return Decimal((0, (0,), -dscale))
    # Decimal exponent of the leading digit; base-10000 weight = floor(that / 4).
    lead_exp = (
        len(int_digits.lstrip("0")) - 1 + exponent
        if int_digits.lstrip("0")
        else -(len(frac_digits) - len(frac_digits.lstrip("0"))) - 1 + exponent
    )
    if lead_exp // 4 > _NUMERIC_WEIGHT_MAX:
        raise _fail(NUMERIC_VALUE_OUT_OF_RANGE, "value overflows numeric format")
    # Show exactly dscale decimals; dscale >= len(frac_digits) - exponent, so this only appends zeros.
    value = Decimal(f"{sign}{digits}E{exponent - len(frac_digits)}")
    return value.quantize(Decimal((0, (1,), -dscale)), context=_WIDE_CONTEXT)


def _hex_decode(s: str) -> bytes:
    """hex_decode: pairs of hex digits; blanks (only ' ', \\n, \\t, \\r) may separate pairs."""
    out = bytearray()
    i = 0
    hexdigits = "0123456789abcdefABCDEF"
    while i < len(s):
        if s[i] in " \n\t\r":
            i += 1
            continue
        if s[i] not in hexdigits:
            raise _fail(INVALID_PARAMETER_VALUE, f'invalid hexadecimal digit: "{s[i]}"')
        if i + 1 >= len(s):
            raise _fail(INVALID_PARAMETER_VALUE, "invalid hexadecimal data: odd number of digits")
        if s[i + 1] not in hexdigits:
            raise _fail(INVALID_PARAMETER_VALUE, f'invalid hexadecimal digit: "{s[i + 1]}"')
        out.append(int(s[i : i + 2], 16))
        i += 2
    return bytes(out)


def _parse_bytea(s: str) -> bytes:
    if s.startswith("\\x"):
        return _hex_decode(s[2:])
    out = bytearray()
    raw = s.encode("utf-8")
    i = 0
    while i < len(raw):
        c = raw[i]
        if c != 0x5C:  # backslash
            out.append(c)
            i += 1
        elif raw[i + 1 : i + 2] == b"\\":
            out.append(0x5C)
            i += 2
        elif re.fullmatch(rb"[0-3][0-7][0-7]", raw[i + 1 : i + 4]):
            out.append(int(raw[i + 1 : i + 4], 8))
            i += 4
        else:
            # PostgreSQL's byteain names no value here (and the value may be megabytes)
            raise PgError(INVALID_TEXT_REPRESENTATION, "invalid input syntax for type bytea")
    return bytes(out)


_DATE_RE = re.compile(r"(\d{4,})-(\d{1,2})-(\d{1,2})")
_TIME_RE = re.compile(r"(\d{1,2}):(\d{2})(?::(\d{2})(?:\.(\d*))?)?")
_OFFSET_RE = re.compile(r"(?:z|([+-])(\d{1,2})(?::?(\d{2}))?(?::?(\d{2}))?)")
_TIMESTAMP_RE = re.compile(
    r"(?P<date>\d{4,}-\d{1,2}-\d{1,2})"
    r"(?:(?:[ \t]+|t)(?P<time>\d{1,2}:\d{2}(?::\d{2}(?:\.\d*)?)?))?"
    r"[ \t]*(?P<zone>z|[+-]\d{1,2}(?::?\d{2}(?::?\d{2})?)?|[a-z][a-z0-9_/+-]*)?"
    r"(?:[ \t]+(?P<era>bc|ad))?"
)


def _civil_days(y: int, m: int, d: int, s: str, type_name: str) -> int:
    if not 1 <= m <= 12 or not 1 <= d <= _days_in_month(y, m) or y == 0:
        raise _fail(DATETIME_FIELD_OVERFLOW, f"date/time field value out of range: {_quote(s)}")
    return _days_from_civil(y, m, d)


def _days_in_month(y: int, m: int) -> int:
    if m == 2:
        return 29 if (y % 4 == 0 and y % 100 != 0) or y % 400 == 0 else 28
    return 30 if m in (4, 6, 9, 11) else 31


def _time_of_day_us(text: str, s: str) -> int:
    m = _TIME_RE.fullmatch(text)
    if not m:
        raise _invalid("time", s, INVALID_DATETIME_FORMAT)
    h, mi, sec = int(m.group(1)), int(m.group(2)), int(m.group(3) or 0)
    # ParseFractionalSecond: rint(frac * 1e6), round half to even like C's rint.
    frac_us = round(float("0." + m.group(4)) * 1e6) if m.group(4) else 0
    if mi > 59 or sec > 60 or h > 24 or (h == 24 and (mi or sec or frac_us)):
        raise _fail(DATETIME_FIELD_OVERFLOW, f"date/time field value out of range: {_quote(s)}")
    return ((h * 60 + mi) * 60 + sec) * _US_PER_S + frac_us


def _zone_offset_s(text: str, s: str, settings: TextSettings, local_us: int | None = None) -> int:
    """Offset (seconds east) of a zone suffix: 'Z', '+05', '-0330', '+05:30:15' or a zone name."""
    m = _OFFSET_RE.fullmatch(text)
    if m:
        if text == "z":
            return 0
        h, mi, sec = int(m.group(2)), int(m.group(3) or 0), int(m.group(4) or 0)
        if mi > 59 or sec > 59:
            raise _fail(DATETIME_FIELD_OVERFLOW, f"date/time field value out of range: {_quote(s)}")
        off = (h * 3600 + mi * 60 + sec) * (-1 if m.group(1) == "-" else 1)
        if abs(off) >= _TZDISP_LIMIT_S:
            raise _fail(
                INVALID_TIME_ZONE_DISPLACEMENT_VALUE,
                f"time zone displacement out of range: {_quote(s)}",
            )
        return off
    try:
        zone = _zone(text) if text.upper() in _UTC_NAMES else _zone(_zone_key(text))
    except LookupError:
        raise _fail(INVALID_PARAMETER_VALUE, f'time zone "{text}" not recognized') from None
    return _local_to_offset(zone, local_us if local_us is not None else 0)


@functools.lru_cache(maxsize=256)
def _zone_key(name: str) -> str:
    """The tz database's spelling of a case-insensitive zone name (PostgreSQL matches names so)."""
    candidates = {k.lower(): k for k in zoneinfo.available_timezones()}
    key = candidates.get(name.lower())
    if key is None:
        raise LookupError(name)
    return key


def _local_to_offset(zone: _Zone, local_us: int) -> int:
    """The offset in force at a local wall-clock time (PG picks the standard-time reading for
    ambiguous or skipped times; we take the offset valid `offset` seconds after, which agrees)."""
    off = zone.offset_at(local_us)
    return zone.offset_at(local_us - off * _US_PER_S)


# PostgreSQL's special date/time input words relative to the present (besides 'epoch').
_RELATIVE_DAYS = {"today": 0, "tomorrow": 1, "yesterday": -1}


def _local_now_us(settings: TextSettings, word: str) -> int:
    """'now', 'today', 'tomorrow' or 'yesterday' as the session's wall clock: microseconds since
    1970-01-01 00:00 in its TimeZone (the days at midnight)."""
    utc_us = _naive_us(datetime.now(UTC).replace(tzinfo=None))
    local = utc_us + _zone(settings.timezone).offset_at(utc_us) * _US_PER_S
    if word == "now":
        return local
    return (local // _US_PER_DAY + _RELATIVE_DAYS[word]) * _US_PER_DAY


def _parse_timestamp(s: str, with_tz: bool, settings: TextSettings) -> datetime | _Unrepresentable:
    type_name = "timestamp with time zone" if with_tz else "timestamp without time zone"
    w = s.strip(_PG_SPACE).lower()
    if w == "epoch":
        return datetime(1970, 1, 1, tzinfo=UTC) if with_tz else datetime(1970, 1, 1)
    if w in ("infinity", "+infinity", "-infinity"):
        return _Unrepresentable(
            f"infinite timestamps are not supported in icegres parameters: {_quote(s)}"
        )
    if w == "now" and with_tz:
        return datetime.now(UTC)
    if w == "now" or w in _RELATIVE_DAYS:
        local = _local_now_us(settings, w)
        if not with_tz:
            return _datetime_from_us(local, None, s)
        return _datetime_from_us(local - _local_to_offset(_zone(settings.timezone), local) * _US_PER_S, UTC, s)
    m = _TIMESTAMP_RE.fullmatch(w)
    if not m:
        raise _invalid(type_name, s, INVALID_DATETIME_FORMAT)
    dm = _DATE_RE.fullmatch(m.group("date"))
    assert dm is not None
    y, mo, d = int(dm.group(1)), int(dm.group(2)), int(dm.group(3))
    if m.group("era") == "bc":
        y = 1 - y
    days = _civil_days(y, mo, d, s, type_name)
    local = days * _US_PER_DAY + (_time_of_day_us(m.group("time"), s) if m.group("time") else 0)
    zone_text = m.group("zone")
    if not with_tz:
        return _datetime_from_us(local, None, s)
    if zone_text:
        off = _zone_offset_s(zone_text, s, settings, local)
    else:
        off = _local_to_offset(_zone(settings.timezone), local)
    return _datetime_from_us(local - off * _US_PER_S, UTC, s)


def _datetime_from_us(us: int, tz: tzinfo | None, s: str) -> datetime | _Unrepresentable:
    if not _PY_MIN_US - _US_PER_DAY <= us < _PY_MAX_US + 2 * _US_PER_DAY:
        return _Unrepresentable(
            f"timestamps outside years 1..9999 are not supported in icegres parameters: {_quote(s)}"
        )
    return (_EPOCH_NAIVE + timedelta(microseconds=us)).replace(tzinfo=tz)


def _parse_date(s: str, settings: TextSettings) -> date | _Unrepresentable:
    w = s.strip(_PG_SPACE).lower()
    if w == "epoch":
        return date(1970, 1, 1)
    if w == "now" or w in _RELATIVE_DAYS:
        return date.fromordinal(_local_now_us(settings, w) // _US_PER_DAY + 719_163)
    if w in ("infinity", "+infinity", "-infinity"):
        return _Unrepresentable(
            f"infinite dates are not supported in icegres parameters: {_quote(s)}"
        )
    m = _TIMESTAMP_RE.fullmatch(w)  # a date may carry a time (and zone), which date_in ignores
    if not m:
        raise _invalid("date", s, INVALID_DATETIME_FORMAT)
    if m.group("time"):
        _time_of_day_us(m.group("time"), s)
    if m.group("zone"):
        _zone_offset_s(m.group("zone"), s, settings)
    dm = _DATE_RE.fullmatch(m.group("date"))
    assert dm is not None
    y = int(dm.group(1))
    if m.group("era") == "bc":
        y = 1 - y
    days = _civil_days(y, int(dm.group(2)), int(dm.group(3)), s, "date")
    if not 1 <= y <= 9999:
        return _Unrepresentable(
            f"dates outside years 1..9999 are not supported in icegres parameters: {_quote(s)}"
        )
    return date.fromordinal(days + 719_163)


_TIME_INPUT_RE = re.compile(
    r"(?:\d{4,}-\d{1,2}-\d{1,2}(?:[ \t]+|t))?(?P<time>\d{1,2}:\d{2}(?::\d{2}(?:\.\d*)?)?)"
    r"[ \t]*(?P<zone>z|[+-]\d{1,2}(?::?\d{2}(?::?\d{2})?)?)?"
)


def _parse_time(s: str, with_tz: bool, settings: TextSettings) -> time | _Unrepresentable:
    w = s.strip(_PG_SPACE).lower()
    if w == "allballs":
        return time(0, tzinfo=UTC) if with_tz else time(0)
    m = _TIME_INPUT_RE.fullmatch(w)
    if not m:
        raise _invalid(
            "time with time zone" if with_tz else "time without time zone",
            s,
            INVALID_DATETIME_FORMAT,
        )
    us = _time_of_day_us(m.group("time"), s)
    if not with_tz:
        if m.group("zone") and _OFFSET_RE.fullmatch(m.group("zone")):
            _zone_offset_s(m.group("zone"), s, settings)  # ignored, but PostgreSQL still range-checks it
        return _time_from_us(us)
    if m.group("zone"):
        off = _zone_offset_s(m.group("zone"), s, settings)
    else:  # like PostgreSQL: the session zone's offset as of today
        off = _zone(settings.timezone).offset_at(_naive_us(datetime.now(UTC).replace(tzinfo=None)))
    return _time_from_us(us, timezone(timedelta(seconds=off)))


# Interval units (PostgreSQL's deltatktbl; tokens are looked up by their first 10 characters).
_UNIT_US = {"us": 1, "ms": 1000, "s": _US_PER_S, "m": 60 * _US_PER_S, "h": 3600 * _US_PER_S}
_INTERVAL_UNITS = {
    **dict.fromkeys(("microsecon", "us", "usec", "usecs", "usecond", "useconds"), "us"),
    **dict.fromkeys(("millisecon", "ms", "msec", "msecs", "msecond", "mseconds"), "ms"),
    **dict.fromkeys(("s", "sec", "secs", "second", "seconds"), "s"),
    **dict.fromkeys(("m", "min", "mins", "minute", "minutes"), "m"),
    **dict.fromkeys(("h", "hr", "hrs", "hour", "hours"), "h"),
    **dict.fromkeys(("d", "day", "days"), "day"),
    **dict.fromkeys(("w", "week", "weeks"), "week"),
    **dict.fromkeys(("mon", "mons", "month", "months"), "month"),
    **dict.fromkeys(("y", "yr", "yrs", "year", "years"), "year"),
    **dict.fromkeys(("dec", "decs", "decade", "decades"), "decade"),
    **dict.fromkeys(("c", "cent", "century", "centuries"), "century"),
    **dict.fromkeys(("mil", "mils", "millennia", "millennium"), "millennium"),
}
_YEARS_PER_UNIT = {"year": 1, "decade": 10, "century": 100, "millennium": 1000}
_INTERVAL_TOKEN_RE = re.compile(
    r"(?P<time>[+-]?\d+:\d+(?::\d+(?:\.\d*)?)?)"
    # A unit may follow its number directly ('1day'), but not a bare trailing point ('0.d').
    r"|(?P<num>[+-]?(?:\d+(?:\.\d+|\.(?![a-z]))?|\.\d+))[ \t]*(?P<unit>[a-z]+)?"
    r"|(?P<word>@|ago)"
)


class _IntervalAcc:
    """Fields as DecodeInterval accumulates them; fractions spill into smaller units like PG's."""

    def __init__(self) -> None:
        self.months = 0
        self.days = 0
        self.us = 0

    def add_days(self, value: Decimal) -> None:
        whole = int(value)
        self.days += whole
        self.us += round((value - whole) * 86_400 * _US_PER_S)

    def add(self, value: Decimal, unit: str) -> None:
        if unit in _UNIT_US:
            self.us += round(value * _UNIT_US[unit])
        elif unit == "day":
            self.add_days(value)
        elif unit == "week":
            self.add_days(value * 7)
        elif unit == "month":
            months = value
            whole = int(months)
            self.months += whole
            self.add_days((months - whole) * 30)
        else:  # years and multiples: a fraction becomes whole months, rounded (rint)
            years = value * _YEARS_PER_UNIT[unit]
            whole = int(years)
            self.months += whole * 12 + round((years - whole) * 12)


def _parse_interval(s: str) -> timedelta | relativedelta:
    """interval_in for the common spellings: '1 day 02:03:04', '3 hours ago', '@ 1 mon', ISO 'P1DT2H'.

    Like DecodeInterval, each field may be given once ('1 day 1 day' is an error; a time token
    claims hours, minutes and seconds) and a bare number means seconds.
    """
    raw = s.strip(_PG_SPACE)
    w = raw.lower()
    acc = _IntervalAcc()
    if raw.startswith("P"):  # DecodeISO8601Interval: designators in upper case only
        _parse_iso_interval(raw, s, acc)
    else:
        negate = False
        pos = 0
        seen = False
        used: set[str] = set()

        def claim(fields: set[str]) -> None:
            if used & fields:
                raise _invalid("interval", s, INVALID_DATETIME_FORMAT)
            used.update(fields)

        while pos < len(w):
            if w[pos] in _PG_SPACE:
                pos += 1
                continue
            m = _INTERVAL_TOKEN_RE.match(w, pos)
            # Tokens are blank-separated: PostgreSQL reads '0-1' or '1+2' as other field types.
            if not m or (m.end() < len(w) and w[m.end()] not in _PG_SPACE):
                raise _invalid("interval", s, INVALID_DATETIME_FORMAT)
            pos = m.end()
            if m.group("word") == "@":
                if m.start() != 0:  # the "@ 1 hour" decoration, only where PG reliably allows it
                    raise _invalid("interval", s, INVALID_DATETIME_FORMAT)
                continue
            if m.group("word"):
                negate = True  # 'ago'
                continue
            seen = True
            if m.group("time"):
                claim({"h", "m", "s", "ms", "us"})
                sign = -1 if m.group("time").startswith("-") else 1
                parts = m.group("time").lstrip("+-").split(":")
                h, mi = int(parts[0]), int(parts[1])
                sec = Decimal(parts[2]) if len(parts) > 2 else Decimal(0)
                if mi > 59 or sec >= 60:
                    raise _fail(
                        INTERVAL_FIELD_OVERFLOW, f"interval field value out of range: {_quote(s)}"
                    )
                acc.us += sign * round((h * 3600 + mi * 60 + sec) * _US_PER_S)
                continue
            unit_word = (m.group("unit") or "s")[:10]
            unit = _INTERVAL_UNITS.get(unit_word)
            if unit is None:
                raise _invalid("interval", s, INVALID_DATETIME_FORMAT)
            claim({"s", "ms", "us"} if unit == "s" and "." in m.group("num") else {unit})
            acc.add(Decimal(m.group("num")), unit)
        if not seen:
            raise _invalid("interval", s, INVALID_DATETIME_FORMAT)
        if negate:
            acc.months, acc.days, acc.us = -acc.months, -acc.days, -acc.us
    if not (
        -(2**31) <= acc.months < 2**31
        and -(2**31) <= acc.days < 2**31
        and -(2**63) <= acc.us < 2**63
    ):
        raise _fail(INTERVAL_FIELD_OVERFLOW, f"interval field value out of range: {_quote(s)}")
    return _interval_value(acc.months, acc.days, acc.us)


# A number may have a minus sign, never a plus (ParseISO8601Number).
_ISO_INTERVAL_RE = re.compile(
    r"P(?:(?P<y>-?[\d.]+)Y)?(?:(?P<mo>-?[\d.]+)M)?(?:(?P<w>-?[\d.]+)W)?(?:(?P<d>-?[\d.]+)D)?"
    r"(?:T(?:(?P<h>-?[\d.]+)H)?(?:(?P<mi>-?[\d.]+)M)?(?:(?P<s>-?[\d.]+)S)?)?"
)


def _parse_iso_interval(w: str, s: str, acc: _IntervalAcc) -> None:
    m = _ISO_INTERVAL_RE.fullmatch(w)
    if not m or w in ("P", "PT") or w.endswith("T"):
        raise _invalid("interval", s, INVALID_DATETIME_FORMAT)
    for group, unit in (
        ("y", "year"),
        ("mo", "month"),
        ("w", "week"),
        ("d", "day"),
        ("h", "h"),
        ("mi", "m"),
        ("s", "s"),
    ):
        if m.group(group):
            try:
                acc.add(Decimal(m.group(group)), unit)
            except InvalidOperation:
                raise _invalid("interval", s, INVALID_DATETIME_FORMAT) from None


def _interval_value(months: int, days: int, us: int) -> timedelta | relativedelta:
    """timedelta when there are no months (exact), relativedelta otherwise."""
    if months == 0 and abs(days) + abs(us) // _US_PER_DAY < 999_999_999:  # timedelta's range
        return timedelta(days=days, microseconds=us)
    return relativedelta(months=months, days=days, microseconds=us)


def _parse_uuid(s: str) -> uuid.UUID:
    # string_to_uuid: optional braces; a hyphen may follow any group of four hex digits.
    m = re.fullmatch(r"\{?((?:[0-9a-fA-F]{4}-?){7}[0-9a-fA-F]{4})\}?", s)
    if not m or (s.startswith("{") != s.endswith("}")) or (s.startswith("{") and len(s) < 2):
        raise _invalid("uuid", s)
    return uuid.UUID(m.group(1).replace("-", ""))


def _reject_json_constant(name: str) -> Any:
    raise ValueError(name)


_JSON_ESCAPE = re.compile(r"\\(?:u([0-9a-fA-F]{4})|.)")


def _parse_json(s: str, jsonb: bool) -> str:
    """json_in/jsonb_in validate the text; icegres hands json(b) parameters on as text."""
    type_name = "jsonb" if jsonb else "json"
    try:
        json.loads(s, parse_constant=_reject_json_constant)
    except (ValueError, RecursionError):
        raise _invalid(type_name, s) from None
    if jsonb:
        _check_json_escapes(s, type_name)
    return s


def _check_json_escapes(s: str, type_name: str) -> None:
    # jsonb de-escapes strings, so (unlike json, which keeps the text) it insists on proper
    # UTF-16 surrogate pairs and refuses \u0000, which text cannot hold.
    pending_high_end = -1
    for m in _JSON_ESCAPE.finditer(s):
        code = int(m.group(1), 16) if m.group(1) else None
        if pending_high_end != -1 and (
            m.start() != pending_high_end or code is None or not 0xDC00 <= code <= 0xDFFF
        ):
            raise _invalid(type_name, s)
        if code is None:
            continue
        if 0xD800 <= code <= 0xDBFF:
            pending_high_end = m.end()
            continue
        if 0xDC00 <= code <= 0xDFFF and pending_high_end == -1:
            raise _invalid(type_name, s)
        pending_high_end = -1
        if code == 0:
            raise _fail(UNTRANSLATABLE_CHARACTER, "unsupported Unicode escape sequence")
    if pending_high_end != -1:
        raise _invalid(type_name, s)


def _parse_name(s: str) -> str:
    # namein silently truncates to NAMEDATALEN-1 bytes, on a character boundary.
    b = s.encode()
    if len(b) <= 63:
        return s
    return b[:63].decode("utf-8", "ignore")


_ARRAY_NULL = object()


def _parse_array(s: str, elem: PgType, settings: TextSettings) -> list[Any]:
    """array_in for one-dimensional and rectangular multidimensional literals."""

    def malformed(detail: str) -> PgError:
        return PgError(
            INVALID_TEXT_REPRESENTATION, f"malformed array literal: {_quote(s)}", detail=detail
        )

    text = s.strip(_PG_SPACE)
    if text.startswith("["):  # explicit bounds '[1:2]={...}': the values are what we keep
        m = re.match(r"(?:\[[+-]?\d+(?::[+-]?\d+)?\])+[ \t\n\r\v\f]*=", text)
        if not m:
            raise malformed('Missing "=" after array dimensions.')
        text = text[m.end() :].lstrip(_PG_SPACE)
    if not text.startswith("{"):
        raise malformed('Array value must start with "{" or dimension information.')
    pos = 0

    def parse_level() -> list[Any]:
        nonlocal pos
        pos += 1  # '{'
        items: list[Any] = []
        kinds: set[str] = set()
        while True:
            while pos < len(text) and text[pos] in _PG_SPACE:
                pos += 1
            if pos >= len(text):
                raise malformed("Unexpected end of input.")
            c = text[pos]
            if c == "}" and not items and not kinds:
                pos += 1
                return items
            if c == "{":
                kinds.add("array")
                items.append(parse_level())
            elif c == '"':
                kinds.add("scalar")
                items.append(read_quoted())
            elif c in ",}":
                raise malformed(f'Unexpected "{c}" character.')
            else:
                kinds.add("scalar")
                items.append(read_unquoted())
            if len(kinds) > 1:
                raise malformed("Unexpected array element.")
            while pos < len(text) and text[pos] in _PG_SPACE:
                pos += 1
            if pos >= len(text):
                raise malformed("Unexpected end of input.")
            if text[pos] == ",":
                pos += 1
            elif text[pos] == "}":
                pos += 1
                return items
            else:
                raise malformed(f'Unexpected "{text[pos]}" character.')

    def read_quoted() -> str:
        nonlocal pos
        pos += 1
        out = []
        while pos < len(text):
            c = text[pos]
            if c == "\\" and pos + 1 < len(text):
                out.append(text[pos + 1])
                pos += 2
            elif c == '"':
                pos += 1
                return "".join(out)
            else:
                out.append(c)
                pos += 1
        raise malformed("Unexpected end of input.")

    def read_unquoted() -> Any:
        nonlocal pos
        out = []
        escaped_upto = 0
        while pos < len(text) and text[pos] not in ",}":
            c = text[pos]
            if c == "\\" and pos + 1 < len(text):
                out.append(text[pos + 1])
                pos += 2
                escaped_upto = len(out)
            elif c in '{"':
                raise malformed(f'Unexpected "{c}" character.')
            else:
                out.append(c)
                pos += 1
        while len(out) > escaped_upto and out[-1] in _PG_SPACE:
            out.pop()  # trailing whitespace of an unquoted element is not part of it
        value = "".join(out)
        if escaped_upto == 0 and value.upper() == "NULL":
            return _ARRAY_NULL
        return value

    result = parse_level()
    if text[pos:].strip(_PG_SPACE):
        raise malformed("Junk after closing right brace.")
    _check_rectangular(result, malformed)
    return _convert_elements(result, elem, settings)


def _check_rectangular(v: list[Any], malformed: Callable[[str], PgError]) -> None:
    subs = [x for x in v if isinstance(x, list)]
    if not subs:
        return
    shape = _shape(subs[0])
    for x in subs:
        if _shape(x) != shape:
            raise malformed(
                "Multidimensional arrays must have sub-arrays with matching dimensions."
            )


def _shape(v: list[Any]) -> tuple[int, ...]:
    if v and isinstance(v[0], list):
        return (len(v), *_shape(v[0]))
    return (len(v),)


def _convert_elements(v: list[Any], elem: PgType, settings: TextSettings) -> list[Any]:
    out: list[Any] = []
    for x in v:
        if isinstance(x, list):
            out.append(_convert_elements(x, elem, settings))
        elif x is _ARRAY_NULL:
            out.append(None)
        else:
            out.append(_decode_text(x, elem.oid, settings))
    return out


_TEXT_DECODERS: dict[int, Callable[[str, TextSettings], Any]] = {
    BOOL.oid: lambda s, _: parse_bool(s),
    INT2.oid: lambda s, _: _parse_int(s, INT2.oid),
    INT4.oid: lambda s, _: _parse_int(s, INT4.oid),
    INT8.oid: lambda s, _: _parse_int(s, INT8.oid),
    OID.oid: lambda s, _: _parse_oid(s),
    XID.oid: lambda s, _: _parse_oid(s),
    FLOAT4.oid: lambda s, _: _parse_float(s, FLOAT4.oid),
    FLOAT8.oid: lambda s, _: _parse_float(s, FLOAT8.oid),
    NUMERIC.oid: lambda s, _: _parse_numeric(s),
    TEXT.oid: lambda s, _: s,
    VARCHAR.oid: lambda s, _: s,
    BPCHAR.oid: lambda s, _: s,
    UNKNOWN.oid: lambda s, _: s,
    CSTRING.oid: lambda s, _: s,
    REGCLASS.oid: lambda s, _: s,
    REGTYPE.oid: lambda s, _: s,
    REGPROC.oid: lambda s, _: s,
    CHAR.oid: lambda s, _: s.encode()[:1].decode("utf-8", "ignore") if s else s,
    NAME.oid: lambda s, _: _parse_name(s),
    BYTEA.oid: lambda s, _: _parse_bytea(s),
    DATE.oid: _parse_date,
    TIME.oid: lambda s, st: _parse_time(s, False, st),
    TIMETZ.oid: lambda s, st: _parse_time(s, True, st),
    TIMESTAMP.oid: lambda s, st: _parse_timestamp(s, False, st),
    TIMESTAMPTZ.oid: lambda s, st: _parse_timestamp(s, True, st),
    INTERVAL.oid: lambda s, _: _parse_interval(s),
    UUID.oid: lambda s, _: _parse_uuid(s),
    JSON.oid: lambda s, _: _parse_json(s, False),
    JSONB.oid: lambda s, _: _parse_json(s, True),
}


def _decode_text(s: str, oid: int, settings: TextSettings) -> Any:
    decoder = _TEXT_DECODERS.get(oid)
    if decoder is not None:
        return decoder(s, settings)
    t = _TYPES_BY_OID.get(oid)
    if t is not None and _is_array(t):
        return _parse_array(s, _element_type(t), settings)
    if t is not None and oid in (INT2VECTOR.oid, OIDVECTOR.oid):
        return [_decode_text(x, t.element_oid, settings) for x in s.split()]
    return s  # unknown or unsupported type: the engine gets the text and casts it itself


def _time_from_us(us: int, tz: tzinfo | None = None) -> time | _Unrepresentable:
    if us == _US_PER_DAY:
        return _Unrepresentable("time 24:00:00 is not supported in icegres parameters")
    return time(
        us // 3_600_000_000, us // 60_000_000 % 60, us // _US_PER_S % 60, us % _US_PER_S, tzinfo=tz
    )
