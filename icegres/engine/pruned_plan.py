"""A single-table query over a table of many files, planned over only the files its WHERE clause
can read (prune.py decides which; this module plans the statement over that subset).

Pruning costs ~1.3 ms of parsing and re-planning per statement, so it applies only where the
table has enough files for it to pay (`lake.PRUNE_MIN_FILES`), and a statement shape found
unprunable once is not tried again.
"""

from __future__ import annotations

import itertools
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from icegres.engine import lake
from icegres.engine.planned import PlannedQuery
from icegres.pg.errors import PgError

if TYPE_CHECKING:
    from datafusion import DataFrame

    from icegres.engine.contexts import Made
    from icegres.engine.lake import Engine, SessionEnv
    from icegres.engine.mounts import ReadPlan
    from icegres.engine.plan_cache import PlanCache
    from icegres.sql.statement import Statement



@dataclass(frozen=True)
class Session:
    """What pruning needs of the session a statement runs in (QueryContext hands it down)."""

    engine: Engine
    env: SessionEnv
    cache: PlanCache
    made: Made  # the context the statement plans on


_PRUNED_CATALOG = "icegres_pruned"
_PRUNED_SCHEMA = "files"
_PRUNED_NAMES = itertools.count()


def plan_pruned(session: Session, stmt: Statement, key: tuple[str, str],
                params: dict[str, Any] | None) -> PlannedQuery | None:
    """`stmt`, which reads the table `key` alone, planned over only the files its WHERE clause can
    read; None where that does not apply or gains nothing, and the statement is planned as sent.
    The caller decides the statement may be pruned at all (autocommit, no write-buffer view, a
    UTC session: prune.py reads timestamp literals in UTC)."""
    plan = session.engine.read_plan(*key)
    if plan is None or len(plan.files) < lake.PRUNE_MIN_FILES:
        return None
    shape = (stmt.shape, tuple(session.env.search_path))
    if session.cache.unprunable.get(shape) is True:
        return None
    found = _prune_target(session, stmt, key, plan)
    if found is None:
        session.cache.unprunable.put(shape, True)
        return None
    tree, table, names, kinds = found
    from icegres.engine import prune

    where = tree.args.get("where")
    wanted = prune.constraints(where, names, kinds, params)
    if wanted is None:
        return None  # a parameter without a value (Describe): plan as sent
    files = prune.matching_files(plan, wanted)
    if len(files) == len(plan.files):
        return None
    view = session.engine.subset_view(key, files)
    if view is None:
        return None
    df = _plan_over(session, tree, table, view[1], shape, params)
    if df is None:
        return None
    # What the statement reads is the subset: an aggregate over a few files of a big table is
    # bounded by their rows (`QueryContext._pulls_long`).
    counts = [getattr(plan.data_files.get(f.path), "record_count", None) for f in files]
    rows = sum(counts) if all(isinstance(n, int) for n in counts) else None  # type: ignore[arg-type]
    return PlannedQuery(df, (None, None), None, rows)


def _prune_target(session: Session, stmt: Statement, key: tuple[str, str], plan: ReadPlan) -> Any:
    """(rewritten tree, its FROM table, the names it goes by, prunable columns) when `stmt` is a
    SELECT from `key` alone whose WHERE could narrow the files; else None."""
    from sqlglot import exp

    from icegres.engine import prune, rewrite

    try:
        tree = stmt.tree
    except PgError:
        return None
    if not isinstance(tree, exp.Select) or tree.args.get("joins") or tree.args.get("with"):
        return None
    source = tree.args.get("from") or tree.args.get("from_")
    table = None if source is None else source.this
    if not isinstance(table, exp.Table) or table.args.get("catalog") or not table.name:
        return None
    # Everything below changes the tree: this statement's own copy of it from here on.
    tree = rewrite.qualify_tables(stmt.tree_copy(), session.env.search_path, session.engine.has_table)
    source = tree.args.get("from") or tree.args.get("from_")
    table = source.this
    if (table.db, table.name) != key:
        return None
    given = table.args.get("alias")
    names = {prune.folded(given.this if given is not None else table.this)}
    kinds = prune.column_kinds(plan)
    if not prune.prunable_shape(tree.args.get("where"), names, kinds):
        return None
    if rewrite.needs_rewrite(stmt.sql):
        tree = rewrite.rewrite(tree, session.env)  # the rewrite copies; the FROM table is new
        source = tree.args.get("from") or tree.args.get("from_")
        table = source.this
    return tree, table, names, kinds


def _plan_over(session: Session, tree: Any, table: Any, view: Any, shape: Any,
               params: dict[str, Any] | None) -> DataFrame | None:
    """Plan `tree` with `table` read from `view`, a DataFrame registered for this planning only.
    `tree` is this statement's own (parsed for it by `_prune_target`): it is changed in place."""
    from sqlglot import exp

    from icegres.engine.rewrite import to_sql

    made = session.made
    schema = _pruned_schema(made)
    name = f"t{next(_PRUNED_NAMES)}"
    # The table goes by the same name as before (its alias, else its own name), spelled as it
    # was, so every column reference still resolves.
    given = table.args.get("alias")
    alias = (given.this if given is not None else table.this).copy()
    source = tree.args.get("from") or tree.args.get("from_")
    source.set("this", exp.Table(this=exp.to_identifier(name), db=exp.to_identifier(_PRUNED_SCHEMA),
                                 catalog=exp.to_identifier(_PRUNED_CATALOG),
                                 alias=exp.TableAlias(this=alias)))
    schema.register_table(name, view.into_view())
    try:
        # The plan holds the table provider by reference: it outlives the name.
        return made.ctx.sql(to_sql(tree), param_values=params)
    except Exception:  # noqa: BLE001 - the statement as sent gives the error, if any
        session.cache.unprunable.put(shape, True)
        return None
    finally:
        schema.deregister_table(name)


def _pruned_schema(made: Made) -> Any:
    if made.pruned_schema is not None:
        return made.pruned_schema
    from datafusion.catalog import Catalog, Schema

    catalog = Catalog.memory_catalog()
    schema = Schema.memory_schema()
    catalog.register_schema(_PRUNED_SCHEMA, schema)
    made.ctx.register_catalog_provider(_PRUNED_CATALOG, catalog)
    made.pruned_schema = schema
    return schema
