"""The one lexer (icegres/sql/lexer.py) on untrusted text: it never raises, its tokens cover the
text in order, and what splits statements, shapes them and finds error positions agrees with it."""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from icegres.sql.lexer import (
    Kind,
    scan,
    split_quoted,
    strip_leading_comments,
    tokenize,
)
from icegres.sql.pieces import split_statements
from icegres.sql.shape import fill_shape, literal_shape, masked_literals

pytestmark = pytest.mark.unit

# Text made of the pieces that change how the scanner reads what follows.
PIECES = st.sampled_from([
    "select", " ", "\n", "a", "E", "U&", "b", "x", "1", "2.5", ".5e3", "$1", "$$", "$t$", "'", "''", '"',
    "--", "/*", "*/", ";", "::", "(", ")", ",", "\\", "é", "٣", "=", "<>", "\t",
])
SQLISH = st.lists(PIECES, max_size=40).map("".join) | st.text(max_size=200)


@given(SQLISH)
@settings(max_examples=1500, deadline=None)
def test_tokens_cover_the_text_in_order_and_never_raise(sql: str) -> None:
    tokens = tokenize(sql, comments=True)
    pos = 0
    for token in tokens:
        assert token.start >= pos
        gap = sql[pos:token.start].strip()
        # Only whitespace between tokens; an unterminated string starts at its quote (where
        # PostgreSQL reports it), after its prefix.
        assert gap == "" or (token.kind is Kind.UNTERMINATED and gap.lower() in ("e", "b", "x", "n", "u&"))
        assert sql[token.start:token.end] == token.text and token.text
        pos = token.end
    assert sql[pos:].strip() == ""
    unterminated = [i for i, t in enumerate(tokens) if t.kind is Kind.UNTERMINATED]
    assert unterminated in ([], [len(tokens) - 1]) and (not unterminated or tokens[-1].end == len(sql))
    assert [(k, s, e) for k, s, e in scan(sql, comments=True)] == [(t.kind, t.start, t.end) for t in tokens]


@given(SQLISH)
@settings(max_examples=1000, deadline=None)
def test_statements_are_the_text_cut_at_top_level_semicolons(sql: str) -> None:
    pieces = split_statements(sql)
    cursor = 0
    for piece in pieces:
        at = sql.find(piece, cursor)
        assert at >= 0  # each statement is the text itself, in order
        assert strip_leading_comments(piece)
        cursor = at + len(piece)
    semis = [t.start for t in tokenize(sql) if t.kind is Kind.OP and t.text == ";"]
    assert len(pieces) <= len(semis) + 1


@given(SQLISH)
@settings(max_examples=1000, deadline=None)
def test_quoted_pieces_put_back_together_are_the_text(sql: str) -> None:
    assert "".join(part for part, _ in split_quoted(sql)) == sql


@given(st.integers(min_value=0), st.integers(min_value=0), st.text(alphabet="abc '", max_size=8), SQLISH)
@settings(max_examples=500, deadline=None)
def test_statements_differing_in_value_literals_share_a_shape(a: int, b: int, s: str, tail: str) -> None:
    quoted = "'" + s.replace("'", "''") + "'"
    assert literal_shape(f"select * from t where a = {a} and s = {quoted}") == literal_shape(
        f"select * from t where a = {b} and s = 'other'")
    assert literal_shape(tail) == literal_shape(tail)  # never raises, a function of the text


@given(SQLISH, st.integers(min_value=0), st.text(alphabet="ab '", max_size=6))
@settings(max_examples=300, deadline=None)
def test_a_shape_filled_with_its_masked_literals_is_the_text(tail: str, n: int, s: str) -> None:
    quoted = "'" + s.replace("'", "''") + "'"
    for sql in (tail, f"select {n}, {quoted} from t where a in ({n}, {quoted}) {tail}"):
        literals = masked_literals(sql)
        if literals is not None:
            assert fill_shape(literal_shape(sql), literals) == sql


def test_postgres_lexical_rules() -> None:
    kinds = [(t.kind, t.value) for t in tokenize("select E'a\\'b', U&\"X\", 'it''s', $t$ 'no' $t$, $1, x::int")]
    assert kinds == [
        (Kind.NAME, "select"), (Kind.STRING, "a'b"), (Kind.OP, ","), (Kind.QUOTED_NAME, "X"), (Kind.OP, ","),
        (Kind.STRING, "it's"), (Kind.OP, ","), (Kind.STRING, "$t$ 'no' $t$"), (Kind.OP, ","), (Kind.PARAM, "$1"),
        (Kind.OP, ","), (Kind.NAME, "x"), (Kind.OP, "::"), (Kind.NAME, "int"),
    ]
    assert tokenize("/* a /* nested */ still */ select")[0].value == "select"
    assert tokenize("select 'open")[-1].kind is Kind.UNTERMINATED
    assert [t.kind for t in tokenize("2$a$ x $a$")] == [Kind.NUMBER, Kind.STRING]  # a dollar quote after a number
    assert [t.kind for t in tokenize("a$$b")] == [Kind.NAME]  # `$` inside a name
    assert [t.kind for t in tokenize("٣")] == [Kind.NAME]  # non-ASCII is a letter, as in PostgreSQL
    assert split_statements("select 1; select ';'; -- done") == ["select 1", "select ';'"]
