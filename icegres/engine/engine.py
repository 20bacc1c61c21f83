"""The query engine: the lakehouse mounted into DataFusion, and per-session query contexts.

One shared DataFusion catalog holds every Iceberg namespace as a schema and every table as a view
over its planned Parquet files, plus pg_catalog and information_schema. Each client session gets a
light SessionContext of its own over that shared catalog (0.6 ms to create) so that session-bound
functions — current_setting(), current_schema(), set_config() — see that session's settings.

All methods here block; the protocol layers call them from worker threads.
"""

from __future__ import annotations

import functools
import itertools
import logging
import re
import threading
from collections import OrderedDict
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

import pyarrow as pa

from icegres import __version__
from icegres.engine import errors as engine_errors
from icegres.engine.batches import BATCH_ROWS
from icegres.engine.catalog import Lakehouse, Listing
from icegres.engine.insert_shape import InsertShapes
from icegres.engine.mounts import (
    FooterCache,
    ObjectStores,
    ReadPlan,
    is_local,
    plan_read,
    to_dataframe,
)
from icegres.engine.scan_sets import ScanSets
from icegres.engine.session_zone import UTC, is_utc, zoned, zoned_columns
from icegres.engine.txn import TxnState
from icegres.protocol.pgwire.errors import PgError

if TYPE_CHECKING:
    from datafusion import DataFrame, SessionContext

    from icegres.engine.file_cache import FileCache
    from icegres.engine.ladder_port import WriteLadderPort

log = logging.getLogger("icegres.engine")

SERVER_VERSION = "15.0"
DEFAULT_CATALOG = "datafusion"
SYSTEM_SCHEMAS = ("pg_catalog", "information_schema")
PRIVATE_CATALOG = "icegres_work"  # per-session relations (DML work tables); never in the shared catalog
PRIVATE_SCHEMA = "w"


_ENGINE_ZONE = UTC  # every context's time zone as made (the master's, always)


def session_config(default_schema: str = "public"):
    """DataFusion settings of every context."""
    from datafusion import SessionConfig

    return (
        SessionConfig()
        .with_default_catalog_and_schema(DEFAULT_CATALOG, default_schema)
        .with_information_schema(False)
        .set("datafusion.sql_parser.dialect", "PostgreSQL")
        # Row-level filter pushdown stays off (DataFusion's default). It decodes the filter
        # columns first and the others only for matching rows; with the page index icegres
        # writes (parquet_files.py) a point lookup already reads one page per column, so that
        # saves ~0.3 ms there, while a scan with several moderately selective conjuncts pays for
        # one filtering pass per conjunct: TPC-H Q6 ran 368 -> 189 ms without it, top-k 21 -> 18
        # (in-process A/B, interleaved). On object stores it also costs a second GET per row
        # group (SeaweedFS point lookup 21 -> 15 ms without it).
        .set("datafusion.execution.parquet.pushdown_filters", "false")
        # The dynamic IN-list filter a hash join pushes into the probe-side scan pruned nothing on
        # the demo joins and cost time in every file: the join with demo.cities ran 34 -> 20 ms
        # without it (with row-level pushdown; 37 -> 31 ms without that, Q3 297 -> 279 ms).
        .set("datafusion.optimizer.enable_join_dynamic_filter_pushdown", "false")
        # A hash join whose build side is under 1M rows / 16 MB builds one table shared by every
        # partition (CollectLeft) instead of hash-repartitioning both inputs: with few cores the
        # shuffle costs more than the single build. TPC-H SF1 in-process, interleaved: Q3
        # 250 -> 203 ms, Q5 389 -> 306 ms, Q10 337 -> 323 ms; DataFusion's defaults are 128k rows / 1 MB.
        .set("datafusion.optimizer.hash_join_single_partition_threshold", str(16 << 20))
        .set("datafusion.optimizer.hash_join_single_partition_threshold_rows", str(1 << 20))
        # Set, not left to DataFusion's default: `Engine.rebatched` sets it back to this value.
        .set("datafusion.execution.batch_size", str(BATCH_ROWS))
        # `::timestamptz` must plan as a zoned timestamp (OID 1184), as in PostgreSQL. A session
        # context is set to its session's TimeZone (`QueryContext._in_session_zone`).
        .set("datafusion.execution.time_zone", _ENGINE_ZONE)
        # Identifiers fold to lower case exactly as in PostgreSQL.
        .set("datafusion.sql_parser.enable_ident_normalization", "true")
    )


@dataclass
class SessionEnv:
    """What session-bound SQL functions and name resolution need to know about one session."""

    database: str
    user: str
    backend_pid: int
    settings: dict[str, str] = field(default_factory=dict)
    server_version: str = SERVER_VERSION
    relation_oid: Any = None  # set by the engine: (schema, name) -> oid

    @property
    def time_zone(self) -> str:
        """The session's TimeZone setting: where text without an offset names a timestamptz."""
        return self.settings.get("timezone", "UTC")

    @property
    def search_path(self) -> list[str]:
        raw = self.settings.get("search_path", '"$user", public')
        out = []
        for item in raw.split(","):
            item = item.strip()
            if not item:
                continue
            if item.startswith('"') and item.endswith('"'):
                item = item[1:-1]
            else:
                item = item.lower()
            out.append(self.user if item == "$user" else item)
        return out


class Engine:
    """The lakehouse as DataFusion relations, kept exactly fresh by `refresh()`."""

    def __init__(self, lakehouse: Lakehouse, *, database: str = "icegres",
                 file_cache: FileCache | None = None) -> None:
        from datafusion import SessionContext

        self.lakehouse = lakehouse
        self.database = database
        self._master: SessionContext = SessionContext(session_config())
        self._lock = threading.Lock()
        # Held while a DataFrame is made on the master: `rebatched` changes its batch size for
        # that instant, and no other statement must take that setting with it.
        self._master_lock = threading.Lock()
        self._footers = FooterCache()
        self._stores = ObjectStores(lakehouse.s3_properties(), file_cache)
        self._file_cache = file_cache
        # Tables whose remote files all got local copies since they were mounted: mounted again
        # on the copies by the next statement that reads them (file_cache.py).
        self._localize: set[tuple[str, str]] = set()
        self._copies_wanted: list[tuple[tuple[str, str], ReadPlan]] = []
        self._mount_numbers = itertools.count()
        self._mount_number: dict[tuple[str, str], int] = {}
        if file_cache is not None:
            file_cache.pin_with(self._read_copies)
        self._plans: dict[tuple[str, str], ReadPlan] = {}
        self._scans: dict[tuple[str, str], dict[Any, Any]] = {}  # per table: to_dataframe's scans
        # Per table: the ScanSets its mounted DataFrame reads (scan_sets.py); a re-mount retires them.
        self.scan_sets = ScanSets()
        self._sets: dict[tuple[str, str], list[Any]] = {}
        self._many_files: set[tuple[str, str]] = set()  # tables of >= PRUNE_MIN_FILES per-file scans
        self._schemas: set[str] = set()
        self._listing: Listing | None = None
        self._token: int | None = None
        self._unreadable: dict[tuple[str, str], tuple[str, PgError]] = {}
        self._catalog_generation = 0
        self._catalog_snapshot: Any = None
        # Bumped by every change to the master catalog's tables and schemas: the zone catalogs
        # (session_zone.py) made at an older count are stale.
        self._catalog_changes = 0
        self._zone_catalogs: dict[str, tuple[int, Any]] = {}
        self._pending: dict[tuple[str, str], str] = {}  # changed in the catalog, not yet mounted
        self._fresh_pool: Any = None
        # Statements (QueryContext._repeat_key) whose cancellable first pull came back quickly:
        # their repeats take the blocking pull (engine/batches.py).
        self.quick_first_pulls: dict[tuple[Any, ...], float] = {}
        self._shape_dirty = True  # tables or schemas went away: pg_catalog must be rebuilt
        # The write ladder while --write-buffer-ms is on (`attach_ladder`): statements union its
        # acked, not yet mounted rows with the tables they read.
        self._ladder: WriteLadderPort | None = None
        for schema in SYSTEM_SCHEMAS:
            self._ensure_schema(schema)

    # --- the write ladder --------------------------------------------------------------------

    @property
    def ladder(self) -> WriteLadderPort | None:
        """The write ladder statements read through and buffer into; None while the buffer is off
        (or not yet replayed, or drained)."""
        return self._ladder

    def attach_ladder(self, ladder: WriteLadderPort | None) -> None:
        """From now on statements go through `ladder` (None: straight to the lake). The server's
        wiring attaches it once the tail is replayed and detaches it after the last flush."""
        self._ladder = ladder

    # --- freshness ---------------------------------------------------------------------------

    def refresh(self, refs: set[tuple[str, str]] | None = None) -> None:
        """Make the mounted lakehouse equal the catalog now (cheap when nothing changed).

        `refs` are the tables a statement may read; None means "everything" (catalog
        introspection, or a statement we cannot analyse). SQL catalogs list every table's
        metadata location in one query but re-plan only the changed tables a statement reads (a
        commit to another table costs this statement nothing); REST catalogs, which have no cheap
        listing, check only the named tables.
        """
        if self.lakehouse.kind == "rest" and refs is not None:
            self._refresh_tables(refs)
            self._request_copies()
            return
        try:
            # Read the token before listing: a commit racing the listing changes it again, so
            # the next statement lists once more rather than trusting a stale listing.
            token = self.lakehouse.change_token()
            listing = None
            if token is None or token != self._token or self._listing is None:
                listing = self.lakehouse.listing()
        except Exception as exc:  # the catalog itself is unreachable
            raise PgError("58030", f"catalog unavailable ({self.lakehouse.description}): {exc}") from exc
        with self._lock:
            if listing is not None:
                if listing != self._listing:
                    self._apply(listing)
                    self._listing = listing
                self._token = token
            self._mount_pending(refs)
            self._mount_localized(refs)
        self._request_copies()

    def _mount_pending(self, refs: set[tuple[str, str]] | None) -> None:
        """Mount the changed tables `refs` names (all of them for None)."""
        keys = list(self._pending) if refs is None else [k for k in refs if k in self._pending]
        for key in keys:
            self._mount(key, self._pending.pop(key))
        if keys or self._shape_dirty:
            self._shape_dirty = False
            self._register_pg_catalog(self._listing or Listing((), ()))

    def _refresh_tables(self, refs: set[tuple[str, str]]) -> None:
        """Check each named table's metadata location: one catalog call per table."""
        try:
            locations = {ref: self.lakehouse.metadata_location(*ref) for ref in refs}
        except Exception as exc:
            raise PgError("58030", f"catalog unavailable ({self.lakehouse.description}): {exc}") from exc
        with self._lock:
            changed = False
            for key, location in locations.items():
                current = self._plans.get(key)
                if location is None:
                    if current is not None:
                        self._deregister(key)
                        changed = True
                    continue
                if current is not None and current.metadata_location == location:
                    self._renew_credentials(key, current)
                    continue
                self._mount(key, location)
                changed = True
            if changed:
                namespaces = tuple(sorted({k[0] for k in self._plans} | (set(self._listing.namespaces) if self._listing else set())))
                self._listing = Listing(namespaces, ())
                self._register_pg_catalog(self._listing)
            self._mount_localized(refs)

    def _renew_credentials(self, key: tuple[str, str], plan: ReadPlan) -> None:
        """Every loadTable vends fresh credentials: hand them to the bucket's object store (it is
        replaced only if they differ), so an unchanged table outlives its first credentials."""
        vended = getattr(self.lakehouse, "vended_credentials", lambda *_: None)(*key)
        if vended and plan.files:
            from icegres.engine.mounts import _scan_path

            self._stores.ensure(self._master, _scan_path(plan.files[0].path), vended)

    def _mount(self, key: tuple[str, str], location: str) -> None:
        try:
            table = self.lakehouse.load_table(*key)
            plan = plan_read(table, self._footers)
        except PgError as err:
            self._deregister(key)
            self._unreadable[key] = (location, err)
            return
        self._unreadable.pop(key, None)
        self._ensure_schema(key[0])
        self._register(key, plan)

    def _register(self, key: tuple[str, str], plan: ReadPlan) -> None:
        """Mount `plan` as the table `key` of the master catalog (the caller holds the lock)."""
        keep: list[Any] = []
        df = to_dataframe(self._master, plan, self._stores, self._scans.setdefault(key, {}), self.scan_sets, keep)
        schema = self._master.catalog(DEFAULT_CATALOG).schema(key[0])
        if key[1] in schema.names():
            schema.deregister_table(key[1])
        schema.register_table(key[1], df.into_view())
        self._catalog_changes += 1
        self._retire_sets(key)
        self._sets[key] = keep
        linked = sum(len(s.files) for s in keep)
        self._set_plan(key, plan, len(plan.files) - linked, linked)
        self._mount_number[key] = next(self._mount_numbers)
        if self._file_cache is not None:
            self._copies_wanted.append((key, plan))  # asked for once the lock is released

    def _request_copies(self) -> None:
        """Ask the file cache for copies of the mounts just made. Outside the lock: making room
        in the cache asks which copies the mounts read (`_read_copies`)."""
        if self._file_cache is None:
            return
        with self._lock:
            wanted, self._copies_wanted = self._copies_wanted, []
        for key, plan in wanted:
            self._want_copies(key, plan)

    def _want_copies(self, key: tuple[str, str], plan: ReadPlan) -> None:
        """Have the file cache copy the plan's remote files; once they are all here, the table
        is mounted again on the copies (`_mount_localized`)."""
        cache = self._file_cache
        if cache is None or plan.table is None:
            return
        from icegres.engine.file_cache import Wanted

        sizes = {f.path: int(getattr(plan.data_files.get(f.path), "file_size_in_bytes", -1) or -1)
                 for f in plan.files if not is_local(f.path) and cache.lookup(f.path) is None}
        wanted = [Wanted(path, size) for path, size in sizes.items()]
        if not wanted or any(w.size < 0 for w in wanted):
            return
        io: Any = plan.table.io  # type: ignore[attr-defined]
        location = plan.metadata_location

        def ready() -> None:
            with self._lock:
                current = self._plans.get(key)
                if current is not None and current.metadata_location == location:
                    self._localize.add(key)

        cache.fetch(wanted, lambda uri: io.new_input(uri).open(), ready)

    def _mount_localized(self, refs: set[tuple[str, str]] | None) -> None:
        """Mount again, on their local copies, the tables `refs` names whose copies are all here
        (the caller holds the lock)."""
        for key in [k for k in self._localize if refs is None or k in refs]:
            self._localize.discard(key)
            plan = self._plans.get(key)
            if plan is not None:
                self._register(key, plan)
                log.info("%s.%s: reading its %d data files from local copies", *key, len(plan.files))

    def _read_copies(self) -> set[str]:
        """Local paths a mounted snapshot may read: the file cache never evicts them."""
        with self._lock:
            per_file = {k[0] for scans in self._scans.values() for k in scans}
        return per_file | self.scan_sets.live_files()

    def _retire_sets(self, key: tuple[str, str]) -> None:
        old = self._sets.pop(key, None)
        if old:
            self.scan_sets.retire(old)

    def _apply(self, listing: Listing) -> None:
        """Take in a new listing: drop what is gone, note what changed (mounted on first use)."""
        wanted = {(t.namespace, t.name): t for t in listing.tables}
        catalog = self._master.catalog(DEFAULT_CATALOG)
        for ns in listing.namespaces:
            self._ensure_schema(ns)
        for key in list(self._plans):
            if key not in wanted:
                self._deregister(key)
                self._shape_dirty = True
        for key in list(self._unreadable):
            if key not in wanted:
                del self._unreadable[key]
        self._pending = {}
        for key, entry in wanted.items():
            current = self._plans.get(key)
            if current is not None and current.metadata_location == entry.metadata_location:
                continue
            known_bad = self._unreadable.get(key)
            if known_bad is not None and known_bad[0] == entry.metadata_location:
                continue
            # One unreadable table (e.g. merge-on-read deletes) must not break the others: it is
            # left unmounted and statements naming it get its error (unreadable_error).
            self._pending[key] = entry.metadata_location
        for ns in list(self._schemas):
            if ns not in listing.namespaces and ns not in SYSTEM_SCHEMAS and ns != "public":
                if not any(k[0] == ns for k in self._plans):
                    catalog.deregister_schema(ns, cascade=True)
                    self._catalog_changes += 1
                    self._schemas.discard(ns)
                    self._shape_dirty = True

    def _ensure_schema(self, name: str) -> None:
        from datafusion.catalog import Schema

        if name in self._schemas:
            return
        catalog = self._master.catalog(DEFAULT_CATALOG)
        if name not in catalog.names():
            catalog.register_schema(name, Schema.memory_schema())
            self._catalog_changes += 1
        self._schemas.add(name)

    def _deregister(self, key: tuple[str, str]) -> None:
        catalog = self._master.catalog(DEFAULT_CATALOG)
        try:
            catalog.schema(key[0]).deregister_table(key[1])
        except Exception:
            pass
        self._catalog_changes += 1
        self._plans.pop(key, None)
        self._scans.pop(key, None)
        self._retire_sets(key)
        self._many_files.discard(key)

    def _set_plan(self, key: tuple[str, str], plan: ReadPlan, scans: int, linked: int = 0) -> None:
        """`scans`: how many Parquet scans of one file each the mounted DataFrame unions; `linked`:
        how many files its ScanSet scan reads (one scan, which DataFusion prunes by file
        statistics by itself, but only after opening every file)."""
        self._plans[key] = plan
        if scans >= PRUNE_MIN_FILES or linked >= PRUNE_MIN_LINKED_FILES:
            self._many_files.add(key)
        else:
            self._many_files.discard(key)

    @property
    def prunable(self) -> bool:
        """Whether any mounted table has enough files for pruning to pay (QueryContext.plan):
        otherwise no statement pays for finding which tables it reads."""
        return bool(self._many_files)

    def _register_pg_catalog(self, listing: Listing) -> None:
        from icegres.engine import pg_catalog

        tables = []
        for (ns, name), plan in sorted(self._plans.items()):
            not_null = {f.name for f in plan.schema if not f.nullable}
            docs = plan.column_comments or ("",) * len(plan.field_ids)
            columns = tuple(
                pg_catalog.ColumnInfo(f.name, f.type, f.name not in not_null, fid, doc)
                for f, fid, doc in zip(plan.schema, plan.field_ids, docs, strict=True)
            )
            tables.append(pg_catalog.TableInfo(ns, name, columns, plan.primary_key, plan.comment))
        snap = pg_catalog.CatalogSnapshot(
            database=self.database,
            user="icegres",
            schemas=tuple(sorted(set(listing.namespaces) | {"public"})),
            tables=tuple(tables),
        )
        if snap == self._catalog_snapshot:
            return  # only snapshots moved: pg_catalog describes shapes, not data
        pg_catalog.register_catalog(self._master, snap)
        self._catalog_changes += 1
        self._catalog_snapshot = snap
        self._catalog_generation += 1

    # --- what sessions use -------------------------------------------------------------------

    def has_table(self, schema: str, name: str) -> bool:
        return (schema, name) in self._plans or (schema, name) in self._pending

    def has_schema(self, schema: str) -> bool:
        return schema in self._schemas

    def note_first_pull(self, key: tuple[Any, ...], seconds: float) -> None:
        from icegres.engine.batches import QUICK_FIRST_PULL_S

        if seconds < QUICK_FIRST_PULL_S:
            with self._lock:
                self.quick_first_pulls[key] = seconds
                if len(self.quick_first_pulls) > _QUICK_PULLS_MAX:
                    self.quick_first_pulls.pop(next(iter(self.quick_first_pulls)))

    def mounted_locations(self, refs: set[tuple[str, str]]) -> dict[tuple[str, str], tuple[str, int] | None]:
        """Per table: its mounted snapshot's metadata location and which mount of it this is (a
        snapshot is mounted again on local copies of its files: a plan of the earlier mount
        reads the remote files)."""
        with self._lock:
            return {k: ((p.metadata_location, self._mount_number.get(k, -1))
                        if (p := self._plans.get(k)) is not None else None) for k in refs}

    def check_freshness_async(self, refs: set[tuple[str, str]]) -> Any:
        """`refresh(refs)` on a small pool of its own (callers are already worker threads)."""
        if self._fresh_pool is None:
            from concurrent.futures import ThreadPoolExecutor

            self._fresh_pool = ThreadPoolExecutor(max_workers=8, thread_name_prefix="icegres-fresh")
        return self._fresh_pool.submit(self.refresh, refs)

    def subset_view(self, key: tuple[str, str], files: tuple[Any, ...]) -> tuple[ReadPlan, Any] | None:
        """(the mounted plan, a DataFrame over only `files` of it), from the scans the mount built;
        None if the table is no longer mounted with all of those files."""
        from dataclasses import replace

        with self._lock:
            plan = self._plans.get(key)
            if plan is None or not set(files) <= set(plan.files):
                return None
            scans = dict(self._scans.get(key, {}))
        built = dict(scans)
        df = to_dataframe(self._master, replace(plan, files=files), self._stores, scans)
        if scans.keys() - built.keys():
            # Files of a ScanSet had no scan of their own until a pruned statement needed one:
            # keep it for the next (a re-mount keeps only the scans its union reads).
            with self._lock:
                if self._plans.get(key) is plan:
                    self._scans.setdefault(key, {}).update(scans)
        return plan, df

    def shared_tables(self) -> tuple[dict[str, list[tuple[str, Any]]], list[Any]]:
        """The master catalog's tables by schema, and the ScanSets they read: one instant, so a
        private copy of the catalog can hold exactly the directories its tables scan."""
        with self._lock:
            master = self._master.catalog(DEFAULT_CATALOG)
            tables = {name: [(t, master.schema(name).table(t)) for t in master.schema(name).names()]
                      for name in master.names()}
            return tables, [s for sets in self._sets.values() for s in sets]

    def plans(self) -> dict[tuple[str, str], ReadPlan]:
        """Every mounted table's current plan: one consistent instant when the catalog has one."""
        with self._lock:
            return dict(self._plans)

    def unreadable_error(self, message: str) -> PgError | None:
        """The stored refusal for a table a "not found" error names, if it is unreadable."""
        for (ns, name), (_, err) in self._unreadable.items():
            if f"{ns}.{name}" in message or f"'{name}'" in message:
                return err
        return None

    def read_plan(self, schema: str, name: str) -> ReadPlan | None:
        return self._plans.get((schema, name))

    def adopt(self, key: tuple[str, str], previous_location: str, plan: ReadPlan) -> None:
        """Mount a snapshot this process just committed, built from the plan it replaced plus the
        commit's own file changes — no reload, no re-planning. Only if the mounted table is still
        the commit's base; otherwise the next refresh loads it as usual."""
        with self._lock:
            current = self._plans.get(key)
            if current is None or current.metadata_location != previous_location:
                return
            self._register(key, plan)
        self._request_copies()

    def open_session(self, env: SessionEnv) -> QueryContext:
        from icegres.engine import pg_catalog

        env.relation_oid = pg_catalog.relation_oid
        return QueryContext(self, env)

    def new_context(self, default_schema: str, zone: str = _ENGINE_ZONE) -> SessionContext:
        """A session's context; one for a session whose TimeZone `zone` (DataFusion's spelling)
        is not UTC sees the tables' timestamptz columns in that zone (session_zone.py)."""
        from icegres.engine.mounts import shared_runtime_context

        # Planned here, executed in the master's runtime: its Parquet footer cache is shared by
        # every session, so a new client connection reads no footers the process already has.
        ctx = shared_runtime_context(session_config(default_schema), self._master, self.scan_sets.hold,
                                     self._master_lock)
        catalog = self._master.catalog(DEFAULT_CATALOG) if is_utc(zone) else self.zone_catalog(zone)
        ctx.register_catalog_provider(DEFAULT_CATALOG, catalog)
        ctx.icegres_catalog = catalog
        self._stores.register_all(ctx)
        return ctx

    def zone_catalog(self, zone: str) -> Any:
        """The master catalog as sessions in `zone` see it (session_zone.py): rebuilt after any
        change to the master catalog, as one new object a session swaps in whole."""
        from icegres.engine.session_zone import zoned_catalog

        with self._lock:
            version = self._catalog_changes
            hit = self._zone_catalogs.get(zone)
            if hit is not None and hit[0] == version:
                return hit[1]
            catalog = zoned_catalog(self._master, self._master.catalog(DEFAULT_CATALOG), zone,
                                    frozenset(SYSTEM_SCHEMAS))
            self._zone_catalogs[zone] = (version, catalog)
            return catalog

    def rebatched(self, df: DataFrame, rows: int) -> DataFrame:
        """`df`'s plan as a DataFrame of the master whose scans yield `rows`-row batches
        (batches.wide_batch_rows), with the statement's attributes. A DataFrame keeps the
        settings its context had when it was made, so the master's batch size is set for just
        that instant, under the lock every DataFrame made on the master takes."""
        with self._master_lock:
            self._master.sql(f"SET datafusion.execution.batch_size = {int(rows)}")
            try:
                out = self._master.create_dataframe_from_logical_plan(df.logical_plan())
            finally:
                self._master.sql(f"SET datafusion.execution.batch_size = {BATCH_ROWS}")
        for name in ("icegres_hold", "icegres_repeat", "icegres_input_rows"):
            if hasattr(df, name):
                setattr(out, name, getattr(df, name))
        return out

    @property
    def stores(self) -> ObjectStores:
        return self._stores

    @property
    def master(self) -> SessionContext:
        return self._master


_ROUTE_CACHE_SIZE = 2048
_QUICK_PULLS_MAX = 4096  # Engine.quick_first_pulls: old snapshots' entries age out
_PLANNED_MAX = 64  # QueryContext._planned: a session's recent repeated statements
# Pruning costs ~1.3 ms of parsing and re-planning per statement; an unread file of a union of
# per-file scans saves ~0.3-1 ms of planning and opening. Measured on the 4-file demo table it broke
# even; on 40 files a point lookup went from 44.8 to 7.7 ms. Below this many per-file scans a statement
# is planned as sent. Files read as one ScanSet do not count: one scan over 41 local files answered
# a point lookup in 4.7 ms unpruned, 7.1 ms pruned (in-process, 10M rows).
PRUNE_MIN_FILES = 8
# A ScanSet scan opens every file it links (footer, statistics, a stream) before its row groups
# are pruned: ~13 us a file, 2.7 ms of a 200-file point lookup. From this many files pruning by
# Iceberg bounds to a union of per-file scans costs less (50M rows in 200 files, in-process: point
# 6.7 -> 4.9 ms, filter 9.0 -> 7.1 ms). At 41 files it did not (4.7 -> 7.1 ms).
PRUNE_MIN_LINKED_FILES = 100
_PRUNED_CATALOG = "icegres_pruned"
_PRUNED_SCHEMA = "files"
_PRUNED_NAMES = itertools.count()


class QueryContext:
    """One session's view of the engine: its DataFusion context and plan routing cache."""

    def __init__(self, engine: Engine, env: SessionEnv) -> None:
        self.engine = engine
        self.env = env
        self._ctx: SessionContext | None = None
        self._ctx_schema: tuple[str, str] | None = None  # (default schema, time zone) it was made for
        self._stores_seen = 0
        # statement text -> SQL DataFusion accepted for it (the text itself or its rewrite)
        self._routes: OrderedDict[tuple[str, tuple[str, ...]], str] = OrderedDict()
        # Keyed on the statement's literal shape: a point lookup sent with a new literal each time
        # still hits. Neither result depends on a literal's value (see `_literal_shape`).
        self._names: dict[str, list[str] | None] = {}
        self._refs: dict[tuple[str, tuple[str, ...]], set[tuple[str, str]] | None] = {}
        self._kinds: dict[tuple[str, tuple[str, ...]], frozenset[str]] = {}  # plan node kinds
        # Logical plans of statements run before, by `_repeat_key` (text, parameters, snapshots).
        self._planned: OrderedDict[tuple[Any, ...], tuple[SessionContext, Any]] = OrderedDict()
        # Final result column names per shape and DataFusion's names for them (`pg_schema`).
        self._pg_names: dict[tuple[str, tuple[str, ...]], list[str]] = {}
        # Statement shapes whose WHERE clause can never narrow the files read (prune.py).
        self._unprunable: dict[tuple[str, tuple[str, ...]], bool] = {}
        # The session context's private catalog of per-statement file subsets, and that context.
        self._pruned: tuple[Any, Any] | None = None
        # The open transaction (or the one-statement transaction of an autocommit write): while
        # set, statements read its pinned snapshots and staged writes through a private context.
        self.txn: TxnState | None = None
        self._private: tuple[tuple[int, int, str], SessionContext] | None = None
        # One statement's context over the write buffer's rows (see `buffered_reads`).
        self._overlay: SessionContext | None = None
        # Recipes of the parameterised INSERTs the write buffer may take on the event loop.
        self.insert_shapes = InsertShapes()

    @property
    def ctx(self) -> SessionContext:
        return self._in_session_zone(self._current_ctx())

    @property
    def zone(self) -> str:
        """The session's TimeZone as DataFusion spells it (`+00:00` for UTC)."""
        from icegres.protocol.pgwire.types import engine_time_zone

        return engine_time_zone(self.env.time_zone)

    def zoned(self, df: DataFrame) -> DataFrame:
        """A table's DataFrame as this session sees it (timestamptz in its TimeZone)."""
        zone = self.zone
        return df if is_utc(zone) else zoned(df, zone)

    def _in_session_zone(self, ctx: SessionContext) -> SessionContext:
        """`ctx` planning in the session's TimeZone: a timestamptz literal or cast without an
        offset ('2024-07-01 12:00'::timestamptz), now() and date_trunc/extract of zoned values
        read it as PostgreSQL does. DataFusion's config is per context, so each context is set
        when the session's TimeZone differs from the one it was made or last set with."""
        zone = self.zone
        if getattr(ctx, "icegres_zone", _ENGINE_ZONE) != zone:
            from datafusion import SessionContext as Plain

            try:  # the base class's sql: a SET runs on this context, not on the shared runner
                Plain.sql(ctx, f"SET datafusion.execution.time_zone = '{zone}'")
            except Exception as exc:  # a name Python's tz database has and chrono-tz has not
                raise PgError("22023", f'time zone "{self.env.time_zone}" is not supported by the query engine',
                              hint="SET TimeZone to an IANA name such as 'Europe/Berlin', or an offset.") from exc
            ctx.icegres_zone = zone
            self._planned.clear()  # plans hold the literals read in the zone they were made in
        return ctx

    def _current_ctx(self) -> SessionContext:
        if self._overlay is not None:
            return self._overlay
        if self.txn is not None and not self.txn.autocommit:
            return self._private_ctx(self.txn)
        default = (self._default_schema(), self.zone)
        if self._ctx is None or default != self._ctx_schema:
            from icegres.engine import pg_functions

            ctx = self.engine.new_context(*default)
            pg_functions.register_functions(ctx, self.env)
            self._ctx, self._ctx_schema = ctx, default
            self._stores_seen = self.engine.stores.generation
        elif not is_utc(default[1]) and (catalog := self.engine.zone_catalog(default[1])) is not self._ctx.icegres_catalog:
            # The master catalog changed since: this session's copy in its zone is a new object.
            self._ctx.register_catalog_provider(DEFAULT_CATALOG, catalog)
            self._ctx.icegres_catalog = catalog
            self._planned.clear()
        if self._stores_seen != self.engine.stores.generation:
            # A table in a new bucket was mounted since this context was made.
            self._stores_seen = self.engine.stores.register_all(self._ctx, self._stores_seen)
        return self._ctx

    def _default_schema(self) -> str:
        # DataFusion resolves unqualified names in one schema: the first one on search_path that
        # exists. Names not found there fall back to the rewrite path, which walks the full path.
        for schema in self.env.search_path:
            if self.engine.has_schema(schema):
                return schema
        return "public"

    def refresh(self) -> None:
        self.engine.refresh()

    def plan(self, sql: str, params: dict[str, Any] | None = None) -> DataFrame:
        """Plan one query statement (DataFusion dialect permitting, else through the rewriter).

        The DataFrame carries the statement's claim on the scan directories it may read
        (`icegres_hold`, scan_sets.py): a hold taken before planning, and the sets of a private
        context (transaction, write-buffer overlay), which may be dropped while the statement
        still runs; whatever runs the plan keeps it."""
        hold = self.engine.scan_sets.hold()
        own = getattr(self.ctx, "icegres_keep", None)
        df = self._plan(sql, params)
        df.icegres_hold = (hold, own)
        return df

    def _plan(self, sql: str, params: dict[str, Any] | None) -> DataFrame:
        pruned = self._plan_pruned(sql, params)
        if pruned is not None:
            return pruned
        # The same statement over the same snapshots plans to the same logical plan: reuse it
        # (DataFusion optimises a plan afresh at every execution, so now() and the session's
        # functions are still evaluated per statement). Parsing and planning a group-by or a join
        # is ~0.5 ms of the 1-2 ms a repeated dashboard query spends outside execution.
        reuse = self._repeat_key(sql, params)
        ctx = self.ctx
        hit = None if reuse is None else self._planned.get(reuse)
        if hit is not None and hit[0] is ctx:
            self._planned.move_to_end(reuse)
            # A new DataFrame each time: `plan` hangs this statement's scan-set hold on it.
            df = ctx.create_dataframe_from_logical_plan(hit[1])
        else:
            df = self._plan_text(sql, params)
            if reuse is not None:
                self._planned[reuse] = (ctx, df.logical_plan())
                if len(self._planned) > _PLANNED_MAX:
                    self._planned.popitem(last=False)
        df.icegres_repeat = reuse  # for `_execute`'s choice of pull
        return df

    def _plan_text(self, sql: str, params: dict[str, Any] | None) -> DataFrame:
        key = (sql, tuple(self.env.search_path))
        route = self._routes.get(key)
        ctx = self.ctx
        if route is not None:
            self._routes.move_to_end(key)
            try:
                return ctx.sql(route, param_values=params)
            except Exception as exc:
                raise engine_errors.from_datafusion(exc, sql, verbatim=route == sql) from None
        first_error: BaseException | None = None
        if not _needs_rewrite(sql):
            try:
                df = ctx.sql(sql, param_values=params)
                self._remember(key, sql)
                return df
            except Exception as exc:
                first_error = exc
        from icegres.engine import sql as sql_rewrite

        try:
            rewritten = sql_rewrite.rewrite_for_datafusion(sql, self)
        except PgError:
            if first_error is not None:
                raise engine_errors.from_datafusion(first_error, sql) from None
            raise
        try:
            df = ctx.sql(rewritten, param_values=params)
        except Exception as exc:
            err = engine_errors.from_datafusion(first_error or exc, sql, verbatim=first_error is not None)
            if err.sqlstate == "42P01":
                err = self.engine.unreadable_error(str(first_error or exc)) or err
            raise err from None
        self._remember(key, rewritten)
        return df

    # --- transactions ------------------------------------------------------------------------

    def pin_for(self, sql: str, *, fresh: bool = True) -> None:
        """Inside a transaction: pin the snapshot of every table the statement may read.

        `fresh=False` (describing an autocommit statement at Parse time) pins what is mounted
        without a catalog round trip when every table is mounted: the statement's Execute pins
        afresh, and only parameter types and RETURNING columns come from this.

        On SQL catalogs the first statement pins every table at once (one listing is one
        consistent instant of the whole catalog); on REST catalogs each table is pinned when a
        statement first names it, as no cross-table instant exists there.
        """
        txn = self.txn
        assert txn is not None
        if txn.serializable and sql:
            txn.read_keys |= self.table_refs(sql) or set()
        ladder = self.engine.ladder
        if ladder is not None and not txn.autocommit and ladder.has_entries():
            # A transaction block reads lake snapshots only (its pins): rows acked by the write
            # buffer must be in the lake before a table is pinned, or the block would miss them.
            if self.engine.lakehouse.kind != "rest":
                if not txn.pinned_all:
                    ladder.settle_blocking(None)
            else:
                refs = self.table_refs(sql) if sql else set()
                if refs is None or any(ref not in txn.pins for ref in refs):
                    ladder.settle_blocking(None if refs is None else {r for r in refs if r not in txn.pins})
        if self.engine.lakehouse.kind != "rest" and not txn.autocommit:
            if not txn.pinned_all:
                self.engine.refresh(None)
                txn.pin_all(self.engine.plans())
            return
        refs = self.table_refs(sql) if sql else set()
        if not fresh and txn.autocommit and refs is not None:
            # Unqualified names expand over search_path: the mounted candidates are the answer.
            mounted = {ref: self.engine.read_plan(*ref) for ref in refs if ref not in txn.pins}
            if any(plan is not None for plan in mounted.values()):
                for key, plan in mounted.items():
                    txn.pin(key, plan)
                return
        if refs is None:  # catalog introspection reads every table
            self.engine.refresh(None)
            for key, plan in self.engine.plans().items():
                txn.pin(key, plan)
            return
        missing = {ref for ref in refs if ref not in txn.pins}
        if missing:
            self.engine.refresh(missing)
            for key in missing:
                txn.pin(key, self.engine.read_plan(*key))

    def resolve_table(self, schema: str | None, name: str) -> tuple[str, str] | None:
        """The (namespace, table) an optionally qualified name means under search_path."""
        known = self.txn.pins if self.txn is not None else None
        if known is None:
            return self.resolve_mounted(schema, name)
        return self._resolve(schema, name, known.__contains__)

    def resolve_mounted(self, schema: str | None, name: str) -> tuple[str, str] | None:
        """`resolve_table` against the mounted tables, whatever transaction is bound: safe to
        call on the event loop while a worker thread runs this session's statement."""
        return self._resolve(schema, name, lambda key: self.engine.has_table(*key))

    def _resolve(self, schema: str | None, name: str,
                 exists: Callable[[tuple[str, str]], bool]) -> tuple[str, str] | None:
        if schema is not None:
            return (schema, name) if exists((schema, name)) else None
        for candidate in self.env.search_path:
            if exists((candidate, name)):
                return (candidate, name)
        return None

    def register_private(self, name: str, df: DataFrame) -> str:
        """Register a relation only this session's statements see (DML work tables); its name.

        It lives in a catalog registered on this session's own context, never in the catalog
        every session shares."""
        from datafusion.catalog import Catalog, Schema

        ctx = self.ctx
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
        return f'"{PRIVATE_CATALOG}"."{PRIVATE_SCHEMA}"."{name}"'

    def _private_ctx(self, txn: TxnState) -> SessionContext:
        """A context whose catalog is a private copy of the shared one with this transaction's
        views of its tables (pins + staged writes). Rebuilt only when the view changes (~2 ms)."""
        default = self._default_schema()
        key = (txn.ident, txn.version, default, self.zone)  # SET TimeZone in a block: views anew
        if self._private is not None and self._private[0] == key:
            return self._private[1]
        stores, sets = self.engine.stores, self.engine.scan_sets
        views = {k: (lambda ctx, keep, plan=plan: to_dataframe(ctx, plan, stores, None, sets, keep))
                 for k, plan in txn.views().items()}
        ctx = self._context_with(views)
        self._private = (key, ctx)
        return ctx

    def _context_with(self, views: dict[tuple[str, str], Any]) -> SessionContext:
        """A new context over a private copy of the shared catalog in which each table of `views`
        is replaced by `views[key](ctx, keep)` (a DataFrame; the ScanSets it reads go in `keep`).
        The context holds the scan directories of everything it mounts (`icegres_keep`)."""
        from datafusion import SessionContext
        from datafusion.catalog import Catalog, Schema

        from icegres.engine import pg_functions

        ctx = SessionContext(session_config(self._default_schema()))
        catalog = Catalog.memory_catalog()
        shared, keep = self.engine.shared_tables()
        schemas = {}
        for schema_name, tables in shared.items():
            schema = Schema.memory_schema()
            for table_name, table in tables:
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
                    if (schema_name, table_name) not in views and zoned_columns(table.schema):
                        schema = schemas[schema_name]
                        schema.deregister_table(table_name)
                        schema.register_table(table_name, self.zoned(ctx.read_table(table)).into_view())
        pg_functions.register_functions(ctx, self.env)
        ctx.icegres_keep = keep
        return ctx

    # --- the write buffer ----------------------------------------------------------------------

    def buffered_entries(self, sql: str) -> dict[tuple[str, str], Any] | None:
        """The write buffer's acked entries of the tables `sql` reads, or None (nothing buffered,
        or inside a transaction block, which reads lake snapshots only). Call it BEFORE the
        statement's plans are read: entries first, then the plan, is what makes the union exact."""
        ladder = self.engine.ladder
        if ladder is None or (self.txn is not None and not self.txn.autocommit) or not ladder.has_entries():
            return None
        return ladder.visible(self.table_refs(sql)) or None

    @contextmanager
    def buffered_reads(self, taken: dict[tuple[str, str], Any] | None) -> Iterator[None]:
        """For the block, plan on a context where each table of `taken` is its mounted plan
        (read now) plus the entries above that plan's lake watermark."""
        if not taken:
            yield
            return
        ladder = self.engine.ladder
        plans = self.engine.plans()
        stores, sets = self.engine.stores, self.engine.scan_sets
        views = {}
        for key, entries in taken.items():
            plan = plans.get(key)
            if plan is None:
                continue  # dropped meanwhile: the statement gets its 42P01
            mark = ladder.watermark(plan)
            rows = [b.rows for b in entries if b.lsn > mark]

            def make(ctx: Any, keep: list[Any], plan: ReadPlan = plan, rows: list[pa.Table] = rows) -> Any:
                df = to_dataframe(ctx, plan, stores, None, sets, keep)
                if rows:
                    df = df.union(ctx.from_arrow(_fit(rows, df.schema())))
                return df

            views[key] = make
        self._overlay = self._context_with(views)
        try:
            yield
        finally:
            self._overlay = None

    def end_transaction(self) -> None:
        self.txn = None
        self._private = None

    def refresh_for(self, sql: str) -> None:
        """Freshness for one statement: every table it may read is at the catalog's head."""
        if self.txn is not None:
            self.pin_for(sql)
            return
        self.engine.refresh(self.table_refs(sql))

    def table_refs(self, sql: str) -> set[tuple[str, str]] | None:
        """The tables a statement may read (None: all), parsed once per statement text up to
        its literal values."""
        key = (_literal_shape(sql), tuple(self.env.search_path))
        if key in self._refs:
            return self._refs[key]
        from icegres.engine.sql import table_refs

        refs = table_refs(sql, self.env.search_path)
        self._refs[key] = refs
        if len(self._refs) > _ROUTE_CACHE_SIZE:
            self._refs.pop(next(iter(self._refs)))
        return refs

    def start(self, sql: str, params: dict[str, Any] | None = None) -> tuple[pa.Schema, Any]:
        """Refresh, plan and start executing a query: (result schema, batch stream).

        The schema carries the column names PostgreSQL would give the result.
        """
        taken = self.buffered_entries(sql)
        if taken:
            self.refresh_for(sql)
            with self.buffered_reads(taken):
                return self._execute(sql, params)
        speculated = self._start_speculating(sql, params)
        if speculated is not None:
            return speculated
        self.refresh_for(sql)
        return self._execute(sql, params)

    def _execute(self, sql: str, params: dict[str, Any] | None) -> tuple[pa.Schema, Any]:
        from icegres.engine.batches import CancellableBatches

        df = self.plan(sql, params)
        kinds = self._plan_kinds(sql, df)
        wide = self._wide_batch_rows(sql, df, kinds)
        if wide is not None:
            df = self.engine.rebatched(df, wide)
        try:
            schema, stream = self.pg_schema(sql, df.schema()), df.execute_stream()
        except Exception as exc:
            retry = self._rewritten_after_failure(sql, params, df)
            if retry is None:
                raise engine_errors.from_datafusion(exc) from None
            try:
                df = retry
                schema, stream = self.pg_schema(sql, df.schema()), df.execute_stream()
            except Exception:
                raise engine_errors.from_datafusion(exc) from None
            kinds = self._plan_kinds(sql, df)
        stream.icegres_hold = df.icegres_hold
        # A plan that may compute for long before its first batch is pulled so that a cancel can
        # end the wait (engine/batches.py).
        if self._pulls_long(sql, df, kinds):
            # A pruned plan is the only kind without the key: its literals make it rarely repeat.
            repeat = getattr(df, "icegres_repeat", None)
            if repeat is None:
                stream = CancellableBatches(stream)
            elif repeat not in self.engine.quick_first_pulls:
                stream = CancellableBatches(stream, functools.partial(self.engine.note_first_pull, repeat))
        return schema, stream

    def _rewritten_after_failure(self, sql: str, params: dict[str, Any] | None, failed: DataFrame) -> DataFrame | None:
        """`sql` planned through the rewrite path after its plan as sent failed to start; None
        when it was rewritten already, or the rewrite changes nothing or does not plan either.

        DataFusion finds some faults only when it optimises and plans the physical plan, after
        `_plan_text` took its plan as sent: EXISTS in a select list ("Physical plan does not
        support logical expression Exists"), a typed literal its optimiser cannot parse. The
        rewrite path spells those as DataFusion can run them; from then on the statement takes it.
        """
        if _needs_rewrite(sql):
            return None
        from icegres.engine import sql as sql_rewrite

        try:
            rewritten = sql_rewrite.rewrite_for_datafusion(sql, self)
        except Exception:
            return None
        if rewritten == sql:
            return None
        hold = self.engine.scan_sets.hold()
        own = getattr(self.ctx, "icegres_keep", None)
        try:
            df = self.ctx.sql(rewritten, param_values=params)
        except Exception:
            return None
        search_path = tuple(self.env.search_path)
        self._remember((sql, search_path), rewritten)
        # What was kept of the failed plan: its logical plan, and its node kinds by shape.
        self._planned.pop(getattr(failed, "icegres_repeat", None), None)
        self._kinds.pop((_literal_shape(sql), search_path), None)
        df.icegres_hold = (hold, own)
        return df

    def _repeat_key(self, sql: str, params: dict[str, Any] | None = None) -> tuple[Any, ...] | None:
        """What makes two runs of a statement the same work: its text, parameter values and
        search_path, and the mounted snapshots of the tables it reads (None: not knowable — a
        transaction's or the write buffer's view, tables the statement text does not name, or a
        parameter value that cannot be compared)."""
        if self.txn is not None or self._overlay is not None:
            return None
        bound = tuple(sorted((params or {}).items()))
        try:
            hash(bound)
        except TypeError:
            return None  # an array parameter (a list)
        locations = self._mounted_snapshots(sql)
        if locations is None:
            return None
        return (sql, bound, tuple(self.env.search_path), tuple(sorted(locations.items())))

    def _mounted_snapshots(self, sql: str) -> dict[tuple[str, str], tuple[str, int]] | None:
        """The mounted snapshot of every table `sql` may read, as `Engine.mounted_locations`
        gives it, if each is mounted (None: it names no table, or one that is not mounted now)."""
        refs = self.table_refs(sql)
        if not refs:
            return None
        locations = self.engine.mounted_locations(refs)
        if any(location is None for location in locations.values()):
            return None
        return locations  # type: ignore[return-value]

    def _plan_kinds(self, sql: str, df: DataFrame) -> frozenset[str]:
        """The node kinds of the statement's unoptimised plan. They follow from its tokens and
        what its names resolve to (tables are always scans), so they are kept per literal shape:
        walking the plan from Python costs ~0.1 ms a statement."""
        from icegres.engine.batches import plan_nodes

        key = (_literal_shape(sql), tuple(self.env.search_path))
        kinds = self._kinds.get(key)
        if kinds is None:
            kinds = self._kinds[key] = frozenset(plan_nodes(df.logical_plan()))
            if len(self._kinds) > _ROUTE_CACHE_SIZE:
                self._kinds.pop(next(iter(self._kinds)))
        return kinds

    def _pulls_long(self, sql: str, df: DataFrame, kinds: frozenset[str]) -> bool:
        """`may_run_long` for this statement, whose plan has these node kinds."""
        from icegres.engine.batches import STREAMING_NODES, may_run_long

        if kinds <= STREAMING_NODES:
            return False  # decided without counting the input's rows
        rows = getattr(df, "icegres_input_rows", None)
        return may_run_long(set(kinds), self._input_rows(sql) if rows is None else rows)

    def _wide_batch_rows(self, sql: str, df: DataFrame, kinds: frozenset[str]) -> int | None:
        """`wide_batch_rows` for this statement, whose plan has these node kinds: a plain scan
        of many rows, read in autocommit (a transaction's or the write buffer's view is planned
        in a context of its own)."""
        from icegres.engine.batches import WIDE_NODES, wide_batch_rows

        if self.txn is not None or self._overlay is not None:
            return None
        if not kinds <= WIDE_NODES:
            return None
        refs = self.table_refs(sql)
        plans = [self.engine.read_plan(*key) for key in refs or ()]
        if not plans or any(plan is None for plan in plans):
            return None
        rows = sum(plan.rows for plan in plans)
        stored = sum(plan.stored_bytes for plan in plans)
        input_rows = getattr(df, "icegres_input_rows", None)
        return wide_batch_rows(kinds, rows if input_rows is None else input_rows,
                               stored / rows if rows else None)

    def _input_rows(self, sql: str) -> int | None:
        """Rows in the mounted snapshots of the tables `sql` may read (None: it may read any).
        A name that is no mounted table is a catalog relation (small) or an error."""
        refs = self.table_refs(sql)
        if refs is None:
            return None
        plans = (self.engine.read_plan(*key) for key in refs)
        return sum(plan.rows for plan in plans if plan is not None)

    def _start_speculating(self, sql: str, params: dict[str, Any] | None) -> tuple[pa.Schema, Any] | None:
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
        before = self._mounted_snapshots(sql)
        if before is None:
            return None
        refs = set(before)
        check = self.engine.check_freshness_async(refs)
        try:
            schema, stream = self._execute(sql, params)
            first = next(iter(stream), None)
            failure: PgError | None = None
        except PgError as exc:
            failure = exc
        except Exception as exc:  # an execution error in the first batch
            failure = engine_errors.from_datafusion(exc)
        check.result()  # a catalog failure is this statement's error, as without speculation
        if self.engine.mounted_locations(refs) != before:
            return self._execute(sql, params)  # a table moved: run on what the check mounted
        if failure is not None:
            raise failure
        return schema, _Prefetched(first, stream)

    def describe(self, sql: str, fresh: bool = True) -> tuple[pa.Schema, dict[int, pa.DataType]]:
        """Result schema and inferred parameter types of a statement, without running it.

        `fresh=False` (a Flight prepare, which GetFlightInfo follows with a fresh start of its own)
        describes the mounted snapshots when every table the statement names is mounted, without
        a catalog round trip: on a REST catalog that is a loadTable per table (~2.4 ms on
        SeaweedFS), paid again by the start."""
        from icegres.engine.params import placeholder_types

        if fresh or self.txn is not None or self._mounted_snapshots(sql) is None:
            self.refresh_for(sql)
        df = self.plan(sql, None)
        # Walking the logical plan for placeholders costs ~4 ms on a point lookup (reflection over
        # every node); a text without `$` has no `$n` placeholder to find.
        return self.pg_schema(sql, df.schema()), placeholder_types(df) if "$" in sql else {}

    def pg_schema(self, sql: str, schema: pa.Schema) -> pa.Schema:
        """Rename DataFusion's display names (`count(*)`) to PostgreSQL's (`count`)."""
        if all(_PLAIN_NAME.fullmatch(f.name) for f in schema):
            return schema
        key = _literal_shape(sql)
        named = (key, tuple(schema.names))
        names = self._pg_names.get(named)
        if names is None:
            if key in self._names:
                select_names = self._names[key]
            else:
                select_names = _select_list_names(sql)
                self._names[key] = select_names
                if len(self._names) > _ROUTE_CACHE_SIZE:
                    self._names.pop(next(iter(self._names)))
            names = self._pg_names[named] = _postgres_names(select_names, schema)
            if len(self._pg_names) > _ROUTE_CACHE_SIZE:
                self._pg_names.pop(next(iter(self._pg_names)))
        return pa.schema([f.with_name(n) for f, n in zip(schema, names, strict=True)], schema.metadata)

    def _plan_pruned(self, sql: str, params: dict[str, Any] | None) -> DataFrame | None:
        """A single-table query over a table of several files, planned over only the files its
        WHERE clause can read (prune.py); None where that does not apply or gains nothing, and
        the statement is planned as sent."""
        if self._overlay is not None or self.txn is not None or not self.engine.prunable:
            return None  # transactions and the write buffer read views of their own
        if not is_utc(self.zone):
            return None  # prune.py reads timestamp literals in UTC; the scan's statistics still prune
        refs = self.table_refs(sql)
        if not refs or len(refs) != 1:
            return None
        (key,) = refs
        plan = self.engine.read_plan(*key)
        if plan is None or len(plan.files) < PRUNE_MIN_FILES:
            return None
        shape = (_literal_shape(sql), tuple(self.env.search_path))
        if self._unprunable.get(shape) is True:
            return None
        found = self._prune_target(sql, key, plan)
        if found is None:
            self._remember_unprunable(shape)
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
        view = self.engine.subset_view(key, files)
        if view is None:
            return None
        df = self._plan_over(tree, table, view[1], shape, params)
        if df is not None:
            # What the statement reads is the subset: an aggregate over a few files of a big table
            # is bounded by their rows (`_pulls_long`).
            counts = [getattr(plan.data_files.get(f.path), "record_count", None) for f in files]
            if all(isinstance(n, int) for n in counts):
                df.icegres_input_rows = sum(counts)
        return df

    def _prune_target(self, sql: str, key: tuple[str, str], plan: ReadPlan) -> Any:
        """(rewritten tree, its FROM table, the names it goes by, prunable columns) when `sql` is a
        SELECT from `key` alone whose WHERE could narrow the files; else None."""
        from sqlglot import exp

        from icegres.engine import pg_rewrite, prune
        from icegres.engine import sql as sql_rewrite

        try:
            tree = sql_rewrite.parse(sql)
        except PgError:
            return None
        if not isinstance(tree, exp.Select) or tree.args.get("joins") or tree.args.get("with"):
            return None
        source = tree.args.get("from") or tree.args.get("from_")
        table = None if source is None else source.this
        if not isinstance(table, exp.Table) or table.args.get("catalog") or not table.name:
            return None
        sql_rewrite.qualify_tables(tree, self)
        if (table.db, table.name) != key:
            return None
        given = table.args.get("alias")
        names = {prune.folded(given.this if given is not None else table.this)}
        kinds = prune.column_kinds(plan)
        if not prune.prunable_shape(tree.args.get("where"), names, kinds):
            return None
        if _needs_rewrite(sql):
            tree = pg_rewrite.rewrite(tree, self.env)  # the rewrite copies; the FROM table is new
            source = tree.args.get("from") or tree.args.get("from_")
            table = source.this
        return tree, table, names, kinds

    def _plan_over(self, tree: Any, table: Any, view: Any, shape: Any,
                   params: dict[str, Any] | None) -> DataFrame | None:
        """Plan `tree` with `table` read from `view`, a DataFrame registered for this planning only.
        `tree` is this statement's own (parsed for it by `_prune_target`): it is changed in place."""
        from sqlglot import exp

        from icegres.engine import pg_rewrite

        ctx = self.ctx
        schema = self._pruned_schema(ctx)
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
            return ctx.sql(pg_rewrite.to_sql(tree), param_values=params)
        except Exception:  # noqa: BLE001 - the statement as sent gives the error, if any
            self._remember_unprunable(shape)
            return None
        finally:
            schema.deregister_table(name)

    def _pruned_schema(self, ctx: SessionContext) -> Any:
        if self._pruned is not None and self._pruned[0] is ctx:
            return self._pruned[1]
        from datafusion.catalog import Catalog, Schema

        catalog = Catalog.memory_catalog()
        schema = Schema.memory_schema()
        catalog.register_schema(_PRUNED_SCHEMA, schema)
        ctx.register_catalog_provider(_PRUNED_CATALOG, catalog)
        self._pruned = (ctx, schema)
        return schema

    def _remember_unprunable(self, shape: Any) -> None:
        self._unprunable[shape] = True
        if len(self._unprunable) > _ROUTE_CACHE_SIZE:
            self._unprunable.pop(next(iter(self._unprunable)))

    def _remember(self, key: tuple[str, tuple[str, ...]], route: str) -> None:
        self._routes[key] = route
        if len(self._routes) > _ROUTE_CACHE_SIZE:
            self._routes.popitem(last=False)

    def forget_routes(self) -> None:
        self._routes.clear()


_REWRITE_MARKERS = (
    "pg_", "information_schema", "regclass", "regtype", "regnamespace", "regproc", "::oid",
    "collate", "operator(", "array(", "current_user", "session_user", "current_schema",
    "current_catalog", "any(", "::name", '::"char"', "version(", "current_setting",
    "set_config", "format_type", "current_database", "bytea",
    # DataFusion runs these, but not as PostgreSQL does: to_char reads chrono templates,
    # generate_series in a select list returns one list, not rows, and the others
    # (pg_rewrite.postgres_semantics).
    "to_char", "generate_series", "to_date", "to_timestamp", "similar to", "array_remove", "fetch ",
)


# extract(second ...) / date_part('second', ...): DataFusion's drops the fraction (pg_rewrite).
_SECONDS_PART = re.compile(r"(?:extract\s*\(\s*seconds?\b|date_part\s*\(\s*'seconds?')", re.IGNORECASE)


def _needs_rewrite(sql: str) -> bool:
    low = sql.lower()
    return any(marker in low for marker in _REWRITE_MARKERS) or _SECONDS_PART.search(sql) is not None


_PLAIN_NAME = re.compile(r"[a-z_][a-z0-9_$]*")


def _fit(parts: list[pa.Table], schema: pa.Schema) -> pa.Table:
    """Buffered rows (the table's write schema when they were inserted) as `schema`, by name:
    the scan's types (Utf8View strings), a column added since as NULL."""
    rows = pa.concat_tables(parts, promote_options="permissive") if len(parts) > 1 else parts[0]
    columns = [
        rows.column(f.name).cast(f.type) if f.name in rows.column_names else pa.nulls(rows.num_rows, f.type)
        for f in schema
    ]
    return pa.Table.from_arrays(columns, schema=pa.schema([f.with_nullable(True) for f in schema]))


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


def _select_list_names(sql: str) -> list[str] | None:
    """PostgreSQL's names for the statement's first top-level select list (None: none parsed).

    Parsed from the text alone, so it may be cached per literal shape; `_postgres_names` lines
    it up with DataFusion's schema, whose own names (`Int64(5)`) do carry literal values.
    """
    from icegres.engine import pg_rewrite

    try:
        selects = pg_rewrite.pg_output_names(pg_rewrite.parse(sql))
    except Exception:
        return None
    return selects[0] if selects else None


def _postgres_names(select_names: list[str] | None, schema: pa.Schema) -> list[str]:
    """PostgreSQL's names for the result columns, from the statement's own select list."""
    from icegres.protocol.pgwire.results import column_name

    fallback = [column_name(f.name) for f in schema]
    if select_names is None or len(select_names) != len(schema):
        return fallback  # `*` expansion or a shape we cannot line up: keep DataFusion's names
    return [pg if pg and pg != "*" else fb for pg, fb in zip(select_names, fallback, strict=True)]


# --- literal shapes ------------------------------------------------------------------------------
#
# Clients on the simple protocol inline every value (`... where id = 123456`, then `= 123457`), so
# caches keyed on the exact text miss on every point lookup. A statement's table references and
# result column names depend on its tokens, not on the values of its literals, so those caches key
# on the text with each value literal replaced by a token no statement can contain (NUL).
# Everything else stays verbatim: keywords, identifiers (quoted or not), comments, casts
# (`'1'::int` keeps `::int`, which names the column `int4`), `$n` parameters.
#
# sqlglot reads a string as a name where PostgreSQL would refuse it (`from 'x'`, `join 'x'`,
# `from t, 'x'`, `with 'x' as`, `select 1 as 'x'`, `select 1 as 5`), so a literal is masked only
# where it is surely a value: right after an operator or a value keyword (`= 5`, `where 'a'`,
# `limit 5`, `date '...'`), or after `(` / `,` inside a select list, a WHERE-like clause or the
# arguments of a call or IN / VALUES list, never inside a FROM-like clause. Kept verbatim too:
# - `true` / `false`: `select 1 as true` names its column "true", `select true` is named `bool`;
# - strings with a backslash or a dollar: E'' escapes decide where the string ends (`E'a\\'b'`),
#   and sqlglot's tokenizer looks for dollar quotes across `$1,$2`; U&'' strings;
# - dollar-quoted strings, and numbers glued to a word, dot or quote (`1abc`, `x.5`, `1.5.3`).
# Anything the scan cannot close (an unterminated quote or comment) keys on the exact text, and
# so does a text longer than _SHAPE_TEXT_MAX (a bulk INSERT gains little and costs a long scan).
# The route cache stays on exact text: its rewrite output embeds the literals.

_SHAPE_TEXT_MAX = 16384
_NUMBER_TOKEN = "\x00n"
_STRING_TOKEN = "\x00s"
_VERBATIM_TAG = "\x00!"  # prefixes a text that itself contains NUL: never equal to a mask
_IDENT_START = "A-Za-z_\x80-\U0010ffff"
_IDENT_CHAR = _IDENT_START + "0-9$"
_SHAPE_TOKEN = re.compile(
    rf"(?P<word>[{_IDENT_START}][{_IDENT_CHAR}]*)"
    r"|(?P<number>(?:\d+(?:\.\d*)?|\.\d+)(?:[eE][+-]?\d+)?)"
    r"|(?P<string>')"
    r'|(?P<ident>"[^"]*(?:""[^"]*)*")'
    r'|(?P<unclosed>")'
    r"|(?P<line_comment>--[^\n]*)"
    r"|(?P<block_comment>/\*)"
    r"|(?P<dollar>\$(?:\d+|(?:[A-Za-z_\x80-\U0010ffff][A-Za-z0-9_\x80-\U0010ffff]*)?\$))"
)
_PLAIN_STRING = re.compile(r"'[^']*(?:''[^']*)*'")
_ESCAPE_STRING = re.compile(r"'(?:[^'\\]|''|\\.)*'", re.S)
_GLUED = re.compile(rf"[{_IDENT_CHAR}.'\"]")
_OPERATOR_CHARS = frozenset("=<>!+-*/%^|&~@#?")
# Reserved words that start a value context: a literal right after one, or after `(` / `,` in
# the clause it starts, is a value.
_CLAUSE_WORDS = frozenset({
    "select", "where", "and", "or", "not", "then", "else", "when", "case", "limit", "offset",
    "having", "on", "returning", "group", "order",
})
# A literal right after one of these is a value too (typed literals among them); they may also
# name a table or column, so they do not start a value context.
_VALUE_WORDS = _CLAUSE_WORDS | {
    "like", "ilike", "between", "first", "next", "escape", "by", "set", "date", "time",
    "timestamp", "timestamptz", "interval", "uuid", "numeric", "decimal", "json", "jsonb", "text",
    "varchar", "inet", "bytea", "zone",
}
# After these, until the next clause word, a literal may be read as a table or CTE name.
_NAME_WORDS = frozenset({"from", "join", "into", "update", "with", "table", "only", "lateral", "using"})


@functools.lru_cache(maxsize=256)  # one statement asks 3-4 times (refs, names, pruning, kinds)
def _literal_shape(sql: str) -> str:
    """`sql` with its value literals masked: two statements with the same shape differ only in
    literal values, so they have the same table references and result column names."""
    if "\x00" in sql:
        return _VERBATIM_TAG + sql
    if len(sql) > _SHAPE_TEXT_MAX:
        return sql
    out: list[str] = []
    pos = 0
    prev = ""  # the last significant token: a lower-cased word, a punctuation char, or "" (a literal)
    values = [False]  # per open parenthesis: whether `(` / `,` there are followed by values
    while (m := _SHAPE_TOKEN.search(sql, pos)) is not None:
        start, end, kind = m.start(), m.end(), m.lastgroup
        gap = sql[pos:start]
        for c in gap:
            if c.isspace():
                continue
            if c == "(":
                # a call, IN or VALUES list: not `from (`, `, (` or `as (`
                values.append(
                    prev in _OPERATOR_CHARS or (prev[:1].isalpha() and prev not in _NAME_WORDS and prev != "as")
                )
            elif c == ")" and len(values) > 1:
                values.pop()
            prev = c
        out.append(gap)
        text = m.group()
        if kind in ("number", "string"):
            masked = prev in _OPERATOR_CHARS or prev in _VALUE_WORDS or (prev in ("(", ",") and values[-1])
            if kind == "number":
                glued = (start > 0 and _GLUED.match(sql, start - 1)) or _GLUED.match(sql, end)
                if masked and not glued:
                    text = _NUMBER_TOKEN
            else:
                escapes = start > 0 and sql[start - 1] in "eE" and (start < 2 or not _GLUED.match(sql, start - 2))
                s = (_ESCAPE_STRING if escapes else _PLAIN_STRING).match(sql, start)
                if s is None:
                    return sql  # unterminated
                end, text = s.end(), s.group()
                unicode = sql[start - 2 : start] in ("u&", "U&")
                if masked and not unicode and "\\" not in text and "$" not in text:
                    text = _STRING_TOKEN
            prev = ""
        elif kind == "word":
            word = text.lower()
            if not (word in ("e", "b", "x", "n") and sql.startswith("'", end)):  # a string's prefix
                prev = word
                if word in _CLAUSE_WORDS:
                    values[-1] = True
                elif word in _NAME_WORDS:
                    values[-1] = False
        elif kind == "ident":
            prev = '"'
        elif kind == "unclosed":
            return sql
        elif kind == "block_comment":
            end = _block_comment_end(sql, start)
            if end < 0:
                return sql
            text = sql[start:end]
        elif kind == "dollar":
            prev = "$"
            if not text[1:2].isdigit():
                if start > 0 and _GLUED.match(sql, start - 1):
                    return sql  # `a$$`: not a dollar quote, and not worth telling apart
                close = sql.find(text, end)
                if close < 0:
                    return sql
                end = close + len(text)
                text, prev = sql[start:end], ""
        out.append(text)
        pos = end
    out.append(sql[pos:])
    return "".join(out)


def _block_comment_end(sql: str, start: int) -> int:
    """End of the (nesting, as in PostgreSQL) block comment opening at `start`; -1 if unclosed."""
    depth, i = 0, start
    while True:
        opening, closing = sql.find("/*", i), sql.find("*/", i)
        if closing < 0:
            return -1
        if 0 <= opening < closing:
            depth, i = depth + 1, opening + 2
        else:
            depth, i = depth - 1, closing + 2
            if depth == 0:
                return i


__all__ = ["Engine", "QueryContext", "SessionEnv", "SERVER_VERSION", "__version__"]
