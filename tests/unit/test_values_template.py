"""sql/values_template.py: the one expression shape of a big VALUES column's rows, with a slot
per constant that differs between them."""

from __future__ import annotations

import pytest

from icegres.sql.values_template import template

pytestmark = pytest.mark.unit


def test_a_number_that_differs_is_a_slot_and_the_rest_stays_in_the_text() -> None:
    shape = template(["'name ' || 1", "'name '||2", "'name ' /* c */ || 30"])
    assert shape is not None and shape.text == "'name ' || 1"
    [slot] = shape.slots
    assert shape.text[slot.offset:] == "1" and slot.values == [1, 2, 30]


def test_strings_are_their_contents_and_numbers_their_values() -> None:
    shape = template(["md5('a') || 1.5", "md5('it''s') || 2.25"])
    assert shape is not None
    assert [s.values for s in shape.slots] == [["a", "it's"], [1.5, 2.25]]
    assert [shape.text[s.offset] for s in shape.slots] == ["'", "1"]


def test_a_constant_the_same_in_every_row_is_no_slot() -> None:
    shape = template(["round(1, 2) + 7", "round(1, 2) + 8"])
    assert shape is not None and [s.values for s in shape.slots] == [[7, 8]]


@pytest.mark.parametrize("items", [
    ["now()", "now()"],  # nothing differs (constant_rows evaluates it as one expression)
    ["1 + 1"],  # one row
    ["1 + 1", "1 - 1"],  # another operator
    ["upper('a')", "lower('a')"],  # another function
    ["1 + 1", "-1 + 1"],  # a sign in one row only
    ["1 + 1", "1.5 + 1"],  # an integer beside a decimal: PostgreSQL types each row's apart
    ["9223372036854775808 + 1", "1 + 1"],  # beyond a bigint
    ["'a' || 1", "E'b' || 1"],  # an escape string in one row
    ["'a'\n'b'", "'c'\n'd'"],  # strings PostgreSQL glues across a newline
    ["$$a$$ || 1", "$$b$$ || 1"],  # dollar quotes
    ["'a", "'b"],  # unterminated
])
def test_rows_of_no_one_shape_answer_none(items: list[str]) -> None:
    assert template(items) is None


def test_names_are_compared_as_the_lexer_folds_them() -> None:
    shape = template(["UPPER('a')", "upper('b')"])
    assert shape is not None and shape.slots[0].values == ["a", "b"]
