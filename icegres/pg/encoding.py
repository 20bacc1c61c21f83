"""PostgreSQL's report of bytes that are not UTF-8 (mbutils.c, report_invalid_encoding): the
server and client encodings are both UTF8, so text is only validated, never converted."""

from __future__ import annotations

from icegres.pg.errors import CHARACTER_NOT_IN_REPERTOIRE, PgError


def utf8_error(data: bytes | memoryview, at: int) -> PgError:
    """22021 for the bad sequence at offset `at` of `data` (a NUL is one too): as many bytes as
    its first one says the character has (pg_utf_mblen), at most what is left."""
    lead = data[at]
    size = 2 if lead & 0xE0 == 0xC0 else 3 if lead & 0xF0 == 0xE0 else 4 if lead & 0xF8 == 0xF0 else 1
    shown = " ".join(f"0x{b:02x}" for b in data[at:at + size])
    return PgError(CHARACTER_NOT_IN_REPERTOIRE, f'invalid byte sequence for encoding "UTF8": {shown}')


def utf8(data: bytes | memoryview) -> str:
    """`data` as text, or PostgreSQL's 22021 (for a NUL too: no text holds one)."""
    try:
        text = str(data, "utf-8")
    except UnicodeDecodeError as exc:
        nul = bytes(data[:exc.start]).find(b"\0")
        raise utf8_error(data, exc.start if nul < 0 else nul) from None
    if "\0" in text:
        raise utf8_error(data, text.encode().find(b"\0"))
    return text
