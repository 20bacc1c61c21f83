"""The backslash escapes of an `E'…'` string, read as PostgreSQL 15's scanner reads them.

scan.l's rules (xeoctesc, xehexesc, xeunicode, xeunicodefail, xeescape, and the xeu state that
waits for a surrogate pair's second half) turn the text between the quotes into bytes; once the
string ends, its bytes must be UTF-8 without a NUL (`pg_verifymbstr`). Where PostgreSQL refuses a
string, the `Refusal` says what it answers, SQLSTATE, message, hint and cursor, so the statement
fails as it does in PostgreSQL and never reaches a parser that reads escapes otherwise
(DataFusion's refuses every one of these, and a valid surrogate pair too, as "Unterminated
encoded string literal").

A scanner error inside the string wins over the encoding check, which runs only at its end, as
in scan.l: `E'\\xff\\u'` is 22025, not 22021.

Pure: the text comes in pieces (a 50 MB string is never one str here) and the value goes out as
UTF-8 pieces of about the same size; the thread hands the GIL over every 64 kB.
"""

from __future__ import annotations

import codecs
import re
import time
from dataclasses import dataclass

from icegres.pg.encoding import utf8_error
from icegres.pg.errors import (
    CHARACTER_NOT_IN_REPERTOIRE,
    INVALID_ESCAPE_SEQUENCE,
    SYNTAX_ERROR,
    PgError,
)

# One escape (or a doubled quote). None is longer than _ESCAPE_CHARS_MAX characters.
_ESCAPE = re.compile(r"\\(?:([0-7]{1,3})|x([0-9A-Fa-f]{1,2})|u([0-9A-Fa-f]{4})|U([0-9A-Fa-f]{8})|([uU])|(.))|''",
                     re.DOTALL)
_ESCAPE_CHARS_MAX = 10
_YIELD_BYTES = 1 << 16
_SIMPLE = {"b": "\b", "f": "\f", "n": "\n", "r": "\r", "t": "\t"}


@dataclass(frozen=True)
class Refusal:
    """What PostgreSQL answers for an E'…' string it refuses. `at`: the cursor, a character
    offset into the text between the quotes (None: the encoding check, which has none)."""

    sqlstate: str
    message: str
    at: int | None
    hint: str | None = None

    def error(self, inner_at: int | None) -> PgError:
        """The error, its cursor counted from `inner_at` (0-based: where the text between the
        quotes starts in the statement; None: unknown, no cursor)."""
        position = None if self.at is None or inner_at is None else inner_at + self.at + 1
        return PgError(self.sqlstate, self.message, hint=self.hint, position=position)


@dataclass(frozen=True)
class Value:
    pieces: tuple[bytes, ...]  # UTF-8
    chars: int


class _Refused(Exception):
    def __init__(self, refusal: Refusal) -> None:
        self.refusal = refusal


def _near(message: str, token: str, at: int) -> _Refused:
    return _Refused(Refusal(SYNTAX_ERROR, f'{message} at or near "{token}"', at))


def _bad_unicode(at: int) -> _Refused:
    return _Refused(Refusal(INVALID_ESCAPE_SEQUENCE, "invalid Unicode escape", at,
                            "Unicode escapes must be \\uXXXX or \\UXXXXXXXX."))


def unescaped(raw: list[str]) -> Value | Refusal:
    """The value of the E'…' string whose text between the quotes is `raw` (in pieces), or
    what PostgreSQL answers if it refuses it."""
    out: list[bytes] = []
    check = codecs.getincrementaldecoder("utf-8")()
    chars, carry, high = 0, "", None  # high: a high surrogate waiting for its low half
    base = 0  # the offset in the whole text of `text`'s first character
    written = 0  # bytes in `out`
    bad: int | None = None  # the offset in the value of its first byte that is not UTF-8, or a NUL
    since_yield = 0
    try:
        for k, piece in enumerate(raw):
            text = carry + piece
            final = k == len(raw) - 1
            # An escape starting before `limit` is whole in `text`: none is longer than 10.
            limit = len(text) if final else len(text) - _ESCAPE_CHARS_MAX
            parts: list[bytes] = []
            pos = 0
            for m in _ESCAPE.finditer(text):
                if m.start() >= limit:
                    break
                if m.start() > pos:
                    if high is not None:
                        raise _near("invalid Unicode surrogate pair", text[pos], base + pos)
                    parts.append(text[pos:m.start()].encode())
                high = _escape(m, parts, high, base)
                pos = m.end()
            cut = max(limit, pos)
            if cut > pos:
                if high is not None:
                    raise _near("invalid Unicode surrogate pair", text[pos], base + pos)
                parts.append(text[pos:cut].encode())
            carry = text[cut:]
            base += cut
            data = b"".join(parts)
            if bad is None:
                bad, read = _first_bad(check, data, written, final)
                chars += read
            out.append(data)
            written += len(data)
            since_yield += len(data)
            if since_yield >= _YIELD_BYTES:
                since_yield = 0
                time.sleep(0)  # the GIL to whoever waits for it, at once
        if high is not None:  # the closing quote is what came instead of the second half
            raise _near("invalid Unicode surrogate pair", "'", base)
    except _Refused as refused:
        return refused.refusal
    if bad is not None:
        return Refusal(CHARACTER_NOT_IN_REPERTOIRE, _bytes_at(out, bad), None)
    return Value(tuple(out), chars)


def _first_bad(check: codecs.IncrementalDecoder, data: bytes, written: int, final: bool) -> tuple[int | None, int]:
    """The value's offset of the first NUL or non-UTF-8 byte among `data` (which follows
    `written` bytes), or None; and the characters `data` completes."""
    held = len(check.getstate()[0])  # bytes of a character begun in an earlier piece
    nul = data.find(b"\0")
    try:
        read = len(check.decode(data, final=final))
    except UnicodeDecodeError as exc:
        at = written - held + exc.start
        return (at if nul < 0 else min(at, written + nul)), 0
    return (None if nul < 0 else written + nul), read


def _bytes_at(out: list[bytes], at: int) -> str:
    """PostgreSQL's report of the bad sequence at offset `at` of the value in `out`."""
    rest = b""
    for piece in out:
        if at < len(piece):
            rest += piece[at:at + 4]
            at = 0
            if len(rest) >= 4:
                break
        else:
            at -= len(piece)
    return utf8_error(rest, 0).message


def _escape(m: re.Match[str], parts: list[bytes], high: int | None, base: int) -> int | None:
    """Append what the escape `m` means; the high surrogate it leaves waiting, if any."""
    octal, hexa, u4, u8, bare_u, other = m.groups()
    at = base + m.start()
    if bare_u is not None:
        raise _bad_unicode(at)
    code = int(u4 or u8, 16) if (u4 or u8) else None
    if high is not None:
        if code is None:  # scan.l's xeu state reads one character: the backslash, or a quote
            raise _near("invalid Unicode surrogate pair", m.group()[0], at)
        if not 0xDC00 <= code <= 0xDFFF:
            raise _near("invalid Unicode surrogate pair", m.group(), at)
        parts.append(chr(0x10000 + ((high - 0xD800) << 10) + (code - 0xDC00)).encode())
        return None
    if code is not None:
        if 0xD800 <= code <= 0xDBFF:
            return code
        if 0xDC00 <= code <= 0xDFFF:
            raise _near("invalid Unicode surrogate pair", m.group(), at)
        if code == 0 or code > 0x10FFFF:
            raise _near("invalid Unicode escape value", m.group(), at)
        parts.append(chr(code).encode())
    elif octal is not None:
        parts.append(bytes((int(octal, 8) & 0xFF,)))
    elif hexa is not None:
        parts.append(bytes((int(hexa, 16),)))
    elif other is not None:
        parts.append(_SIMPLE.get(other, other).encode())
    else:  # ''
        parts.append(b"'")
    return None


def read(inner: str) -> str:
    """The value of a (small) E'…' string whose text between the quotes is `inner`; PgError
    where PostgreSQL refuses it, its cursor counted from the start of `inner`."""
    value = unescaped([inner])
    if isinstance(value, Refusal):
        raise value.error(0)
    return b"".join(value.pieces).decode()
