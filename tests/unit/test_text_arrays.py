"""pg/text_arrays.py: a big string made an Arrow array a slice at a time is the array
`pa.array` makes of it, beside small values and NULLs, for string and large_string, and is made
once for the same str."""

from __future__ import annotations

import pyarrow as pa
import pytest

from icegres.pg import text_arrays

pytestmark = pytest.mark.unit


@pytest.mark.parametrize("type_", [pa.string(), pa.large_string()])
def test_a_big_string_is_the_array_pa_array_makes(monkeypatch, type_):
    monkeypatch.setattr(text_arrays, "PIECE_CHARS", 7)
    big = "ab\u00e9\u20ac\U0001f600" * 9  # 45 characters over 7-character slices, 1-4 bytes each
    values = [None, "x", big, big[:7], "", big + "z", None]
    made = text_arrays.array(values, type_)
    assert made.type == type_ and made.to_pylist() == values
    assert made.combine_chunks().equals(pa.array(values, type=type_))
    made.validate(full=True)
    # The catalog is built again at every change of the lake, with the same str: its array is made once.
    again = text_arrays.array(["y", big], type_)
    assert again.chunk(1).buffers()[2].address == made.chunk(1).buffers()[2].address
    assert again.to_pylist() == ["y", big]
    other = "".join([big[:5], big[5:]])  # the same text, another str: made anew
    assert text_arrays.array([other], type_).chunk(0).buffers()[2].address != made.chunk(1).buffers()[2].address


def test_other_types_and_small_strings_are_pa_arrays_own():
    assert text_arrays.array([1, None, 3], pa.int32()).equals(pa.array([1, None, 3], type=pa.int32()))
    assert text_arrays.array(["a", None], pa.string()).equals(pa.array(["a", None], type=pa.string()))
    assert text_arrays.array([], pa.string()).equals(pa.array([], type=pa.string()))
