"""CHECK constraints as text: what one may say, the name PostgreSQL gives one left unnamed, and
how a column rename or drop changes them.

A CHECK constraint is kept as its expression's SQL text in a table property
(ddl_commands.CHECK_PREFIX + its name), so every icegres server on the catalog enforces it; the
writes evaluate it over the rows they assign (dml/checks.py). Nothing here plans or reads.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence

from sqlglot import exp

from icegres.engine.ddl_commands import CheckDef
from icegres.pg import errors as e
from icegres.pg.errors import PgError
from icegres.sql.parse import expression as _parsed

# PostgreSQL's NAMEDATALEN - 1: a generated name is cut to fit, as ChooseConstraintName does.
_MAX_NAME_BYTES = 63


def expression(text: str) -> exp.Expression:
    """The constraint's expression (a copy: the caller may change it)."""
    return _parsed(text).copy()


def normalized(tree: exp.Expression) -> str:
    """The text a CHECK is kept as: PostgreSQL's spelling of `tree`, refused where PostgreSQL
    refuses the expression in a CHECK whatever the table."""
    for node in tree.walk():
        if isinstance(node, exp.Subquery | exp.Select | exp.Exists):
            raise PgError(e.FEATURE_NOT_SUPPORTED, "cannot use subquery in check constraint")
        if isinstance(node, exp.Window):
            raise PgError("42P20", "window functions are not allowed in check constraints")
        if isinstance(node, exp.AggFunc):
            raise PgError("42803", "aggregate functions are not allowed in check constraints")
        if isinstance(node, exp.Parameter | exp.Placeholder):
            raise PgError("42P02", "there is no parameter $1")
    return tree.sql(dialect="postgres", normalize_functions="lower")


def parse(text: str) -> str:
    """`normalized` of a CHECK's expression given as text (42601 where it does not parse)."""
    return normalized(_parsed(text))


def columns_of(text: str) -> set[str]:
    """The column names a CHECK's expression reads."""
    return {c.name for c in _parsed(text).find_all(exp.Column)}


def named(table: str, checks: Iterable[CheckDef], taken: Iterable[str]) -> list[tuple[str, str]]:
    """(name, text) of each check: its own name, or PostgreSQL's generated one: `t_col_check`
    for an expression over one column, `t_check` otherwise, with 1, 2, ... appended while the name
    is taken (by the table's other constraints or an earlier check here). 42710 for a given name
    that is taken."""
    used = set(taken)
    out = []
    for check in checks:
        if check.name is not None:
            if check.name in used:
                raise PgError(e.DUPLICATE_OBJECT, f'constraint "{check.name}" for relation "{table}" already exists')
            name = check.name
        else:
            columns = columns_of(check.text)
            name = _choose(table, next(iter(columns)) if len(columns) == 1 else None, used)
        used.add(name)
        out.append((name, check.text))
    return out


def _choose(table: str, column: str | None, used: set[str]) -> str:
    stem = [table, column] if column is not None else [table]
    for n in range(0, 10_000):
        suffix = "check" if n == 0 else f"check{n}"
        name = _fit("_".join(stem), suffix)
        if name not in used:
            return name
    raise PgError(e.DUPLICATE_OBJECT, f'could not choose a name for a check constraint on "{table}"')


def _fit(stem: str, suffix: str) -> str:
    """`stem_suffix` within 63 bytes, the stem cut as makeObjectName cuts it."""
    room = _MAX_NAME_BYTES - len(suffix.encode()) - 1
    cut = stem.encode()[:room].decode("utf-8", "ignore")
    return f"{cut}_{suffix}"


def renamed(text: str, old: str, new: str) -> str:
    """A CHECK's text after RENAME COLUMN old TO new."""
    tree = expression(text)
    for column in tree.find_all(exp.Column):
        if column.name == old:
            column.set("this", exp.to_identifier(new, quoted=True))
    return tree.sql(dialect="postgres", normalize_functions="lower")


def dropped_with(checks: Sequence[tuple[str, str]], column: str) -> list[str]:
    """The checks DROP COLUMN drops with the column: every one that reads it (PostgreSQL drops a
    CHECK that depends on a dropped column, without CASCADE)."""
    return [name for name, text in checks if column in columns_of(text)]


def definition(text: str) -> str:
    """pg_get_constraintdef of a CHECK: `CHECK ((a > 0))`, `CHECK (flag)` (PostgreSQL's deparser
    parenthesizes an operator expression, not a column or a function call)."""
    tree = _parsed(text)
    inner = text if isinstance(tree, exp.Column | exp.Func | exp.Boolean | exp.Paren) and not isinstance(
        tree, exp.Binary | exp.Predicate) else f"({text})"
    return f"CHECK ({inner})"


class CheckChanges:
    """An ALTER TABLE's changes to a table's CHECKs, as the properties to set and to remove."""

    def __init__(self, table: str, properties: dict[str, str], primary_key: Sequence[str]) -> None:
        from icegres.engine.ddl_commands import declared_checks

        self.table = table
        self.checks = dict(declared_checks(properties))
        self.others = {f"{table}_pkey"} if primary_key else set()  # other constraints' names
        self.set: dict[str, str] = {}
        self.removed: list[str] = []

    def add(self, checks: Iterable[CheckDef]) -> None:
        for name, text in named(self.table, checks, set(self.checks) | self.others):
            self._put(name, text)

    def drop(self, name: str, if_exists: bool, notices: list[str]) -> None:
        if name in self.checks:
            self._put(name, None)
        elif name in self.others:
            raise PgError(e.FEATURE_NOT_SUPPORTED, f'cannot drop constraint "{name}" of relation "{self.table}"',
                          hint="An Iceberg table's identifier fields are set when it is created.")
        elif if_exists:
            notices.append(f'constraint "{name}" of relation "{self.table}" does not exist, skipping')
        else:
            raise PgError(e.UNDEFINED_OBJECT, f'constraint "{name}" of relation "{self.table}" does not exist')

    def column_dropped(self, column: str) -> None:
        for name in dropped_with(list(self.checks.items()), column):
            self._put(name, None)

    def column_renamed(self, old: str, new: str) -> None:
        for name, text in list(self.checks.items()):
            if old in columns_of(text):
                self._put(name, renamed(text, old, new))

    def _put(self, name: str, text: str | None) -> None:
        from icegres.engine.ddl_commands import check_property

        key = check_property(name)
        if text is None:
            del self.checks[name]
            self.set.pop(key, None)
            self.removed.append(key)
        else:
            self.checks[name] = text
            self.set[key] = text
            if key in self.removed:
                self.removed.remove(key)
