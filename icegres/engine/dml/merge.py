"""MERGE, as PostgreSQL 15 runs it, copy-on-write: one staged write (one snapshot at commit).

`MERGE INTO target [AS t] USING source [AS s] ON cond` with WHEN MATCHED [AND c] THEN UPDATE SET
… | DELETE | DO NOTHING and WHEN NOT MATCHED [AND c] THEN INSERT … | DO NOTHING, the clauses of
each kind tried in order, the first whose condition holds acting. The target's files holding rows
that join the source are found first (joined.py's way: one join over the table and its file
column), then only those files' rows are read, numbered, and joined again: each pair gets the
number of the clause that acts on it and that clause's new values. A target row that two source
rows would change is PostgreSQL's 21000. Source rows that join no target row (an anti-join over
the whole table) give the inserted rows. The command tag counts rows updated, deleted and
inserted: `MERGE n`.
"""

from __future__ import annotations

from dataclasses import replace
from typing import TYPE_CHECKING, Any

import numpy as np
import pyarrow as pa
import pyarrow.compute  # noqa: F401  (pa.compute)
from sqlglot import exp

from icegres.engine import row_security
from icegres.engine.assign import write_schema
from icegres.engine.dml import checks, defaults, merge_on_read
from icegres.engine.dml.copy_on_write import assigned_values, check_unique, write_files
from icegres.engine.dml.joined import (
    ROW_COLUMN,
    assigned_to,
    frame_of,
    joined_files,
    numbered_rows,
    without_views,
)
from icegres.engine.dml.target import (
    FILE_COLUMN,
    alias_of,
    collect,
    column,
    set_items,
    source,
    target_key,
    target_plan,
    with_file_column,
)
from icegres.pg.errors import CARDINALITY_VIOLATION, SYNTAX_ERROR, PgError

if TYPE_CHECKING:
    from icegres.engine.mounts import ReadPlan
    from icegres.engine.query import QueryContext
    from icegres.engine.txn import Key, TxnState

CLAUSE_COLUMN = "__icegres_clause"
INSERT_CLAUSE_COLUMN = "__icegres_insert_clause"


def merge(qctx: QueryContext, txn: TxnState, tree: exp.Merge, params: dict[str, Any] | None) -> str:
    """Stage a MERGE into `txn`; its command tag."""
    from icegres.engine.mounts import to_dataframe

    if tree.args.get("returning") is not None:
        raise PgError(SYNTAX_ERROR, 'syntax error at or near "RETURNING"')
    tree = tree.copy()  # the parse is shared (`Statement.tree`); its SET values are bounded in place
    key = target_key(qctx, txn, tree.this)
    plan = target_plan(txn, key)
    alias = alias_of(tree.this, key)
    using, on = tree.args["using"], tree.args["on"]
    whens = list(tree.args["whens"].expressions)
    _check_clauses(whens)
    matched = [w for w in whens if w.args.get("matched")]
    unmatched = [w for w in whens if not w.args.get("matched")]

    checked = qctx.register_private("target", qctx.zoned(to_dataframe(qctx.ctx, replace(plan, files=()))))
    sets = [_sets(qctx, plan, key, checked, alias, using, on, w, params) for w in matched]
    # Names first, over no target rows (42703 even when nothing matches, as in PostgreSQL).
    probe = [w.args["condition"].copy() for w in matched if w.args.get("condition") is not None]
    probe += [e.copy() for s in sets if s for e in s.values()]
    collect(qctx.plan_tree(frame_of(checked, alias, [using], on)(exp.select(*probe or [exp.Literal.number(1)])), params))
    inserts = [_insert(w, plan, key) for w in unmatched]
    for w, (_, values) in zip(unmatched, inserts, strict=True):
        for node in (*values, *_condition(w)):
            for col in node.find_all(exp.Column):
                if col.table == alias.name:  # a source row that matched nothing has no target row
                    raise PgError("42P01", f'invalid reference to FROM-clause entry for table "{alias.name}"',
                                  hint="There is an entry for table but it cannot be referenced from this part of the query.")
    source_only = exp.select(*[c.copy() for w, (_, values) in zip(unmatched, inserts, strict=True)
                               for c in (*values, *_condition(w))] or [exp.Literal.number(1)]).from_(using.copy())
    collect(qctx.plan_tree(source_only.limit(0), params))

    # Merge-on-read (dml/merge_on_read.py), but not under a primary key: its check excludes
    # whole rewritten files.
    by_position = bool(plan.files) and not plan.primary_key and merge_on_read.chosen(txn, key, plan, "merge")
    view = qctx.register_private("target", with_file_column(qctx, key, plan, positions=by_position)) \
        if plan.files else None
    if by_position:
        assert view is not None
        changed, positions, rows, added = _by_position(qctx, plan, key, view, alias, using, on, whens, sets, inserts,
                                                       params)
        inserted = added.num_rows if added is not None else 0
        if positions or inserted:
            new = [t for t in (rows, added) if t is not None]
            merge_on_read.stage(txn, key, positions, pa.concat_tables(new) if new else None)
        return f"MERGE {changed + inserted}"
    changed, files, rows = 0, set(), None
    if matched and view is not None:
        changed, files, rows = _matched(qctx, plan, key, view, alias, using, on, matched, sets, params)
    added = _not_matched(qctx, plan, key, view, alias, using, on, unmatched, inserts, params) if unmatched else None
    inserted = added.num_rows if added is not None else 0
    if plan.primary_key and (rows is not None or inserted):
        new = pa.concat_tables([t for t in (rows, added) if t is not None])
        check_unique(qctx, plan, key, new, exclude_files=tuple(files))
    write = txn.write_for(key)
    if files:
        assert rows is not None
        write, orphans = write.rewrite(files, write_files(write.target, rows), rows.num_rows, read=True)
        txn.stage(write, orphans)
    if inserted:
        assert added is not None
        write, orphans = txn.write_for(key).rewrite(set(), write_files(write.target, added), inserted, read=True)
        txn.stage(write, orphans)
    return f"MERGE {changed + inserted}"


def _check_clauses(whens: list[exp.When]) -> None:
    """PostgreSQL's grammar: a MATCHED clause updates, deletes or does nothing; a NOT MATCHED
    one inserts or does nothing; NOT MATCHED BY SOURCE is PostgreSQL 17's."""
    for when in whens:
        then = when.args.get("then")
        if when.args.get("source"):
            raise PgError(SYNTAX_ERROR, 'syntax error at or near "BY"')
        if when.args.get("matched") and isinstance(then, exp.Insert):
            raise PgError(SYNTAX_ERROR, 'syntax error at or near "INSERT"')
        if not when.args.get("matched") and (isinstance(then, exp.Update) or _is(then, "DELETE")):
            raise PgError(SYNTAX_ERROR, f'syntax error at or near "{"UPDATE" if isinstance(then, exp.Update) else "DELETE"}"')


def _is(then: Any, word: str) -> bool:
    return isinstance(then, exp.Var) and str(then.this).upper() == word


def _condition(when: exp.When) -> tuple[exp.Expression, ...]:
    cond = when.args.get("condition")
    return (cond.copy(),) if cond is not None else ()


def _sets(qctx: QueryContext, plan: ReadPlan, key: Key, checked: exp.Table, alias: exp.Identifier,
          using: exp.Expression, on: exp.Expression, when: exp.When,
          params: dict[str, Any] | None) -> dict[str, exp.Expression] | None:
    """A WHEN MATCHED … UPDATE SET clause's values, typed for their columns (None: not an UPDATE)."""
    then = when.args.get("then")
    if not isinstance(then, exp.Update):
        return None
    assigned = set_items(then.expressions, plan, key)
    return assigned_values(qctx, plan, frame_of(checked, alias, [using], on), assigned, params)


def _clause_number(whens: list[exp.When]) -> exp.Expression:
    """`CASE WHEN c1 THEN 1 WHEN c2 THEN 2 … ELSE 0 END`: which clause acts on a row."""
    ifs = [exp.If(this=exp.Is(this=exp.Paren(this=cond[0]), expression=exp.true()) if (cond := _condition(w))
                  else exp.true(), true=exp.Literal.number(i + 1))
           for i, w in enumerate(whens)]
    return exp.Case(ifs=ifs, default=exp.Literal.number(0))


def _matched(qctx: QueryContext, plan: ReadPlan, key: Key, view: exp.Table, alias: exp.Identifier,
             using: exp.Expression, on: exp.Expression, whens: list[exp.When],
             sets: list[dict[str, exp.Expression] | None],
             params: dict[str, Any] | None) -> tuple[int, set[str], pa.Table | None]:
    """The WHEN MATCHED clauses: rows changed, the files rewritten, and those files' new rows."""
    files = joined_files(qctx, frame_of(view, alias, [using], on), alias, params)
    if not files:
        return 0, set(), None
    columns = [f.name for f in plan.schema]
    base, rows_view = numbered_rows(qctx, plan, key, view, alias, files)
    n = base.num_rows
    values = [exp.alias_(e.copy(), f"_{k}_{i}", quoted=True)
              for k, s in enumerate(sets) if s for i, e in enumerate(s.values())]
    rules = row_security.merge_row_checks(qctx, key, alias.name)
    pairs = without_views(collect(qctx.plan_tree(frame_of(rows_view, alias, [using], on)(
        exp.select(column(ROW_COLUMN, alias), exp.alias_(_clause_number(whens), CLAUSE_COLUMN, quoted=True), *values,
                   *_rule_columns(rules))),
        params)))
    clause = pairs.column(CLAUSE_COLUMN).to_numpy(zero_copy_only=False)
    ids = pairs.column(ROW_COLUMN).to_numpy()
    acting = np.array([clause_i > 0 and not _is(whens[clause_i - 1].args.get("then"), "DO NOTHING")
                       for clause_i in clause], dtype=bool) if len(clause) else np.zeros(0, dtype=bool)
    _check_target_rows(pairs, clause, acting, whens, rules, key)
    acted = ids[acting]
    if len(np.unique(acted)) != len(acted):
        raise PgError(CARDINALITY_VIOLATION, "MERGE command cannot affect row a second time",
                      hint="Ensure that not more than one source row matches any one target row.")
    if not len(acted):
        return 0, set(), None
    # Each updated value sits after the n old ones and the values before it: one take per column.
    new = base
    for name in columns:
        parts, positions, offset = [base.column(name).combine_chunks()], np.arange(n, dtype=np.int64), n
        for k, s in enumerate(sets):
            if not s or name not in s:
                continue
            mask = acting & (clause == k + 1)
            picked = pairs.filter(pa.array(mask)).column(f"_{k}_{list(s).index(name)}")
            parts.append(assigned_to(picked, base.schema.field(name), key, qctx.env.time_zone))
            positions[ids[mask]] = offset + np.arange(len(picked), dtype=np.int64)
            offset += len(picked)
        if len(parts) > 1:
            new = new.set_column(new.schema.get_field_index(name), name, pa.concat_arrays(parts).take(pa.array(positions)))
    deleted = np.zeros(n, dtype=bool)
    updated = np.zeros(n, dtype=bool)
    for k, when in enumerate(whens):
        if _is(when.args.get("then"), "DELETE"):
            deleted[ids[acting & (clause == k + 1)]] = True
        elif sets[k]:
            updated[ids[acting & (clause == k + 1)]] = True
    # CHECKs of the updated rows only (the others are as they were)
    rows = checks.conform(qctx, new.filter(pa.array(~deleted)), plan, key, changed=pa.array(updated[~deleted]),
                          command="merge_update")
    return len(acted), files, rows


def _rule_columns(rules: dict[str, exp.Expression], when: Any = None) -> list[exp.Expression]:
    """Row security's conditions on the target rows MERGE's actions take, as columns of the
    pairs query (`when`: a wrapper computing them for matched pairs only)."""
    return [exp.alias_(when(c.copy()) if when else c.copy(), f"__icegres_rls_{action}", quoted=True)
            for action, c in rules.items()]


def _check_target_rows(pairs: pa.Table, clause: np.ndarray, acting: np.ndarray, whens: list[exp.When],
                       rules: dict[str, exp.Expression], key: Key) -> None:
    """PostgreSQL's 42501 when a row an UPDATE or DELETE action takes fails that command's
    policies (row_security.merge_row_checks): MERGE never skips it silently."""
    for action in rules:
        ok = pa.compute.fill_null(pairs.column(f"__icegres_rls_{action}"), False).to_numpy(zero_copy_only=False)
        for k, when in enumerate(whens):
            then = when.args.get("then")
            takes = isinstance(then, exp.Update) if action == "update" else _is(then, "DELETE")
            if takes and not ok[acting & (clause == k + 1)].all():
                raise row_security.target_row_violation(key)


def _by_position(qctx: QueryContext, plan: ReadPlan, key: Key, view: exp.Table, alias: exp.Identifier,
                 using: exp.Expression, on: exp.Expression, whens: list[exp.When],
                 sets: list[dict[str, exp.Expression] | None], inserts: list[tuple[list[str], list[exp.Expression]]],
                 params: dict[str, Any] | None) -> tuple[int, dict[str, np.ndarray], pa.Table | None, pa.Table | None]:
    """MERGE merge-on-read: rows changed, the positions of the target rows updated or deleted (data
    file path -> sorted positions), the updated rows' new versions and the inserted rows.

    One scan of the target: the source LEFT JOIN the target gives each matched pair's target row,
    file and position, the number of the MATCHED clause acting on it and that clause's values,
    and for each source row that matched nothing (its file NULL) the NOT MATCHED clause acting on
    it and that clause's values. Each clause's values are computed only for the rows it may act
    on (a CASE on the file being NULL), so a value that fails on other rows fails no statement."""
    matched = [w for w in whens if w.args.get("matched")]
    unmatched = [w for w in whens if not w.args.get("matched")]
    hit = exp.Not(this=exp.Is(this=column(FILE_COLUMN, alias), expression=exp.Null()))

    def when_hit(e: exp.Expression) -> exp.Expression:  # (a clause's values only for matched pairs)
        return exp.Case(ifs=[exp.If(this=hit.copy(), true=e)])

    values = [exp.alias_(when_hit(e.copy()), f"_{k}_{i}", quoted=True)
              for k, s in enumerate(sets) if s for i, e in enumerate(s.values())]
    # (the target's and the source's columns under names of their own: they share names)
    columns = [f.name for f in plan.schema]
    olds = [exp.alias_(column(c, alias), f"_t_{j}", quoted=True) for j, c in enumerate(columns)] if matched else []
    missed = exp.Is(this=column(FILE_COLUMN, alias), expression=exp.Null())
    inserted = [exp.alias_(exp.Case(ifs=[exp.If(this=missed.copy(), true=e.copy())]), f"_i{k}_{i}", quoted=True)
                for k, (_, vs) in enumerate(inserts) for i, e in enumerate(vs)]
    clause = exp.Case(ifs=[exp.If(this=hit.copy(), true=_clause_number(matched))], default=exp.Literal.number(0)) \
        if matched else exp.Literal.number(0)
    insert_clause = exp.Case(ifs=[exp.If(this=missed.copy(), true=_clause_number(unmatched))],
                             default=exp.Literal.number(0)) if unmatched else exp.Literal.number(0)
    rules = row_security.merge_row_checks(qctx, key, alias.name) if matched else {}
    query = exp.select(column(FILE_COLUMN, alias), column(merge_on_read.POS_COLUMN, alias), *olds,
                       exp.alias_(clause, CLAUSE_COLUMN, quoted=True), *values, *_rule_columns(rules, when_hit),
                       exp.alias_(insert_clause, INSERT_CLAUSE_COLUMN, quoted=True), *inserted).from_(
        using.copy()).join(source(view, alias), on=on.copy(), join_type="left")
    found = without_views(collect(qctx.plan_tree(query, params)))
    is_hit = found.column(FILE_COLUMN).is_valid()
    added = None
    if unmatched:
        added = _inserted_rows(qctx, plan, key, found.filter(pa.compute.invert(is_hit)), unmatched, inserts,
                               INSERT_CLAUSE_COLUMN, "_i")
    if not matched:
        return 0, {}, None, added
    pairs = found.filter(is_hit)
    clause_of = pairs.column(CLAUSE_COLUMN).to_numpy(zero_copy_only=False)
    acting = np.array([clause_i > 0 and not _is(matched[clause_i - 1].args.get("then"), "DO NOTHING")
                       for clause_i in clause_of], dtype=bool) if len(clause_of) else np.zeros(0, dtype=bool)
    pairs, clause_of = pairs.filter(pa.array(acting)), clause_of[acting]
    if not pairs.num_rows:
        return 0, {}, None, added
    _check_target_rows(pairs, clause_of, np.ones(len(clause_of), dtype=bool), matched, rules, key)
    files = pa.compute.dictionary_encode(pairs.column(FILE_COLUMN)).combine_chunks().indices.to_numpy()
    rows_at = files.astype(np.int64) << 40 | pairs.column(merge_on_read.POS_COLUMN).to_numpy()
    if len(np.unique(rows_at)) != len(rows_at):
        raise PgError(CARDINALITY_VIOLATION, "MERGE command cannot affect row a second time",
                      hint="Ensure that not more than one source row matches any one target row.")
    positions = merge_on_read.positions_of(pairs.select([FILE_COLUMN, merge_on_read.POS_COLUMN]), FILE_COLUMN)
    schema = write_schema(plan)
    parts = []
    for k, s in enumerate(sets):
        mask = clause_of == k + 1
        if not s or not mask.any():
            continue
        chosen = pairs.filter(pa.array(mask))
        new = {c: assigned_to(chosen.column(f"_{k}_{list(s).index(c)}"), schema.field(c), key, qctx.env.time_zone)
               if c in s else chosen.column(f"_t_{j}") for j, c in enumerate(columns)}
        parts.append(checks.conform(qctx, pa.table(new), plan, key, command="merge_update"))  # (all new versions)
    return pairs.num_rows, positions, pa.concat_tables(parts) if parts else None, added


def _insert(when: exp.When, plan: ReadPlan, key: Key) -> tuple[list[str], list[exp.Expression]]:
    """A WHEN NOT MATCHED clause's columns and values (none: DO NOTHING; DEFAULT VALUES: NULLs)."""
    then = when.args.get("then")
    if not isinstance(then, exp.Insert):
        return [], []
    names = [f.name for f in plan.schema]
    value = then.expression
    if value is None:  # INSERT DEFAULT VALUES (whose DEFAULT sqlglot reads as a column list)
        return [], []
    listed = [c.name for c in then.this.expressions] if isinstance(then.this, exp.Tuple) else []
    for name in listed:
        if name not in names:
            raise PgError("42703", f'column "{name}" of relation "{key[1]}" does not exist')
    if len(set(listed)) != len(listed):
        raise PgError("42701", "column specified more than once")
    values = list(value.expressions) if isinstance(value, exp.Tuple) else [value]
    columns = listed or names[:len(values)]
    if len(values) > len(columns):
        raise PgError("42601", "INSERT has more expressions than target columns")
    if len(values) < len(columns):
        raise PgError("42601", "INSERT has more target columns than expressions")
    return columns, [v.copy() for v in values]


def _not_matched(qctx: QueryContext, plan: ReadPlan, key: Key, view: exp.Table | None, alias: exp.Identifier,
                 using: exp.Expression, on: exp.Expression, whens: list[exp.When],
                 inserts: list[tuple[list[str], list[exp.Expression]]],
                 params: dict[str, Any] | None) -> pa.Table | None:
    """The rows the WHEN NOT MATCHED clauses insert, from the source rows that join no target
    row (the target read whole: an anti-join).

    The clauses' conditions and values see the source alone, as in PostgreSQL (dbt's `insert
    ("id") values ("id")` names the source's id, which the target has too): the unmatched source
    rows are found first, then the clauses are evaluated over just them."""
    rows: exp.Expression = using.copy()
    if view is not None:
        name = _source_name(using)
        # The source's columns by name, not `s.*`: DataFusion does not expand `src.*` over an
        # unaliased `schema.src`.
        names = collect(qctx.plan_tree(exp.select(exp.Star()).from_(using.copy()).limit(0), params)).schema.names
        unmatched = exp.select(*(column(n, name) for n in names)).from_(using.copy()).join(
            source(view, alias), on=on.copy(), join_type="left").where(
            exp.Is(this=column(FILE_COLUMN, alias), expression=exp.Null()))
        found_rows = without_views(collect(qctx.plan_tree(unmatched, params)))
        rows = source(qctx.register_private("merge_source", qctx.ctx.from_arrow(found_rows)), name)
    return _inserted(qctx, plan, key, rows, whens, inserts, params)


def _inserted(qctx: QueryContext, plan: ReadPlan, key: Key, rows: exp.Expression, whens: list[exp.When],
              inserts: list[tuple[list[str], list[exp.Expression]]], params: dict[str, Any] | None) -> pa.Table | None:
    """The rows the WHEN NOT MATCHED clauses insert for the source rows `rows` (matching nothing)."""
    values = [exp.alias_(e.copy(), f"_{k}_{i}", quoted=True)
              for k, (_, vs) in enumerate(inserts) for i, e in enumerate(vs)]
    query = exp.select(exp.alias_(_clause_number(whens), CLAUSE_COLUMN, quoted=True), *values).from_(rows)
    return _inserted_rows(qctx, plan, key, without_views(collect(qctx.plan_tree(query, params))), whens, inserts)


def _inserted_rows(qctx: QueryContext, plan: ReadPlan, key: Key, found: pa.Table, whens: list[exp.When],
                   inserts: list[tuple[list[str], list[exp.Expression]]], clause_column: str = CLAUSE_COLUMN,
                   prefix: str = "_") -> pa.Table | None:
    """The inserted rows, from `found`: per source row the NOT MATCHED clause acting on it
    (`clause_column`) and each clause's values (`{prefix}{k}_{i}`)."""
    clause = found.column(clause_column).to_numpy(zero_copy_only=False)
    parts = []
    for k, (when, (columns, _)) in enumerate(zip(whens, inserts, strict=True)):
        if not isinstance(when.args.get("then"), exp.Insert):
            continue
        mask = clause == k + 1
        if not mask.any():
            continue
        chosen = found.filter(pa.array(mask))
        data = pa.table({c: chosen.column(f"{prefix}{k}_{i}") for i, c in enumerate(columns)})  # none: DEFAULT VALUES
        data = defaults.fill(qctx, plan, data, rows=int(mask.sum()))
        parts.append(checks.conform(qctx, data, plan, key))
    return pa.concat_tables(parts) if parts else None


def _source_name(using: exp.Expression) -> exp.Identifier:
    """The name the source's columns go by: its alias, else the table's own name."""
    alias = using.args.get("alias")
    if alias is not None and alias.this is not None:
        return alias.this
    return using.this


def merge_parameter_types(tree: exp.Merge, plan: ReadPlan) -> dict[int, pa.DataType]:
    """Parse-time types of the parameters a MERGE assigns as they are (`SET v = $1`, `VALUES ($1,
    $2)`): their columns' types, as for INSERT and UPDATE."""
    by_name = {f.name: f.type for f in plan.schema}
    types: dict[int, pa.DataType] = {}

    def note(value: exp.Expression, name: str) -> None:
        if isinstance(value, exp.Parameter) and name in by_name:
            types[int(value.this.this)] = by_name[name]

    for when in tree.args["whens"].expressions:
        then = when.args.get("then")
        if isinstance(then, exp.Update):
            for item in then.expressions:
                note(item.expression, item.this.name)
        elif isinstance(then, exp.Insert) and isinstance(then.expression, exp.Tuple):
            listed = [c.name for c in then.this.expressions] if isinstance(then.this, exp.Tuple) else list(by_name)
            for value, name in zip(then.expression.expressions, listed, strict=False):
                note(value, name)
    return types
