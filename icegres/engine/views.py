"""What a statement reads besides the mounted snapshots: a transaction's pinned snapshots, and
the write buffer's acked rows not yet in the lake.

Pinning refreshes the engine's mounts where it must (and settles the write buffer first);
`contexts.SessionContexts.with_views` turns the views made here into a context's tables.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING, Any

import pyarrow as pa

from icegres.engine.mounts import ReadPlan, to_dataframe

if TYPE_CHECKING:
    from icegres.engine.lake import Engine
    from icegres.engine.txn import TxnState

Key = tuple[str, str]


def pin_snapshots(engine: Engine, txn: TxnState, refs_of: Callable[[], set[Key] | None], *,
                  fresh: bool = True) -> None:
    """Inside a transaction: pin the snapshot of every table the statement may read
    (`refs_of()`: those tables, None for all).

    `fresh=False` (describing an autocommit statement at Parse time) pins what is mounted
    without a catalog round trip when every table is mounted: the statement's Execute pins
    afresh, and only parameter types and RETURNING columns come from this.

    On SQL catalogs the first statement pins every table at once (one listing is one
    consistent instant of the whole catalog): the mounted ones by their plans, the others by
    their listed metadata location, planned at that location when the block first names them
    (lazy mounting); on REST catalogs each table is pinned when a statement first names it, as
    no cross-table instant exists there.
    """
    if txn.serializable:
        txn.read_keys |= refs_of() or set()
    ladder = engine.ladder
    if ladder is not None and not txn.autocommit and ladder.has_entries():
        # A transaction block reads lake snapshots only (its pins): rows acked by the write
        # buffer must be in the lake before a table is pinned, or the block would miss them.
        if engine.lakehouse.kind != "rest":
            if not txn.pinned_all:
                ladder.settle_blocking(None)
        else:
            refs = refs_of()
            if refs is None or any(ref not in txn.pins for ref in refs):
                ladder.settle_blocking(None if refs is None else {r for r in refs if r not in txn.pins})
    if engine.lakehouse.kind != "rest" and not txn.autocommit:
        if not txn.pinned_all:
            # One listing is the block's instant; the tables it names are mounted now, the
            # others keep their listed location and are pinned there when first named.
            refs = refs_of()
            engine.refresh(refs if refs is not None else set(), catalog=refs is None)
            txn.pin_all(*engine.pinnable())
        pin_listed(engine, txn, refs_of())
        return
    refs = refs_of()
    if not fresh and txn.autocommit and refs is not None:
        # Unqualified names expand over search_path: the mounted candidates are the answer, when
        # every name has one (a table made since the last listing is not mounted yet: pinning
        # the others only left it unpinned, and a prepared INSERT … SELECT into it was 42P01).
        mounted = {ref: engine.read_plan(*ref) for ref in refs if ref not in txn.pins}
        found = {name for (_, name), plan in mounted.items() if plan is not None}
        found |= {name for schema, name in refs if (schema, name) in txn.pins}
        if found and found >= {name for _, name in refs}:
            for key, plan in mounted.items():
                txn.pin(key, plan)
            return
    if refs is None:  # catalog introspection: every table's shape, the mounted ones pinned
        engine.refresh(set(), catalog=True)
        for key, plan in engine.plans().items():
            txn.pin(key, plan)
        return
    missing = {ref for ref in refs if ref not in txn.pins}
    if missing:
        engine.refresh(missing)
        for key in missing:
            txn.pin(key, engine.read_plan(*key))


def pin_listed(engine: Engine, txn: TxnState, refs: set[Key] | None) -> None:
    """Pin each of `refs` the block's listing holds but it has not pinned, at its listed
    metadata location (`Engine.plan_at`: mounted now if that is still the table's snapshot)."""
    for key in refs or ():
        location = txn.listed.get(key)
        if location is not None and key not in txn.pins and key not in txn.hidden:
            txn.pin(key, engine.plan_at(key, location))


def resolve(search_path: list[str], schema: str | None, name: str,
            exists: Callable[[Key], bool]) -> Key | None:
    """The (namespace, table) an optionally qualified name means under `search_path`."""
    if schema is not None:
        return (schema, name) if exists((schema, name)) else None
    for candidate in search_path:
        if exists((candidate, name)):
            return (candidate, name)
    return None


def buffered_views(engine: Engine, taken: dict[Key, Any]) -> dict[Key, Any]:
    """Each table of `taken` (the write buffer's entries a statement took) as its mounted plan,
    read now, plus the entries above that plan's lake watermark."""
    ladder = engine.ladder
    plans = engine.plans()
    stores, sets = engine.stores, engine.scan_sets
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
    return views


def _fit(parts: list[pa.Table], schema: pa.Schema) -> pa.Table:
    """Buffered rows (the table's write schema when they were inserted) as `schema`, by name:
    the scan's types (Utf8View strings), a column added since as NULL."""
    rows = pa.concat_tables(parts, promote_options="permissive") if len(parts) > 1 else parts[0]
    columns = [
        rows.column(f.name).cast(f.type) if f.name in rows.column_names else pa.nulls(rows.num_rows, f.type)
        for f in schema
    ]
    return pa.Table.from_arrays(columns, schema=pa.schema([f.with_nullable(True) for f in schema]))
