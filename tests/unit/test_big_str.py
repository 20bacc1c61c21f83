"""pg/big_str.py: a big str filled a part at a time is the str `"".join` makes — equal, same
hash, same kind (a str is always of its narrowest kind: CPython compares kinds first) — and the
GIL is let go while it is filled."""

from __future__ import annotations

import sys
import threading
import time

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from icegres.pg import big_str

pytestmark = pytest.mark.unit

# Characters of every kind: ASCII, Latin-1, the BMP (no surrogates: text from UTF-8 has none), astral.
_CHARS = st.one_of(st.characters(max_codepoint=0x7F), st.characters(min_codepoint=0x80, max_codepoint=0xFF),
                   st.characters(min_codepoint=0x100, max_codepoint=0xFFFF, blacklist_categories=("Cs",)),
                   st.characters(min_codepoint=0x10000))


def test_the_layout_check_passed_here() -> None:
    assert big_str._new is not None and big_str._new_bytes is not None  # else every join below is the plain one


@settings(max_examples=300, deadline=None)
@given(st.lists(st.text(_CHARS, max_size=40), max_size=8))
def test_a_join_is_the_plain_join(parts: list[str]) -> None:
    saved = big_str.BIG_CHARS
    big_str.BIG_CHARS = 3  # every join of 3 characters or more takes the filled path, in slices of 3
    try:
        made = big_str.join(parts)
    finally:
        big_str.BIG_CHARS = saved
    plain = "".join(parts)
    assert made == plain
    assert hash(made) == hash(plain)
    assert sys.getsizeof(made) == sys.getsizeof(plain)  # the same kind: canonical
    assert made.isascii() == plain.isascii()
    assert made.encode("utf-8", "surrogatepass") == plain.encode("utf-8", "surrogatepass")
    assert {made: 1}.get(plain) == 1


def test_decoded_utf8_pieces_split_inside_characters() -> None:
    text = "ab\u00e9\u0101\U0001f600" * 400_000
    data = text.encode()
    pieces = [data[i:i + 65_535] for i in range(0, len(data), 65_535)]  # cuts through characters
    made = big_str.decoded(pieces)
    assert made == text and sys.getsizeof(made) == sys.getsizeof(text)


@pytest.mark.parametrize("join", [big_str.join, pytest.param("".join, marks=pytest.mark.xfail(strict=True))],
                         ids=["filled", "plain_join_fails_this"])
def test_the_gil_is_let_go_while_a_big_str_is_filled(join) -> None:  # noqa: ANN001
    """A thread that ticks every half millisecond ticks during the join: it was not one GIL
    hold (the plain join, one C call, lets no tick in)."""
    parts = ["abcdefghi\u00e9" * 100_000] * 50  # 100 MB of UCS-2
    saved = sys.getswitchinterval()
    sys.setswitchinterval(0.0005)
    stop, ticks = threading.Event(), []

    def tick() -> None:
        while not stop.is_set():
            time.sleep(0.0005)
            ticks.append(time.perf_counter())

    ticker = threading.Thread(target=tick)
    ticker.start()
    try:
        time.sleep(0.01)
        started = time.perf_counter()
        made = join(parts)
        ended = time.perf_counter()
    finally:
        stop.set()
        ticker.join()
        sys.setswitchinterval(saved)
    assert len(made) == 50_000_000
    # Not a bound on the join's time: that the ticker ran inside it.
    inside = [t for t in ticks if started < t < ended]
    assert len(inside) >= 3, (ended - started, len(inside))


@settings(max_examples=200, deadline=None)
@given(st.lists(st.binary(max_size=40), max_size=8))
def test_a_bytes_join_is_the_plain_join(parts: list[bytes]) -> None:
    saved = big_str.BIG_CHARS
    big_str.BIG_CHARS = 3
    try:
        made = big_str.join_bytes(parts)
    finally:
        big_str.BIG_CHARS = saved
    assert type(made) is bytes
    assert made == b"".join(parts) and hash(made) == hash(b"".join(parts))
    assert made[:5] + b"x" == b"".join(parts)[:5] + b"x"
