"""How one Iceberg table snapshot becomes a DataFusion relation.

pyiceberg plans the snapshot's data files (manifest, partition and metrics pruning); DataFusion reads
exactly those Parquet files with its own scan (DESIGN.md: pyiceberg-core's provider was 20-30x
slower on selective queries because it never pushes filters down). Iceberg resolves columns by
field id, not by name, so each file's columns are matched to the current schema through the
field ids in its Parquet footer: renamed columns are read under their old name and aliased, and
columns added after the file was written read as NULL.
"""

from __future__ import annotations

import contextlib
import functools
import logging
import threading
from dataclasses import dataclass, field, replace
from typing import TYPE_CHECKING, Any

import pyarrow as pa

from icegres.engine import damage, long_texts
from icegres.engine.ddl_commands import (
    declared_char_types,
    declared_checks,
    declared_defaults,
    declared_identities,
)
from icegres.engine.ddl_index import table_indexes
from icegres.engine.position_deletes import live_rows, read_position_deletes
from icegres.engine.sequence_store import definition_of, head_of
from icegres.pg.errors import PgError

if TYPE_CHECKING:
    from datafusion import DataFrame, SessionContext
    from pyiceberg.table import Table

    from icegres.engine.file_cache import FileCache
    from icegres.engine.scan_sets import ScanSet, ScanSets
    from icegres.pg.chars import CharType


log = logging.getLogger(__name__)


@dataclass(frozen=True)
class FileRead:
    path: str
    # current column name -> the name it has in this file, or None when the file predates it
    columns: tuple[tuple[str, str | None], ...]
    # The merge-on-read delete files that apply to this file, and the positions of its rows
    # they delete, sorted (position_deletes.py); the positions follow from the paths.
    deletes: tuple[str, ...] = ()
    deleted: Any = field(default=None, compare=False, repr=False)

    @functools.cached_property
    def matches_schema(self) -> bool:
        # (kept: a commit's new plan reuses the FileReads of the plan it replaced, and the mount
        # asks every file of a table of thousands at every commit)
        return all(cur == old for cur, old in self.columns)


@dataclass(frozen=True)
class ReadPlan:
    """Everything needed to mount one snapshot: immutable, so it is cached per metadata file."""

    metadata_location: str
    schema: pa.Schema  # current Iceberg schema as Arrow, with field ids in field metadata
    field_ids: tuple[int, ...]
    files: tuple[FileRead, ...]
    primary_key: tuple[str, ...] = ()
    io_properties: dict[str, str] = field(default_factory=dict, compare=False, repr=False)
    # What writers need to build on this snapshot (the commit machine's base).
    snapshot_id: int | None = None
    table_uuid: str = ""
    schema_id: int = 0
    data_files: dict[str, object] = field(default_factory=dict, compare=False, repr=False)  # path -> DataFile
    table: object = field(default=None, compare=False, repr=False)  # the pyiceberg Table it was planned from
    # COMMENT ON: the table's `comment` property and each column's doc ("" for none), for pg_catalog.
    comment: str = ""
    column_comments: tuple[str, ...] = ()
    indexes: tuple[tuple[str, tuple[str, ...]], ...] = ()  # CREATE INDEX: (name, columns), ddl_index.py
    # per column: its varchar(n) / char(n) / bpchar type (None: as Iceberg's type says), which
    # writes enforce (assign.py) and pg_catalog reports
    char_types: tuple[CharType | None, ...] = ()
    # per column: its DEFAULT expression as SQL text (None: NULL), which writes apply (dml/defaults.py)
    defaults: tuple[str | None, ...] = ()
    # CHECK constraints as (name, SQL text), by name: the order PostgreSQL tests them in (checks.py)
    checks: tuple[tuple[str, str], ...] = ()
    # A sequence (sequence_store.py): its definition, and the one row its relation reads
    # (last_value, log_cnt, is_called) in place of data files.
    sequence: Any = None
    # per column: 'a' (GENERATED ALWAYS AS IDENTITY), 'd' (BY DEFAULT) or '' (ddl_sequences.py)
    identities: tuple[str, ...] = ()
    sequence_row: pa.Table | None = field(default=None, compare=False, repr=False)
    # A branch's head, pinned to be written (engine/branch_writes.py): the branch's name. None:
    # the table's main head, as mounted.
    ref: str | None = None

    @functools.cached_property
    def column_bounds(self) -> dict[int, Any]:
        """prune.py's memo of this snapshot's column bounds per file (field id -> ColumnBounds),
        filled on first use: a snapshot's files never change."""
        return {}

    @functools.cached_property
    def rows(self) -> int:
        """Rows in the snapshot's data files (their manifests' record counts)."""
        return sum(int(getattr(f, "record_count", 0) or 0) for f in self.data_files.values())

    @functools.cached_property
    def stored_bytes(self) -> int:
        """Bytes of the snapshot's data files (their manifests' file sizes)."""
        return sum(int(getattr(f, "file_size_in_bytes", 0) or 0) for f in self.data_files.values())

    @functools.cached_property
    def write_schema(self) -> pa.Schema:
        """The exact Arrow schema pyiceberg's writer expects for this snapshot's schema: built once
        per plan (pyiceberg's schema visitor took ~0.1 ms, a tenth of a buffered INSERT)."""
        from pyiceberg.io.pyarrow import schema_to_pyarrow

        table: Any = self.table
        return schema_to_pyarrow(table.schema(), include_field_ids=False)


_FIELD_ID = b"PARQUET:field_id"


RELATION_KEY = b"icegres.relation"  # field metadata: "schema.table" a scanned column comes from
COLUMN_KEY = b"icegres.column"  # ... and its name there (an alias renames the field, not this)


def arrow_schema(table: Table) -> pa.Schema:
    """The table's columns as its scans produce them, each saying which relation it is of:
    DataFusion keeps field metadata through plain column references, so a result column read
    straight from a table can be described as PostgreSQL does (RowDescription's table OID,
    column number and typmod: pgjdbc's ResultSetMetaData)."""
    from pyiceberg.io.pyarrow import schema_to_pyarrow

    schema = schema_to_pyarrow(table.schema(), include_field_ids=False)
    relation = _table_name(table).encode()
    return pa.schema([_scan_field(f).with_metadata({**(f.metadata or {}), RELATION_KEY: relation,
                                                    COLUMN_KEY: f.name.encode()})
                      for f in schema], metadata=schema.metadata)


def _scan_field(field: pa.Field) -> pa.Field:
    """The Arrow type DataFusion's scan should produce for an Iceberg column.

    Strings are read as Utf8View, DataFusion's native string type: forcing plain Utf8 made a
    group-by on city 1.6x and a join 1.5x slower (bench/SCORECARD.md). pyiceberg's large_* types
    become the plain ones; the Parquet scan casts either way.
    """
    t = field.type
    if pa.types.is_large_string(t) or pa.types.is_string(t):
        t = pa.string_view()
    elif pa.types.is_large_binary(t):
        t = pa.binary()
    elif pa.types.is_large_list(t):
        t = pa.list_(_scan_field(t.value_field))
    return field.with_type(t)


class FooterCache:
    """Parquet footers of data files, by path. Data files are immutable, so entries never go stale."""

    def __init__(self, max_entries: int = 100_000) -> None:
        self._ids: dict[str, dict[int, str]] = {}
        self._lock = threading.Lock()
        self._max = max_entries

    def field_names(self, table: Table, path: str) -> dict[int, str]:
        with self._lock:
            hit = self._ids.get(path)
        if hit is not None:
            return hit
        import pyarrow.parquet as pq

        io = table.io
        with io.new_input(path).open() as f:
            schema = pq.read_schema(f)
        ids = {
            int(field.metadata[_FIELD_ID]): field.name
            for field in schema
            if field.metadata and _FIELD_ID in field.metadata
        }
        with self._lock:
            if len(self._ids) >= self._max:
                self._ids.clear()
            self._ids[path] = ids
        return ids


def _table_name(table: Table) -> str:
    return ".".join(table.name()[1:] if len(table.name()) > 2 else table.name())


def plan_shape(table: Table) -> ReadPlan:
    """What the table's metadata JSON alone says: its columns, keys, comments and indexes, with no
    files (pg_catalog's view of a table not mounted yet; reads no manifest and no data file)."""
    schema = arrow_schema(table)
    iceberg_schema = table.schema()
    field_ids = tuple(f.field_id for f in iceberg_schema.fields)
    relation = _table_name(table)
    properties = long_texts.texts(table.io, table.properties, relation)
    pk = properties.get("icegres.primary-key", "")
    chars = declared_char_types(properties)
    defaults = declared_defaults(properties)
    return ReadPlan(
        metadata_location=table.metadata_location,
        schema=schema,
        field_ids=field_ids,
        files=(),
        primary_key=tuple(c.strip() for c in pk.split(",") if c.strip()),
        io_properties={k: v for k, v in table.io.properties.items() if k.startswith("s3.")},
        snapshot_id=table.metadata.current_snapshot_id,
        table_uuid=str(table.metadata.table_uuid),
        schema_id=table.metadata.current_schema_id,
        table=table,
        comment=properties.get("comment", ""),
        column_comments=tuple(long_texts.text(table.io, f.doc or "", relation) for f in iceberg_schema.fields),
        indexes=table_indexes(properties),
        char_types=tuple(chars.get(fid) for fid in field_ids),
        defaults=tuple(defaults.get(fid) for fid in field_ids) if defaults else (),
        checks=declared_checks(properties),
        sequence=definition_of(relation.rpartition(".")[2], properties),
        identities=declared_identities(properties, field_ids),
    )


def unknown_shape(metadata_location: str) -> ReadPlan:
    """The shape of a table whose metadata JSON cannot be read: a name with no columns, so the
    catalog still lists it (psql's \\dt) while its statements get the damage."""
    return ReadPlan(metadata_location=metadata_location, schema=pa.schema([]), field_ids=(), files=())


def plan_read(table: Table, footers: FooterCache) -> ReadPlan:
    """Plan the current snapshot of `table` (blocking: manifests and footers are read).

    A manifest list, manifest or footer that is missing or cannot be decoded raises the
    PgError `damage.classify` gives it, naming the table and the file."""
    relation = _table_name(table)
    shape = plan_shape(table)
    if shape.sequence is not None:
        head = head_of(table, shape.sequence)
        return replace(shape, sequence_row=pa.table({"last_value": pa.array([head.last_value], pa.int64()),
                                             "log_cnt": pa.array([0], pa.int64()),
                                             "is_called": pa.array([head.is_called])}, schema=shape.schema))
    names = tuple(f.name for f in shape.schema)
    field_ids = shape.field_ids
    files: list[FileRead] = []
    data_files: dict[str, object] = {}
    if table.current_snapshot() is not None:
        try:
            tasks = list(table.scan().plan_files())
        except PgError:
            raise
        except Exception as exc:
            raise damage.locate_manifest_damage(relation, table, exc) from None
        # Merge-on-read deletes another engine wrote: applied as each data file is read.
        deletes = read_position_deletes(table, tasks, relation) if any(t.delete_files for t in tasks) else {}
        for task in tasks:
            path = task.file.file_path
            data_files[path] = task.file
            try:
                by_id = footers.field_names(table, path)
            except Exception as exc:
                raise damage.classify(relation, path, exc) from None
            if by_id:
                columns = tuple((name, by_id.get(fid)) for name, fid in zip(names, field_ids, strict=True))
            else:
                # Files without field ids (migrated tables) resolve by name, per the Iceberg spec's
                # name-mapping fallback.
                columns = tuple((name, name) for name in names)
            files.append(FileRead(path, columns, *deletes.get(path, ((), None))))
    return replace(shape, files=tuple(files), data_files=data_files)


def table_at(table: Table, location: str) -> Table:
    """`table` (as the catalog loaded it) as its metadata file `location` describes it: an earlier
    snapshot than the catalog's current one, able to commit through the catalog like a loaded one."""
    if table.metadata_location == location:
        return table
    from pyiceberg.serializers import FromInputFile
    from pyiceberg.table import Table as IcebergTable

    metadata = FromInputFile.table_metadata(table.io.new_input(location))
    return IcebergTable(table.name(), metadata=metadata, metadata_location=location, io=table.io,
                        catalog=table.catalog)


@functools.lru_cache(maxsize=1 << 16)  # (every file of a mounted table, at every commit of it)
def _scan_path(path: str) -> str:
    """DataFusion reads local files by path and object stores by URL (s3a:// spelled s3://)."""
    if path.startswith("file://"):
        return path.removeprefix("file://")
    if path.startswith(("s3a://", "s3n://")):
        return "s3://" + path.split("://", 1)[1]
    return path


class ObjectStores:
    """Registers one DataFusion object store per S3 bucket the lakehouse's files live in."""

    def __init__(self, s3_properties: dict[str, str], cache: FileCache | None = None) -> None:
        self._props = s3_properties
        self.cache = cache  # local copies of remote data files (file_cache.py), if kept
        self._registered: dict[str, tuple[str | None, ...]] = {}  # bucket -> its credentials' identity
        self._stores: list[tuple[str, object]] = []  # (bucket, store), in registration order
        # bucket -> the AmazonS3 arguments of its current store: an execution process builds the
        # same stores from them (executor.py). Secrets, like the stores themselves: never logged.
        self._configs: dict[str, dict[str, Any]] = {}
        self._lock = threading.Lock()

    @property
    def generation(self) -> int:
        """Grows with every new bucket, so session contexts know to pick up the new stores."""
        return len(self._stores)

    def register_all(self, ctx: SessionContext, since: int = 0) -> int:
        """Register the stores from index `since` on into another context (object stores belong
        to a context's runtime, not to the shared catalog). Returns the new generation."""
        with self._lock:
            stores = list(self._stores[since:])
            generation = len(self._stores)
        for bucket, store in stores:
            ctx.register_object_store("s3://", store, bucket)
        return generation

    def configs(self) -> dict[str, dict[str, Any]]:
        """bucket -> the keyword arguments of its store's AmazonS3, as registered last."""
        with self._lock:
            return {bucket: dict(kwargs) for bucket, kwargs in self._configs.items()}

    def read_path(self, path: str) -> str:
        """Where a scan reads the data file `path`: its local copy if there is one."""
        if self.cache is not None and not is_local(path):
            local = self.cache.lookup(path)
            if local is not None:
                return local
        return _scan_path(path)

    def ensure(self, ctx: SessionContext, path: str, table_props: dict[str, str] | None = None) -> None:
        """Register the store for `path`'s bucket on first sight. `table_props` are the table's
        own FileIO properties: credentials a REST catalog vended with loadTable win over ours.

        Vended credentials expire and every loadTable vends fresh ones: when a table is mounted
        with credentials other than the bucket's store has, a new store replaces it (sessions
        pick it up through `generation`, registered after — and so over — the old one)."""
        if not path.startswith("s3://"):
            return
        bucket = path[len("s3://") :].split("/", 1)[0]
        props = {**self._props, **{k: v for k, v in (table_props or {}).items() if k.startswith("s3.")}}
        identity = (props.get("s3.access-key-id"), _digest(props.get("s3.secret-access-key")),
                    _digest(props.get("s3.session-token")))
        with self._lock:
            known = self._registered.get(bucket)
            if known is not None and (known == identity or not _vended(table_props)):
                return
            from datafusion.object_store import AmazonS3

            endpoint = props.get("s3.endpoint")
            kwargs = dict(
                bucket_name=bucket,
                region=props.get("s3.region") or "us-east-1",
                access_key_id=props.get("s3.access-key-id"),
                secret_access_key=props.get("s3.secret-access-key"),
                session_token=props.get("s3.session-token"),
                endpoint=endpoint,
                allow_http=bool(endpoint and endpoint.startswith("http://")),
            )
            store = AmazonS3(**kwargs)
            ctx.register_object_store("s3://", store, bucket)
            self._registered[bucket] = identity
            self._stores.append((bucket, store))
            self._configs[bucket] = kwargs


def _digest(secret: str | None) -> str | None:
    """A secret's identity without keeping the secret itself around."""
    import hashlib

    return None if secret is None else hashlib.sha256(secret.encode()).hexdigest()[:16]


def _vended(table_props: dict[str, str] | None) -> bool:
    return bool(table_props) and any(k in table_props for k in ("s3.access-key-id", "s3.session-token"))


def to_dataframe(ctx: SessionContext, plan: ReadPlan, stores: ObjectStores | None = None,
                 scans: dict[Any, DataFrame] | None = None, sets: ScanSets | None = None,
                 keep: list[ScanSet] | None = None) -> DataFrame:
    """One DataFrame over exactly the plan's files.

    With `sets`, the local files that need no column mapping are read by one Parquet scan over a
    directory of links to them (scan_sets.py), and that ScanSet is appended to `keep`: the caller
    holds it for as long as the DataFrame may be planned or run. Every other file is a scan of its
    own, and the DataFrame the union of the scans.

    `scans` (kept by the caller per table, over `ctx`) holds each per-file scan from earlier plans
    of the same table: a commit adds a file or a few, and building a scan is a listing-table
    set-up per file, so re-mounting a table of many files rebuilt hundreds of them per commit.
    On return it holds exactly this plan's per-file scans."""
    from datafusion import col, lit

    frames: list[DataFrame] = []
    kept: dict[Any, DataFrame] = {}
    files = plan.files
    # A remote file with a local copy (file_cache.py) is read like a local file.
    read = {f.path: stores.read_path(f.path) if stores is not None else _scan_path(f.path) for f in files}
    if sets is not None:
        linked: list[FileRead] = []
        rest: list[FileRead] = []
        for f in files:
            (linked if f.matches_schema and not f.deletes and is_local(read[f.path]) else rest).append(f)
        scan_set = None
        if len(linked) > 1:
            try:
                scan_set = sets.acquire(plan.metadata_location, [read[f.path] for f in linked])
            except OSError as exc:  # no temp space, no symlinks there: a scan per file still works
                log.warning("scanning %s file by file: %s", plan.metadata_location, exc)
        if scan_set is not None:
            if keep is not None:
                keep.append(scan_set)
            for url in scan_set.urls:  # (a segment is in the sets of many snapshots: its scan too)
                segment_key = (url, "segment", plan.schema_id)
                frame = scans.get(segment_key) if scans is not None else None
                if frame is None:
                    frame = ctx.read_parquet(url, schema=plan.schema)
                frames.append(frame)
                kept[segment_key] = frame
            files = tuple(rest)
    for f in files:
        path = read[f.path]
        cache_key = (path, f.columns, f.deletes, plan.schema_id)  # the Iceberg schema id fixes the Arrow schema
        cached = None if scans is None else scans.get(cache_key)
        if cached is not None:
            frames.append(cached)
            kept[cache_key] = cached
            continue
        if stores is not None:
            stores.ensure(ctx, path, plan.io_properties)
        if f.matches_schema:
            frame = ctx.read_parquet(path, schema=plan.schema)
            if f.deletes:
                frame = live_rows(frame, f.deleted)
        else:
            raw = ctx.read_parquet(path)
            if f.deletes:
                raw = live_rows(raw, f.deleted)
            exprs = []
            for target, (cur, old) in zip(plan.schema, f.columns, strict=True):
                if old is None:
                    exprs.append(lit(None).cast(target.type).alias(cur))
                else:
                    exprs.append(col(f'"{old}"').cast(target.type).alias(cur))
            frame = raw.select(*exprs)
        frames.append(frame)
        kept[cache_key] = frame
    if scans is not None:
        scans.clear()
        scans.update(kept)
    if plan.sequence_row is not None:
        return ctx.from_arrow(plan.sequence_row)
    if not frames:
        return ctx.from_arrow(plan.schema.empty_table())
    df = frames[0]
    for other in frames[1:]:
        df = df.union(other)
    return df


def is_local(path: str) -> bool:
    return path.startswith("/") or path.startswith("file://")


_SHARED_RUNTIME_CONTEXT: type | None = None


def shared_runtime_context(config: object, runner: SessionContext, hold: Any = None,
                           runner_lock: Any = None) -> SessionContext:
    """A SessionContext whose queries execute in `runner`'s runtime; `hold()`, if given, is
    called before each statement is planned and its result kept by the statement's DataFrame.
    `runner_lock`, if given, is held while the DataFrame is made on `runner` (whose settings
    `Engine.rebatched` changes for an instant under the same lock).

    Each client session needs a SessionContext of its own (session-bound UDFs such as
    current_setting(), its default schema), but DataFusion keeps the Parquet footer cache in the
    runtime, and the Python bindings give every SessionContext a fresh runtime: a new client
    connection re-read the footers of every file it touched (two extra S3 GETs per point lookup
    on SeaweedFS, bench/SCORECARD.md). Here a statement is still parsed and planned in this
    context (its UDFs, its default schema), and the resulting logical plan — which holds its
    functions and table providers by reference, not by name — is executed by `runner`, whose
    runtime (footer cache, object stores) is shared by every session.
    """
    global _SHARED_RUNTIME_CONTEXT
    if _SHARED_RUNTIME_CONTEXT is None:
        from datafusion import DataFrame, SessionContext

        class HeldFrame(DataFrame):
            """A DataFrame with its statement's claim on the scan directories it may read
            (scan_sets.py), for as long as it lives."""

            def __init__(self, planned: DataFrame, hold: Any) -> None:
                super().__init__(planned.df)
                self.hold = hold

        class SharedRuntimeContext(SessionContext):
            def __init__(self, config: object, runner: SessionContext, hold: Any = None,
                         runner_lock: Any = None) -> None:
                super().__init__(config)
                self._runner = runner
                self._hold = hold
                self._runner_lock = runner_lock if runner_lock is not None else contextlib.nullcontext()

            def sql(self, query, options=None, param_values=None, **named_params):  # type: ignore[override]
                # Taken before planning, kept by the DataFrame (scan_sets.py): ibis plans here too.
                hold = None if self._hold is None else self._hold()
                df = super().sql(query, options, param_values, **named_params)
                with self._runner_lock:
                    planned = self._runner.create_dataframe_from_logical_plan(df.logical_plan())
                return HeldFrame(planned, hold)

        _SHARED_RUNTIME_CONTEXT = SharedRuntimeContext
    return _SHARED_RUNTIME_CONTEXT(config, runner, hold, runner_lock)
