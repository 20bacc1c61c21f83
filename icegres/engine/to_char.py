"""PostgreSQL's to_char template patterns for dates and times, as the chrono format DataFusion's
to_char takes.

DataFusion's to_char reads its format as chrono's strftime (`%Y-%m-%d`), so PostgreSQL's
`to_char(d, 'YYYY-MM-DD')` came back as the text 'YYYY-MM-DD' itself, for every row. Statements
with to_char take the rewrite path (engine._REWRITE_MARKERS) and `chrono_format` spells the
pattern for DataFusion. A pattern chrono cannot produce exactly (PostgreSQL pads 'Month' to nine
characters, numbers weekdays from Sunday, has quarters and roman months) is refused with 0A000
naming it, never approximated. Pure functions.

Rules followed (PostgreSQL 15, formatting.c and "Template Patterns for Date/Time Formatting"):
patterns match longest first, in upper or lower case (and Month, Mon, Day, Dy capitalised), the
text ones' case deciding the output's; FM before a pattern drops its padding; text in double
quotes is copied (a backslash there takes the next character as it is); outside them \\" is a
double quote and anything else is copied, a character at a time.
"""

from __future__ import annotations

from icegres.pg.errors import FEATURE_NOT_SUPPORTED, PgError

# Numeric patterns, in upper or lower case: (chrono, chrono without padding for FM).
_NUMERIC: dict[str, tuple[str, str]] = {
    "HH24": ("%H", "%-H"),
    "HH12": ("%I", "%-I"),
    "HH": ("%I", "%-I"),
    "MI": ("%M", "%-M"),
    "SS": ("%S", "%-S"),
    "MS": ("%3f", "%3f"),
    "US": ("%6f", "%6f"),
    "YYYY": ("%Y", "%Y"),
    "YY": ("%y", "%-y"),
    "IYYY": ("%G", "%G"),
    "MM": ("%m", "%-m"),
    "DDD": ("%j", "%-j"),
    "DD": ("%d", "%-d"),
    "IW": ("%V", "%-V"),
    "ID": ("%u", "%u"),
    "FX": ("", ""),  # fixed-format input: nothing to print
}
# Text patterns, case-sensitive: (chrono, FM needed). PostgreSQL blank-pads full month and day
# names to nine characters unless FM is given; chrono cannot pad, so those need FM.
_TEXT: dict[str, tuple[str, bool]] = {
    "Month": ("%B", True),
    "Mon": ("%b", False),
    "Day": ("%A", True),
    "Dy": ("%a", False),
    "AM": ("%p", False),
    "PM": ("%p", False),
    "am": ("%P", False),
    "pm": ("%P", False),
}
# PostgreSQL patterns chrono has no exact spelling for.
_UNSUPPORTED = (
    "Y,YYY", "SSSSS", "SSSS", "MONTH", "IDDD", "A.M.", "P.M.", "B.C.", "A.D.", "FF1", "FF2", "FF3",
    "FF4", "FF5", "FF6", "YYY", "IYY", "DAY", "MON", "TZH", "TZM", "OF", "RM", "CC", "WW", "BC", "AD",
    "IY", "DY", "TZ", "Y", "I", "D", "W", "J", "Q",
)
# PostgreSQL's keyword table spells each pattern in upper and in lower case, and Month, Mon, Day
# and Dy capitalised too; it matches them as written, so 'Mm' or 'Yyyy' are no patterns.
_SPELLINGS = sorted(
    {v for name in (*_NUMERIC, *_TEXT, *_UNSUPPORTED) for v in (name.upper(), name.lower())}
    | {"Month", "Mon", "Day", "Dy"},
    key=len, reverse=True)


def chrono_format(template: str) -> str:
    """The chrono format that prints what PostgreSQL's to_char(timestamp, `template`) prints.
    Raises PgError 0A000 for a pattern it cannot print exactly.

    The loop is PostgreSQL's own (formatting.c, parse_format): a prefix (FM, TM) if one is there,
    then a pattern if one follows it, else one character of text — the prefix is then lost."""
    out: list[str] = []
    i = 0
    while i < len(template):
        fill = False
        if template.startswith(_PREFIXES, i):
            fill = template[i] in "Ff"  # TM (translated names) changes nothing in English
            i += 2
        pattern = _pattern_at(template, i)
        if pattern is not None:
            out.append(_chrono(pattern, fill, template))
            i += len(pattern)
            if template.startswith(_POSTFIXES, i):  # an ordinal (7th) or spelled-out suffix
                raise _unsupported(template[i:i + 2], template)
            continue
        if i >= len(template):
            break
        if template[i] == '"':
            text, i = _quoted(template, i + 1)
            out.append(_literal(text))
            continue
        if template.startswith('\\"', i):  # outside quotes only \" is special: a double quote
            i += 1
        out.append(_literal(template[i]))
        i += 1
    return "".join(out)


_PREFIXES = ("FM", "fm", "TM", "tm")
_POSTFIXES = ("TH", "th", "SP")


def _quoted(template: str, i: int) -> tuple[str, int]:
    """The text of a double-quoted run starting at `i` (after its quote), where a backslash
    takes the next character as it is, and where the text after the closing quote starts."""
    text: list[str] = []
    while i < len(template) and template[i] != '"':
        if template[i] == "\\" and i + 1 < len(template):
            i += 1
        text.append(template[i])
        i += 1
    return "".join(text), i + 1


def _pattern_at(template: str, i: int) -> str | None:
    """The pattern starting at `i`, longest first, spelled as PostgreSQL's keyword table spells
    it (its case then decides a text pattern's output: Mon, MON, mon)."""
    for spelling in _SPELLINGS:
        if template.startswith(spelling, i):
            return spelling
    return None


def _chrono(piece: str, fill: bool, template: str) -> str:
    if piece in _TEXT:
        spelled, needs_fill = _TEXT[piece]
        if needs_fill and not fill:
            raise _unsupported(piece, template, f"write FM{piece}: PostgreSQL pads it to 9 characters")
        return spelled
    numeric = _NUMERIC.get(piece.upper())
    if numeric is None:  # a text pattern in a case chrono cannot print (MON, mon), or no equivalent
        raise _unsupported(piece, template)
    return numeric[1] if fill else numeric[0]


def _literal(text: str) -> str:
    return text.replace("%", "%%")


def _unsupported(piece: str, template: str, hint: str = "") -> PgError:
    detail = f" ({hint})" if hint else ""
    return PgError(FEATURE_NOT_SUPPORTED,
                   f'to_char format "{template}": the pattern "{piece}" is not supported{detail}')
