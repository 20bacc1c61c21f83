"""Reading a table as it was: a snapshot, a branch or tag, a time, or one of its metadata tables.

A statement whose references ask for another point than a table's head (sql/time_travel.py)
has each such reference replaced by a relation of the session's own (`register_private`) over
exactly that snapshot's files, aliased as the reference was, so the rest of the statement reads
on unchanged. The snapshot is read with the schema it was written with (Iceberg's rule, and
Trino's and Spark's). Such a read is not a read of the table's head: it pins nothing and joins no
SERIALIZABLE read set (a transaction reads that fixed snapshot). Nothing is copied: the relation
scans the snapshot's own Parquet files (one scan over a directory of links, as a mounted table).

Cost: the first statement of a literal shape is parsed and written out by sqlglot (~1.9 ms), and
the rewritten statement carries the rewritten tree on (`Statement.rewritten`: its text is not
parsed again); when it names snapshots by id only, the rewrite's shape is kept and the next
statement of that shape is rewritten by putting its literals into it (`_Template`), with no parse. The table function
`branch_diff('a', 'b' [, 'ns'])` is read here too: `icegres branch diff` as rows.

Errors, as PostgreSQL would name them: an unknown snapshot id, branch or tag is 42704
(undefined_object); a time before the table's first snapshot is 22023 (invalid_parameter_value);
an AS OF value that is a parameter is 0A000; writing through a time-travel reference is 0A000,
except to a branch (`INSERT INTO "t@b"`: branch_writes.py).
"""

from __future__ import annotations

import datetime as dt
import hashlib
import re
from dataclasses import dataclass, replace
from typing import TYPE_CHECKING, Any, Protocol

import pyarrow as pa

from icegres.engine import branch_writes, metadata_tables, view_defs
from icegres.engine.contexts import private_table
from icegres.engine.lake import PRIVATE_CATALOG, PRIVATE_SCHEMA
from icegres.pg.errors import (
    DATATYPE_MISMATCH,
    FEATURE_NOT_SUPPORTED,
    INVALID_PARAMETER_VALUE,
    SYNTAX_ERROR,
    UNDEFINED_FUNCTION,
    UNDEFINED_OBJECT,
    UNDEFINED_TABLE,
    PgError,
)
from icegres.sql import time_travel
from icegres.sql.databases import DATABASE_ALIASES
from icegres.sql.parse import DIALECT
from icegres.sql.shape import fill_shape, literal_shape, masked_literals
from icegres.sql.statement import Statement, inserts_constants
from icegres.sql.time_travel import Point, Travel

if TYPE_CHECKING:
    from datafusion import DataFrame, SessionContext
    from pyiceberg.table import Table
    from sqlglot import exp

    from icegres.engine.contexts import Made
    from icegres.engine.lake import Engine, SessionEnv
    from icegres.engine.mounts import ReadPlan
    from icegres.engine.plan_cache import PlanCache
    from icegres.engine.planned import PlannedQuery
    from icegres.engine.txn import TxnState

Key = tuple[str, str]


class QueryContext(Protocol):
    """What of a session's QueryContext (query.py, which calls in here) this reads."""

    engine: Engine
    env: SessionEnv
    cache: PlanCache
    txn: TxnState | None

    @property
    def ctx(self) -> SessionContext: ...
    def zoned(self, df: DataFrame) -> DataFrame: ...
    def register_on(self, made: Made, name: str, df: DataFrame) -> None: ...
    def resolve_table(self, schema: str | None, name: str) -> Key | None: ...
    def resolve_mounted(self, schema: str | None, name: str) -> Key | None: ...
    def plan_tree(self, tree: exp.Expression, params: dict[str, Any] | None = None) -> PlannedQuery: ...


@dataclass(frozen=True)
class _Template:
    """A rewrite kept per literal shape: the rewritten text's shape, into which another statement
    of the same shape puts its own literals, and the snapshots it reads. Only rewrites that name
    snapshots by id are kept: what a ref, a time or a metadata table names changes over time."""

    shape: str
    plans: tuple[tuple[Key, ReadPlan], ...]
    names: tuple[str, ...]


def expand(qctx: QueryContext, stmt: Statement) -> Statement:
    """`stmt` with every time-travel reference read through a relation of its own, or `stmt`."""
    branch = session_branch(qctx)
    if branch is None and not time_travel.mentions(stmt.sql):
        return stmt
    quick = _from_template(qctx, stmt) if branch is None else None
    if quick is not None:
        return quick
    try:
        tree = stmt.tree
    except PgError:
        return stmt
    from sqlglot import exp

    if branch is None and not any(_asks(qctx, t) or time_travel.table_function(t) for t in tree.find_all(exp.Table)):
        return stmt
    tree = stmt.tree_copy()
    target = view_defs.dml_target(tree)
    if branch is not None and not _to_session_branch(qctx, tree, target, branch):
        return stmt
    if target is not None:
        # A blind INSERT (VALUES, no query) reads nothing of the branch: it need not wait for the
        # branch's buffered rows; every other write reads them.
        blind = inserts_constants(tree)
        _write_to_branch(qctx, target, settle=not blind)
    read: list[tuple[Key, ReadPlan]] = []
    fixed = branch is None
    for table in list(tree.find_all(exp.Table)):
        function = time_travel.table_function(table)
        if function is not None:
            table.replace(_branch_diff(qctx, table, function[1]))
            fixed = False
            continue
        travel = _asks(qctx, table)
        if travel is None:
            continue
        if table is target and _is_branch(travel) and qctx.txn is None:
            continue  # a branch write looked at outside its transaction (the tables it reads)
        if table is target:
            raise PgError(FEATURE_NOT_SUPPORTED, f'cannot write to "{table.name}": only a branch can be written',
                          hint=f'Write to the table itself, or to a branch of it: "{travel.name}@branch".')
        fixed = fixed and _by_id(travel)
        table.replace(_relation(qctx, table, travel, read))
    text = tree.sql(dialect=DIALECT)
    if fixed and qctx.txn is None:
        _keep_template(qctx, stmt, text, read)
    return stmt.rewritten(text, tree)  # its tree goes on with it: the text is not parsed again


def session_branch(qctx: QueryContext) -> str | None:
    """The session's `icegres.branch` (`SET icegres.branch = 'b'`, `serve --branch b`), or None
    for main."""
    branch = qctx.env.settings.get("icegres.branch", "").strip()
    return branch if branch and branch != branch_writes.MAIN else None


def _to_session_branch(qctx: QueryContext, tree: exp.Expression, target: exp.Table | None, branch: str) -> bool:
    """Under `icegres.branch = b`: every reference of `tree` to a lake table by its plain name,
    whose table has branch b, renamed `"t@b"` (aliased as it was, so the statement reads on
    unchanged); the DML target must have it (42704). Whether it names anything to expand."""
    from sqlglot import exp

    ctes = {cte.alias_or_name for cte in tree.find_all(exp.CTE)}
    any_travel = False
    for table in list(tree.find_all(exp.Table)):
        if time_travel.table_function(table) is not None:
            any_travel = True
            continue
        if not isinstance(table.this, exp.Identifier) or table.text("catalog") == PRIVATE_CATALOG:
            continue
        if _asks(qctx, table) is not None:
            any_travel = True  # it names its own point
            continue
        if not table.db and table.name in ctes:
            continue
        key = _resolve(qctx, table.db or None, table.name)
        if key is None or key[0] == "pg_temp":
            continue
        refs = _head(qctx, key).table.metadata.refs  # type: ignore[union-attr]
        if branch not in refs:
            if table is target:
                raise PgError(UNDEFINED_OBJECT, f'table "{key[0]}.{key[1]}" has no branch "{branch}" to write to',
                              detail="The session writes to the branch icegres.branch names.",
                              hint=f"ALTER TABLE {key[0]}.{key[1]} CREATE BRANCH {branch}, or RESET icegres.branch")
            continue  # read at its main head, as the branch would have it
        if table.args.get("alias") is None:
            table.set("alias", exp.TableAlias(this=exp.to_identifier(table.name, quoted=True)))
        table.set("this", exp.to_identifier(f"{table.name}@{branch}", quoted=True))
        any_travel = True
    return any_travel


def write_target(qctx: QueryContext, target: exp.Table) -> None:
    """A table a statement writes without being parsed as DML here (COPY ... FROM): `"t@b"`, or
    a plain name under `icegres.branch`, made the transaction's pin of that branch, in place."""
    branch = session_branch(qctx)
    if branch is not None:
        _to_session_branch(qctx, target, target, branch)
    _write_to_branch(qctx, target, settle=False)


def _write_to_branch(qctx: QueryContext, target: exp.Table, *, settle: bool) -> None:
    """A DML statement's target `"t@b"`, b a branch: the transaction's pin of that branch
    (branch_writes.py), which the statement then names as the table `"schema"."t@b"`; `"t@main"`
    is t. Any other point (a snapshot id, a time) is left to be refused as a target."""
    from sqlglot import exp

    travel = _asks(qctx, target)
    txn = qctx.txn
    if travel is None or not _is_branch(travel) or txn is None:
        return
    key = _resolve(qctx, target.db or None, travel.name)
    if key is None:
        shown = f"{target.db}.{travel.name}" if target.db else travel.name
        raise PgError(UNDEFINED_TABLE, f'relation "{shown}" does not exist')
    if travel.ref != branch_writes.MAIN:
        if settle:
            _settle_branch(qctx, key, travel.ref)
        key = branch_writes.pin(qctx.engine, txn, key, travel.ref)
    if target.args.get("alias") is None:  # its columns are still named by the name it was given
        target.set("alias", exp.TableAlias(this=exp.to_identifier(target.name, quoted=True)))
    target.set("this", exp.to_identifier(key[1], quoted=True))
    target.set("db", exp.to_identifier(key[0], quoted=True))


def _is_branch(travel: Travel) -> bool:
    """A reference `"t@name"` (a branch, a tag, or main: not a snapshot id, a time or AS OF)."""
    return travel.point is Point.VERSION and travel.ref is not None and not travel.ref.isdigit()


def _settle_branch(qctx: QueryContext, key: Key, ref: str) -> bool:
    """Before a statement reads branch `ref` of `key`: the rows the write buffer acked for that
    branch go to the lake first (reads of a branch are not unioned with the buffer, as main's
    are). Whether there were any."""
    ladder = qctx.engine.ladder
    branch = {branch_writes.ref_key(key, ref)}
    if ladder is None or not ladder.has_entries() or ref.isdigit() or not ladder.visible(branch):
        return False
    ladder.settle_blocking(branch)
    return True


def _by_id(travel: Travel) -> bool:
    """A reference whose snapshot is its literal id: what it reads never changes."""
    from sqlglot import exp

    if travel.point is not Point.VERSION:
        return False
    if travel.ref is not None:
        return travel.ref.isdigit()
    value = travel.value
    return isinstance(value, exp.Literal) and not value.is_string and value.this.isdigit()


def _from_template(qctx: QueryContext, stmt: Statement) -> Statement | None:
    """The rewrite of `stmt` from a statement of its shape rewritten before, without a parse."""
    if qctx.txn is not None:
        return None
    template = qctx.cache.travel_templates.get((stmt.shape, tuple(qctx.env.search_path)))
    if template is None or any(qctx.cache.travelled.get(n) is None for n in template.names):
        return None
    literals = masked_literals(stmt.sql)
    text = None if literals is None else fill_shape(template.shape, literals)
    if text is None:
        return None
    qctx.engine.check_files(template.plans)  # 58P01 for a file a snapshot names that is gone
    # Text only: a statement planned as sent needs no tree (the rewrite path parses it if need be).
    return replace(stmt, sql=text)


def _keep_template(qctx: QueryContext, stmt: Statement, text: str, read: list[tuple[Key, ReadPlan]]) -> None:
    literals = masked_literals(stmt.sql)
    shape = literal_shape(text)
    # Kept only if the rewrite carries the statement's literals over, in order, as written.
    if literals is None or fill_shape(shape, literals) != text or masked_literals(text) != literals:
        return
    names = tuple(_NAMED.findall(text))
    qctx.cache.travel_templates.put((stmt.shape, tuple(qctx.env.search_path)), _Template(shape, tuple(read), names))


def _asks(qctx: QueryContext, table: exp.Table) -> Travel | None:
    """What `table` asks for, unless it names a real table (one may be called "a@b")."""
    travel = time_travel.travel_of(table)
    if travel is not None:
        if travel.value is None and _resolve(qctx, table.db or None, table.name) is not None:
            return None
        return travel
    spark = time_travel.spark_metadata(table)
    if spark is not None:
        schema, name, which = spark
        if schema in (qctx.env.database, *DATABASE_ALIASES):
            return None  # database.schema.table: PostgreSQL's three-part name
        if _resolve(qctx, schema, name) is not None:
            return Travel(Point.METADATA, name, metadata=which)
    return None


def _resolve(qctx: QueryContext, schema: str | None, name: str) -> Key | None:
    """The table a name means: in a block, one it has not read yet too (a time-travel read
    does not pin it)."""
    return qctx.resolve_table(schema, name) or qctx.resolve_mounted(schema, name)


def _relation(qctx: QueryContext, table: exp.Table, travel: Travel,
              read: list[tuple[Key, ReadPlan]]) -> exp.Expression:
    from sqlglot import exp

    spark = time_travel.spark_metadata(table) if travel.point is Point.METADATA else None
    schema = spark[0] if spark is not None else (table.db or None)
    key = _resolve(qctx, schema, travel.name)
    if key is None:
        shown = f"{schema}.{travel.name}" if schema else travel.name
        raise PgError(UNDEFINED_TABLE, f'relation "{shown}" does not exist')
    head = _head(qctx, key)
    iceberg = head.table
    travelled = qctx.cache.travelled
    if travel.point is Point.METADATA:
        assert travel.metadata is not None
        which = travel.metadata
        # Named for the metadata file it describes: a name's content never changes.
        name = _name("meta", key, f"{which}_{hashlib.sha1(head.metadata_location.encode()).hexdigest()[:12]}")
        if travelled.get(name) is None:
            arrow = metadata_tables.build(iceberg, which)  # type: ignore[arg-type]
            travelled.put(name, lambda ctx, keep: ctx.from_arrow(arrow))
    else:
        if travel.ref is not None and (qctx.txn is None or qctx.txn.autocommit) and _settle_branch(qctx, key, travel.ref):
            iceberg = _head(qctx, key).table  # (its flush moved the branch)
        snapshot_id = _snapshot_id(qctx, key, iceberg, travel)  # type: ignore[arg-type]
        plan = _snapshot_plan(qctx, key, iceberg, snapshot_id)  # type: ignore[arg-type]
        qctx.engine.check_files([(key, plan)])  # 58P01 for a file it names that is gone, never "empty"
        read.append((key, plan))
        name = _name("snap", key, str(snapshot_id))
        if travelled.get(name) is None:
            from icegres.engine.mounts import to_dataframe

            stores, sets = qctx.engine.stores, qctx.engine.scan_sets
            # One scan over a directory of links to the snapshot's local files, as a mounted
            # table has (scan_sets.py): a union of one scan per file costs a lookup ~0.5 ms.
            travelled.put(name, lambda ctx, keep: qctx.zoned(to_dataframe(ctx, plan, stores, None, sets, keep)))
    alias = table.args.get("alias")
    alias = alias.copy() if alias is not None else exp.TableAlias(
        this=exp.to_identifier(spark[1] if spark else travel.name, quoted=True))
    return private_table(name, alias)


def _branch_diff(qctx: QueryContext, table: exp.Table, args: list[exp.Expression]) -> exp.Expression:
    """`branch_diff('a', 'b' [, 'namespace'])`: `icegres branch diff a b` as rows, over every
    table of the lake or of the namespace, from their metadata only (engine/lake_refs.py)."""
    from sqlglot import exp

    from icegres.engine import lake_refs

    values = [a.this if isinstance(a, exp.Literal) and a.is_string else None for a in args]
    if len(values) not in (2, 3) or None in values:
        raise PgError(UNDEFINED_FUNCTION, "function branch_diff takes two ref names and an optional namespace, as string literals",
                      hint="select * from branch_diff('preview', 'main', 'demo')")
    namespace = values[2] if len(values) == 3 else None
    tables = lake_refs.cut(qctx.engine.lakehouse, namespace=namespace)
    diffs = [lake_refs.diff(key, t, values[0], values[1]).as_json() for key, t in tables.items()]
    arrow = pa.Table.from_pylist(diffs, schema=_DIFF_SCHEMA)
    digest = hashlib.sha1(repr((values, [t.metadata_location for t in tables.values()])).encode()).hexdigest()[:16]
    name = f"meta_branch_diff_{digest}"
    if qctx.cache.travelled.get(name) is None:
        qctx.cache.travelled.put(name, lambda ctx, keep: ctx.from_arrow(arrow))
    alias = table.args.get("alias")
    return private_table(name, alias.copy() if alias is not None else exp.TableAlias(this=exp.to_identifier("branch_diff")))


_DIFF_SCHEMA = pa.schema([
    ("table", pa.string()), ("state", pa.string()), ("a", pa.int64()), ("b", pa.int64()), ("fork", pa.int64()),
    ("commits", pa.int64()), ("rows_added", pa.int64()), ("rows_deleted", pa.int64()), ("a_commits", pa.int64()),
    ("a_rows_added", pa.int64()), ("a_rows_deleted", pa.int64()), ("columns_added", pa.list_(pa.string())),
    ("columns_dropped", pa.list_(pa.string())),
])


def _name(kind: str, key: Key, suffix: str) -> str:
    """A relation name for `key`'s snapshot or metadata table: readable where the table's names
    are plain, unique by a digest of them either way (it is found in SQL text by `_NAMED`)."""
    plain = _UNSAFE.sub("_", f"{key[0]}_{key[1]}")[:40]
    digest = hashlib.sha1(f"{key[0]}\0{key[1]}".encode()).hexdigest()[:8]
    return f"{kind}_{plain}_{digest}_{suffix}"


_UNSAFE = re.compile(r"[^A-Za-z0-9_]")


def attach(qctx: QueryContext, made: Made, sql: str) -> None:
    """Before planning `sql` on `made`: register the time-travel relations it names there (a
    statement may plan on another context than the one current when it was expanded: a block's
    pins make a context of their own)."""
    travelled = qctx.cache.travelled
    if not len(travelled) or PRIVATE_CATALOG not in sql:
        return
    named = _NAMED.findall(sql)
    for name in named:
        if name in made.travelled:
            continue
        build = travelled.get(name)
        if build is None:
            continue  # a DML work table, or a relation this session no longer remembers
        if len(made.travelled) >= _ATTACHED_MAX:
            schema = made.ctx.catalog(PRIVATE_CATALOG).schema(PRIVATE_SCHEMA)
            for old in set(made.travelled) - set(named):
                schema.deregister_table(old)
                for scan_set in made.travelled.pop(old):
                    qctx.engine.scan_sets.retire(scan_set)  # kept until the statements using it end
        keep: list[Any] = []  # the scan directories it reads: held for as long as it is registered
        qctx.register_on(made, name, build(made.ctx, keep))
        made.travelled[name] = keep


_NAMED = re.compile(r'"((?:snap|meta)_[^"]+)"')
_ATTACHED_MAX = 64


def _head(qctx: QueryContext, key: Key) -> ReadPlan:
    """The table as the statement sees its head: a transaction's pin, else the mounted one."""
    txn = qctx.txn
    plan = txn.pins.get(key) if txn is not None else None
    if plan is None:
        qctx.engine.refresh({key})
        plan = qctx.engine.read_plan(*key)
    if plan is None or plan.table is None:
        refused = qctx.engine.refusal(key)
        raise refused if refused is not None else PgError(UNDEFINED_TABLE, f'relation "{key[0]}.{key[1]}" does not exist')
    return plan


def _snapshot_id(qctx: QueryContext, key: Key, table: Table, travel: Travel) -> int:
    shown = f"{key[0]}.{key[1]}"
    metadata = table.metadata
    if travel.point is Point.TIMESTAMP:
        at = _value(qctx, travel.value, timestamp=True)
        ms = int(at.timestamp() * 1000)
        snapshot = table.snapshot_as_of_timestamp(ms)  # main's snapshot log, as Trino and Spark read it
        if snapshot is not None:
            return snapshot.snapshot_id
        raise PgError(INVALID_PARAMETER_VALUE, f'table "{shown}" has no snapshot as of {_shown_time(ms)}',
                      detail=_first_snapshot(table))
    value: Any = travel.ref if travel.ref is not None else _value(qctx, travel.value, timestamp=False)
    if isinstance(value, str) and value in metadata.refs:
        return metadata.refs[value].snapshot_id
    if isinstance(value, int) or (isinstance(value, str) and value.lstrip("-").isdigit()):
        snapshot = metadata.snapshot_by_id(int(value))
        if snapshot is None:
            raise PgError(UNDEFINED_OBJECT, f'snapshot {int(value)} of table "{shown}" does not exist')
        return snapshot.snapshot_id
    if isinstance(value, str):
        known = ", ".join(sorted(metadata.refs)) or "none"
        raise PgError(UNDEFINED_OBJECT, f'branch or tag "{value}" of table "{shown}" does not exist',
                      detail=f"Its branches and tags: {known}.")
    raise PgError(DATATYPE_MISMATCH, f"AS OF VERSION takes a snapshot id or a branch or tag name, not {value!r}")


def _first_snapshot(table: Table) -> str:
    log = table.metadata.snapshot_log
    if not log:
        return "It has no snapshot yet."
    return f"Its first snapshot was made at {_shown_time(log[0].timestamp_ms)}."


def _shown_time(ms: int) -> str:
    """A time as PostgreSQL prints a timestamptz in UTC: `2024-01-01 10:00:00.123+00`."""
    return dt.datetime.fromtimestamp(ms / 1000, dt.UTC).strftime("%Y-%m-%d %H:%M:%S.%f")[:-3] + "+00"


def _value(qctx: QueryContext, value: exp.Expression | None, *, timestamp: bool) -> Any:
    """An AS OF value: a literal as written, anything else evaluated as a constant in the session
    (its TimeZone for a time without one)."""
    from sqlglot import exp

    if value is None:
        raise PgError(SYNTAX_ERROR, "syntax error: AS OF needs a value")
    if isinstance(value, exp.Placeholder | exp.Parameter):
        raise PgError(FEATURE_NOT_SUPPORTED, "AS OF takes a constant, not a parameter",
                      hint="Write the snapshot id, branch, tag or time in the statement.")
    if not timestamp and isinstance(value, exp.Literal):
        return value.this if value.is_string else _integer(value.this)
    if not timestamp and isinstance(value, exp.Neg) and isinstance(value.this, exp.Literal):
        return -_integer(value.this.this)
    if timestamp:
        value = exp.cast(value.copy(), exp.DataType.build("timestamptz"))
    planned = qctx.plan_tree(exp.select(value.copy() if not timestamp else value))
    column = planned.df.to_arrow_table().column(0)
    if len(column) != 1 or column[0].as_py() is None:
        raise PgError(INVALID_PARAMETER_VALUE, "AS OF value is NULL")
    if timestamp:
        unit = {"s": 1, "ms": 1_000, "us": 1_000_000, "ns": 1_000_000_000}[column.type.unit]
        raw = column.cast(pa.int64())[0].as_py()  # since the epoch, in UTC (timestamptz)
        return dt.datetime.fromtimestamp(raw // unit, dt.UTC) + dt.timedelta(microseconds=raw % unit * 1_000_000 // unit)
    return column[0].as_py()


def _integer(text: str) -> int:
    try:
        return int(text)
    except ValueError:
        raise PgError(DATATYPE_MISMATCH, f"AS OF VERSION takes a snapshot id or a branch or tag name, not {text}") from None


def _snapshot_plan(qctx: QueryContext, key: Key, table: Table, snapshot_id: int) -> ReadPlan:
    """The read plan of one snapshot (its files and its schema), remembered per session: a
    snapshot never changes."""
    cache = qctx.cache.snapshots
    cache_key = (str(table.metadata.table_uuid), snapshot_id)
    hit = cache.get(cache_key)
    if hit is not None:
        cache.touch(cache_key)
        return hit
    at = _as_current(table, snapshot_id)
    plan = qctx.engine.plan_table(at)
    # Its own identity: scan sets and per-file scans key on the metadata location.
    plan = replace(plan, metadata_location=f"{table.metadata_location}#snapshot-{snapshot_id}")
    return cache.put(cache_key, plan)


def _as_current(table: Table, snapshot_id: int) -> Table:
    """`table` with `snapshot_id` as its current snapshot and that snapshot's schema as its
    current schema: what plan_read reads."""
    from pyiceberg.table import Table as IcebergTable

    metadata = table.metadata
    snapshot = metadata.snapshot_by_id(snapshot_id)
    assert snapshot is not None
    schema_id = snapshot.schema_id if snapshot.schema_id is not None else metadata.current_schema_id
    at = metadata.model_copy(update={"current_snapshot_id": snapshot_id, "current_schema_id": schema_id})
    return IcebergTable(table.name(), metadata=at, metadata_location=table.metadata_location, io=table.io,
                        catalog=table.catalog)
