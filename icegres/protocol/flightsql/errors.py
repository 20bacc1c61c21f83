"""Engine errors as gRPC statuses: the SQLSTATE picks the status code and rides in the message."""

from __future__ import annotations

from grpclib.const import Status

from icegres.pg.errors import PgError

# SQLSTATE (exact, then by class) -> gRPC status. Everything else is INTERNAL.
_EXACT = {
    "0A000": Status.UNIMPLEMENTED,
    "57014": Status.CANCELLED,
    "40001": Status.ABORTED,
    "40P01": Status.ABORTED,
    "42501": Status.PERMISSION_DENIED,
    "42P07": Status.ALREADY_EXISTS,  # duplicate table (ingest mode "create" on an existing table)
    "42P06": Status.ALREADY_EXISTS,  # duplicate schema
    "23505": Status.ALREADY_EXISTS,  # a row with this primary key already exists
    "42P01": Status.NOT_FOUND,
    "42703": Status.NOT_FOUND,
    "42883": Status.NOT_FOUND,
    "42704": Status.NOT_FOUND,
    "3D000": Status.NOT_FOUND,
    "3F000": Status.NOT_FOUND,
    "26000": Status.NOT_FOUND,
    "3B001": Status.NOT_FOUND,  # no such savepoint
    "58030": Status.UNAVAILABLE,
    "XX000": Status.INTERNAL,
}
_BY_CLASS = {
    "22": Status.INVALID_ARGUMENT,  # data exceptions
    "42": Status.INVALID_ARGUMENT,  # syntax and access rule violations
    "23": Status.FAILED_PRECONDITION,  # integrity constraints
    "25": Status.FAILED_PRECONDITION,  # invalid transaction state
    "28": Status.UNAUTHENTICATED,
    "53": Status.RESOURCE_EXHAUSTED,
    "54": Status.RESOURCE_EXHAUSTED,
    "08": Status.UNAVAILABLE,
    "0A": Status.UNIMPLEMENTED,
    "40": Status.ABORTED,
    "57": Status.UNAVAILABLE,
}


def status_for(sqlstate: str) -> Status:
    return _EXACT.get(sqlstate) or _BY_CLASS.get(sqlstate[:2], Status.INTERNAL)


def message_for(err: PgError) -> str:
    """`<message> (SQLSTATE <code>)`: ADBC shows the gRPC message, so the code is in it."""
    return f"{err.message} (SQLSTATE {err.sqlstate})"
