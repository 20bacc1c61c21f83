"""Errors a Postgres client can act on: every failure the session reports carries a SQLSTATE."""

from __future__ import annotations


class PgError(Exception):
    """An error to send as ErrorResponse. `position` is 1-based into the statement text."""

    def __init__(
        self,
        sqlstate: str,
        message: str,
        *,
        severity: str = "ERROR",
        detail: str | None = None,
        hint: str | None = None,
        position: int | None = None,
    ) -> None:
        super().__init__(message)
        self.sqlstate = sqlstate
        self.message = message
        self.severity = severity
        self.detail = detail
        self.hint = hint
        self.position = position

    def __str__(self) -> str:
        return self.message


# SQLSTATEs the session uses by name, so a grep finds every place that raises each one.
SYNTAX_ERROR = "42601"
UNDEFINED_TABLE = "42P01"
UNDEFINED_COLUMN = "42703"
UNDEFINED_FUNCTION = "42883"
UNDEFINED_OBJECT = "42704"
DUPLICATE_CURSOR = "42P03"
INVALID_CURSOR_NAME = "34000"
INVALID_SQL_STATEMENT_NAME = "26000"
DUPLICATE_PREPARED_STATEMENT = "42P05"
FEATURE_NOT_SUPPORTED = "0A000"
QUERY_CANCELED = "57014"
IN_FAILED_TRANSACTION = "25P02"
PROTOCOL_VIOLATION = "08P01"
INVALID_PASSWORD = "28P01"
INVALID_AUTHORIZATION = "28000"
INVALID_PARAMETER_VALUE = "22023"
INVALID_TEXT_REPRESENTATION = "22P02"
DIVISION_BY_ZERO = "22012"
INVALID_ESCAPE_SEQUENCE = "22025"
NUMERIC_OUT_OF_RANGE = "22003"
DATA_EXCEPTION = "22000"
UNDEFINED_PARAMETER = "42704"
CANT_CHANGE_RUNTIME_PARAM = "55P02"
NO_ACTIVE_TRANSACTION = "25P01"
INVALID_SAVEPOINT = "3B001"
INTERNAL_ERROR = "XX000"
INVALID_CATALOG_NAME = "3D000"
CONNECTION_FAILURE = "08006"
