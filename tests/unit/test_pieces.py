"""sql/pieces.py: a big Query's text scanned in pieces splits as lexer.py splits it, whatever
the pieces, and gives big comments as GAP and big literals as their values."""

from __future__ import annotations

import random

import pytest

from icegres.sql import lexer
from icegres.sql.escapes import Value, unescaped
from icegres.sql.pieces import GAP, Literal, Scanner, scan_pieces

pytestmark = pytest.mark.unit

_ALPHABET = [*"ab1٣eEUu&$;'\"-/*\\ \n", "$$", "$t$", "--", "/*", "*/", "''", "e'", "U&'"]


def _written(statements) -> list[str]:
    return ["".join(i if isinstance(i, str) else " " if i is GAP else i.raw() for i in s.items) for s in statements]


def _at_top_level_semicolons(text: str) -> list[str]:
    """The tokenizer's own split: where its `;` tokens are (an independent implementation)."""
    out, start = [], 0
    for token in lexer.tokenize(text):
        if token.kind is lexer.Kind.OP and token.text == ";":
            out.append(text[start:token.start])
            start = token.end
    out.append(text[start:])
    return [piece.strip() for piece in out if lexer.strip_leading_comments(piece)]


def test_pieces_split_as_the_lexer_does_whatever_the_pieces():
    rng = random.Random(1)
    for _ in range(5000):
        text = "".join(rng.choice(_ALPHABET) for _ in range(rng.randint(0, 25)))
        whole = _written(scan_pieces([text], 10**9))
        size = rng.randint(1, 5)
        assert _written(scan_pieces([text[i:i + size] for i in range(0, len(text), size)], 10**9)) == whole, text
        kept = [s.strip() for s in whole if lexer.strip_leading_comments(s.strip())]
        assert kept == _at_top_level_semicolons(text), text


def test_big_literals_and_comments_whatever_the_pieces():
    text = ("select length('" + "ab''c" * 3000 + "'), E'" + "q" * 5000 + "', 1 /*" + "x" * 5000
            + "*/; select $q$" + "é" * 6000 + "$q$ -- " + "c" * 5000 + "\n")
    for size in (1, 7, 4096, len(text)):
        statements = scan_pieces([text[i:i + size] for i in range(0, len(text), size)], 4096)
        items = [i for s in statements for i in s.items]
        literals = [i for i in items if isinstance(i, Literal)]
        assert [lit.value.text() for lit in literals] == ["ab'c" * 3000, "q" * 5000, "é" * 6000]
        assert [lit.opener for lit in literals] == ["'", "E'", "$q$"]
        assert literals[2].value.size == 12000 and literals[2].value.chars == 6000
        assert items.count(GAP) == 2
        assert "".join(i for i in statements[0].items if isinstance(i, str)).endswith(", 1 ")  # its E taken back


# What PostgreSQL 15 answers for `select E'…'` (checked against it): the escapes of scan.l, and
# (None) ones it refuses (tests/unit/test_escapes.py: with which error).
_ESCAPES = [
    (r"a\nb", "a\nb"), (r"\101\x42\u0043\U00000044", "ABCD"), (r"it''s \' \\ \q", "it's ' \\ q"),
    (r"\xc3\xa9", "é"), (r"\ud83d\ude00", "😀"), (r"\7\b\f\r\t\xg", "\x07\b\f\r\txg"),
    (r"\0", None), (r"\xff", None), (r"\u", None), (r"\400", None), (r"\ud83d", None), (r"\ude00", None),
    (r"\ud83dx", None), (r"\U00110000", None), (r"\u0000", None), (r"\uZZZZ", None),
]


@pytest.mark.parametrize(("written", "value"), _ESCAPES)
def test_big_escape_strings_mean_what_postgresql_reads(written, value):
    """A big E'…' string is a Literal of its value where PostgreSQL accepts its escapes; where
    it refuses them the string stays as written and the scan is refused (the message fails),
    whatever the pieces."""
    pad = "p" * 5000
    text = f"select E'{pad}{written}{pad}' as v"
    for size in (1, 3, 11, 4096, len(text)):
        scanner = Scanner(4096)
        for i in range(0, len(text), size):
            scanner.feed(text[i:i + size])
        [statement] = scanner.finish()
        literals = [i for i in statement.items if isinstance(i, Literal)]
        if value is None:
            assert not literals and "".join(statement.items) == text  # type: ignore[arg-type]
            assert scanner.refused is not None
        else:
            assert scanner.refused is None
            assert [lit.value.text() for lit in literals] == [pad + value + pad]
            at = statement.items.index(literals[0])
            assert "".join(statement.items[:at]) == "select " and statement.chars == len(text)  # type: ignore[arg-type]
            assert literals[0].raw() != text  # re-escaped, meaning the same
            again = unescaped([literals[0].raw()[2:-1]])
            assert isinstance(again, Value) and b"".join(again.pieces).decode() == pad + value + pad


def test_a_small_refused_escape_string_refuses_the_scan():
    """A small E'…' string stays as written, but one PostgreSQL refuses refuses the scan too,
    its cursor counted from the start of the text (the first one, as PostgreSQL reports)."""
    scanner = Scanner(4096)
    scanner.feed("select 1; select E'ok', E'\\u', E'\\xff'")
    statements = scanner.finish()
    assert len(statements) == 2 and scanner.refused is not None
    assert (scanner.refused.sqlstate, scanner.refused.position) == ("22025", 27)
