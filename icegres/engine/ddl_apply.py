"""Apply a parsed DDL command (icegres.engine.ddl) to the lakehouse catalog.

Blocking (catalog SQL or REST calls): run it in a worker thread. Each command checks everything it
can before it changes anything, so a failing DROP of several names drops none of them; the
checks and the changes are separate catalog calls, so a concurrent session can still slip in
between (that race ends in the catalog's own error, mapped to PostgreSQL's).

DROP TABLE removes the table from the catalog only: its metadata and data files stay in storage.
"""

from __future__ import annotations

import itertools
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from pyiceberg.exceptions import (
    CommitFailedException,
    NamespaceAlreadyExistsError,
    NamespaceNotEmptyError,
    NoSuchNamespaceError,
    NoSuchTableError,
    TableAlreadyExistsError,
    ValidationError,
)
from pyiceberg.partitioning import PartitionField as IcebergPartitionField
from pyiceberg.partitioning import PartitionSpec
from pyiceberg.schema import Schema
from pyiceberg.transforms import (
    BucketTransform,
    DayTransform,
    HourTransform,
    IdentityTransform,
    MonthTransform,
    Transform,
    TruncateTransform,
    YearTransform,
)
from pyiceberg.types import (
    BinaryType,
    BooleanType,
    DateType,
    DecimalType,
    DoubleType,
    FloatType,
    IcebergType,
    IntegerType,
    ListType,
    LongType,
    NestedField,
    StringType,
    TimestampType,
    TimestamptzType,
    TimeType,
    UUIDType,
)

from icegres.engine import check_text, ddl_refs, ddl_sequences, long_texts, procedures, view_ddl
from icegres.engine.catalog_views import NoSuchView, ViewExists
from icegres.engine.ddl_commands import (
    COLUMN_IDENTITY_PREFIX,
    PRIMARY_KEY_PROPERTY,
    AddCheck,
    AddColumn,
    AlterColumnType,
    AlterSequence,
    AlterTable,
    ColumnDef,
    CommentColumn,
    CreateIndex,
    CreateSchema,
    CreateSequence,
    CreateTable,
    CreateTableAs,
    CreateView,
    DdlCommand,
    DropColumn,
    DropConstraint,
    DropIndex,
    DropNotNull,
    DropSchema,
    DropSequence,
    DropTable,
    DropView,
    PartitionField,
    RenameColumn,
    RenameTable,
    RenameView,
    ResetProperties,
    SetDefault,
    SetNotNull,
    SetProperties,
    check_property,
    column_default_property,
    column_type_property,
    declared_char_types,
    declared_defaults,
)
from icegres.engine.ddl_index import apply_create_index, apply_drop_index
from icegres.engine.ddl_refs import RefChange
from icegres.engine.internal import is_internal
from icegres.engine.pg_types import ColumnType, pg_name_of
from icegres.engine.procedures import Call
from icegres.engine.sequence_store import is_sequence
from icegres.pg import errors as e
from icegres.pg.chars import BPCHAR_OID, VARCHAR_OID, CharType
from icegres.pg.errors import PgError

if TYPE_CHECKING:
    import pyarrow as pa
    from pyiceberg.table import Table
    from pyiceberg.table.update.schema import UpdateSchema

    from icegres.engine.catalog import Lakehouse

# PostgreSQL always has a public schema; a lakehouse may not have the namespace yet. It is
# created the first time a table is created in it.
PUBLIC = "public"
# search_path entries that never name a lakehouse namespace.
_SYSTEM_SCHEMAS = ("pg_catalog", "information_schema")

INVALID_SCHEMA_NAME = "3F000"
DUPLICATE_SCHEMA = "42P06"
RESERVED_NAME = "42939"
DUPLICATE_TABLE = "42P07"
DUPLICATE_COLUMN = "42701"
DEPENDENT_OBJECTS_STILL_EXIST = "2BP01"
INVALID_TABLE_DEFINITION = "42P16"
DATATYPE_MISMATCH = "42804"
SERIALIZATION_FAILURE = "40001"

WIDENING_HINT = ("Iceberg allows integer to bigint, real to double precision and numeric(p,s) to "
                 "numeric(p2,s) with p2 > p.")

_PRIMITIVES: dict[str, Callable[[], IcebergType]] = {
    "boolean": BooleanType,
    "int": IntegerType,
    "long": LongType,
    "float": FloatType,
    "double": DoubleType,
    "string": StringType,
    "binary": BinaryType,
    "date": DateType,
    "time": TimeType,
    "timestamp": TimestampType,
    "timestamptz": TimestamptzType,
    "uuid": UUIDType,
}


def apply_ddl(lakehouse: Lakehouse, cmd: DdlCommand, search_path: list[str]) -> list[str]:
    """Perform `cmd` on the catalog; returns the NOTICE messages PostgreSQL would send.

    Unqualified names: CREATE uses the first schema of `search_path` that exists (public always
    counts, and is created on demand); DROP and ALTER use the first schema holding the table.
    Raises PgError with PostgreSQL's SQLSTATE and message. CREATE TABLE AS is not applied here:
    its query runs elsewhere, which then uses `iceberg_schema_for`-style schemas and
    `partition_spec_for`.
    """
    notices: list[str] = []
    try:
        if isinstance(cmd, CreateSchema):
            _create_schema(lakehouse, cmd, notices)
        elif isinstance(cmd, DropSchema):
            _drop_schema(lakehouse, cmd, notices)
        elif isinstance(cmd, CreateTable):
            _create_table(lakehouse, cmd, search_path, notices)
        elif isinstance(cmd, DropTable):
            _drop_table(lakehouse, cmd, search_path, notices)
        elif isinstance(cmd, AlterTable):
            _alter_table(lakehouse, cmd, search_path, notices)
        elif isinstance(cmd, CreateIndex):
            namespace = _find_table(lakehouse, cmd.schema, cmd.table, search_path)
            if namespace is None:
                raise PgError(e.UNDEFINED_TABLE, f'relation "{_display(cmd.schema, cmd.table)}" does not exist')
            apply_create_index(lakehouse, cmd, namespace, notices)
        elif isinstance(cmd, DropIndex):
            apply_drop_index(lakehouse, cmd, _lake_path(search_path), notices)
        elif isinstance(cmd, DropView):
            _drop_view(lakehouse, cmd, search_path, notices)
        elif isinstance(cmd, RenameView):
            _rename_view(lakehouse, cmd, search_path, notices)
        elif isinstance(cmd, Call):
            namespace = _find_table(lakehouse, cmd.schema, cmd.name, search_path)
            if namespace is None:
                raise PgError(e.UNDEFINED_TABLE, f'relation "{_display(cmd.schema, cmd.name)}" does not exist')
            procedures.apply(lakehouse.load_table(namespace, cmd.name), cmd, f"{namespace}.{cmd.name}", notices)
        elif isinstance(cmd, CreateSequence | AlterSequence | DropSequence):
            create_in = creation_schema(lakehouse, cmd.schema, search_path) if isinstance(cmd, CreateSequence) else None
            ddl_sequences.apply(lakehouse, cmd, _lake_path(search_path), create_in, notices)
        elif isinstance(cmd, CreateTableAs | CreateView):
            raise TypeError(f"{type(cmd).__name__} is executed by the query engine, not apply_ddl")
        else:
            raise TypeError(f"not a DDL command: {cmd!r}")
    except CommitFailedException:
        raise PgError(SERIALIZATION_FAILURE,
                      "could not serialize access due to concurrent update") from None
    return notices


# --- Iceberg schema and partition spec ------------------------------------------------------


def iceberg_type(ctype: ColumnType, next_id: Callable[[], int]) -> IcebergType:
    """The Iceberg type for a column type; nested field ids come from `next_id`."""
    if ctype.kind == "list":
        assert ctype.element is not None
        element_id = next_id()
        # PostgreSQL array elements may be NULL.
        return ListType(element_id=element_id, element_type=iceberg_type(ctype.element, next_id),
                        element_required=False)
    if ctype.kind == "decimal":
        assert ctype.precision is not None and ctype.scale is not None
        return DecimalType(ctype.precision, ctype.scale)
    return _PRIMITIVES[ctype.kind]()


def iceberg_schema_for(columns: Iterable[ColumnDef], primary_key: Iterable[str] = ()) -> Schema:
    """The Iceberg schema for column definitions: NOT NULL columns are required fields and the
    primary key columns are the identifier fields. Top-level field ids are 1..n in order."""
    columns = list(columns)
    nested_ids = itertools.count(len(columns) + 1)
    fields = [
        NestedField(field_id=i, name=c.name, field_type=iceberg_type(c.type, lambda: next(nested_ids)),
                    required=c.not_null)
        for i, c in enumerate(columns, start=1)
    ]
    ids = {c.name: i for i, c in enumerate(columns, start=1)}
    return Schema(*fields, identifier_field_ids=[ids[name] for name in primary_key])


def char_type_properties(schema: Schema, columns: Iterable[tuple[str, CharType | None]]) -> dict[str, str]:
    """The table properties that keep the character types of a new table's columns (by name),
    under the field ids the catalog gives `schema`'s columns when it creates the table."""
    from pyiceberg.schema import assign_fresh_schema_ids

    declared = [(name, char) for name, char in columns if char is not None]
    if not declared:
        return {}
    fresh = assign_fresh_schema_ids(schema)  # what create_table does with the schema it is given
    return {column_type_property(fresh.find_field(name).field_id): char.name for name, char in declared}


def default_properties(schema: Schema, columns: Iterable[tuple[str, str | None]],
                       key: Callable[[int], str] = column_default_property) -> dict[str, str]:
    """The table properties that keep a new table's DEFAULT expressions (by column name), under
    the field ids the catalog gives `schema`'s columns when it creates the table (`key`: the
    property of a field id; the identity kinds use it too)."""
    from pyiceberg.schema import assign_fresh_schema_ids

    declared = [(name, text) for name, text in columns if text is not None]
    if not declared:
        return {}
    fresh = assign_fresh_schema_ids(schema)
    return {key(fresh.find_field(name).field_id): text for name, text in declared}


def partition_spec_for(schema: Schema, partitioning: Iterable[PartitionField]) -> PartitionSpec:
    """The Iceberg partition spec; PgError 42703 for an unknown column, 42804 for a transform the
    column's type cannot take (day of an integer, say)."""
    fields = []
    for i, pf in enumerate(partitioning):
        source = next((f for f in schema.fields if f.name == pf.column), None)
        if source is None:
            raise PgError(e.UNDEFINED_COLUMN, f'column "{pf.column}" named in partition key does not exist')
        transform = _transform(pf)
        if not transform.can_transform(source.field_type):
            raise PgError(DATATYPE_MISMATCH,
                          f'cannot partition by {_describe(pf)}: column "{pf.column}" is of type '
                          f"{pg_name_of(source.field_type)}")
        fields.append(IcebergPartitionField(source_id=source.field_id, field_id=1000 + i,
                                            transform=transform, name=_partition_name(pf)))
    return PartitionSpec(*fields)


def _transform(pf: PartitionField) -> Transform[Any, Any]:
    if pf.transform == "bucket":
        assert pf.param is not None
        return BucketTransform(pf.param)
    if pf.transform == "truncate":
        assert pf.param is not None
        return TruncateTransform(pf.param)
    return {"identity": IdentityTransform, "year": YearTransform, "month": MonthTransform,
            "day": DayTransform, "hour": HourTransform}[pf.transform]()


def _partition_name(pf: PartitionField) -> str:
    # pyiceberg's own naming (UpdateSpec), so specs read the same whoever made them.
    if pf.transform == "identity":
        return pf.column
    if pf.transform == "bucket":
        return f"{pf.column}_bucket_{pf.param}"
    if pf.transform == "truncate":
        return f"{pf.column}_trunc_{pf.param}"
    return f"{pf.column}_{pf.transform}"


def _describe(pf: PartitionField) -> str:
    args = f"{pf.param}, {pf.column}" if pf.param is not None else pf.column
    return f"{pf.transform}({args})"


# --- name resolution ------------------------------------------------------------------------


def _lake_path(search_path: list[str]) -> list[str]:
    return [s for s in search_path
            if s and not s.startswith(("$", "pg_temp")) and s not in _SYSTEM_SCHEMAS]


def creation_schema(lakehouse: Lakehouse, schema: str | None, search_path: list[str]) -> str:
    if schema is not None:
        if schema == PUBLIC or lakehouse.namespace_exists(schema):
            return schema
        raise PgError(INVALID_SCHEMA_NAME, f'schema "{schema}" does not exist')
    for candidate in _lake_path(search_path):
        if candidate == PUBLIC or lakehouse.namespace_exists(candidate):
            return candidate
    raise PgError(INVALID_SCHEMA_NAME, "no schema has been selected to create in")


def _find_table(lakehouse: Lakehouse, schema: str | None, name: str,
                search_path: list[str]) -> str | None:
    """The namespace holding the table, searching the path for an unqualified name."""
    for candidate in [schema] if schema is not None else _lake_path(search_path):
        if lakehouse.table_exists(candidate, name):
            return candidate
    return None


def _display(schema: str | None, name: str) -> str:
    return f"{schema}.{name}" if schema else name


# --- schemas --------------------------------------------------------------------------------


def _create_schema(lakehouse: Lakehouse, cmd: CreateSchema, notices: list[str]) -> None:
    if is_internal(cmd.name):
        # As PostgreSQL refuses "pg_" names: a schema of that name would hold the user's tables
        # beside icegres's records, and be listed nowhere.
        raise PgError(RESERVED_NAME, f'unacceptable schema name "{cmd.name}"',
                      detail="The name is reserved for icegres's own records in the catalog.")
    try:
        if lakehouse.namespace_exists(cmd.name):
            raise NamespaceAlreadyExistsError(cmd.name)
        lakehouse.create_namespace(cmd.name)
    except NamespaceAlreadyExistsError:
        if not cmd.if_not_exists:
            raise PgError(DUPLICATE_SCHEMA, f'schema "{cmd.name}" already exists') from None
        notices.append(f'schema "{cmd.name}" already exists, skipping')


def _drop_schema(lakehouse: Lakehouse, cmd: DropSchema, notices: list[str]) -> None:
    plan: list[tuple[str, list[str]]] = []
    views = view_ddl.catalog_views_now(lakehouse)
    for name in dict.fromkeys(cmd.names):
        if not lakehouse.namespace_exists(name):
            if not cmd.if_exists:
                raise PgError(INVALID_SCHEMA_NAME, f'schema "{name}" does not exist')
            notices.append(f'schema "{name}" does not exist, skipping')
            continue
        tables = lakehouse.list_table_names(name)
        in_schema = sorted(k[1] for k in views if k[0] == name)
        if (tables or in_schema) and not cmd.cascade:
            raise _dependents_error(name, tables, in_schema)
        plan.append((name, tables))
    dropped_schemas = {name for name, _ in plan}
    inside = {k for k in views if k[0] in dropped_schemas}
    inside |= {(name, t) for name, tables in plan for t in tables}
    doomed = [k for k in view_ddl.dependents(views, inside) if k not in inside]
    doomed += sorted((k for k in inside if k in views), reverse=True)
    view_ddl.drop_each(lakehouse, doomed)
    notices += [f"drop cascades to view {k[0]}.{k[1]}" for k in doomed]
    for name, tables in plan:
        for table in tables:
            try:
                lakehouse.drop_table(name, table)
            except NoSuchTableError:
                continue
            notices.append(f"drop cascades to table {name}.{table}")
        try:
            lakehouse.drop_namespace(name)
        except NamespaceNotEmptyError:
            # A table was created in it since it was listed.
            raise _dependents_error(name, lakehouse.list_table_names(name)) from None
        except NoSuchNamespaceError:
            pass


def _dependents_error(name: str, tables: list[str], views: list[str] | None = None) -> PgError:
    detail = "\n".join([f"table {name}.{table} depends on schema {name}" for table in tables]
                       + [f"view {name}.{view} depends on schema {name}" for view in views or ()]) or None
    return PgError(DEPENDENT_OBJECTS_STILL_EXIST,
                   f"cannot drop schema {name} because other objects depend on it", detail=detail,
                   hint="Use DROP ... CASCADE to drop the dependent objects too.")


# --- tables ---------------------------------------------------------------------------------


def _create_table(lakehouse: Lakehouse, cmd: CreateTable, search_path: list[str],
                  notices: list[str]) -> None:
    namespace = creation_schema(lakehouse, cmd.schema, search_path)
    if lakehouse.table_exists(namespace, cmd.name) or lakehouse.view_location(namespace, cmd.name):
        already_exists(cmd, notices)
        return
    try:
        create_table_in(lakehouse, namespace, cmd.name, cmd)
    except TableAlreadyExistsError:
        already_exists(cmd, notices)


def create_table_in(lakehouse: Lakehouse, namespace: str, name: str, cmd: CreateTable) -> Table:
    """Create the table `cmd` defines as `namespace.name` (a block's hidden name, or its own),
    with a sequence for each serial or identity column (made first, dropped if the table is not)."""
    if namespace == PUBLIC:
        lakehouse.create_namespace_if_missing(PUBLIC)
    cmd, sequences = ddl_sequences.with_sequences(lakehouse, namespace, cmd)
    try:
        schema, spec, properties = table_definition(cmd)
        if sequences:
            properties[ddl_sequences.OWNED_SEQUENCES_PROPERTY] = ",".join(n for _, n in sequences)
        return lakehouse.create_partitioned_table(namespace, name, schema, spec, properties)
    except BaseException:
        for key in sequences:
            ddl_sequences.drop(lakehouse, key)
        raise


def table_definition(cmd: CreateTable) -> tuple[Schema, PartitionSpec, dict[str, str]]:
    """The Iceberg schema, partition spec and properties of the table `cmd` defines."""
    schema = iceberg_schema_for(cmd.columns, cmd.primary_key)
    spec = partition_spec_for(schema, cmd.partitioning)
    properties = dict(cmd.properties)
    if cmd.primary_key:
        properties[PRIMARY_KEY_PROPERTY] = ",".join(cmd.primary_key)
    properties.update(char_type_properties(schema, [(c.name, c.type.char) for c in cmd.columns]))
    properties.update(default_properties(schema, [(c.name, c.default) for c in cmd.columns]))
    if any(c.identity and c.default is None for c in cmd.columns):
        raise PgError(e.FEATURE_NOT_SUPPORTED, "serial and identity columns of temporary tables are not supported",
                      hint="Their sequences live in the lake's catalog; use an ordinary table.")
    properties.update(default_properties(schema, [(c.name, c.identity) for c in cmd.columns if c.identity in ("a", "d")],
                                         key=lambda fid: f"{COLUMN_IDENTITY_PREFIX}{fid}"))
    taken = [f"{cmd.name}_pkey"] if cmd.primary_key else []
    properties.update({check_property(n): t for n, t in check_text.named(cmd.name, cmd.checks, taken)})
    return schema, spec, properties


def already_exists(cmd: CreateTable | CreateTableAs, notices: list[str]) -> None:
    if not cmd.if_not_exists:
        raise PgError(DUPLICATE_TABLE, f'relation "{cmd.name}" already exists')
    notices.append(f'relation "{cmd.name}" already exists, skipping')


def _drop_table(lakehouse: Lakehouse, cmd: DropTable, search_path: list[str],
                notices: list[str]) -> None:
    found: list[tuple[str, str]] = []
    for schema, name in dict.fromkeys(cmd.names):
        relation = view_ddl.find_relation(lakehouse, schema, name, _lake_path(search_path))
        if relation is not None and relation[0] == "view":
            raise view_ddl.wrong_type_for_drop(relation, "table")
        if relation is None:
            if not cmd.if_exists:
                raise PgError(e.UNDEFINED_TABLE, f'table "{_display(schema, name)}" does not exist')
            notices.append(f'table "{_display(schema, name)}" does not exist, skipping')
            continue
        if is_sequence(lakehouse.load_table(*relation[1]).properties):
            raise PgError(e.WRONG_OBJECT_TYPE, f'"{name}" is not a table', hint="Use DROP SEQUENCE to remove a sequence.")
        found.append(relation[1])
    views = view_ddl.catalog_views_now(lakehouse) if found else {}
    if not cmd.cascade:
        for key in dict.fromkeys(found):
            view_ddl.refuse_dependents("table", key, views, search_path)
    doomed = view_ddl.dependents(views, set(found))
    view_ddl.drop_each(lakehouse, doomed)
    notices += view_ddl.cascade_notice(doomed, search_path)
    for namespace, name in dict.fromkeys(found):
        try:
            owned = lakehouse.load_table(namespace, name).properties.get(ddl_sequences.OWNED_SEQUENCES_PROPERTY, "")
            lakehouse.drop_table(namespace, name)
        except NoSuchTableError:
            if not cmd.if_exists:
                raise PgError(e.UNDEFINED_TABLE, f'table "{name}" does not exist') from None
            continue
        for sequence in filter(None, owned.split(",")):  # a serial column's sequence goes with its table
            if lakehouse.table_exists(namespace, sequence):
                ddl_sequences.drop(lakehouse, (namespace, sequence))


# --- views ----------------------------------------------------------------------------------


def _drop_view(lakehouse: Lakehouse, cmd: DropView, search_path: list[str], notices: list[str]) -> None:
    found: list[tuple[str, str]] = []
    for schema, name in dict.fromkeys(cmd.names):
        relation = view_ddl.find_relation(lakehouse, schema, name, _lake_path(search_path))
        if relation is not None and relation[0] == "table":
            raise view_ddl.wrong_type_for_drop(relation, "view")
        if relation is None:
            if not cmd.if_exists:
                raise view_ddl.undefined("view", schema, name)
            notices.append(f'view "{_display(schema, name)}" does not exist, skipping')
            continue
        found.append(relation[1])
    if not found:
        return
    views = view_ddl.catalog_views_now(lakehouse)
    doomed = view_ddl.dependents(views, set(found))
    if not cmd.cascade:
        for key in dict.fromkeys(found):
            view_ddl.refuse_dependents("view", key, {k: v for k, v in views.items() if k not in found},
                                       search_path)
    view_ddl.drop_each(lakehouse, doomed)
    notices += view_ddl.cascade_notice(doomed, search_path)
    for key in dict.fromkeys(found):
        try:
            lakehouse.drop_view(*key)
        except NoSuchView:
            if not cmd.if_exists:
                raise view_ddl.undefined("view", None, key[1]) from None


def _rename_view(lakehouse: Lakehouse, cmd: RenameView, search_path: list[str], notices: list[str]) -> None:
    relation = view_ddl.find_relation(lakehouse, cmd.schema, cmd.name, _lake_path(search_path))
    if relation is None:
        if not cmd.if_exists:
            raise PgError(e.UNDEFINED_TABLE, f'relation "{_display(cmd.schema, cmd.name)}" does not exist')
        notices.append(f'relation "{_display(cmd.schema, cmd.name)}" does not exist, skipping')
        return
    if relation[0] == "table":
        raise PgError(view_ddl.WRONG_OBJECT_TYPE, f'"{cmd.name}" is not a view')
    _rename_view_to(lakehouse, relation[1], cmd.new_name)


def _rename_view_to(lakehouse: Lakehouse, key: tuple[str, str], new_name: str) -> None:
    namespace, name = key
    if lakehouse.table_exists(namespace, new_name) or lakehouse.view_location(namespace, new_name):
        raise PgError(DUPLICATE_TABLE, f'relation "{new_name}" already exists')
    views = view_ddl.catalog_views_now(lakehouse)
    try:
        lakehouse.rename_view(namespace, name, new_name)
    except ViewExists:
        raise PgError(DUPLICATE_TABLE, f'relation "{new_name}" already exists') from None
    except NoSuchView:
        raise PgError(e.UNDEFINED_TABLE, f'relation "{name}" does not exist') from None
    view_ddl.retarget(lakehouse, views, key, (namespace, new_name))


def create_view(lakehouse: Lakehouse, cmd: CreateView, arrow_schema: pa.Schema, sql: str,
                search_path: list[str], known: dict[tuple[str, str], Any] | None = None) -> tuple[str, str]:
    """Create (or replace) the view CREATE VIEW names: its query `sql` (relations qualified)
    has the columns `arrow_schema` (PostgreSQL's names). Returns the view's key."""

    namespace = creation_schema(lakehouse, cmd.schema, search_path)
    names, schema = view_columns(cmd, arrow_schema)
    replacing = None
    key = (namespace, cmd.name)
    if lakehouse.table_exists(namespace, cmd.name):
        if cmd.or_replace:
            raise PgError(view_ddl.WRONG_OBJECT_TYPE, f'"{cmd.name}" is not a view')
        raise PgError(DUPLICATE_TABLE, f'relation "{cmd.name}" already exists')
    if cmd.or_replace:
        location = lakehouse.view_location(namespace, cmd.name)
        if location is not None:
            views = view_ddl.catalog_views_now(lakehouse, known)
            replacing = views.get(key)
            if replacing is not None:
                view_ddl.check_replacement(replacing, [
                    (n, f.type) for n, f in zip(names, arrow_schema, strict=True)])
                if key in reads_of(sql) or set(view_ddl.dependents(views, {key})) & reads_of(sql):
                    # The new query would read the view through itself.
                    raise PgError("42P17", f'infinite recursion detected in rules for relation "{cmd.name}"')
    if namespace == PUBLIC:
        lakehouse.create_namespace_if_missing(PUBLIC)
    view_ddl.create(lakehouse, key, sql, schema, replacing)
    return key


def view_columns(cmd: CreateView, arrow_schema: pa.Schema) -> tuple[list[str], Schema]:
    """A view's column names (those CREATE VIEW gives, then the query's) and Iceberg schema."""
    if len(cmd.column_names) > len(arrow_schema):
        raise PgError("42601", "CREATE VIEW specifies more column names than columns")
    names = list(cmd.column_names) + arrow_schema.names[len(cmd.column_names):]
    if len(set(names)) != len(names):
        dup = next(n for n in names if names.count(n) > 1)
        raise PgError("42701", f'column "{dup}" specified more than once')
    return names, iceberg_schema_of_arrow(names, arrow_schema, "view")


def reads_of(sql: str) -> set[tuple[str, str]]:
    from icegres.engine import view_defs
    from icegres.sql.parse import parse

    return {k for k, _ in view_defs.qualified_refs(parse(sql)) if k is not None}


# --- ALTER TABLE ----------------------------------------------------------------------------


@dataclass
class _Column:
    """A column as the ALTER's earlier actions left it (field_id None: added by this ALTER)."""

    field_id: int | None
    type: IcebergType
    required: bool
    char: CharType | None = None  # varchar(n) / char(n) / bpchar kept as a table property
    char_changed: bool = False  # this ALTER declared it (its property is written at commit)
    default: str | None = None  # its DEFAULT expression, kept as a table property
    default_changed: bool = False


def _alter_table(lakehouse: Lakehouse, cmd: AlterTable, search_path: list[str],
                 notices: list[str]) -> None:
    relation = view_ddl.find_relation(lakehouse, cmd.schema, cmd.name, _lake_path(search_path))
    if relation is None:
        if not cmd.if_exists:
            raise PgError(e.UNDEFINED_TABLE, f'relation "{_display(cmd.schema, cmd.name)}" does not exist')
        notices.append(f'relation "{_display(cmd.schema, cmd.name)}" does not exist, skipping')
        return
    namespace = relation[1][0]
    renaming = len(cmd.actions) == 1 and isinstance(cmd.actions[0], RenameTable)
    if relation[0] == "view":
        if not renaming:
            raise PgError(view_ddl.WRONG_OBJECT_TYPE, f'"{cmd.name}" is not a table')
        _rename_view_to(lakehouse, relation[1], cmd.actions[0].new_name)  # type: ignore[union-attr]
        return
    if renaming:
        new_name = cmd.actions[0].new_name  # type: ignore[union-attr]
        if lakehouse.table_exists(namespace, new_name) or lakehouse.view_location(namespace, new_name):
            raise PgError(DUPLICATE_TABLE, f'relation "{new_name}" already exists')
        views = view_ddl.catalog_views_now(lakehouse)
        try:
            lakehouse.rename_table(namespace, cmd.name, new_name)
        except TableAlreadyExistsError:
            raise PgError(DUPLICATE_TABLE, f'relation "{new_name}" already exists') from None
        view_ddl.retarget(lakehouse, views, (namespace, cmd.name), (namespace, new_name))
        return
    try:
        table = lakehouse.load_table(namespace, cmd.name)
    except NoSuchTableError:
        raise PgError(e.UNDEFINED_TABLE, f'relation "{_display(cmd.schema, cmd.name)}" does not exist') from None
    if len(cmd.actions) == 1 and isinstance(cmd.actions[0], RefChange):
        ddl_refs.apply(table, cmd.actions[0], f"{namespace}.{cmd.name}", notices)
        return
    Alteration(table, cmd.name, notices, lakehouse, namespace).run(cmd.actions)


class Alteration:
    """Checks each action against the table as the earlier actions leave it, then commits all
    schema and property changes in one Iceberg transaction."""

    def __init__(self, table: Table, name: str, notices: list[str], lakehouse: Lakehouse | None = None,
                 namespace: str = "") -> None:
        self.lakehouse = lakehouse
        self.namespace = namespace
        self.table = table
        self.name = name
        self.notices = notices
        schema = table.schema()
        properties = long_texts.texts(table.io, table.properties, name)
        chars = declared_char_types(properties)
        defaults = declared_defaults(properties)
        self.columns = {f.name: _Column(f.field_id, f.field_type, f.required, chars.get(f.field_id),
                                        default=defaults.get(f.field_id))
                        for f in schema.fields}
        self.dropped_ids: list[int] = []  # columns dropped: their type properties go too
        self.partition_sources = {pf.source_id for spec in table.metadata.partition_specs
                                  for pf in spec.fields}
        declared = table.properties.get(PRIMARY_KEY_PROPERTY)
        self.primary_key = declared.split(",") if declared else sorted(
            schema.identifier_field_names(), key=lambda n: schema.find_field(n).field_id)
        self.key_changed = False
        self.schema_ops: list[Callable[[UpdateSchema], Any]] = []
        self.allow_incompatible = False
        self.set_props: dict[str, str] = {}
        self.remove_props: list[str] = []
        self.checks = check_text.CheckChanges(name, properties, self.primary_key)
        self._kept: dict[int, tuple[str, str]] = {}  # id(text) -> (text, what is stored for it)

    def run(self, actions: Iterable[Any]) -> None:
        change = self.checked(actions)
        if change is None:
            return
        from icegres.engine.lake_world import commit_metadata_change

        assert self.lakehouse is not None
        commit_metadata_change(self.lakehouse, (self.namespace, self.name), self.table, change)

    def checked(self, actions: Iterable[Any]) -> Callable[[Any], None] | None:
        """Check every action; the change they make, as a function of a pyiceberg Transaction
        (None: nothing to do). Nothing is committed."""
        for action in actions:
            self.check(action)
        if self.key_changed:
            if self.primary_key:
                self.set_props[PRIMARY_KEY_PROPERTY] = ",".join(self.primary_key)
            else:
                self.remove_props.append(PRIMARY_KEY_PROPERTY)
                self.set_props.pop(PRIMARY_KEY_PROPERTY, None)
        self.set_props.update(self.checks.set)
        self.remove_props += self.checks.removed
        self.remove_props += [column_type_property(fid) for fid in self.dropped_ids]
        self.remove_props += [column_default_property(fid) for fid in self.dropped_ids]
        # pyiceberg refuses to remove a property the table does not have; PostgreSQL's RESET doesn't.
        self.remove_props = [k for k in self.remove_props if k in self.table.properties]
        typed = [(name, c) for name, c in self.columns.items() if c.char_changed]
        defaulted = [(name, c) for name, c in self.columns.items() if c.default_changed]
        if not (self.schema_ops or self.set_props or self.remove_props or typed or defaulted):
            return None

        def change(txn: Any) -> None:
            if self.schema_ops:
                with txn.update_schema(allow_incompatible_changes=self.allow_incompatible) as update:
                    for op in self.schema_ops:
                        op(update)
                    if self.key_changed:
                        update.set_identifier_fields(*self.primary_key)
            set_props, remove_props = dict(self.set_props), list(self.remove_props)
            if typed:
                # An added column's field id is known only once the schema change has it.
                schema = txn.table_metadata.schema()
                for name, c in typed:
                    key = column_type_property(schema.find_field(name).field_id)
                    if c.char is not None:
                        set_props[key] = c.char.name
                    elif key in self.table.properties and key not in remove_props:
                        remove_props.append(key)
            if defaulted:
                schema = txn.table_metadata.schema()
                for name, c in defaulted:
                    key = column_default_property(schema.find_field(name).field_id)
                    if c.default is not None:
                        set_props[key] = c.default
                    elif key in self.table.properties and key not in remove_props:
                        remove_props.append(key)
            if set_props:
                txn.set_properties({key: self.kept(value) for key, value in set_props.items()})
            if remove_props:
                txn.remove_properties(*remove_props)

        try:
            change(self.table.transaction())  # validate once, so refusals are PostgreSQL errors
        except (ValueError, ValidationError) as exc:
            # A combination pyiceberg refuses (say, dropping a column this ALTER added).
            raise PgError(e.FEATURE_NOT_SUPPORTED, f"cannot alter table \"{self.name}\": {exc}") from None
        return change

    def kept(self, text: str) -> str:
        """What the metadata stores for `text`: a long one's file is written at the first call."""
        if not long_texts.long(text):
            return text
        # By identity: hashing a 50 MB str would hold the GIL for it.
        if id(text) not in self._kept:
            self._kept[id(text)] = (text, long_texts.kept(self.table.io, self.table.location(), text))
        return self._kept[id(text)][1]

    def column(self, name: str) -> _Column:
        column = self.columns.get(name)
        if column is None:
            raise PgError(e.UNDEFINED_COLUMN, f'column "{name}" of relation "{self.name}" does not exist')
        return column

    def check(self, action: Any) -> None:
        if isinstance(action, AddColumn):
            self.add_column(action)
        elif isinstance(action, DropColumn):
            self.drop_column(action)
        elif isinstance(action, RenameColumn):
            self.rename_column(action)
        elif isinstance(action, AlterColumnType):
            self.alter_type(action)
        elif isinstance(action, SetDefault):
            column = self.column(action.name)
            column.default, column.default_changed = action.default, True
        elif isinstance(action, SetNotNull):
            column = self.column(action.name)
            if not column.required:
                # The rows there were read for NULLs first (dml/checks.check_declared, or the
                # rows a filled ADD COLUMN wrote): none can break the required field.
                column.required = True
                self.allow_incompatible = True
                self.schema_ops.append(lambda u, n=action.name: u.update_column((n,), required=True))
        elif isinstance(action, DropNotNull):
            column = self.column(action.name)
            if action.name in self.primary_key:
                raise PgError(INVALID_TABLE_DEFINITION, f'column "{action.name}" is in a primary key')
            if column.required:
                column.required = False
                self.schema_ops.append(lambda u, n=action.name: u.make_column_optional((n,)))
        elif isinstance(action, SetProperties):
            for key, value in action.properties.items():
                self.set_props[key] = value
                if key in self.remove_props:
                    self.remove_props.remove(key)
        elif isinstance(action, ResetProperties):
            for key in action.keys:
                self.set_props.pop(key, None)
                if key not in self.remove_props:
                    self.remove_props.append(key)
        elif isinstance(action, CommentColumn):
            self.column(action.name)
            self.schema_ops.append(lambda u, n=action.name, t=action.text: u.update_column((n,), doc=self.kept(t)))
        elif isinstance(action, AddCheck):
            self.checks.add([action.check])
        elif isinstance(action, DropConstraint):
            self.checks.drop(action.name, action.if_exists, self.notices)
        elif isinstance(action, RenameTable):
            raise PgError(e.SYNTAX_ERROR, "RENAME TO cannot be combined with other actions")
        else:
            raise TypeError(f"not an ALTER TABLE action: {action!r}")

    def add_column(self, action: AddColumn) -> None:
        c = action.column
        if c.name in self.columns:
            if action.if_not_exists:
                self.notices.append(f'column "{c.name}" of relation "{self.name}" already exists, skipping')
                return
            raise PgError(DUPLICATE_COLUMN, f'column "{c.name}" of relation "{self.name}" already exists')
        if c.identity:
            raise PgError(e.FEATURE_NOT_SUPPORTED, "ALTER TABLE ... ADD COLUMN of a serial or identity column is not "
                          "supported", hint="Create a sequence and add the column with DEFAULT nextval('the_sequence').")
        if c.not_null:
            if _has_rows(self.table):
                # Without a DEFAULT the rows there would hold NULL (with one, the rows are
                # filled first: add_column_default.py).
                raise PgError("23502", f'column "{c.name}" of relation "{self.name}" contains null values')
            # An empty table has no rows to violate a required column.
            self.allow_incompatible = True
        if c.default is not None and _has_rows(self.table):
            raise PgError(e.FEATURE_NOT_SUPPORTED,
                          f'cannot add column "{c.name}" with a DEFAULT to table "{self.name}", which has rows',
                          hint="Iceberg v2 cannot give the existing rows the value: add the column, then "
                               "SET DEFAULT and UPDATE the existing rows.")
        field_type = iceberg_type(c.type, itertools.count(1).__next__)  # pyiceberg renumbers
        self.columns[c.name] = _Column(None, field_type, c.not_null, c.type.char, c.type.char is not None,
                                       c.default, c.default is not None)
        self.schema_ops.append(
            lambda u, n=c.name, t=field_type, r=c.not_null: u.add_column((n,), t, required=r))
        self.checks.add(c.checks)

    def drop_column(self, action: DropColumn) -> None:
        column = self.columns.get(action.name)
        if column is None:
            if action.if_exists:
                self.notices.append(
                    f'column "{action.name}" of relation "{self.name}" does not exist, skipping')
                return
            self.column(action.name)
            return
        if column.field_id in self.partition_sources:
            raise PgError(e.FEATURE_NOT_SUPPORTED,
                          f'cannot drop column "{action.name}" of table "{self.name}" because the '
                          "table is partitioned by it",
                          hint="Iceberg keeps every partition spec a table has had; a partition "
                               "source column cannot be dropped.")
        if action.name in self.primary_key:
            # PostgreSQL drops a primary key together with any of its columns.
            self.primary_key = []
            self.key_changed = True
        del self.columns[action.name]
        self.checks.column_dropped(action.name)
        if column.field_id is not None:
            self.dropped_ids.append(column.field_id)
        self.schema_ops.append(lambda u, n=action.name: u.delete_column((n,)))

    def rename_column(self, action: RenameColumn) -> None:
        if action.old not in self.columns:
            raise PgError(e.UNDEFINED_COLUMN, f'column "{action.old}" does not exist')
        if action.new in self.columns:
            raise PgError(DUPLICATE_COLUMN, f'column "{action.new}" of relation "{self.name}" already exists')
        self.columns[action.new] = self.columns.pop(action.old)
        if action.old in self.primary_key:
            self.primary_key = [action.new if k == action.old else k for k in self.primary_key]
            self.key_changed = True
        self.checks.column_renamed(action.old, action.new)
        self.schema_ops.append(lambda u, o=action.old, n=action.new: u.rename_column((o,), n))

    def alter_type(self, action: AlterColumnType) -> None:
        column = self.column(action.name)
        new_type = iceberg_type(action.type, itertools.count(1).__next__)
        verdict = _widening(column.type, new_type)
        if verdict is None:
            if column.char != action.type.char:
                self._retype_chars(action, column)
            return
        if not verdict:
            raise PgError(e.FEATURE_NOT_SUPPORTED,
                          f"cannot change column type from {pg_name_of(column.type)} to "
                          f"{action.type.pg_name}: Iceberg only allows widening", hint=WIDENING_HINT)
        column.type = new_type
        self.schema_ops.append(lambda u, n=action.name, t=new_type: u.update_column((n,), t))

    def _retype_chars(self, action: AlterColumnType, column: _Column) -> None:
        """A string column's new PostgreSQL type: only changes that need no stored value checked
        or changed (PostgreSQL rewrites the table for the others, which Iceberg cannot do here)."""
        old, new = column.char, action.type.char
        if not _char_loosening(old, new) and _has_rows(self.table):
            was = "text" if old is None else old.name
            raise PgError(e.FEATURE_NOT_SUPPORTED,
                          f'cannot change column "{action.name}" from {was} to {action.type.pg_name}: '
                          "stored values would have to be checked or changed",
                          hint="A varchar(n) or char(n) column can be widened (a larger n) or made text; "
                               "Iceberg data files are not rewritten.")
        column.char, column.char_changed = new, True


def _char_loosening(old: CharType | None, new: CharType | None) -> bool:
    """Whether every value stored under `old` is already what `new` stores: no rewrite needed.
    (A char(n) value is stored without its trailing spaces, as bpchar-to-varchar/text casts leave it.)"""
    if new is None or (new.length is None and new.oid == VARCHAR_OID):
        return True  # to text or unbounded varchar: PostgreSQL's binary-coercible (or rtrim) casts
    if old is None or (old.oid == VARCHAR_OID and new.oid == BPCHAR_OID):
        return False  # text may hold anything; varchar keeps trailing spaces that char(n) would drop
    if new.length is None:
        return True  # char(n) -> bpchar
    return old.length is not None and old.length <= new.length


def _widening(old: IcebergType, new: IcebergType) -> bool | None:
    """True for a type promotion Iceberg allows, None for no change, False otherwise."""
    if old == new:
        return None
    if isinstance(old, IntegerType) and isinstance(new, LongType):
        return True
    if isinstance(old, FloatType) and isinstance(new, DoubleType):
        return True
    if isinstance(old, DecimalType) and isinstance(new, DecimalType):
        return new.scale == old.scale and new.precision > old.precision
    return False


def _has_rows(table: Table) -> bool:
    snapshot = table.current_snapshot()
    if snapshot is None:
        return False
    try:
        total = snapshot.summary["total-records"] if snapshot.summary is not None else None
    except KeyError:
        total = None
    # Without the summary count, assume rows: refusing is safe, a required column over rows is not.
    return total is None or int(total) > 0


def iceberg_schema_of_arrow(names: list[str], arrow_schema: pa.Schema, what: str) -> Schema:
    """An Iceberg schema for a query's columns (`names`, `arrow_schema`'s types), fresh ids."""
    import pyarrow as pa
    from pyiceberg.schema import assign_fresh_schema_ids

    fields = []
    for name, f in zip(names, arrow_schema, strict=True):
        t = f.type
        if pa.types.is_string_view(t) or pa.types.is_large_string(t):
            t = pa.string()
        elif pa.types.is_binary_view(t) or pa.types.is_large_binary(t):
            t = pa.binary()
        elif pa.types.is_null(t):
            t = pa.string()  # PostgreSQL would make it "unknown"; text is what it reads back as
        elif pa.types.is_timestamp(t) and t.unit == "ns":
            # DataFusion's now() is nanoseconds; PostgreSQL's timestamps, and the rows as they
            # are conformed to the table (assign.py), are microseconds.
            t = pa.timestamp("us", t.tz)
        fields.append(pa.field(name, t, nullable=True))
    try:
        return assign_fresh_schema_ids(_schema_without_ids(pa.schema(fields)))
    except (TypeError, ValueError) as exc:
        raise PgError("0A000", f"cannot store the query's columns in an Iceberg {what}: {exc}") from None


def _schema_without_ids(arrow_schema: pa.Schema) -> Schema:
    from pyiceberg.io.pyarrow import _ConvertToIcebergWithoutIDs, visit_pyarrow

    return visit_pyarrow(arrow_schema, _ConvertToIcebergWithoutIDs())
