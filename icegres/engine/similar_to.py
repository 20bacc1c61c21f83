r"""SQL's SIMILAR TO patterns as the anchored regular expression PostgreSQL matches them with.

DataFusion took a SIMILAR TO pattern as a regular expression as written, so 'abc' SIMILAR TO 'a%'
was false. PostgreSQL translates the pattern (regexp.c, similar_escape): `%` is any string, `_`
any character, `.`, `^` and `$` are plain characters, the escape character (backslash unless
ESCAPE names another) makes the next character plain (a letter after it is a regex escape:
`\d`, `\w`, `\s` and their kin carry over, others are refused), bracket expressions and
`| * + ? { } ( )` keep their regex meaning, and the whole must match. Pure function.
"""

from __future__ import annotations

import re

from icegres.pg.errors import FEATURE_NOT_SUPPORTED, INVALID_ESCAPE_SEQUENCE, PgError


def similar_to_regex(pattern: str, escape: str = "\\") -> str:
    """The regular expression (Rust regex syntax) that matches what `pattern` does."""
    if len(escape) > 1:
        raise PgError(INVALID_ESCAPE_SEQUENCE, "invalid escape string")
    out: list[str] = []
    i = 0
    while i < len(pattern):
        ch = pattern[i]
        if escape and ch == escape:
            if i + 1 < len(pattern):  # (PostgreSQL drops an escape character at the very end)
                out.append(_escaped(pattern[i + 1], pattern))
            i += 2
            continue
        if ch == "[":
            end = _bracket_end(pattern, i)
            out.append(pattern[i:end].replace("\\", "\\\\"))
            i = end
            continue
        if ch == "%":
            out.append(".*")
        elif ch == "_":
            out.append(".")
        elif ch in ".^$\\":
            out.append("\\" + ch)
        else:
            out.append(ch)
        i += 1
    return "^(?:" + "".join(out) + ")$"


# PostgreSQL passes an escaped character on to its regex engine as backslash + character: a
# letter or digit is then that engine's escape. These mean the same in Rust's regex syntax.
_SHARED_ESCAPES = frozenset("dDwWsStnr")


def _escaped(ch: str, pattern: str) -> str:
    if not ch.isalnum() and ch != '"':
        return re.escape(ch)
    if ch in _SHARED_ESCAPES:
        return "\\" + ch
    raise PgError(FEATURE_NOT_SUPPORTED,
                  f"SIMILAR TO pattern {pattern!r}: the escape of {ch!r} is not supported")


def _bracket_end(pattern: str, start: int) -> int:
    """Where the bracket expression starting at `start` ends (after its `]`): a `]` right after
    `[` or `[^` is one of its characters."""
    i = start + 1
    if i < len(pattern) and pattern[i] == "^":
        i += 1
    if i < len(pattern) and pattern[i] == "]":
        i += 1
    while i < len(pattern) and pattern[i] != "]":
        i += 1
    return min(i + 1, len(pattern))
