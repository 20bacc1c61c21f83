"""Rewrites of functions and subqueries: json_build_object, privilege checks, default arguments,
EXISTS in expressions, and correlated scalar subqueries DataFusion cannot run as written."""

from __future__ import annotations

from sqlglot import exp

from icegres.engine.pg_functions import FUNCTION_DEFAULTS
from icegres.engine.rewrite.tree import (
    _bottom_up,
    _call,
    _conjuncts,
    _func_name,
    _local_names,
    _outer_columns,
    _Rewriter,
)
from icegres.sql import parse

# --- functions ----------------------------------------------------------------------------------


def json_build_object(tree: exp.Expression, rw: _Rewriter) -> exp.Expression:
    """json_build_object(k1, v1, ...) -> pg_json_build_object(keys, arrow types, text values).

    SQLAlchemy's column reflection builds identity and collation options so; a Python UDF has
    one fixed signature, so values travel as text with their Arrow type to re-type them.
    """

    def fn(node: exp.Expression) -> exp.Expression:
        if _func_name(node) != "json_build_object":
            return node
        args = list(node.expressions) if isinstance(node, exp.Anonymous) else _json_args(node)
        keys, values = args[0::2], args[1::2]
        return _call(
            "pg_json_build_object",
            _call("make_array", *[exp.Cast(this=k, to=exp.DataType.build("TEXT")) for k in keys]),
            _call("make_array", *[_call("arrow_typeof", v.copy()) for v in values]),
            _call("make_array", *[exp.Cast(this=v, to=exp.DataType.build("TEXT")) for v in values]),
        )

    return _bottom_up(tree, fn)


def _json_args(node: exp.Expression) -> list[exp.Expression]:
    out: list[exp.Expression] = []
    for item in node.expressions:
        if isinstance(item, (exp.JSONKeyValue, exp.PropertyEQ, exp.Slice)):
            out += [item.this, item.expression]
        else:
            out.append(item)
    return out


def privilege_checks(tree: exp.Expression, rw: _Rewriter) -> exp.Expression:
    """has_table_privilege / has_schema_privilege([user,] object, privileges) ->
    icegres_has_privilege(kind, user or NULL, object as text, privileges), and pg_has_role([user,]
    role, privileges) -> icegres_pg_has_role(user or NULL, role, privileges): one UDF of one arity
    for every overload (engine/authz.py answers from the roles and grants). The other
    has_*_privilege functions are TRUE: icegres keeps no privileges on databases, functions,
    sequences or columns (docs/security.md)."""

    def fn(node: exp.Expression) -> exp.Expression:
        name = _func_name(node) or ""
        if name == "pg_has_role" and isinstance(node, exp.Anonymous) and len(node.expressions) in (2, 3):
            args = list(node.expressions)  # ([user,] role, privileges): user NULL for current_user
            user = exp.cast(args[0], "text") if len(args) == 3 else exp.Null()
            return exp.Anonymous(this="icegres_pg_has_role", expressions=[user, exp.cast(args[-2], "text"), args[-1]])
        if not (name.startswith("has_") and name.endswith("_privilege")):
            return node
        kind = name[len("has_"):-len("_privilege")]
        args = list(node.expressions) if isinstance(node, exp.Anonymous) else [node.this, *node.expressions]
        if kind in ("column", "any_column") and len(args) in (2 + (kind == "column"), 3 + (kind == "column")):
            # (table, column, privileges) with the column folded into the object: "table\0column"
            with_user = len(args) == 3 + (kind == "column")
            user = exp.cast(args[0], "text") if with_user else exp.Null()
            rest = args[1:] if with_user else args
            obj = exp.cast(rest[0], "text")
            if kind == "column":
                obj = exp.DPipe(this=exp.DPipe(this=obj, expression=exp.Literal.string("\x00")),
                                expression=exp.cast(rest[1], "text"))
            return exp.Anonymous(this="icegres_has_privilege", expressions=[
                exp.Literal.string(kind), user, obj, rest[-1]])
        if kind not in ("table", "schema") or len(args) not in (2, 3):
            return exp.true()
        user = exp.cast(args[0], "text") if len(args) == 3 else exp.Null()
        return exp.Anonymous(this="icegres_has_privilege", expressions=[
            exp.Literal.string(kind), user, exp.cast(args[-2], "text"), args[-1]])

    return _bottom_up(tree, fn)


def pad_default_arguments(tree: exp.Expression, rw: _Rewriter) -> exp.Expression:
    """current_setting('jit') -> current_setting('jit', false): each UDF has one arity, so the
    short PostgreSQL overloads get their defaults spelled out (see FUNCTION_DEFAULTS)."""

    def fn(node: exp.Expression) -> exp.Expression:
        if isinstance(node, exp.Anonymous):
            defaults = FUNCTION_DEFAULTS.get(str(node.this).lower())
            if defaults is not None and len(node.expressions) < len(defaults):
                extra = [parse.expression(d).copy() for d in defaults[len(node.expressions):]]
                node.set("expressions", [*node.expressions, *extra])
        return node

    return _bottom_up(tree, fn)


# PostgreSQL's lpad/rpad reserve the database encoding's longest character per unit (UTF-8: 4).
_PAD_UNIT_BYTES = 4


def bounded_text_lengths(tree: exp.Expression, rw: _Rewriter) -> exp.Expression:
    """repeat(s, n) -> repeat(s, pg_text_length_limit(n, octet_length(s))), lpad/rpad alike: a
    result over PostgreSQL's 1 GB is refused (54000) before DataFusion builds it outside its
    memory pool (pg_functions.TEXT_BYTES_MAX)."""

    def limited(count: exp.Expression, unit: exp.Expression) -> exp.Expression:
        return exp.Anonymous(this="pg_text_length_limit",
                             expressions=[exp.cast(count, "BIGINT"), exp.cast(unit, "BIGINT")])

    def fn(node: exp.Expression) -> exp.Expression:
        if isinstance(node, exp.Repeat) and node.args.get("times") is not None:
            unit = exp.Anonymous(this="octet_length", expressions=[node.this.copy()])
            node.set("times", limited(node.args["times"], unit))
        elif isinstance(node, exp.Pad) and node.expression is not None:
            node.set("expression", limited(node.expression, exp.Literal.number(_PAD_UNIT_BYTES)))
        return node

    return _bottom_up(tree, fn)


def exists_in_expressions(tree: exp.Expression, rw: _Rewriter) -> exp.Expression:
    """EXISTS(...) outside WHERE/ON -> (SELECT count(*) ...) > 0.

    DataFusion plans EXISTS only as a filter; ibis's column query has it in a CASE.
    """

    def fn(node: exp.Expression) -> exp.Expression:
        if not isinstance(node, exp.Exists) or _in_filter(node):
            return node
        select = node.this.this if isinstance(node.this, exp.Subquery) else node.this
        if not isinstance(select, exp.Select):
            return node
        counted = select.copy()
        counted.set("expressions", [exp.Count(this=exp.Star())])
        return exp.GT(this=exp.Subquery(this=counted), expression=exp.Literal.number(0))

    return _bottom_up(tree, fn)


def in_subqueries_in_expressions(tree: exp.Expression, rw: _Rewriter) -> exp.Expression:
    """`a IN (SELECT x …)` outside WHERE/ON -> its three-valued answer from counts:

        CASE WHEN (SELECT count(*) FROM (q) _in(v) WHERE _in.v = a) > 0 THEN TRUE
             WHEN (SELECT count(*) FROM (q) _in(v)) = 0 THEN FALSE
             WHEN a IS NULL OR (SELECT count(*) FROM (q) _in(v) WHERE _in.v IS NULL) > 0 THEN NULL
             ELSE FALSE END

    DataFusion plans IN (subquery) only as a filter ("Physical plan does not support logical
    expression InSubquery"), and an UPDATE's rewrite of a file evaluates its WHERE inside a CASE
    (`UPDATE t SET … WHERE a IN (SELECT …)` failed so); the counts are scalar subqueries, which
    it joins. NULL where PostgreSQL's IN gives NULL, so NOT IN (Not over this) stays right."""

    def fn(node: exp.Expression) -> exp.Expression:
        query = node.args.get("query") if isinstance(node, exp.In) else None
        if query is None or _in_filter(node) or isinstance(node.this, exp.Tuple):
            return node
        select = query.this if isinstance(query, exp.Subquery) else query
        if not isinstance(select, exp.Query) or len(select.selects) != 1:
            return node
        value = node.this

        def count(where: exp.Expression | None) -> exp.Expression:
            source = exp.Subquery(this=select.copy(), alias=exp.TableAlias(
                this=exp.to_identifier("_icegres_in"), columns=[exp.to_identifier("v")]))
            counted = exp.select(exp.Count(this=exp.Star())).from_(source)
            return exp.Subquery(this=counted.where(where) if where is not None else counted)

        v = exp.column("v", table="_icegres_in")
        return exp.Case(ifs=[
            exp.If(this=exp.GT(this=count(exp.EQ(this=v, expression=value.copy())), expression=exp.Literal.number(0)),
                   true=exp.true()),
            exp.If(this=exp.EQ(this=count(None), expression=exp.Literal.number(0)), true=exp.false()),
            exp.If(this=exp.or_(exp.Is(this=value.copy(), expression=exp.null()),
                                exp.GT(this=count(exp.Is(this=v.copy(), expression=exp.null())),
                                       expression=exp.Literal.number(0))),
                   true=exp.null()),
        ], default=exp.false())

    return _bottom_up(tree, fn)


def _in_filter(node: exp.Expression) -> bool:
    parent = node.parent
    while parent is not None and not isinstance(parent, (exp.Select, exp.Subquery)):
        if isinstance(parent, exp.Where) or (isinstance(parent, exp.Join) and node.arg_key == "on"):
            return True
        if isinstance(parent, (exp.Case, exp.If, exp.Func)) and not isinstance(parent, exp.Connector):
            return False
        node, parent = parent, parent.parent
    return False


def lateral_derived_tables(tree: exp.Expression, rw: _Rewriter) -> exp.Expression:
    """A FROM-less derived table reading the outer row, inside a subquery -> its rows for every
    distinct value of what it reads, matched to the outer row by equality.

    pgcli's foreignkeys() (its completion refresher) names each constraint's columns so:
        unnest((select array_agg(attname ORDER BY i)
                from (select unnest(confkey) as attnum, generate_subscripts(confkey, 1) as i) x
                JOIN pg_catalog.pg_attribute c USING(attnum) WHERE c.attrelid = fk.confrelid))
    x reads fk.confkey of the outer row: a lateral derived table, which DataFusion cannot
    decorrelate (it leaves the ScalarSubquery in the physical plan). Its rows depend only on the
    outer columns it reads, so it is computed over the distinct values of those columns in the
    outer relation, carrying them as columns, and the subquery's WHERE gains
    `x.<carried> = fk.<column>`: a correlation by equality, which DataFusion turns into a join.
    An outer row whose column is NULL matches no value; the set-returning functions such a
    derived table applies to it (unnest, generate_subscripts) yield no rows for NULL anyway.
    """

    def fn(node: exp.Expression) -> exp.Expression:
        if not (isinstance(node, exp.Subquery) and isinstance(node.this, exp.Select) and node.alias
                and isinstance(node.parent, (exp.From, exp.Join))):
            return node
        derived, holder = node.this, node.parent.parent
        if derived.args.get("from_") or derived.args.get("joins") or not isinstance(holder, exp.Select):
            return node
        columns = list(derived.find_all(exp.Column))
        qualifiers = {c.table.lower() for c in columns}
        if not columns or len(qualifiers) != 1 or "" in qualifiers:
            return node
        (outer,) = qualifiers
        source = None if outer in _own_relations(holder) else _enclosing_table(holder, outer)
        if source is None:
            return node
        names = {c.name.lower(): c.this for c in columns}
        domain = exp.select(*[exp.column(ident.copy()) for ident in names.values()]).distinct()
        table = source.copy()
        table.set("alias", None)
        domain = domain.from_(table)
        lateral = derived.copy()
        for column in lateral.find_all(exp.Column):
            column.set("table", exp.to_identifier(_DOMAIN))
        carried = [exp.alias_(exp.column(ident.copy(), _DOMAIN), _carried(name)) for name, ident in names.items()]
        lateral.set("expressions", [*lateral.expressions, *carried])
        lateral.set("from_", exp.From(this=exp.Subquery(this=domain, alias=exp.TableAlias(
            this=exp.to_identifier(_DOMAIN)))))
        node.set("this", lateral)
        matches = [exp.EQ(this=exp.column(_carried(name), node.alias), expression=exp.column(ident.copy(), outer))
                   for name, ident in names.items()]
        where = holder.args.get("where")
        holder.set("where", exp.Where(this=exp.and_(*_conjuncts(where.this if where else None), *matches)))
        return node

    return _bottom_up(tree, fn)


_DOMAIN = "__icegres_outer"


def _carried(name: str) -> str:
    return f"__icegres_outer_{name}"


def _own_relations(select: exp.Select) -> set[str]:
    """The names a select's own FROM and JOINs bring into scope."""
    items = [select.args.get("from_"), *(select.args.get("joins") or [])]
    return {item.this.alias_or_name.lower() for item in items if item is not None}


def _enclosing_table(select: exp.Select, name: str) -> exp.Table | None:
    """The table an enclosing query brings into scope as `name` (the relation of an outer
    column), if it is a table; None if it is anything else or nothing."""
    parent = select.parent
    while parent is not None:
        if isinstance(parent, exp.Select) and name in _own_relations(parent):
            items = [parent.args.get("from_"), *(parent.args.get("joins") or [])]
            found = next(i.this for i in items if i is not None and i.this.alias_or_name.lower() == name)
            return found if isinstance(found, exp.Table) else None
        parent = parent.parent
    return None


def decorrelate_scalar_subqueries(tree: exp.Expression, rw: _Rewriter) -> exp.Expression:
    """Shape correlated scalar subqueries the way DataFusion can turn them into joins.

    DataFusion decorrelates `(SELECT agg(e) FROM t WHERE t.k = outer.k AND <inner-only>)` and
    nothing else, while clients send (psql \\d, SQLAlchemy get_columns, pgjdbc, asyncpg):
      - no aggregate: PostgreSQL raises on a second row anyway, so max() of the one row;
      - a condition on outer columns only (`AND a.atthasdef`): moved out as CASE WHEN ... THEN;
      - an outer column beside an equality that already binds it (`c.oid = a.attcollation AND
        a.attcollation <> t.typcollation`): the inner twin replaces it;
      - correlation inside JOIN ... ON: moved to WHERE.
    """

    def fn(node: exp.Expression) -> exp.Expression:
        if not (isinstance(node, exp.Subquery) and isinstance(node.this, exp.Select)):
            return node
        if not _in_expression_position(node) or not _is_correlated(node.this):
            return node
        select = node.this
        if len(select.expressions) != 1 or select.args.get("group") or select.args.get("limit"):
            return node
        local = _local_names(select)
        _move_join_correlation_to_where(select, local)
        guards = _extract_outer_conditions(select, local)
        if select.find(exp.AggFunc) is None and not select.args.get("distinct"):
            if _outer_columns(select.expressions[0], local):
                node = _split_by_inner_columns(select, local)
            else:
                value = select.expressions[0]
                aggregated = exp.Max(this=value.unalias().copy())
                aliased = exp.alias_(aggregated, value.alias) if value.alias else aggregated
                select.set("expressions", [aliased])
        if not guards:
            return node
        if select.find(exp.Count) is not None:  # count() over nothing is 0, not NULL
            return exp.Case(ifs=[exp.If(this=exp.and_(*guards), true=node)], default=exp.Literal.number(0))
        return exp.Case(ifs=[exp.If(this=exp.and_(*guards), true=node)])

    return _bottom_up(tree, fn)


def _split_by_inner_columns(select: exp.Select, local: set[str]) -> exp.Expression:
    """(SELECT f(outer, i1, i2) FROM t WHERE p) -> CASE WHEN (SELECT count(*) ... ) > 0 THEN
    f(outer, (SELECT max(i1) ...), (SELECT max(i2) ...)) END.

    DataFusion can't decorrelate outer columns in a subquery's select list. The subquery yields
    at most one row (PostgreSQL raises otherwise), so each inner column can come separately.
    SQLAlchemy's identity options pass pg_attribute.attidentity into json_build_object so.
    """
    value = select.expressions[0].unalias()

    def subquery(projection: exp.Expression) -> exp.Subquery:
        one = select.copy()
        one.set("expressions", [projection])
        return exp.Subquery(this=one)

    def fn(node: exp.Expression) -> exp.Expression:
        if isinstance(node, exp.Column) and not (node.table and node.table.lower() not in local):
            return subquery(exp.Max(this=node.copy()))
        return node

    lifted = value.copy().transform(fn)
    found = exp.GT(this=subquery(exp.Count(this=exp.Star())), expression=exp.Literal.number(0))
    return exp.Paren(this=exp.Case(ifs=[exp.If(this=found, true=lifted)]))


def _in_expression_position(node: exp.Subquery) -> bool:
    parent = node.parent
    return not isinstance(parent, (exp.From, exp.Join, exp.In, exp.Exists, exp.Union, exp.With,
                                   exp.CTE, exp.Table, exp.Lateral))






def _is_correlated(select: exp.Select) -> bool:
    """Whether the subquery names a table that it doesn't itself bring into scope."""
    return bool(_outer_columns(select, _local_names(select)))




def _move_join_correlation_to_where(select: exp.Select, local: set[str]) -> None:
    moved: list[exp.Expression] = []
    for join in select.args.get("joins") or []:
        if join.side or join.kind not in ("", "INNER", None):
            continue
        keep = []
        for cond in _conjuncts(join.args.get("on")):
            (moved if _outer_columns(cond, local) else keep).append(cond)
        if len(keep) != len(_conjuncts(join.args.get("on"))):
            join.set("on", exp.and_(*keep) if keep else exp.true())
    if moved:
        where = select.args.get("where")
        conds = [*_conjuncts(where.this if where else None), *moved]
        select.set("where", exp.Where(this=exp.and_(*conds)))


def _extract_outer_conditions(select: exp.Select, local: set[str]) -> list[exp.Expression]:
    """Take outer-only conditions out of WHERE; rewrite outer columns bound by equalities."""
    where = select.args.get("where")
    if where is None:
        return []
    conds = _conjuncts(where.this)
    twins: dict[str, exp.Expression] = {}
    for cond in conds:
        if isinstance(cond, exp.EQ):
            for inner, outer in ((cond.this, cond.expression), (cond.expression, cond.this)):
                bound = inner.find(exp.Column) and not _outer_columns(inner, local)
                if bound and _outer_columns(outer, local):
                    twins.setdefault(outer.sql(), inner)
    guards, kept = [], []
    for cond in conds:
        outer = _outer_columns(cond, local)
        if outer and all(c.table.lower() not in local for c in cond.find_all(exp.Column)):
            guards.append(cond)
            continue
        if outer and not (isinstance(cond, exp.EQ) and any(cond is c for c in conds)
                          and _binds_twin(cond, twins)):
            cond = _replace_twins(cond, twins)
        kept.append(cond)
    select.set("where", exp.Where(this=exp.and_(*kept)) if kept else None)
    return guards


def _binds_twin(cond: exp.EQ, twins: dict[str, exp.Expression]) -> bool:
    return cond.this.sql() in twins or cond.expression.sql() in twins


def _replace_twins(cond: exp.Expression, twins: dict[str, exp.Expression]) -> exp.Expression:
    def fn(node: exp.Expression) -> exp.Expression:
        twin = twins.get(node.sql()) if isinstance(node, exp.Column) else None
        return twin.copy() if twin is not None else node

    return cond.transform(fn)


_SEQUENCE_FUNCTIONS = frozenset({"nextval", "currval", "setval"})


def sequence_functions(tree: exp.Expression, rw: _Rewriter) -> exp.Expression:
    """nextval('s'::regclass) -> nextval('s'): the UDFs take the sequence's name (a serial
    column's DEFAULT is written with the cast, as PostgreSQL shows it); the three-argument
    setval(s, v, is_called) is its own UDF (one signature each). Runs before `casts`."""

    def fn(node: exp.Expression) -> exp.Expression:
        name = _func_name(node)
        if name not in _SEQUENCE_FUNCTIONS or not isinstance(node, exp.Anonymous) or not node.expressions:
            return node
        args = list(node.expressions)
        first = args[0]
        if isinstance(first, exp.Cast) and first.to.sql(dialect="postgres").lower() == "regclass":
            args[0] = first.this
        if name == "setval" and len(args) == 3:
            return exp.Anonymous(this="setval_called", expressions=args)
        return exp.Anonymous(this=name, expressions=args)

    return _bottom_up(tree, fn)
