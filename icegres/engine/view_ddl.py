"""Views in DDL: CREATE [OR REPLACE] VIEW, DROP VIEW and renames applied to the catalog, and
what views mean for dropping and renaming the relations they read.

As in PostgreSQL, a relation a view reads is not dropped without CASCADE (2BP01), which drops
the views too; a renamed relation takes its dependent views along (their stored queries are
rewritten to the new name, a new version of each view). Each step is its own catalog operation,
as every icegres DDL is (docs/limitations.md): dependencies are read from the catalog before
anything changes, so a refused DROP changes nothing, but a concurrent session can slip in
between. Blocking: run in a worker thread.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from icegres.engine import catalog_views, view_defs
from icegres.engine.catalog_views import NoSuchView, ViewChanged, ViewExists
from icegres.engine.view_defs import Key, ViewDef
from icegres.pg import errors as e
from icegres.pg.errors import PgError

if TYPE_CHECKING:
    from icegres.engine.catalog import Lakehouse

WRONG_OBJECT_TYPE = e.WRONG_OBJECT_TYPE
DEPENDENT_OBJECTS_STILL_EXIST = "2BP01"
INVALID_TABLE_DEFINITION = "42P16"
DUPLICATE_TABLE = "42P07"
SERIALIZATION_FAILURE = "40001"


def catalog_views_now(lakehouse: Lakehouse, known: dict[Key, ViewDef] | None = None) -> dict[Key, ViewDef]:
    """Every view of the catalog now (definitions in `known` are reused where still current)."""
    out: dict[Key, ViewDef] = {}
    for entry in lakehouse.view_entries():
        key = (entry.namespace, entry.name)
        cached = (known or {}).get(key)
        if cached is not None and cached.metadata_location == entry.metadata_location:
            out[key] = cached
            continue
        try:
            meta = lakehouse.view_metadata(key[0], key[1], entry.metadata_location)
        except Exception as exc:
            out[key] = view_defs._unusable(key[0], key[1], entry.metadata_location, str(exc))
            continue
        out[key] = view_defs.from_metadata(key[0], key[1], entry.metadata_location, meta)
    return out


def dependents(views: dict[Key, ViewDef], keys: set[Key]) -> list[Key]:
    """The views reading any of `keys`, directly or through other views, each after every view
    that reads it (the order to drop them in)."""
    readers: dict[Key, list[Key]] = {}
    for key, view in views.items():
        for read in view.reads:
            readers.setdefault(read, []).append(key)
    order: list[Key] = []
    seen: set[Key] = set()

    def visit(key: Key) -> None:
        for reader in sorted(readers.get(key, ())):
            if reader in seen or reader in keys:
                continue
            seen.add(reader)
            visit(reader)
            order.append(reader)

    for key in sorted(keys):
        visit(key)
    return order


def shown(key: Key, search_path: list[str]) -> str:
    """A relation's name as PostgreSQL prints it in messages: bare when the path finds it."""
    return key[1] if key[0] in search_path else f"{key[0]}.{key[1]}"


def refuse_dependents(kind: str, key: Key, views: dict[Key, ViewDef], search_path: list[str],
                      what: str | None = None) -> None:
    """2BP01 when views read `key` (a `kind`, 'table' or 'view'): PostgreSQL's RESTRICT."""
    direct = [v for v in sorted(views) if key in views[v].reads]
    if not direct:
        return
    name = what or shown(key, search_path)
    detail = "\n".join(f"view {shown(v, search_path)} depends on {kind} {name}" for v in direct)
    raise PgError(DEPENDENT_OBJECTS_STILL_EXIST,
                  f"cannot drop {kind} {name} because other objects depend on it", detail=detail,
                  hint="Use DROP ... CASCADE to drop the dependent objects too.")


def cascade_notice(dropped: list[Key], search_path: list[str]) -> list[str]:
    if not dropped:
        return []
    if len(dropped) == 1:
        return [f"drop cascades to view {shown(dropped[0], search_path)}"]
    return [f"drop cascades to {len(dropped)} other objects"]


def drop_each(lakehouse: Lakehouse, keys: list[Key]) -> None:
    """Drop these views (already gone ones are skipped)."""
    for key in keys:
        try:
            lakehouse.drop_view(*key)
        except NoSuchView:
            continue


# --- CREATE [OR REPLACE] VIEW ----------------------------------------------------------------


def create(lakehouse: Lakehouse, key: Key, sql: str, schema: Any, replacing: ViewDef | None) -> None:
    """Create view `key`, or give it a new version (`replacing`: the view as read just before),
    whose query is `sql` and columns `schema` (a pyiceberg Schema)."""
    namespace, name = key
    summary = {"engine-version": _version()}
    if replacing is None:
        try:
            lakehouse.create_view(namespace, name, lambda location: catalog_views.new_metadata(
                location, namespace, sql, schema, {}, summary))
        except ViewExists:
            raise PgError(DUPLICATE_TABLE, f'relation "{name}" already exists') from None
        return
    old = lakehouse.view_metadata(namespace, name, replacing.metadata_location)
    new = catalog_views.replaced_metadata(old, namespace, sql, schema, summary)
    try:
        lakehouse.replace_view(namespace, name, replacing.metadata_location, old, new)
    except ViewChanged:
        raise PgError(SERIALIZATION_FAILURE, "could not serialize access due to concurrent update",
                      detail=f'view "{name}" was changed by another session') from None


def type_name(arrow_type: Any) -> str:
    """A column's type as PostgreSQL's format_type names it."""
    from icegres.engine.pg_builtins import arrow_typmod, format_type
    from icegres.pg.types import pg_type_for_arrow

    return str(format_type(pg_type_for_arrow(arrow_type).oid, arrow_typmod(arrow_type)))


def check_replacement(old: ViewDef, new_columns: list[tuple[str, Any]]) -> None:
    """PostgreSQL's rule for CREATE OR REPLACE VIEW: the new query keeps every column of the old
    one, in order, with its name and type; it may add columns at the end. `new_columns`: the
    new (name, Arrow type) pairs."""
    if len(new_columns) < len(old.columns):
        raise PgError(INVALID_TABLE_DEFINITION, "cannot drop columns from view")
    for (old_name, old_type), (new_name, new_type) in zip(old.columns, new_columns, strict=False):
        if old_name != new_name:
            raise PgError(INVALID_TABLE_DEFINITION,
                          f'cannot change name of view column "{old_name}" to "{new_name}"',
                          hint="Use ALTER VIEW ... RENAME COLUMN ... to change name of view column instead.")
        old_pg, new_pg = type_name(old_type), type_name(new_type)
        if old_pg != new_pg:
            raise PgError(INVALID_TABLE_DEFINITION,
                          f'cannot change data type of view column "{old_name}" from {old_pg} to {new_pg}')


def _version() -> str:
    try:
        from importlib.metadata import version

        return version("icegres")
    except Exception:
        return "dev"


# --- renames: the views reading a renamed relation follow it ---------------------------------


def retarget(lakehouse: Lakehouse, views: dict[Key, ViewDef], old: Key, new: Key) -> None:
    """Every view reading `old` gets a new version reading `new` instead (same columns)."""
    for key in sorted(views):
        view = views[key]
        if old not in view.reads or view.error is not None:
            continue
        sql = renamed_in(view.sql, view.tree, old, new)
        meta = lakehouse.view_metadata(key[0], key[1], view.metadata_location)
        schema = catalog_views.current_schema(meta)
        new_meta = catalog_views.replaced_metadata(meta, key[0], sql, schema,
                                                   {"engine-version": _version()})
        try:
            lakehouse.replace_view(key[0], key[1], view.metadata_location, meta, new_meta)
        except (ViewChanged, NoSuchView):
            continue  # replaced or dropped meanwhile: that session's definition stands


def renamed_in(sql: str, tree: Any, old: Key, new: Key) -> str:
    """`sql` with the relation `old` (always schema-qualified in a stored view) named `new`."""
    from icegres.engine.pg_catalog import quote_ident

    spans = []
    for table in view_defs.named_tables(tree):
        if (table.db, table.name) != old:
            continue
        meta = table.this.meta
        if meta.get("start") is None:
            from sqlglot import exp

            from icegres.sql.parse import DIALECT

            copy = tree.copy()
            for t in view_defs.named_tables(copy):
                if (t.db, t.name) == old:
                    t.set("this", exp.to_identifier(new[1]))
            return str(copy.sql(dialect=DIALECT))
        spans.append((meta["start"], meta["end"]))
    for start, end in sorted(spans, reverse=True):
        sql = sql[:start] + quote_ident(new[1]) + sql[end + 1:]
    return sql


def find_relation(lakehouse: Lakehouse, schema: str | None, name: str, lake_path: list[str]
                  ) -> tuple[str, Key] | None:
    """The first relation called `name` along the path (or in `schema`): ('table' | 'view', key)."""
    for candidate in [schema] if schema is not None else lake_path:
        if lakehouse.view_location(candidate, name) is not None:
            return ("view", (candidate, name))
        if lakehouse.table_exists(candidate, name):
            return ("table", (candidate, name))
    return None


def wrong_type_for_drop(found: tuple[str, Key], wanted: str) -> PgError:
    kind, key = found
    other = "VIEW" if kind == "view" else "TABLE"
    return PgError(WRONG_OBJECT_TYPE, f'"{key[1]}" is not a {wanted}',
                   hint=f"Use DROP {other} to remove a {kind}.")


def undefined(what: str, schema: str | None, name: str) -> PgError:
    shown_name = f"{schema}.{name}" if schema else name
    return PgError(e.UNDEFINED_TABLE, f'{what} "{shown_name}" does not exist')
