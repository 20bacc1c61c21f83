"""CHECK constraints in DDL, as PostgreSQL 15's grammar has them:

    col type [CONSTRAINT name] CHECK (expr) [NO INHERIT]
    [CONSTRAINT name] CHECK (expr) [NO INHERIT] [NOT VALID]          (a table element, ADD)

ddl.py's parser reads `[CONSTRAINT name] CHECK` and hands the rest of the element's tokens here.
"""

from __future__ import annotations

from sqlglot import exp
from sqlglot.tokens import Token, TokenType

from icegres.engine import check_text
from icegres.engine.ddl_commands import CheckDef
from icegres.pg import errors as e
from icegres.pg.errors import PgError


def column_check(constraint: exp.Expression, column: str) -> CheckDef:
    """A CHECK written on column `column` (sqlglot's CheckColumnConstraint, in its
    ColumnConstraint that holds the name, if any)."""
    kind = constraint.args.get("kind") if isinstance(constraint, exp.ColumnConstraint) else constraint
    name = constraint.name if isinstance(constraint, exp.ColumnConstraint) and constraint.this else None
    return CheckDef(name, check_text.normalized(kind.this), column=column)


def check_def(sql: str, toks: list[Token], name: str | None, alter: bool) -> CheckDef:
    """The element after `CHECK`: `(expr) [NO INHERIT] [NOT VALID]`, all of `toks`. NOT VALID
    counts only in ALTER TABLE … ADD (CREATE TABLE has no rows to leave unchecked)."""
    close = _closing(toks)
    if close is None:
        raise _syntax_error(sql, toks, 0 if toks and toks[0].token_type != TokenType.L_PAREN else len(toks))
    if close == 1:
        raise _syntax_error(sql, toks, 1)
    try:
        text = check_text.parse(sql[toks[1].start:toks[close - 1].end + 1])
    except PgError as err:
        if err.sqlstate == e.SYNTAX_ERROR:
            raise _syntax_error(sql, toks, 1) from None
        raise
    words = [t.text.upper() for t in toks[close + 1:]]
    not_valid, i = False, 0
    while i < len(words):
        pair = words[i:i + 2]
        if pair == ["NOT", "VALID"]:
            not_valid = True
        elif pair != ["NO", "INHERIT"]:
            # PostgreSQL points past NOT (`NOT NULL` is an error at NULL).
            raise _syntax_error(sql, toks, close + 1 + i + (1 if words[i] == "NOT" else 0))
        i += 2
    return CheckDef(name, text, not_valid=not_valid and alter)


def _closing(toks: list[Token]) -> int | None:
    """The index of the parenthesis closing the one `toks` starts with (None: no such)."""
    if not toks or toks[0].token_type != TokenType.L_PAREN:
        return None
    depth = 0
    for j, tok in enumerate(toks):
        depth += {TokenType.L_PAREN: 1, TokenType.R_PAREN: -1}.get(tok.token_type, 0)
        if depth == 0:
            return j
    return None


def _syntax_error(sql: str, toks: list[Token], j: int) -> PgError:
    if j >= len(toks):
        end = toks[-1].end + 1 if toks else len(sql)
        return PgError(e.SYNTAX_ERROR, "syntax error at end of input" if end >= len(sql.rstrip().rstrip(";"))
                       else f'syntax error at or near "{sql[end:].split()[0]}"', position=end + 1)
    tok = toks[j]
    return PgError(e.SYNTAX_ERROR, f'syntax error at or near "{sql[tok.start:tok.end + 1]}"', position=tok.start + 1)
