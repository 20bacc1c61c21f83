"""Time as PostgreSQL keeps it: the session's rendering settings, microsecond epochs, session
time zones (IANA zones read from tzdata, vectorised), and the proleptic Gregorian calendar.

Pure: no I/O beyond reading tzdata files.
"""

from __future__ import annotations

import functools
import os
import re
import struct
import zoneinfo
from dataclasses import dataclass
from datetime import UTC, date, datetime, timedelta, tzinfo
from decimal import MAX_EMAX, MIN_EMIN, Context
from typing import Any

import numpy as np

# --------------------------------------------------------------------------------------------------
# Settings and time zones


@dataclass(frozen=True)
class TextSettings:
    timezone: str = "UTC"  # session TimeZone (IANA name or UTC); timestamptz text is rendered in it
    extra_float_digits: int = 1  # >0: shortest round-trip (PG 12+ default); <=0: %.{15+efd}g
    # DateStyle is always ISO, MDY; IntervalStyle postgres; bytea_output hex


_US_PER_S = 1_000_000
_US_PER_DAY = 86_400 * _US_PER_S
_DAYS_1970_TO_2000 = 10_957  # PostgreSQL's binary date/timestamp epoch is 2000-01-01
_US_1970_TO_2000 = _DAYS_1970_TO_2000 * _US_PER_DAY
_DAYS_PER_400Y = 146_097  # the Gregorian calendar, weekdays included, repeats every 400 years
_US_PER_400Y = _DAYS_PER_400Y * _US_PER_DAY
_EPOCH_UTC = datetime(1970, 1, 1, tzinfo=UTC)
_EPOCH_NAIVE = datetime(1970, 1, 1)
# Python datetimes cover years 1..9999; instants outside get PostgreSQL's rules from our own code.
_PY_MIN_US = (date(1, 1, 2).toordinal() - date(1970, 1, 1).toordinal()) * _US_PER_DAY
_PY_MAX_US = (date(9999, 12, 30).toordinal() - date(1970, 1, 1).toordinal()) * _US_PER_DAY
_TZDISP_LIMIT_S = 16 * 3600  # PostgreSQL rejects UTC offsets of 16 hours or more

# Decimal arithmetic that never rounds: numeric values carry up to ~147k digits.
_WIDE_CONTEXT = Context(prec=200_000, Emax=MAX_EMAX, Emin=MIN_EMIN)

_UTC_NAMES = frozenset(
    {"UTC", "GMT", "Z", "ZULU", "UCT", "ETC/UTC", "ETC/GMT", "UNIVERSAL", "GREENWICH"}
)


@dataclass(frozen=True, eq=False)
class _Zone:
    """A session TimeZone: UTC offset (seconds east) for any UTC instant, scalar or vectorised.

    Named zones use a transition table read from the TZif file (exact for every year the file lists)
    extended with the file's POSIX rule for 400 more years; later instants reuse that 400-year
    window, which is exact because the Gregorian calendar repeats, weekdays included, every 400 years.
    """

    fixed_offset_s: int | None
    info: tzinfo | None = None
    trans_us: np.ndarray | None = None  # sorted UTC instants at which the offset changes
    offsets_s: np.ndarray | None = None  # offsets_s[i] holds before trans_us[i]; one longer
    periodic_from_us: int | None = None  # instants >= this + 400y map back into [this, this + 400y)

    def offsets(self, utc_us: np.ndarray) -> np.ndarray:
        if self.fixed_offset_s is not None:
            return np.full(len(utc_us), self.fixed_offset_s, dtype=np.int64)
        if self.trans_us is None or self.offsets_s is None:
            return np.fromiter(
                (self.offset_at(int(u)) for u in utc_us), dtype=np.int64, count=len(utc_us)
            )
        t = utc_us
        if self.periodic_from_us is not None:
            start = self.periodic_from_us
            t = np.where(t >= start + _US_PER_400Y, start + (t - start) % _US_PER_400Y, t)
        return self.offsets_s[np.searchsorted(self.trans_us, t, side="right")]

    def offset_at(self, utc_us: int) -> int:
        """Offset from the Python tz database; independent of the table (tests compare the two)."""
        if self.fixed_offset_s is not None:
            return self.fixed_offset_s
        assert self.info is not None
        if utc_us > _PY_MAX_US - _US_PER_400Y:
            utc_us -= ((utc_us - (_PY_MAX_US - _US_PER_400Y)) // _US_PER_400Y + 1) * _US_PER_400Y
        utc_us = max(utc_us, _PY_MIN_US)  # before year 1: the zone's earliest offset (LMT), as PG
        off = (_EPOCH_UTC + timedelta(microseconds=utc_us)).astimezone(self.info).utcoffset()
        return int(off.total_seconds()) if off is not None else 0


@functools.lru_cache(maxsize=64)
def _zone(name: str) -> _Zone:
    key = name.strip()
    if key.upper() in _UTC_NAMES:
        return _Zone(0)
    fixed = _fixed_offset_zone(key)
    if fixed is not None:
        return _Zone(fixed)
    try:
        info = zoneinfo.ZoneInfo(key)
    except (zoneinfo.ZoneInfoNotFoundError, ValueError, OSError):
        return _Zone(0)  # the session layer validates TimeZone; never fail a query over it here
    table = _tzif_table(key, info)
    if table is None:
        return _Zone(None, info)
    trans, offs, periodic_from = table
    return _Zone(None, info, trans, offs, periodic_from)


@functools.lru_cache(maxsize=64)
def engine_time_zone(name: str) -> str:
    """The session TimeZone `name` as DataFusion's `execution.time_zone` spells it: an IANA name
    as is, UTC and PostgreSQL's numeric spellings as a fixed "+HH:MM" (seconds east, rounded to
    the minute: Arrow's offsets have no seconds)."""
    key = name.strip()
    fixed = 0 if key.upper() in _UTC_NAMES else _fixed_offset_zone(key)
    if fixed is None:
        return key
    sign = "-" if fixed < 0 else "+"
    minutes = round(abs(fixed) / 60)
    return f"{sign}{minutes // 60:02d}:{minutes % 60:02d}"


def _fixed_offset_zone(key: str) -> int | None:
    """Offset (seconds east) for PostgreSQL's numeric TimeZone spellings, else None.

    PostgreSQL's quirk: a plain number ('+5', '-3.5') is hours EAST of UTC (SQL convention), while
    anything with a colon ('-3:30') is a POSIX zone, where the sign means WEST of UTC.
    """
    m = re.fullmatch(r"([+-]?)(\d+(?:\.\d*)?)", key)
    if m:
        sign = -1 if m.group(1) == "-" else 1
        return sign * round(float(m.group(2)) * 3600)
    m = re.fullmatch(r"([+-]?)(\d{1,2}):(\d{2})(?::(\d{2}))?", key)
    if m:
        posix = int(m.group(2)) * 3600 + int(m.group(3)) * 60 + int(m.group(4) or 0)
        return posix if m.group(1) == "-" else -posix
    return None


def _tzif_table(key: str, info: tzinfo) -> tuple[np.ndarray, np.ndarray, int | None] | None:
    path = next(
        (os.path.join(d, key) for d in zoneinfo.TZPATH if os.path.isfile(os.path.join(d, key))),
        None,
    )
    if path is None:
        return None
    try:
        with open(path, "rb") as f:
            trans_s, offs, footer = _parse_tzif(f.read())
    except (OSError, ValueError, struct.error):
        return None
    trans_us = [t * _US_PER_S for t in trans_s]
    periodic_from: int | None = None
    if "," in footer:  # the POSIX rule has daylight saving: materialise 400 years of it
        # The rule governs everything after the last listed transition (files often stop in
        # 2037); probe it from there through a whole 400-year cycle that starts on a year boundary.
        last_us = trans_us[-1] if trans_us else 0
        last_year = (_EPOCH_NAIVE + timedelta(microseconds=last_us)).year
        periodic_from = _year_start_us(last_year + 1)
        extra_t, extra_o = _probe_transitions(
            info, last_us + _US_PER_S, periodic_from + _US_PER_400Y
        )
        trans_us += extra_t
        offs += extra_o
    return np.array(trans_us, dtype=np.int64), np.array(offs, dtype=np.int64), periodic_from


def _year_start_us(year: int) -> int:
    return _days_from_civil(year, 1, 1) * _US_PER_DAY


def _parse_tzif(data: bytes) -> tuple[list[int], list[int], str]:
    """(transition times in s, offsets with offsets[i] before transition i, POSIX footer) from TZif v2+."""
    if data[:4] != b"TZif":
        raise ValueError("not a TZif file")

    def counts(at: int) -> tuple[int, ...]:
        return struct.unpack(">6l", data[at + 20 : at + 44])

    isut, isstd, leap, timecnt, typecnt, charcnt = counts(0)
    if data[4:5] == b"\x00":
        raise ValueError("TZif v1 has no 64-bit data")
    at = 44 + timecnt * 5 + typecnt * 6 + charcnt + leap * 8 + isstd + isut
    isut, isstd, leap, timecnt, typecnt, charcnt = counts(at)
    at += 44
    times = list(struct.unpack(f">{timecnt}q", data[at : at + 8 * timecnt]))
    at += 8 * timecnt
    idx = list(data[at : at + timecnt])
    at += timecnt
    types = [struct.unpack(">lBB", data[at + 6 * i : at + 6 * i + 6]) for i in range(typecnt)]
    at += 6 * typecnt + charcnt + leap * 12 + isstd + isut
    footer = data[at:].strip(b"\n").decode("ascii", "replace")
    # Before the first transition: the first standard-time type (zoneinfo's and tzcode's rule).
    first = next((t for t in types if not t[1]), types[0])
    offsets = [first[0]] + [types[i][0] for i in idx]
    return times, offsets, footer


def _probe_transitions(info: tzinfo, start_us: int, end_us: int) -> tuple[list[int], list[int]]:
    """Transitions of a POSIX daylight-saving rule in [start, end), found by probing zoneinfo."""

    def off(us: int) -> int:
        o = (_EPOCH_UTC + timedelta(microseconds=us)).astimezone(info).utcoffset()
        return int(o.total_seconds()) if o is not None else 0

    trans: list[int] = []
    offs: list[int] = []
    step = 14 * _US_PER_DAY  # DST rules never change twice within two weeks
    t, o = start_us, off(start_us)
    while t < end_us:
        nxt = min(t + step, end_us)
        o2 = off(nxt)
        if o2 != o:
            lo, hi = t // _US_PER_S, nxt // _US_PER_S  # transitions fall on whole seconds
            while hi - lo > 1:
                mid = (lo + hi) // 2
                if off(mid * _US_PER_S) == o:
                    lo = mid
                else:
                    hi = mid
            trans.append(hi * _US_PER_S)
            offs.append(o2)
        t, o = nxt, o2
    return trans, offs


# --------------------------------------------------------------------------------------------------
# Calendar arithmetic shared by the scalar and the vectorised renderers. `//` and `%` floor for
# Python ints and numpy arrays alike, so one implementation (Howard Hinnant's) serves both.


def _civil_from_days(days: Any) -> tuple[Any, Any, Any]:
    """(year, month, day) of days since 1970-01-01, proleptic Gregorian, year 0 = 1 BC."""
    z = days + 719_468
    era = z // _DAYS_PER_400Y
    doe = z - era * _DAYS_PER_400Y
    yoe = (doe - doe // 1460 + doe // 36_524 - doe // 146_096) // 365
    doy = doe - (365 * yoe + yoe // 4 - yoe // 100)
    mp = (5 * doy + 2) // 153
    d = doy - (153 * mp + 2) // 5 + 1
    m = mp + 3 - 12 * (mp >= 10)
    y = yoe + era * 400 + (m <= 2)
    return y, m, d


def _days_from_civil(y: int, m: int, d: int) -> int:
    y -= m <= 2
    era = y // 400
    yoe = y - era * 400
    doy = (153 * (m + (-3 if m > 2 else 9)) + 2) // 5 + d - 1
    doe = yoe * 365 + yoe // 4 - yoe // 100 + doy
    return era * _DAYS_PER_400Y + doe - 719_468
