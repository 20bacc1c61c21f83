"""CREATE [OR REPLACE] VIEW, DROP VIEW and ALTER VIEW ... RENAME TO -> frozen commands. Pure.

Called by `ddl.py`'s parser with itself: the statement frame is read with its token helpers
(`accept`, `qualified_name`, `ident`, ...), so the grammar and the errors are the same.
"""

from __future__ import annotations

from typing import Any

from sqlglot.tokens import TokenType

from icegres.engine.ddl_commands import CreateView, DropView, RenameView
from icegres.pg import errors as e
from icegres.pg.errors import PgError

_QUERY_STARTS = ("SELECT", "WITH", "VALUES", "TABLE")


def _unsupported(what: str, position: int, hint: str | None = None) -> PgError:
    return PgError(e.FEATURE_NOT_SUPPORTED, f"{what} is not supported", hint=hint, position=position)


def create_view(p: Any, or_replace: bool) -> CreateView:
    """After CREATE [OR REPLACE]: [TEMP] [RECURSIVE] VIEW name [(columns)] AS query."""
    if p.peek("TEMP") or p.peek("TEMPORARY"):
        raise _unsupported("CREATE TEMPORARY VIEW", p.position(),
                           "icegres views are Iceberg views every session sees: create a regular "
                           "view and drop it when done.")
    if p.peek("RECURSIVE"):
        raise _unsupported("CREATE RECURSIVE VIEW", p.position(),
                           "Write the query as WITH RECURSIVE inside an ordinary view.")
    p.expect("VIEW")
    schema, name = p.qualified_name()
    columns: list[str] = []
    if p.accept_type(TokenType.L_PAREN):
        columns.append(p.ident())
        while p.accept_type(TokenType.COMMA):
            columns.append(p.ident())
        p.expect_type(TokenType.R_PAREN)
    invoker = _view_options(p) if p.peek("WITH") else None
    p.expect("AS")
    query = _query_text(p)
    return CreateView(schema, name, query, tuple(columns), or_replace, invoker)


_TRUE = {"true": True, "on": True, "1": True, "yes": True, "false": False, "off": False, "0": False, "no": False}


def _view_options(p: Any) -> bool:
    """WITH (security_invoker [= boolean]): the one view option icegres keeps (its privileges
    and policies: pg/acl.py). check_option and security_barrier are 0A000."""
    p.expect("WITH")
    p.expect_type(TokenType.L_PAREN)
    invoker = True
    while True:
        position = p.position()
        option = p.toks[p.i].text.lower() if not p.at_end() else ""
        p.i += 1
        if option != "security_invoker":
            raise _unsupported(f"view option {option}", position)
        if p.accept_type(TokenType.EQ):
            word = p.toks[p.i].text.strip("'").lower() if not p.at_end() else ""
            if word not in _TRUE:
                raise PgError(e.INVALID_PARAMETER_VALUE, f'invalid value for boolean option "security_invoker": {word}',
                              position=p.position())
            p.i += 1
            invoker = _TRUE[word]
        if not p.accept_type(TokenType.COMMA):
            break
    p.expect_type(TokenType.R_PAREN)
    return invoker


def _query_text(p: Any) -> str:
    if p.at_end():
        raise p.error()
    end = len(p.toks)
    for j in range(max(p.i, end - 4), end):
        if p._match(("CHECK", "OPTION"), j) and p._match(("CHECK", "OPTION"), j) + j == end:
            raise _unsupported("WITH CHECK OPTION", p.position(j),
                               "icegres views are read-only: there is nothing to check.")
    if not (any(p.peek(word) for word in _QUERY_STARTS) or p.peek_type(TokenType.L_PAREN)):
        raise p.error()
    first, last = p.toks[p.i], p.toks[end - 1]
    if p.accept("TABLE"):
        name_start = p.toks[p.i].start if not p.at_end() else len(p.sql)
        p.qualified_name()
        p.expect_end()
        return f"SELECT * FROM {p.sql[name_start:last.end + 1]}"
    return str(p.sql[first.start:last.end + 1])


def drop_view(p: Any) -> DropView:
    """After DROP VIEW: [IF EXISTS] name [, ...] [CASCADE | RESTRICT]."""
    if_exists = p.accept("IF", "EXISTS")
    names = [p.qualified_name()]
    while p.accept_type(TokenType.COMMA):
        names.append(p.qualified_name())
    cascade = p.drop_behavior()
    return DropView(tuple(names), if_exists, cascade)


def alter_view(p: Any) -> RenameView:
    """After ALTER VIEW: [IF EXISTS] name RENAME TO new_name (the only ALTER VIEW here)."""
    if_exists = p.accept("IF", "EXISTS")
    schema, name = p.qualified_name()
    if p.accept("RENAME"):
        if p.accept("TO"):
            new_name = p.ident()
            p.expect_end()
            return RenameView(schema, name, new_name, if_exists)
        words = p._words(p.i)
        raise _unsupported(f"ALTER VIEW ... RENAME {' '.join(words or [])}".rstrip(), p.position(),
                           "Use CREATE OR REPLACE VIEW with the new column names.")
    words = p._words(p.i)
    if words:
        raise _unsupported(f"ALTER VIEW ... {' '.join(words)}", p.position())
    raise p.error()
