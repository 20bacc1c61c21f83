"""sql/unicode_escapes.py and sql/parse.py: U&'…' strings read as PostgreSQL's scanner reads them
(its messages checked against PostgreSQL 15 in tests/e2e/test_prefixed_strings.py), N'…' as the
plain string, B'…' and X'…' refused."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from icegres.pg.errors import PgError
from icegres.sql.parse import parse
from icegres.sql.unicode_escapes import decode

pytestmark = pytest.mark.unit


@pytest.mark.parametrize(("text", "escape", "read"), [
    ("d\\0061t\\+000061", "\\", "data"), ("d!0061t!!", "!", "dat!"), ("\\00e9\\\\", "\\", "é\\"),
    ("\\D83D\\DE00x", "\\", "😀x"), ("abc", "\\", "abc"), ("", "\\", ""),
])
def test_escapes_name_code_points(text, escape, read):
    assert decode(text, escape) == read


@pytest.mark.parametrize(("text", "message"), [
    ("\\0000", "invalid Unicode escape value"), ("\\+110000", "invalid Unicode escape value"),
    ("\\D83D", "invalid Unicode surrogate pair"), ("\\D83Dx", "invalid Unicode surrogate pair"),
    ("\\DE00", "invalid Unicode surrogate pair"), ("\\D83D\\0041", "invalid Unicode surrogate pair"),
    ("\\12", "invalid Unicode escape"), ("\\00g0", "invalid Unicode escape"), ("x\\", "invalid Unicode escape"),
])
def test_what_postgresql_refuses_is_42601(text, message):
    with pytest.raises(PgError) as refused:
        decode(text)
    assert (refused.value.sqlstate, str(refused.value)) == ("42601", message)


@pytest.mark.parametrize("escape", ["+", "a", "'", " ", "!!", ""])
def test_an_escape_character_that_could_be_read_otherwise_is_refused(escape):
    with pytest.raises(PgError, match="invalid Unicode escape character"):
        decode("x", escape)


@given(st.text(st.characters(blacklist_categories=("Cs",), blacklist_characters="\x00")),
       st.lists(st.sampled_from(["plain", "four", "six"])))
def test_any_string_written_with_escapes_reads_back(text, ways):
    written = []
    for i, c in enumerate(text):
        way = ways[i % len(ways)] if ways else "plain"
        if c == "\\":
            written.append("\\\\")
        elif way == "six" or (way == "four" and ord(c) > 0xFFFF):
            written.append(f"\\+{ord(c):06X}")
        elif way == "four":
            written.append(f"\\{ord(c):04x}")
        else:
            written.append(c)
    assert decode("".join(written)) == text


def test_the_parse_reads_prefixed_strings_as_plain_ones_and_refuses_bit_strings():
    assert parse("select N'it''s', U&'d!0061t' UESCAPE '!'").sql(dialect="postgres") == "SELECT 'it''s', 'dat'"
    for bits in ("select B'101'", "select X'1F'"):
        with pytest.raises(PgError) as refused:
            parse(bits)
        assert refused.value.sqlstate == "0A000"
