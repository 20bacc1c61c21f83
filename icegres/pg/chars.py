"""PostgreSQL's character types with a length: varchar(n) and char(n), as values are assigned to
and read from columns of them.

Iceberg has one string type; the PostgreSQL type of a column is kept beside it (the table
property `icegres.column-type.<field id>`, engine/ddl_commands.py) and these rules apply it:

- Assignment (INSERT, UPDATE, COPY, ...): a value longer than n characters is 22001 `value too
  long for type character varying(5)`, unless every character past the n-th is a space, which
  is then cut off silently (varchar_input / bpchar_input).
- char(n): trailing spaces are insignificant in PostgreSQL (comparison, length(),
  casts to text and concatenation all ignore them), so a value is stored without them and padded
  with spaces to n only where PostgreSQL shows the stored padding: a column read straight from a
  table (`pad`).
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import TypeVar

import pyarrow as pa

from icegres.pg.errors import PgError

VARCHAR_OID = 1043
BPCHAR_OID = 1042
# PostgreSQL's VARHDRSZ: a length's typmod is n + 4 (and -1 for none).
_VARHDRSZ = 4
# PostgreSQL's bound on a declared length (MaxAttrSize / 1MB).
LENGTH_MAX = 10_485_760
# information_schema's character_octet_length: n times the server encoding's (UTF8) longest char.
UTF8_BYTES_MAX = 4

STRING_DATA_RIGHT_TRUNCATION = "22001"

Column = TypeVar("Column", pa.Array, pa.ChunkedArray)


@dataclass(frozen=True)
class CharType:
    """varchar(n) (oid 1043) or char(n) (1042); `length` None for varchar / bpchar without one."""

    oid: int
    length: int | None

    def __post_init__(self) -> None:
        assert self.oid in (VARCHAR_OID, BPCHAR_OID), self.oid
        assert self.length is None or 1 <= self.length <= LENGTH_MAX, self.length

    @property
    def typmod(self) -> int:
        return -1 if self.length is None else self.length + _VARHDRSZ

    @property
    def name(self) -> str:
        """format_type's spelling, which is also what the table property holds."""
        if self.oid == VARCHAR_OID:
            return "character varying" if self.length is None else f"character varying({self.length})"
        return "bpchar" if self.length is None else f"character({self.length})"

    @property
    def blank_padded(self) -> bool:
        return self.oid == BPCHAR_OID


def described(oid: int, typmod: int) -> CharType | None:
    """The character type a type OID and typmod describe (RowDescription's, pg_attribute's);
    None for any other type."""
    if oid not in (VARCHAR_OID, BPCHAR_OID):
        return None
    return CharType(oid, typmod - _VARHDRSZ if typmod > _VARHDRSZ else None)


_SPELLING = re.compile(r"^(character varying|character|bpchar)(?:\((\d+)\))?$")


def parse_char_type(text: str) -> CharType | None:
    """The type a table property names (`CharType.name`'s spellings); None for anything else."""
    m = _SPELLING.match(text.strip())
    if m is None:
        return None
    base, digits = m.groups()
    length = int(digits) if digits is not None else None
    if base == "character varying":
        oid = VARCHAR_OID
    elif base == "bpchar" and length is None:
        oid = BPCHAR_OID
    elif base == "character" and length is not None:
        oid = BPCHAR_OID
    else:
        return None
    if length is not None and not 1 <= length <= LENGTH_MAX:
        return None
    return CharType(oid, length)


def too_long(t: CharType) -> PgError:
    return PgError(STRING_DATA_RIGHT_TRUNCATION, f"value too long for type {t.name}")


def assign(column: Column, t: CharType) -> Column:
    """`column` (string or large_string) as PostgreSQL assigns it to a column of type `t`: cut
    to the length where only spaces go, without trailing spaces for char(n); PgError 22001 if a
    value does not fit. (bpchar without a length keeps a value as it is, as PostgreSQL shows it.)"""
    import pyarrow.compute as pc

    if t.length is not None and len(column) > column.null_count:
        lengths = pc.utf8_length(column)
        longest = pc.max(lengths).as_py()
        if longest is not None and longest > t.length:
            over = pc.greater(lengths, t.length)
            tail = pc.utf8_slice_codeunits(column, t.length)
            if not pc.all(pc.or_kleene(pc.invert(over), pc.match_substring_regex(tail, "^ *$"))).as_py():
                raise too_long(t)
            column = pc.if_else(over, pc.utf8_slice_codeunits(column, 0, t.length), column)
    if t.blank_padded and t.length is not None:
        column = pc.utf8_rtrim(column, characters=" ")
    return column


def pad(column: Column, t: CharType) -> Column:
    """A char(n) column's values as PostgreSQL returns them: padded with spaces to n."""
    import pyarrow.compute as pc

    if not t.blank_padded or t.length is None:
        return column
    if pa.types.is_string_view(column.type):
        column = column.cast(pa.string())
    return pc.utf8_rpad(column, width=t.length, padding=" ")
