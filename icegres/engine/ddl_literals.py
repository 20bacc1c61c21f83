"""A DDL statement's big string literals, read where they stand for text.

The front end makes a big literal of a CREATE TABLE, ALTER TABLE or COMMENT ON a parameter
(`$n`, protocol/pgwire/statements.py) as it does a query's, so that the DDL parser reads a
statement of a few dozen characters instead of 50 MB: sqlglot's tokenizer and generator each
pass over a literal in whole-text C calls (a `find`, a slice, a `replace`) that held the GIL for
tens of milliseconds apiece, for every other session. The parser takes such a parameter in two
places only — a COMMENT's text and a DEFAULT expression — where the command keeps it as the
literal it was (`filled`). A statement with one anywhere else (a CHECK's included: a check's
text is parsed again at every write) is parsed again as written (`written_statement`), so every
other reading stays the parser's.
"""

from __future__ import annotations

from collections.abc import Mapping

from icegres.pg import big_str
from icegres.sql.lexer import Kind as Tok
from icegres.sql.lexer import scan
from icegres.sql.pieces import BigText, quoted_parts
from icegres.sql.statement import Statement, classify


class Literals:
    """The parameters a DDL statement's big literals became, by name ("1" for $1), and which of
    them the parser has taken."""

    def __init__(self, values: Mapping[str, object]) -> None:
        self.values = values
        self.used: set[str] = set()

    def has(self, name: str) -> bool:
        return name in self.values

    def text(self, name: str) -> str:
        """The value of `$name` (a COMMENT's text)."""
        self.used.add(name)
        value = self.values[name]
        return value.text() if isinstance(value, BigText) else str(value)

    def filled(self, sql: str) -> str:
        """`sql` (a DEFAULT expression as the parser writes it) with each of these
        parameters written back as its literal."""
        out, pos = [], 0
        for kind, start, end in scan(sql):
            name = sql[start + 1:end]
            if kind is Tok.PARAM and name in self.values:
                self.used.add(name)
                out += [sql[pos:start], *_literal(self.values[name])]
                pos = end
        return big_str.join([*out, sql[pos:]]) if out else sql

    def all_used(self) -> bool:
        return self.used == set(self.values)


def written_statement(sql: str, values: Mapping[str, object]) -> Statement:
    """The statement with every big literal written back where it stood."""
    return classify(Literals(values).filled(sql))


def _literal(value: object) -> list[str]:
    """The parameter's value as a string literal, in pieces (joined once, with the rest)."""
    if isinstance(value, BigText):
        return quoted_parts(value)
    return ["'", str(value).replace("'", "''"), "'"]
