"""Row-level security and column masks: the policies and masks of pg/acl.py put into a
statement's tree before it is planned.

Every reference to a table whose rows the session's role may only partly see becomes a subquery
over the table with the role's condition (`(SELECT * FROM s.t WHERE <policies>) AS t`), and with
each masked column replaced by what the role sees of it (`(SELECT id, '***' AS email, ...)`), in joins,
subqueries, CTEs, INSERT ... SELECT sources, time-travel reads (`t AS OF`, `t@branch`): the
planner never sees the bare table, so no predicate pushdown, EXPLAIN or error message reaches a
row the condition hides. An UPDATE's or DELETE's own target gets the condition in its WHERE.
New row versions are checked where every write path conforms its rows (dml/checks.py:
`check_rows`, 42501 as PostgreSQL's "new row violates row-level security policy").

What is refused instead of filtered: a table's metadata tables (`t$files`, `t$partitions`...),
whose column statistics would show the hidden rows' values. A MERGE reads its target under the
SELECT policies (added to its ON) and checks the UPDATE/DELETE policies' USING of each row an
action takes (dml/merge.py: an error, not a skipped row, as in PostgreSQL).
This is PostgreSQL's query-rewrite approach (RLS quals added to the query tree), done on the
sqlglot tree, after the privilege checks (authz.py) and before views are expanded: the tables a
view reads are read with the view owner's rights, as a PostgreSQL 15 view without
security_invoker, and its owner is exempt from the policies of its own tables.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, replace
from typing import TYPE_CHECKING, Any

import pyarrow as pa
import pyarrow.compute as pc
from sqlglot import exp

from icegres.engine import authz as authz_checks
from icegres.engine import check_text, view_defs
from icegres.pg import errors as E
from icegres.pg.errors import PgError
from icegres.sql.parse import DIALECT
from icegres.sql.shape import fill_shape, masked_literals
from icegres.sql.statement import EXPLAIN_PREFIX, query

if TYPE_CHECKING:
    from icegres.sql.statement import Statement

# A session's QueryContext (engine/query.py, which calls in here: named by its role, not imported).
QueryContext = Any

__all__ = ["applied", "check_rows", "merge_row_checks", "target_row_violation"]

_NO_LIMIT = 2**63 - 1
_COMMANDS = {exp.Update: "update", exp.Delete: "delete", exp.Insert: "insert", exp.Merge: "merge"}


def _session(qctx: QueryContext, *, fresh: bool = True) -> tuple[Any, Any] | None:
    """(authz, principal) when some table has row security or a mask and the role is not exempt
    from all; `fresh=False`: by the state as last read (no I/O)."""
    authorization = authz_checks.in_effect(qctx.engine.authorization, qctx.txn)
    if authorization is None:
        return None
    if fresh and authorization.is_superuser(authorization.principal(qctx.env.user, qctx.env.settings.get("role"),
                                                                    authorization.cached())):
        return None
    authz = authorization.current() if fresh else authorization.cached()
    if not authz.masks and not any(v in ("enabled", "forced") for v in authz.rls.values()):
        return None
    who = authorization.principal(qctx.env.user, qctx.env.settings.get("role"), authz)
    if authz.is_superuser(who):
        return None
    return authz, who


def _head(name: str) -> tuple[str, str]:
    """(table name, what follows it): `t$files` -> (t, $files), `t@b` -> (t, @b)."""
    for mark in ("$", "@"):
        if mark in name:
            head, _, rest = name.partition(mark)
            return head, mark + rest
    return name, ""


def applied(qctx: QueryContext, stmt: Statement) -> Statement:
    """`stmt` with the session role's row conditions in it (itself when none applies)."""
    got = _session(qctx)
    if got is None:
        return stmt
    authz, who = got
    explained = EXPLAIN_PREFIX.match(stmt.sql)
    if explained is not None:
        # sqlglot keeps EXPLAIN as an opaque command: the query it explains gets the conditions,
        # so the plan shown (and EXPLAIN ANALYZE's run) is the one the role's query would run.
        inner = applied(qctx, query(stmt.sql[explained.end():]))
        return stmt if inner.sql == stmt.sql[explained.end():] else replace(stmt, sql=explained.group(0) + inner.sql)
    state = (tuple(qctx.env.search_path), who, authz_checks.in_effect(qctx.engine.authorization, qctx.txn).generation,
             qctx.engine.catalog_generation, qctx.engine.views_generation)
    key = (stmt.sql, *state)
    if key in qctx.cache.secured:
        done = qctx.cache.secured[key]
        return stmt if done is None else stmt.rewritten(*done)
    literals = masked_literals(stmt.sql)
    template = qctx.cache.secured_shapes.get((stmt.shape, *state)) if literals else None
    if template is not None:
        text = template.fill(literals)
        if text is not None:
            return stmt if text == stmt.sql else replace(stmt, sql=text)  # (text only: parsed if need be)
    secured = _applied(qctx, stmt, authz, who)
    qctx.cache.secured.put(key, None if secured is stmt else (secured.sql, secured.tree))
    if literals:
        made = _Template.of(qctx, stmt, literals, authz, who)
        if made is not None and made.fill(literals) == secured.sql:  # (kept only if it gives the same)
            qctx.cache.secured_shapes.put((stmt.shape, *state), made)
    return secured


_SENTINEL_NUMBER = 913_700_420_000


@dataclass(frozen=True)
class _Template:
    """A shape's secured text: `parts` with the statement's literal number `order[i]` between
    parts i and i + 1 (a literal may be copied inside the barrier: it then appears twice)."""

    parts: tuple[str, ...]
    order: tuple[int, ...]

    @classmethod
    def of(cls, qctx: QueryContext, stmt: Statement, literals: list[str], authz: Any, who: Any) -> _Template | None:
        """Secure the statement with each literal replaced by a sentinel of its kind, and cut the
        result at the sentinels (what is secured does not depend on literal values, only kinds)."""
        sentinels = [f"'icegres_literal_{i}_'" if lit.startswith("'") else str(_SENTINEL_NUMBER + i)
                     for i, lit in enumerate(literals)]
        text = fill_shape(stmt.shape, sentinels)
        if text is None or any(s in stmt.sql for s in sentinels):
            return None
        try:
            secured = _applied(qctx, replace(stmt, sql=text), authz, who).sql
        except PgError:
            return None
        found = re.split("(" + "|".join(re.escape(s) for s in sentinels) + ")", secured)
        index = {s: i for i, s in enumerate(sentinels)}
        return cls(tuple(found[0::2]), tuple(index[s] for s in found[1::2]))

    def fill(self, literals: list[str]) -> str | None:
        if any(i >= len(literals) for i in self.order):
            return None
        out = [self.parts[0]]
        for i, part in zip(self.order, self.parts[1:], strict=True):
            out += [literals[i], part]
        return "".join(out)


def _applied(qctx: QueryContext, stmt: Statement, authz: Any, who: Any) -> Statement:
    try:
        original = stmt.tree
    except PgError:
        return stmt
    tree = original.copy()
    target = view_defs.dml_target(tree)
    command = _COMMANDS.get(type(tree))
    resolver = qctx.resolver()
    changed = _secure_tables(qctx, authz, who, resolver, view_defs.named_tables(tree, target))
    if target is not None and command is not None:
        found = resolver.resolve(target.db or None, _head(target.name)[0])
        if found is not None and found[0] == "table":
            key = ("table", *found[1])
            masks = authz.masked_columns(who, key)
            if masks:
                _mask_target_reads(tree, masks, target.alias_or_name)
                changed = True
            if command == "merge" and (condition := authz.row_filter(who, key, "select")) is not None:
                # MERGE reads its target under the SELECT policies: a row they hide joins no
                # source row (its source rows go to WHEN NOT MATCHED). The UPDATE/DELETE USING
                # of the rows an action takes are checked by dml/merge.py (`merge_row_checks`).
                tree.set("on", exp.and_(exp.Paren(this=tree.args["on"]), _qualified(condition, target.alias_or_name)))
                changed = True
            if command in ("update", "delete"):
                # The SELECT policies too when the statement reads the target's columns, as
                # PostgreSQL adds them then (a WHERE, a RETURNING, SET col = col + 1).
                reads = "r" in authz_checks.write_letters(stmt)
                conditions = [c for c in (authz.row_filter(who, key, command),
                                          authz.row_filter(who, key, "select") if reads else None) if c is not None]
                if conditions:
                    where = tree.args.get("where")
                    parts = [exp.Paren(this=where.this)] if where is not None else []
                    parts += [_qualified(c, target.alias_or_name) for c in conditions]
                    tree.set("where", exp.Where(this=exp.and_(*parts)))
                    changed = True
    if not changed:
        return stmt
    return stmt.rewritten(tree.sql(dialect=DIALECT), tree)


def _secure_tables(qctx: QueryContext, authz: Any, who: Any, resolver: Any, tables: list[exp.Table]) -> bool:
    """Wrap each of `tables` that `who` sees only partly (rows or masked columns); whether any was."""
    changed = False
    for table in tables:
        head, rest = _head(table.name)
        found = resolver.resolve(table.db or None, head)
        if found is None or found[0] != "table":
            continue
        key = ("table", *found[1])
        condition = authz.row_filter(who, key, "select")
        masks = authz.masked_columns(who, key)
        if condition is None and not masks:
            continue
        if rest.startswith("$"):
            raise PgError(E.INSUFFICIENT_PRIVILEGE, f'permission denied for table "{table.name}"',
                          detail=f'Table "{head}" has row-level security or masked columns: its metadata '
                                 "tables show values the role may not see.")
        schema = qctx.engine.table_schema(found[1])
        pushed = _leakproof_conjuncts(table, schema, masks) if condition is not None else []
        barrier = condition is not None and not _alone_and_leakproof(table, pushed)
        _wrap(table, condition, masks, schema.names if masks else [], pushed, barrier)
        changed = True
    return changed


def _alone_and_leakproof(table: exp.Table, pushed: list[exp.Expression]) -> bool:
    """Whether no predicate of the statement can meet a row the condition hides, so the barrier
    (and the single stream a LIMIT costs) can be spared: the table is the only relation of the
    statement's own top-level SELECT, which nothing encloses (an outer query's predicates are
    pushed down through a subquery), and every condition of its WHERE is leakproof (all went
    inside). A point lookup and a plain aggregate keep their plans."""
    scope = table.parent
    select = scope.parent if isinstance(scope, exp.From) else None
    if not isinstance(select, exp.Select) or select.parent is not None or select.args.get("joins"):
        return False
    where = select.args.get("where")
    if where is None:
        return True
    conjuncts = list(where.this.flatten()) if isinstance(where.this, exp.And) else [where.this]
    return len(conjuncts) == len(pushed)


def view_body_hook(qctx: QueryContext) -> Any:
    """What a view's query becomes where a statement reads the view: checked and secured as its
    owner (PostgreSQL 15's views without security_invoker read their tables with the owner's
    privileges and under the owner's policies), or, WITH (security_invoker), as the reader. None
    when the server keeps no roles."""
    from icegres.pg.acl import BOOTSTRAP, Principal

    authorization = authz_checks.in_effect(qctx.engine.authorization, qctx.txn)
    if authorization is None:
        return None

    def hook(view: tuple[str, str], body: exp.Expression, resolver: Any) -> exp.Expression:
        authz = authorization.current()
        if ("table", *view) in authz.invokers:  # WITH (security_invoker): as the reader
            who = authorization.principal(qctx.env.user, qctx.env.settings.get("role"))
        else:
            owner = authz.owner(("table", *view))
            who = Principal(owner, owner == BOOTSTRAP or owner in authorization.configured_names())
        if authz.is_superuser(who):
            return body
        tables = view_defs.named_tables(body, None)
        relations = [f for t in tables if (f := resolver.resolve(t.db or None, _head(t.name)[0])) is not None]
        authorization.check_relations(who, relations, "r")
        _secure_tables(qctx, authz, who, resolver, tables)
        return body

    return hook


def _wrap(table: exp.Table, condition: str | None, masks: dict[str, str], columns: list[str],
          pushed: list[exp.Expression], barrier: bool) -> None:
    alias = table.args.get("alias")
    inner = table.copy()
    inner.set("alias", None)
    if masks:
        items = [exp.alias_(exp.Paren(this=check_text.expression(masks[c])), c, quoted=True) if c in masks
                 else exp.column(c, quoted=True) for c in columns]
        subquery = exp.select(*items).from_(inner)
    else:
        subquery = exp.select("*").from_(inner)
    if condition is not None:
        # A security barrier, as PostgreSQL's for RLS: the optimizer pushes no predicate of the
        # statement below a LIMIT, so none is evaluated on a row the condition hides (a division
        # by zero or a failing cast would tell that the row exists and what it holds).
        inner_condition = exp.and_(check_text.expression(condition), *pushed) if pushed else \
            check_text.expression(condition)
        subquery = subquery.where(inner_condition)
        if barrier:
            subquery = subquery.limit(_NO_LIMIT)
    if alias is None:
        alias = exp.TableAlias(this=exp.to_identifier(_head(table.name)[0] if "$" in table.name else table.name))
    table.replace(exp.Subquery(this=subquery, alias=alias.copy()))


_COMPARISONS = (exp.EQ, exp.NEQ, exp.GT, exp.GTE, exp.LT, exp.LTE)


def _leakproof_conjuncts(table: exp.Table, schema: pa.Schema, masks: dict[str, str]) -> list[exp.Expression]:
    """Copies of the conditions of the statement's WHERE over `table` alone that cannot fail or
    say anything by the row they are evaluated on (PostgreSQL's leakproof operators): a column
    compared with a literal of its own kind or a parameter, IN a list of such, IS [NOT] NULL.
    They go inside the security barrier too, so a point lookup under a policy still prunes by
    the file statistics; the WHERE keeps them as well."""
    scope = table.parent
    select = scope.parent if isinstance(scope, exp.From) else None
    if not isinstance(select, exp.Select) or select.args.get("where") is None:
        return []
    alone = not select.args.get("joins")
    qualifier = table.alias_or_name
    types = {f.name: f.type for f in schema}
    out = []
    for conjunct in select.args["where"].this.flatten() if isinstance(select.args["where"].this, exp.And) \
            else [select.args["where"].this]:
        if _leakproof(conjunct, types, masks, qualifier, alone):
            copied = conjunct.copy()
            for column in copied.find_all(exp.Column):
                column.set("table", None)
            out.append(copied)
    return out


def _leakproof(node: exp.Expression, types: dict[str, pa.DataType], masks: dict[str, str], qualifier: str,
               alone: bool) -> bool:
    def column_type(col: exp.Expression) -> pa.DataType | None:
        if not isinstance(col, exp.Column) or col.name in masks or col.name not in types:
            return None
        if col.table and col.table != qualifier or (not col.table and not alone):
            return None
        return types[col.name]

    def same_kind(kind: pa.DataType, value: exp.Expression) -> bool:
        if isinstance(value, exp.Placeholder | exp.Parameter):
            return True
        if isinstance(value, exp.Neg):
            value = value.this
        if not isinstance(value, exp.Literal):
            return False
        if value.is_string:
            return pa.types.is_string(kind) or pa.types.is_large_string(kind) or pa.types.is_string_view(kind) \
                or pa.types.is_temporal(kind)
        return pa.types.is_integer(kind) or pa.types.is_floating(kind) or pa.types.is_decimal(kind)

    if isinstance(node, exp.Paren):
        return _leakproof(node.this, types, masks, qualifier, alone)
    if isinstance(node, _COMPARISONS):
        left, right = node.this, node.expression
        kind = column_type(left)
        if kind is not None:
            return same_kind(kind, right)
        kind = column_type(right)
        return kind is not None and same_kind(kind, left)
    if isinstance(node, exp.In) and not node.args.get("query"):
        kind = column_type(node.this)
        return kind is not None and all(same_kind(kind, v) for v in node.expressions)
    if isinstance(node, exp.Is) and isinstance(node.expression, exp.Null):
        return column_type(node.this) is not None
    if isinstance(node, exp.Not):
        return _leakproof(node.this, types, masks, qualifier, alone)
    return False


def _mask_target_reads(tree: exp.Expression, masks: dict[str, str], qualifier: str) -> None:
    """A write's own reads of its target's masked columns (WHERE, RETURNING, the values SET
    assigns) read the mask, so no row count or returned row tells a masked value."""
    parts = [tree.args.get("where"), tree.args.get("returning")]
    if isinstance(tree, exp.Update):
        parts += [e.expression for e in tree.expressions if isinstance(e, exp.EQ)]
    for part in parts:
        if part is None:
            continue
        for column in list(part.find_all(exp.Column)):
            if column.name in masks and column.table in ("", qualifier):
                column.replace(_qualified(masks[column.name], qualifier))


def _qualified(condition: str, qualifier: str) -> exp.Expression:
    tree = check_text.expression(condition)
    for column in list(tree.find_all(exp.Column)):
        if not column.table:
            column.set("table", exp.to_identifier(qualifier))
    return exp.Paren(this=tree)


def without_rules(qctx: QueryContext) -> bool:
    """Whether no row condition, check or mask can apply to this session's statements, by the
    state as last read (no I/O: asked on the event loop, right after the statement's privilege
    check read it fresh)."""
    return _session(qctx, fresh=False) is None


def checks_writes(qctx: QueryContext, key: tuple[str, str]) -> bool:
    """Whether new row versions of `key` written by this session are checked against policies."""
    got = _session(qctx)
    return got is not None and got[0].row_check(got[1], ("table", *key), "update") is not None


def check_rows(qctx: QueryContext, rows: pa.Table, key: tuple[str, str], command: str,
               evaluate: Any) -> None:
    """42501 unless every row of `rows` (new versions of `key`'s rows) meets the role's WITH
    CHECK for `command`. `evaluate(checks, rows)` computes boolean columns (dml/checks.py).
    "merge_update": a MERGE's UPDATE action, whose new rows must also stay visible under the
    SELECT policies, as PostgreSQL checks them."""
    got = _session(qctx)
    if got is None or not rows.num_rows:
        return
    authz, who = got
    obj = ("table", *key)
    conditions = [authz.row_check(who, obj, "update" if command == "merge_update" else command)]
    if command == "merge_update":
        conditions.append(authz.row_filter(who, obj, "select"))
    for condition in conditions:
        if condition is None:
            continue
        results = evaluate((("rls", condition),), rows)
        passed = pc.fill_null(results.column(0), False)
        if not pc.all(passed).as_py():
            raise PgError(E.INSUFFICIENT_PRIVILEGE, f'new row violates row-level security policy for table "{key[1]}"')


def merge_row_checks(qctx: QueryContext, key: tuple[str, str], alias: str) -> dict[str, exp.Expression]:
    """For a MERGE into `key` (read as `alias`): per action ("update", "delete"), the condition
    a target row it takes must meet, its columns qualified by `alias` (none: no row security).
    PostgreSQL checks the UPDATE/DELETE policies' USING on the row an action takes and fails
    the statement (42501) where a plain UPDATE/DELETE would skip the row."""
    got = _session(qctx)
    if got is None:
        return {}
    authz, who = got
    out = {}
    for action in ("update", "delete"):
        condition = authz.row_filter(who, ("table", *key), action)
        if condition is not None:
            out[action] = _qualified(condition, alias)
    return out


def target_row_violation(key: tuple[str, str]) -> PgError:
    return PgError(E.INSUFFICIENT_PRIVILEGE,
                   f'target row violates row-level security policy (USING expression) for table "{key[1]}"')
