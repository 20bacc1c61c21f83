"""pg_catalog and information_schema, built from the live lakehouse as Arrow tables.

Every Postgres client learns what a database holds by querying the system catalogs (CLIENTS.md:
pg_attribute, pg_class, pg_namespace and pg_type are read by 7 of 10 client families). icegres has
no catalog of its own, so each time the lakehouse changes the engine hands `register_catalog` a
`CatalogSnapshot` and gets back PostgreSQL 15 shaped relations in the DataFusion schemas
`pg_catalog` and `information_schema`. Column names and meanings follow PostgreSQL 15; OIDs are
Int64, `"char"`/`name` are text, arrays are Arrow lists, and int2vector/oidvector columns (indkey,
indclass, ...) are lists too but PostgreSQL subscripts them from 0 (engine/rewrite knows).

OIDs: system objects keep PostgreSQL's own (pg_class = 1259, int8 = 20, public = 2200) because
clients hard-code some of them (psqlODBC asks for `c.oid = 1259`). Lakehouse objects get OIDs
derived from their names, so they are stable across restarts and equal on every server of a
fleet; the rare crc32 collision is settled deterministically by `_allocate`.
"""

from __future__ import annotations

import threading
import zlib
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field
from functools import cache, cached_property, lru_cache
from typing import TYPE_CHECKING, Any

import pyarrow as pa

from icegres.engine import pg_constraints, pg_roles, pg_sequence_rows
from icegres.engine.pg_builtins import BUILTIN_FUNCTIONS, BUILTIN_TYPES, BuiltinType, arrow_typmod
from icegres.engine.pg_relations import (
    _BTREE_OPCLASS,
    _DEFAULT_BY_KIND,
    _SYSTEM_RELATION_OIDS,
    PG_TYPE_OID_KEY,
    RELATIONS,
    RelationDef,
    pg_type_oid,
)
from icegres.engine.sequence_store import IDENTITY_PROPERTY
from icegres.pg import text_arrays
from icegres.pg.chars import BPCHAR_OID, UTF8_BYTES_MAX, VARCHAR_OID, CharType
from icegres.pg.keywords import keyword_rows, quote_ident
from icegres.pg.types import pg_type_for_arrow

if TYPE_CHECKING:

    from icegres.engine.mounts import ReadPlan

# --- the snapshot the engine hands us -----------------------------------------------------------


@dataclass(frozen=True)
class ColumnInfo:
    name: str
    arrow_type: pa.DataType
    nullable: bool
    field_id: int
    comment: str = ""  # COMMENT ON COLUMN: the Iceberg field's doc
    char_type: CharType | None = None  # varchar(n) / char(n) / bpchar kept beside Iceberg's string
    default: str | None = None  # its DEFAULT expression (SQL text), as pg_attrdef holds it
    identity: str = ""  # pg_attribute.attidentity: 'a' GENERATED ALWAYS, 'd' BY DEFAULT (no pg_attrdef then)


@dataclass(frozen=True)
class TableInfo:
    schema: str
    name: str
    columns: tuple[ColumnInfo, ...]
    primary_key: tuple[str, ...] = ()
    comment: str = ""  # COMMENT ON TABLE: the Iceberg table's `comment` property
    indexes: tuple[tuple[str, tuple[str, ...]], ...] = ()  # CREATE INDEX (ddl_index.py): (name, columns)
    checks: tuple[tuple[str, str], ...] = ()  # CHECK constraints: (name, SQL text)
    sequence: Any = None  # a sequence's definition (machines.sequence.Definition): relkind 'S'
    identity_sequence: bool = False  # an identity column's: not in information_schema.sequences


def snapshot_of(database: str, plans: Mapping[tuple[str, str], Any], views: Mapping[tuple[str, str], Any],
                namespaces: Iterable[str], authz: Any) -> CatalogSnapshot:
    """The catalog of a lake's mounted tables (ReadPlans), views (view_defs.ViewDef) and schemas."""
    infos = tuple(
        ViewInfo(ns, name, tuple(ColumnInfo(n, t, True, i) for i, (n, t) in enumerate(v.columns, start=1)),
                 v.sql, v.comment, tuple(sorted(v.reads)))
        for (ns, name), v in sorted(views.items()))
    return CatalogSnapshot(
        database=database,
        user="icegres",
        schemas=tuple(sorted(set(namespaces) | {"public"} | {v.schema for v in infos})),
        tables=tuple(table_info(ns, name, plan) for (ns, name), plan in sorted(plans.items())),
        views=infos,
        authz=authz,
    )


def table_info(schema: str, name: str, plan: ReadPlan) -> TableInfo:
    """A mounted (or shaped) table as the catalog describes it."""
    n = len(plan.field_ids)
    not_null = {f.name for f in plan.schema if not f.nullable}
    docs, chars = plan.column_comments or ("",) * n, plan.char_types or (None,) * n
    defaults, identities = plan.defaults or (None,) * n, plan.identities or ("",) * n
    columns = tuple(
        ColumnInfo(f.name, f.type, f.name not in not_null, fid, doc, char, default, identity)
        for f, fid, doc, char, default, identity in zip(plan.schema, plan.field_ids, docs, chars, defaults, identities,
                                                        strict=True))
    internal = plan.table is not None and plan.table.properties.get(IDENTITY_PROPERTY) == "true"
    return TableInfo(schema, name, columns, plan.primary_key, plan.comment, plan.indexes, plan.checks, plan.sequence,
                     internal)


@dataclass(frozen=True)
class ViewInfo:
    """A catalog view: its columns and its query (pg_get_viewdef's text)."""

    schema: str
    name: str
    columns: tuple[ColumnInfo, ...]
    definition: str
    comment: str = ""
    reads: tuple[tuple[str, str], ...] = ()  # the relations its query names, (schema, name)


@dataclass(frozen=True)
class CatalogSnapshot:
    database: str
    user: str
    schemas: tuple[str, ...]
    tables: tuple[TableInfo, ...]
    views: tuple[ViewInfo, ...] = ()
    authz: Any = None  # the roles and privileges (pg/acl.py Authz) the catalog shows

    @cached_property
    def index(self) -> CatalogIndex:
        """Every object of this snapshot with its OID (collisions settled)."""
        return CatalogIndex(self)

    def relation_oid(self, schema: str, name: str) -> int | None:
        """The OID of relation schema.name in this snapshot, or None if there is none."""
        entry = self.index.relations.get((schema, name))
        return entry.oid if entry else None


# --- OIDs ---------------------------------------------------------------------------------------

FIRST_NORMAL_OID = 16384  # PostgreSQL's FirstNormalObjectId: below it lives the system
_OID_LIMIT = 2**31  # stay positive in an int4, which is how some clients read OIDs
BOOTSTRAP_SUPERUSER_OID = 10
PG_CATALOG_OID = 11
PG_CLASS_OID = 1259  # pg_description.classoid of a relation's comment
PG_NAMESPACE_OID = 2615  # ... and of a schema's
PG_REWRITE_OID = 2618  # pg_depend.classid of a view's rule
PG_TOAST_OID = 99
PUBLIC_OID = 2200
INFORMATION_SCHEMA_OID = 13207  # PostgreSQL 15's value (it varies by build; no client relies on it)
DEFAULT_COLLATION_OID = 100
HEAP_AM_OID = 2
BTREE_AM_OID = 403
_FIXED_NAMESPACES = {
    "pg_catalog": PG_CATALOG_OID,
    "pg_toast": PG_TOAST_OID,
    "public": PUBLIC_OID,
    "information_schema": INFORMATION_SCHEMA_OID,
}


def _stable_oid(key: str) -> int:
    return FIRST_NORMAL_OID + zlib.crc32(key.encode()) % (_OID_LIMIT - FIRST_NORMAL_OID)


def relation_oid(schema: str, name: str) -> int:
    """The OID of relation schema.name: stable across restarts, in [16384, 2**31).

    System relations answer with PostgreSQL's own OIDs. For a lakehouse relation this is the OID
    the most recently registered catalog gave it (which differs from the plain name hash only in
    the rare case of a crc32 collision), else the name hash.
    """
    fixed = _SYSTEM_RELATION_OIDS.get((schema, name))
    if fixed is not None:
        return fixed
    latest = _LATEST.snapshot
    if latest is not None:
        found = latest.relation_oid(schema, name)
        if found is not None:
            return found
    return _stable_oid(f"relation:{schema}.{name}")


def _allocate(keys: Iterable[str], taken: set[int]) -> dict[str, int]:
    """OIDs for keys: each its name hash unless taken, then the next free one, in key order.

    Processing keys sorted makes the outcome independent of listing order; only a colliding key
    that sorts later ever moves.
    """
    out: dict[str, int] = {}
    for key in sorted(set(keys)):
        oid = _stable_oid(key)
        while oid in taken:
            oid = oid + 1 if oid + 1 < _OID_LIMIT else FIRST_NORMAL_OID
        taken.add(oid)
        out[key] = oid
    return out


# --- the index of one snapshot: every object and its OID ----------------------------------------


@dataclass(frozen=True)
class ColumnEntry:
    attnum: int
    name: str
    type_oid: int
    typmod: int
    not_null: bool
    arrow_type: pa.DataType
    identity: str = ""


@dataclass(frozen=True)
class RelationEntry:
    oid: int
    schema: str
    name: str
    relkind: str  # 'r' table, 'v' view, 'i' index
    columns: tuple[ColumnEntry, ...]
    table: TableInfo | None = None  # the lakehouse table (for 'r' and its 'i')
    view: ViewInfo | None = None  # the catalog view (for a lakehouse 'v')
    indexed_oid: int | None = None  # for an index: its table's OID
    key_attnums: tuple[int, ...] = ()  # for an index: the indexed columns
    primary: bool = False  # for an index: the primary key's (unique), not a CREATE INDEX


class CatalogIndex:
    """All objects of a snapshot, by name and by OID."""

    def __init__(self, snap: CatalogSnapshot) -> None:
        self.snapshot = snap
        schemas = sorted(set(snap.schemas) | {t.schema for t in snap.tables}
                         | {v.schema for v in snap.views} | {"public"})
        user_schemas = [s for s in schemas if s not in _FIXED_NAMESPACES]
        keys = [f"namespace:{s}" for s in user_schemas]
        keys.append(f"database:{snap.database}")
        keys += [f"relation:{r.key}" for r in RELATIONS if r.fixed_oid is None and not r.function]
        for t in snap.tables:
            keys.append(f"relation:{t.schema}.{t.name}")
            if t.primary_key:
                keys.append(f"relation:{t.schema}.{_pkey_name(t)}")
                keys.append(f"constraint:{t.schema}.{_pkey_name(t)}")
            keys += [f"relation:{t.schema}.{name}" for name, _ in t.indexes]
            keys += [f"attrdef:{t.schema}.{t.name}.{c.name}" for c in t.columns if c.default is not None and not c.identity]
            keys += [pg_constraints.check_key(t.schema, t.name, name) for name, _ in t.checks]
        keys += [f"relation:{v.schema}.{v.name}" for v in snap.views]
        keys += [f"rule:{v.schema}.{v.name}" for v in snap.views]  # its _RETURN rule (pg_rewrite)
        oids = _allocate(keys, taken=set(_SYSTEM_RELATION_OIDS.values()))

        self.database_oid = oids[f"database:{snap.database}"]
        self.namespaces: dict[str, int] = {**_FIXED_NAMESPACES}
        self.namespaces.update({s: oids[f"namespace:{s}"] for s in user_schemas})
        self.namespace_names: dict[int, str] = {v: k for k, v in self.namespaces.items()}
        self.lakehouse_schemas: tuple[str, ...] = tuple(schemas)

        self.relations: dict[tuple[str, str], RelationEntry] = {}
        # result schemas annotated with their source tables (sourced_schema), by schema
        self.sourced: dict[pa.Schema, pa.Schema] = {}
        self.constraints: dict[int, pg_constraints.ConstraintEntry] = {}
        for rel in RELATIONS:
            if rel.function:
                continue
            oid = rel.fixed_oid or oids[f"relation:{rel.key}"]
            self._add(RelationEntry(oid, rel.schema, rel.name, rel.relkind, _system_columns(rel)))
        for t in sorted(snap.tables, key=lambda t: (t.schema, t.name)):
            self._add_table(t, oids)
        for v in sorted(snap.views, key=lambda v: (v.schema, v.name)):
            columns = tuple(_lakehouse_column(i, c) for i, c in enumerate(v.columns, start=1))
            self._add(RelationEntry(oids[f"relation:{v.schema}.{v.name}"], v.schema, v.name, "v",
                                    columns, view=v))
        self.by_oid: dict[int, RelationEntry] = {e.oid: e for e in self.relations.values()}
        # DEFAULT expressions: (pg_attrdef OID, relation OID, attnum, SQL text).
        self.defaults: list[tuple[int, int, int, str]] = [
            (oids[f"attrdef:{t.schema}.{t.name}.{c.name}"], self.relations[(t.schema, t.name)].oid, attnum, c.default)
            for t in snap.tables for attnum, c in enumerate(t.columns, start=1) if c.default is not None and not c.identity]
        # A view's _RETURN rule: view OID -> rule OID.
        self.rules: dict[int, int] = {oids[f"relation:{v.schema}.{v.name}"]: oids[f"rule:{v.schema}.{v.name}"]
                                      for v in snap.views}
        # COMMENT ON: (relation OID, attnum or 0 for the table) -> description, as pg_description.
        self.descriptions: dict[tuple[int, int], str] = {}
        for e in self.relations.values():
            if e.view is not None and e.view.comment:
                self.descriptions[(e.oid, 0)] = e.view.comment
            if e.table is None or e.relkind != "r":
                continue
            if e.table.comment:
                self.descriptions[(e.oid, 0)] = e.table.comment
            docs = {c.name: c.comment for c in e.table.columns if c.comment}
            for c in e.columns:
                if c.name in docs:
                    self.descriptions[(e.oid, c.attnum)] = docs[c.name]

    def _add(self, entry: RelationEntry) -> None:
        self.relations[(entry.schema, entry.name)] = entry

    def _add_table(self, t: TableInfo, oids: dict[str, int]) -> None:
        columns = tuple(_lakehouse_column(i, c) for i, c in enumerate(t.columns, start=1))
        table = RelationEntry(oids[f"relation:{t.schema}.{t.name}"], t.schema, t.name,
                              "S" if t.sequence is not None else "r", columns, table=t)
        self._add(table)
        if t.sequence is not None:
            return
        by_name = {c.name: c for c in columns}
        for check in pg_constraints.check_entries(oids, t.schema, t.name, table.oid,
                                                  {c.name: c.attnum for c in columns}, t.checks):
            self.constraints[check.oid] = check
        for index_name, index_columns in t.indexes:
            indexed = tuple(by_name[n] for n in index_columns if n in by_name)
            self._add(RelationEntry(oids[f"relation:{t.schema}.{index_name}"], t.schema, index_name, "i",
                                    indexed, table=t, indexed_oid=table.oid,
                                    key_attnums=tuple(c.attnum for c in indexed)))
        if not t.primary_key:
            return
        key_cols = tuple(by_name[n] for n in t.primary_key if n in by_name)
        name = _pkey_name(t)
        index = RelationEntry(oids[f"relation:{t.schema}.{name}"], t.schema, name, "i",
                              key_cols, table=t, indexed_oid=table.oid,
                              key_attnums=tuple(c.attnum for c in key_cols), primary=True)
        self._add(index)
        con_oid = oids[f"constraint:{t.schema}.{name}"]
        self.constraints[con_oid] = pg_constraints.ConstraintEntry(
            con_oid, name, t.schema, "p", table.oid, index.oid,
            index.key_attnums, tuple(c.name for c in key_cols),
        )

    # lookups the catalog functions need

    def relation_name(self, oid: int, search_path: list[str]) -> str | None:
        """regclass output: the name, schema-qualified unless search_path finds it."""
        entry = self.by_oid.get(oid)
        if entry is None:
            return None
        if self.resolve(entry.name, search_path) == oid:
            return _quote_ident(entry.name)
        return f"{_quote_ident(entry.schema)}.{_quote_ident(entry.name)}"

    def resolve(self, name: str, search_path: list[str]) -> int | None:
        """regclass input: 'schema.name' or 'name' looked up along pg_catalog + search_path."""
        parts = _split_qualified(name)
        if parts is None:
            return None
        if len(parts) == 2:
            entry = self.relations.get((parts[0], parts[1]))
            return entry.oid if entry else None
        path = search_path if "pg_catalog" in search_path else ["pg_catalog", *search_path]
        for schema in path:
            entry = self.relations.get((schema, parts[0]))
            if entry is not None:
                return entry.oid
        return None

    def is_visible(self, oid: int, search_path: list[str]) -> bool:
        entry = self.by_oid.get(oid)
        return entry is not None and self.resolve(_quote_ident(entry.name), search_path) == oid


def _pkey_name(t: TableInfo) -> str:
    return f"{t.name}_pkey"


def _lakehouse_column(attnum: int, c: ColumnInfo) -> ColumnEntry:
    if c.char_type is not None:
        return ColumnEntry(attnum, c.name, c.char_type.oid, c.char_type.typmod, not c.nullable, c.arrow_type)
    return ColumnEntry(attnum, c.name, _type_oid(c.arrow_type), arrow_typmod(c.arrow_type),
                       not c.nullable, c.arrow_type, c.identity)


@lru_cache(maxsize=1024)
def _type_oid(dt: pa.DataType) -> int:
    return pg_type_for_arrow(dt).oid


@cache
def _system_columns(rel: RelationDef) -> tuple[ColumnEntry, ...]:
    """The columns of a catalog relation: fixed, so worked out once, not at every snapshot."""
    return tuple(
        ColumnEntry(i, f.name, pg_type_oid(f), -1, False, f.type)
        for i, f in enumerate(rel.arrow_schema, start=1)
    )


def _split_qualified(name: str) -> list[str] | None:
    """'a.b', '"A".b', 'b' -> identifier parts, folded like PostgreSQL (None if malformed)."""
    parts: list[str] = []
    i, text = 0, name.strip()
    while i < len(text):
        if text[i] == '"':
            j = i + 1
            buf = []
            while j < len(text):
                if text[j] == '"':
                    if j + 1 < len(text) and text[j + 1] == '"':
                        buf.append('"')
                        j += 2
                        continue
                    break
                buf.append(text[j])
                j += 1
            parts.append("".join(buf))
            i = j + 1
        else:
            j = text.find(".", i)
            j = len(text) if j < 0 else j
            parts.append(text[i:j].strip().lower())
            i = j
        if i < len(text):
            if text[i] != ".":
                return None
            i += 1
    if not parts or len(parts) > 3 or any(p == "" for p in parts):
        return None
    return parts[-2:]


_quote_ident = quote_ident


# --- building the relations ---------------------------------------------------------------------

Rows = list[dict[str, Any]]


def _rows_pg_namespace(ix: CatalogIndex) -> Rows:
    authz, user = ix.snapshot.authz, ix.snapshot.user
    return [{"oid": oid, "nspname": name, "nspowner": pg_roles.owner_oid(authz, ("schema", name)),
             "nspacl": pg_roles.nspacl(authz, name, user) or (_public_acl(ix) if oid == PUBLIC_OID else None)}
            for name, oid in sorted(ix.namespaces.items(), key=lambda kv: kv[1])]


def _public_acl(ix: CatalogIndex) -> list[str]:
    """Schema public's privileges as PostgreSQL 15 creates it: its owner's, and USAGE for all."""
    owner = ix.snapshot.user
    return [f"{owner}=UC/{owner}", f"=U/{owner}"]


def _rows_pg_init_privs(ix: CatalogIndex) -> Rows:
    # pg_dump compares an object's ACL with these: schema public's are initdb's, not a GRANT
    return [{"objoid": PUBLIC_OID, "classoid": PG_NAMESPACE_OID, "objsubid": 0, "privtype": "i",
             "initprivs": _public_acl(ix)}]


def _rows_pg_class(ix: CatalogIndex) -> Rows:
    rows = []
    indexed = {e.indexed_oid for e in ix.relations.values() if e.indexed_oid is not None}
    for e in ix.relations.values():
        rows.append({
            "oid": e.oid, "relname": e.name, "relnamespace": ix.namespaces[e.schema],
            "relowner": pg_roles.owner_oid(ix.snapshot.authz, ("table", e.schema, e.name)),
            "relacl": pg_roles.relacl(ix.snapshot.authz, e.schema, e.name, ix.snapshot.user),
            **pg_roles.row_security_flags(ix.snapshot.authz, e.schema, e.name),
            "relam": {"r": HEAP_AM_OID, "i": BTREE_AM_OID}.get(e.relkind, 0),
            "relfilenode": e.oid if e.relkind != "v" else 0,
            # what PostgreSQL shows before the first VACUUM: -1 for a table, 0 and the
            # metapage for a btree (pgjdbc getIndexInfo reports them as CARDINALITY, PAGES)
            "reltuples": 0.0 if e.relkind == "i" else -1.0, "relpages": 1 if e.relkind == "i" else 0,
            "relhasindex": e.oid in indexed, "relpersistence": "p", "relkind": e.relkind,
            "relhasrules": e.view is not None,  # a view's _RETURN rule
            "relnatts": len(e.columns) if e.relkind != "i" else len(e.key_attnums),
            "relispopulated": True, "relreplident": "d" if e.relkind == "r" else "n",
            "relfrozenxid": 0, "relchecks": len(e.table.checks) if e.relkind == "r" and e.table else 0,
            "reloptions": pg_roles.view_options(ix.snapshot.authz, e.schema, e.name) if e.view else None,
        })
    return rows


def _rows_pg_attribute(ix: CatalogIndex) -> Rows:
    ix_defaults = {(rel, attnum) for _, rel, attnum, _ in ix.defaults}
    rows = []
    for e in ix.relations.values():
        for position, c in enumerate(e.columns, start=1):
            t = BUILTIN_TYPES.get(c.type_oid)
            rows.append({
                "attrelid": e.oid, "attname": c.name, "atttypid": c.type_oid,
                "attstattarget": -1, "attlen": t.typlen if t else -1,
                # an index numbers its own columns 1..n; pg_index.indkey maps them to the table
                "attnum": position if e.relkind == "i" else c.attnum,
                "attndims": 1 if t and t.typcategory == "A" else 0, "attcacheoff": -1,
                "atttypmod": c.typmod, "attbyval": bool(t and t.typbyval),
                "attalign": t.typalign if t else "i", "attstorage": t.typstorage if t else "x",
                # system catalogs declare their fixed-width columns NOT NULL, as PostgreSQL's do
                "attnotnull": c.not_null or (e.table is None and e.view is None and t is not None
                                             and t.typlen > 0),
                "attislocal": True,
                "attcollation": t.typcollation if t else 0,
                "atthasdef": (e.oid, c.attnum) in ix_defaults, "attidentity": c.identity,
                "attacl": pg_roles.attacl(ix.snapshot.authz, e.schema, e.name, c.name, ix.snapshot.user),
            })
    return rows


def _rows_pg_description(ix: CatalogIndex) -> Rows:
    public = {"objoid": PUBLIC_OID, "classoid": PG_NAMESPACE_OID, "objsubid": 0,
              "description": "standard public schema"}
    return [public, *({"objoid": oid, "classoid": PG_CLASS_OID, "objsubid": sub, "description": text}
                      for (oid, sub), text in sorted(ix.descriptions.items()))]


# RowDescription's table OID, column number and typmod of a result column read from a table.
PG_TABLE_OID_KEY = b"pg_table_oid"
PG_ATTNUM_KEY = b"pg_attnum"
PG_TYPMOD_KEY = b"pg_typmod"


def sourced_schema(env: Any, schema: pa.Schema) -> pa.Schema:
    """`schema` with each column that a table's scan produced (mounts.RELATION_KEY) annotated
    with that table's OID, the column's number and its typmod, as PostgreSQL describes it."""
    from icegres.engine.mounts import RELATION_KEY

    if not any(f.metadata and RELATION_KEY in f.metadata for f in schema):
        return schema
    ix = current_index(env)
    if ix is None:
        return schema
    # Every statement names its result columns here: once per result shape and catalog snapshot.
    known = ix.sourced.get(schema)
    if known is None:
        if len(ix.sourced) >= _SOURCED_MAX:
            ix.sourced.clear()
        known = ix.sourced[schema] = _sourced(ix, schema)
    return known


_SOURCED_MAX = 4096


def _sourced(ix: CatalogIndex, schema: pa.Schema) -> pa.Schema:
    from icegres.engine.mounts import COLUMN_KEY, RELATION_KEY

    fields = []
    for f in schema:
        meta = f.metadata or {}
        relation, column = meta.get(RELATION_KEY), meta.get(COLUMN_KEY)
        schema_name, _, name = (relation or b"").decode().rpartition(".")
        entry = ix.relations.get((schema_name, name)) if relation else None
        found = next((c for c in entry.columns if c.name == (column or b"").decode()), None) if entry else None
        if found is not None:
            described = {PG_TABLE_OID_KEY: str(entry.oid).encode(), PG_ATTNUM_KEY: str(found.attnum).encode(),
                         PG_TYPMOD_KEY: str(found.typmod).encode()}
            if found.type_oid in (VARCHAR_OID, BPCHAR_OID):
                # Iceberg's string is text; the table keeps the column's own type (pgwire pads char(n))
                described[PG_TYPE_OID_KEY] = str(found.type_oid).encode()
            f = f.with_metadata({**meta, **described})
        fields.append(f)
    return pa.schema(fields, schema.metadata)


def object_description(env: Any, oid: int | None, catalog: str | None) -> str | None:
    """obj_description(oid, 'pg_class'): a table's COMMENT ON; schema public's (None for anything else)."""
    ix = current_index(env)
    if (catalog or "pg_class") == "pg_namespace" and oid == PUBLIC_OID:
        return "standard public schema"  # psql \dn+
    if ix is None or oid is None or (catalog or "pg_class") != "pg_class":
        return None
    return ix.descriptions.get((oid, 0))


def column_description(env: Any, oid: int | None, attnum: int | None) -> str | None:
    """col_description(table oid, attnum): a column's COMMENT ON."""
    ix = current_index(env)
    if ix is None or oid is None or attnum is None:
        return None
    return ix.descriptions.get((oid, attnum))


def _rows_pg_type(ix: CatalogIndex) -> Rows:
    return [{
        "oid": t.oid, "typname": t.typname, "typnamespace": PG_CATALOG_OID,
        "typowner": BOOTSTRAP_SUPERUSER_OID, "typlen": t.typlen, "typbyval": t.typbyval,
        "typtype": t.typtype, "typcategory": t.typcategory, "typispreferred": t.typispreferred,
        "typisdefined": True, "typdelim": t.typdelim,
        "typsubscript": "array_subscript_handler" if t.typcategory == "A" else "-",
        "typelem": t.typelem, "typarray": t.typarray, "typinput": t.typinput,
        "typoutput": t.typoutput, "typreceive": t.typreceive, "typsend": t.typsend,
        "typmodin": "-", "typmodout": "-", "typanalyze": "-", "typalign": t.typalign,
        "typstorage": t.typstorage, "typtypmod": -1, "typcollation": t.typcollation,
    } for t in _all_types()]


def _all_types() -> list[BuiltinType]:
    return sorted(BUILTIN_TYPES.values(), key=lambda t: t.oid)


def _rows_pg_index(ix: CatalogIndex) -> Rows:
    rows = []
    for e in ix.relations.values():
        if e.relkind != "i":
            continue
        n = len(e.key_attnums)
        rows.append({
            "indexrelid": e.oid, "indrelid": e.indexed_oid, "indnatts": n, "indnkeyatts": n,
            "indisunique": e.primary, "indisprimary": e.primary, "indimmediate": True,
            "indisvalid": True, "indisready": True, "indislive": True,
            "indkey": list(e.key_attnums),
            "indcollation": [BUILTIN_TYPES[c.type_oid].typcollation
                             if c.type_oid in BUILTIN_TYPES else 0 for c in e.columns],
            "indclass": [_BTREE_OPCLASS.get(c.type_oid, (0,))[0] for c in e.columns],
            "indoption": [0] * n,
        })
    return rows


def _rows_pg_am(ix: CatalogIndex) -> Rows:
    ams = [(2, "heap", "heap_tableam_handler", "t"), (403, "btree", "bthandler", "i"),
           (405, "hash", "hashhandler", "i"), (783, "gist", "gisthandler", "i"),
           (2742, "gin", "ginhandler", "i"), (4000, "spgist", "spghandler", "i"),
           (3580, "brin", "brinhandler", "i")]
    return [{"oid": o, "amname": n, "amhandler": h, "amtype": t} for o, n, h, t in ams]


def _rows_pg_collation(ix: CatalogIndex) -> Rows:
    return [
        {"oid": 100, "collname": "default", "collprovider": "d", "collencoding": -1},
        {"oid": 950, "collname": "C", "collprovider": "c", "collencoding": -1,
         "collcollate": "C", "collctype": "C"},
        {"oid": 951, "collname": "POSIX", "collprovider": "c", "collencoding": -1,
         "collcollate": "POSIX", "collctype": "POSIX"},
    ]


def _collation_defaults(rows: Rows) -> Rows:
    for row in rows:
        row.update(collnamespace=PG_CATALOG_OID, collowner=BOOTSTRAP_SUPERUSER_OID,
                   collisdeterministic=True)
    return rows


def _rows_pg_opclass(ix: CatalogIndex) -> Rows:
    return [{"oid": oid, "opcmethod": BTREE_AM_OID, "opcname": name,
             "opcnamespace": PG_CATALOG_OID, "opcowner": BOOTSTRAP_SUPERUSER_OID,
             "opcfamily": family, "opcintype": intype, "opcdefault": True}
            for intype, (oid, name, family) in sorted(_BTREE_OPCLASS.items())]


def _rows_pg_database(ix: CatalogIndex) -> Rows:
    return [{"oid": ix.database_oid, "datname": ix.snapshot.database,
             "datdba": BOOTSTRAP_SUPERUSER_OID, "encoding": 6, "datlocprovider": "c",
             "datallowconn": True, "datconnlimit": -1, "dattablespace": 1663,
             "datcollate": "C.UTF-8", "datctype": "C.UTF-8"}]


def role_rows(ix: CatalogIndex) -> Rows:
    """Every role: pg_authid's rows (engine/pg_roles.py)."""
    return pg_roles.authid_rows(ix.snapshot.authz, ix.snapshot.user)


def _rows_pg_authid(ix: CatalogIndex) -> Rows:
    return role_rows(ix)


def _rows_pg_roles(ix: CatalogIndex) -> Rows:
    return pg_roles.roles_rows(ix.snapshot.authz, ix.snapshot.user)


def _rows_pg_user(ix: CatalogIndex) -> Rows:
    return pg_roles.user_rows(ix.snapshot.authz, ix.snapshot.user)


def _rows_pg_db_role_setting(ix: CatalogIndex) -> Rows:
    return pg_roles.db_role_setting_rows(ix.snapshot.authz, ix.database_oid)


def _rows_pg_auth_members(ix: CatalogIndex) -> Rows:
    return pg_roles.auth_member_rows(ix.snapshot.authz)


def _rows_pg_tablespace(ix: CatalogIndex) -> Rows:
    return [{"oid": 1663, "spcname": "pg_default", "spcowner": BOOTSTRAP_SUPERUSER_OID},
            {"oid": 1664, "spcname": "pg_global", "spcowner": BOOTSTRAP_SUPERUSER_OID}]


def _rows_pg_language(ix: CatalogIndex) -> Rows:
    return [{"oid": 12, "lanname": "internal", "lanowner": BOOTSTRAP_SUPERUSER_OID},
            {"oid": 13, "lanname": "c", "lanowner": BOOTSTRAP_SUPERUSER_OID},
            {"oid": 14, "lanname": "sql", "lanowner": BOOTSTRAP_SUPERUSER_OID,
             "lanpltrusted": True}]


def _rows_pg_proc(ix: CatalogIndex) -> Rows:
    return [{
        "oid": p.oid, "proname": p.name, "pronamespace": PG_CATALOG_OID,
        "proowner": BOOTSTRAP_SUPERUSER_OID, "prolang": 12, "procost": 1.0,
        "prorows": 1000.0 if p.retset else 0.0, "prosupport": "-", "prokind": p.kind,
        "proisstrict": True, "proretset": p.retset, "provolatile": p.volatile,
        "proparallel": "s", "pronargs": len(p.argtypes), "prorettype": p.rettype,
        "proargtypes": list(p.argtypes), "prosrc": p.name, "provariadic": p.variadic,
        "proallargtypes": list(p.allargtypes) or None, "proargmodes": list(p.argmodes) or None,
        "proargnames": list(p.argnames) or None, "pronargdefaults": len(p.argdefaults),
        "proargdefaults": ", ".join(p.argdefaults) or None,
    } for p in BUILTIN_FUNCTIONS]


def _rows_pg_extension(ix: CatalogIndex) -> Rows:
    # plpgsql is there in every PostgreSQL database; tools that list extensions expect it.
    return [{"oid": 13559, "extname": "plpgsql", "extowner": BOOTSTRAP_SUPERUSER_OID,
             "extnamespace": PG_CATALOG_OID, "extversion": "1.0"}]


def _rows_pg_settings(ix: CatalogIndex) -> Rows:
    return [{"name": name, "setting": value, "context": "user", "vartype": "string",
             "source": "default", "boot_val": value, "reset_val": value}
            for name, value in sorted(server_settings(ix.snapshot.user).items())]


def server_settings(user: str) -> dict[str, str]:
    """Server-wide defaults as pg_settings shows them (sessions' own values: current_setting)."""
    from icegres.pg import settings

    shown = {}
    for key, value in settings.defaults("15.0", user).items():
        shown[settings.reported_name(key) or key] = value
    return shown


def _lakehouse_tables(ix: CatalogIndex) -> list[RelationEntry]:
    return [e for e in ix.relations.values() if e.relkind == "r" and e.table is not None]


def _rows_pg_tables(ix: CatalogIndex) -> Rows:
    return [{"schemaname": e.schema, "tablename": e.name, "tableowner": pg_roles.owner_name(
             ix.snapshot.authz, ("table", e.schema, e.name), ix.snapshot.user),
             "hasindexes": bool(e.table and e.table.primary_key)}
            for e in _lakehouse_tables(ix)]


def _lakehouse_views(ix: CatalogIndex) -> list[RelationEntry]:
    return [e for e in ix.relations.values() if e.view is not None]


def _rows_pg_views(ix: CatalogIndex) -> Rows:
    return [{"schemaname": e.schema, "viewname": e.name,
             "viewowner": pg_roles.owner_name(ix.snapshot.authz, ("table", e.schema, e.name), ix.snapshot.user),
             "definition": view_definition(ix, e.oid)} for e in _lakehouse_views(ix)]


def _rows_pg_rewrite(ix: CatalogIndex) -> Rows:
    # ev_type '1' is SELECT; 'O' fires in origin mode (the default): what every view's rule has.
    return [{"oid": ix.rules[e.oid], "rulename": "_RETURN", "ev_class": e.oid, "ev_type": "1",
             "ev_enabled": "O", "is_instead": True} for e in _lakehouse_views(ix)]


def _rows_pg_depend(ix: CatalogIndex) -> Rows:
    """A view's dependencies as PostgreSQL records them, on its _RETURN rule: an internal one on
    the view and a normal one on each relation the query names (the view itself among them). dbt
    reads these to learn which views read a relation it replaces. PostgreSQL has a row per column
    the query uses; here a row per relation (refobjsubid 0), as it has for `count(*)`."""
    rows = []
    for e in _lakehouse_views(ix):
        assert e.view is not None
        rule = ix.rules[e.oid]
        refs = {(e.oid, "i"), (e.oid, "n")}
        for key in e.view.reads:
            read = ix.relations.get(key)
            if read is not None and read.relkind in ("r", "v"):
                refs.add((read.oid, "n"))
        rows += [{"classid": PG_REWRITE_OID, "objid": rule, "objsubid": 0, "refclassid": PG_CLASS_OID,
                  "refobjid": oid, "refobjsubid": 0, "deptype": deptype} for oid, deptype in sorted(refs)]
    return rows


def view_definition(ix: CatalogIndex, oid: int | None, pretty: bool = False) -> str | None:
    """pg_get_viewdef(oid [, pretty]): the view's query as stored (its relations qualified), in
    PostgreSQL's frame: a leading space and a closing semicolon. PostgreSQL prints its own
    deparse of the query; icegres keeps the text as written."""
    e = ix.by_oid.get(oid) if oid is not None else None
    if e is None or e.view is None:
        return None
    return f" {e.view.definition.strip().rstrip(';').rstrip()};"


def _rows_pg_indexes(ix: CatalogIndex) -> Rows:
    return [{"schemaname": e.schema, "tablename": e.table.name, "indexname": e.name,
             "indexdef": index_definition(ix, e.oid)}
            for e in ix.relations.values() if e.relkind == "i" and e.table is not None]


def index_definition(ix: CatalogIndex, oid: int, column: int = 0) -> str | None:
    """pg_get_indexdef(oid, column): the CREATE INDEX statement, or one column's name."""
    e = ix.by_oid.get(oid)
    if e is None or e.relkind != "i" or e.table is None:
        return None
    names = [_quote_ident(c.name) for c in e.columns]
    if column:
        return names[column - 1] if 0 < column <= len(names) else ""
    table = f"{_quote_ident(e.schema)}.{_quote_ident(e.table.name)}"
    unique = "UNIQUE " if e.primary else ""
    return (f"CREATE {unique}INDEX {_quote_ident(e.name)} ON {table} "
            f"USING btree ({', '.join(names)})")


# information_schema ----------------------------------------------------------------------------


def _rows_schemata(ix: CatalogIndex) -> Rows:
    return [{"catalog_name": ix.snapshot.database, "schema_name": name,
             "schema_owner": ix.snapshot.user}
            for name, _ in sorted(ix.namespaces.items(), key=lambda kv: kv[1])]


def _rows_tables(ix: CatalogIndex) -> Rows:
    kinds = {"r": "BASE TABLE", "v": "VIEW"}
    return [{"table_catalog": ix.snapshot.database, "table_schema": e.schema,
             "table_name": e.name, "table_type": kinds[e.relkind],
             "is_insertable_into": "YES" if e.relkind == "r" else "NO", "is_typed": "NO"}
            for e in ix.relations.values() if e.relkind in kinds]


# information_schema.columns: (numeric_precision, radix, scale) for the fixed-precision types
_NUMERIC_SHAPE = {21: (16, 2, 0), 23: (32, 2, 0), 20: (64, 2, 0), 700: (24, 2, None),
                  701: (53, 2, None)}
_DATETIME_PRECISION = {1082: 0, 1083: 6, 1266: 6, 1114: 6, 1184: 6, 1186: 6}


def _data_type(type_oid: int) -> str:
    t = BUILTIN_TYPES.get(type_oid)
    if t is None:
        return "USER-DEFINED"
    if t.typcategory == "A":
        return "ARRAY"
    return t.sql_name if type_oid != 1042 else "character"


def _char_length(c: ColumnEntry) -> int | None:
    return c.typmod - 4 if c.type_oid in (1042, 1043) and c.typmod > 4 else None


def _octet_length(c: ColumnEntry, t: BuiltinType | None) -> int | None:
    length = _char_length(c)
    if length is not None:
        return length * UTF8_BYTES_MAX
    return 1073741824 if t and t.typcategory == "S" else None


def _rows_columns(ix: CatalogIndex) -> Rows:
    defaults = {(rel, attnum): text for _, rel, attnum, text in ix.defaults}
    rows = []
    for e in ix.relations.values():
        if e.relkind in ("i", "S"):
            continue
        for c in e.columns:
            t = BUILTIN_TYPES.get(c.type_oid)
            precision, radix, scale = _NUMERIC_SHAPE.get(c.type_oid, (None, None, None))
            if c.type_oid == 1700 and c.typmod >= 4:
                precision, radix, scale = ((c.typmod - 4) >> 16) & 0xFFFF, 10, (c.typmod - 4) & 0xFFFF
            rows.append({
                "table_catalog": ix.snapshot.database, "table_schema": e.schema,
                "table_name": e.name, "column_name": c.name, "ordinal_position": c.attnum,
                "column_default": defaults.get((e.oid, c.attnum)),
                "is_nullable": "NO" if c.not_null else "YES", "data_type": _data_type(c.type_oid),
                "character_maximum_length": _char_length(c),
                "character_octet_length": _octet_length(c, t),
                "numeric_precision": precision, "numeric_precision_radix": radix,
                "numeric_scale": scale,
                "datetime_precision": _DATETIME_PRECISION.get(c.type_oid),
                "udt_catalog": ix.snapshot.database, "udt_schema": "pg_catalog",
                "udt_name": t.typname if t else None, "dtd_identifier": str(c.attnum),
                "is_self_referencing": "NO", "is_identity": "YES" if c.identity else "NO", "identity_cycle": "NO",
                "identity_generation": {"a": "ALWAYS", "d": "BY DEFAULT"}.get(c.identity),
                "is_generated": "NEVER", "is_updatable": "YES" if e.relkind == "r" else "NO",
            })
    return rows


def _rows_views(ix: CatalogIndex) -> Rows:
    return [{"table_catalog": ix.snapshot.database, "table_schema": e.schema, "table_name": e.name,
             "view_definition": view_definition(ix, e.oid), "check_option": "NONE",
             "is_updatable": "NO", "is_insertable_into": "NO", "is_trigger_updatable": "NO",
             "is_trigger_deletable": "NO", "is_trigger_insertable_into": "NO"}
            for e in _lakehouse_views(ix)]


# Relations not listed here are empty: a lakehouse has no triggers, policies, sequences, ...
_BUILDERS: dict[str, Callable[[CatalogIndex], Rows]] = {
    "pg_catalog.pg_namespace": _rows_pg_namespace,
    "pg_catalog.pg_class": _rows_pg_class,
    "pg_catalog.pg_sequence": pg_sequence_rows.rows_pg_sequence,
    "information_schema.sequences": pg_sequence_rows.rows_sequences,
    "pg_catalog.pg_attribute": _rows_pg_attribute,
    "pg_catalog.pg_attrdef": lambda ix: [{"oid": oid, "adrelid": rel, "adnum": attnum, "adbin": text}
                                         for oid, rel, attnum, text in ix.defaults],
    "pg_catalog.pg_type": _rows_pg_type,
    "pg_catalog.pg_description": _rows_pg_description,
    "pg_catalog.pg_init_privs": _rows_pg_init_privs,
    "pg_catalog.pg_get_keywords": lambda _ix: keyword_rows(),
    "pg_catalog.pg_constraint": pg_constraints.rows_pg_constraint,
    "pg_catalog.pg_index": _rows_pg_index,
    "pg_catalog.pg_am": _rows_pg_am,
    "pg_catalog.pg_collation": lambda ix: _collation_defaults(_rows_pg_collation(ix)),
    "pg_catalog.pg_opclass": _rows_pg_opclass,
    "pg_catalog.pg_database": _rows_pg_database,
    "pg_catalog.pg_authid": _rows_pg_authid,
    "pg_catalog.pg_roles": _rows_pg_roles,
    "pg_catalog.pg_user": _rows_pg_user,
    "pg_catalog.pg_auth_members": _rows_pg_auth_members,
    "pg_catalog.pg_db_role_setting": _rows_pg_db_role_setting,
    "pg_catalog.pg_tablespace": _rows_pg_tablespace,
    "pg_catalog.pg_language": _rows_pg_language,
    "pg_catalog.pg_proc": _rows_pg_proc,
    "pg_catalog.pg_extension": _rows_pg_extension,
    "pg_catalog.pg_settings": _rows_pg_settings,
    "pg_catalog.pg_tables": _rows_pg_tables,
    "pg_catalog.pg_indexes": _rows_pg_indexes,
    "pg_catalog.pg_views": _rows_pg_views,
    "pg_catalog.pg_rewrite": _rows_pg_rewrite,
    "pg_catalog.pg_depend": _rows_pg_depend,
    "information_schema.schemata": _rows_schemata,
    "information_schema.tables": _rows_tables,
    "pg_catalog.pg_default_acl": lambda ix: pg_roles.default_acl_rows(ix.snapshot.authz, ix.snapshot.user, ix.namespaces),
    "pg_catalog.pg_policy": lambda ix: pg_roles.policy_rows(
        ix.snapshot.authz, {k: e.oid for k, e in ix.relations.items()}),
    "information_schema.table_privileges": lambda ix: pg_roles.table_privilege_rows(
        ix.snapshot.authz, ix.snapshot.user, ix.snapshot.database,
        [(e.schema, e.name) for e in ix.relations.values() if e.table is not None or e.view is not None]),
    "information_schema.column_privileges": lambda ix: pg_roles.column_privilege_rows(
        ix.snapshot.authz, ix.snapshot.user, ix.snapshot.database,
        [(e.schema, e.name, [c.name for c in e.columns]) for e in ix.relations.values()
         if e.table is not None or e.view is not None]),
    "information_schema.columns": _rows_columns,
    "information_schema.views": _rows_views,
    "information_schema.table_constraints": pg_constraints.rows_table_constraints,
    "information_schema.key_column_usage": pg_constraints.rows_key_column_usage,
    "information_schema.check_constraints": pg_constraints.rows_check_constraints,
    "information_schema.constraint_column_usage": pg_constraints.rows_constraint_column_usage,
}


def _to_table(rel: RelationDef, rows: Rows) -> pa.Table:
    # Column by column, and columns no row mentions as one repeated default: pg_attribute and
    # information_schema.columns have a row per lakehouse column and mostly default values.
    mentioned = set().union(*(row.keys() for row in rows)) if rows else set()
    arrays = []
    for (name, kind), column in zip(rel.columns, rel.arrow_schema, strict=True):
        default = _DEFAULT_BY_KIND.get(kind)
        if name in mentioned:
            arrays.append(text_arrays.array([row.get(name, default) for row in rows], column.type))
        elif default is None:
            arrays.append(pa.nulls(len(rows), type=column.type))
        else:
            arrays.append(pa.array([default] * len(rows), type=column.type))
    return pa.Table.from_arrays(arrays, schema=rel.arrow_schema)


def build_catalog_tables(snap: CatalogSnapshot) -> dict[str, pa.Table]:
    """Every catalog relation as an Arrow table, keyed "pg_catalog.<rel>" / "information_schema.<rel>"."""
    ix = snap.index
    return {rel.key: _to_table(rel, _BUILDERS.get(rel.key, lambda _ix: [])(ix))
            for rel in RELATIONS}


# --- registration -------------------------------------------------------------------------------


@dataclass
class _Latest:
    """The newest snapshot: what catalog functions answer from.

    One process serves one lakehouse, and sessions get SessionContexts of their own over the
    shared catalog, so the catalog functions (registered per session) find the catalog here.
    """

    snapshot: CatalogSnapshot | None = None
    lock: threading.Lock = field(default_factory=threading.Lock)


_LATEST = _Latest()


def note_snapshot(snap: CatalogSnapshot) -> None:
    """From now on the catalog functions answer from `snap` (its relations may be registered
    later: engine/catalog_tables.py)."""
    with _LATEST.lock:
        _LATEST.snapshot = snap


def current_index(env: Any = None) -> CatalogIndex | None:
    """The catalog a session's functions answer from: `env.catalog_snapshot` when the session
    has one (a CatalogSnapshot, or a callable returning the current one), else the snapshot
    registered last (None before the first registration).

    One process normally serves one lakehouse and the last registration is the truth; a process
    hosting several engines (tests) gives each session its own through env.
    """
    source = getattr(env, "catalog_snapshot", None)
    snap = source() if callable(source) else source
    if snap is None:
        snap = _LATEST.snapshot
    return snap.index if snap is not None else None
