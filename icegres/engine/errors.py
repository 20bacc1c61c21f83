"""DataFusion and pyiceberg failures -> PgError with the SQLSTATE a Postgres client expects."""

from __future__ import annotations

import re

from icegres.protocol.pgwire import errors as e
from icegres.protocol.pgwire.errors import PgError

# Ordered: the first pattern that matches the DataFusion message decides the SQLSTATE.
_RULES: tuple[tuple[re.Pattern[str], str, str | None], ...] = (
    (re.compile(r'unrecognized configuration parameter "([^"]+)"'), e.UNDEFINED_OBJECT, 'unrecognized configuration parameter "{0}"'),
    (re.compile(r"table '(?:datafusion\.)?([^']+)' not found"), e.UNDEFINED_TABLE, 'relation "{0}" does not exist'),
    (re.compile(r"No field named ([^.\s]+(?:\.[^.\s]+)*)\."), e.UNDEFINED_COLUMN, 'column {0} does not exist'),
    (re.compile(r"No field named (.+?)(?:\. Valid fields|\. Did you|$)"), e.UNDEFINED_COLUMN, 'column {0} does not exist'),
    (re.compile(r"Invalid function '([^']+)'"), e.UNDEFINED_FUNCTION, "function {0} does not exist"),
    (re.compile(r"(?:Unknown|Invalid) (?:scalar )?function[: ]+'?([\w.]+)"), e.UNDEFINED_FUNCTION, "function {0} does not exist"),
    (re.compile(r"ParserError\(\"(.*?)\"?\)?$", re.S), e.SYNTAX_ERROR, "syntax error: {0}"),
    (re.compile(r"ParserError|sql parser error", re.I), e.SYNTAX_ERROR, None),
    (re.compile(r"Divide by zero|division by zero", re.I), e.DIVISION_BY_ZERO, "division by zero"),
    (re.compile(r"Cannot cast string '([^']*)' to value of (\w+)"), e.INVALID_TEXT_REPRESENTATION, 'invalid input syntax for type {1}: "{0}"'),
    (re.compile(r"Cast error|Cannot cast|Parser error", re.I), e.INVALID_TEXT_REPRESENTATION, None),
    (re.compile(r"overflow", re.I), e.NUMERIC_OUT_OF_RANGE, None),
    (re.compile(r"not implemented|Unsupported|not supported", re.I), e.FEATURE_NOT_SUPPORTED, None),
    (re.compile(r"Error during planning|Schema error|type_coercion|Coercion", re.I), "42804", None),
    (re.compile(r"Resources exhausted", re.I), "53200", None),
)


def _clean(message: str) -> str:
    message = message.strip()
    # DataFusion wraps messages as 'DataFusion error: Error during planning: ...'; clients want the last part.
    for prefix in ("DataFusion error: ", "Error during planning: ", "Schema error: ", "Execution error: ",
                   "Optimizer rule '", "External error: ", "Arrow error: "):
        if message.startswith(prefix) and prefix != "Optimizer rule '":
            message = message[len(prefix):]
    return message.splitlines()[0] if message else "internal error"


def from_datafusion(exc: BaseException) -> PgError:
    if isinstance(exc, PgError):
        return exc
    text = str(exc)
    for pattern, sqlstate, template in _RULES:
        m = pattern.search(text)
        if m:
            msg = template.format(*m.groups()) if template else _clean(text)
            return PgError(sqlstate, msg)
    return PgError(e.INTERNAL_ERROR, _clean(text))
