"""COPY FROM field splitting: Arrow's vectorised reader must split exactly as the row-by-row
parser (PostgreSQL's rules) does, or step aside; both must survive arbitrary bytes."""

from __future__ import annotations

import pyarrow as pa
import pytest
from hypothesis import HealthCheck, example, given, settings
from hypothesis import strategies as st

from icegres.engine.assign import _cast_text, _vector_text
from icegres.pg.copy_format import CopyFormat, _arrow_fields, copy_fields, exact_fields
from icegres.pg.errors import PgError

pytestmark = pytest.mark.unit

FORMATS = {
    "text": {},
    "csv": {"format": "csv"},
    "csv header": {"format": "csv", "header": "true"},
    "text pipe": {"delimiter": "|"},
    "csv null word": {"format": "csv", "null": "NULL"},
    "csv header match": {"format": "csv", "header": "match"},
    "text header match": {"header": "match"},
}
# Options that change values, for the arbitrary-bytes test only (they break the round trip).
FORCED = {"format": "csv", "header": "match", "force_null": "(a)", "force_not_null": "(b)"}
# Characters that matter to one format or the other, plus ordinary text.
ALPHABET = st.sampled_from(list('\t\n\r\\",|. aN0é€') + ["\\N", "NULL", '""'])
VALUES = st.one_of(st.none(), st.text(ALPHABET.filter(lambda c: len(c) == 1), max_size=6),
                   st.text(max_size=4))


def _columns(fields) -> list[list[str | None]]:
    return [col.to_pylist() for col in fields]


@given(kind=st.sampled_from(sorted(FORMATS)), ncols=st.integers(1, 4), data=st.data())
@settings(max_examples=400, deadline=None, suppress_health_check=[HealthCheck.too_slow])
def test_rows_written_as_copy_text_read_back_exactly(kind: str, ncols: int, data) -> None:
    fmt = CopyFormat(FORMATS[kind])
    rows = data.draw(st.lists(st.lists(VALUES, min_size=ncols, max_size=ncols), max_size=8))
    names = [f"c{i}" for i in range(ncols)]
    payload = (fmt.line(names) if fmt.header else "") + "".join(fmt.line(r) for r in rows)
    expected = [[r[j] for r in rows] for j in range(ncols)]
    got = _columns(copy_fields(payload.encode(), fmt, names))
    assert got == expected
    assert _columns(exact_fields(payload.encode(), fmt, names)) == expected


@given(kind=st.sampled_from(sorted(FORMATS)), ncols=st.integers(1, 3),
       text=st.lists(ALPHABET, max_size=30).map("".join))
@settings(max_examples=600, deadline=None)
def test_fast_path_agrees_with_the_exact_parser_on_any_input(kind: str, ncols: int, text: str) -> None:
    fmt = CopyFormat(FORMATS[kind])
    data = text.encode()
    names = [f"c{i}" for i in range(ncols)]
    fast = _arrow_fields(data, fmt, ncols)
    try:
        exact = _columns(exact_fields(data, fmt, names))
    except PgError:
        exact = None  # the exact parser refuses: the fast path must have stepped aside
    if fast is not None:
        assert _columns(fast) == exact


@given(raw=st.binary(max_size=64), kind=st.sampled_from([*sorted(FORMATS), "forced"]))
@settings(max_examples=300, deadline=None)
def test_arbitrary_bytes_give_fields_or_a_clear_error(raw: bytes, kind: str) -> None:
    fmt = CopyFormat(FORCED if kind == "forced" else FORMATS[kind])
    try:
        copy_fields(raw, fmt, ["a", "b"])
    except PgError as exc:
        assert exc.sqlstate.startswith("22")  # 22P04 bad COPY line, 22021 bad UTF-8


def test_large_plain_input_takes_the_vectorised_path() -> None:
    fmt = CopyFormat({"format": "csv"})
    data = "".join(f'{i},"x,{i}",,""\n' for i in range(10_000)).encode()
    fast = _arrow_fields(data, fmt, 4)
    assert fast is not None
    cols = _columns(fast)
    assert cols[0][:2] == ["0", "1"] and cols[1][1] == "x,1"
    assert cols[2][0] is None and cols[3][0] == ""  # unquoted empty is NULL, quoted is not


# --- typed columns: Arrow's vectorised reading must equal the input functions' -----------------

_DIGITS = st.integers(0, 9).map(str)
TIMESTAMP_TEXT = st.builds(
    lambda y, mo, d, sep, h, mi, s, frac, zone: f"{y:04d}-{mo:02d}-{d:02d}{sep}{h:02d}:{mi:02d}:{s:02d}{frac}{zone}",
    st.integers(0, 10000), st.integers(0, 13), st.integers(0, 32), st.sampled_from([" ", "T", "  "]),
    st.integers(0, 25), st.integers(0, 60), st.integers(0, 61),
    st.one_of(st.just(""), st.lists(_DIGITS, min_size=1, max_size=8).map(lambda ds: "." + "".join(ds))),
    st.sampled_from(["", "Z", "+00", "-08", "+05:30", "+0530", "+15:59", "+16:00", "-12:45", " UTC", "+1"]),
)


@given(values=st.lists(st.one_of(st.none(), TIMESTAMP_TEXT), min_size=1, max_size=5),
       tz=st.sampled_from([None, "UTC"]), zone=st.sampled_from(["UTC", "Europe/Berlin", "-03:30"]))
@settings(max_examples=500, deadline=None)
@example(values=["0001-01-01 00:00:00+05:30"], tz="UTC", zone="UTC")  # before year 1 in UTC (found by this test)
def test_vectorised_timestamps_read_as_the_input_function_does(values, tz, zone) -> None:
    """The fast path takes only text that reads the same in every session TimeZone."""
    column = pa.chunked_array([pa.array(values, pa.string())])
    to = pa.timestamp("us", tz=tz)
    fast = _vector_text(column, to)
    try:
        exact = _cast_text(column, to, zone)
    except PgError:
        exact = None
    if fast is not None:
        assert exact is not None and fast.to_pylist() == exact.to_pylist()


@given(values=st.lists(st.one_of(st.none(), st.sampled_from(
    ["t", "f", "T", "TRUE", "false", "yes", "no", "on", "off", "1", "0", " t", "tr", "x", ""])),
    min_size=1, max_size=6))
@settings(max_examples=300, deadline=None)
def test_vectorised_booleans_read_as_the_input_function_does(values) -> None:
    column = pa.chunked_array([pa.array(values, pa.string())])
    fast = _vector_text(column, pa.bool_())
    try:
        exact = _cast_text(column, pa.bool_(), "UTC")
    except PgError:
        exact = None
    if fast is not None:
        assert exact is not None and fast.to_pylist() == exact.to_pylist()
    if all(v is None or v.lower() in ("t", "f", "true", "false") for v in values):
        assert fast is not None  # the plain forms COPY sends take the vectorised path


@given(values=st.lists(st.one_of(st.none(), st.from_regex(r"\A[+-]?[0-9]{0,16}(\.[0-9]{0,4})?\Z"),
                                 st.sampled_from(["NaN", "1e3", " 1", "-0", ".5", "5."])),
                       min_size=1, max_size=5),
       scale=st.integers(0, 3))
@settings(max_examples=500, deadline=None)
def test_vectorised_numerics_read_as_the_input_function_does(values, scale) -> None:
    column = pa.chunked_array([pa.array(values, pa.string())])
    to = pa.decimal128(15, scale)
    fast = _vector_text(column, to)
    try:
        exact = _cast_text(column, to, "UTC")
    except (PgError, pa.ArrowInvalid):
        exact = None
    if fast is not None:
        assert exact is not None and fast.to_pylist() == exact.to_pylist()
