"""Bind parameters decoded to Python values, text or binary, as PostgreSQL 15 reads them."""

from __future__ import annotations

from icegres.pg.binary_in import _decode_binary
from icegres.pg.clock import TextSettings
from icegres.pg.errors import (
    INVALID_BINARY_REPRESENTATION,
    INVALID_TEXT_REPRESENTATION,
    PROTOCOL_VIOLATION,
    PgError,
)
from icegres.pg.text_in import _check_representable, _decode_text, _fail, _utf8

_DEFAULT_SETTINGS = TextSettings()


def decode_param(
    raw: bytes | None, oid: int, fmt: int, settings: TextSettings | None = None
) -> object:
    """A Bind parameter as a Python value: int, float, Decimal, str, bytes, bool, date, time,
    datetime (aware, in UTC, for timestamptz), timedelta or relativedelta (interval with months),
    uuid.UUID, or a list (nested for multidimensional arrays). NULL is None.

    `oid` 0 (unspecified) yields the text as str. Text input of unsupported types is passed through
    as str for the engine to cast. `settings` supplies the TimeZone for timestamptz/timetz text
    without an explicit offset. Raises only PgError, with the SQLSTATE PostgreSQL uses for the same
    input; values PostgreSQL accepts but Python cannot hold (infinities, years outside 1..9999,
    time 24:00:00) raise 22008.
    """
    if raw is None:
        return None
    settings = settings or _DEFAULT_SETTINGS
    try:
        if fmt == 0:
            value = _decode_text(_utf8(bytes(raw)), oid, settings)
        elif fmt == 1:
            value = _decode_binary(bytes(raw), oid, settings)
        else:
            raise _fail(PROTOCOL_VIOLATION, f"unsupported format code: {fmt}")
        _check_representable(value)
        return value
    except PgError:
        raise
    except (
        ValueError,
        ArithmeticError,
        OverflowError,
        IndexError,
        TypeError,
        KeyError,
        RecursionError,
    ) as e:
        # A bug or an input no rule above foresaw: still an answer the client can act on.
        raise PgError(
            INVALID_TEXT_REPRESENTATION if fmt == 0 else INVALID_BINARY_REPRESENTATION,
            f"invalid input for type OID {oid}: {e}",
        ) from e
