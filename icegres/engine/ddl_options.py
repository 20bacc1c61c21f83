"""DDL's option values and the token helpers its parsers share: WITH (...) table options checked
as table properties, and the `partitioning` option's own little language
('day(ts), bucket(16, id), region')."""

from __future__ import annotations

from sqlglot.dialects.dialect import Dialect
from sqlglot.errors import TokenError
from sqlglot.tokens import Token, TokenType

from icegres.engine.ddl_commands import PartitionField
from icegres.engine.parquet_files import DELTA_INTEGERS
from icegres.pg import errors as e
from icegres.pg.errors import PgError

DIALECT = Dialect.get_or_raise("postgres")
_DIALECT = DIALECT

PARTITIONING_OPTION = "partitioning"
# Table properties the Parquet writers read as positive integers. A bad value is refused when it
# is set (22023, as PostgreSQL refuses a bad storage parameter), not by every later write.
_POSITIVE_INT_PROPERTIES = frozenset({
    "write.parquet.row-group-limit", "write.parquet.row-group-size-bytes", "write.parquet.page-row-limit",
    "write.parquet.page-size-bytes", "write.parquet.dict-size-bytes", "write.target-file-size-bytes",
})


# Table properties the Parquet writer reads as booleans, stored as 'true' / 'false'.
_BOOLEAN_PROPERTIES = frozenset({DELTA_INTEGERS})


def checked_properties(options: dict[str, str]) -> dict[str, str]:
    """`options` as table properties, with every writer setting a positive integer and every
    writer switch a boolean (stored as 'true' / 'false')."""
    options = dict(options)
    for key, value in options.items():
        if key in _BOOLEAN_PROPERTIES:
            from icegres.pg.text_in import parse_bool  # numpy/pyarrow: only when asked

            try:
                options[key] = "true" if parse_bool(str(value)) else "false"
            except PgError:
                raise PgError(e.INVALID_PARAMETER_VALUE,
                              f'invalid value for boolean option "{key}": {value}') from None
            continue
        if key not in _POSITIVE_INT_PROPERTIES:
            continue
        try:
            number = int(value)
        except ValueError:
            raise PgError(e.INVALID_PARAMETER_VALUE, f'invalid value for integer option "{key}": {value}') from None
        if number <= 0:
            raise PgError(e.INVALID_PARAMETER_VALUE, f'value {value} out of bounds for option "{key}"',
                          detail="Valid values are positive integers.")
    return options

# Transform names accepted in WITH (partitioning = '...'); the plural spellings are Spark's.
TIME_TRANSFORMS = {"year": "year", "years": "year", "month": "month", "months": "month",
                   "day": "day", "days": "day", "hour": "hour", "hours": "hour"}
PARAM_TRANSFORMS = ("bucket", "truncate")
PARTITIONING_HINT = ("partitioning is a comma-separated list of column, identity(column), "
                     "year(column), month(column), day(column), hour(column), bucket(n, column) "
                     "or truncate(width, column).")


def parse_partitioning(text: str) -> tuple[PartitionField, ...]:
    """The value of WITH (partitioning = '...'): 'day(ts), bucket(16, id), region'."""
    try:
        tokens = _DIALECT.tokenize(text)
    except TokenError:
        raise _bad_partitioning(text, "it does not tokenize") from None
    fields: list[PartitionField] = []
    i = 0
    while i < len(tokens):
        name_tok = tokens[i]
        name = ident_text(name_tok)
        if name is None:
            raise _bad_partitioning(text, f'unexpected "{name_tok.text}"')
        i += 1
        if i < len(tokens) and tokens[i].token_type == TokenType.L_PAREN:
            close = i + 1
            while close < len(tokens) and tokens[close].token_type != TokenType.R_PAREN:
                close += 1
            if close == len(tokens):
                raise _bad_partitioning(text, "a parenthesis is not closed")
            args = [t for t in tokens[i + 1:close] if t.token_type != TokenType.COMMA]
            commas = close - (i + 1) - len(args)
            if commas != max(len(args) - 1, 0):
                raise _bad_partitioning(text, f'the arguments of {name} are malformed')
            fields.append(_partition_field(text, name, args))
            i = close + 1
        else:
            fields.append(PartitionField("identity", name))
        if i < len(tokens):
            if tokens[i].token_type != TokenType.COMMA or i + 1 == len(tokens):
                raise _bad_partitioning(text, f'unexpected "{tokens[i].text}"')
            i += 1
    seen = set()
    for f in fields:
        if f in seen:
            raise PgError(e.SYNTAX_ERROR, f"partition field {_describe(f)} is specified more than once")
        seen.add(f)
    return tuple(fields)


def _partition_field(text: str, transform_tok: str, args: list[Token]) -> PartitionField:
    transform = transform_tok.lower()
    if transform == "identity" or transform in TIME_TRANSFORMS:
        if len(args) != 1 or ident_text(args[0]) is None:
            raise _bad_partitioning(text, f"{transform} takes one column")
        return PartitionField(TIME_TRANSFORMS.get(transform, transform), ident_text(args[0]) or "")
    if transform in PARAM_TRANSFORMS:
        # bucket(16, id) is Spark's order and bucket(id, 16) Trino's: either is unambiguous.
        numbers = [a for a in args if a.token_type == TokenType.NUMBER]
        columns = [a for a in args if ident_text(a) is not None]
        if len(args) != 2 or len(numbers) != 1 or len(columns) != 1 or not numbers[0].text.isdigit():
            raise _bad_partitioning(text, f"{transform} takes a positive integer and a column")
        param = int(numbers[0].text)
        if param < 1:
            what = "bucket count" if transform == "bucket" else "truncate width"
            raise PgError(e.INVALID_PARAMETER_VALUE, f"{what} must be positive, not {param}")
        return PartitionField(transform, ident_text(columns[0]) or "", param)
    raise _bad_partitioning(text, f'unknown partition transform "{transform_tok}"')


def _describe(f: PartitionField) -> str:
    if f.transform == "identity":
        return f.column
    if f.param is not None:
        return f"{f.transform}({f.param}, {f.column})"
    return f"{f.transform}({f.column})"


def _bad_partitioning(text: str, why: str) -> PgError:
    return PgError(e.SYNTAX_ERROR, f'invalid partitioning "{text}": {why}', hint=PARTITIONING_HINT)


def ident_text(tok: Token) -> str | None:
    """An identifier token's name as PostgreSQL folds it, or None if the token is not one."""
    if tok.token_type == TokenType.IDENTIFIER:
        return tok.text
    if is_word(tok) and " " not in tok.text:
        return tok.text.lower()
    return None


_NOT_WORDS = {TokenType.IDENTIFIER, TokenType.STRING, TokenType.NUMBER, TokenType.HEREDOC_STRING,
              TokenType.BYTE_STRING, TokenType.NATIONAL_STRING, TokenType.UNICODE_STRING,
              TokenType.BIT_STRING, TokenType.HEX_STRING, TokenType.RAW_STRING}


def is_word(tok: Token) -> bool:
    return tok.token_type not in _NOT_WORDS and all(
        part[0].isalpha() or part[0] == "_" for part in tok.text.split()) and bool(tok.text)
