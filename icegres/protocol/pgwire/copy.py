"""COPY ... TO STDOUT in text and CSV formats (what `psql \\copy (select ...) to file` sends)."""

from __future__ import annotations

import re
from typing import TYPE_CHECKING

from icegres.engine.row_source import RowSource
from icegres.pg.errors import FEATURE_NOT_SUPPORTED, PgError
from icegres.pg.text_out import encode_text_value
from icegres.pg.types import pg_type_for_arrow
from icegres.protocol.pgwire import messages as m

if TYPE_CHECKING:
    from icegres.protocol.pgwire.session import Session

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
    """How one COPY renders a row of text values."""

    def __init__(self, options: dict[str, str]) -> None:
        fmt = options.get("format", "text").lower()
        if fmt not in ("text", "csv"):
            raise PgError(FEATURE_NOT_SUPPORTED, f"COPY format \"{fmt}\" is not supported")
        self.csv = fmt == "csv"
        self.delimiter = options.get("delimiter", "," if self.csv else "\t")
        self.null = options.get("null", "" if self.csv else "\\N")
        self.quote = options.get("quote", '"')
        self.escape = options.get("escape", self.quote)
        header = options.get("header")
        # HEADER MATCH (COPY FROM): the header line must name the columns, in order.
        self.header_match = header is not None and header.lower() == "match"
        self.header = header is not None and (self.header_match or _truthy(header))
        if len(self.delimiter) != 1:
            raise PgError("22023", "COPY delimiter must be a single one-byte character")
        # FORCE_QUOTE (a, b) or *: those columns' non-NULL values are always quoted (CSV only).
        forced = options.get("force_quote")
        if forced is not None and not self.csv:
            raise PgError(FEATURE_NOT_SUPPORTED, "COPY FORCE_QUOTE is available only in CSV mode")
        self._force_all = forced is not None and forced.strip() == "*"
        self._forced = set() if forced is None or self._force_all else {
            _column_name(name) for name in forced.strip().strip("()").split(",") if name.strip()}
        self.force: list[bool] = []  # per column, set by `columns`
        # COPY FROM, CSV: FORCE_NULL (a quoted NULL string is NULL too) and FORCE_NOT_NULL (the
        # unquoted NULL string is that text, not NULL) for the listed columns.
        self.force_null = self._names(options, "force_null")
        self.force_not_null = self._names(options, "force_not_null")

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
            return self.delimiter.join(self._csv_field(v, f) for v, f in zip(values, force, strict=True)) + "\n"
        return self.delimiter.join(self._text_field(v) for v in values) + "\n"

    def _text_field(self, v: str | None) -> str:
        if v is None:
            return self.null
        v = v.translate(_TEXT_ESCAPES)
        # A custom delimiter inside a value is backslash-escaped, as PostgreSQL's COPY does.
        return v if self.delimiter in "\t" else v.replace(self.delimiter, "\\" + self.delimiter)

    def _csv_field(self, v: str | None, force: bool = False) -> str:
        if v is None:
            return self.null
        needs = (
            force or v == self.null or self.delimiter in v or self.quote in v or "\n" in v or "\r" in v
            or v.startswith(" ") or v.endswith(" ") or v == "\\."
        )
        if not needs:
            return v
        body = v.replace(self.escape, self.escape + self.escape) if self.escape == self.quote else (
            v.replace(self.escape, self.escape + self.escape).replace(self.quote, self.escape + self.quote)
        )
        return f"{self.quote}{body}{self.quote}"


async def copy_out_rows(session: Session, source: RowSource, options: dict[str, str]) -> None:
    fmt = CopyFormat(options)
    schema = source.schema
    text = session._text_settings()
    types = [pg_type_for_arrow(f.type) for f in schema]
    fmt.columns(schema.names)
    session.send(m.copy_out_response(len(schema)))
    if fmt.header:  # FORCE_QUOTE quotes no header name, as in PostgreSQL
        session.send(m.copy_data(fmt.line(schema.names, header=True).encode()))

    def next_lines() -> tuple[int, bytes] | None:
        batch = source.take(0)
        if batch is None:
            return None
        columns = [batch.column(i).to_pylist() for i in range(batch.num_columns)]
        out = []
        for row in zip(*columns, strict=True):
            values = []
            for value, t in zip(row, types, strict=True):
                raw = None if value is None else encode_text_value(value, t, text)
                values.append(None if raw is None else raw.decode())
            out.append(m.copy_data(fmt.line(values).encode()))
        return batch.num_rows, b"".join(out)

    total = 0
    while True:
        chunk = await session._in_thread(next_lines)
        if chunk is None:
            break
        total += chunk[0]
        session.send(chunk[1])
        await session._maybe_flush()
    session.send(m.COPY_DONE)
    session.send(m.command_complete(f"COPY {total}"))
