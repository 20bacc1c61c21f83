"""RETURNING of UPDATE … FROM and DELETE … USING over the joined source rows too, as PostgreSQL has
it: `RETURNING t.id, s.note`, `s.*`, and `*` (the target's columns, then each source's).

The join that finds the target's rows (joined.py) selects, beside each target row's number, the
source columns RETURNING names (`_src_<i>`), so the source row a target row was updated with (the
first joined) travels with it; the RETURNING list is then evaluated over the written (or deleted)
target rows with those columns beside them, each source reference replaced by its column.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING

from sqlglot import exp

from icegres.engine.dml.target import collect

if TYPE_CHECKING:
    from icegres.engine.query import QueryContext

_PREFIX = "_src_"


@dataclass(frozen=True)
class SourceColumns:
    """What the join selects for RETURNING (`select`), and RETURNING's list with each source
    reference replaced by the column that carries it (`returning`)."""

    select: tuple[exp.Expression, ...]
    returning: exp.Returning


def source_columns(qctx: QueryContext, returning: exp.Returning, alias: str, target_names: list[str],
                   sources: list[exp.Expression], frame: Callable[[exp.Select], exp.Select],
                   params: dict | None) -> SourceColumns:
    """The source columns `returning` reads, and the list rewritten to read them as carried."""
    qualifiers = _source_qualifiers(sources)
    picked: dict[tuple[str, str], str] = {}  # (qualifier or "", name) -> carrying column

    def carry(qualifier: str, name: str) -> exp.Column:
        carried = picked.setdefault((qualifier, name), f"{_PREFIX}{len(picked)}")
        return exp.column(carried, quoted=True)

    def source_names(qualifier: str) -> list[str]:
        node = qualifiers[qualifier]
        # (DataFusion matches `s.*` to a table only by its whole name: `dd.s.*` where not aliased)
        star = exp.Column(this=exp.Star(), table=node.this.copy(), db=node.args.get("db")) \
            if isinstance(node, exp.Table) and not node.alias else exp.Column(this=exp.Star(), table=exp.to_identifier(qualifier))
        probe = frame(exp.select(star)).limit(0)
        return collect(qctx.plan_tree(probe, params)).column_names

    items: list[exp.Expression] = []
    for item in returning.expressions:
        if isinstance(item, exp.Star):  # `*`: the target's columns, then each source's
            items += [exp.column(n, table=alias, quoted=True) for n in target_names]
            items += [exp.alias_(carry(q, n), n, quoted=True) for q in qualifiers for n in source_names(q)]
        elif isinstance(item, exp.Column) and isinstance(item.this, exp.Star) and item.table in qualifiers:
            items += [exp.alias_(carry(item.table, n), n, quoted=True) for n in source_names(item.table)]
        else:
            items.append(_replace_references(item.copy(), alias, target_names, qualifiers, carry))
    select = tuple(exp.alias_(exp.column(name, table=q or None, quoted=True), carried, quoted=True)
                   for (q, name), carried in picked.items())
    return SourceColumns(select, exp.Returning(expressions=items))


def _replace_references(item: exp.Expression, alias: str, target_names: list[str], qualifiers: dict[str, exp.Expression],
                        carry: Callable[[str, str], exp.Column]) -> exp.Expression:
    def fn(node: exp.Expression) -> exp.Expression:
        if not isinstance(node, exp.Column) or isinstance(node.this, exp.Star):
            return node
        if node.table in qualifiers or (not node.table and node.name not in target_names):
            named = exp.alias_(carry(node.table, node.name), node.name, quoted=True) \
                if node.parent is None or isinstance(node.parent, exp.Returning) else carry(node.table, node.name)
            return named
        return node

    if isinstance(item, exp.Column):
        return fn(item)
    return item.transform(fn)


def _source_qualifiers(sources: list[exp.Expression]) -> dict[str, exp.Expression]:
    """The names the FROM / USING items (and their joins) are known by, in order."""
    out: dict[str, exp.Expression] = {}
    for item in sources:
        for node in (item, *(j.this for j in item.args.get("joins") or [])):
            if isinstance(node, exp.Table | exp.Subquery) and node.alias_or_name:
                out.setdefault(node.alias_or_name, node)
    return out
