"""sql/escapes.py: an E'…' string's escapes read as PostgreSQL 15 reads them, its refusals
answered with PostgreSQL's SQLSTATE, message and cursor (the table was checked against a real
PostgreSQL 15; tests/e2e/test_escape_strings.py compares live), whatever the pieces the text
arrives in."""

from __future__ import annotations

import random

import pytest

from icegres.sql.escapes import Refusal, Value, read, unescaped
from icegres.sql.statement import classify

pytestmark = pytest.mark.unit

_HINT = "Unicode escapes must be \\uXXXX or \\UXXXXXXXX."

# The text between the quotes -> (SQLSTATE, message, cursor: offset in that text or None).
_REFUSED = [
    (r"\xff", ("22021", 'invalid byte sequence for encoding "UTF8": 0xff', None)),
    (r"\0", ("22021", 'invalid byte sequence for encoding "UTF8": 0x00', None)),
    (r"\400", ("22021", 'invalid byte sequence for encoding "UTF8": 0x00', None)),
    (r"ok\777", ("22021", 'invalid byte sequence for encoding "UTF8": 0xff', None)),
    (r"\xc3\x28", ("22021", 'invalid byte sequence for encoding "UTF8": 0xc3 0x28', None)),
    (r"\xe2\x82", ("22021", 'invalid byte sequence for encoding "UTF8": 0xe2 0x82', None)),
    (r"\xf0\x28\x8c\x28", ("22021", 'invalid byte sequence for encoding "UTF8": 0xf0 0x28 0x8c 0x28', None)),
    (r"\xed\xa0\x80", ("22021", 'invalid byte sequence for encoding "UTF8": 0xed 0xa0 0x80', None)),
    (r"\u", ("22025", "invalid Unicode escape", 0)),
    (r"ab\uZZZZ", ("22025", "invalid Unicode escape", 2)),
    (r"\xff\u", ("22025", "invalid Unicode escape", 4)),  # a scanner error wins over the encoding's
    (r"\u0000", ("42601", 'invalid Unicode escape value at or near "\\u0000"', 0)),
    (r"\U00110000", ("42601", 'invalid Unicode escape value at or near "\\U00110000"', 0)),
    (r"\ude00", ("42601", 'invalid Unicode surrogate pair at or near "\\ude00"', 0)),
    (r"\ud83d", ("42601", "invalid Unicode surrogate pair at or near \"'\"", 6)),
    (r"\ud83dx", ("42601", 'invalid Unicode surrogate pair at or near "x"', 6)),
    (r"\ud83d\n", ("42601", 'invalid Unicode surrogate pair at or near "\\"', 6)),
    (r"\ud83d''", ("42601", "invalid Unicode surrogate pair at or near \"'\"", 6)),
    (r"\ud83d\u0041", ("42601", 'invalid Unicode surrogate pair at or near "\\u0041"', 6)),
    (r"\ud83d\uZZ", ("22025", "invalid Unicode escape", 6)),
]


@pytest.mark.parametrize(("inner", "answer"), _REFUSED)
def test_refused_strings_get_postgresqls_answer(inner, answer):
    for size in (1, 2, 3, len(inner)):
        refusal = unescaped([inner[i:i + size] for i in range(0, len(inner), size)])
        assert isinstance(refusal, Refusal), (inner, size)
        assert (refusal.sqlstate, refusal.message, refusal.at) == answer, (inner, size)
        assert (refusal.hint == _HINT) == (refusal.sqlstate == "22025")


def test_classify_reports_the_cursor_in_the_statement():
    """The cursor counts from the start of the text classified, leading comments included."""
    with pytest.raises(Exception) as caught:
        classify("/* c */ select 'x' as \"E\", E'\\u'")
    assert (caught.value.sqlstate, caught.value.position) == ("22025", 30)


def test_classify_writes_escape_strings_as_standard_strings_of_the_same_length():
    """What DataFusion's parser reads: the value, no escapes, later tokens where they were."""
    sql = r"select E'\ud83d\ude00', E'\303\251''s', e'\\x' as nosuch"
    stmt = classify(sql)
    assert len(stmt.sql) == len(sql) and stmt.sql.index("nosuch") == sql.index("nosuch")
    assert stmt.sql.split() == ["select", "'😀'", ",", "'é''s'", ",", "'\\x'", "as", "nosuch"]
    assert classify("select E'a''b'").sql == "select E'a''b'"  # no backslash: as written


def test_escape_strings_decode_alike_whatever_the_pieces():
    rng = random.Random(2)
    alphabet = ["a", "é", "\\n", "\\\\", "''", "\\'", "\\x41", "\\101", "\\u00e9", "\\U0001F600", "\\ud83d\\ude00",
                "\\7", "\\x4", "\\q", "\\303\\251", "\\xff", "\\u", "\\ud83d", "\\0"]
    for _ in range(2000):
        raw = "".join(rng.choice(alphabet) for _ in range(rng.randint(1, 40)))
        whole = unescaped([raw])
        size = rng.randint(1, 12)
        split = unescaped([raw[i:i + size] for i in range(0, len(raw), size)])
        assert split == whole or (isinstance(split, Value) and isinstance(whole, Value)
                                  and b"".join(split.pieces) == b"".join(whole.pieces)
                                  and split.chars == whole.chars), raw
        if isinstance(whole, Value):
            assert whole.chars == len(read(raw)), raw
