"""What a DDL statement says, as frozen values: the commands `ddl.py` parses and `ddl_apply.py`
performs, and the command tag PostgreSQL answers each with."""

from __future__ import annotations

from dataclasses import dataclass, field

from icegres.engine.ddl_refs import RefChange
from icegres.engine.pg_types import ColumnType
from icegres.engine.procedures import Call
from icegres.pg.chars import CharType, parse_char_type

# The table property an opt-in primary key is kept in (its columns, comma-separated).
PRIMARY_KEY_PROPERTY = "icegres.primary-key"
# The table properties a column's PostgreSQL type is kept in where Iceberg's type cannot say it
# (varchar(n), char(n), bpchar over Iceberg's string), by field id: a rename keeps it, and a
# column dropped and added again under the same name has a new id and starts afresh.
COLUMN_TYPE_PREFIX = "icegres.column-type."


def column_type_property(field_id: int) -> str:
    return f"{COLUMN_TYPE_PREFIX}{field_id}"


# The table properties a column's DEFAULT expression is kept in (PostgreSQL's SQL text), by field
# id as the character types are: every icegres server reading the catalog applies it.
COLUMN_DEFAULT_PREFIX = "icegres.column-default."


def column_default_property(field_id: int) -> str:
    return f"{COLUMN_DEFAULT_PREFIX}{field_id}"


def declared_defaults(properties: dict[str, str]) -> dict[int, str]:
    """The DEFAULT expressions a table's properties declare, by field id."""
    return {int(key[len(COLUMN_DEFAULT_PREFIX):]): value for key, value in properties.items()
            if key.startswith(COLUMN_DEFAULT_PREFIX) and key[len(COLUMN_DEFAULT_PREFIX):].isdigit()}


# The table properties an identity column's kind is kept in, by field id: 'a' (ALWAYS) or 'd'.
COLUMN_IDENTITY_PREFIX = "icegres.column-identity."


def declared_identities(properties: dict[str, str], field_ids: tuple[int, ...]) -> tuple[str, ...]:
    """Per column of `field_ids`: its identity kind ('' for none); () for a table with none."""
    if not any(k.startswith(COLUMN_IDENTITY_PREFIX) for k in properties):
        return ()
    return tuple(properties.get(f"{COLUMN_IDENTITY_PREFIX}{fid}", "") for fid in field_ids)


# The table properties a CHECK constraint is kept in, by its name: its expression as SQL text.
CHECK_PREFIX = "icegres.check."


def check_property(name: str) -> str:
    return f"{CHECK_PREFIX}{name}"


def declared_checks(properties: dict[str, str]) -> tuple[tuple[str, str], ...]:
    """A table's CHECK constraints as (name, SQL text), sorted by name as PostgreSQL tests them."""
    return tuple(sorted((key[len(CHECK_PREFIX):], value) for key, value in properties.items()
                        if key.startswith(CHECK_PREFIX) and len(key) > len(CHECK_PREFIX)))


def declared_char_types(properties: dict[str, str]) -> dict[int, CharType]:
    """The character types a table's properties declare, by field id (an unreadable value is
    ignored: the column is then plain text, as it was before icegres kept the type)."""
    out = {}
    for key, value in properties.items():
        if key.startswith(COLUMN_TYPE_PREFIX) and key[len(COLUMN_TYPE_PREFIX):].isdigit():
            char = parse_char_type(value)
            if char is not None:
                out[int(key[len(COLUMN_TYPE_PREFIX):])] = char
    return out


@dataclass(frozen=True)
class CheckDef:
    """A CHECK constraint as declared: `name` None takes PostgreSQL's generated name (checks.py);
    `column` is the column it was written on (a column constraint), for that name."""

    name: str | None
    text: str  # the expression, as SQL text
    column: str | None = None
    not_valid: bool = False  # NOT VALID: the rows already there are not checked


@dataclass(frozen=True)
class ColumnDef:
    name: str
    type: ColumnType
    not_null: bool = False
    default: str | None = None  # its DEFAULT expression as SQL text (None: NULL)
    checks: tuple[CheckDef, ...] = ()  # its column CHECK constraints
    # serial ('s') or an identity column ('a' GENERATED ALWAYS, 'd' BY DEFAULT), with the options
    # of its sequence (ddl_sequences.py): its DEFAULT is set to the sequence's nextval
    identity: str = ""
    sequence: SequenceOptions | None = None


@dataclass(frozen=True)
class PartitionField:
    """One Iceberg partition field: `param` is the bucket count or the truncate width."""

    transform: str  # identity, year, month, day, hour, bucket, truncate
    column: str
    param: int | None = None


@dataclass(frozen=True)
class CreateSchema:
    name: str
    if_not_exists: bool = False


@dataclass(frozen=True)
class DropSchema:
    names: tuple[str, ...]
    if_exists: bool = False
    cascade: bool = False


@dataclass(frozen=True)
class CreateTable:
    schema: str | None
    name: str
    columns: tuple[ColumnDef, ...]
    if_not_exists: bool = False
    partitioning: tuple[PartitionField, ...] = ()
    properties: dict[str, str] = field(default_factory=dict)
    primary_key: tuple[str, ...] = ()
    temporary: bool = False  # CREATE TEMP TABLE: the session's, in pg_temp (temp_tables.py)
    checks: tuple[CheckDef, ...] = ()  # table CHECK constraints (the columns' are on the columns)


@dataclass(frozen=True)
class CreateTableAs:
    """CREATE TABLE ... AS: `query_sql` is the query's own text (TABLE t is given as SELECT * FROM t).

    `column_names` renames the query's columns (CREATE TABLE t (a, b) AS ...); `with_data` is False
    for WITH NO DATA, which creates the table empty.
    """

    schema: str | None
    name: str
    query_sql: str
    if_not_exists: bool = False
    partitioning: tuple[PartitionField, ...] = ()
    properties: dict[str, str] = field(default_factory=dict)
    column_names: tuple[str, ...] = ()
    with_data: bool = True
    temporary: bool = False


@dataclass(frozen=True)
class DropTable:
    names: tuple[tuple[str | None, str], ...]
    if_exists: bool = False
    cascade: bool = False


@dataclass(frozen=True)
class AddColumn:
    column: ColumnDef
    if_not_exists: bool = False


@dataclass(frozen=True)
class DropColumn:
    name: str
    if_exists: bool = False


@dataclass(frozen=True)
class RenameColumn:
    old: str
    new: str


@dataclass(frozen=True)
class AlterColumnType:
    name: str
    type: ColumnType


@dataclass(frozen=True)
class DropNotNull:
    name: str


@dataclass(frozen=True)
class SetNotNull:
    """ALTER COLUMN … SET NOT NULL: the rows there are read first (23502 where one is NULL), then the
    Iceberg field is made required (dml/checks.py)."""

    name: str


@dataclass(frozen=True)
class SetDefault:
    """ALTER COLUMN … SET DEFAULT expr (SQL text) / DROP DEFAULT (None)."""

    name: str
    default: str | None


@dataclass(frozen=True)
class AddCheck:
    """ALTER TABLE … ADD [CONSTRAINT name] CHECK (…) [NOT VALID]."""

    check: CheckDef


@dataclass(frozen=True)
class DropConstraint:
    """ALTER TABLE … DROP CONSTRAINT [IF EXISTS] name."""

    name: str
    if_exists: bool = False


@dataclass(frozen=True)
class SetProperties:
    properties: dict[str, str]


@dataclass(frozen=True)
class ResetProperties:
    keys: tuple[str, ...]


@dataclass(frozen=True)
class RenameTable:
    new_name: str


@dataclass(frozen=True)
class CommentColumn:
    """COMMENT ON COLUMN: the Iceberg field's doc ('' removes it, as NULL does in PostgreSQL)."""

    name: str
    text: str


AlterAction = (AddColumn | DropColumn | RenameColumn | AlterColumnType | DropNotNull | SetNotNull | SetDefault
               | SetProperties
               | ResetProperties | RenameTable | CommentColumn | RefChange | AddCheck | DropConstraint)

# The table property Iceberg's engines (Spark, Trino) keep a table's comment in.
COMMENT_PROPERTY = "comment"


@dataclass(frozen=True)
class AlterTable:
    schema: str | None
    name: str
    actions: tuple[AlterAction, ...]
    if_exists: bool = False
    tag: str = "ALTER TABLE"  # COMMENT ON is a table change that PostgreSQL tags COMMENT


@dataclass(frozen=True)
class CreateIndex:
    """CREATE INDEX [name] ON table (columns): the table's sort order and Parquet bloom filters
    for the files written from then on (ddl_index.py)."""

    schema: str | None
    table: str
    name: str | None  # None: PostgreSQL's default name, table_col_idx
    columns: tuple[str, ...]
    if_not_exists: bool = False


@dataclass(frozen=True)
class DropIndex:
    names: tuple[tuple[str | None, str], ...]
    if_exists: bool = False


@dataclass(frozen=True)
class CreateView:
    """CREATE [OR REPLACE] VIEW: `query_sql` is the query's own text; `column_names` names its
    first columns (CREATE VIEW v (a, b) AS ...)."""

    schema: str | None
    name: str
    query_sql: str
    column_names: tuple[str, ...] = ()
    or_replace: bool = False
    security_invoker: bool | None = None  # WITH (security_invoker = ...); None: not given


@dataclass(frozen=True)
class DropView:
    names: tuple[tuple[str | None, str], ...]
    if_exists: bool = False
    cascade: bool = False


@dataclass(frozen=True)
class RenameView:
    """ALTER VIEW ... RENAME TO (ALTER TABLE ... RENAME TO of a view is an AlterTable)."""

    schema: str | None
    name: str
    new_name: str
    if_exists: bool = False


@dataclass(frozen=True)
class SequenceOptions:
    """Options as written (None: not given; PostgreSQL's default then applies)."""

    as_type: str | None = None
    increment: int | None = None
    min_value: int | None = None  # NO MINVALUE is None too
    max_value: int | None = None
    start: int | None = None
    cache: int | None = None
    cycle: bool | None = None
    restart: int | bool | None = None  # ALTER: RESTART (True) or RESTART WITH n
    owned_by: tuple[str, ...] | None = None  # OWNED BY [schema.]table.column, () for NONE


@dataclass(frozen=True)
class CreateSequence:
    schema: str | None
    name: str
    options: SequenceOptions
    if_not_exists: bool = False


@dataclass(frozen=True)
class AlterSequence:
    schema: str | None
    name: str
    options: SequenceOptions
    if_exists: bool = False


@dataclass(frozen=True)
class DropSequence:
    names: tuple[tuple[str | None, str], ...]
    if_exists: bool = False
    cascade: bool = False


DdlCommand = (CreateSchema | DropSchema | CreateTable | CreateTableAs | DropTable | AlterTable | CreateIndex
              | DropIndex | CreateView | DropView | RenameView | Call | CreateSequence | AlterSequence | DropSequence)

_TAGS = {CreateSchema: "CREATE SCHEMA", DropSchema: "DROP SCHEMA", CreateTable: "CREATE TABLE",
         DropTable: "DROP TABLE", AlterTable: "ALTER TABLE", CreateIndex: "CREATE INDEX",
         DropIndex: "DROP INDEX", CreateView: "CREATE VIEW", DropView: "DROP VIEW", RenameView: "ALTER VIEW",
         Call: "CALL", CreateSequence: "CREATE SEQUENCE", AlterSequence: "ALTER SEQUENCE",
         DropSequence: "DROP SEQUENCE"}


def command_tag(cmd: DdlCommand, rows: int = 0) -> str:
    """The CommandComplete tag PostgreSQL sends; CREATE TABLE AS reports `SELECT rows`."""
    if isinstance(cmd, CreateTableAs):
        return f"SELECT {rows}"
    if isinstance(cmd, AlterTable):
        return cmd.tag
    return _TAGS[type(cmd)]
