"""The names PostgreSQL gives a statement's output columns, and the aliases that keep them
through DataFusion."""

from __future__ import annotations

import re

from sqlglot import exp

from icegres.engine.rewrite.tree import _call, _Rewriter, _type_name

# --- output names -------------------------------------------------------------------------------


def pg_output_names(tree: exp.Expression) -> list[list[str]]:
    """What PostgreSQL calls each result column of the top-level SELECT(s), before rewriting.

    psycopg and pgjdbc read rows by column name; PostgreSQL's names (FigureColname) differ from
    DataFusion's ("version" vs "version()"), and rewrites replace expressions wholesale.
    """
    return [[item.alias if isinstance(item, exp.Alias) else _figure_colname(item)[0]
             for item in select.expressions] for select in _top_selects(tree)]


def output_names(tree: exp.Expression, rw: _Rewriter) -> exp.Expression:
    """Alias every computed top-level column with its PostgreSQL name, kept unique.

    DataFusion refuses two columns with one name (psql's publication query selects NULL twice),
    so later duplicates get a suffix.
    """
    for select, names in zip(_top_selects(tree), rw.output_names, strict=False):
        if len(names) == len(select.expressions):
            _name_projections(select, names)
    return tree


def scope_output_names(tree: exp.Expression, rw: _Rewriter) -> exp.Expression:
    """Alias the computed columns of every CTE and derived table with the names PostgreSQL gives
    them, before any step rewrites them.

    An outer query may name them: pgcli's casing() has `WITH Words AS (SELECT ..., COUNT(1) FROM
    ...)` and then `ORDER BY Count`, and `ROW_NUMBER() OVER (...)` read as `Row_Number`; DataFusion
    calls those columns "count(Int64(1))" and "row_number() PARTITION BY ...". A scope whose
    alias lists its column names has its names already.
    """
    for scope in list(tree.find_all(exp.CTE, exp.Subquery)):
        if isinstance(scope, exp.Subquery) and not isinstance(scope.parent, (exp.From, exp.Join)):
            continue
        alias = scope.args.get("alias")
        if alias is not None and alias.columns:
            continue
        for select in _top_selects(scope.this):
            _name_projections(select, [item.alias if isinstance(item, exp.Alias) else _figure_colname(item)[0]
                                       for item in select.expressions])
    return tree


def _top_selects(tree: exp.Expression) -> list[exp.Select]:
    if isinstance(tree, exp.Select):
        return [tree]
    if isinstance(tree, exp.SetOperation):
        return [*_top_selects(tree.this), *_top_selects(tree.expression)]
    if isinstance(tree, exp.Subquery):
        return _top_selects(tree.this)
    return []


def _name_projections(select: exp.Select, names: list[str]) -> None:
    # Plain columns keep their names: DataFusion tells a.x from b.x apart itself.
    used = {item.alias_or_name for item in select.expressions if isinstance(item, (exp.Alias, exp.Column))}
    projections = []
    for item, name in zip(select.expressions, names, strict=True):
        if isinstance(item, (exp.Alias, exp.Column, exp.Star)):
            projections.append(item)
            continue
        unique, n = name, 1
        while unique in used:
            n += 1
            unique = f"{name}_{n}"
        used.add(unique)
        projections.append(exp.alias_(item, unique, quoted=True))
    select.set("expressions", projections)


_KEYWORD_NAMES: dict[type[exp.Expression], str] = {
    exp.CurrentUser: "current_user", exp.SessionUser: "session_user",
    exp.CurrentSchema: "current_schema", exp.CurrentCatalog: "current_catalog",
    exp.CurrentDate: "current_date", exp.CurrentTimestamp: "current_timestamp",
    exp.Array: "array", exp.Coalesce: "coalesce", exp.Nullif: "nullif", exp.Exists: "exists",
}


def _figure_colname(node: exp.Expression) -> tuple[str, int]:
    """PostgreSQL's FigureColnameInternal: (name, strength); strength 2 beats a CASE's "case"."""
    if isinstance(node, exp.Column):
        return (node.name, 2) if not isinstance(node.this, exp.Star) else ("?column?", 0)
    if isinstance(node, exp.Dot) and isinstance(node.expression, exp.Identifier):
        return node.expression.name, 2  # (x).n
    if isinstance(node, (exp.Paren, exp.Collate, exp.Bracket, exp.Window)):  # Window: f() OVER (...) is f
        return _figure_colname(node.this)
    if isinstance(node, exp.Cast):
        name, strength = _figure_colname(node.this)
        return (name, strength) if strength > 1 else (_type_name(node.to) or "?column?", 1)
    if isinstance(node, exp.Case):
        default = node.args.get("default")
        name, strength = _figure_colname(default) if default is not None else ("?column?", 0)
        return (name, strength) if strength > 1 else ("case", 1)
    if isinstance(node, exp.Subquery) and isinstance(node.this, exp.Select) and node.this.expressions:
        first = node.this.expressions[0]
        return (first.alias, 2) if isinstance(first, exp.Alias) else _figure_colname(first)
    keyword = _KEYWORD_NAMES.get(type(node))
    if keyword is not None:
        return keyword, 2
    if isinstance(node, exp.Dot) and isinstance(node.expression, exp.Func):
        return _figure_colname(node.expression)  # pg_catalog.version()
    if isinstance(node, exp.Anonymous):
        return str(node.this).lower(), 2
    if isinstance(node, exp.Func) and not isinstance(node, (exp.Binary, exp.Unary, exp.Not, exp.Connector)):
        # sqlglot types many calls (CurrentVersion for version()); the name is what it writes
        m = _CALL_NAME.match(node.sql(dialect="postgres", normalize_functions="lower"))
        return (m.group(1), 2) if m else ("?column?", 0)
    return "?column?", 0


_CALL_NAME = re.compile(r"([a-z_][a-z0-9_]*)\(")


# Order matters: names and operators first, then the reg*::text pairs before the casts that would
# take them apart, then the array and function shapes, then subquery aggregation and names.
def _oid_columns() -> frozenset[str]:
    from icegres.engine.pg_relations import RELATIONS

    return frozenset(name for rel in RELATIONS for name, kind in rel.columns if kind == "oid")


def oid_array_aggregates(tree: exp.Expression, rw: _Rewriter) -> exp.Expression:
    """array_agg over an oid column is oid[] (1028), not int8[]: asyncpg's type introspection
    (`attrtypoids`) would otherwise describe a type it must introspect itself, forever."""
    oid_columns = _oid_columns()

    def fix(node: exp.Expression) -> exp.Expression:
        if isinstance(node, exp.ArrayAgg):
            inner = node.this.this if isinstance(node.this, exp.Order) else node.this
            if isinstance(inner, exp.Column) and inner.name.lower() in oid_columns:
                return _call("pg_oid_array", node.copy())
        return node

    return tree.transform(fix)


def asyncpg_oid_array_outputs(tree: exp.Expression, rw: _Rewriter) -> exp.Expression:
    """asyncpg's type introspection builds `attrtypoids` with CASE inside a recursive CTE, which
    drops the oid[] annotation; re-annotate it where it is defined, so every SELECT (and the
    final `SELECT *`) passes it on. Without it asyncpg sees int8[] and introspects forever."""

    def fix(node: exp.Expression) -> exp.Expression:
        if isinstance(node, exp.Alias) and node.alias.lower() == "attrtypoids":
            inner = node.this
            if not (isinstance(inner, exp.Anonymous) and inner.name.lower() == "pg_oid_array"):
                return exp.alias_(_call("pg_oid_array", inner.copy()), "attrtypoids")
        return node

    return tree.transform(fix)
