"""Rewrites of arrays: subscripts from 1, array bounds, ARRAY(subquery), generate_subscripts,
and the array-shaped catalog queries psql and asyncpg send."""

from __future__ import annotations

from sqlglot import exp

from icegres.engine import pg_relations
from icegres.engine.rewrite.casts import _bigint, _resolve_relation
from icegres.engine.rewrite.tree import (
    _bottom_up,
    _call,
    _conjuncts,
    _func_name,
    _local_names,
    _outer_columns,
    _Rewriter,
)

# --- arrays -------------------------------------------------------------------------------------


def _zero_based_names(tree: exp.Expression) -> set[str]:
    """Column names holding 0-based vectors here, including aliases of such columns.

    pgjdbc selects `i.indoption AS I_INDOPTION` and later subscripts I_INDOPTION[pos - 1].
    """
    names = set(pg_relations.ZERO_BASED_ARRAY_COLUMNS)
    for alias in tree.find_all(exp.Alias):
        if isinstance(alias.this, exp.Column) and alias.this.name.lower() in names:
            names.add(alias.alias.lower())
    return names


def _is_zero_based(node: exp.Expression, rw: _Rewriter) -> bool:
    while isinstance(node, (exp.Cast, exp.Paren)):
        node = node.this
    return isinstance(node, exp.Column) and node.name.lower() in rw.zero_based


def zero_based_subscripts(tree: exp.Expression, rw: _Rewriter) -> exp.Expression:
    """i.indkey[ia.attnum - 1] -> one more: int2vector/oidvector count from 0 in PostgreSQL,
    DataFusion lists from 1 (psqlODBC primaryKeys, pgjdbc getIndexInfo)."""

    def fn(node: exp.Expression) -> exp.Expression:
        if (isinstance(node, exp.Bracket) and isinstance(node.this, exp.Column) and len(node.expressions) == 1
                and pg_relations.COLUMN_KINDS.get(node.this.name.lower()) == "name"):
            # typname[0] = '_' (pg_dump): a name subscripts as char[], from 0
            index = node.expressions[0]
            start = exp.Add(this=exp.Paren(this=index), expression=exp.Literal.number(1))
            return _call("substr", node.this, start, exp.Literal.number(1))
        if isinstance(node, exp.Bracket) and _is_zero_based(node.this, rw) and len(node.expressions) == 1:
            index = node.expressions[0]
            if isinstance(index, exp.Literal) and not index.is_string:
                shifted: exp.Expression = exp.Literal.number(int(index.this) + 1)
            else:
                shifted = exp.Add(this=exp.Paren(this=index), expression=exp.Literal.number(1))
            node.set("expressions", [shifted])
        return node

    return _bottom_up(tree, fn)


def _length(array: exp.Expression) -> exp.Expression:
    return _bigint(_call("cardinality", array))


def array_bounds(tree: exp.Expression, rw: _Rewriter) -> exp.Expression:
    """array_upper / array_lower, which DataFusion lacks (psql, pgjdbc, psqlODBC)."""

    def fn(node: exp.Expression) -> exp.Expression:
        name = _func_name(node)
        if name in ("array_upper", "array_lower") and len(node.expressions) == 2:
            array = node.expressions[0]
            base = 0 if _is_zero_based(array, rw) else 1
            nonempty = exp.GT(this=_length(array), expression=exp.Literal.number(0))
            bound: exp.Expression = exp.Literal.number(base)
            if name == "array_upper":
                bound = exp.Sub(this=_length(array), expression=exp.Literal.number(1 - base))
            return exp.Case(ifs=[exp.If(this=nonempty, true=bound)])
        return node

    return _bottom_up(tree, fn)


def generate_subscripts(tree: exp.Expression, rw: _Rewriter) -> exp.Expression:
    """generate_subscripts(a, 1) -> unnest(generate_series(lo, hi)) (SQLAlchemy reflection)."""

    def fn(node: exp.Expression) -> exp.Expression:
        if _func_name(node) == "generate_subscripts" and node.expressions:
            array = node.expressions[0]
            base = 0 if _is_zero_based(array, rw) else 1
            hi = exp.Sub(this=_length(array), expression=exp.Literal.number(1 - base))
            series = _call("generate_series", exp.Literal.number(base), hi)
            return exp.Unnest(expressions=[series])
        return node

    return _bottom_up(tree, fn)


def expand_array(tree: exp.Expression, rw: _Rewriter) -> exp.Expression:
    """information_schema._pg_expandarray(a) -> unnest of {x, n} structs (pgjdbc getPrimaryKeys,
    getIndexInfo): `(_pg_expandarray(a)).n` and `(KEYS).x` become field accesses."""

    def fn(node: exp.Expression) -> exp.Expression:
        if _func_name(node) == "_pg_expandarray" and node.expressions:
            array = exp.Cast(this=node.expressions[0], to=exp.DataType.build("BIGINT[]"))
            return exp.Unnest(expressions=[_call("pg_expandarray", array)])
        if (
            isinstance(node, exp.Dot)
            and isinstance(node.this, exp.Paren)
            and isinstance(node.expression, exp.Identifier)
            and node.expression.name.lower() in ("x", "n")
        ):
            return exp.Bracket(this=node.this.this,
                               expressions=[exp.Literal.string(node.expression.name.lower())])
        return node

    return _bottom_up(tree, fn)


def array_subqueries(tree: exp.Expression, rw: _Rewriter) -> exp.Expression:
    """ARRAY(SELECT e FROM ... ORDER BY o) -> (SELECT array_agg(e ORDER BY o) FROM ...).

    psql \\du (memberof) and \\d (policy roles); DataFusion has no ARRAY(subquery).
    """

    def fn(node: exp.Expression) -> exp.Expression:
        if not (isinstance(node, exp.Array) and len(node.expressions) == 1):
            return node
        select = node.expressions[0]
        if isinstance(select, exp.Subquery):
            select = select.this
        if not isinstance(select, exp.Select) or len(select.expressions) != 1:
            return node
        mapped = _map_over_unnest(select) or _role_names(select) or _options_clauses(select)
        if mapped is not None:
            return mapped
        select = select.copy()
        value = select.expressions[0].unalias()
        order = select.args.get("order")
        agg_arg: exp.Expression = value
        if order is not None:
            keys = [_resolve_order_key(o, value) for o in order.expressions]
            agg_arg = exp.Order(this=value, expressions=keys)
            select.set("order", None)
        select.set("expressions", [exp.ArrayAgg(this=agg_arg)])
        # ARRAY() of no rows is '{}', array_agg of no rows NULL (psql \\du shows memberof {})
        return exp.Coalesce(this=exp.Subquery(this=select), expressions=[_call("make_array")])

    return _bottom_up(tree, fn)


def _resolve_order_key(ordered: exp.Expression, value: exp.Expression) -> exp.Expression:
    """ORDER BY 1 inside ARRAY(...) means the selected value."""
    key = ordered.copy()
    if isinstance(key.this, exp.Literal) and not key.this.is_string:
        key.set("this", value.copy())
    return key


def _options_clauses(select: exp.Select) -> exp.Expression | None:
    """ARRAY(SELECT quote_ident(option_name) || ' ' || quote_literal(option_value)
    FROM pg_options_to_table(x.fdwoptions) ORDER BY option_name) -> pg_options_clauses(...).

    pg_dump's OPTIONS of foreign objects: a set-returning function over the outer row's column,
    which DataFusion cannot run in FROM; the function answers the same question directly.
    """
    source = select.args.get("from_")
    table = source.this if source is not None else None
    if not (isinstance(table, exp.Table) and _func_name(table.this) == "pg_options_to_table"):
        return None
    call = table.this
    args = call.expressions if isinstance(call, exp.Anonymous) else [call.this]
    return _call("pg_options_clauses", args[0]) if len(args) == 1 else None


def _role_names(select: exp.Select) -> exp.Expression | None:
    """ARRAY(SELECT rolname FROM pg_roles WHERE oid = ANY(pol.polroles) ORDER BY 1) ->
    pg_role_names(pol.polroles).

    psql \\d's policy footer. DataFusion decorrelates equalities only, and this subquery is bound
    to the outer row through = ANY; the catalog answers the same question directly.
    """
    source = select.args.get("from_")
    table = source.this if source is not None else None
    where = select.args.get("where")
    if not (isinstance(table, exp.Table) and table.name.lower() in ("pg_roles", "pg_authid")
            and where is not None and not select.args.get("joins")):
        return None
    value = select.expressions[0].unalias()
    function = "pg_role_names"
    if _func_name(value) == "quote_ident" and len(value.expressions) == 1:  # pg_dump's policy roles
        value, function = value.expressions[0], "pg_role_idents"
    cond = where.this
    if not (isinstance(value, exp.Column) and value.name.lower() == "rolname"
            and isinstance(cond, exp.EQ) and isinstance(cond.this, exp.Column)
            and cond.this.name.lower() == "oid" and isinstance(cond.expression, exp.Any)):
        return None
    array = cond.expression.this
    return _call(function, array.this if isinstance(array, exp.Paren) else array)


def _map_over_unnest(select: exp.Select) -> exp.Expression | None:
    """ARRAY(SELECT 'toast.' || x FROM unnest(tc.reloptions) x) -> pg_prefix_elements(...).

    psql \\d+ builds the toast options so; DataFusion can't unnest an outer column in FROM.
    """
    source = select.args.get("from_") or select.args.get("from")
    if source is None or select.args.get("where") or select.args.get("joins"):
        return None
    table = source.this
    if isinstance(table, exp.Unnest) and len(table.expressions) == 1:  # FROM unnest(a) AS t(x)
        call: exp.Expression = table
    elif isinstance(table, exp.Table) and _func_name(table.this) in ("unnest", "explode"):
        call = table.this
    else:
        return None
    alias = table.args.get("alias")
    names = {table.alias_or_name.lower()} | {c.name.lower() for c in (alias.columns if alias else [])}

    def is_element(node: exp.Expression) -> bool:
        return isinstance(node, exp.Column) and node.name.lower() in names

    value = select.expressions[0].unalias()
    array = call.expressions[0] if isinstance(call, (exp.Anonymous, exp.Unnest)) else call.this
    if isinstance(value, exp.DPipe) and isinstance(value.this, exp.Literal) and is_element(value.expression):
        return _call("pg_prefix_elements", array, value.this)
    # array(select quote_literal(x) from unnest(evttags) as t(x)) (pg_dump's event triggers)
    if _func_name(value) == "quote_literal" and len(value.expressions) == 1 and is_element(value.expressions[0]):
        return _call("pg_quote_literals", array)
    return None


def psql_publication_columns(tree: exp.Expression, rw: _Rewriter) -> exp.Expression:
    """psql \\d's publication footer:
    (SELECT string_agg(attname, ', ') FROM generate_series(0, array_upper(pr.prattrs, 1)) s,
    pg_attribute WHERE attrelid = pr.prrelid AND attnum = prattrs[s]) -> pg_attnames(...).

    DataFusion's generate_series table function takes constants only, and this one is bound to
    the outer row; the catalog answers the same question directly.
    """

    def fn(node: exp.Expression) -> exp.Expression:
        if not (isinstance(node, exp.Subquery) and isinstance(node.this, exp.Select)):
            return node
        select = node.this
        value = select.expressions[0].unalias() if len(select.expressions) == 1 else None
        as_array = isinstance(value, exp.ArrayAgg)  # pg_dump's publication columns: array_agg(attname)
        if not (as_array or isinstance(value, exp.GroupConcat) or _func_name(value) == "string_agg"):
            return node
        source = select.args.get("from_") or select.args.get("from")
        series = source.this if source is not None else None
        if not (isinstance(series, exp.Table) and _func_name(series.this) == "generate_series"):
            return node
        equal = {_column_key(c.this): c.expression for c in _where(select) if isinstance(c, exp.EQ)}
        relid, attnum = equal.get("attrelid"), equal.get("attnum")
        if relid is None or not isinstance(attnum, exp.Bracket):
            return node
        if isinstance(value, exp.GroupConcat):
            separator = value.args.get("separator")
        else:
            separator = value.expressions[1] if len(value.expressions) > 1 else None
        attnums = exp.Cast(this=attnum.this, to=exp.DataType.build("BIGINT[]"))
        if as_array:
            unit = exp.Literal.string("\x1f")  # no column name holds it
            return _call("string_to_array", _call("pg_attnames", relid, attnums, unit), unit.copy())
        return _call("pg_attnames", relid, attnums, separator or exp.Literal.string(","))

    return _bottom_up(tree, fn)


def asyncpg_domain_base_types(tree: exp.Expression, rw: _Rewriter) -> exp.Expression:
    """asyncpg's type introspection finds a domain's base type with a correlated WITH RECURSIVE
    (`typebases`, anchored at `t2.oid = t.oid`) -> pg_domain_basetype(t.oid).

    DataFusion can't correlate a recursive CTE; asyncpg sends this query for every array type it
    meets (SQLAlchemy reflection over asyncpg asks for _bool, _int8, int2vector).
    """

    def fn(node: exp.Expression) -> exp.Expression:
        if not (isinstance(node, exp.Subquery) and isinstance(node.this, exp.Select)):
            return node
        with_ = node.this.args.get("with_") or node.this.args.get("with")
        if with_ is None or not with_.args.get("recursive"):
            return node
        for cte in with_.expressions:
            anchor = cte.this.this if isinstance(cte.this, exp.Union) else None
            if cte.alias_or_name.lower() != "typebases" or not isinstance(anchor, exp.Select):
                continue
            local = _local_names(anchor)
            for cond in _where(anchor):
                if isinstance(cond, exp.EQ) and _outer_columns(cond.expression, local):
                    return _call("pg_domain_basetype", cond.expression.copy())
        return node

    return _bottom_up(tree, fn)


def literal_oid_arguments(tree: exp.Expression, rw: _Rewriter) -> exp.Expression:
    """pg_relation_is_publishable('16386') -> (16386): PostgreSQL reads a quoted literal passed
    for an oid/regclass argument as that type; a UDF takes only the declared one (psql \\d)."""

    def fn(node: exp.Expression) -> exp.Expression:
        kinds = _OID_ARGUMENTS.get(str(node.this).lower()) if isinstance(node, exp.Anonymous) else None
        if not kinds:
            return node
        args = list(node.expressions)
        for i, arg in enumerate(args):
            if i in kinds and isinstance(arg, exp.Literal) and arg.is_string:
                text = arg.this.strip()
                args[i] = exp.Literal.number(text if text.isdigit() else _resolve_relation(text, rw))
        node.set("expressions", args)
        return node

    return _bottom_up(tree, fn)


def _oid_arguments() -> dict[str, frozenset[int]]:
    from icegres.engine import pg_functions

    out = {}
    for fn in pg_functions.catalog_functions(None):  # type: ignore[arg-type]
        positions = frozenset(i for i, t in enumerate(fn.args) if t == pg_functions.OID)
        if positions:
            out[fn.name] = positions
    return out


_OID_ARGUMENTS = _oid_arguments()


def _where(select: exp.Select) -> list[exp.Expression]:
    where = select.args.get("where")
    return _conjuncts(where.this) if where is not None else []


def _column_key(node: exp.Expression) -> str | None:
    return node.name.lower() if isinstance(node, exp.Column) else None
