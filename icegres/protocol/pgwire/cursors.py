"""A DECLAREd cursor's state and the rows of the session commands that answer in text."""

from __future__ import annotations

import struct
from dataclasses import dataclass

from icegres.engine.row_source import RowSource
from icegres.pg import errors as E
from icegres.pg.errors import PgError


@dataclass
class Cursor:
    source: RowSource
    binary: bool
    hold: bool
    position: int = 0


def text_row(values: list[str | None]) -> bytes:
    parts = [struct.pack("!h", len(values))]
    for v in values:
        if v is None:
            parts.append(struct.pack("!i", -1))
        else:
            b = v.encode()
            parts.append(struct.pack("!i", len(b)) + b)
    body = b"".join(parts)
    return b"D" + struct.pack("!i", len(body) + 4) + body


def fetch_count(direction: str) -> int:
    d = direction.upper()
    if d in ("NEXT", "FORWARD"):
        return 1
    if d in ("ALL", "FORWARD ALL"):
        return 0
    if d.startswith("FORWARD "):
        return int(d.split()[1])
    if d.lstrip("-").isdigit():
        n = int(d)
        if n >= 0:
            return n
    raise PgError(E.FEATURE_NOT_SUPPORTED, "cursor can only scan forward",
                  hint="Declare it with SCROLL option to enable backward scan (not supported by icegres).")


def skip_rows(source: RowSource, count: int) -> int:
    skipped = 0
    while count == 0 or skipped < count:
        batch = source.take(count - skipped if count else 0)
        if batch is None:
            break
        skipped += batch.num_rows
    return skipped
