"""DDL inside a transaction block: seen by the block's later statements, applied at its COMMIT.

PostgreSQL's DDL is transactional; an Iceberg catalog's is not (every create, rename or drop is
its own catalog call). So inside a block a table DDL changes only the block's view of the lake
(its `TxnState`: pins, staged writes, hidden names) and records what COMMIT must do to the
catalog (`BlockCatalog`), which the catalog commit machine then does, ordered and recoverable
(`machines/catalog_commit.py`):

- CREATE TABLE [AS]: the table is created at once, but under a hidden name nobody else lists
  (`catalog_world.hidden_name`), and the block sees it under its own; COMMIT places it. The
  intent record is written before the hidden table exists, so a crash never leaks it.
- DROP TABLE: the block stops seeing the table; COMMIT moves it aside, and purges it once the
  block is decided.
- ALTER TABLE … RENAME TO: the block sees the table (its pin and its staged rows) under the new
  name; COMMIT renames it.
- ALTER TABLE's column and property changes: staged on the table's write as a metadata change
  that the commit machine publishes in the same atomic catalog commit as the table's rows, and
  the block reads and writes the new shape from the next statement on.

Every function here blocks (catalog calls): run it in a worker thread. Each checks before it
changes anything, so a refused statement leaves the block as it was.
"""

from __future__ import annotations

import dataclasses
import uuid
from typing import TYPE_CHECKING, Any

import pyarrow as pa

from icegres.engine import ddl_apply, ddl_ctas, view_ddl
from icegres.engine.catalog_world import hidden_name
from icegres.engine.ddl_commands import (
    AlterTable,
    CreateIndex,
    CreateTable,
    CreateTableAs,
    CreateView,
    DropIndex,
    DropTable,
    DropView,
    RenameTable,
    RenameView,
)
from icegres.engine.txn import TxnState
from icegres.machines.catalog_commit import CatalogPlan
from icegres.pg import errors as e
from icegres.pg.errors import PgError

if TYPE_CHECKING:
    from icegres.engine.query import QueryContext

Key = tuple[str, str]

DUPLICATE_TABLE = "42P07"


def handles(cmd: Any) -> bool:
    """The DDL a block makes transactional (schemas still apply at once)."""
    return isinstance(cmd, CreateTable | CreateTableAs | DropTable | AlterTable | CreateIndex | DropIndex
                      | DropView | RenameView)


def apply(qctx: QueryContext, txn: TxnState, cmd: Any, path: list[str]) -> list[str]:
    """Apply `cmd` (not a CTAS: `create_table_as`) to the block; its notices."""
    qctx.pin_for(None)  # the block's view of every table is fixed from here on (SQL catalogs)
    _pin_named(qctx, txn, cmd, path)
    notices: list[str] = []
    if isinstance(cmd, CreateTable):
        create_table(qctx, txn, cmd, path, notices)
    elif isinstance(cmd, DropTable):
        drop_tables(qctx, txn, cmd, path, notices)
    elif isinstance(cmd, AlterTable):
        alter_table(qctx, txn, cmd, path, notices)
    elif isinstance(cmd, DropView):
        drop_views(qctx, txn, cmd, path, notices)
    elif isinstance(cmd, RenameView):
        rename_view(qctx, txn, cmd.schema, cmd.name, cmd.new_name, cmd.if_exists, path, notices)
    elif isinstance(cmd, CreateIndex):
        create_index(qctx, txn, cmd, notices)
    elif isinstance(cmd, DropIndex):
        drop_indexes(qctx, txn, cmd, notices)
    return notices


# --- CREATE ---------------------------------------------------------------------------------------


def create_table(qctx: QueryContext, txn: TxnState, cmd: CreateTable, path: list[str],
                 notices: list[str]) -> Key | None:
    lakehouse = qctx.engine.lakehouse
    namespace = ddl_apply.creation_schema(lakehouse, cmd.schema, path)
    key = (namespace, cmd.name)
    if _exists(qctx, txn, key):
        ddl_apply.already_exists(cmd, notices)
        return None
    hidden = _hidden_for(qctx, txn, namespace)
    table = ddl_apply.create_table_in(lakehouse, namespace, hidden[1], cmd)
    txn.created_table(key, hidden, qctx.engine.plan_table(table))
    return key


def create_table_as(qctx: QueryContext, txn: TxnState, cmd: CreateTableAs, path: list[str],
                    data: pa.Table) -> Key | None:
    """CTAS in a block: the hidden table with the query's columns; the caller stages the rows."""
    lakehouse = qctx.engine.lakehouse
    namespace = ddl_apply.creation_schema(lakehouse, cmd.schema, path)
    key = (namespace, cmd.name)
    if _exists(qctx, txn, key):
        if not cmd.if_not_exists:
            raise PgError(DUPLICATE_TABLE, f'relation "{cmd.name}" already exists')
        return None
    hidden = _hidden_for(qctx, txn, namespace)
    table = ddl_ctas.create_arrow_table_in(lakehouse, namespace, hidden[1], cmd, data.schema)
    txn.created_table(key, hidden, qctx.engine.plan_table(table))
    return key


def _hidden_for(qctx: QueryContext, txn: TxnState, namespace: str) -> Key:
    """A hidden name for a new table, with the intent naming it recorded first. The record names
    the block's hidden tables only, no moves: until COMMIT has checked its plan, nothing of it
    is the block's to undo (machines/catalog_commit.py)."""
    catalog = txn.block_catalog(uuid.uuid4().hex)
    hidden = (namespace, hidden_name("new", catalog.token, len(catalog.created)))
    qctx.engine.intents.record(dataclasses.replace(plan_of(txn, extra_created=(hidden,)), moves=()))
    return hidden


def plan_of(txn: TxnState, *, extra_created: tuple[Key, ...] = (), written: tuple[Key, ...] = (),
            has_data: bool = False) -> CatalogPlan:
    catalog = txn.catalog
    assert catalog is not None
    return CatalogPlan(catalog.token, tuple(catalog.moves), tuple(catalog.created) + extra_created,
                       tuple(catalog.graveyard), has_data, written)


# --- DROP -----------------------------------------------------------------------------------------


def drop_tables(qctx: QueryContext, txn: TxnState, cmd: DropTable, path: list[str],
                notices: list[str]) -> None:
    lakehouse = qctx.engine.lakehouse
    found: list[Key] = []
    for schema, name in dict.fromkeys(cmd.names):
        key = qctx.resolve_table(schema, name)
        if key is None:
            relation = view_ddl.find_relation(lakehouse, schema, name, ddl_apply._lake_path(path))
            if relation is not None and relation[0] == "view" and relation[1] not in txn.hidden:
                raise view_ddl.wrong_type_for_drop(relation, "table")
            shown = f"{schema}.{name}" if schema else name
            if not cmd.if_exists:
                raise PgError(e.UNDEFINED_TABLE, f'table "{shown}" does not exist')
            notices.append(f'table "{shown}" does not exist, skipping')
            continue
        found.append(key)
    views = _views_seen(qctx, txn) if found else {}
    if not cmd.cascade:
        for key in dict.fromkeys(found):
            view_ddl.refuse_dependents("table", key, views, path)
    # The views that read them follow them aside at COMMIT and go when they are purged.
    notices += view_ddl.cascade_notice(view_ddl.dependents(views, set(found)), path)
    for key in dict.fromkeys(found):
        catalog = txn.block_catalog(uuid.uuid4().hex)
        txn.dropped_table(key, (key[0], hidden_name("dropped", catalog.token, len(catalog.graveyard))))


# --- ALTER ----------------------------------------------------------------------------------------


def alter_table(qctx: QueryContext, txn: TxnState, cmd: AlterTable, path: list[str],
                notices: list[str]) -> None:
    lakehouse = qctx.engine.lakehouse
    key = qctx.resolve_table(cmd.schema, cmd.name)
    if key is None:
        if _find_view(qctx, txn, cmd.schema, cmd.name, path) is not None:
            if not (len(cmd.actions) == 1 and isinstance(cmd.actions[0], RenameTable)):
                raise PgError(view_ddl.WRONG_OBJECT_TYPE, f'"{cmd.name}" is not a table')
            rename_view(qctx, txn, cmd.schema, cmd.name, cmd.actions[0].new_name, False, path, notices)
            return
        if not cmd.if_exists:
            shown = f"{cmd.schema}.{cmd.name}" if cmd.schema else cmd.name
            raise PgError(e.UNDEFINED_TABLE, f'relation "{shown}" does not exist')
        notices.append(f'relation "{cmd.name}" does not exist, skipping')
        return
    if len(cmd.actions) == 1 and isinstance(cmd.actions[0], RenameTable):
        new = (key[0], cmd.actions[0].new_name)
        if _exists(qctx, txn, new):
            raise PgError(DUPLICATE_TABLE, f'relation "{new[1]}" already exists')
        txn.block_catalog(uuid.uuid4().hex)
        txn.renamed_table(key, new)
        return
    table: Any = txn.write_for(key).target.table
    change = ddl_apply.Alteration(table, key[1], notices, lakehouse, key[0]).checked(cmd.actions)
    if change is not None:
        _stage_change(qctx, txn, key, change)


def _stage_change(qctx: QueryContext, txn: TxnState, key: Key, change: Any) -> None:
    """A metadata change of `key` staged for COMMIT; the block sees the table's new shape."""
    from pyiceberg.table import Table

    from icegres.engine import lean_transaction

    write = txn.settle(key) if key in txn.writes else txn.write_for(key)  # (pending rows: the old columns)
    table: Any = write.target.table
    tx = lean_transaction.transaction(table)
    change(tx)
    altered = Table(table.name(), tx.table_metadata, table.metadata_location, table.io, table.catalog)
    shape = qctx.engine.plan_table(altered)
    txn.altered_table(key, write.altered(change, shape, qctx.engine.file_read))


# --- CREATE / DROP INDEX (ddl_index.py: properties, bloom filters, sort order) ----------------------


def create_index(qctx: QueryContext, txn: TxnState, cmd: CreateIndex, notices: list[str]) -> None:
    from icegres.engine.ddl_index import _default_name, index_change, table_indexes

    key = qctx.resolve_table(cmd.schema, cmd.table)
    if key is None:
        shown = f"{cmd.schema}.{cmd.table}" if cmd.schema else cmd.table
        raise PgError(e.UNDEFINED_TABLE, f'relation "{shown}" does not exist')
    table: Any = txn.write_for(key).target.table
    fields = {f.name for f in table.schema().fields}
    for column in cmd.columns:
        if column not in fields:
            raise PgError(e.UNDEFINED_COLUMN, f'column "{column}" does not exist')
    name = cmd.name or _default_name(cmd.table, cmd.columns)
    if _exists(qctx, txn, (key[0], name)) or _index_table(txn, key[0], name) is not None:
        if cmd.if_not_exists:
            notices.append(f'relation "{name}" already exists, skipping')
            return
        raise PgError(DUPLICATE_TABLE, f'relation "{name}" already exists')
    indexes = dict(table_indexes(table.properties))
    indexes[name] = cmd.columns
    _stage_change(qctx, txn, key, index_change(table, indexes, sort=cmd.columns))


def drop_indexes(qctx: QueryContext, txn: TxnState, cmd: DropIndex, notices: list[str]) -> None:
    from icegres.engine.ddl_index import drop_index_change

    path = [s for s in qctx.env.search_path if s not in ("pg_catalog",)]
    found = []
    for schema, name in cmd.names:
        key = next((k for ns in ([schema] if schema else path)
                    if (k := _index_table(txn, ns, name)) is not None), None)
        if key is None:
            shown = f"{schema}.{name}" if schema else name
            if not cmd.if_exists:
                raise PgError(e.UNDEFINED_OBJECT, f'index "{shown}" does not exist')
            notices.append(f'index "{shown}" does not exist, skipping')
            continue
        found.append((key, name))
    for key, name in found:  # every name checked before anything changes
        table: Any = txn.write_for(key).target.table
        _stage_change(qctx, txn, key, drop_index_change(table, name))


def _index_table(txn: TxnState, namespace: str, name: str) -> Key | None:
    """The table of the block's namespace `namespace` that has index `name`."""
    for key, plan in txn.views().items():
        if key[0] == namespace and any(index == name for index, _ in plan.indexes):
            return key
    return None


# --- views ----------------------------------------------------------------------------------------


def create_view(qctx: QueryContext, txn: TxnState, cmd: CreateView, arrow_schema: pa.Schema, sql: str,
                path: list[str]) -> None:
    """CREATE [OR REPLACE] VIEW in a block: the view is made at once under a hidden name and
    placed at COMMIT; the one it replaces is moved aside then."""
    from dataclasses import replace

    lakehouse = qctx.engine.lakehouse
    namespace = ddl_apply.creation_schema(lakehouse, cmd.schema, path)
    key = (namespace, cmd.name)
    names, schema = ddl_apply.view_columns(cmd, arrow_schema)
    if key in txn.pins or (key not in txn.hidden and lakehouse.table_exists(*key)):
        if cmd.or_replace:
            raise PgError(view_ddl.WRONG_OBJECT_TYPE, f'"{cmd.name}" is not a view')
        raise PgError(DUPLICATE_TABLE, f'relation "{cmd.name}" already exists')
    old = _view_at(qctx, txn, key)
    if old is not None:
        if not cmd.or_replace:
            raise PgError(DUPLICATE_TABLE, f'relation "{cmd.name}" already exists')
        view_ddl.check_replacement(old, [(n, f.type) for n, f in zip(names, arrow_schema, strict=True)])
        if key in ddl_apply.reads_of(sql):
            raise PgError("42P17", f'infinite recursion detected in rules for relation "{cmd.name}"')
    hidden = _hidden_for(qctx, txn, namespace)
    if namespace == ddl_apply.PUBLIC:
        lakehouse.create_namespace_if_missing(namespace)
    view_ddl.create(lakehouse, hidden, sql, schema, None)
    location = lakehouse.view_location(*hidden)
    assert location is not None
    view = replace(qctx.engine._load_view(hidden, location), name=cmd.name)
    catalog = txn.block_catalog(uuid.uuid4().hex)
    graveyard = (namespace, hidden_name("dropped", catalog.token, len(catalog.graveyard))) if old else None
    txn.created_view(key, hidden, view, old, graveyard)


def drop_views(qctx: QueryContext, txn: TxnState, cmd: DropView, path: list[str], notices: list[str]) -> None:
    found = []
    for schema, name in dict.fromkeys(cmd.names):
        view = _find_view(qctx, txn, schema, name, path)
        if view is None:
            table = qctx.resolve_table(schema, name)
            if table is not None:
                raise view_ddl.wrong_type_for_drop(("table", table), "view")
            if not cmd.if_exists:
                raise view_ddl.undefined("view", schema, name)
            notices.append(f'view "{name}" does not exist, skipping')
            continue
        found.append(view)
    views = _views_seen(qctx, txn) if found else {}
    keys = {(v.namespace, v.name) for v in found}
    if not cmd.cascade:
        for key in keys:
            view_ddl.refuse_dependents("view", key, {k: v for k, v in views.items() if k not in keys}, path)
    notices += view_ddl.cascade_notice([k for k in view_ddl.dependents(views, keys) if k not in keys], path)
    for view in found:
        catalog = txn.block_catalog(uuid.uuid4().hex)
        graveyard = (view.namespace, hidden_name("dropped", catalog.token, len(catalog.graveyard)))
        txn.dropped_view((view.namespace, view.name), view, graveyard)


def _views_seen(qctx: QueryContext, txn: TxnState) -> dict[Key, Any]:
    """The catalog's views as the block sees them: those it dropped or renamed away gone, those
    it made or renamed under their names (the catalog holds a made one under a hidden name until
    COMMIT)."""
    views = view_ddl.catalog_views_now(qctx.engine.lakehouse)
    catalog = txn.catalog
    for key in (*(catalog.created if catalog is not None else ()), *txn.hidden):
        views.pop(key, None)
    for key, view in txn.view_overlay.items():
        if view is None:
            views.pop(key, None)
        else:
            views[key] = view
    return views


def rename_view(qctx: QueryContext, txn: TxnState, schema: str | None, name: str, new_name: str,
                if_exists: bool, path: list[str], notices: list[str]) -> None:
    view = _find_view(qctx, txn, schema, name, path)
    if view is None:
        if not if_exists:
            raise view_ddl.undefined("view", schema, name)
        notices.append(f'relation "{name}" does not exist, skipping')
        return
    new = (view.namespace, new_name)
    if _exists(qctx, txn, new) or _view_at(qctx, txn, new) is not None:
        raise PgError(DUPLICATE_TABLE, f'relation "{new_name}" already exists')
    txn.block_catalog(uuid.uuid4().hex)
    txn.renamed_view((view.namespace, view.name), new, view)


def _view_at(qctx: QueryContext, txn: TxnState, key: Key) -> Any:
    """The view `key` as the block sees it, read fresh from the catalog where the block's own
    DDL says nothing about it."""
    if key in txn.view_overlay or key in txn.hidden:
        return txn.view(key, None)
    lakehouse = qctx.engine.lakehouse
    location = lakehouse.view_location(*key)
    return None if location is None else qctx.engine._load_view(key, location)


def _find_view(qctx: QueryContext, txn: TxnState, schema: str | None, name: str, path: list[str]) -> Any:
    """The first view called `name` along the path (or in `schema`), unless a table comes first."""
    for candidate in [schema] if schema is not None else ddl_apply._lake_path(path):
        key = (candidate, name)
        view = _view_at(qctx, txn, key)
        if view is not None:
            return view
        if _exists(qctx, txn, key):
            return None  # a table of that name comes first
    return None


# --- names as the block sees them -----------------------------------------------------------------


def _pin_named(qctx: QueryContext, txn: TxnState, cmd: Any, path: list[str]) -> None:
    """REST catalogs pin a table when a statement first names it: pin what `cmd` names (each
    candidate along the path for an unqualified name) before resolving it in the block."""
    from icegres.engine import views

    if isinstance(cmd, DropTable | DropIndex):
        named = list(cmd.names)
    elif isinstance(cmd, CreateIndex):
        named = [(cmd.schema, cmd.table)]
    elif isinstance(cmd, AlterTable):
        named = [(cmd.schema, cmd.name)]
    else:
        return
    refs = {(schema, name) if schema else (candidate, name)
            for schema, name in named for candidate in ([schema] if schema else path)}
    views.pin_snapshots(qctx.engine, txn, lambda: refs)


def _exists(qctx: QueryContext, txn: TxnState, key: Key) -> bool:
    """A table or view of that name, as the block sees the catalog."""
    if key in txn.pins:
        return True
    if key in txn.hidden:
        return False
    lakehouse = qctx.engine.lakehouse
    return lakehouse.table_exists(*key) or bool(lakehouse.view_location(*key))
