"""Row-value comparisons DataFusion does not plan."""

from __future__ import annotations

from sqlglot import exp

from icegres.engine.rewrite.tree import _bottom_up, _Rewriter
from icegres.pg.errors import SYNTAX_ERROR, PgError

_ROWS = "__icegres_rows"


def row_in_subqueries(tree: exp.Expression, rw: _Rewriter) -> exp.Expression:
    """`(a, b) IN (SELECT x, y ...)` in a filter -> `EXISTS (SELECT 1 FROM (SELECT x, y ...) AS
    r(_1, _2) WHERE r._1 = a AND r._2 = b)`.

    dbt's delete+insert strategy with a composite unique_key deletes `where (k1, k2) in (select
    distinct k1, k2 from <new rows>)`; DataFusion plans IN over one column only ("Too many
    columns! The subquery should only return one column"). The two differ only where the IN
    would be NULL (no row equal, one compared with a NULL) and EXISTS is false, so only an IN
    whose NULL a WHERE, ON or IS TRUE reads as false is rewritten: one reached from the filter
    through AND, OR and parentheses alone, never under NOT.
    """

    def fn(node: exp.Expression) -> exp.Expression:
        if not isinstance(node, exp.In) or not _filtered(node):
            return node
        row, query = node.this, node.args.get("query")
        if not isinstance(row, exp.Tuple) or len(row.expressions) < 2 or not isinstance(query, exp.Subquery):
            return node
        inner = query.this.copy()
        names = [f"_{i + 1}" for i in range(len(row.expressions))]
        if isinstance(inner, exp.Select) and not any(e.is_star for e in inner.expressions):
            if len(inner.expressions) != len(names):
                fewer = len(inner.expressions) < len(names)
                raise PgError(SYNTAX_ERROR, f"subquery has too {'few' if fewer else 'many'} columns")
            # DataFusion refuses two unnamed items of one name (`select 1, 1`); named items keep
            # their names, which the subquery's ORDER BY or GROUP BY may use.
            inner.set("expressions", [e if isinstance(e, exp.Alias | exp.Column) else exp.alias_(e, n, quoted=True)
                                      for e, n in zip(inner.expressions, names, strict=True)])
        rows = exp.Subquery(this=inner, alias=exp.TableAlias(
            this=exp.to_identifier(_ROWS, quoted=True), columns=[exp.to_identifier(n, quoted=True) for n in names]))
        matches = [exp.EQ(this=exp.column(n, _ROWS, quoted=True), expression=value.copy())
                   for n, value in zip(names, row.expressions, strict=True)]
        return exp.Exists(this=exp.select(exp.Literal.number(1)).from_(rows).where(exp.and_(*matches)))

    return _bottom_up(tree, fn)


def _filtered(node: exp.Expression) -> bool:
    """Whether `node` is a WHERE's, a JOIN ON's or an IS TRUE's operand, or reached from one
    through AND, OR and parentheses only."""
    parent = node.parent
    while isinstance(parent, exp.And | exp.Or | exp.Paren):
        node, parent = parent, parent.parent
    if isinstance(parent, exp.Is) and node.arg_key == "this" and parent.expression == exp.true():
        return True  # `(…) IS TRUE`, as the DML paths filter their targets: NULL is false there too
    return isinstance(parent, exp.Where) or (isinstance(parent, exp.Join) and node.arg_key == "on")
