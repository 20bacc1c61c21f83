"""Case-insensitive searches of statement text that stay cheap on a 50 MB statement.

The engine routes a statement by looking for words in its text (does it read pg_catalog, does it
need the rewrite path). A regular expression with IGNORECASE ran 2.2 s over a 50 MB literal, and
a marker loop over the lowered text 8.6 s, each pattern one C call holding the GIL: the event
loop, and so every other session, waited that long (issue 26). Here the text is lowered a piece
at a time and searched case-sensitively, so no call holds the GIL for more
than a few milliseconds. (A piece of 1 MB was too long: one alternation of 37 markers took 90 ms
of GIL over a megabyte of text whose letters begin many of them.)
"""

from __future__ import annotations

import re
from collections.abc import Iterator

__all__ = ["lowered_pieces", "search"]

PIECE = 1 << 16
# Pieces overlap by this much, so a match across a boundary is found: longer than any match of
# the patterns searched here. (A boundary may fake a `\b` at a piece's end: the patterns here
# only ever answer "maybe", where a false yes costs time and never a wrong answer.)
OVERLAP = 1 << 12


def lowered_pieces(text: str) -> Iterator[str]:
    """`text` lowered, in overlapping pieces (the whole, when it is small)."""
    if len(text) <= PIECE + OVERLAP:
        yield text.lower()
        return
    for start in range(0, len(text), PIECE):
        yield text[start:start + PIECE + OVERLAP].lower()


def search(lowercase_patterns: re.Pattern[str] | tuple[re.Pattern[str] | str, ...], text: str) -> bool:
    """Whether one of `lowercase_patterns` (written in lower case, compiled without IGNORECASE;
    a str is a literal word, found by `in`) matches somewhere in `text` lowered."""
    patterns = lowercase_patterns if isinstance(lowercase_patterns, tuple) else (lowercase_patterns,)
    return any((p in piece) if isinstance(p, str) else (p.search(piece) is not None)
               for piece in lowered_pieces(text) for p in patterns)
