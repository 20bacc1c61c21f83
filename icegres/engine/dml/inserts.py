"""The rows an INSERT adds: computed and conformed to the table, nothing written.

`VALUES` of parameters and constants go straight into Arrow from a recipe (insert_shape.py);
anything else is planned as a query over the transaction's view (its source, with VALUES rows
that hold subqueries as SELECTs and integer arithmetic bounded against overflow). A VALUES list
whose column holds constants of several kinds is planned in groups of rows of one kind each,
as PostgreSQL assigns each item to its column apart (`_kind_groups`).
"""

from __future__ import annotations

from decimal import Decimal
from typing import TYPE_CHECKING, Any

import pyarrow as pa
from sqlglot import exp

from icegres.engine import big_values, row_security
from icegres.engine.assign import check_assignable, is_untyped
from icegres.engine.dml import checks, constant_rows, defaults
from icegres.engine.dml.target import (
    collect,
    insert_columns,
    target_key,
    target_plan,
    target_table,
    value_columns,
)
from icegres.engine.insert_shape import InsertShape, compile_shape
from icegres.pg.errors import PgError
from icegres.sql.parse import ConstantValues, whole
from icegres.sql.pieces import has_big

if TYPE_CHECKING:
    from icegres.engine.mounts import ReadPlan
    from icegres.engine.query import QueryContext
    from icegres.engine.txn import Key, TxnState


def rows_of_insert(qctx: QueryContext, txn: TxnState, tree: exp.Insert,
                   params: dict[str, Any] | None) -> tuple[Key, pa.Table, InsertShape | None]:
    """The target and the conformed rows an INSERT adds (nothing written), and the recipe that
    built them when they came straight from parameters and constants."""
    key = target_key(qctx, txn, target_table(tree))
    plan = target_plan(txn, key, files=False)  # (a source that reads the table reads the block's view)
    columns = insert_columns(tree, plan)
    defaults.check_always_identity(tree, plan, columns)
    tree = defaults.in_values(tree, plan, columns)
    source = tree.expression
    if source is None:  # INSERT ... DEFAULT VALUES: every column its default
        return key, checks.conform(qctx, defaults.fill(qctx, plan, pa.table({}), rows=1), plan, key), None
    elif not row_security.checks_writes(qctx, key) and (shape := compile_shape(tree, key, plan, columns)) is not None \
            and (rows := shape.rows(params)) is not None:
        # `VALUES ($1, $2), ($3, $4) …` built straight into Arrow, without planning SQL: drivers
        # send multi-row inserts exactly so (executemany, ORMs' bulk inserts), and planning
        # hundreds of placeholders costs far more than the rows. Parameters arrive decoded as the
        # target columns' types (Parse inferred them from the columns), so they convert as they are.
        # (Not under row-level security's WITH CHECK: a recipe checks NOT NULL only.)
        return key, rows, shape
    else:
        if isinstance(source, ConstantValues):
            listed = source.args["rows"]
            data = constant_rows.table(qctx, listed, columns, plan, params)
            if data is not None:
                data = defaults.fill(qctx, plan, data, rows=listed.count)
                return key, checks.conform(qctx, data, plan, key), None
            tree = whole(source)  # (what neither reads as it is: the whole tree)
            if not isinstance(tree, exp.Insert):
                raise PgError("XX000", "a VALUES list read two ways")
            tree = defaults.in_values(tree, plan, columns)
            source = tree.expression
        places = big_values.value_places(value_columns(plan), "", columns)
        tree, params = big_values.settled(tree, params, places)  # type: ignore[assignment]
        source = _distinct_names(_bounded_source(qctx, tree, params))
        # (a big value kept a parameter is read from a table joined to a SELECT: a VALUES row has no FROM)
        query = _values_as_selects(source, has_big(params))
        if isinstance(query, exp.Values) and (groups := _kind_groups(query)) is not None:
            return key, _rows_in_groups(qctx, query, groups, columns, isinstance(tree.this, exp.Schema), plan, key,
                                        params), None
        # Outside a transaction block the source also sees the write buffer's acked rows.
        with qctx.buffered_reads(qctx.buffered_entries_of(query)):
            try:
                planned = qctx.plan_tree(query, params)
            except PgError as err:
                if not (isinstance(source, exp.Values) and "Inconsistent data type across values list" in str(err)):
                    raise
                explicit = isinstance(tree.this, exp.Schema)
                groups = [[r] for r in range(len(source.expressions))]
                return key, _rows_in_groups(qctx, source, groups, columns, explicit, plan, key, params), None
            columns = _targets(columns, isinstance(tree.this, exp.Schema), len(planned.df.schema()))
            if isinstance(source, exp.Values):
                _check_assignable(qctx, source, columns, planned.df.schema(), plan, params)
            data = collect(planned)
        data = defaults.fill(qctx, plan, data.rename_columns(columns))
    return key, checks.conform(qctx, data, plan, key), None


def _kind_groups(source: exp.Values) -> list[list[int]] | None:
    """The rows of a VALUES list grouped by the kinds of their constants, where a column holds
    constants of several kinds (untyped strings, booleans, integers, numerics of each scale);
    else None. PostgreSQL assigns an INSERT's VALUES items one by one to their columns
    (transformInsertRow): `('x'), (5)` into a text column stores 'x' and '5', and `('1.555'),
    (2)` into a numeric(6,2) 1.56 and 2.00, where one VALUES type for the column (DataFusion's)
    would read 'x' or '1.555' as a number: 22P02."""
    def kind(item: exp.Expression) -> str | None:
        value = item.this if isinstance(item, exp.Neg) else item
        if isinstance(value, exp.Boolean):
            return "boolean"
        if isinstance(value, exp.Literal) and not value.is_string:
            return _number_kind(str(value.this))
        return "string" if is_untyped(value) and not isinstance(value, exp.Null) else None

    rows = [row.expressions for row in source.expressions]
    if len(rows) < 2 or len({len(items) for items in rows}) != 1:
        return None  # (rows of different widths: the plan's 42601)
    mixed = [i for i in range(len(rows[0])) if len({kind(items[i]) for items in rows} - {None}) > 1]
    if not mixed:
        return None
    groups: dict[tuple[str | None, ...], list[int]] = {}
    for r, items in enumerate(rows):
        groups.setdefault(tuple(kind(items[i]) for i in mixed), []).append(r)
    return list(groups.values())


def _number_kind(text: str) -> str:
    """An integer, or a numeric of its scale: PostgreSQL's type for the literal, which is what a
    text column stores of it (`1.50` is '1.50' and `-2` '-2', where one VALUES type is '-2.00')."""
    if "." not in text and "e" not in text.lower():
        return "integer"
    try:
        exponent = Decimal(text).as_tuple().exponent
    except ArithmeticError:
        return "numeric"
    return f"numeric({max(-exponent, 0) if isinstance(exponent, int) else 0})"


def _rows_in_groups(qctx: QueryContext, source: exp.Values, groups: list[list[int]], columns: list[str],
                    explicit: bool, plan: ReadPlan, key: Key, params: dict[str, Any] | None) -> pa.Table:
    """The rows of a VALUES list one type per column cannot hold, each group of rows planned as
    its own VALUES (a row alone as a SELECT), assigned to the columns' types and its defaults
    filled, then put back in the list's order (RETURNING answers in it). Groups: `_kind_groups`,
    or a row each where DataFusion finds the column's types "inconsistent" — PostgreSQL reads
    `(date '2024-01-01'), ('2024-01-02')` as two dates (an untyped literal takes the other rows'
    type); each row's text then goes through the column type's input function."""
    tables, order = [], []
    for rows in groups:
        if len(rows) == 1:
            query = _row_select(source.expressions[rows[0]])
        else:  # (under an INSERT, as the rewrite reads the numbers of an INSERT's VALUES: numeric)
            query = exp.Insert(expression=exp.Values(expressions=[source.expressions[r].copy() for r in rows]))
            query = query.expression
        planned = qctx.plan_tree(query, params)
        names = _targets(columns, explicit, len(planned.df.schema()))
        if isinstance(query, exp.Values):
            _check_assignable(qctx, query, names, planned.df.schema(), plan, params)
        data = defaults.fill(qctx, plan, collect(planned).rename_columns(names))
        tables.append(checks.conform(qctx, data, plan, key))
        order.extend(rows)
    table = pa.concat_tables(tables)
    if order == sorted(order):
        return table
    return table.take(constant_rows.back_in_order(order))


def _check_assignable(qctx: QueryContext, source: exp.Values, columns: list[str], planned: pa.Schema,
                      plan: ReadPlan, params: dict[str, Any] | None) -> None:
    """42804 for a VALUES item whose type has no assignment cast to its target column's
    (`'5'::text` into an integer), as for UPDATE's SET. Untyped literals and parameters take the
    column's type; each other item is typed by one probe of them all (DataFusion's VALUES type
    for a column — `(1::int), ('5'::text)` is integers to it, 42804 to PostgreSQL — says
    nothing of the item), unless there are more than PROBED_ITEMS_MAX: then the column's."""
    plain = exp.Parameter | exp.Placeholder | exp.Boolean
    types = {f.name: f.type for f in plan.schema}
    typed: list[tuple[str, exp.Expression]] = []
    for i, name in enumerate(columns[:len(planned)]):
        for row in source.expressions:
            item = row.expressions[i] if i < len(row.expressions) else None
            value = item.this if isinstance(item, exp.Neg) else item
            if item is not None and name in types and not (is_untyped(value) or isinstance(value, plain)):
                typed.append((name, item))
    if not typed:
        return
    if len(typed) > PROBED_ITEMS_MAX:
        for name, field in zip(columns, planned, strict=False):
            if any(n == name for n, _ in typed):
                check_assignable(name, field.type, types[name])
        return
    probe = exp.select(*(exp.alias_(item.copy(), f"_{k}", quoted=True) for k, (_, item) in enumerate(typed)))
    for (name, _), field in zip(typed, qctx.plan_tree(probe, params).df.schema(), strict=True):
        check_assignable(name, field.type, types[name])


PROBED_ITEMS_MAX = 1000


def _targets(columns: list[str], explicit: bool, width: int) -> list[str]:
    """The columns `width` values go to: without a column list, the table's first `width`; a
    mismatch is PostgreSQL's 42601."""
    names = columns if explicit else columns[:width]
    if width != len(names):
        more, fewer = ("expressions", "target columns") if width > len(names) else ("target columns", "expressions")
        raise PgError("42601", f"INSERT has more {more} than {fewer}")
    return names


def _row_select(row: exp.Expression) -> exp.Expression:
    """One VALUES row as `SELECT value, ...`, its numeric literals exact: the rewrite reads the
    literals of VALUES as numeric, as PostgreSQL does, but not those of a SELECT or a UNION."""
    from icegres.engine.rewrite.literals import exact_number

    return exp.select(*(exact_number(e, room=False) or e.copy() for e in row.expressions))


def _values_as_selects(source: exp.Expression, subqueries: bool = False) -> exp.Expression:
    """VALUES rows holding a subquery, as one SELECT per row (UNION ALL): DataFusion 55 plans
    `VALUES (1, (SELECT max(n) FROM t))` and then fails to run it ("ScalarSubqueryExpr evaluated
    before the subquery was executed"); in a select list the same subquery runs."""
    if not isinstance(source, exp.Values) or not (subqueries or source.find(exp.Subquery) is not None):
        return source
    rows = [_row_select(row) for row in source.expressions]
    out: exp.Expression = rows[0]
    for row in rows[1:]:
        out = exp.union(out, row, distinct=False)
    return out


def _distinct_names(source: exp.Expression) -> exp.Expression:
    """A SELECT source whose items share an output name (`SELECT g, g FROM …`), each item named
    by its place: an INSERT reads its source by position, and DataFusion refuses a projection
    with two columns of one name."""
    if not isinstance(source, exp.Select) or any(isinstance(e, exp.Star) or e.find(exp.Star) for e in source.expressions):
        return source
    # (a literal's or an expression's name is DataFusion's own spelling of it, which differs)
    names = [e.alias_or_name if isinstance(e, exp.Column | exp.Alias) else "" for e in source.expressions]
    repeated = {n for n in names if n and names.count(n) > 1}
    if not repeated:
        return source
    source = source.copy()
    # Only the items that share a name: a literal elsewhere keeps its place (and its exact type).
    source.set("expressions", [exp.alias_(e.unalias() if isinstance(e, exp.Alias) else e, f"_icegres_item_{i}", quoted=True)
                               if names[i] in repeated else e for i, e in enumerate(source.expressions)])
    return source


def _bounded_source(qctx: QueryContext, tree: exp.Insert, params: dict[str, Any] | None) -> exp.Expression:
    """An INSERT ... SELECT's source with the integer `+ - *` of its select list computed so that
    overflow is 22003 (checked_arith.py): a wrapped value among the rows it inserts is stored.
    The select list's types come from planning it with those operations appended as items (so
    GROUP BY and ORDER BY positions still point where they did)."""
    from icegres.engine.checked_arith import arithmetic_nodes, check_overflow

    source = tree.expression
    if not isinstance(source, exp.Select) or not any(arithmetic_nodes(e) for e in source.expressions):
        return source
    source = tree.copy().expression  # the parse is shared; still an INSERT's source (exact literals)
    nodes = [node for item in source.expressions for node in arithmetic_nodes(item)]
    probe = source.copy()
    probe.set("expressions", [*probe.expressions,
                              *(exp.alias_(node.copy(), f"_icegres_{i}", quoted=True) for i, node in enumerate(nodes))])
    types = [f.type for f in qctx.plan_tree(probe, params).df.schema()][-len(nodes):]
    check_overflow(nodes, types)
    return source
