"""The DB-API's `qmark` parameter style: `?` placeholders, numbered as PostgreSQL's `$n`.

`adbc_driver_flightsql.dbapi.paramstyle` is "qmark" and the Arrow Flight SQL JDBC driver sends
JDBC's `?` too, so a statement text arriving over Flight SQL may name its parameters `?`: the
first is `$1`, the next `$2`, in the order they are written, and the engine reads the text with
`$n` in their place. A `?` counts only where the lexer reads an operator character: inside a
string, a quoted name, a dollar quote or a comment it is text (an unterminated one runs to the
end, so a `?` after it is text too).

PostgreSQL reads `?` as an operator character (jsonb's `?`, `?|`, `?&`, `@?`); where the client
declares the qmark style that cannot be, so over Flight SQL every such `?` is a placeholder. The
pgwire front end never calls this: there `?` stays what PostgreSQL makes of it.

Naming parameters both ways in one statement is refused (42601): `?` after `$1` could mean `$2`
or `$1` again, and no reading is the one the client meant.
"""

from __future__ import annotations

import re

from icegres.pg.errors import SYNTAX_ERROR, PgError
from icegres.sql.lexer import Kind, scan

# A `$n` written where a `?` was would glue to a neighbour the lexer reads together with it
# (`x?` -> `x$1`, a name; `?1` -> `$11`; `?$$` -> `$1$$`; `??` -> `$1$2`): such neighbours get a
# space between them and the `$n`.
_GLUES = re.compile(r"[\w$.'\"?\x80-\U0010ffff]")


def number_qmarks(sql: str) -> str:
    """`sql` with each `?` placeholder written as `$1`, `$2`, … in order; `sql` itself when it
    has none. PgError 42601 (at the first placeholder of the second style) when it names
    parameters as `$n` too."""
    if "?" not in sql:
        return sql
    qmarks: list[int] = []
    first_numbered: int | None = None
    for kind, start, end in scan(sql):
        if kind is Kind.OP and end - start == 1 and sql[start] == "?":
            qmarks.append(start)
        elif kind is Kind.PARAM and first_numbered is None:
            first_numbered = start
    if not qmarks:
        return sql
    if first_numbered is not None:
        later = max(qmarks[0], first_numbered)
        raise PgError(
            SYNTAX_ERROR,
            'cannot mix "?" and "$n" parameter placeholders in one statement: write every parameter '
            'as "?" (numbered in order) or every one as $1, $2, ...',
            position=later + 1,
        )
    out: list[str] = []
    pos = 0
    for number, at in enumerate(qmarks, start=1):
        out.append(sql[pos:at])
        before = " " if at > 0 and _GLUES.match(sql, at - 1) else ""
        after = " " if _GLUES.match(sql, at + 1) else ""
        out.append(f"{before}${number}{after}")
        pos = at + 1
    out.append(sql[pos:])
    return "".join(out)
