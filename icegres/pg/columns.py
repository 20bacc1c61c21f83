"""Arrow columns rendered in PostgreSQL's text and binary formats a column at a time.

The common types are rendered with pyarrow.compute and numpy into pieces (`icegres.pg.pieces`);
rare values fall back to the scalar renderers of `text_out` and `binary_out`, and the tests hold
both paths to PostgreSQL itself."""

from __future__ import annotations

import functools
from collections.abc import Callable, Iterator
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from icegres.pg.binary_out import _NUMERIC_NEG, _NUMERIC_POS, _binary_value
from icegres.pg.clock import (
    _DAYS_1970_TO_2000,
    _TZDISP_LIMIT_S,
    _US_1970_TO_2000,
    _US_PER_DAY,
    _US_PER_S,
    TextSettings,
    _days_from_civil,
    _year_start_us,
    _zone,
)
from icegres.pg.pieces import (
    _HEX_PAIRS,
    _as_binary,
    _bitmap,
    _bool_values,
    _Column,
    _column_from_fixed,
    _column_from_matrix,
    _column_from_python,
    _column_from_varlen,
    _fixed_piece,
    _fixed_values,
    _length_words,
    _Piece,
    _piece_lengths,
    _ragged_piece,
    _validity,
    _varlen_lengths,
)
from icegres.pg.text_out import (
    _MIDPOINT_CANDIDATES_MIN,
    _date_text,
    _float_text,
    _offset_text,
    _time_of_day_text,
    _timestamp_text,
    _timestamptz_text,
    encode_text_value,
)
from icegres.pg.types import (
    FLOAT4,
    INT2,
    INT4,
    INT8,
    INTERVAL,
    NUMERIC,
    TIMESTAMPTZ,
    UUID,
    PgType,
    _is_list_type,
    _is_uuid_type,
    _storage,
    pg_type_for_arrow,
)

# --- integers, booleans -----------------------------------------------------------------------------

_BINARY_INT_DTYPE: dict[int, np.dtype[Any]] = {
    INT2.oid: np.dtype(">i2"),
    INT4.oid: np.dtype(">i4"),
    INT8.oid: np.dtype(">i8"),
}


def _encode_int(arr: pa.Array, t: PgType, fmt: int, settings: TextSettings) -> _Column:
    if fmt == 0:
        valid = _validity(arr)
        piece = _int_text_piece(_fixed_values(arr, np.dtype(arr.type.to_pandas_dtype())), valid)
        if piece is None:
            return _column_from_varlen(pc.cast(arr, pa.string()))
        lens = _piece_lengths(piece)
        return _Column([_fixed_piece(_length_words(lens, valid)), piece], lens + 4)
    if t.oid == NUMERIC.oid:  # uint64 widened to numeric
        return _numeric_binary_column(pc.cast(arr, pa.string()), 0)
    values = _fixed_values(arr, np.dtype(arr.type.to_pandas_dtype()))
    return _column_from_fixed(values.astype(_BINARY_INT_DTYPE[t.oid]), _validity(arr))


def _int_text_piece(values: np.ndarray, valid: np.ndarray | None) -> _Piece | None:
    """Integers as text, right-aligned in a matrix (so pieces after them can share it); None when
    some magnitude needs more than 32 bits, where numpy's digit arithmetic is slow."""
    n = len(values)
    if valid is not None:
        values = np.where(valid, values, 0)
    low, high = int(values.min(initial=0)), int(values.max(initial=0))
    if low <= -(2**32) or high >= 2**32:
        return None
    values = values.astype(np.int64)  # no overflow in abs() or '-' below for narrow types
    magnitude = np.abs(values).astype(np.uint32) if low < 0 else values.astype(np.uint32)
    digits_max = len(str(max(-low, high)))
    width = (low < 0) + digits_max
    mat = np.empty((n, width), dtype=np.uint8)
    for k, digit in enumerate(_digits(magnitude, digits_max)):
        mat[:, width - 1 - k] = digit
    digits = np.ones(n, dtype=np.int64)
    for k in range(1, digits_max):
        digits += magnitude >= 10**k
    starts = width - digits
    if low < 0:
        negative = values < 0
        starts -= negative
        mat[negative.nonzero()[0], starts[negative]] = ord("-")
    if valid is not None:
        starts = np.where(valid, starts, width)
    return _ragged_piece(mat, width - starts, starts)


def _encode_bool(arr: pa.Array, fmt: int) -> _Column:
    values = _bool_values(arr)
    byte = np.where(values, ord("t"), ord("f")) if fmt == 0 else values
    return _column_from_fixed(byte.astype(np.uint8), _validity(arr))


# --- floats ------------------------------------------------------------------------------------------
#
# Arrow's float->string cast yields the same shortest round-trip digits as PostgreSQL's Ryu output,
# but lays them out differently: fixed notation iff -7 <= X <= 9 (X = decimal exponent), exponent
# without zero padding ('1e-7'), 'inf'/'nan'. PostgreSQL uses fixed iff -4 <= X < 15 (float8) or
# < 6 (float4) and at least two exponent digits. Rows are classified by magnitude (comparing against
# the type's own nearest power of ten, which is consistent with the shortest repr) and only the
# classes where the layouts differ are rewritten with regexes.


def _rewrite(s: pa.Array, mask: np.ndarray, fn: Callable[[pa.Array], pa.Array]) -> pa.Array:
    """s with the rows in mask replaced by fn(those rows)."""
    if not mask.any():
        return s
    return pc.replace_with_mask(s, pa.array(mask), fn(s.filter(pa.array(mask))))


def _fixed_to_scientific(sub: pa.Array, exps: np.ndarray) -> pa.Array:
    t = pc.replace_substring_regex(sub, r"\.", "")
    t = pc.replace_substring_regex(t, r"^(-?)0+", r"\1")
    t = pc.replace_substring_regex(t, r"0+$", "")
    t = pc.replace_substring_regex(t, r"^(-?\d)(\d)", r"\1.\2")
    suffix = pa.array([f"e{'-' if x < 0 else '+'}{abs(x):02d}" for x in range(-9, 10)]).take(
        pa.array(exps + 9)
    )
    return pc.binary_join_element_wise(t, suffix, "")


def _scientific_to_fixed(sub: pa.Array, exp: int) -> pa.Array:
    t = pc.replace_substring_regex(
        sub, r"^(-?)(\d)(?:\.(\d*))?e\+\d+$", r"\1\2\3" + "0" * (exp + 1)
    )
    t = pc.replace_substring_regex(t, rf"^(-?\d{{{exp + 1}}})(\d*?)0*$", r"\1.\2")
    return pc.replace_substring_regex(t, r"\.$", "")


def _float_text_column(arr: pa.Array, float4: bool) -> pa.Array:
    ftype = np.float32 if float4 else np.float64
    values = _fixed_values(arr, np.dtype(ftype))
    s = pc.cast(arr, pa.string())
    with np.errstate(invalid="ignore"):
        a = np.abs(values)
        # Where both layouts agree: zero, and 1e-4 <= |v| < 1e6 (float4) or 1e10 (float8).
        agree = (a == 0) | ((a >= ftype(1e-4)) & (a < ftype(1e6 if float4 else 1e10)))
    valid = _validity(arr)
    odd = ~agree if valid is None else ~agree & valid  # NULL slots hold garbage: leave them be
    if not odd.any():
        return s
    # Rewrite only the odd rows, as one small array, and put them back in one pass.
    return _rewrite(s, odd, lambda sub: _float_layout_to_pg(sub, values[odd], float4))


def _float_layout_to_pg(s: pa.Array, values: np.ndarray, float4: bool) -> pa.Array:
    """Arrow's renderings of `values` (none of them in the range where layouts agree) as PG's."""
    ftype = np.float32 if float4 else np.float64
    finite = np.isfinite(values)
    a = np.abs(np.where(finite, values, 1))
    # X = decimal exponent, from the powers of ten 1e-9 .. 1e16 that |v| reaches (-10: below 1e-9).
    powers = np.array([10.0**k for k in range(-9, 17)], dtype=ftype)
    exp = np.searchsorted(powers, a, side="right").astype(np.int64) - 10
    hi = 6 if float4 else 15
    small = finite & (exp >= -6) & (exp <= -5)
    s = _rewrite(s, small, lambda sub: _fixed_to_scientific(sub, exp[small]))
    if float4:
        big = finite & (exp >= 6) & (exp <= 9)
        s = _rewrite(s, big, lambda sub: _fixed_to_scientific(sub, exp[big]))
    else:
        for x in range(10, hi):
            s = _rewrite(s, finite & (exp == x), functools.partial(_scientific_to_fixed, exp=x))
    both_sci = finite & ((exp <= -7) | (exp >= max(hi, 10)))
    s = _rewrite(
        s, both_sci, lambda sub: pc.replace_substring_regex(sub, r"e([+-])(\d)$", r"e\10\2")
    )
    # Huge magnitudes may have a shortest candidate sitting exactly on a rounding midpoint, which
    # Arrow accepts and PostgreSQL does not: render those rows one by one.
    slow = ~finite | (a >= ftype(_MIDPOINT_CANDIDATES_MIN[float4]))
    if slow.any():
        texts = [_float_text(float(v), float4, 1) for v in values[slow]]
        s = pc.replace_with_mask(s, pa.array(slow), pa.array(texts, pa.string()))
    return s


# Most float8 columns hold values read from short decimals (prices, distances): v is the double
# nearest to m / 10**k for a small k and an integer m of at most 15 digits. Then m / 10**k, trailing
# zeros dropped, is v's shortest round-trip text: any other decimal of at most 15 significant digits
# (DBL_DIG) maps to another double. Such a column is rendered with integer arithmetic, with no
# per-value formatting; a batch with any other value takes the general path above.
_DECIMAL_PLACES_MAX = 4  # 10**-4 is also where PostgreSQL's fixed notation starts
_SHORT_DECIMAL_ABS_MAX = 10**15  # DBL_DIG significant digits; |v| < 1e15 also stays fixed
_PLACES_SAMPLE_ROWS = 64


def _short_decimal_piece(values: np.ndarray, valid: np.ndarray | None) -> _Piece | None:
    """float8 values as PostgreSQL text, if every valid one is a short decimal (see above)."""
    n = len(values)
    sample = values[:_PLACES_SAMPLE_ROWS]
    if valid is not None:
        sample = sample[valid[:_PLACES_SAMPLE_ROWS]]
    with np.errstate(invalid="ignore", over="ignore"):
        places = next(
            (k for k in range(_DECIMAL_PLACES_MAX + 1) if _short_at(sample, k)[0].all()), None
        )
        if places is None:
            return None
        if valid is not None:
            values = np.where(valid, values, 0.0)
        short, scaled = _short_at(values, places)
        if not short.all():
            return None
    # Float arithmetic is exact here (integers below 2**53) and, unlike int64, vectorised.
    scale = 10.0**places
    magnitude = np.abs(scaled)
    whole_f = np.floor(magnitude / scale)
    whole_max = int(whole_f.max(initial=0))
    whole = whole_f.astype(np.uint32 if whole_max < 2**32 else np.uint64)
    frac = (magnitude - whole_f * scale).astype(np.uint32)
    int_digits_max = len(str(whole_max))
    point = 1 + int_digits_max  # column of '.', after room for a sign and the integer digits
    mat = np.empty((n, point + 1 + places), dtype=np.uint8)
    for k, digit in enumerate(_digits(whole, int_digits_max)):
        mat[:, point - 1 - k] = digit
    int_digits = np.ones(n, dtype=np.int64)
    for k in range(1, int_digits_max):
        int_digits += whole >= 10**k
    negative = np.signbit(values)  # -0.0 prints as "-0", as in PostgreSQL
    starts = point - int_digits - negative
    mat[negative.nonzero()[0], starts[negative]] = ord("-")
    mat[:, point] = ord(".")
    frac_digits = np.full(n, places, dtype=np.int64)  # less the trailing zeros
    zeros_so_far = np.ones(n, dtype=bool)
    for k, digit in enumerate(_digits(frac, places)):
        mat[:, point + places - k] = digit
        zeros_so_far &= digit == ord("0")
        frac_digits -= zeros_so_far
    lens = point - starts + np.where(frac_digits > 0, 1 + frac_digits, 0)
    if valid is not None:
        lens = np.where(valid, lens, 0)
    return _ragged_piece(mat, lens, starts)


def _short_at(values: np.ndarray, places: int) -> tuple[np.ndarray, np.ndarray]:
    """(which values are the double nearest to m / 10**places, m of at most 15 digits; m)."""
    scale = 10.0**places
    scaled = np.rint(values * scale)
    return (np.abs(scaled) < _SHORT_DECIMAL_ABS_MAX) & (scaled / scale == values), scaled


def _digits(values: np.ndarray, count: int) -> Iterator[np.ndarray]:
    """ASCII digits of unsigned integers, least significant first, `count` of them (zero-padded).
    Division by a constant is vectorised for unsigned types; '%' and int64 products are not."""
    for _ in range(count):
        quotient = values // 10
        yield (values - quotient * 10).astype(np.uint8) + np.uint8(ord("0"))
        values = quotient


def _encode_float(arr: pa.Array, t: PgType, fmt: int, settings: TextSettings) -> _Column:
    float4 = t.oid == FLOAT4.oid
    if pa.types.is_float16(arr.type):
        arr = pc.cast(arr, pa.float32())
    if fmt == 1:
        values = _fixed_values(arr, np.dtype(np.float32 if float4 else np.float64))
        return _column_from_fixed(values.astype(">f4" if float4 else ">f8"), _validity(arr))
    if settings.extra_float_digits <= 0:
        return _fallback(arr, t, fmt, settings)
    if not float4:
        valid = _validity(arr)
        piece = _short_decimal_piece(_fixed_values(arr, np.dtype(np.float64)), valid)
        if piece is not None:
            lens = _piece_lengths(piece)
            return _Column([_fixed_piece(_length_words(lens, valid)), piece], lens + 4)
    return _column_from_varlen(_float_text_column(arr, float4))


# --- decimals ----------------------------------------------------------------------------------------


def _decimal_text_column(arr: pa.Array) -> pa.Array:
    scale = arr.type.scale
    # Arrow switches to exponent notation for small values ("1.000E-7"); PostgreSQL never does. So
    # render the unscaled integer (scale 0: always plain digits) and place the point ourselves.
    s = _unscaled_digits(arr)
    if scale == 0:
        return s
    neg = pc.starts_with(s, "-")
    digits = pc.utf8_lpad(pc.utf8_ltrim(s, "-"), scale + 1, "0")
    int_part = pc.utf8_slice_codeunits(digits, 0, -scale)
    frac = pc.utf8_slice_codeunits(digits, -scale, 1 << 30)
    sign = pc.if_else(neg, "-", "")
    return pc.binary_join_element_wise(sign, int_part, ".", frac, "")


def _unscaled_digits(arr: pa.Array) -> pa.Array:
    """The decimal column's unscaled integers as strings ('-150' for -1.50 at scale 2)."""
    wide = pa.types.is_decimal256(arr.type)
    unscaled_type = pa.decimal256(76, 0) if wide else pa.decimal128(38, 0)
    unscaled = pa.Array.from_buffers(
        unscaled_type, len(arr), arr.buffers(), arr.null_count, arr.offset
    )
    return pc.cast(unscaled, pa.string())


_NUMERIC_HEADER = np.dtype(
    [("ndigits", ">i2"), ("weight", ">i2"), ("sign", ">u2"), ("dscale", ">i2")]
)


def _numeric_binary_column(unscaled: pa.Array, scale: int) -> _Column:
    """numeric_send for a column of unscaled integers (strings) at a fixed scale >= 0.

    The decimal point is aligned to a base-10000 digit boundary by padding the fraction on the
    right and the integer part on the left; each row's digits then run from its first to its last
    nonzero group, with the weight counting groups before the point.
    """
    n = len(unscaled)
    valid = _validity(unscaled)
    neg = np.asarray(
        pc.fill_null(pc.starts_with(unscaled, "-"), False).to_numpy(zero_copy_only=False),
        dtype=bool,
    )
    digits = pc.fill_null(pc.utf8_ltrim(unscaled, "-"), "0")
    pad_right = -scale % 4
    frac_groups = (scale + pad_right) // 4
    longest = int(pc.max(pc.utf8_length(digits)).as_py() or 1)
    width = -(-(longest + pad_right) // 4) * 4  # whole groups
    padded = pc.utf8_lpad(digits, width - pad_right, "0")
    chars = np.frombuffer(padded.buffers()[2], dtype=np.uint8, count=n * (width - pad_right))
    chars = chars.reshape(n, width - pad_right) - ord("0")
    if pad_right:
        chars = np.hstack([chars, np.zeros((n, pad_right), dtype=np.uint8)])
    quads = chars.reshape(n, width // 4, 4).astype(np.int16)
    groups = ((quads[:, :, 0] * 10 + quads[:, :, 1]) * 10 + quads[:, :, 2]) * 10 + quads[:, :, 3]
    nonzero = groups != 0
    any_digit = nonzero.any(axis=1)
    first = np.argmax(nonzero, axis=1)
    last = groups.shape[1] - 1 - np.argmax(nonzero[:, ::-1], axis=1)
    ndigits = np.where(any_digit, last - first + 1, 0)
    header = np.empty(n, dtype=_NUMERIC_HEADER)
    header["ndigits"] = ndigits
    header["weight"] = np.where(any_digit, groups.shape[1] - frac_groups - 1 - first, 0)
    header["sign"] = np.where(neg & any_digit, _NUMERIC_NEG, _NUMERIC_POS)
    header["dscale"] = scale
    shifted = np.take_along_axis(
        groups, np.minimum(first[:, None] + np.arange(groups.shape[1]), groups.shape[1] - 1), axis=1
    )
    body = shifted.astype(">i2").view(np.uint8).reshape(n, -1)
    lens = 8 + 2 * ndigits
    if valid is not None:
        lens = np.where(valid, lens, 0)
        ndigits = np.where(valid, ndigits, 0)
    header_bytes = header.view(np.uint8).reshape(n, 8)
    pieces: list[_Piece] = [_length_words(lens, valid), _fixed_piece(header_bytes, valid)]
    if ndigits.any():
        pieces.append(_ragged_piece(body, 2 * ndigits))
    return _Column(pieces, lens + 4)


def _encode_decimal(arr: pa.Array, t: PgType, fmt: int, settings: TextSettings) -> _Column:
    if arr.type.scale < 0:
        return _fallback(arr, t, fmt, settings)
    if fmt == 0:
        return _column_from_varlen(_decimal_text_column(arr))
    return _numeric_binary_column(_unscaled_digits(arr), arr.type.scale)


# --- dates, times, timestamps ------------------------------------------------------------------------
#
# Arrow's casts to string render years 1..9999 exactly as ISO DateStyle does ('0044-03-15',
# '2024-01-02 03:04:05.500000'), so they do the calendar work. We trim the fraction's trailing zeros
# and append the zone. Other rows (BC, years past 9999, PostgreSQL's infinities) are rare and are
# rendered one by one.


def _to_us(arr: pa.Array) -> np.ndarray:
    """Timestamp or time values as int64 µs, flooring finer units (µs is PostgreSQL's resolution)."""
    unit = arr.type.unit
    width = 4 if pa.types.is_time32(arr.type) else 8
    raw = _fixed_values(arr, np.dtype(np.int32 if width == 4 else np.int64)).astype(np.int64)
    if unit == "us":
        return raw
    if unit == "ns":
        return raw // 1000
    factor = 1000 if unit == "ms" else _US_PER_S
    limit = (
        2**63 - 1
    ) // factor  # saturate rather than wrap: keeps PostgreSQL's infinities infinite
    return np.clip(raw, -limit, limit) * factor


def _offset_piece(offset_s: np.ndarray, valid: np.ndarray) -> _Piece:
    """'+HH', '+HH:MM' or '+HH:MM:SS' per row (EncodeTimezone); nothing where not valid.

    A batch holds few distinct offsets (one for UTC, two for a zone with daylight saving), so each
    distinct one is rendered once and the rows pick theirs by index, into a matrix: one that every
    row fills whole (the usual case) merges with its neighbours in the join.
    """
    n = len(offset_s)
    lo, hi = int(offset_s.min()), int(offset_s.max())
    if lo == hi:
        distinct, codes = np.array([lo]), np.zeros(n, dtype=np.intp)
    elif hi - lo <= 4 * _TZDISP_LIMIT_S:
        present = np.zeros(hi - lo + 1, dtype=bool)
        present[offset_s - lo] = True
        distinct = np.flatnonzero(present)
        index = np.zeros(hi - lo + 1, dtype=np.intp)
        index[distinct] = np.arange(len(distinct))
        codes = index[offset_s - lo]
        distinct += lo
    else:
        distinct, codes = np.unique(offset_s, return_inverse=True)
    texts = [_offset_text(int(o)).encode() for o in distinct]
    width = max(len(t) for t in texts)
    table = np.zeros((len(texts), width), dtype=np.uint8)
    for i, text in enumerate(texts):
        table[i, : len(text)] = np.frombuffer(text, dtype=np.uint8)
    if len(texts) == 1:
        mat = np.tile(table[0], (n, 1))
        lens = np.where(valid, len(texts[0]), 0)
    else:
        mat = table[codes]
        lens = np.where(valid, np.array([len(t) for t in texts])[codes], 0)
    return _ragged_piece(mat, lens)


def _clock_column(
    clock: pa.Array,
    head: int,
    frac_us: np.ndarray,
    ok: np.ndarray,
    valid: np.ndarray | None,
    offsets: np.ndarray | None,
    rare: dict[int, str],
) -> _Column:
    """Field pieces for 'head chars' + trimmed '.ffffff' + zone of rows `ok`, plus `rare` texts.

    `clock` is Arrow's rendering (timestamp or time cast to string) of every row, `head` characters
    before the fraction; rows not ok (NULL or rare) may hold any well-formed value.
    """
    n = len(clock)
    width = head + 7
    lengths = _varlen_lengths(clock)
    if clock.null_count or int(lengths.min()) != width or int(lengths.max()) != width:
        raise AssertionError(f"Arrow rendered {clock.type} differently than expected: {clock[:1]}")
    first = int(
        np.frombuffer(clock.buffers()[1], dtype=np.int32, count=1, offset=clock.offset * 4)[0]
    )
    text = np.frombuffer(clock.buffers()[2], dtype=np.uint8, count=n * width, offset=first).reshape(
        n, width
    )
    all_ok = bool(ok.all())
    # Fraction: '.' and up to six digits; PostgreSQL prints none of it for whole seconds.
    frac_lens = _fraction_lengths()[frac_us]
    if not all_ok:
        frac_lens = np.where(ok, frac_lens, 0)
    pieces = [_fixed_piece(text[:, :head], None if all_ok else ok)]
    lens = np.where(ok, head, 0) + frac_lens
    if frac_lens.any():
        pieces.append(_ragged_piece(text[:, head:], frac_lens))
    if offsets is not None:
        zone = _offset_piece(offsets, ok)
        pieces.append(zone)
        lens += _piece_lengths(zone)
    if rare:
        rare_texts: list[bytes | None] = [None] * n
        for i, text_value in rare.items():
            rare_texts[i] = text_value.encode()
        rare_piece = pa.array(rare_texts, pa.binary())
        pieces.append(rare_piece)
        lens += _varlen_lengths(rare_piece)  # NULL slots are empty
    if valid is not None:
        lens = np.where(valid, lens, 0)
    return _Column([_fixed_piece(_length_words(lens, valid)), *pieces], lens + 4)


_INT64_LIMITS = (-(2**63), 2**63 - 1)
_INT32_LIMITS = (-(2**31), 2**31 - 1)


def _rebase(values: np.ndarray, epoch_shift: int, infinities: tuple[int, int]) -> np.ndarray:
    """Values relative to 2000-01-01 (PostgreSQL's epoch) instead of 1970; the integer extremes are
    PostgreSQL's -infinity/infinity and stay as they are."""
    lo, hi = infinities
    return np.where((values == lo) | (values == hi), values, values - epoch_shift)


@functools.cache
def _fraction_lengths() -> np.ndarray:
    """Length of '.ffffff' with trailing zeros trimmed, for every µs value 0..999999 (0: none)."""
    us = np.arange(_US_PER_S, dtype=np.int64)
    trailing_zeros = sum((us % 10**k == 0).astype(np.int8) for k in range(1, 6))
    return np.where(us == 0, 0, 7 - trailing_zeros).astype(np.int8)


_TS_MIN_FAST_US = _year_start_us(1)
_TS_MAX_FAST_US = _year_start_us(10000)


def _encode_timestamp(arr: pa.Array, t: PgType, fmt: int, settings: TextSettings) -> _Column:
    utc_us = _to_us(arr)
    valid = _validity(arr)
    if fmt == 1:
        return _column_from_fixed(
            _rebase(utc_us, _US_1970_TO_2000, _INT64_LIMITS).astype(">i8"), valid
        )
    with_tz = t.oid == TIMESTAMPTZ.oid
    zone = _zone(settings.timezone)
    offsets = zone.offsets(utc_us) if with_tz else None
    local = utc_us if offsets is None else utc_us + offsets * _US_PER_S
    ok = (local >= _TS_MIN_FAST_US) & (local < _TS_MAX_FAST_US)
    if valid is not None:
        ok &= valid
    rare_rows = np.flatnonzero(~ok if valid is None else ~ok & valid)  # BC, after 9999, infinities
    rare = {
        int(i): (
            _timestamptz_text(int(utc_us[i]), zone)
            if with_tz
            else _timestamp_text(int(utc_us[i]), None)
        )
        for i in rare_rows
    }
    safe = np.where(ok, local, 0)
    clock = pc.cast(pa.array(safe, pa.timestamp("us")), pa.string())
    return _clock_column(clock, 19, safe % _US_PER_S, ok, valid, offsets, rare)


def _encode_time(arr: pa.Array, fmt: int) -> _Column:
    us = _to_us(arr)
    valid = _validity(arr)
    if fmt == 1:
        return _column_from_fixed(us.astype(">i8"), valid)
    ok = (us >= 0) & (us < _US_PER_DAY)
    if valid is not None:
        ok &= valid
    rare_rows = np.flatnonzero(~ok if valid is None else ~ok & valid)  # 24:00:00 and out-of-range
    rare = {int(i): _time_of_day_text(int(us[i])) for i in rare_rows}
    safe = np.where(ok, us, 0)
    clock = pc.cast(pa.array(safe, pa.time64("us")), pa.string())
    return _clock_column(clock, 8, safe % _US_PER_S, ok, valid, None, rare)


_DATE_MIN_FAST = _days_from_civil(1, 1, 1)
_DATE_MAX_FAST = _days_from_civil(10000, 1, 1)


def _encode_date(arr: pa.Array, fmt: int) -> _Column:
    if pa.types.is_date64(arr.type):
        days = _fixed_values(arr, np.dtype(np.int64)) // 86_400_000
    else:
        days = _fixed_values(arr, np.dtype(np.int32)).astype(np.int64)
    valid = _validity(arr)
    if fmt == 1:
        return _column_from_fixed(
            _rebase(days, _DAYS_1970_TO_2000, _INT32_LIMITS).astype(">i4"), valid
        )
    ok = (days >= _DATE_MIN_FAST) & (days < _DATE_MAX_FAST)
    safe = np.where(ok, days, 0).astype(np.int32)
    text = pc.cast(
        pa.Array.from_buffers(
            pa.date32(),
            len(arr),
            [_bitmap(valid), pa.py_buffer(safe)],
            0 if valid is None else arr.null_count,
        ),
        pa.string(),
    )
    rare = ~ok if valid is None else ~ok & valid
    if rare.any():
        texts = [_date_text(int(d)) for d in days[rare]]
        text = pc.replace_with_mask(text, pa.array(rare), pa.array(texts, pa.string()))
    return _column_from_varlen(text)


# --- bytea, uuid, interval ---------------------------------------------------------------------------


def _encode_bytea(arr: pa.Array, fmt: int) -> _Column:
    values = _as_binary(arr)
    if fmt == 1:
        return _column_from_varlen(values)
    n = len(values)
    offsets = np.frombuffer(
        values.buffers()[1], dtype=np.int32, count=n + 1, offset=values.offset * 4
    ).astype(np.int64)
    data = (
        np.frombuffer(values.buffers()[2], dtype=np.uint8)
        if values.buffers()[2] is not None
        else np.zeros(0, np.uint8)
    )
    data = data[offsets[0] : offsets[-1]]
    hexed = _HEX_PAIRS[data].reshape(-1)
    # '\x' followed by two hex digits per byte: bytea_output = hex.
    new_offsets = (offsets - offsets[0]) * 2 + 2 * np.arange(n + 1)
    body = np.empty(len(hexed) + 2 * n, dtype=np.uint8)
    starts = new_offsets[:-1]
    mask = np.ones(len(body), dtype=bool)
    mask[starts] = False
    mask[starts + 1] = False
    body[starts] = ord("\\")
    body[starts + 1] = ord("x")
    body[mask] = hexed
    valid = _validity(values)
    text = pa.Array.from_buffers(
        pa.binary(),
        n,
        [_bitmap(valid), pa.py_buffer(new_offsets.astype(np.int32)), pa.py_buffer(body)],
        values.null_count,
    )
    return _column_from_varlen(text)


def _encode_uuid(arr: pa.Array, fmt: int) -> _Column:
    storage = arr.storage if isinstance(arr, pa.ExtensionArray) else arr
    n = len(storage)
    raw = np.frombuffer(
        storage.buffers()[1], dtype=np.uint8, count=16 * n, offset=storage.offset * 16
    ).reshape(n, 16)
    valid = _validity(storage)
    if fmt == 1:
        return _column_from_matrix(raw, valid)
    hexed = _HEX_PAIRS[raw].reshape(n, 32)
    mat = np.empty((n, 36), dtype=np.uint8)
    src = 0
    for dst_start, length in ((0, 8), (9, 4), (14, 4), (19, 4), (24, 12)):
        mat[:, dst_start : dst_start + length] = hexed[:, src : src + length]
        src += length
    mat[:, [8, 13, 18, 23]] = ord("-")
    return _column_from_matrix(mat, valid)


def _encode_interval(arr: pa.Array, t: PgType, fmt: int, settings: TextSettings) -> _Column:
    if fmt == 0:
        return _fallback(arr, t, fmt, settings)
    n = len(arr)
    if pa.types.is_duration(arr.type):
        us = (
            _to_us(arr)
            if arr.type.unit != "ns"
            else _trunc_toward_zero(_fixed_values(arr, np.dtype(np.int64)), 1000)
        )
        days = months = np.zeros(n, dtype=np.int64)
    else:
        raw = np.frombuffer(
            arr.buffers()[1],
            dtype=np.dtype([("m", "<i4"), ("d", "<i4"), ("ns", "<i8")]),
            count=n,
            offset=arr.offset * 16,
        )
        months, days, us = raw["m"], raw["d"], _trunc_toward_zero(raw["ns"], 1000)
    packed = np.empty(n, dtype=np.dtype([("us", ">i8"), ("d", ">i4"), ("m", ">i4")]))
    packed["us"], packed["d"], packed["m"] = us, days, months
    return _column_from_matrix(packed.view(np.uint8).reshape(n, 16), _validity(arr))


def _trunc_toward_zero(values: np.ndarray, divisor: int) -> np.ndarray:
    return np.where(values >= 0, values // divisor, -((-values) // divisor))


# --- everything else: one value at a time ------------------------------------------------------------


def _fallback(arr: pa.Array, t: PgType, fmt: int, settings: TextSettings) -> _Column:
    values = arr.to_pylist()
    if fmt == 0:
        return _column_from_python([encode_text_value(v, t, settings) for v in values])
    depth = _list_depth(arr.type)
    return _column_from_python(
        [None if v is None else _binary_value(v, t, settings, depth) for v in values]
    )


def _list_depth(dt: pa.DataType) -> int:
    depth = 0
    dt = _storage(dt)
    while _is_list_type(dt):
        depth += 1
        dt = _storage(dt.value_type)
    return depth


def _encode_column(arr: pa.Array, fmt: int, settings: TextSettings) -> _Column:
    dt = arr.type
    t = pg_type_for_arrow(dt)
    if pa.types.is_dictionary(dt):
        arr = arr.dictionary_decode()
        dt = arr.type
    if isinstance(arr, pa.ExtensionArray) and not _is_uuid_type(dt):
        arr = arr.storage
        dt = arr.type
    n = len(arr)
    if n == 0:
        return _Column([], np.zeros(0, dtype=np.int64))
    ty = pa.types
    if ty.is_null(dt):
        return _column_from_python([None] * n)
    if ty.is_boolean(dt):
        return _encode_bool(arr, fmt)
    if ty.is_integer(dt):
        return _encode_int(arr, t, fmt, settings)
    if ty.is_floating(dt):
        return _encode_float(arr, t, fmt, settings)
    if ty.is_decimal(dt):
        return _encode_decimal(arr, t, fmt, settings)
    if t.oid == UUID.oid:
        return _encode_uuid(arr, fmt)
    if ty.is_string(dt) or ty.is_large_string(dt) or ty.is_string_view(dt):
        return _column_from_varlen(arr)
    if (
        ty.is_binary(dt)
        or ty.is_large_binary(dt)
        or ty.is_binary_view(dt)
        or ty.is_fixed_size_binary(dt)
    ):
        return _encode_bytea(arr, fmt)
    if ty.is_timestamp(dt):
        return _encode_timestamp(arr, t, fmt, settings)
    if ty.is_date(dt):
        return _encode_date(arr, fmt)
    if ty.is_time(dt):
        return _encode_time(arr, fmt)
    if t.oid == INTERVAL.oid:
        return _encode_interval(arr, t, fmt, settings)
    return _fallback(arr, t, fmt, settings)


def text_values(arr: pa.Array, settings: TextSettings) -> tuple[list[_Piece], np.ndarray]:
    """Every row's value in PostgreSQL's text format, as pieces without DataRow's length words
    (a NULL row contributes nothing), and each row's value length (0 for NULL). COPY TO joins
    these with its delimiters."""
    column = _encode_column(arr, 0, settings)
    if not column.pieces:  # no rows
        return [], column.sizes
    # Every renderer above puts the length words first: a row's field is its length, then its value.
    return column.pieces[1:], column.sizes - 4
