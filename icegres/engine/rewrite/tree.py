"""What every rewrite step uses: walking a tree bottom-up, building calls, reading names and types,
and the facts gathered once from the whole statement (`_Rewriter`)."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from sqlglot import exp


class _Rewriter:
    """What every step may need: the session, and facts gathered from the whole statement before
    any step changed it (`rewrite` gathers them)."""

    def __init__(self, env: Any, cte_names: set[str], zero_based: set[str], output_names: list[list[str]]) -> None:
        self.env = env
        self.cte_names = cte_names
        self.zero_based = zero_based
        self.output_names = output_names

    @property
    def search_path(self) -> list[str]:
        return list(getattr(self.env, "search_path", ["public"]))


def _bottom_up(node: exp.Expression, fn: Callable[[exp.Expression], exp.Expression]) -> exp.Expression:
    """Apply fn to every node, children before parents (a parent sees its rewritten children).

    fn sees node.parent as it was, so a rewrite can look at its context.
    """
    for key, value in list(node.args.items()):
        if isinstance(value, exp.Expression):
            new = _bottom_up(value, fn)
            if new is not value:
                node.set(key, new)
        elif isinstance(value, list):
            items = [_bottom_up(v, fn) if isinstance(v, exp.Expression) else v for v in value]
            if any(a is not b for a, b in zip(items, value, strict=True)):
                node.set(key, items)
    return fn(node)


def _call(name: str, *args: exp.Expression) -> exp.Anonymous:
    return exp.Anonymous(this=name, expressions=list(args))


def _func_name(node: exp.Expression) -> str | None:
    if isinstance(node, exp.Anonymous):
        return str(node.this).lower()
    if isinstance(node, exp.Func):
        return node.sql_name().lower()
    return None


def _type_name(dt: exp.Expression) -> str | None:
    """The PostgreSQL name of a cast target: 'regclass', 'oid[]', 'int2[]', 'text', ..."""
    if isinstance(dt, exp.ObjectIdentifier):
        return str(dt.this).lower()
    if not isinstance(dt, exp.DataType):
        return None
    if dt.this == exp.DType.ARRAY and dt.expressions:
        inner = _type_name(dt.expressions[0])
        return f"{inner}[]" if inner else None
    if dt.this == exp.DType.USERDEFINED:
        kind = dt.args.get("kind")
        if isinstance(kind, exp.Dot):
            schema, name = kind.this, kind.expression
            if isinstance(schema, exp.Identifier) and schema.name.lower() == "pg_catalog":
                return str(name.name if isinstance(name, exp.Identifier) else name).lower()
            return None
        return str(kind.name if isinstance(kind, exp.Identifier) else kind).lower()
    if dt.this == exp.DType.CHAR and not dt.expressions:
        return "char"  # sqlglot loses the quotes of "char"; bpchar(1) is text to us as well
    return dt.this.value.lower()


def _local_names(select: exp.Select) -> set[str]:
    local = {t.alias_or_name.lower() for t in select.find_all(exp.Table)}
    local |= {cte.alias_or_name.lower() for cte in select.find_all(exp.CTE)}
    # derived tables: their columns are the subquery's own too
    local |= {s.alias.lower() for s in select.find_all(exp.Subquery)
              if s.alias and isinstance(s.parent, (exp.From, exp.Join))}
    return local


def _outer_columns(node: exp.Expression, local: set[str]) -> list[exp.Column]:
    return [c for c in node.find_all(exp.Column) if c.table and c.table.lower() not in local]


def _conjuncts(node: exp.Expression | None) -> list[exp.Expression]:
    if node is None:
        return []
    if isinstance(node, exp.And):
        return [*_conjuncts(node.this), *_conjuncts(node.expression)]
    if isinstance(node, exp.Paren) and isinstance(node.this, exp.And):
        return _conjuncts(node.this)
    return [node]
