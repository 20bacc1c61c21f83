"""Bind every unqualified column to the relation PostgreSQL binds it to, by writing its qualifier.

PostgreSQL resolves a bare name in a subquery against the innermost FROM that has a column of
that name, then the next enclosing one outwards (transformColumnRef / colNameToVar). The rewrite
steps after this one move conditions in and out of subqueries (functions.py decorrelates them
for DataFusion) and can only tell an inner column from an outer one by its qualifier: left bare,
`where table_name = t.table_name` inside `(select count(*) from information_schema.columns ...)`
looked like a condition on the outer row alone and was lifted out, counting every column of
every table. Qualifying first, from the columns each relation really has, makes every later step
see the binding PostgreSQL would make.

A name is qualified only when the binding is certain: every relation in the scopes searched up to
the binding has known columns (catalog relations, lakehouse tables, CTEs and derived tables with
named outputs) and exactly one of the innermost scope's relations has it. Anything else (a
set-returning function in FROM, `*` in a derived table, an ambiguous name, a select-list alias)
stays as it was, for DataFusion to bind innermost-first as before.

Binding a column also notes what its relation says of its type where later steps need it: the
scale of a numeric column and whether it is floating point (Column.meta; numeric.py).
"""

from __future__ import annotations

from dataclasses import dataclass

import pyarrow as pa
from sqlglot import exp

from icegres.engine import pg_catalog, pg_relations
from icegres.engine.rewrite.tree import _Rewriter

_SYSTEM_OIDS: dict[tuple[str, str], int] = {(r.schema, r.name): r.fixed_oid for r in pg_relations.RELATIONS
                                             if r.fixed_oid is not None}
_SYSTEM_COLUMNS: dict[tuple[str, str], frozenset[str]] = {
    (r.schema, r.name): frozenset(name for name, _ in r.columns) for r in pg_relations.RELATIONS
}


@dataclass(frozen=True)
class _Source:
    alias: str  # the qualifier a column of this relation is written with
    columns: frozenset[str] | None  # None: not known, so no name can be bound past this scope
    decimal_scales: tuple[tuple[str, int], ...] = ()  # its numeric columns and their scales
    floats: frozenset[str] = frozenset()  # its real / double precision columns
    oid: int | None = None  # the relation's OID: its system column tableoid


@dataclass(frozen=True)
class _Scope:
    sources: tuple[_Source, ...]
    output_names: frozenset[str]

    def source(self, alias: str) -> _Source | None:
        return next((s for s in self.sources if s.alias == alias), None)

    def bind(self, name: str) -> tuple[str | None, bool]:
        """(qualifier, certain): the one source with `name`; certain=False stops the search."""
        if any(s.columns is None for s in self.sources):
            return None, False
        having = [s.alias for s in self.sources if s.columns is not None and name in s.columns]
        if len(having) == 1:
            return having[0], True
        if having:  # ambiguous: PostgreSQL raises 42702; let DataFusion say so
            return None, False
        return None, True


def bind_columns(tree: exp.Expression, rw: _Rewriter) -> exp.Expression:
    """Qualify bare column names in every SELECT of the statement, innermost scope first."""
    ctes = _cte_columns(tree)
    for select in _outermost_selects(tree):
        _bind_select(select, [], rw, ctes)
    return tree


def _outermost_selects(tree: exp.Expression) -> list[exp.Select]:
    return [s for s in tree.find_all(exp.Select) if _enclosing_select(s) is None]


def _enclosing_select(node: exp.Expression) -> exp.Select | None:
    parent = node.parent
    while parent is not None:
        if isinstance(parent, exp.Select):
            return parent
        if isinstance(parent, exp.CTE):
            return None  # a CTE's body is a scope of its own, not nested in the statement's
        parent = parent.parent
    return None


def _bind_select(select: exp.Select, outer: list[_Scope], rw: _Rewriter,
                 ctes: dict[str, frozenset[str] | None]) -> None:
    scope = _Scope(_sources(select, rw, ctes), frozenset(n.lower() for n in select.named_selects))
    stack = [scope, *outer]
    for column, owner in _own_columns(select):
        if owner is not select or isinstance(column.parent, exp.Ordered):
            continue
        if column.name.lower() == "tableoid":
            _system_column(column, scope)
            continue
        qualifier = column.table.lower() if column.table else _resolve(column.name.lower(), stack)
        if qualifier is None:
            continue
        if not column.table:
            column.set("table", exp.to_identifier(qualifier))
        _note_decimal(column, qualifier, stack)
    for nested in _nested_selects(select):
        _bind_select(nested, stack, rw, ctes)


DECIMAL_SCALE = "pg_decimal_scale"  # Column.meta: the scale of a numeric column (numeric.py reads it)
FLOAT = "pg_float"  # Column.meta: a real / double precision column


def _system_column(column: exp.Column, scope: _Scope) -> None:
    """x.tableoid -> the OID of x (pg_dump reads it of every catalog row it dumps)."""
    if column.table:
        source = scope.source(column.table.lower())
    else:
        source = scope.sources[0] if len(scope.sources) == 1 else None
    if source is not None and source.oid is not None:
        column.replace(exp.cast(exp.Literal.number(source.oid), exp.DataType.build("BIGINT")))


def _note_decimal(column: exp.Column, qualifier: str, stack: list[_Scope]) -> None:
    for scope in stack:
        source = scope.source(qualifier)
        if source is not None:
            scale = dict(source.decimal_scales).get(column.name.lower())
            if scale is not None:
                column.meta[DECIMAL_SCALE] = scale
            if column.name.lower() in source.floats:
                column.meta[FLOAT] = True
            return


def _resolve(name: str, stack: list[_Scope]) -> str | None:
    for depth, scope in enumerate(stack):
        qualifier, certain = scope.bind(name)
        if qualifier is not None or not certain:
            return qualifier
        if depth == 0 and name in scope.output_names:
            return None  # GROUP BY / HAVING on a select-list alias
    return None


def _own_columns(select: exp.Select) -> list[tuple[exp.Column, exp.Select | None]]:
    """Each column under `select` with the SELECT whose scope it is in."""
    return [(c, _enclosing_select(c)) for c in select.find_all(exp.Column)]


def _nested_selects(select: exp.Select) -> list[exp.Select]:
    return [s for s in select.find_all(exp.Select) if s is not select and _enclosing_select(s) is select]


def _sources(select: exp.Select, rw: _Rewriter, ctes: dict[str, frozenset[str] | None]) -> tuple[_Source, ...]:
    from_ = select.args.get("from_")
    items = [from_.this] if from_ is not None else []
    items += [j.this for j in select.args.get("joins") or []]
    return tuple(_source(leaf, rw, ctes) for item in items for leaf in _join_leaves(item))


def _join_leaves(item: exp.Expression) -> list[exp.Expression]:
    """The relations of a parenthesized join `((a JOIN b ON ...) JOIN c ON ...)`, which sqlglot
    reads as an unaliased Subquery around the first relation, that relation carrying the joins."""
    if not _is_parenthesized_join(item):
        return [item]
    first = item.this
    leaves = _join_leaves(first) if _is_parenthesized_join(first) else [first]
    for join in first.args.get("joins") or []:
        leaves += _join_leaves(join.this)
    return leaves


def _is_parenthesized_join(item: exp.Expression) -> bool:
    return isinstance(item, exp.Subquery) and not item.alias and not isinstance(item.this, exp.Query)


def _source(item: exp.Expression, rw: _Rewriter, ctes: dict[str, frozenset[str] | None]) -> _Source:
    alias = item.alias_or_name.lower() if hasattr(item, "alias_or_name") else ""
    if not alias:
        return _Source(alias, None)
    alias_columns = _alias_columns(item)
    if alias_columns is not None:
        return _Source(alias, alias_columns)
    if isinstance(item, exp.Table) and isinstance(item.this, exp.Identifier):
        schema, name = item.text("db").lower(), item.name.lower()
        if not schema and name in ctes:
            return _Source(alias, ctes[name])
        if not schema:
            return _Source(alias, None)
        return _Source(alias, _table_columns(schema, name, rw), *_table_kinds(schema, name, rw),
                       oid=_relation_oid(schema, name, rw))
    if isinstance(item, exp.Subquery) and isinstance(item.this, exp.Query):
        return _Source(alias, _output_columns(item.this))
    return _Source(alias, None)


def _alias_columns(item: exp.Expression) -> frozenset[str] | None:
    alias = item.args.get("alias")
    names = alias.columns if isinstance(alias, exp.TableAlias) else None
    return frozenset(c.name.lower() for c in names) if names else None


def _table_columns(schema: str, name: str, rw: _Rewriter) -> frozenset[str] | None:
    system = _SYSTEM_COLUMNS.get((schema, name))
    if system is not None:
        return system
    index = pg_catalog.current_index(rw.env)
    entry = index.relations.get((schema, name)) if index is not None else None
    if entry is None or entry.relkind != "r" or entry.table is None:
        return None  # a view (its columns are its query's), or not known to this snapshot
    return frozenset(c.name.lower() for c in entry.columns)


def _relation_oid(schema: str, name: str, rw: _Rewriter) -> int | None:
    index = pg_catalog.current_index(rw.env)
    entry = index.relations.get((schema, name)) if index is not None else None
    return entry.oid if entry is not None else _SYSTEM_OIDS.get((schema, name))


def _table_kinds(schema: str, name: str, rw: _Rewriter) -> tuple[tuple[tuple[str, int], ...], frozenset[str]]:
    """A lakehouse table's numeric columns with their scales, and its floating-point columns."""
    index = pg_catalog.current_index(rw.env)
    entry = index.relations.get((schema, name)) if index is not None else None
    if entry is None or entry.table is None:
        return (), frozenset()
    decimals = tuple((c.name.lower(), c.arrow_type.scale) for c in entry.columns if pa.types.is_decimal(c.arrow_type))
    floats = frozenset(c.name.lower() for c in entry.columns if pa.types.is_floating(c.arrow_type))
    return decimals, floats


def _output_columns(query: exp.Query) -> frozenset[str] | None:
    names = [n.lower() for n in query.named_selects]
    if not names or "*" in names or "" in names:
        return None
    return frozenset(names)


def _cte_columns(tree: exp.Expression) -> dict[str, frozenset[str] | None]:
    found: dict[str, frozenset[str] | None] = {}
    for cte in tree.find_all(exp.CTE):
        aliased = _alias_columns(cte)
        body = cte.this
        found[cte.alias_or_name.lower()] = (
            aliased if aliased is not None
            else _output_columns(body) if isinstance(body, exp.Query) else None
        )
    return found
