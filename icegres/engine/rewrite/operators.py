"""Rewrites of operators: COLLATE, OPERATOR(...), LIKE ... ESCAPE, boolean literals."""

from __future__ import annotations

from collections.abc import Callable

from sqlglot import exp

from icegres.engine import pg_relations
from icegres.engine.rewrite.tree import _bottom_up, _call, _Rewriter

# --- operators ----------------------------------------------------------------------------------


def drop_collate(tree: exp.Expression, rw: _Rewriter) -> exp.Expression:
    """`x COLLATE pg_catalog.default` -> x: psql adds it to every name pattern; DataFusion compares
    strings bytewise, which is what the C collation of icegres's database does anyway."""
    return _bottom_up(tree, lambda n: n.this if isinstance(n, exp.Collate) else n)


def _not(cls: type[exp.Expression]) -> Callable[[exp.Expression, exp.Expression], exp.Expression]:
    return lambda a, b: exp.Not(this=cls(this=a, expression=b))


_OPERATORS: dict[str, Callable[[exp.Expression, exp.Expression], exp.Expression]] = {
    "~": lambda a, b: exp.RegexpLike(this=a, expression=b),
    "~*": lambda a, b: exp.RegexpILike(this=a, expression=b),
    "!~": _not(exp.RegexpLike),
    "!~*": _not(exp.RegexpILike),
    "~~": lambda a, b: exp.Like(this=a, expression=b),
    "!~~": _not(exp.Like),
    "=": lambda a, b: exp.EQ(this=a, expression=b),
    "<>": lambda a, b: exp.NEQ(this=a, expression=b),
}


def explicit_operators(tree: exp.Expression, rw: _Rewriter) -> exp.Expression:
    """`a OPERATOR(pg_catalog.~) b` -> `a ~ b` (psql \\d with a pattern)."""

    def fn(node: exp.Expression) -> exp.Expression:
        if isinstance(node, exp.Operator):
            op = str(node.args.get("operator", "")).split(".")[-1].strip()
            make = _OPERATORS.get(op)
            if make is not None:
                return make(node.this, node.expression)
        return node

    return _bottom_up(tree, fn)


def like_escape(tree: exp.Expression, rw: _Rewriter) -> exp.Expression:
    """`LIKE p ESCAPE '/'` -> `LIKE pg_like_escape(p, '/')`: DataFusion knows only backslash.

    SQLAlchemy's get_schema_names sends `NOT LIKE 'pg/_' || '%' ESCAPE '/'` (psycopg: with the
    'pg/_' as a parameter), so the pattern is translated when the query runs.
    """

    def fn(node: exp.Expression) -> exp.Expression:
        if not isinstance(node, exp.Escape) or not isinstance(node.this, (exp.Like, exp.ILike)):
            return node
        like = node.this
        like.set("expression", _call("pg_like_escape", like.expression, node.expression))
        return like

    return _bottom_up(tree, fn)


_BOOL_TEXT = {"t": True, "true": True, "f": False, "false": False}


def boolean_literals(tree: exp.Expression, rw: _Rewriter) -> exp.Expression:
    """`i.indisprimary = 't'` -> `= true`: PostgreSQL reads the literal as bool, DataFusion can't
    compare bool with text (psqlODBC primaryKeys)."""

    def fn(node: exp.Expression) -> exp.Expression:
        if isinstance(node, (exp.EQ, exp.NEQ)):
            for side, other in (("expression", node.this), ("this", node.expression)):
                lit = node.args.get(side)
                if (
                    isinstance(lit, exp.Literal)
                    and lit.is_string
                    and lit.this.lower() in _BOOL_TEXT
                    and isinstance(other, exp.Column)
                    and other.name.lower() in pg_relations.BOOL_COLUMNS
                ):
                    node.set(side, exp.Boolean(this=_BOOL_TEXT[lit.this.lower()]))
        return node

    return _bottom_up(tree, fn)
