"""The columns a statement uses of each table it names: what column privileges are checked against
when a role lacks the privilege on a whole table (PostgreSQL checks each column a statement
reads, assigns or inserts).

A query's columns are found by sqlglot's qualifier over the tables' schemas (stars expanded, each
column bound to the table it reads, through subqueries and CTEs). A write's own columns come from
its clauses: the SET targets of an UPDATE, the column list of an INSERT (every column without
one), and the target's columns its WHERE, RETURNING and assigned expressions read, every name of
the target's that appears there unqualified counting (over-approximated, never under). Where the
columns cannot be told (a statement sqlglot cannot qualify), the answer is None and the check
fails closed.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from sqlglot import exp

Key = tuple[str, str]

__all__ = ["read_columns", "reading_query", "target_columns"]


def read_columns(tree: exp.Expression, resolve: Callable[[str | None, str], Key | None],
                 names_of: Callable[[Key], list[str]]) -> dict[Key, set[str]] | None:
    """Key -> the columns a query reads of it (None: not known)."""
    from sqlglot.optimizer.qualify import qualify
    from sqlglot.optimizer.scope import traverse_scope

    from icegres.sql.parse import DIALECT

    copy = tree.copy()
    schema: dict[str, dict[str, dict[str, str]]] = {}
    keys: dict[tuple[str, str], Key] = {}
    for table in copy.find_all(exp.Table):
        key = resolve(table.db or None, table.name)
        if key is None:
            continue
        table.set("db", exp.to_identifier(key[0]))
        schema.setdefault(key[0], {})[key[1]] = {c: "text" for c in names_of(key)}
        keys[key] = key
    try:
        qualified = qualify(copy, schema=schema, dialect=DIALECT, validate_qualify_columns=False,
                            quote_identifiers=False, expand_stars=True)
        out: dict[Key, set[str]] = {k: set() for k in keys}
        for scope in traverse_scope(qualified):
            for column in scope.columns:
                source = scope.sources.get(column.table)
                if isinstance(source, exp.Table) and (source.db, source.name) in out:
                    out[(source.db, source.name)].add(column.name)
        return out
    except Exception:  # noqa: BLE001 (an unqualifiable statement: fail closed)
        return None


def reading_query(tree: exp.Expression) -> exp.Expression | None:
    """The query whose reads are a write's reads of the tables it does not write: an UPDATE …
    FROM's `SELECT <assigned values>, <returning> FROM target, <sources> WHERE …`, a DELETE …
    USING's likewise, a MERGE's (`_merge_reads`), an INSERT's query. None for a write that reads
    no other table."""
    if isinstance(tree, exp.Insert):
        source = tree.expression
        if not isinstance(source, exp.Query):
            return None
        query = source.copy()
        if tree.args.get("with_") is not None:
            query.set("with_", tree.args["with_"].copy())
        return query
    if isinstance(tree, exp.Update):
        found = tree.args.get("from_")
        sources = [found.this] if isinstance(found, exp.From) else []
        values = [e.expression for e in tree.expressions if isinstance(e, exp.EQ) and e.expression is not None]
    elif isinstance(tree, exp.Delete):
        sources, values = list(tree.args.get("using") or []), []
    elif isinstance(tree, exp.Merge):
        return _merge_reads(tree)
    else:
        return None
    if not sources or not isinstance(tree.this, exp.Table):
        return None
    where = tree.args.get("where")
    return _select_over(tree, values, sources, where.this if where is not None else None)


def _select_over(tree: exp.Expression, items: list[exp.Expression], sources: list[exp.Expression],
                 where: exp.Expression | None) -> exp.Expression:
    """`SELECT <items>, <tree's RETURNING> FROM <tree's target> CROSS JOIN <sources> WHERE
    <where>`, under the tree's WITH: a write's reads as one query (copies throughout)."""
    returning = tree.args.get("returning")
    items = [*items, *(returning.expressions if returning is not None else [])]
    query = exp.select(*([e.copy() for e in items] or [exp.Literal.number(1)])).from_(tree.this.copy())
    for source in sources:
        query = query.join(source.copy(), join_type="cross")
    if where is not None:
        query = query.where(where.copy())
    if tree.args.get("with_") is not None:
        query.set("with_", tree.args["with_"].copy())
    return query


def _merge_target_columns(tree: exp.Merge, letter: str, names: list[str], qualifier: str) -> set[str] | None:
    """A MERGE's columns of its target: assigned by its UPDATE actions (w), given by its INSERT
    actions (a: the column lists, every column without one), read in its ON, conditions, values
    and RETURNING (r: qualified by the target's name, or unqualified names of its columns)."""
    whens = tree.args.get("whens")
    actions = [w.args.get("then") for w in whens.expressions] if whens is not None else []
    if letter == "w":
        return {e.this.name for a in actions if isinstance(a, exp.Update)
                for e in a.expressions if isinstance(e, exp.EQ) and isinstance(e.this, exp.Column)}
    if letter == "a":
        out: set[str] = set()
        for action in actions:
            if isinstance(action, exp.Insert):
                listed = action.this.expressions if isinstance(action.this, exp.Tuple) else []
                out |= {c.name for c in listed} if listed else set(names)
        return out
    if letter != "r":
        return None
    reads = _merge_reads(tree)
    if reads is None:
        return None
    return {c.name for c in reads.find_all(exp.Column) if c.name in names and c.table in ("", qualifier)}


def _merge_reads(tree: exp.Merge) -> exp.Expression | None:
    """A MERGE's reads as `SELECT <its conditions and values> FROM target CROSS JOIN source
    WHERE <on>`: the columns it reads of its source (and of its target) are that query's."""
    source, on, whens = tree.args.get("using"), tree.args.get("on"), tree.args.get("whens")
    if source is None or whens is None or not isinstance(tree.this, exp.Table):
        return None
    items: list[exp.Expression] = []
    for when in whens.expressions:
        if when.args.get("condition") is not None:
            items.append(when.args["condition"])
        then = when.args.get("then")
        if isinstance(then, exp.Update):
            items += [e.expression for e in then.expressions if isinstance(e, exp.EQ) and e.expression is not None]
        elif isinstance(then, exp.Insert) and isinstance(then.expression, exp.Tuple):
            items += then.expression.expressions
    return _select_over(tree, items, [source], on)


def target_columns(tree: exp.Expression, letter: str, names: list[str]) -> set[str] | None:
    """The target's columns a write uses with privilege `letter` (a: INSERT, w: UPDATE, r: the
    reads of its own columns); `names` are the target's columns."""
    target = tree.this.this if isinstance(tree, exp.Insert) and isinstance(tree.this, exp.Schema) else tree.this
    qualifier = target.alias_or_name if isinstance(target, exp.Table) else ""
    if letter == "a" and isinstance(tree, exp.Insert):
        listed = tree.this.expressions if isinstance(tree.this, exp.Schema) else []
        return {c.name for c in listed} if listed else set(names)
    if letter == "w" and isinstance(tree, exp.Update):
        return {e.this.name for e in tree.expressions if isinstance(e, exp.EQ) and isinstance(e.this, exp.Column)}
    if letter == "w" and isinstance(tree, exp.Insert):  # ON CONFLICT DO UPDATE SET ...
        conflict = tree.args.get("conflict")
        sets = conflict.args.get("expressions") or [] if conflict is not None else []
        return {e.this.name for e in sets if isinstance(e, exp.EQ) and isinstance(e.this, exp.Column)}
    if isinstance(tree, exp.Merge):
        return _merge_target_columns(tree, letter, names, qualifier)
    if letter != "r":
        return None
    parts: list[Any] = [tree.args.get("where"), tree.args.get("returning")]
    if isinstance(tree, exp.Update):
        parts += [e.expression for e in tree.expressions if isinstance(e, exp.EQ)]
    used: set[str] = set()
    for part in parts:
        if part is None:
            continue
        for column in part.find_all(exp.Column):
            if column.name in names and column.table in ("", qualifier):
                used.add(column.name)
    return used
