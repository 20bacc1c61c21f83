"""How maintenance is told "older than": a time (ISO 8601, UTC unless it has an offset; or
ms since the epoch) or a duration back from now in Trino's spelling ('7d', '36h', '90m', '1.5d')."""

from __future__ import annotations

import datetime as dt
import re

from icegres.pg.errors import INVALID_PARAMETER_VALUE, PgError

_UNITS_MS = {"ms": 1, "s": 1000, "m": 60_000, "h": 3_600_000, "d": 86_400_000}
_DURATION = re.compile(r"\s*(\d+(?:\.\d+)?)\s*(ms|s|m|h|d)\s*", re.IGNORECASE)


def duration_ms(text: str) -> int:
    """A Trino duration ('7d', '12h', '30m', '10s', '500ms'); 22023 if it is not one."""
    match = _DURATION.fullmatch(text)
    if match is None:
        raise PgError(INVALID_PARAMETER_VALUE, f'invalid duration: "{text}"',
                      hint="A duration is a number and a unit: ms, s, m, h or d ('7d', '36h').")
    return int(float(match.group(1)) * _UNITS_MS[match.group(2).lower()])


def older_than_ms(text: str, now_ms: int) -> int:
    """`text` as an instant in ms since the epoch: a duration back from `now_ms`, an ISO 8601
    time, or an integer of ms; 22023 otherwise."""
    if _DURATION.fullmatch(text):
        return now_ms - duration_ms(text)
    if text.strip().isdigit():
        return int(text)
    try:
        at = dt.datetime.fromisoformat(text.strip())
    except ValueError:
        raise PgError(INVALID_PARAMETER_VALUE, f'invalid time: "{text}"',
                      hint="Give an ISO 8601 time ('2026-12-01T10:00:00Z') or a duration back from now "
                           "('7d').") from None
    if at.tzinfo is None:
        at = at.replace(tzinfo=dt.UTC)
    return int(at.timestamp() * 1000)
