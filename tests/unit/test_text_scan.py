"""Case-insensitive searches of statement text a piece at a time (sql/text_scan.py)."""

from __future__ import annotations

import re

import pytest

from icegres.engine.rewrite import needs_rewrite
from icegres.sql.text_scan import OVERLAP, PIECE, search

pytestmark = pytest.mark.unit

CATALOG = re.compile(r"pg_|information_schema")


@pytest.mark.parametrize("at", [0, PIECE - 3, PIECE - 1, PIECE, PIECE + OVERLAP - 3, 3 * PIECE + 7])
def test_a_word_is_found_wherever_it_falls(at: int) -> None:
    text = "x" * at + "PG_Class" + "y" * (4 * PIECE - at)
    assert search(CATALOG, text)
    assert needs_rewrite(text)


def test_nothing_is_found_in_a_big_text_without_it() -> None:
    text = "select '" + "x" * (5 * PIECE) + "'"
    assert not search(CATALOG, text)
    assert not needs_rewrite(text)


@pytest.mark.parametrize("sql", ["select Extract ( Second from t)", "select DATE_PART('seconds', t)",
                                 "select x::Character Varying ( 3)", "select a / b", "select * from Information_Schema.tables"])
def test_the_rewrite_markers_match_in_any_case(sql: str) -> None:
    assert needs_rewrite(sql)


@pytest.mark.parametrize("at", [0, PIECE - 4, PIECE + OVERLAP - 5, 2 * PIECE + 1])
def test_a_literal_word_is_found_as_written_wherever_it_falls(at: int) -> None:
    """A str among the patterns is a literal (its `(` is a parenthesis, not a group)."""
    text = "x" * at + "Avg(" + "y" * (3 * PIECE - at)
    assert search(("avg(",), text)
    assert needs_rewrite(text)
    assert not search(("avg(",), text.replace("Avg(", "Avgx"))
