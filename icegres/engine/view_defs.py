"""Views as the engine reads them: a definition per catalog view, and statements with the views
they name replaced by their queries.

A view is stored as its query text with every relation it reads schema-qualified (resolved over
the search_path of the session that created it, as PostgreSQL binds a view's names when it is
created), so it means the same to every session and to other engines reading the catalog. A
statement naming a view is planned as the statement with that name replaced by `(query) AS
name(columns)`, recursively for views over views, as PostgreSQL's rewriter expands a view's
`_RETURN` rule. The base tables are then ordinary names of the statement: its freshness check,
a transaction's pins, the write buffer's rows and the plan caches see them as if written out.

Pure: no catalog, no I/O (the metadata document is read by the caller).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from functools import cached_property
from typing import TYPE_CHECKING, Any

from icegres.pg import errors as e
from icegres.pg.errors import PgError
from icegres.sql.time_travel import travel_of

if TYPE_CHECKING:
    import pyarrow as pa
    from sqlglot import exp

Key = tuple[str, str]
SYSTEM_SCHEMAS = ("pg_catalog", "information_schema")
# Views over views nest at most this deep: a cycle (two views replaced to read each other by
# other engines) is refused rather than expanded forever.
DEPTH_MAX = 64


@dataclass(frozen=True)
class ViewDef:
    """One catalog view: its query, its columns (names as PostgreSQL gives them, Arrow types)
    and the relations it reads. `error`: why it cannot be read (no PostgreSQL SQL, say)."""

    namespace: str
    name: str
    sql: str
    columns: tuple[tuple[str, Any], ...]
    metadata_location: str
    reads: frozenset[Key] = frozenset()
    comment: str = ""
    error: PgError | None = field(default=None, compare=False)

    @property
    def key(self) -> Key:
        return (self.namespace, self.name)

    @cached_property
    def tree(self) -> exp.Expression:
        from icegres.sql.parse import parse

        return parse(self.sql)

    @property
    def arrow_schema(self) -> pa.Schema:
        import pyarrow as pa

        return pa.schema([pa.field(n, t) for n, t in self.columns])


def from_metadata(namespace: str, name: str, location: str, meta: dict[str, Any]) -> ViewDef:
    """The definition a view metadata document holds (its current version)."""
    from pyiceberg.io.pyarrow import schema_to_pyarrow

    from icegres.engine import catalog_views

    comment = str(meta.get("properties", {}).get("comment", ""))
    try:
        sql = catalog_views.current_sql(meta)
        arrow = schema_to_pyarrow(catalog_views.current_schema(meta), include_field_ids=False)
    except Exception as exc:
        return _unusable(namespace, name, location, f"its metadata cannot be read: {exc}")
    columns = tuple((f.name, f.type) for f in arrow)
    if sql is None:
        return _unusable(namespace, name, location,
                         "it has no PostgreSQL representation (it was made by another engine)",
                         columns)
    try:
        from icegres.sql.parse import parse

        reads = frozenset(key for key, _ in qualified_refs(parse(sql)) if key is not None)
    except PgError as err:
        return _unusable(namespace, name, location, f"its query does not parse: {err.message}", columns)
    return ViewDef(namespace, name, sql, columns, location, reads, comment)


def _unusable(namespace: str, name: str, location: str, why: str,
              columns: tuple[tuple[str, Any], ...] = ()) -> ViewDef:
    err = PgError(e.FEATURE_NOT_SUPPORTED, f'view "{namespace}.{name}" cannot be read: {why}')
    return ViewDef(namespace, name, "", columns, location, frozenset(), "", err)


# --- the relations a query names -------------------------------------------------------------


def named_tables(tree: exp.Expression, skip: exp.Expression | None = None) -> list[exp.Table]:
    """The relation names of `tree` that may be tables or views: not CTE names, not table
    functions, not `skip` (a DML statement's target)."""
    from sqlglot import exp

    ctes = {cte.alias_or_name.lower() for cte in tree.find_all(exp.CTE)}
    out = []
    for table in tree.find_all(exp.Table):
        if table is skip or not isinstance(table.this, exp.Identifier) or not table.name:
            continue
        if not table.db and table.name in ctes:
            continue
        out.append(table)
    return out


def qualified_refs(tree: exp.Expression) -> list[tuple[Key | None, exp.Table]]:
    """Each named relation of a stored view query with its (schema, name); None for a name the
    query leaves unqualified (a catalog relation)."""
    out: list[tuple[Key | None, exp.Table]] = []
    for t in named_tables(tree):
        travel = travel_of(t)  # a snapshot or metadata table of t reads t
        name = travel.name if travel is not None else t.name
        out.append(((t.db, name) if t.db else None, t))
    return out


def dml_target(tree: exp.Expression) -> exp.Table | None:
    """The table an INSERT, UPDATE or DELETE writes (a view there is refused, never expanded)."""
    from sqlglot import exp

    if isinstance(tree, exp.Insert):
        target = tree.this.this if isinstance(tree.this, exp.Schema) else tree.this
        return target if isinstance(target, exp.Table) else None
    if isinstance(tree, exp.Update | exp.Delete | exp.Merge):
        return tree.this if isinstance(tree.this, exp.Table) else None
    return None


# --- resolution ------------------------------------------------------------------------------


class Resolver:
    """Names as one session resolves them: a qualified name is that relation; an unqualified one
    the first relation of that name along `search_path` (catalog relations first, as PostgreSQL
    searches pg_catalog before the path)."""

    def __init__(self, search_path: list[str], is_table: Callable[[str, str], bool],
                 view: Callable[[Key], ViewDef | None], system_names: frozenset[str],
                 database: str = "") -> None:
        self.path = [s for s in search_path if s not in SYSTEM_SCHEMAS]
        self.database = database  # the database a three-part name may name: this one
        self.is_table = is_table
        self.view = view
        self.system_names = system_names
        # (view key, a copy of its query, this resolver) -> the query to put in its place: the
        # engine checks and secures it as the view's owner (row_security.view_body_hook).
        self.body_hook: Callable[[Key, exp.Expression, Resolver], exp.Expression] | None = None

    def resolve(self, schema: str | None, name: str) -> tuple[str, Key] | None:
        """('table' | 'view' | 'system', key), or None when nothing has that name."""
        if schema is not None:
            key = (schema, name)
            if schema in SYSTEM_SCHEMAS:
                return ("system", key)
            if self.view(key) is not None:
                return ("view", key)
            return ("table", key) if self.is_table(*key) else None
        if name in self.system_names:
            return ("system", ("pg_catalog", name))
        for candidate in self.path:
            key = (candidate, name)
            if self.view(key) is not None:
                return ("view", key)
            if self.is_table(*key):
                return ("table", key)
        return None

    def names_view(self, tables: list[exp.Table]) -> bool | None:
        """Whether any of `tables` is a view: True, False, or None when some name is unknown
        (a view another server created since the last listing, or an error to come)."""
        unknown = False
        for table in tables:
            found = self.resolve(table.db or None, table.name)
            if found is None:
                unknown = True
            elif found[0] == "view":
                return True
        return None if unknown else False


# --- CREATE VIEW: the query text stored ------------------------------------------------------


def qualify(sql: str, tree: exp.Expression, resolver: Resolver) -> str:
    """`sql` with every unqualified relation it reads prefixed by the schema it resolves to now
    (42P01 for one that resolves to nothing), and this database's name dropped from three-part
    names (dbt writes `"icegres"."analytics"."orders"`; another database's is 0A000), so that the
    stored query does not depend on the name the database is served under. The text is
    otherwise kept as written."""
    from icegres.engine.pg_catalog import quote_ident
    from icegres.sql.databases import check_database

    tables = named_tables(tree)
    for table in tables:
        if table.catalog:
            check_database(table.catalog, resolver.database, f"{table.catalog}.{table.db}.{table.name}")
    edits: list[tuple[int, int, str]] = []  # (start, end, replacement) of the text
    for table in tables:
        if table.db:
            if table.catalog:
                start, end = (table.args["catalog"].meta.get("start"), table.args["db"].meta.get("start"))
                if start is None or end is None:
                    return _qualified_tree_sql(tree, resolver)
                edits.append((start, end, ""))
            continue
        found = resolver.resolve(None, table.name)
        if found is None:
            raise PgError(e.UNDEFINED_TABLE, f'relation "{table.name}" does not exist')
        if found[0] == "system":
            continue
        start = table.this.meta.get("start")
        if start is None:
            # No position (a name sqlglot made up): write the whole query out instead.
            return _qualified_tree_sql(tree, resolver)
        edits.append((start, start, quote_ident(found[1][0]) + "."))
    for start, end, text in sorted(edits, reverse=True):
        sql = sql[:start] + text + sql[end:]
    return sql


def _qualified_tree_sql(tree: exp.Expression, resolver: Resolver) -> str:
    from sqlglot import exp

    from icegres.sql.parse import DIALECT

    copy = tree.copy()
    for table in named_tables(copy):
        table.set("catalog", None)  # qualify() checked that it names this database
        if not table.db:
            found = resolver.resolve(None, table.name)
            if found is not None and found[0] != "system":
                table.set("db", exp.to_identifier(found[1][0]))
    return copy.sql(dialect=DIALECT)


# --- expansion -------------------------------------------------------------------------------


def expand(tree: exp.Expression, resolver: Resolver, skip: exp.Expression | None = None
           ) -> tuple[exp.Expression, set[Key]] | None:
    """A copy of `tree` with every view it names replaced by `(query) AS alias(columns)`, views
    inside views too, and the views used; None when it names none. A view whose query reads a
    relation that no longer exists is 42P01 naming that relation and the view."""
    targets = named_tables(tree, skip)
    if not any((r := resolver.resolve(t.db or None, t.name)) is not None and r[0] == "view" for t in targets):
        return None
    copy = tree.copy()
    skip_path = _path_of(tree, skip) if skip is not None else None
    skip_copy = _node_at(copy, skip_path) if skip_path is not None else None
    used: set[Key] = set()
    _expand_in(copy, resolver, skip_copy, used, ())
    return copy, used


def _expand_in(tree: exp.Expression, resolver: Resolver, skip: exp.Expression | None,
               used: set[Key], chain: tuple[Key, ...]) -> None:
    from sqlglot import exp

    for table in named_tables(tree, skip):
        found = resolver.resolve(table.db or None, table.name)
        if found is None or found[0] != "view":
            continue
        key = found[1]
        view = resolver.view(key)
        assert view is not None
        if view.error is not None:
            raise view.error
        if key in chain or len(chain) >= DEPTH_MAX:
            raise PgError("42P17", f'infinite recursion detected in rules for relation "{key[1]}"')
        used.add(key)
        for read in sorted(view.reads):
            if resolver.resolve(*read) is None:
                raise PgError(e.UNDEFINED_TABLE, f'relation "{read[0]}.{read[1]}" does not exist',
                              detail=f'View "{key[0]}.{key[1]}" reads it; it was dropped or renamed '
                                     "after the view was made.",
                              hint="Create the relation again, or CREATE OR REPLACE the view.")
        body = view.tree.copy()
        if resolver.body_hook is not None:
            body = resolver.body_hook(key, body, resolver)
        _expand_in(body, resolver, None, used, (*chain, key))
        alias = table.args.get("alias")
        columns = [exp.to_identifier(n) for n, _ in view.columns]
        if alias is not None and alias.columns:
            columns = list(alias.columns)
        alias_name = alias.this if alias is not None and alias.this else exp.to_identifier(table.name)
        sub = exp.Subquery(this=body, alias=exp.TableAlias(this=alias_name, columns=columns))
        table.replace(sub)


def _path_of(root: exp.Expression, node: exp.Expression) -> list[tuple[str, int | None]] | None:
    path = []
    while node is not root:
        parent = node.parent
        if parent is None:
            return None
        value = parent.args.get(node.arg_key)
        index = value.index(node) if isinstance(value, list) else None
        path.append((node.arg_key, index))
        node = parent
    return list(reversed(path))


def _node_at(root: exp.Expression, path: list[tuple[str, int | None]]) -> exp.Expression | None:
    node: Any = root
    for key, index in path:
        node = node.args.get(key)
        if index is not None:
            node = node[index]
    return node
