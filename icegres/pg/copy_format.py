"""PostgreSQL's COPY text and CSV formats: a COPY's options (`CopyFormat`), rows rendered as
COPY TO writes them, and COPY FROM's input split into fields exactly as PostgreSQL splits it.

Pure: bytes and strings in, strings and Arrow string columns out. Both the front end (which
moves the bytes) and the engine (which casts the fields to the table's types) use it.
"""

from __future__ import annotations

import functools
import re
from typing import Any

import pyarrow as pa

from icegres.pg.errors import FEATURE_NOT_SUPPORTED, PgError

_TEXT_ESCAPES = str.maketrans({"\\": "\\\\", "\t": "\\t", "\n": "\\n", "\r": "\\r", "\b": "\\b", "\f": "\\f", "\v": "\\v"})


def _truthy(value: str | None) -> bool:
    return (value or "").lower() in ("true", "on", "1", "yes", "")


def copy_target(source: str) -> tuple[str, list[str] | None] | None:
    """A COPY's `table [(a, b)]` as (table, its column list or None); None for a `(query)`."""
    m = re.match(r'^("(?:[^"]|"")+"|[^\s(]+)\s*(?:\((.*)\))?$', source, re.S)
    if m is None or source.startswith("("):
        return None
    return m.group(1), [c.strip() for c in m.group(2).split(",")] if m.group(2) else None


def _column_name(text: str) -> str:
    """A column name as written in a COPY option: quoted keeps its case, unquoted folds."""
    text = text.strip()
    return text[1:-1].replace('""', '"') if text.startswith('"') and text.endswith('"') else text.lower()


class CopyFormat:
    """How one COPY renders a row of text values, with PostgreSQL 15's checks of its options
    (ProcessCopyOptions): `is_from` says which direction the options are for (None: either)."""

    def __init__(self, options: dict[str, str], *, is_from: bool | None = None) -> None:
        fmt = options.get("format", "text").lower()
        if fmt not in ("text", "csv"):
            raise PgError(FEATURE_NOT_SUPPORTED, f"COPY format \"{fmt}\" is not supported")
        self.csv = fmt == "csv"
        self.delimiter = options.get("delimiter", "," if self.csv else "\t")
        self.null = options.get("null", "" if self.csv else "\\N")
        header = options.get("header")
        # HEADER MATCH (COPY FROM): the header line must name the columns, in order.
        self.header_match = header is not None and header.lower() == "match"
        if self.header_match and is_from is False:
            raise PgError(FEATURE_NOT_SUPPORTED, 'cannot use "match" with HEADER in COPY TO')
        self.header = header is not None and (self.header_match or _truthy(header))
        self._check_characters(options)
        self.quote = options.get("quote", '"')
        self.escape = options.get("escape", self.quote)
        # FORCE_QUOTE (a, b) or *: those columns' non-NULL values are always quoted (CSV only).
        forced = options.get("force_quote")
        if forced is not None and not self.csv:
            raise PgError(FEATURE_NOT_SUPPORTED, "COPY FORCE_QUOTE is available only in CSV mode")
        if forced is not None and is_from:
            raise PgError(FEATURE_NOT_SUPPORTED, "COPY force quote only available using COPY TO")
        self._force_all = forced is not None and forced.strip() == "*"
        self._forced = set() if forced is None or self._force_all else {
            _column_name(name) for name in forced.strip().strip("()").split(",") if name.strip()}
        self.force: list[bool] = []  # per column, set by `columns`
        # COPY FROM, CSV: FORCE_NULL (a quoted NULL string is NULL too) and FORCE_NOT_NULL (the
        # unquoted NULL string is that text, not NULL) for the listed columns.
        self.force_null = self._names(options, "force_null")
        self.force_not_null = self._names(options, "force_not_null")
        if (self.force_null or self.force_not_null) and is_from is False:
            which = "not null" if self.force_not_null else "null"
            raise PgError(FEATURE_NOT_SUPPORTED, f"COPY force {which} only available using COPY FROM")

    def _check_characters(self, options: dict[str, str]) -> None:
        """The delimiter, NULL string, quote and escape PostgreSQL accepts: one byte each, no line
        ends, and none that would make the output ambiguous."""
        delimiter, null = self.delimiter, self.null
        if len(delimiter.encode()) != 1:
            raise PgError(FEATURE_NOT_SUPPORTED, "COPY delimiter must be a single one-byte character")
        if delimiter in "\r\n":
            raise PgError("22023", "COPY delimiter cannot be newline or carriage return")
        if "\r" in null or "\n" in null:
            raise PgError("22023", "COPY null representation cannot use newline or carriage return")
        # Text format: a delimiter in a value is backslash-escaped, and COPY FROM reads some
        # backslash sequences (\., \N, octal digits, letters) otherwise.
        if not self.csv and delimiter in "\\.abcdefghijklmnopqrstuvwxyz0123456789":
            raise PgError("22023", f'COPY delimiter cannot be "{delimiter}"')
        for option in ("quote", "escape"):
            value = options.get(option)
            if value is None:
                continue
            if not self.csv:
                raise PgError(FEATURE_NOT_SUPPORTED, f"COPY {option} available only in CSV mode")
            if len(value.encode()) != 1:
                raise PgError(FEATURE_NOT_SUPPORTED, f"COPY {option} must be a single one-byte character")
        quote = options.get("quote", '"')
        if self.csv and delimiter == quote:
            raise PgError("22023", "COPY delimiter and quote must be different")
        if delimiter in null:
            raise PgError(FEATURE_NOT_SUPPORTED, "COPY delimiter must not appear in the NULL specification")
        if self.csv and quote in null:
            raise PgError(FEATURE_NOT_SUPPORTED, "CSV quote character must not appear in the NULL specification")

    def _names(self, options: dict[str, str], option: str) -> set[str]:
        listed = options.get(option)
        if listed is None:
            return set()
        if not self.csv:
            raise PgError(FEATURE_NOT_SUPPORTED, f"COPY {option.upper()} is available only in CSV mode")
        return {_column_name(name) for name in listed.strip().strip("()").split(",") if name.strip()}

    def columns(self, names: list[str]) -> None:
        """The output's column names, for FORCE_QUOTE; 42703 for a forced name not among them."""
        missing = self._forced - set(names)
        if missing:
            raise PgError("42703", f'FORCE_QUOTE column "{sorted(missing)[0]}" is not referenced by COPY')
        self.force = [self._force_all or name in self._forced for name in names]

    def line(self, values: list[str | None], *, header: bool = False) -> str:
        if self.csv:
            force = [False] * len(values) if header or not self.force else self.force
            single = len(values) == 1
            return self.delimiter.join(self._csv_field(v, f, single) for v, f in zip(values, force, strict=True)) + "\n"
        return self.delimiter.join(self._text_field(v) for v in values) + "\n"

    def _text_field(self, v: str | None) -> str:
        if v is None:
            return self.null
        v = v.translate(_TEXT_ESCAPES)
        # A custom delimiter inside a value is backslash-escaped, as PostgreSQL's COPY does.
        return v if self.delimiter in "\t" else v.replace(self.delimiter, "\\" + self.delimiter)

    def _csv_field(self, v: str | None, force: bool = False, single: bool = False) -> str:
        """PostgreSQL's CopyAttributeOutCSV: quoted when forced, equal to the NULL string, holding
        the delimiter, the quote or a line end, or `\\.` alone on a line (the only column)."""
        if v is None:
            return self.null
        needs = (
            force or v == self.null or self.delimiter in v or self.quote in v or "\n" in v or "\r" in v
            or (single and v == "\\.")
        )
        if not needs:
            return v
        body = v.replace(self.escape, self.escape + self.escape) if self.escape == self.quote else (
            v.replace(self.escape, self.escape + self.escape).replace(self.quote, self.escape + self.quote)
        )
        return f"{self.quote}{body}{self.quote}"


def copy_fields(data: bytes, fmt: Any, names: list[str]) -> list[pa.ChunkedArray]:
    """Every row's fields as one string column per name (None: NULL), exactly as PostgreSQL splits
    COPY text or CSV: by Arrow's vectorised CSV reader where the input needs nothing it cannot
    do, else (escapes, odd widths, bad bytes) by the exact row-by-row parser below."""
    if data == b"\\.\n" or data.endswith(b"\n\\.\n"):  # the end marker: `\.` alone on the last line
        data = data[:-3]
    if fmt.header_match:
        _match_header(data, fmt, names)
    fast = _arrow_fields(data, fmt, len(names))
    fields = fast if fast is not None else exact_fields(data, fmt, names)
    return _forced_nulls(fields, fmt, names)


def _match_header(data: bytes, fmt: Any, names: list[str]) -> None:
    """HEADER MATCH: the first line names the columns COPY reads, in order (else 22P04)."""
    if not data:
        return  # no header line, and no rows to read under it
    first = data.split(b"\n", 1)[0].rstrip(b"\r").decode("utf-8", errors="replace")
    rows = _csv_rows(first + "\n", fmt) if fmt.csv else [_text_fields(first, fmt)]
    header = rows[0] if rows else []
    if len(header) != len(names):
        raise PgError("22P04", f"wrong number of fields in header line: got {len(header)}, expected {len(names)}")
    for i, (got, expected) in enumerate(zip(header, names, strict=True)):
        if got != expected:
            raise PgError("22P04", f'column name mismatch in header line field {i + 1}: got "{got}", '
                          f'expected "{expected}"')


def _forced_nulls(fields: list[pa.ChunkedArray], fmt: Any, names: list[str]) -> list[pa.ChunkedArray]:
    """FORCE_NULL / FORCE_NOT_NULL applied to the fields of the columns they name (42703 for a
    name COPY does not read). Both parsers give NULL for the unquoted NULL string and the text
    itself for a quoted one, so: FORCE_NULL nulls the text equal to it, FORCE_NOT_NULL puts the
    text back for NULL."""
    import pyarrow.compute as pc

    unknown = (fmt.force_null | fmt.force_not_null) - set(names)
    if unknown:
        raise PgError("42703", f'column "{sorted(unknown)[0]}" does not exist')
    out = list(fields)
    for i, name in enumerate(names):
        if name in fmt.force_not_null:
            out[i] = pc.fill_null(out[i], pa.scalar(fmt.null, pa.string()))
        if name in fmt.force_null:
            out[i] = pc.if_else(pc.equal(out[i], fmt.null), pa.scalar(None, pa.string()), out[i])
    return out


def exact_fields(data: bytes, fmt: Any, names: list[str]) -> list[pa.ChunkedArray]:
    """`copy_fields` row by row, every rule of PostgreSQL's COPY (the reference for the fast path)."""
    ncols = len(names)
    try:
        text = data.decode("utf-8")
    except UnicodeDecodeError as exc:
        line = data.count(b"\n", 0, exc.start) + 1
        raise PgError("22021", 'invalid byte sequence for encoding "UTF8"', detail=f"COPY line {line}") from None
    lines = text.split("\n")
    if lines and lines[-1] == "":
        lines.pop()
    if fmt.csv:
        rows = _csv_rows("\n".join(lines) + "\n" if lines else "", fmt)
    else:
        rows = [_text_fields(line.rstrip("\r"), fmt) for line in lines]
    if fmt.header and rows:
        rows = rows[1:]
    for i, row in enumerate(rows):
        if len(row) != ncols:
            which = "extra data after last expected column" if len(row) > ncols else f'missing data for column "{names[len(row)]}"'
            raise PgError("22P04", which, detail=f"COPY line {i + 1 + (1 if fmt.header else 0)}")
    return [pa.chunked_array([pa.array([r[j] for r in rows], type=pa.string())]) for j in range(ncols)]


def _arrow_fields(data: bytes, fmt: Any, ncols: int) -> list[pa.ChunkedArray] | None:
    """The fields by Arrow's CSV reader (~100x the row-by-row parser), or None where its rules
    differ from PostgreSQL's: text-format backslash escapes (and a delimiter or NULL marker
    spelled with one inside a value), a CSV ESCAPE other than the quote, a carriage return
    (Arrow ends a row at a lone one), empty lines, rows of the wrong width or invalid UTF-8 (the
    exact parser names the line)."""
    import pyarrow.compute as pc
    import pyarrow.csv as pacsv

    if not data or ncols == 0 or b"\r" in data or (fmt.csv and fmt.escape != fmt.quote):
        return None
    if ncols > 1 and (data.startswith(b"\n") or b"\n\n" in data):
        return None  # Arrow reads an empty line as a row of empty fields; PostgreSQL refuses it
    if fmt.csv and fmt.quote.encode() in data and fmt.quote.encode() in _quoted_fields(fmt.delimiter, fmt.quote).sub(b"", data):
        return None  # a quote that does not open and close a whole field: PostgreSQL's rules differ
    names = [f"f{i}" for i in range(ncols)]
    try:
        table = pacsv.read_csv(
            pa.py_buffer(data),
            read_options=pacsv.ReadOptions(column_names=names),
            parse_options=pacsv.ParseOptions(
                delimiter=fmt.delimiter,
                quote_char=fmt.quote if fmt.csv else False,
                double_quote=True,
                escape_char=False,
                newlines_in_values=fmt.csv,
                ignore_empty_lines=False,
            ),
            convert_options=pacsv.ConvertOptions(
                column_types={n: pa.string() for n in names},
                null_values=[fmt.null],
                strings_can_be_null=True,
                quoted_strings_can_be_null=False,
            ),
        )
    except (pa.ArrowInvalid, pa.ArrowNotImplementedError):
        return None
    if fmt.header:
        table = table.slice(1)
    if not fmt.csv and any(pc.any(pc.match_substring(c, "\\")).as_py() for c in table.columns):
        return None
    return list(table.columns)


@functools.cache
def _quoted_fields(delimiter: str, quote: str) -> re.Pattern[bytes]:
    """A whole quoted CSV field: opened at a field's start, closed at its end, quotes doubled inside."""
    d, q = re.escape(delimiter.encode()), re.escape(quote.encode())
    return re.compile(rb"(?:^|(?<=[" + d + rb"\n]))" + q + rb"(?:[^" + q + rb"]|" + q + q + rb")*" + q
                      + rb"(?=[" + d + rb"\n]|\Z)", re.M)


_UNESCAPE = {"t": "\t", "n": "\n", "r": "\r", "b": "\b", "f": "\f", "v": "\v", "\\": "\\"}


def _text_fields(line: str, fmt: Any) -> list[str | None]:
    """One line of COPY text format: delimiter-separated, backslash escapes, \\N for NULL."""
    out: list[str | None] = []
    field: list[str] = []
    raw_field: list[str] = []
    i = 0
    n = len(line)
    while i <= n:
        if i == n or line[i] == fmt.delimiter:
            raw = "".join(raw_field)
            out.append(None if raw == fmt.null else _utf8("".join(field)))
            field, raw_field = [], []
            i += 1
            if i > n:
                break
            continue
        c = line[i]
        if c == "\\" and i + 1 < n:
            nxt = line[i + 1]
            # \ followed by 1-3 octal digits or x and 1-2 hex digits is a byte value (COPY text format).
            code = re.match(r"[0-7]{1,3}|x[0-9a-fA-F]{1,2}", line[i + 1 : i + 4])
            if code:
                raw_field.append(c + code.group())
                value = code.group()
                byte = (int(value[1:], 16) if value[0] == "x" else int(value, 8)) & 0xFF
                # Bytes >= 0x80 are parts of UTF-8 sequences: kept as surrogates until the field ends.
                field.append(chr(byte) if byte < 0x80 else chr(0xDC00 + byte))
                i += 1 + len(value)
                continue
            raw_field.append(c + nxt)
            field.append(_UNESCAPE.get(nxt, nxt))
            i += 2
            continue
        raw_field.append(c)
        field.append(c)
        i += 1
    return out


def _utf8(value: str) -> str:
    """A text-format field whose escaped bytes must still spell valid UTF-8, as in PostgreSQL."""
    if not any("\udc80" <= c <= "\udcff" for c in value):
        return value
    try:
        return value.encode("utf-8", "surrogateescape").decode("utf-8")
    except UnicodeDecodeError:
        raise PgError("22021", "invalid byte sequence for encoding \"UTF8\"") from None


def _csv_rows(text: str, fmt: Any) -> list[list[str | None]]:
    """CSV per PostgreSQL: an unquoted empty field (or the NULL string) is NULL, a quoted one is not."""
    rows: list[list[str | None]] = []
    i, n = 0, len(text)
    q, esc, d = fmt.quote, fmt.escape, fmt.delimiter
    row: list[str | None] = []
    while i < n:
        quoted = False
        buf: list[str] = []
        if text[i] == q:
            quoted = True
            i += 1
            while i < n:
                c = text[i]
                if c == esc and i + 1 < n and text[i + 1] == q:
                    buf.append(q)
                    i += 2
                elif c == q:
                    i += 1
                    break
                else:
                    buf.append(c)
                    i += 1
            else:
                raise PgError("22P04", "unterminated CSV quoted field", detail=f"COPY line {len(rows) + 1}")
        while i < n and text[i] not in (d, "\n"):
            buf.append(text[i])
            i += 1
        value = "".join(buf)
        row.append(None if (not quoted and value.rstrip("\r") == fmt.null) else (value if quoted else value.rstrip("\r")))
        if i < n and text[i] == d:
            i += 1
            if i == n or text[i] == "\n":
                row.append(None if fmt.null == "" else "")
        if i >= n or text[i] == "\n":
            rows.append(row)
            row = []
            i += 1
    return rows
