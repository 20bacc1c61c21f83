"""A session's DataFusion contexts: the one it plans on, in its default schema and TimeZone, and
the private ones a transaction (its pinned snapshots and staged writes) or a statement over the
write buffer's rows plans on instead.

What a context was made with (its zone, the catalog object it reads, the scan directories it
holds) is kept beside it in a `Made` record, never as attributes on the DataFusion object.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from icegres.engine.lake import (
    DEFAULT_CATALOG,
    ENGINE_ZONE,
    PRIVATE_CATALOG,
    PRIVATE_SCHEMA,
    Engine,
    SessionEnv,
    session_config,
)
from icegres.engine.mounts import to_dataframe
from icegres.engine.session_zone import is_utc, zoned, zoned_columns
from icegres.pg.errors import PgError

if TYPE_CHECKING:
    from datafusion import DataFrame, SessionContext
    from sqlglot import exp

    from icegres.engine.txn import TxnState

# How a view of one table is made on a new context: (context, the list its ScanSets go in) ->
# DataFrame.
ViewMaker = Any


@dataclass(eq=False)
class Made:
    """A context and what it was made with."""

    ctx: SessionContext
    zone: str = ENGINE_ZONE  # DataFusion's time zone setting on it
    catalog: Any = None  # the shared catalog object it reads (a session's default context)
    # The ScanSets its private tables read (scan_sets.py): a plan made on it holds them.
    keep: list[Any] | None = None
    generation: int = 0  # changes whenever its zone or catalog changed: plans made before are stale
    pruned_schema: Any = None  # where pruned_plan.py registers a statement's subset of files on it
    # A session's own catalog snapshot (a block's DDL, its temporary tables), registered into
    # this context's pg_catalog and information_schema when a statement first reads them.
    own_catalog: Any = None
    own_catalog_registered: bool = False
    # The time-travel relations registered on it (time_travel.attach): name -> the ScanSets it reads.
    travelled: dict[str, list[Any]] = field(default_factory=dict)


class SessionContexts:
    """The contexts of one session (blocking; its statements' worker threads call it)."""

    def __init__(self, engine: Engine, env: SessionEnv) -> None:
        self.engine = engine
        self.env = env
        self._stores = engine.stores  # the engine's one ObjectStores (it gains buckets, never changes)
        self._default: Made | None = None
        self._default_key: tuple[str, str] | None = None  # (default schema, time zone) it was made for
        self._stores_seen = 0
        self._private: tuple[tuple[Any, ...], Made] | None = None
        self._private_snapshot: Any = None  # the catalog snapshot registered on _private, if any
        self._own_tables: tuple[Any, dict[str, Any]] | None = None  # (snapshot, its built relations)

    @property
    def zone(self) -> str:
        """The session's TimeZone as DataFusion spells it (`+00:00` for UTC)."""
        from icegres.pg.clock import engine_time_zone

        return engine_time_zone(self.env.time_zone)

    def zoned(self, df: DataFrame) -> DataFrame:
        """A table's DataFrame as this session sees it (timestamptz in its TimeZone)."""
        zone = self.zone
        return df if is_utc(zone) else zoned(df, zone)

    def current(self, txn: TxnState | None, overlay: Made | None) -> Made:
        """The context a statement plans on now, set to the session's TimeZone."""
        self.env.catalog_snapshot = None  # the engine's, unless a block's own DDL is in force
        zone = self.zone
        if overlay is not None:
            made = overlay
        elif txn is not None and (not txn.autocommit or txn.writes_refs):
            made = self._private_for(txn, zone)
        elif self.env.temp:
            made = self._with_temp_tables(zone)
        else:
            made = self._session_default(zone)
        return self._in_session_zone(made, zone)

    def _in_session_zone(self, made: Made, zone: str) -> Made:
        """`made` planning in the session's TimeZone: a timestamptz literal or cast without an
        offset ('2024-07-01 12:00'::timestamptz), now() and date_trunc/extract of zoned values
        read it as PostgreSQL does. DataFusion's config is per context, so each context is set
        when the session's TimeZone differs from the one it was made or last set with."""
        if made.zone != zone:
            from datafusion import SessionContext as Plain

            try:  # the base class's sql: a SET runs on this context, not on the shared runner
                Plain.sql(made.ctx, f"SET datafusion.execution.time_zone = '{zone}'")
            except Exception as exc:  # a name Python's tz database has and chrono-tz has not
                raise PgError("22023", f'time zone "{self.env.time_zone}" is not supported by the query engine',
                              hint="SET TimeZone to an IANA name such as 'Europe/Berlin', or an offset.") from exc
            made.zone = zone
            made.generation += 1  # plans hold the literals read in the zone they were made in
        return made

    def _session_default(self, zone: str) -> Made:
        default = (self.default_schema(), zone)
        made = self._default
        if made is None or default != self._default_key:
            from icegres.engine import pg_functions

            ctx, catalog = self.engine.new_context(*default)
            pg_functions.register_functions(ctx, self.env)
            made = self._default = Made(ctx, ENGINE_ZONE, catalog)  # its DataFusion zone: the master's
            self._default_key = default
            self._stores_seen = self._stores.generation
        elif not is_utc(default[1]) and (catalog := self.engine.zone_catalog(default[1])) is not made.catalog:
            # The master catalog changed since: this session's copy in its zone is a new object.
            made.ctx.register_catalog_provider(DEFAULT_CATALOG, catalog)
            made.catalog = catalog
            made.generation += 1
        if self._stores_seen != self._stores.generation:
            # A table in a new bucket was mounted since this context was made.
            self._stores_seen = self._stores.register_all(made.ctx, self._stores_seen)
        return made

    def default_schema(self) -> str:
        # DataFusion resolves unqualified names in one schema: the first one on search_path that
        # exists. Names not found there fall back to the rewrite path, which walks the full path.
        return self.engine.first_schema(self.env.search_path) or "public"

    def register_private(self, made: Made, name: str, df: DataFrame) -> exp.Table:
        """Register a relation only this session's statements see (DML work tables) on `made`;
        the table a query names it by. It lives in a catalog of that context, never in the
        catalog every session shares."""
        from datafusion.catalog import Catalog, Schema

        ctx = made.ctx
        try:
            catalog = ctx.catalog(PRIVATE_CATALOG)
        except KeyError:
            catalog = Catalog.memory_catalog()
            catalog.register_schema(PRIVATE_SCHEMA, Schema.memory_schema())
            ctx.register_catalog_provider(PRIVATE_CATALOG, catalog)
        schema = catalog.schema(PRIVATE_SCHEMA)
        if name in schema.names():
            schema.deregister_table(name)
        schema.register_table(name, df.into_view())
        return private_table(name)

    def _private_for(self, txn: TxnState, zone: str) -> Made:
        """A context whose catalog is a private copy of the shared one with this transaction's
        views of its tables (pins + staged writes). Rebuilt only when the view changes (~2 ms)."""
        default = self.default_schema()
        # (SET TimeZone in a block: views anew; a role or privilege change: its catalog anew)
        key = (txn.ident, txn.version, default, zone, len(txn.acl_folds))
        ddl = txn.catalog is not None or bool(txn.view_overlay) or bool(self.env.temp) or bool(txn.acl_folds)
        if self._private is not None and self._private[0] == key:
            made, snap = self._private[1], self._private_snapshot
        else:
            stores, sets = self.engine.stores, self.engine.scan_sets
            views = {k: (lambda ctx, keep, plan=plan: to_dataframe(ctx, plan, stores, None, sets, keep))
                     for k, plan in txn.views().items()}
            made = self.with_views(views, hidden=txn.hidden)
            # The block's catalog relations describe its own DDL (pg_class, \d, regclass) and its
            # own roles and privileges (pg_roles, \du, \dp).
            snap = made.own_catalog = self.engine.catalog_as_seen_by(txn) if ddl else None
            self._private = (key, made)
            self._private_snapshot = snap
        self.env.catalog_snapshot = snap
        return made

    def _with_temp_tables(self, zone: str) -> Made:
        """Outside a block, for a session with temporary tables: the shared catalog plus its
        `pg_temp` schema. Rebuilt when a temporary table or any mount changed."""
        temp = self.env.temp
        key = (-1, temp.version, self.engine.mounts_version, self.default_schema(), zone)
        if self._private is not None and self._private[0] == key:
            self.env.catalog_snapshot = self._private_snapshot
            return self._private[1]
        stores, sets = self.engine.stores, self.engine.scan_sets
        plans = temp.plans()
        views = {k: (lambda ctx, keep, plan=plan: to_dataframe(ctx, plan, stores, None, sets, keep))
                 for k, plan in plans.items()}
        made = self.with_views(views)
        # pg_class and \dt list the session's temporary tables (in pg_temp), as PostgreSQL does.
        snap = made.own_catalog = self.engine.catalog_with(plans)
        self._private = (key, made)
        self._private_snapshot = snap
        self.env.catalog_snapshot = snap
        return made

    def complete_catalog(self, made: Made) -> None:
        """Register `made`'s own catalog snapshot, if it has one, before a statement reads
        pg_catalog or information_schema on it. Building the relations costs milliseconds, so
        only such statements pay, and an unchanged snapshot reuses them."""
        snap = made.own_catalog
        if snap is None or made.own_catalog_registered:
            return
        from icegres.engine import catalog_tables, pg_catalog

        built = self._own_tables
        if built is None or built[0] != snap:
            built = self._own_tables = (snap, pg_catalog.build_catalog_tables(snap))
        catalog_tables.register_private_catalog(made.ctx, built[1])
        made.own_catalog_registered = True

    def end_transaction(self) -> None:
        self._private = None

    def with_views(self, views: dict[tuple[str, str], ViewMaker],
                   hidden: set[tuple[str, str]] | frozenset[tuple[str, str]] = frozenset()) -> Made:
        """A new context over a private copy of the shared catalog in which each table of `views`
        is replaced by `views[key](ctx, keep)` (a DataFrame; the ScanSets it reads go in `keep`).
        The context holds the scan directories of everything it mounts (`Made.keep`)."""
        from datafusion import SessionContext
        from datafusion.catalog import Catalog, Schema

        from icegres.engine import pg_functions

        ctx = SessionContext(session_config(self.default_schema()), self.engine.runtime)
        catalog = Catalog.memory_catalog()
        shared, keep = self.engine.shared_tables()
        schemas = {}
        for schema_name, tables in shared.items():
            schema = Schema.memory_schema()
            for table_name, table in tables:
                if (schema_name, table_name) not in hidden:  # dropped or renamed away by the block
                    schema.register_table(table_name, table)
            catalog.register_schema(schema_name, schema)
            schemas[schema_name] = schema
        ctx.register_catalog_provider(DEFAULT_CATALOG, catalog)
        self.engine.stores.register_all(ctx)
        for (ns, name), make in views.items():
            schema = schemas.get(ns)
            if schema is None:
                schema = schemas[ns] = Schema.memory_schema()
                catalog.register_schema(ns, schema)
            if name in schema.names():
                schema.deregister_table(name)
            schema.register_table(name, self.zoned(make(ctx, keep)).into_view())
        if not is_utc(self.zone):  # the shared tables too, as this session sees them
            for schema_name, tables in shared.items():
                for table_name, table in tables:
                    if ((schema_name, table_name) not in views and (schema_name, table_name) not in hidden
                            and zoned_columns(table.schema)):
                        schema = schemas[schema_name]
                        schema.deregister_table(table_name)
                        schema.register_table(table_name, self.zoned(ctx.read_table(table)).into_view())
        pg_functions.register_functions(ctx, self.env)
        return Made(ctx, keep=keep)


def private_table(name: str, alias: exp.TableAlias | None = None) -> exp.Table:
    """How a statement names a relation of the session's own (`register_private`)."""
    from sqlglot import exp

    return exp.Table(this=exp.to_identifier(name, quoted=True), db=exp.to_identifier(PRIVATE_SCHEMA, quoted=True),
                     catalog=exp.to_identifier(PRIVATE_CATALOG, quoted=True), alias=alias)
