"""Errors a Postgres client can act on: every failure icegres reports carries a SQLSTATE.

The bottom of the house: the engine, both front ends and the write ladder raise these, and each
front end turns them into its own wire form (ErrorResponse, a gRPC status)."""

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

    def __repr__(self) -> str:
        # What DataFusion quotes of an exception a Python UDF raised: engine/errors.py reads the
        # SQLSTATE back from it.
        return f"PgError({self.sqlstate!r}, {self.message!r})"


# SQLSTATEs icegres uses by name, as PostgreSQL's errcodes.txt names them, so a grep finds every place that raises each one.
SYNTAX_ERROR = "42601"
UNDEFINED_TABLE = "42P01"
UNDEFINED_COLUMN = "42703"
UNDEFINED_FUNCTION = "42883"
UNDEFINED_OBJECT = "42704"
DUPLICATE_OBJECT = "42710"
WRONG_OBJECT_TYPE = "42809"
CARDINALITY_VIOLATION = "21000"
OBJECT_NOT_IN_PREREQUISITE_STATE = "55000"
ACTIVE_SQL_TRANSACTION = "25001"
INVALID_SCHEMA_NAME = "3F000"
DUPLICATE_CURSOR = "42P03"
INVALID_CURSOR_NAME = "34000"
INVALID_SQL_STATEMENT_NAME = "26000"
DUPLICATE_PREPARED_STATEMENT = "42P05"
FEATURE_NOT_SUPPORTED = "0A000"
QUERY_CANCELED = "57014"
ADMIN_SHUTDOWN = "57P01"
TOO_MANY_CONNECTIONS = "53300"
INSUFFICIENT_PRIVILEGE = "42501"
RESERVED_NAME = "42939"
OBJECT_IN_USE = "55006"
DEPENDENT_OBJECTS_STILL_EXIST = "2BP01"
INVALID_GRANT_OPERATION = "0LP01"
IN_FAILED_TRANSACTION = "25P02"
PROTOCOL_VIOLATION = "08P01"
INVALID_PASSWORD = "28P01"
INVALID_AUTHORIZATION = "28000"
INVALID_PARAMETER_VALUE = "22023"
INVALID_TEXT_REPRESENTATION = "22P02"
DIVISION_BY_ZERO = "22012"
INVALID_ESCAPE_SEQUENCE = "22025"
INVALID_REGULAR_EXPRESSION = "2201B"
DATA_EXCEPTION = "22000"
UNDEFINED_PARAMETER = "42P02"
CANT_CHANGE_RUNTIME_PARAM = "55P02"
NO_ACTIVE_TRANSACTION = "25P01"
INVALID_SAVEPOINT = "3B001"
INTERNAL_ERROR = "XX000"
INVALID_CATALOG_NAME = "3D000"
CONNECTION_FAILURE = "08006"
INVALID_BINARY_REPRESENTATION = "22P03"
NUMERIC_VALUE_OUT_OF_RANGE = "22003"
CHARACTER_NOT_IN_REPERTOIRE = "22021"
INVALID_DATETIME_FORMAT = "22007"
DATETIME_FIELD_OVERFLOW = "22008"
INVALID_TIME_ZONE_DISPLACEMENT_VALUE = "22009"
INTERVAL_FIELD_OVERFLOW = "22015"
UNTRANSLATABLE_CHARACTER = "22P05"
ARRAY_SUBSCRIPT_ERROR = "2202E"
DATATYPE_MISMATCH = "42804"
INDETERMINATE_DATATYPE = "42P18"
NAME_TOO_LONG = "42622"
PROGRAM_LIMIT_EXCEEDED = "54000"
OUT_OF_MEMORY = "53200"
