"""sql/pieces.py: a big Query's text scanned in pieces splits as lexer.py splits it, whatever
the pieces, and gives big comments as GAP and big literals as their values."""

from __future__ import annotations

import random

import pytest

from icegres.sql import lexer
from icegres.sql.pieces import GAP, Literal, scan_pieces

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
        assert [lit.value.text() for lit in literals] == ["ab'c" * 3000, "é" * 6000]
        assert literals[1].value.size == 12000 and literals[1].value.chars == 6000
        assert items.count(GAP) == 2
        assert "E'" + "q" * 5000 + "'" in "".join(i for i in items if isinstance(i, str))  # kept as written
