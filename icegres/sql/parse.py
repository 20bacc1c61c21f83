"""Parsing a statement into a sqlglot tree: one dialect, one parse per statement text, unquoted
names folded to lower case as PostgreSQL's lexer folds them.

The tree is shared (by every Statement of the same text, and by the caches keyed on it): callers
read it, and copy it before changing it.

Every parse of SQL text in icegres comes here: statements (`parse`), the parts of one that DDL
reads on its own (`parse_or_sqlglot_error` for a column's type and constraints, `expression` for a
DEFAULT or CHECK) and names (`table_name`, `column_name`). Not here: type nodes the engine builds
from its own constant names (`exp.DataType.build("TEXT")`), which read no client text.
"""

from __future__ import annotations

import contextlib
import functools
import re
from collections.abc import Iterator
from typing import Any

from sqlglot import exp
from sqlglot.dialects.postgres import Postgres
from sqlglot.errors import ParseError, TokenError
from sqlglot.tokens import TokenType

from icegres.pg.errors import FEATURE_NOT_SUPPORTED, SYNTAX_ERROR, PgError
from icegres.sql import text_scan, unicode_escapes, values_rows
from icegres.sql.lexer import split_quoted, unterminated_at


class IcegresPostgres(Postgres):
    """sqlglot's postgres dialect, plus `::oid[]` (and the other reg* arrays), plus the time-travel
    spellings sqlglot does not know.

    sqlglot parses `x::oid` but stops at the `[]` after an OID-like type; asyncpg's type
    introspection sends `ti.oid = any($1::oid[])`. It reads `FOR SYSTEM_TIME AS OF`,
    `FOR TIMESTAMP AS OF` and `FOR VERSION AS OF` after a table into its `version`; Spark's
    `FOR SYSTEM_VERSION AS OF` and the short `AS OF <value>` become the same node here.
    """

    class Parser(Postgres.Parser):
        # to_char's template stays as written: sqlglot's own translation of it is lossy ('Day'
        # became '%uay'); `to_char_formats` spells it for DataFusion (to_char.py).
        FUNCTIONS = {**Postgres.Parser.FUNCTIONS,
                     "TO_CHAR": lambda args: exp.Anonymous(this="to_char", expressions=args),
                     "TO_DATE": lambda args: exp.Anonymous(this="to_date", expressions=args),
                     "TO_TIMESTAMP": lambda args: (exp.Anonymous(this="to_timestamp", expressions=args)
                                                   if len(args) == 2 else exp.UnixToTime(this=args[0]))}

        def _parse_version(self) -> exp.Version | None:
            index = self._index
            matched = next(((p, t) for p, t in _VERSION_PHRASES if self._match_text_seq(*p)), None)
            if matched is None:
                return None
            phrase, this = matched
            if phrase == ("AS", "OF"):
                # Only before a value: `FROM t AS of` is a table aliased "of".
                curr = self._curr
                if curr is None or not (curr.token_type in _AS_OF_VALUES or curr.text.upper() == "TIMESTAMP"):
                    self._retreat(index)
                    return None
            elif not self._match_text_seq("AS", "OF"):
                self._retreat(index)
                return None
            value = self._parse_bitwise()  # Trino's `now() - interval '1' hour` as well as a literal
            if phrase == ("AS", "OF"):
                timestamp = isinstance(value, exp.Cast) and value.to.is_type(*exp.DataType.TEMPORAL_TYPES)
                this = "TIMESTAMP" if timestamp else "VERSION"
            return self.expression(exp.Version(this=this, expression=value, kind="AS OF"))

        def _parse_types(self, *args: Any, **kwargs: Any) -> exp.Expr | None:
            this = super()._parse_types(*args, **kwargs)
            if isinstance(this, exp.ObjectIdentifier) and self._match_pair(
                TokenType.L_BRACKET, TokenType.R_BRACKET
            ):
                return exp.DataType(this=exp.DType.ARRAY, expressions=[this], nested=True)
            return this


DIALECT = IcegresPostgres
# (words, what they read); the short `AS OF` decides by its value: a timestamp, else a version.
_VERSION_PHRASES = (
    (("FOR", "SYSTEM_TIME"), "TIMESTAMP"), (("FOR", "SYSTEM", "TIME"), "TIMESTAMP"),
    (("FOR", "TIMESTAMP"), "TIMESTAMP"), (("FOR", "SYSTEM_VERSION"), "VERSION"),
    (("FOR", "VERSION"), "VERSION"), (("AS", "OF"), "VERSION"),
)
_AS_OF_VALUES = frozenset({TokenType.NUMBER, TokenType.STRING, TokenType.PLACEHOLDER, TokenType.PARAMETER})


class ConstantValues(exp.Expression):
    """A big INSERT's VALUES list of constants as columns (`values_rows.ConstantRows`, its
    `rows`), in place of a tree of its rows: no walk descends into it. `whole` parses the text
    when the engine needs the tree after all."""

    arg_types = {"rows": True}


def parse(sql: str) -> exp.Expression:
    """The statement's tree (PgError 42601 if it does not parse). Shared: never change it."""
    with _syntax_errors(sql):
        return _read_or_parsed(sql) if len(sql) > BIG_TEXT else _parse_cached(sql)


def _read_or_parsed(sql: str) -> exp.Expression:
    """An INSERT of constants read by the lexer (its head parsed, its rows one node), else the
    parse."""
    rows = values_rows.read(sql) if len(sql) > VALUES_TEXT else None
    if rows is None:
        return _folded_parse(sql)
    tree = _folded_parse(f"{rows.head} VALUES (NULL) {rows.tail}")
    tree.set("expression", ConstantValues(rows=rows))
    return tree


def whole(values: ConstantValues) -> exp.Expression:
    """The tree of the statement `values` stands in (PgError 42601 if it does not parse)."""
    with _syntax_errors(values.args["rows"].sql):
        return _folded_parse(values.args["rows"].sql)


@contextlib.contextmanager
def _syntax_errors(sql: str) -> Iterator[None]:
    """sqlglot's errors (parsing `sql`) as PostgreSQL's 42601."""
    try:
        yield
    except TokenError:
        bad = unterminated_at(sql)
        if bad is None:
            raise PgError(SYNTAX_ERROR, "syntax error: unterminated quoted string or identifier") from None
        raise PgError(SYNTAX_ERROR, bad[0], position=bad[1] + 1) from None
    except ParseError as err:
        detail = err.errors[0] if err.errors else {}
        raise PgError(
            SYNTAX_ERROR,
            f"syntax error at or near \"{detail.get('highlight', '')}\""
            if detail.get("highlight")
            else "syntax error",
        ) from None


def parse_or_sqlglot_error(sql: str) -> exp.Expression:
    """`parse`, but failing with sqlglot's own ParseError (or TokenError), whose `errors` name the
    token it stopped at: for a caller that places the error in a text of its own (ddl.py parses a
    column's type and constraints inside a made-up CREATE TABLE). Shared: never change it."""
    return _parse_cached(sql)


# A text this long is parsed afresh each time, never kept by the cache: its tree is millions of
# objects, which every full collection of the garbage collector would walk for as long as the
# cache held it (and its memory with them).
BIG_TEXT = 1 << 16
# An INSERT … VALUES longer than this is read by the lexer where it can be (values_rows.py): from
# a few dozen rows on, that is faster than sqlglot's parse (1,000 rows: see bench values_insert).
VALUES_TEXT = 2048


@functools.lru_cache(maxsize=256)
def _parse_cached(sql: str) -> exp.Expression:
    return _read_or_parsed(sql)


def _folded_parse(sql: str) -> exp.Expression:
    try:
        tree = _parse_one(sql)
    except TokenError:
        # sqlglot's tokenizer reads `$1,$2` as the start of a dollar-quoted string.
        tree = _parse_one(_space_placeholders(sql))
    if tree is None:
        raise ParseError("no statement")
    tree = _folded(tree)
    # (a walk of the whole tree only where the text may hold such a string)
    return _plain_strings(tree) if text_scan.search(_PREFIXED_QUOTES, sql) else tree


_PREFIXED_QUOTES = (re.compile("n'"), re.compile("b'"), re.compile("x'"), re.compile("u&'"))  # lowered (text_scan)


def _plain_strings(tree: exp.Expression) -> exp.Expression:
    """`tree` with its N'…' and U&'…' constants as the plain strings they are (DataFusion plans
    neither: 0A000 "Unsupported Value"); B'…' and X'…' are bit strings to PostgreSQL, a type
    icegres has not (DataFusion would read X'…' as bytes): 0A000."""
    for node in list(tree.find_all(exp.National, exp.UnicodeString, exp.BitString, exp.HexString)):
        if isinstance(node, exp.BitString | exp.HexString):
            raise PgError(FEATURE_NOT_SUPPORTED, "bit string constants (B'…', X'…') are not supported: icegres has "
                          "no bit type", hint="For bytes, write a bytea constant: '\\x1f'::bytea.")
        text = node.this
        if isinstance(node, exp.UnicodeString):
            escape = node.args.get("escape")
            text = unicode_escapes.decode(text, escape.this if isinstance(escape, exp.Literal) else "\\")
        replacement = exp.Literal.string(text)
        if node is tree:
            return replacement
        node.replace(replacement)
    return tree


def _folded(tree: exp.Expression) -> exp.Expression:
    """`tree` with PostgreSQL's names: its lexer folds an unquoted identifier to lower case
    (`UPDATE t AS D SET V = 1 WHERE D.a = 0` names d and v), a quoted one is kept as written.
    DataFusion folds the text it is sent the same way, but the engine reads names from the
    tree (DML targets, aliases and column lists, output names, table references)."""
    for node in tree.find_all(exp.Identifier):
        if not node.quoted and isinstance(node.this, str) and not node.this.islower():
            node.set("this", node.this.lower())
    return tree


def expression(text: str) -> exp.Expression:
    """One value expression (a DEFAULT, a CHECK) read as a statement's would be (PgError 42601 if
    it is not exactly one). Shared: never change it."""
    tree = parse(f"SELECT {text}")
    if not isinstance(tree, exp.Select) or len(tree.expressions) != 1 or any(
            value for key, value in tree.args.items() if key != "expressions"):
        raise PgError(SYNTAX_ERROR, "syntax error")
    return tree.expressions[0]


def table_name(text: str) -> exp.Table:
    """A table name as a statement writes it (`demo.t`, `"My T"`, `"t@b"`): a new node, the
    caller's to change (sqlglot's ParseError where `text` is not one)."""
    return exp.to_table(text, dialect=DIALECT)


def column_name(text: str) -> str:
    """The name a column reference written as `text` names (sqlglot's ParseError where it is not
    one)."""
    return exp.to_column(text, dialect=DIALECT).name


def _parse_one(sql: str) -> exp.Expression | None:
    import sqlglot

    return sqlglot.parse_one(sql, read=DIALECT)


def _space_placeholders(sql: str) -> str:
    """Put a space after each `$n` placeholder outside quotes (`$1,$2` -> `$1 ,$2 `)."""
    return "".join(part if quoted else re.sub(r"(\$\d+)", r"\1 ", part) for part, quoted in split_quoted(sql))
