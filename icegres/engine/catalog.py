"""The lakehouse catalog: the only module that imports pyiceberg.catalog.

The embedded default is pyiceberg's SQL catalog on SQLite with a local warehouse directory.
Everything here blocks (SQL, file and object-store I/O): callers run it in worker threads.
"""

from __future__ import annotations

import enum
import threading
import time
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import TYPE_CHECKING, Any

from icegres import faults
from icegres.config import Settings, redact_uri
from icegres.engine import catalog_views, long_texts
from icegres.engine.catalog_views import ViewEntry
from icegres.engine.internal import is_internal
from icegres.engine.lean_transaction import stage_update

if TYPE_CHECKING:
    from collections.abc import Callable

    from pyiceberg.catalog import Catalog
    from pyiceberg.table import Table

CATALOG_NAME = "icegres"
# Tables a transaction block made (its CREATEs) or moved aside (its DROPs) until its COMMIT is
# decided (catalog_world.py): in the catalog, but never listed, mounted or shown. A REST catalog
# (S3 Tables' rules) wants a name that starts with a letter, so no leading underscore.
HIDDEN_PREFIX = "icegres__block_"
# The JDBC catalog schema with the `iceberg_type` column (Iceberg's V1), which tells views from
# tables. pyiceberg creates new catalogs so and adds the column to an older one (V0) when asked.
SQL_SCHEMA_VERSION = "v1"

# Applied to every table icegres creates. pyiceberg's default row group is 1,048,576 rows, which
# no engine can prune (DESIGN.md: a point lookup on 1M rows went 44 ms -> 10 ms with 64k groups).
DEFAULT_TABLE_PROPERTIES = {
    "write.parquet.row-group-limit": "65536",
    # Pages of 8192 rows (DataFusion's batch) with a page index (parquet_files.py), and a 64 KB
    # dictionary bound so a column of unique values falls back to plain encoding early instead of
    # carrying a dictionary page every lookup in the chunk must read: a point lookup on demo.trips
    # scans 163 KB of its file instead of 1.03 MB (DataFusion's EXPLAIN ANALYZE bytes_scanned).
    "write.parquet.page-row-limit": "8192",
    "write.parquet.dict-size-bytes": str(64 * 1024),
    "write.target-file-size-bytes": str(128 * 1024 * 1024),
    "write.parquet.compression-codec": "zstd",
}


class Busy(enum.Enum):
    """The change token could not be read without waiting (`Lakehouse.change_token_now`)."""

    BUSY = "busy"


BUSY = Busy.BUSY
# How long a worker thread waits for a committing writer to release SQLite's lock (sqlite3's
# default busy timeout, which the watch connection no longer has).
_TOKEN_WAIT_S = 5.0


@dataclass(frozen=True)
class TableEntry:
    namespace: str
    name: str
    metadata_location: str


@dataclass(frozen=True)
class Listing:
    """Every namespace, table and view of the catalog at one instant, with each table's and
    view's metadata file."""

    namespaces: tuple[str, ...]
    tables: tuple[TableEntry, ...]
    views: tuple[ViewEntry, ...] = ()


class CatalogUnavailable(Exception):
    """The catalog could not be opened; the message is one line naming the catalog and the cause."""


class Lakehouse:
    """One catalog object per process (creating one costs a config fetch on REST catalogs)."""

    kind = "sql"  # "sql": the listing is one cheap query; "rest": tables are checked one by one

    def __init__(self, catalog: Catalog, description: str, sqlite_path: Path | None = None) -> None:
        from icegres.engine import parquet_files

        parquet_files.install()  # before any data file is written through this catalog
        self.catalog = catalog
        self.description = description
        self._lock = threading.Lock()
        self._sqlite_path = sqlite_path
        self._watch: Any = None  # sqlite3 connection used only to read PRAGMA data_version

    @classmethod
    def embedded(cls, data_dir: Path) -> Lakehouse:
        from pyiceberg.catalog.sql import SqlCatalog

        data_dir = data_dir.resolve()
        warehouse = data_dir / "warehouse"
        warehouse.mkdir(parents=True, exist_ok=True)
        catalog = _first_open(lambda: SqlCatalog(
            CATALOG_NAME,
            uri=f"sqlite:///{data_dir / 'catalog.db'}",
            warehouse=warehouse.as_uri(),
            schema_version=SQL_SCHEMA_VERSION,
        ))
        return cls(catalog, f"sqlite catalog at {data_dir / 'catalog.db'}", data_dir / "catalog.db")

    @classmethod
    def from_settings(cls, settings: Settings) -> Lakehouse:
        """The catalog the settings name: embedded SQLite, a SQL catalog on PostgreSQL, or REST."""
        uri = settings.catalog_uri
        if not uri:
            return cls.embedded(settings.data_dir)
        if uri.startswith(("postgresql://", "postgres://", "postgresql+")):
            return cls._postgres(settings, uri)
        if uri.startswith(("http://", "https://")):
            return RestLakehouse.open(settings)
        if uri.startswith("sqlite:///"):
            return cls._sqlite(settings, Path(uri.removeprefix("sqlite:///")))
        raise CatalogUnavailable(f"unsupported --catalog-uri scheme in {redact_uri(uri)}: use http(s):// (REST), "
                                 "postgresql:// (SQL catalog) or sqlite:///path/catalog.db")

    @classmethod
    def _sqlite(cls, settings: Settings, db: Path) -> Lakehouse:
        """Another directory's embedded catalog, without its data directory: a second server
        (`icegres verify`'s scratch ones) shares the catalog and warehouse but keeps its own
        intents, temporary tables and tail identity. The file must exist: a typo must not start
        an empty lake."""
        from pyiceberg.catalog.sql import SqlCatalog

        db = db.resolve()  # SQLAlchemy's spelling: sqlite:///relative, sqlite:////absolute
        if not db.is_file():
            raise CatalogUnavailable(f"cannot open the sqlite catalog at {db}: no such file")
        warehouse = settings.warehouse or (db.parent / "warehouse").as_uri()
        catalog = _first_open(lambda: SqlCatalog(CATALOG_NAME, uri=f"sqlite:///{db}", warehouse=warehouse,
                                                 schema_version=SQL_SCHEMA_VERSION))
        return cls(catalog, f"sqlite catalog at {db}", db)

    @classmethod
    def _postgres(cls, settings: Settings, uri: str) -> Lakehouse:
        from pyiceberg.catalog.sql import SqlCatalog

        scheme, _, rest = uri.partition("://")
        sa_uri = f"postgresql+psycopg://{rest}" if scheme in ("postgresql", "postgres") else uri
        if "connect_timeout=" not in sa_uri:
            # libpq waits forever for an unreachable host by default.
            sep = "&" if "?" in sa_uri else "?"
            sa_uri += f"{sep}connect_timeout={max(1, int(settings.catalog_timeout_s))}"
        warehouse = settings.warehouse or (settings.data_dir.resolve() / "warehouse").as_uri()
        if warehouse.startswith("file://"):
            Path(warehouse.removeprefix("file://")).mkdir(parents=True, exist_ok=True)
        description = f"postgres sql catalog at {redact_uri(uri)}"
        from sqlalchemy.exc import IntegrityError, ProgrammingError

        for attempt in range(3):
            try:
                catalog = SqlCatalog(settings.catalog_name, uri=sa_uri, warehouse=warehouse,
                                     pool_pre_ping="true", schema_version=SQL_SCHEMA_VERSION,
                                     **_s3_properties(settings))
                catalog.list_namespaces()
                break
            except (IntegrityError, ProgrammingError) as exc:
                # Two processes opening a fresh catalog database at once both create its tables;
                # PostgreSQL lets one CREATE TABLE IF NOT EXISTS fail on the other's pg_type row.
                # The tables exist now: opening again succeeds.
                if attempt == 2:
                    raise CatalogUnavailable(f"cannot open the {description}: {_one_line(exc)}") from None
            except Exception as exc:
                raise CatalogUnavailable(f"cannot open the {description}: {_one_line(exc)}") from None
        return cls(catalog, description)

    def s3_properties(self) -> dict[str, str]:
        return {k: v for k, v in self.catalog.properties.items() if k.startswith("s3.")}

    def change_token(self) -> int | None:
        """A value that changes whenever any connection commits to the catalog; None if unknown.

        SQLite's `PRAGMA data_version` (~10 us) changes whenever another connection — in this
        process or any other — commits. It lets a statement skip the listing query when nothing
        changed, without giving up exact freshness. The watching connection never writes.
        """
        if self._sqlite_path is None:
            return None
        with self._lock:
            return self._read_token(wait=True)

    def change_token_now(self) -> int | None | Busy:
        """`change_token` if it can be read without waiting, else BUSY: another thread is reading
        it, or a committing writer holds SQLite's lock. For the event loop, which must not wait:
        the read itself is one page of a small, hot file; a wait is what goes to a thread."""
        if self._sqlite_path is None:
            return None
        if not self._lock.acquire(blocking=False):
            return BUSY
        try:
            if self._watch is None:
                return BUSY  # opening the connection is a file open: the thread does it
            return self._read_token(wait=False)
        finally:
            self._lock.release()

    def _read_token(self, *, wait: bool) -> int | Busy:
        import sqlite3

        if self._watch is None:
            # No busy timeout: SQLite answers "locked" at once, and only `wait` retries.
            self._watch = sqlite3.connect(self._sqlite_path, check_same_thread=False, timeout=0)
        deadline = time.monotonic() + _TOKEN_WAIT_S
        while True:
            try:
                return int(self._watch.execute("PRAGMA data_version").fetchone()[0])
            except sqlite3.OperationalError as exc:
                if "locked" not in str(exc) and "busy" not in str(exc):
                    raise
                if not wait:
                    return BUSY
                if time.monotonic() > deadline:
                    raise
                time.sleep(0.001)

    def listing(self, *, internal: bool = False) -> Listing:
        """The user's namespaces, tables and views; with `internal`, icegres's own too
        (engine/internal.py: what must never be mounted, but whose files are not orphans)."""
        return retrying(self._listing, internal)

    def _listing(self, internal: bool = False) -> Listing:
        """The cheap per-statement freshness check: one query for every table's metadata location.

        On SQL catalogs this reads pyiceberg's own tables directly (well under a millisecond on
        SQLite) instead of loading each table's metadata.
        """
        from sqlalchemy import text

        engine = self.catalog.engine  # type: ignore[attr-defined]
        with engine.connect() as conn:
            rows = conn.execute(
                text(
                    "SELECT table_namespace, table_name, metadata_location, iceberg_type "
                    "FROM iceberg_tables WHERE catalog_name = :c"
                ),
                {"c": self.catalog.name},
            ).all()
            namespaces = conn.execute(
                text(
                    "SELECT DISTINCT namespace FROM iceberg_namespace_properties "
                    "WHERE catalog_name = :c"
                ),
                {"c": self.catalog.name},
            ).all()
        if not internal:
            namespaces = [row for row in namespaces if not is_internal(row[0])]
            rows = [row for row in rows if not is_internal(row[0])]
        names = {row[0] for row in namespaces} | {row[0] for row in rows}
        entries = tuple(
            sorted(
                (TableEntry(ns, name, loc) for ns, name, loc, kind in rows
                 if loc and kind != catalog_views.VIEW_TYPE and not name.startswith(HIDDEN_PREFIX)),
                key=lambda e: (e.namespace, e.name),
            )
        )
        views = tuple(sorted(
            (ViewEntry(ns, name, loc) for ns, name, loc, kind in rows
             if loc and kind == catalog_views.VIEW_TYPE and not name.startswith(HIDDEN_PREFIX)),
            key=lambda e: (e.namespace, e.name)))
        return Listing(tuple(sorted(names)), entries, views)

    def load_table(self, namespace: str, name: str) -> Table:
        return self.catalog.load_table((*namespace.split("."), name))

    def create_namespace_if_missing(self, namespace: str) -> None:
        self.catalog.create_namespace_if_not_exists(namespace)

    def create_table(self, namespace: str, name: str, schema: Any, properties: dict[str, str] | None = None) -> Table:
        props = {**DEFAULT_TABLE_PROPERTIES, **(properties or {})}
        return self.catalog.create_table((namespace, name), schema=schema, properties=props)

    def table_exists(self, namespace: str, name: str) -> bool:
        """False in icegres's own namespaces (engine/internal.py), whatever they hold: DDL, ingest
        and CALLs must not find, drop or write its records (the stores load their tables
        directly)."""
        return not is_internal(namespace) and self.catalog.table_exists((namespace, name))

    # DDL (icegres/engine/ddl_apply.py).

    def namespace_exists(self, namespace: str) -> bool:
        """False for icegres's own namespaces, as `table_exists`."""
        return not is_internal(namespace) and self.catalog.namespace_exists(namespace)

    def create_namespace(self, namespace: str) -> None:
        self.catalog.create_namespace(namespace)

    def drop_namespace(self, namespace: str) -> None:
        self.catalog.drop_namespace(namespace)

    def list_table_names(self, namespace: str) -> list[str]:
        """The namespace's tables, without the hidden ones of transaction blocks in flight."""
        return sorted(ident[-1] for ident in self.catalog.list_tables(namespace)
                      if not ident[-1].startswith(HIDDEN_PREFIX))

    def create_partitioned_table(self, namespace: str, name: str, schema: Any, partition_spec: Any,
                                 properties: dict[str, str] | None = None) -> Table:
        """create_table with an Iceberg partition spec; the same default properties apply."""
        props = {**DEFAULT_TABLE_PROPERTIES, **(properties or {})}
        outlined = {k: v for k, v in props.items() if long_texts.long(v)}
        if not outlined:
            return self.catalog.create_table((namespace, name), schema=schema,
                                             partition_spec=partition_spec, properties=props)
        # A long text's file goes under the table's location, known once the creation is staged.
        txn = self.catalog.create_table_transaction((namespace, name), schema=schema, partition_spec=partition_spec,
                                                    properties={k: v for k, v in props.items() if k not in outlined})
        location = txn.table_metadata.location
        txn.set_properties(long_texts.kept_all(txn._table.io, location, outlined))
        return txn.commit_transaction()

    def drop_table(self, namespace: str, name: str) -> None:
        """Remove the table from the catalog. Its metadata and data files stay in storage (no purge)."""
        self.catalog.drop_table((namespace, name))

    def rename_table(self, namespace: str, name: str, new_name: str) -> None:
        self.catalog.rename_table((namespace, name), (namespace, new_name))

    # Views (catalog_views.py): CREATE/DROP/ALTER VIEW and the engine's view registry.

    def view_entries(self) -> list[ViewEntry]:
        """Every view of the catalog with its metadata file."""
        return retrying(catalog_views.sql_list, self.catalog)

    def view_location(self, namespace: str, name: str) -> str | None:
        """The view's current metadata file, or None if there is no such view."""
        return retrying(catalog_views.sql_location, self.catalog, namespace, name)

    def view_metadata(self, namespace: str, name: str, location: str) -> dict[str, Any]:
        """The view metadata document at `location` (the view's, as listed)."""
        io = self.catalog._load_file_io(location=location)  # type: ignore[attr-defined]
        return retrying(catalog_views.read_metadata, io, location)

    def create_view(self, namespace: str, name: str, meta_of: Callable[[str], dict[str, Any]]) -> None:
        """A new view whose metadata `meta_of(view location)` makes; ViewExists if a table or
        view holds the name."""
        catalog_views.sql_create(self.catalog, namespace, name, meta_of)

    def replace_view(self, namespace: str, name: str, old_location: str, old: dict[str, Any],
                     new: dict[str, Any]) -> None:
        """`new` as the view's metadata, if its metadata is still at `old_location` (else
        ViewChanged, nothing applied)."""
        catalog_views.sql_replace(self.catalog, namespace, name, old_location, new)

    def rename_view(self, namespace: str, name: str, new_name: str) -> None:
        catalog_views.sql_rename(self.catalog, namespace, name, new_name)

    def drop_view(self, namespace: str, name: str) -> None:
        """Remove the view from the catalog. Its metadata files stay in storage (no purge)."""
        catalog_views.sql_drop(self.catalog, namespace, name)


RETRY_ATTEMPTS = 3
RETRY_BASE_S = 0.1


def _transient(exc: BaseException) -> bool:
    """Connection-level failures worth retrying; a 4xx answer or a missing table is not one."""
    import requests
    from sqlalchemy.exc import OperationalError

    return isinstance(exc, requests.ConnectionError | requests.Timeout | OperationalError)


def _first_open(open_catalog: Callable[[], Catalog]) -> Catalog:
    """`open_catalog()`, once more after another process created the catalog's tables first.

    pyiceberg creates a new SQLite catalog's tables when its probe finds none, and SQLAlchemy
    checks and then creates: two processes opening a fresh data directory together (`icegres
    seed` and a server, two servers) could both find none, and the second CREATE TABLE failed
    with "table iceberg_tables already exists" — the process did not start. Opened again, the
    probe finds the tables the other one made."""
    for attempt in range(RETRY_ATTEMPTS):
        try:
            return open_catalog()
        except Exception as exc:
            if attempt == RETRY_ATTEMPTS - 1 or "already exists" not in str(exc):
                raise
    raise AssertionError("unreachable")


def retrying(fn: Any, *args: Any) -> Any:
    """Run an idempotent catalog read, retrying transient failures with exponential backoff."""
    import time

    for attempt in range(RETRY_ATTEMPTS):
        try:
            return fn(*args)
        except Exception as exc:
            if attempt == RETRY_ATTEMPTS - 1 or not _transient(exc):
                raise
            time.sleep(RETRY_BASE_S * (3**attempt))
    raise AssertionError("unreachable")


def _one_line(exc: BaseException) -> str:
    text = str(exc).strip().splitlines()
    return f"{type(exc).__name__}: {text[0] if text else ''}"


def _s3_properties(settings: Settings) -> dict[str, str]:
    props: dict[str, str] = {}
    if settings.s3_endpoint:
        props["s3.endpoint"] = settings.s3_endpoint
    if settings.s3_access_key:
        props["s3.access-key-id"] = settings.s3_access_key
    if settings.s3_secret_key:
        props["s3.secret-access-key"] = settings.s3_secret_key
    if settings.s3_region:
        props["s3.region"] = settings.s3_region
    if settings.s3_path_style:
        props["s3.path-style-access"] = "true"
    return props


def rest_properties(settings: Settings) -> dict[str, str]:
    """pyiceberg RestCatalog properties for the settings' auth mode (bearer, OAuth2, SigV4)."""
    props: dict[str, str] = {"uri": settings.catalog_uri or ""}
    if settings.warehouse:
        props["warehouse"] = settings.warehouse
    if settings.catalog_token:
        props["token"] = settings.catalog_token
    if settings.catalog_credential:
        props["credential"] = settings.catalog_credential
        props["oauth2-server-uri"] = settings.catalog_oauth2_uri or (
            settings.catalog_uri.rstrip("/") + "/v1/oauth/tokens")
    if settings.catalog_scope:
        props["scope"] = settings.catalog_scope
    if settings.catalog_sigv4:
        name, _, region = settings.catalog_sigv4.partition(":")
        props.update({
            "rest.sigv4-enabled": "true",
            "rest.signing-name": name,
            "rest.signing-region": region or settings.s3_region or "us-east-1",
            # pyiceberg retries a failing signed call 10 times by default: a down catalog
            # would take minutes to report.
            "rest.sigv4.max-retries": "2",
        })
        if settings.s3_access_key:
            props["client.access-key-id"] = settings.s3_access_key
        if settings.s3_secret_key:
            props["client.secret-access-key"] = settings.s3_secret_key
        props["client.region"] = region or settings.s3_region or "us-east-1"
    props.update(_s3_properties(settings))
    return props


def auth_mode(settings: Settings) -> str:
    if settings.catalog_sigv4:
        return f"sigv4 ({settings.catalog_sigv4.split(':')[0]})"
    if settings.catalog_credential:
        return "oauth2 client-credentials"
    if settings.catalog_token:
        return "bearer token"
    return "no auth"


class RestLakehouse(Lakehouse):
    """An Iceberg REST catalog. No cheap listing exists, so statements check the tables they name."""

    kind = "rest"

    @classmethod
    def open(cls, settings: Settings) -> RestLakehouse:
        from pyiceberg.catalog.rest import RestCatalog

        uri = settings.catalog_uri or ""
        description = f"rest catalog at {redact_uri(uri)} ({auth_mode(settings)})"
        try:
            catalog = RestCatalog(settings.catalog_name, **rest_properties(settings))
            _apply_timeout(catalog, settings.catalog_timeout_s)
            catalog.list_namespaces()
        except Exception as exc:
            raise CatalogUnavailable(f"cannot open the {description}: {_one_line(exc)}") from None
        return cls(catalog, description)

    def change_token(self) -> int | None:
        return None

    def _listing(self, internal: bool = False) -> Listing:
        """Every namespace and table, loading each table for its metadata location (slow on REST)."""
        namespaces = [".".join(ns) for ns in self.catalog.list_namespaces()]
        if not internal:
            namespaces = [ns for ns in namespaces if not is_internal(ns)]
        entries = []
        views = []
        for ns in namespaces:
            for ident in self.catalog.list_tables(ns):
                if ident[-1].startswith(HIDDEN_PREFIX):
                    continue
                location = self.metadata_location(ns, ident[-1])
                if location:
                    entries.append(TableEntry(ns, ident[-1], location))
            views += [v for v in catalog_views.rest_list(self.catalog, ns) if not v.name.startswith(HIDDEN_PREFIX)]
        return Listing(tuple(sorted(namespaces)), tuple(sorted(entries, key=lambda e: (e.namespace, e.name))),
                       tuple(sorted(views, key=lambda e: (e.namespace, e.name))))

    def metadata_location(self, namespace: str, name: str) -> str | None:
        """The table's current metadata file, or None if it does not exist. One catalog call.

        The spec-standard loadTable, but only its `metadata-location` is read: building
        pyiceberg's full TableMetadata model costs milliseconds of CPU per statement, and the
        freshness check needs it only when the location changed (then the mount loads it).
        """
        return retrying(self._metadata_location, namespace, name)

    def _metadata_location(self, namespace: str, name: str) -> str | None:
        import json

        from pyiceberg.exceptions import NoSuchTableError

        catalog: Any = self.catalog
        ident = (*namespace.split("."), name)
        url = catalog.url("namespaces/{namespace}/tables/{table}", prefixed=True,
                          **catalog._split_identifier_for_path(ident))
        response = catalog._session.get(url)
        if response.status_code == 404:
            return None
        if response.status_code != 200:
            try:  # pyiceberg's own mapping of the error (auth, 5xx) for a clear message
                return self.catalog.load_table(ident).metadata_location
            except NoSuchTableError:
                return None
        body = json.loads(response.content)
        vended = {k: v for k, v in (body.get("config") or {}).items() if k.startswith("s3.")}
        if vended:
            with self._lock:
                self._vended[(namespace, name)] = vended
        return body.get("metadata-location")

    def vended_credentials(self, namespace: str, name: str) -> dict[str, str] | None:
        """The S3 properties the catalog vended with the table's latest loadTable, if any."""
        with self._lock:
            return self._vended.get((namespace, name))

    def load_table(self, namespace: str, name: str) -> Table:
        return retrying(super().load_table, namespace, name)

    def __init__(self, catalog: Catalog, description: str) -> None:
        super().__init__(catalog, description)
        self._vended: dict[tuple[str, str], dict[str, str]] = {}
        # Each view's latest loadView answer (its metadata location and document).
        self._view_docs: dict[tuple[str, str], tuple[str, dict[str, Any]]] = {}

    # Views through the REST spec's view endpoints (catalog_views.py).

    def view_entries(self) -> list[ViewEntry]:
        entries = []
        for ns in self.catalog.list_namespaces():
            if not is_internal(".".join(ns)):
                entries += catalog_views.rest_list(self.catalog, ".".join(ns))
        return entries

    def view_location(self, namespace: str, name: str) -> str | None:
        loaded = retrying(catalog_views.rest_load, self.catalog, namespace, name)
        if loaded is None:
            return None
        with self._lock:
            self._view_docs[(namespace, name)] = loaded
        return loaded[0]

    def view_metadata(self, namespace: str, name: str, location: str) -> dict[str, Any]:
        with self._lock:
            known = self._view_docs.get((namespace, name))
        if known is not None and known[0] == location:
            return known[1]
        loaded = retrying(catalog_views.rest_load, self.catalog, namespace, name)
        if loaded is None:
            raise catalog_views.NoSuchView(f"{namespace}.{name}")
        return loaded[1]

    def create_view(self, namespace: str, name: str, meta_of: Callable[[str], dict[str, Any]]) -> None:
        if self.table_exists(namespace, name):
            raise catalog_views.ViewExists(f"{namespace}.{name}")
        catalog_views.rest_create(self.catalog, namespace, name, meta_of(""))

    def replace_view(self, namespace: str, name: str, old_location: str, old: dict[str, Any],
                     new: dict[str, Any]) -> None:
        catalog_views.rest_replace(self.catalog, namespace, name, old, new)

    def rename_view(self, namespace: str, name: str, new_name: str) -> None:
        if self.table_exists(namespace, new_name):
            raise catalog_views.ViewExists(f"{namespace}.{new_name}")
        catalog_views.rest_rename(self.catalog, namespace, name, new_name)

    def drop_view(self, namespace: str, name: str) -> None:
        catalog_views.rest_drop(self.catalog, namespace, name)


def _apply_timeout(catalog: Any, timeout_s: float) -> None:
    """pyiceberg's REST session sets no timeout: a hung catalog would hang a statement forever."""
    import functools

    session = catalog._session
    session.request = functools.partial(session.request, timeout=timeout_s)


# --- atomic multi-table commits (used only by the commit machine's lake world) -----------------


@dataclass(frozen=True)
class TableChange:
    """One table's part of an atomic commit: pyiceberg updates and the requirements they assume."""

    namespace: str
    name: str
    requirements: tuple[Any, ...]
    updates: tuple[Any, ...]
    # The pyiceberg table the updates were built on, when the caller has it loaded: a SQL catalog
    # commit stages on it instead of reading the head's metadata file again (its compare-and-set
    # on the metadata location still catches a table that moved since).
    base: Any = field(default=None, compare=False, repr=False)


class CommitRejected(Exception):
    """A requirement failed: the catalog applied nothing (someone else committed first)."""


class CommitNotApplied(Exception):
    """The commit definitely did not reach the catalog (refused, or failed before it was sent)."""


class CommitUnknown(Exception):
    """The commit may or may not have been applied (timeout, dropped connection, 5xx)."""


def _commit_tables_sql(lakehouse: Lakehouse, changes: list[TableChange]) -> dict[tuple[str, str], tuple[str, Any]]:
    """All tables in ONE database transaction of the SQL catalog: every row moves or none does.

    pyiceberg's SqlCatalog commits one table per transaction; this is its commit_table
    generalised to several tables (its staging helpers are reused, so metadata files are
    written exactly as pyiceberg writes them). Metadata files are written before the
    transaction: on a conflict they are unreferenced garbage, never a partial commit.
    """
    from pyiceberg.exceptions import CommitFailedException, NoSuchTableError
    from sqlalchemy import text
    from sqlalchemy.exc import DBAPIError

    catalog: Any = lakehouse.catalog
    staged = []
    for change in changes:
        ident = (*change.namespace.split("."), change.name)
        current = change.base
        if current is None:
            try:
                current = catalog.load_table(ident)
            except NoSuchTableError as exc:
                raise CommitRejected(f"table {change.namespace}.{change.name} no longer exists") from exc
        try:
            table = stage_update(catalog, current, ident, change.requirements, change.updates)
        except CommitFailedException as exc:
            raise CommitRejected(str(exc)) from exc
        if not change.updates:
            # A read guard (SERIALIZABLE): the row must still hold the location we validated.
            staged.append((change, current.metadata_location, current.metadata_location, None))
            continue
        catalog._write_metadata(metadata=table.metadata, io=table.io, metadata_path=table.metadata_location)
        staged.append((change, current.metadata_location, table.metadata_location, table.metadata))
    update = text(
        "UPDATE iceberg_tables SET metadata_location = :new, previous_metadata_location = :old "
        "WHERE catalog_name = :c AND table_namespace = :ns AND table_name = :t AND metadata_location = :old"
    )
    faults.point("mid-publish")
    conn = catalog.engine.connect()
    try:
        tx = conn.begin()
        try:
            for index, (change, old, new, _) in enumerate(staged):
                if index and faults.broken("atomic-publish"):
                    tx.commit()  # on purpose: the tables before this one are published alone
                    time.sleep(1.0)
                    tx = conn.begin()
                result = conn.execute(update, {"new": new, "old": old, "c": catalog.name,
                                               "ns": change.namespace, "t": change.name})
                if result.rowcount != 1:
                    tx.rollback()
                    if any(c.base is not None for c in changes):
                        raise _StaleBase
                    raise CommitRejected(f"table {change.namespace}.{change.name} was changed by a concurrent commit")
        except DBAPIError as exc:
            tx.rollback()
            raise CommitNotApplied(_one_line(exc)) from exc
        try:
            tx.commit()
        except DBAPIError as exc:
            # The COMMIT itself failed: the server may have applied it before the connection broke.
            raise CommitUnknown(_one_line(exc)) from exc
    except _StaleBase:
        stale = True
    else:
        stale = False
    finally:
        conn.close()
    if stale:
        # Staged on what we had loaded, which is no longer the head: decide on the head itself,
        # as pyiceberg would (the requirements may still hold there). The files just written are
        # unreferenced garbage, as after any conflict.
        return _commit_tables_sql(lakehouse, [replace(c, base=None) for c in changes])
    return {(c.namespace, c.name): (new, meta) for c, _, new, meta in staged if meta is not None}


class _StaleBase(Exception):
    """A table moved past the loaded metadata a change was staged on."""


def _commit_tables_rest(lakehouse: Lakehouse, changes: list[TableChange]) -> dict[tuple[str, str], tuple[str, Any]]:
    """All tables in one POST to the REST catalog's `transactions/commit` endpoint (spec-standard).

    One table with updates goes to that table's own commit endpoint instead: as atomic, and its
    answer carries the new metadata, so the commit is adopted without a loadTable round trip."""
    import json

    from pyiceberg.table import CommitTableRequest, TableIdentifier

    catalog: Any = lakehouse.catalog
    requests_ = [
        CommitTableRequest(
            identifier=TableIdentifier(namespace=tuple(c.namespace.split(".")), name=c.name),
            requirements=c.requirements,
            updates=c.updates,
        )
        for c in changes
    ]
    if len(changes) == 1 and changes[0].updates:
        (request,) = requests_
        url = catalog.url("namespaces/{namespace}/tables/{table}", prefixed=True,
                          **catalog._split_identifier_for_path(request.identifier))
        faults.point("mid-publish")
        response = _post_commit(catalog, url, request.model_dump_json().encode())
        if response.status_code == 200:
            from pyiceberg.table import CommitTableResponse

            landed = CommitTableResponse.model_validate_json(response.text)
            return {(changes[0].namespace, changes[0].name): (landed.metadata_location, landed.metadata)}
        return _commit_refused(response)
    # pyiceberg's own serialisation, exactly as its commit_table sends it
    body = {"table-changes": [json.loads(r.model_dump_json()) for r in requests_]}
    faults.point("mid-publish")
    response = _post_commit(catalog, catalog.url("transactions/commit"), json.dumps(body).encode())
    if response.status_code in (200, 204):
        return {}  # the endpoint returns no metadata: the next statement loads the tables
    return _commit_refused(response)


def _post_commit(catalog: Any, url: str, body: bytes) -> Any:
    """POST a commit; a request that may have reached the catalog is CommitUnknown."""
    import requests

    try:
        return catalog._session.post(url, data=body)
    except (requests.ConnectionError, requests.Timeout) as exc:
        if isinstance(exc, requests.ConnectTimeout) or (
                isinstance(exc, requests.ConnectionError) and "Connection refused" in str(exc)):
            raise CommitNotApplied(_one_line(exc)) from exc
        raise CommitUnknown(_one_line(exc)) from exc


def _commit_refused(response: Any) -> Any:
    """Raise what a commit's non-success answer means."""
    status = response.status_code
    detail = response.text[:300]
    if status == 409:
        raise CommitRejected(detail)
    if status >= 500:
        raise CommitUnknown(f"HTTP {status}: {detail}")
    raise CommitNotApplied(f"HTTP {status}: {detail}")


def commit_tables(lakehouse: Lakehouse, changes: list[TableChange]) -> dict[tuple[str, str], tuple[str, Any]]:
    """Publish every change atomically, or raise CommitRejected / CommitNotApplied / CommitUnknown.

    Returns, where the catalog says so, each table's new metadata location and metadata."""
    if lakehouse.kind == "rest":
        return _commit_tables_rest(lakehouse, changes)
    return _commit_tables_sql(lakehouse, changes)
