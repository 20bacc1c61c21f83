"""The escapes of a `U&'…'` string constant, read as PostgreSQL's scanner reads them.

`\\XXXX` (four hex digits) and `\\+XXXXXX` (six) name a code point, a UTF-16 surrogate pair
written as two escapes names one, and the escape character doubled is itself; `UESCAPE 'c'`
makes `c` the escape character. What PostgreSQL's scanner refuses is refused with its SQLSTATE
(42601) and message.
"""

from __future__ import annotations

from icegres.pg.errors import SYNTAX_ERROR, PgError

_HEX = frozenset("0123456789abcdefABCDEF")
_NOT_ESCAPES = frozenset("0123456789abcdefABCDEF+'\" \t\n\r\f")


def check_escape_character(escape: str) -> None:
    """42601 unless `escape` may be a UESCAPE character (one, and not a hex digit, `+`, a quote
    or white space)."""
    if len(escape) != 1 or escape in _NOT_ESCAPES:
        raise PgError(SYNTAX_ERROR, f"invalid Unicode escape character at or near \"'{escape}'\"")


def decode(text: str, escape: str = "\\") -> str:
    """`text` (a U&'' constant's contents, quotes already undoubled) with its escapes read."""
    check_escape_character(escape)
    if escape not in text:
        return text
    out: list[str] = []
    high: int | None = None  # a surrogate pair's first half, waiting for its second
    i, n = 0, len(text)
    while i < n:
        at = text.find(escape, i)
        if at != i:  # (plain text up to the next escape, a slice at a time)
            if high is not None:
                raise PgError(SYNTAX_ERROR, "invalid Unicode surrogate pair")
            out.append(text[i:] if at < 0 else text[i:at])
            if at < 0:
                break
            i = at
        if text.startswith(escape, i + 1):
            if high is not None:
                raise PgError(SYNTAX_ERROR, "invalid Unicode surrogate pair")
            out.append(escape)
            i += 2
            continue
        plus = text.startswith("+", i + 1)
        start, width = (i + 2, 6) if plus else (i + 1, 4)
        digits, i = text[start : start + width], start + width
        if len(digits) != width or not set(digits) <= _HEX:
            raise PgError(SYNTAX_ERROR, "invalid Unicode escape",
                          hint="Unicode escapes must be \\XXXX or \\+XXXXXX.")
        code = int(digits, 16)
        if high is not None:
            if not 0xDC00 <= code <= 0xDFFF:
                raise PgError(SYNTAX_ERROR, "invalid Unicode surrogate pair")
            out.append(chr(0x10000 + ((high - 0xD800) << 10) + (code - 0xDC00)))
            high = None
        elif 0xD800 <= code <= 0xDBFF:
            high = code
        elif 0xDC00 <= code <= 0xDFFF:
            raise PgError(SYNTAX_ERROR, "invalid Unicode surrogate pair")
        elif code == 0 or code > 0x10FFFF:
            raise PgError(SYNTAX_ERROR, "invalid Unicode escape value")
        else:
            out.append(chr(code))
    if high is not None:
        raise PgError(SYNTAX_ERROR, "invalid Unicode surrogate pair")
    return "".join(out)
