"""Running one session's statements: refresh, plan (as sent, through the rewrite path, pruned to
the files a WHERE clause can read, or reused), and start.

`QueryContext` is one session's view of the engine. What it plans on is `contexts.py`'s; what it
remembers between statements is `plan_cache.py`'s; a transaction's pinned snapshots and the write
buffer's rows are `views.py`'s; planning over a subset of files is `pruned_plan.py`'s. A plan
travels as a `PlannedQuery`, which carries what must outlive planning (the claim on the scan
directories the plan may read) beside the DataFrame.

All methods here block; the protocol layers call them from worker threads.
"""

from __future__ import annotations

import functools
import re
from collections.abc import Callable, Iterator
from contextlib import contextmanager, suppress
from dataclasses import replace
from typing import TYPE_CHECKING, Any

import pyarrow as pa

from icegres.engine import (
    activity,
    authz,
    big_values,
    column_refs,
    rewrite,
    row_security,
    time_travel,
    view_defs,
    views,
)
from icegres.engine import errors as engine_errors
from icegres.engine.column_names import PLAIN_NAME, postgres_names, select_list_names
from icegres.engine.contexts import Made, SessionContexts
from icegres.engine.insert_shape import InsertShapes
from icegres.engine.lake import SYSTEM_SCHEMAS, Engine, SessionEnv
from icegres.engine.pg_relations import CATALOG_RELATION_NAMES
from icegres.engine.plan_cache import PlanCache
from icegres.engine.planned import HeldStream, PlannedQuery
from icegres.engine.session_zone import is_utc
from icegres.engine.txn import TxnState
from icegres.pg.errors import FEATURE_NOT_SUPPORTED, PgError
from icegres.sql import text_scan
from icegres.sql.parse import DIALECT
from icegres.sql.pieces import big_bytes
from icegres.sql.statement import EXPLAIN_PREFIX, Statement, query, tree_table_refs

if TYPE_CHECKING:
    from datafusion import DataFrame, SessionContext
    from sqlglot import exp


def open_session(engine: Engine, env: SessionEnv) -> QueryContext:
    from icegres.engine import pg_catalog
    from icegres.engine.sequences import SessionSequences

    env.relation_oid = pg_catalog.relation_oid
    env.sequences = SessionSequences(engine, env)
    qctx = QueryContext(engine, env)
    # The SQL functions (has_table_privilege, pg_has_role, information_schema's filters) answer
    # from what the session's statement is checked against: inside a block, with its own changes.
    env.authorization = None if engine.authorization is None else _InEffect(qctx)
    return qctx


class _InEffect:
    """`env.authorization`: the session's authorization in effect now (QueryContext.authorization:
    the shared one, or an open block's view of it), whichever transaction the session is in."""

    def __init__(self, qctx: QueryContext) -> None:
        self._qctx = qctx

    def __getattr__(self, name: str) -> Any:
        return getattr(self._qctx.authorization, name)


class QueryContext:
    """One session's view of the engine: its contexts, what it remembers, its transaction."""

    def __init__(self, engine: Engine, env: SessionEnv) -> None:
        self.engine = engine
        self.env = env
        self.contexts = SessionContexts(engine, env)
        self.cache = PlanCache()
        # The open transaction (or the one-statement transaction of an autocommit write): while
        # set, statements read its pinned snapshots and staged writes through a private context.
        self.txn: TxnState | None = None
        # One statement's context over the write buffer's rows (see `buffered_reads`).
        self._overlay: Made | None = None
        # Recipes of the parameterised INSERTs the write buffer may take on the event loop.
        self.insert_shapes = InsertShapes()

    @property
    def made(self) -> Made:
        """The context statements plan on now, and what it was made with."""
        return self.contexts.current(self.txn, self._overlay)

    @property
    def ctx(self) -> SessionContext:
        return self.made.ctx

    @property
    def authorization(self) -> Any:
        """What this session's statements are checked against: the shared roles and privileges,
        with an open block's own changes over them (authz.in_effect); None without roles."""
        return authz.in_effect(self.engine.authorization, self.txn)

    @property
    def zone(self) -> str:
        """The session's TimeZone as DataFusion spells it (`+00:00` for UTC)."""
        return self.contexts.zone

    @property
    def overlaid(self) -> bool:
        """A statement plans over the write buffer's rows (a view of its own)."""
        return self._overlay is not None

    def zoned(self, df: DataFrame) -> DataFrame:
        """A table's DataFrame as this session sees it (timestamptz in its TimeZone)."""
        return self.contexts.zoned(df)

    def refresh(self) -> None:
        self.engine.refresh()

    def register_private(self, name: str, df: DataFrame) -> exp.Table:
        """Register a relation only this session's statements see (DML work tables); the table
        a query names it by."""
        return self.contexts.register_private(self.made, name, df)

    def register_on(self, made: Made, name: str, df: DataFrame) -> None:
        """`register_private` on a given context (time-travel relations, time_travel.attach)."""
        self.contexts.register_private(made, name, df)

    # --- planning ------------------------------------------------------------------------------

    def plan(self, stmt: Statement, params: dict[str, Any] | None = None) -> PlannedQuery:
        """Plan one query statement (DataFusion dialect permitting, else through the rewriter)."""
        hold = self.engine.scan_sets.hold()
        refs = self.table_refs(stmt)
        self._pin_listed(lambda: refs)
        made = self.made
        time_travel.attach(self, made, stmt.sql)
        try:
            planned = self._plan(stmt, params, made, refs)
        except PgError as err:
            # A table left unmounted (damage, another engine's delete files) says why, not
            # "does not exist", whatever DataFusion's message named.
            refused = next((r for r in map(self.engine.refusal, refs or ()) if r is not None), None) \
                if err.sqlstate == "42P01" else None
            if refused is not None:
                raise refused from None
            raise
        planned.hold = (hold, made.keep)
        planned.reads = refs
        self._check_files(refs)
        return planned

    def _pin_listed(self, refs_of: Callable[[], set[tuple[str, str]] | None]) -> None:
        """In a block that pinned the listing: pin the tables about to be planned that it has
        not mounted yet, at their listed snapshots (lazy mounting; a write path that pinned
        "everything" with `pin_for(None)` plans SQL naming them afterwards)."""
        txn = self.txn
        if txn is not None and txn.listed:
            views.pin_listed(self.engine, txn, refs_of())

    def _check_files(self, refs: set[tuple[str, str]] | None) -> None:
        """58P01 where a data file of a table the statement reads is gone (file_presence.py).
        A statement over the catalog relations (refs None) reads no data file."""
        if not refs:
            return
        pins = self.txn.pins if self.txn is not None else None
        plans = [(key, plan) for key in refs
                 if (plan := pins.get(key) if pins is not None and key in pins else self.engine.read_plan(*key))
                 is not None]
        self.engine.check_files(plans)

    def _plan(self, stmt: Statement, params: dict[str, Any] | None, made: Made,
              refs: set[tuple[str, str]] | None) -> PlannedQuery:
        pruned = None if big_values.has_big(params) else self._plan_pruned(stmt, params, made, refs)
        if pruned is not None:
            return pruned
        # The same statement over the same snapshots plans to the same logical plan: reuse it
        # (DataFusion optimises a plan afresh at every execution, so now() and the session's
        # functions are still evaluated per statement). Parsing and planning a group-by or a join
        # is ~0.5 ms of the 1-2 ms a repeated dashboard query spends outside execution.
        reuse = self._repeat_key(stmt, refs, params)
        ctx = made.ctx
        hit = None if reuse is None else self.cache.planned.get(reuse)
        if hit is not None and hit[0] is made and hit[1] == made.generation:
            self.cache.planned.touch(reuse)
            # A new DataFrame each time: `plan` hangs this statement's scan-set hold on it.
            df = ctx.create_dataframe_from_logical_plan(hit[2])
        else:
            df = self._plan_text(stmt, params, ctx)
            if reuse is not None:
                self.cache.planned.put(reuse, (made, made.generation, df.logical_plan()))
        return PlannedQuery(df, (None, None), reuse)

    def _plan_pruned(self, stmt: Statement, params: dict[str, Any] | None, made: Made,
                     refs: set[tuple[str, str]] | None) -> PlannedQuery | None:
        """A single-table query over a table of many files, planned over only the files its WHERE
        clause can read (pruned_plan.py); None where that does not apply or gains nothing."""
        if self.txn is not None or self.overlaid or not self.engine.prunable or not is_utc(self.zone):
            # Transactions and the write buffer read views of their own; prune.py reads
            # timestamp literals in UTC (the scan's statistics still prune the others).
            return None
        if not refs or len(refs) != 1:
            return None
        from icegres.engine import pruned_plan

        session = pruned_plan.Session(self.engine, self.env, self.cache, made)
        return pruned_plan.plan_pruned(session, stmt, next(iter(refs)), params)

    def _plan_text(self, stmt: Statement, params: dict[str, Any] | None, ctx: SessionContext) -> DataFrame:
        sql = stmt.sql
        key = (sql, tuple(self.env.search_path))
        route = self.cache.routes.get(key)
        if route is not None:
            self.cache.routes.touch(key)
            if text_scan.search(_READS_CATALOG, sql):
                self._catalog_read(sql, ctx)
            try:
                return _sql(ctx, route, params)
            except Exception as exc:
                raise engine_errors.from_datafusion(exc, sql, verbatim=route == sql) from None
        df, route = self._as_sent_or_rewritten(sql, lambda: stmt.tree, params, ctx)
        self.cache.routes.put(key, route)
        return df

    def plan_tree(self, tree: exp.Expression, params: dict[str, Any] | None = None) -> PlannedQuery:
        """Plan a query the engine built itself (a DML statement's reads of the table it writes,
        probes of types) from its tree: as DataFusion reads it written out, or through the
        rewrite steps where it needs them."""
        hold = self.engine.scan_sets.hold()
        refs = tree_table_refs(tree, self.env.search_path)
        self._pin_listed(lambda: refs)
        made = self.made
        # Its literals as its place in the statement means them (an INSERT's source, an UPDATE's
        # value: exact numerics), before anything copies it away from that place.
        baked = rewrite.typed_literals(big_values.joined(tree, params))
        sql = rewrite.to_sql(baked)
        time_travel.attach(self, made, sql)
        df, _ = self._as_sent_or_rewritten(sql, lambda: baked, params, made.ctx)
        self._check_files(refs)
        return PlannedQuery(big_values.plain_columns(df) if big_values.has_big(params) else df, (hold, made.keep))

    def _catalog_read(self, sql: str, ctx: SessionContext) -> None:
        """Before planning a statement that reads pg_catalog or information_schema: the session's
        own catalog, and pg_stat_activity as of now if it names it."""
        self.contexts.complete_catalog(self.made)
        if activity.mentions_activity(sql):
            activity.refresh(ctx, self.env)

    def _as_sent_or_rewritten(self, sql: str, tree: Callable[[], exp.Expression], params: dict[str, Any] | None,
                              ctx: SessionContext) -> tuple[DataFrame, str]:
        """`sql` planned as sent where DataFusion takes it, else its tree through the rewrite
        path; the DataFrame and the text that planned."""
        if text_scan.search(_READS_CATALOG, sql):
            self._catalog_read(sql, ctx)
        first_error: BaseException | None = None
        # With temporary tables, unqualified names must find pg_temp first: only the rewrite's
        # qualification does that (DataFusion as sent looks in one default schema).
        if not rewrite.needs_rewrite(sql) and not self.env.temp:
            try:
                return _sql(ctx, sql, params), sql
            except Exception as exc:
                first_error = exc
        try:
            rewritten = rewrite.for_datafusion(tree(), self.env, self.has_table)
        except PgError as refused:
            # What the rewrite refuses outright (a cross-database name, a construct it cannot
            # spell) says more than DataFusion's failure to find or plan it.
            if first_error is not None and refused.sqlstate != FEATURE_NOT_SUPPORTED:
                raise engine_errors.from_datafusion(first_error, sql) from None
            raise
        try:
            return _sql(ctx, rewritten, params), rewritten
        except Exception as exc:
            failed = first_error or exc
            err = engine_errors.from_datafusion(failed, sql, verbatim=first_error is not None)
            if first_error is not None and err.sqlstate == "42P01":
                # A relation DataFusion could not find as sent may be one the rewrite resolves
                # (`"icegres"."analytics"."orders"`: DataFusion knows no catalog of that name),
                # and then the rewritten statement's failure names what is really wrong.
                failed = exc
                err = engine_errors.from_datafusion(exc, sql, verbatim=False)
            if err.sqlstate == "42P01":
                err = self.engine.unreadable_error(str(failed)) or err
            raise err from None

    def forget_routes(self) -> None:
        self.cache.routes.clear()

    # --- transactions and the write buffer ---------------------------------------------------

    def pin_for(self, stmt: Statement | None, *, fresh: bool = True) -> None:
        """Inside a transaction: pin the snapshot of every table the statement may read
        (`views.pin_snapshots`), and the session's temporary tables."""
        txn = self.txn
        assert txn is not None
        views.pin_snapshots(self.engine, txn, self._refs_of(stmt), fresh=fresh)
        self._pin_temp(txn)

    def _pin_temp(self, txn: Any) -> None:
        temp = self.env.temp
        if temp:
            for key, plan in temp.plans().items():
                txn.pin(key, plan)

    def has_table(self, schema: str, name: str) -> bool:
        """A table of that name as this session's statement sees it: its temporary tables, the
        open block's own DDL, the mounted lake."""
        if schema == "pg_temp":
            return bool(self.env.temp) and self.env.temp.has(name)
        txn = self.txn
        if txn is not None and (not txn.autocommit or txn.writes_refs):
            if (schema, name) in txn.pins:
                return True
            if (schema, name) in txn.hidden:
                return False
        return self.engine.has_table(schema, name)

    def _refs_of(self, stmt: Statement | None) -> Callable[[], set[tuple[str, str]] | None]:
        """`table_refs(stmt)` for a lower module to ask for when it needs them (no statement:
        none), without calling back into this one: the cache and the statement answer."""
        if stmt is None:
            return frozenset
        path = self.env.search_path
        return functools.partial(self.cache.refs.computed, (stmt.shape, tuple(path)),
                                 functools.partial(stmt.table_refs, path))

    def pin_tree(self, tree: exp.Expression) -> None:
        """`pin_for` the tables a tree the engine built reads (COPY FROM's target)."""
        txn = self.txn
        assert txn is not None
        views.pin_snapshots(self.engine, txn, functools.partial(tree_table_refs, tree, self.env.search_path))
        self._pin_temp(txn)

    def resolve_table(self, schema: str | None, name: str) -> tuple[str, str] | None:
        """The (namespace, table) an optionally qualified name means under search_path."""
        txn = self.txn
        if txn is None:
            return self.resolve_mounted(schema, name)
        # A block knows its pinned tables, and those of its listing not named yet (lazy
        # mounting: they are pinned at their listed snapshot when a statement plans them).
        known = txn.pins.keys() | {key for key in txn.listed if key not in txn.hidden}
        return views.resolve(self.env.search_path, schema, name, known.__contains__)

    def resolve_mounted(self, schema: str | None, name: str) -> tuple[str, str] | None:
        """`resolve_table` against the mounted tables, whatever transaction is bound: safe to
        call on the event loop while a worker thread runs this session's statement."""
        temp = self.env.temp
        return views.resolve(self.env.search_path, schema, name,
                             lambda key: (temp.has(key[1]) if temp and key[0] == "pg_temp"
                                          else self.engine.has_table(*key)))

    def buffered_entries(self, stmt: Statement) -> dict[tuple[str, str], Any] | None:
        """The write buffer's acked entries of the tables `stmt` reads, or None (nothing buffered,
        or inside a transaction block, which reads lake snapshots only). Call it BEFORE the
        statement's plans are read: entries first, then the plan, is what makes the union exact."""
        return self._buffered(lambda: self.table_refs(stmt))

    def buffered_entries_of(self, tree: exp.Expression) -> dict[tuple[str, str], Any] | None:
        """`buffered_entries` of a query the engine built (an INSERT's source)."""
        return self._buffered(lambda: tree_table_refs(tree, self.env.search_path))

    def _buffered(self, refs: Callable[[], set[tuple[str, str]] | None]) -> dict[tuple[str, str], Any] | None:
        ladder = self.engine.ladder
        if ladder is None or (self.txn is not None and not self.txn.autocommit) or not ladder.has_entries():
            return None
        return ladder.visible(refs()) or None

    @contextmanager
    def buffered_reads(self, taken: dict[tuple[str, str], Any] | None) -> Iterator[None]:
        """For the block, plan on a context where each table of `taken` is its mounted plan
        (read now) plus the entries above that plan's lake watermark."""
        if not taken:
            yield
            return
        self._overlay = self.contexts.with_views(views.buffered_views(self.engine, taken))
        try:
            yield
        finally:
            self._overlay = None

    def end_transaction(self) -> None:
        self.txn = None
        self.contexts.end_transaction()

    def refresh_for(self, stmt: Statement) -> None:
        """Freshness for one statement: every table it may read is at the catalog's head (and
        mounted: tables are mounted when a statement first names them)."""
        if self.txn is not None:
            if text_scan.search(_READS_CATALOG, stmt.sql):
                self.engine.refresh(set(), catalog=True)  # shapes only: the pins stay as they are
            self.pin_for(stmt)
            return
        refs = self.table_refs(stmt)
        if refs is None:
            # The catalog relations: every table's shape, and the lake tables it also names
            # (all of them when the statement cannot be parsed).
            lake = stmt.lake_refs(self.env.search_path)
            self.engine.refresh(lake, catalog=True)
        elif text_scan.search(_READS_CATALOG, stmt.sql):
            self.engine.refresh(refs, catalog=True)  # regclass and the catalog functions
        else:
            self.engine.refresh(refs)

    def table_refs(self, stmt: Statement) -> set[tuple[str, str]] | None:
        """The tables a statement may read (None: all), found once per literal shape."""
        return self._refs_of(stmt)()

    # --- running -------------------------------------------------------------------------------

    def start(self, stmt: Statement, params: dict[str, Any] | None = None) -> tuple[pa.Schema, Any]:
        """Refresh, plan and start executing a query: (result schema, batch stream).

        The schema carries the column names PostgreSQL would give the result.
        """
        self.authorize(stmt)
        stmt = row_security.applied(self, stmt)
        original, generation = stmt, self.engine.views_generation
        stmt = self.with_views(stmt)
        with _positions_of(original, stmt):
            taken = self.buffered_entries(stmt)
            if taken:
                self.refresh_for(stmt)
                stmt = self._views_moved(original, stmt, generation)
                with self.buffered_reads(taken):
                    return self._execute(stmt, params)
            speculated = self._start_speculating(stmt, params)
            if speculated is not None:
                return speculated
            self.refresh_for(stmt)
            stmt = self._views_moved(original, stmt, generation)
            return self._execute(stmt, params)

    # --- views -------------------------------------------------------------------------------

    def with_views(self, stmt: Statement) -> Statement:
        """`stmt` with the catalog views it names replaced by their queries (view_defs.py), or
        `stmt` itself when it names none. When it names a view, or a name this server does not
        know (a view made elsewhere since the last listing), the view registry is read fresh
        first. An INSERT, UPDATE or DELETE into a view is 0A000, TRUNCATE of one 42809.
        References that read another point than a table's head (`AS OF`, `t@ref`, `t$snapshots`)
        are read through relations of their own first (time_travel.py)."""
        stmt = time_travel.expand(self, stmt)
        explained = EXPLAIN_PREFIX.match(stmt.sql)
        if explained is not None:
            # sqlglot keeps EXPLAIN as an opaque command: expand the query it explains.
            inner = self.with_views(query(stmt.sql[explained.end():]))
            if inner.sql == stmt.sql[explained.end():]:
                return stmt
            # Text only: the tree of an EXPLAIN is sqlglot's opaque Command holding that text.
            return replace(stmt, sql=explained.group(0) + inner.sql)
        names_of = self.cache.names
        shape = names_of.get(stmt.shape)
        if shape is None:
            shape = names_of.put(stmt.shape, _named(stmt))
        names, targets = shape
        if not names and not targets:
            return stmt
        resolver = self.resolver()
        resolved = tuple(resolver.resolve(*n) for n in (*names, *targets))
        if all(r is not None and r[0] != "view" for r in resolved):
            return stmt  # every name is a table (or a catalog relation) this server knows
        self.engine.refresh_views(self._view_candidates(resolved, (*names, *targets)))
        resolved = tuple(resolver.resolve(*n) for n in (*names, *targets))
        if any(r is not None and r[0] == "view" for r in resolved[len(names):]):
            self._refuse_written_views(stmt.tree, targets, resolved[len(names):])
        if not any(r is not None and r[0] == "view" for r in resolved[:len(names)]):
            return stmt
        if self.engine.lakehouse.kind == "rest":
            self._check_view_reads({r[1] for r in resolved[:len(names)] if r is not None and r[0] == "view"})
        txn = self.txn
        block_views = (txn.ident, txn.version) if txn is not None and txn.view_overlay else None
        # The roles' state too: a view's query is checked and secured as its owner (its policies
        # and masks, row_security.view_body_hook), which a GRANT or a policy may change.
        authorization = self.authorization
        roles = None
        if authorization is not None:
            with suppress(PgError):  # (read fresh if stale: the generation then says so)
                authorization.current()
            roles = (authorization.generation, self.env.current_user)
        key = (stmt.sql, resolved, tuple(self.env.search_path), self.engine.views_generation,
               self.engine.catalog_generation, block_views, roles)
        done = self.cache.expanded.get(key)
        if done is None:
            tree = stmt.tree
            expanded = view_defs.expand(tree, resolver, view_defs.dml_target(tree))
            assert expanded is not None
            done = self.cache.expanded.put(key, (expanded[0].sql(dialect=DIALECT), expanded[0]))
        # The expanded tree goes on with its text (not parsed again). A view's query may read
        # snapshots or metadata tables itself.
        return time_travel.expand(self, stmt.rewritten(*done))

    def authorize_key(self, key: tuple[str, str], letter: str) -> None:
        """42501 unless this session's role has `letter` on table `key` (and USAGE on its schema)."""
        authorization = self.authorization
        if authorization is not None:
            who = authorization.principal(self.env.user, self.env.settings.get("role"))
            authorization.check_relations(who, [("table", key)], letter)

    def authorized(self, stmt: Statement) -> Statement:
        """`stmt`, once `authorize` let it through (a CREATE TABLE AS's query)."""
        self.authorize(stmt)
        return stmt

    def authorize(self, stmt: Statement) -> None:
        """42501 unless this session's role may do what `stmt` asks of every relation it names:
        SELECT on what it reads, the write's privilege on its target (engine/authz.py). Before
        any view is expanded or anything planned: a view is checked as the relation named."""
        authorization = self.authorization
        if authorization is None:
            return
        who = authorization.principal(self.env.user, self.env.settings.get("role"))
        if authorization.is_superuser(who):
            return
        explained = EXPLAIN_PREFIX.match(stmt.sql)
        if explained is not None:  # (sqlglot keeps EXPLAIN as an opaque command: check its query)
            self.authorize(query(stmt.sql[explained.end():]))
            return
        names_of = self.cache.names
        shape = names_of.get(stmt.shape)
        if shape is None:
            shape = names_of.put(stmt.shape, _named(stmt))
        names, targets = shape
        resolver = self.resolver()

        def found(schema: str | None, name: str) -> tuple[str, tuple[str, str]] | None:
            return resolver.resolve(schema, name) or resolver.resolve(schema, _head_name(name))

        if any(found(*pair) is None for pair in (*names, *targets)):
            # A name this server does not list yet (made by another server since): list again,
            # so that it is checked here rather than found unchecked by the planner.
            self.refresh_for(stmt)
            unknown = [pair for pair in (*names, *targets) if found(*pair) is None]
            if unknown:  # views are listed apart from tables
                self.engine.refresh_views({(schema, _head_name(name)) if schema else (s, _head_name(name))
                                           for schema, name in unknown for s in ([schema] if schema else self.env.search_path)})
            resolver = self.resolver()

        def resolved(pairs: tuple[Any, ...]) -> list[tuple[str, tuple[str, str]]]:
            return [f for f in (found(*pair) for pair in pairs) if f is not None]

        def table_of(schema: str | None, name: str) -> tuple[str, str] | None:
            hit = found(schema, name)
            return hit[1] if hit is not None and hit[0] == "table" else None

        def names_of(key: tuple[str, str]) -> list[str]:
            return list(self.engine.table_schema(key).names)

        read: list[dict[tuple[str, str], set[str]] | None] = []

        def reads_of(key: tuple[str, str]) -> set[str] | None:
            # (only asked where a table privilege is missing and column grants exist)
            if not read:
                reads = column_refs.reading_query(stmt.tree) if targets else stmt.tree
                read.append(None if reads is None else column_refs.read_columns(reads, table_of, names_of))
            return None if read[0] is None else read[0].get(key)

        authorization.check_relations(who, resolved(names), "r", reads_of)
        if targets:
            for letter in authz.write_letters(stmt):
                authorization.check_relations(who, resolved(targets), letter, lambda key, letter=letter:
                                              column_refs.target_columns(stmt.tree, letter, names_of(key)))

    def expanded_refs(self, stmt: Statement) -> set[tuple[str, str]] | None:
        """`table_refs` of `stmt` with its views expanded: the tables it reads through them."""
        return self.table_refs(self.with_views(stmt))

    def _check_view_reads(self, views: set[tuple[str, str]]) -> None:
        """REST catalogs check only the names a statement gives: the relations its views read,
        views inside views among them, are checked here, level by level."""
        engine = self.engine
        seen: set[tuple[str, str]] = set(views)
        frontier = set(views)
        for _ in range(view_defs.DEPTH_MAX):
            reads = {r for k in frontier if (v := engine.view(k)) is not None for r in v.reads} - seen
            if not reads:
                return
            seen |= reads
            engine.refresh_views(reads)  # on REST: each one's loadTable and loadView
            frontier = {k for k in reads if engine.view(k) is not None}

    def resolver(self) -> view_defs.Resolver:
        """Relation names as this session resolves them now: its search_path over the tables
        and views this server knows."""
        engine = self.engine
        txn = self.txn
        if txn is not None and not txn.autocommit and (txn.view_overlay or txn.hidden or txn.catalog is not None):
            # The block's own DDL: its views and tables, and the names it dropped or renamed away.
            resolver = view_defs.Resolver(self.env.search_path, self.has_table,
                                          lambda key: txn.view(key, engine.view(key)),
                                          CATALOG_RELATION_NAMES, self.env.database)
        else:
            # A branch a statement writes is a table of its transaction's (branch_writes.py).
            has_table = self.has_table if txn is not None and txn.writes_refs else engine.has_table
            resolver = view_defs.Resolver(self.env.search_path, has_table, engine.view,
                                          CATALOG_RELATION_NAMES, self.env.database)
        resolver.body_hook = row_security.view_body_hook(self)
        return resolver

    def _view_candidates(self, resolved: tuple[Any, ...], names: tuple[Any, ...]) -> set[tuple[str, str]]:
        """The catalog keys a name that is a view, or not known, may mean."""
        path = [s for s in self.env.search_path if s not in ("pg_catalog", "information_schema")]
        keys: set[tuple[str, str]] = set()
        for found, (schema, name) in zip(resolved, names, strict=True):
            if found is not None and found[0] != "view":
                continue
            keys.update([(schema, name)] if schema else [(s, name) for s in path])
        return keys

    @staticmethod
    def _refuse_written_views(tree: exp.Expression, targets: tuple[Any, ...], resolved: tuple[Any, ...]) -> None:
        from sqlglot import exp

        for (_, name), found in zip(targets, resolved, strict=True):
            if found is None or found[0] != "view":
                continue
            if isinstance(tree, exp.TruncateTable):
                raise PgError("42809", f'"{name}" is not a table')
            verb = {exp.Insert: "insert into", exp.Update: "update", exp.Delete: "delete from"}[type(tree)]
            raise PgError(FEATURE_NOT_SUPPORTED, f'cannot {verb} view "{name}"',
                          detail="icegres views are read-only.",
                          hint="Write to the tables the view reads.")

    def _views_moved(self, original: Statement, stmt: Statement, generation: int) -> Statement:
        """After a refresh: `original` with its views expanded again if the view registry changed
        since `stmt` was made from it (another server created, replaced or dropped a view)."""
        if self.engine.views_generation == generation:
            return stmt
        again = self.with_views(original)
        if again.sql != stmt.sql:
            self.refresh_for(again)
        return again

    def _execute(self, stmt: Statement, params: dict[str, Any] | None) -> tuple[pa.Schema, Any]:
        from icegres.engine.batches import CancellableBatches
        from icegres.engine.executor import RemoteBatches

        planned = self.plan(stmt, params)
        kinds = self._plan_kinds(stmt, planned.df)
        wide = self._wide_batch_rows(stmt, planned, kinds)
        if wide is not None:
            planned = planned.with_df(self.engine.rebatched(planned.df, wide))
        try:
            schema, stream = self.pg_schema(stmt, planned.df.schema()), self._stream(stmt, planned, kinds, params)
        except Exception as exc:
            retry = self._rewritten_after_failure(stmt, params, planned)
            if retry is None:
                raise engine_errors.from_datafusion(exc, stmt.sql, verbatim=False) from None
            try:
                planned = retry
                kinds = self._plan_kinds(stmt, planned.df)
                schema, stream = self.pg_schema(stmt, planned.df.schema()), self._stream(stmt, planned, kinds, params)
            except Exception:
                raise engine_errors.from_datafusion(exc, stmt.sql, verbatim=False) from None
        if not isinstance(stream, RemoteBatches) and self._pulls_long(stmt, planned, kinds):
            # A plan that may compute for long before its first batch, run here: pulled so that
            # a cancel ends the wait at least (engine/batches.py).
            # A pruned plan is the only kind without the key: its literals make it rarely repeat.
            if planned.repeat is None:
                stream = CancellableBatches(stream)
            elif planned.repeat not in self.engine.quick_first_pulls:
                stream = CancellableBatches(stream, functools.partial(self.engine.note_first_pull, planned.repeat))
        return schema, HeldStream(stream, planned.hold)

    def _stream(self, stmt: Statement, planned: PlannedQuery, kinds: frozenset[str],
                params: dict[str, Any] | None) -> Any:
        """The plan started: in an execution process that a cancel kills if it may compute for
        long (engine/executor.py; may raise Queued), else here."""
        executors = self.engine.executors
        if (executors is not None and self._pulls_long(stmt, planned, kinds)
                and (planned.repeat is None or planned.repeat not in self.engine.quick_first_pulls)
                and ("TableFunction" in kinds or not _reads_catalog(planned.reads))):
            # A catalog query stays here (small in-memory tables, and clients send many) unless a
            # table function can make it as big as any: then a cancel must be able to kill it.
            noted = None if planned.repeat is None else functools.partial(self.engine.note_first_pull, planned.repeat)
            remote = executors.start(planned.df, noted, big_bytes(params))
            if remote is not None:
                return remote
        return planned.df.execute_stream()

    def _rewritten_after_failure(self, stmt: Statement, params: dict[str, Any] | None,
                                 failed: PlannedQuery) -> PlannedQuery | None:
        """`stmt` planned through the rewrite path after its plan as sent failed to start; None
        when it was rewritten already, or the rewrite changes nothing or does not plan either.

        DataFusion finds some faults only when it optimises and plans the physical plan, after
        `_plan_text` took its plan as sent: EXISTS in a select list ("Physical plan does not
        support logical expression Exists"), a typed literal its optimiser cannot parse. The
        rewrite path spells those as DataFusion can run them; from then on the statement takes it.
        """
        if rewrite.needs_rewrite(stmt.sql):
            return None
        try:
            rewritten = rewrite.for_datafusion(stmt.tree, self.env, self.has_table)
        except Exception:
            return None
        if rewritten == stmt.sql:
            return None
        hold = self.engine.scan_sets.hold()
        made = self.made
        try:
            df = _sql(made.ctx, rewritten, params)
        except Exception:
            return None
        search_path = tuple(self.env.search_path)
        self.cache.routes.put((stmt.sql, search_path), rewritten)
        # What was kept of the failed plan: its logical plan, and its node kinds by shape.
        if failed.repeat is not None:
            self.cache.planned.pop(failed.repeat)
            self.cache.described.pop(failed.repeat)
        self.cache.kinds.pop((stmt.shape, search_path))
        return PlannedQuery(df, (hold, made.keep), reads=failed.reads)

    def _repeat_key(self, stmt: Statement, refs: set[tuple[str, str]] | None,
                    params: dict[str, Any] | None = None) -> tuple[Any, ...] | None:
        """What makes two runs of a statement the same work: its text, parameter values and
        search_path, and the mounted snapshots of the tables it reads, `refs` (None: not
        knowable — a transaction's or the write buffer's view, tables the statement text does
        not name, or a parameter value that cannot be compared)."""
        if self.txn is not None or self.overlaid or big_values.has_big(params):
            return None  # (a big value's plan reads a table made for this statement only)
        bound = tuple(sorted((params or {}).items()))
        try:
            hash(bound)
        except TypeError:
            return None  # an array parameter (a list)
        locations = self._mounted(refs)
        if locations is None:
            return None
        return (stmt.sql, bound, tuple(self.env.search_path), tuple(sorted(locations.items())))

    def mounted_snapshots(self, stmt: Statement) -> dict[tuple[str, str], tuple[str, int]] | None:
        """The mounted snapshot of every table `stmt` may read, as `Engine.mounted_locations`
        gives it, if each is mounted (None: it names no table, or one that is not mounted now)."""
        return self._mounted(self.table_refs(stmt))

    def _mounted(self, refs: set[tuple[str, str]] | None) -> dict[tuple[str, str], tuple[str, int]] | None:
        if not refs:
            return None
        locations = self.engine.mounted_locations(refs)
        if any(location is None for location in locations.values()):
            return None
        return locations  # type: ignore[return-value]

    def _plan_kinds(self, stmt: Statement, df: DataFrame) -> frozenset[str]:
        """The node kinds of the statement's unoptimised plan. They follow from its tokens and
        what its names resolve to (tables are always scans), so they are kept per literal shape:
        walking the plan from Python costs ~0.1 ms a statement."""
        from icegres.engine.batches import plan_nodes

        key = (stmt.shape, tuple(self.env.search_path))
        return self.cache.kinds.computed(key, lambda: frozenset(plan_nodes(df.logical_plan())))

    def _pulls_long(self, stmt: Statement, planned: PlannedQuery, kinds: frozenset[str]) -> bool:
        """`may_run_long` for this statement, whose plan has these node kinds."""
        from icegres.engine.batches import STREAMING_NODES, may_run_long

        if kinds <= STREAMING_NODES:
            return False  # decided without counting the input's rows
        rows = planned.input_rows
        return may_run_long(set(kinds), self._input_rows(planned.reads) if rows is None else rows)

    def _wide_batch_rows(self, stmt: Statement, planned: PlannedQuery, kinds: frozenset[str]) -> int | None:
        """`wide_batch_rows` for this statement, whose plan has these node kinds: a plain scan
        of many rows, read in autocommit (a transaction's or the write buffer's view is planned
        in a context of its own)."""
        from icegres.engine.batches import WIDE_NODES, wide_batch_rows

        if self.txn is not None or self.overlaid:
            return None
        if not kinds <= WIDE_NODES:
            return None
        plans = [self.engine.read_plan(*key) for key in planned.reads or ()]
        if not plans or any(plan is None for plan in plans):
            return None
        rows = sum(plan.rows for plan in plans)
        stored = sum(plan.stored_bytes for plan in plans)
        return wide_batch_rows(kinds, rows if planned.input_rows is None else planned.input_rows,
                               stored / rows if rows else None)

    def _input_rows(self, refs: set[tuple[str, str]] | None) -> int | None:
        """Rows in the mounted snapshots of the tables `refs` (None: it may read any). A name
        that is no mounted table is a catalog relation (small) or an error."""
        if refs is None:
            return None
        plans = (self.engine.read_plan(*key) for key in refs)
        return sum(plan.rows for plan in plans if plan is not None)

    def _start_speculating(self, stmt: Statement, params: dict[str, Any] | None) -> tuple[pa.Schema, Any] | None:
        """On a REST catalog, run the freshness check concurrently with the query.

        The check is one loadTable per table (~5-15 ms) that would otherwise come before any work.
        The query starts on the mounted snapshots and its first batch is computed while the check
        runs; the result is kept only if the check then confirms every table it read was at the
        catalog's head — a state the catalog held after the statement began, so freshness stays
        exact. If a table moved, the work is discarded and the statement runs again on the new
        snapshot. None: not applicable (SQL catalogs, transactions, unknown or unmounted tables).
        """
        if self.txn is not None or self.engine.lakehouse.kind != "rest":
            return None
        before = self.mounted_snapshots(stmt)
        if before is None:
            return None
        refs = set(before)
        check = self.engine.check_freshness_async(refs)
        try:
            schema, stream = self._execute(stmt, params)
            first = next(iter(stream), None)
            failure: PgError | None = None
        except PgError as exc:
            failure = exc
        except Exception as exc:  # an execution error in the first batch
            failure = engine_errors.from_datafusion(exc, stmt.sql, verbatim=False)
        check.result()  # a catalog failure is this statement's error, as without speculation
        if self.engine.mounted_locations(refs) != before:
            return self._execute(stmt, params)  # a table moved: run on what the check mounted
        if failure is not None:
            raise failure
        return schema, _Prefetched(first, stream)

    def describe(self, stmt: Statement, fresh: bool = True, params: dict[str, Any] | None = None,
                 *, privileges: bool = True) -> tuple[pa.Schema, dict[int, pa.DataType]]:
        """Result schema and inferred parameter types of a statement, without running it
        (`params`: values known before any Bind, a big statement's big literals).

        `fresh=False` (a Flight prepare, which GetFlightInfo follows with a fresh start of its own)
        describes the mounted snapshots when every table the statement names is mounted, without
        a catalog round trip: on a REST catalog that is a loadTable per table (~2.4 ms on
        SeaweedFS), paid again by the start. `privileges=False`: CREATE VIEW's look at its query's
        columns, which PostgreSQL makes without checking privileges (those are the view owner's
        at each read)."""
        from icegres.engine.params import placeholder_types

        if privileges:
            self.authorize(stmt)
            stmt = row_security.applied(self, stmt)
        original, generation = stmt, self.engine.views_generation
        stmt = self.with_views(stmt)
        with _positions_of(original, stmt):
            if fresh or self.txn is not None or self.mounted_snapshots(stmt) is None:
                self.refresh_for(stmt)
                stmt = self._views_moved(original, stmt, generation)
            # An unnamed statement is parsed and described again with every execution (pgbench -M
            # extended, pgjdbc and psycopg before they prepare): the same text over the same
            # snapshots describes the same, as its plan is the same (`_plan`'s reuse, with no
            # parameter values). Views are expanded in `stmt` by now: the key covers them.
            refs = self.table_refs(stmt)
            key = self._repeat_key(stmt, refs, params)
            made = self.made
            hit = None if key is None else self.cache.described.get(key)
            if hit is not None and hit[0] is made and hit[1] == made.generation:
                self.cache.described.touch(key)
                self._check_files(refs)  # as planning it would
                return hit[2], dict(hit[3])
            planned = self.plan(stmt, params)
            schema = self.pg_schema(stmt, planned.df.schema())
            # A text without `$` has no `$n` placeholder to find.
            types = placeholder_types(planned.df) if stmt.max_param else {}
            if key is not None:
                self.cache.described.put(key, (made, made.generation, schema, dict(types)))
            return schema, types

    def pg_schema(self, stmt: Statement, schema: pa.Schema) -> pa.Schema:
        """Rename DataFusion's display names (`count(*)`) to PostgreSQL's (`count`), and say of
        each column read straight from a table which table and column it is (pg_catalog)."""
        from icegres.engine import pg_catalog

        schema = pg_catalog.sourced_schema(self.env, schema)
        if all(PLAIN_NAME.fullmatch(f.name) for f in schema):
            return schema
        key = stmt.shape
        named = (key, tuple(schema.names))
        names = self.cache.pg_names.get(named)
        if names is None:
            select_names = self.cache.select_names.computed(key, lambda: select_list_names(stmt))
            names = self.cache.pg_names.put(named, postgres_names(select_names, schema))
        return pa.schema([f.with_name(n) for f, n in zip(schema, names, strict=True)], schema.metadata)





def _head_name(name: str) -> str:
    """`t` of a time-travel or metadata name (`t@ref`, `t$files`): read with t's privileges."""
    return name.split("@", 1)[0].split("$", 1)[0]


def _named(stmt: Statement) -> tuple[tuple[Any, ...], tuple[Any, ...]]:
    """The relations a statement reads and the ones it writes, as (schema or None, name); none
    when it does not parse (its error is the planner's to give)."""
    from sqlglot import exp

    try:
        tree = stmt.tree
    except PgError:
        return (), ()
    target = view_defs.dml_target(tree)
    read = tuple((t.db or None, t.name) for t in view_defs.named_tables(tree, target))
    if isinstance(tree, exp.TruncateTable):
        return read, tuple((t.db or None, t.name) for t in tree.expressions if isinstance(t, exp.Table))
    return read, ((target.db or None, target.name),) if target is not None else ()


@contextmanager
def _positions_of(original: Statement, planned: Statement) -> Iterator[None]:
    """An error of a statement whose views were expanded points into the expanded text, not the
    one the client sent: it is reported without a position."""
    try:
        yield
    except PgError as err:
        if planned is not original and planned.sql != original.sql:
            err.position = None
        raise


class _Prefetched:
    """A batch stream whose first batch was already pulled (during a speculative start)."""

    def __init__(self, first: Any, rest: Any) -> None:
        self._first = first
        self._rest = iter(rest)

    def __iter__(self) -> _Prefetched:
        return self

    def __next__(self) -> Any:
        if self._first is not None:
            first, self._first = self._first, None
            return first
        return next(self._rest)
# A statement that may read catalog relations (a session's own catalog is registered for it).
_READS_CATALOG = re.compile(r"pg_|information_schema|regclass|regtype|regnamespace")  # lowered (text_scan)


def _reads_catalog(refs: set[tuple[str, str]] | None) -> bool:
    """Whether a statement reading `refs` may read pg_catalog or information_schema (catalog
    queries run here)."""
    return refs is None or any(schema in SYSTEM_SCHEMAS for schema, _ in refs)


def _sql(ctx: SessionContext, text: str, params: dict[str, Any] | None) -> DataFrame:
    """`ctx.sql` with the parameter values bound (a big Query's big literals read as tables)."""
    if big_values.has_big(params):
        return big_values.sql(ctx, text, params)  # type: ignore[arg-type]
    return ctx.sql(text, param_values=params)
