"""`?` placeholders (the qmark paramstyle of the ADBC and JDBC Flight SQL drivers) numbered as
PostgreSQL's `$n`: only where the lexer reads an operator character, in order, never gluing to a
neighbour; mixed with `$n` a 42601 at the placeholder that mixes; on any text, a result or a
PgError, nothing else."""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from icegres.pg.errors import PgError
from icegres.sql.lexer import Kind, tokenize
from icegres.sql.placeholders import number_qmarks
from icegres.sql.statement import Kind as StatementKind
from icegres.sql.statement import classify

pytestmark = pytest.mark.unit


@pytest.mark.parametrize(("sent", "read"), [
    ("select ?", "select $1"),
    ("select * from t where a = ? and b = ?", "select * from t where a = $1 and b = $2"),
    ("insert into t values (?, ?, ?)", "insert into t values ($1, $2, $3)"),
    ("select ?::int, ?", "select $1::int, $2"),
    ("select '?', ? -- ?\n", "select '?', $1 -- ?\n"),
    ("select 1 /* ? /* ? */ ? */ + ?", "select 1 /* ? /* ? */ ? */ + $1"),
    ('select "a?" from t where x = ?', 'select "a?" from t where x = $1'),
    ("select $$?$$, $q$ ? $q$, ?", "select $$?$$, $q$ ? $q$, $1"),
    ("select E'\\'?', ?", "select E'\\'?', $1"),
    ("select U&'?', U&\"?\", ?", "select U&'?', U&\"?\", $1"),
    # A `$n` in place of a `?` never joins its neighbour into another token.
    ("select x?", "select x $1"),
    ("select ?1", "select $1 1"),
    ("select ??", "select $1  $2"),
    ("select ?$$x$$", "select $1 $$x$$"),
    ("select a$?", "select a$ $1"),
    # jsonb's `?` operators: the client declared `?` a placeholder, so it is one.
    ("select data ?| array['a'] from t", "select data $1| array['a'] from t"),
    # Text without a `?` placeholder is itself.
    ("select $1, '?'", "select $1, '?'"),
    ("select 'open ?", "select 'open ?"),
    ("", ""),
])
def test_placeholders_are_numbered_in_order(sent: str, read: str) -> None:
    assert number_qmarks(sent) == read


@pytest.mark.parametrize(("sent", "position"), [
    ("select $1, ?", 12),
    ("select ?, $1", 11),
    ("select ? + $2 -- ?", 12),
])
def test_mixing_both_styles_is_a_syntax_error_at_the_second(sent: str, position: int) -> None:
    with pytest.raises(PgError) as exc:
        number_qmarks(sent)
    assert exc.value.sqlstate == "42601"
    assert 'cannot mix "?" and "$n"' in exc.value.message
    assert exc.value.position == position


def test_classify_carries_the_numbered_text_only_when_asked() -> None:
    stmt = classify("  select * from t where id = ? and v = ?; ", qmark=True)
    assert stmt.kind is StatementKind.QUERY
    assert stmt.sql == "select * from t where id = $1 and v = $2"
    assert stmt.max_param == 2
    assert classify("insert into t values (?, ?)", qmark=True).max_param == 2
    assert classify("select ?").sql == "select ?"  # pgwire: `?` stays PostgreSQL's to read
    with pytest.raises(PgError, match="cannot mix"):
        classify("select ? + $1", qmark=True)


# Text made of the pieces that change how the scanner reads a `?` and its neighbours.
PIECES = st.sampled_from([
    "?", "?", "??", "select", " ", "\n", "a", "E", "U&", "x", "1", "2.5", ".", "$1", "$", "$$", "$t$", "'",
    "''", '"', "--", "/*", "*/", ";", "::", ":", "(", ")", ",", "\\", "é", "٣", "=", "|", "&", "@", "-", "\t",
])
SQLISH = st.lists(PIECES, max_size=40).map("".join) | st.text(max_size=200)


@given(SQLISH)
@settings(max_examples=2000, deadline=None)
def test_any_text_numbers_exactly_the_operator_question_marks_or_is_refused(sent: str) -> None:
    before = tokenize(sent, comments=True)
    marks = [t for t in before if t.kind is Kind.OP and t.text == "?"]
    try:
        read = number_qmarks(sent)
    except PgError as exc:
        assert exc.sqlstate == "42601"
        assert marks and any(t.kind is Kind.PARAM for t in before)
        return
    after = tokenize(read, comments=True)
    # The same tokens, each `?` operator now the next `$n`: nothing else moved or merged.
    assert len(after) == len(before)
    number = 0
    for old, new in zip(before, after, strict=True):
        if old.kind is Kind.OP and old.text == "?":
            number += 1
            assert (new.kind, new.text) == (Kind.PARAM, f"${number}")
        else:
            assert (new.kind, new.text) == (old.kind, old.text)
    assert number == len(marks)
    if not marks:
        assert read == sent


@given(SQLISH)
@settings(max_examples=1000, deadline=None)
def test_classifying_any_text_as_flight_sql_raises_only_pg_errors(sent: str) -> None:
    try:
        stmt = classify(sent, qmark=True)
    except PgError as exc:
        assert exc.sqlstate == "42601"
        return
    assert "?" not in "".join(t.text for t in tokenize(stmt.sql) if t.kind is Kind.OP)
    assert stmt.max_param >= 0
