"""CREATE / ALTER / DROP SEQUENCE, and the sequences of serial and identity columns.

PostgreSQL 15's grammar and rules: the options' defaults by direction and type (AS smallint |
integer | bigint), PostgreSQL's 22023 for contradictory options, 42P07 for a name taken, 42809
for a relation that is not a sequence. The parse reads ddl.py's parser (`p`); the catalog side
(sequence_store.py) makes each sequence an Iceberg table of its name.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from sqlglot.tokens import TokenType

from icegres.engine import long_texts
from icegres.engine.ddl_commands import AlterSequence, CreateSequence, DropSequence, SequenceOptions
from icegres.engine.sequence_store import (
    IDENTITY_PROPERTY,
    OWNED_BY_PROPERTY,
    definition_properties,
    is_sequence,
    sequence_schema,
)
from icegres.machines.sequence import Definition
from icegres.pg import errors as e
from icegres.pg.errors import PgError

DUPLICATE_TABLE = "42P07"

if TYPE_CHECKING:
    from icegres.engine.catalog import Lakehouse

_TYPE_BOUNDS = {"smallint": 2**15 - 1, "integer": 2**31 - 1, "bigint": 2**63 - 1}
_TYPE_NAMES = {"smallint": "smallint", "int2": "smallint", "integer": "integer", "int": "integer",
               "int4": "integer", "bigint": "bigint", "int8": "bigint"}


# --- parsing -------------------------------------------------------------------------------------


def parse_create(p: Any, temporary: bool = False) -> CreateSequence:
    """After CREATE SEQUENCE."""
    if temporary:
        raise PgError(e.FEATURE_NOT_SUPPORTED, "temporary sequences are not supported", position=p.position())
    if_not_exists = p.accept("IF", "NOT", "EXISTS")
    schema, name = p.qualified_name()
    options = parse_options(p, alter=False)
    p.expect_end()
    return CreateSequence(schema, name, options, if_not_exists)


def parse_alter(p: Any) -> AlterSequence:
    """After ALTER SEQUENCE."""
    if_exists = p.accept("IF", "EXISTS")
    schema, name = p.qualified_name()
    options = parse_options(p, alter=True)
    p.expect_end()
    return AlterSequence(schema, name, options, if_exists)


def parse_drop(p: Any) -> DropSequence:
    """After DROP SEQUENCE."""
    if_exists = p.accept("IF", "EXISTS")
    names = [p.qualified_name()]
    while p.accept_type(TokenType.COMMA):
        names.append(p.qualified_name())
    cascade = p.drop_behavior()
    return DropSequence(tuple(names), if_exists, cascade)


def parse_options(p: Any, alter: bool, stop: Any = None) -> SequenceOptions:
    """Sequence options until the end (or until `stop(p)` says so: an identity column's list)."""
    found: dict[str, Any] = {}

    def put(key: str, value: Any, at: int) -> None:
        if key in found:
            raise PgError(e.SYNTAX_ERROR, "conflicting or redundant options", position=at)
        found[key] = value

    while not p.at_end() and not (stop is not None and stop(p)):
        at = p.position()
        if p.accept("AS"):
            word = p.ident()
            if word not in _TYPE_NAMES:
                raise PgError("22023", "identity column type must be smallint, integer, or bigint", position=at)
            put("as_type", _TYPE_NAMES[word], at)
        elif p.accept("INCREMENT"):
            p.accept("BY")
            put("increment", _number(p), at)
        elif p.accept("MINVALUE"):
            put("min_value", _number(p), at)
        elif p.accept("MAXVALUE"):
            put("max_value", _number(p), at)
        elif p.accept("NO", "MINVALUE"):
            put("min_value", None, at)
        elif p.accept("NO", "MAXVALUE"):
            put("max_value", None, at)
        elif p.accept("NO", "CYCLE"):
            put("cycle", False, at)
        elif p.accept("CYCLE"):
            put("cycle", True, at)
        elif p.accept("START"):
            p.accept("WITH")
            put("start", _number(p), at)
        elif p.accept("CACHE"):
            put("cache", _number(p), at)
        elif alter and p.accept("RESTART"):
            put("restart", _number(p) if p.accept("WITH") or _at_number(p) else True, at)
        elif p.accept("OWNED", "BY"):
            if p.accept("NONE"):
                put("owned_by", (), at)
            else:
                parts = [p.ident()]
                while p.accept_type(TokenType.DOT):
                    parts.append(p.ident())
                if len(parts) < 2:
                    raise PgError("42601", "invalid OWNED BY option",
                                  hint="Specify OWNED BY table.column or OWNED BY NONE.", position=at)
                put("owned_by", tuple(parts), at)
        else:
            raise p.error()
    return SequenceOptions(**found)


def _number(p: Any) -> int:
    negative = p.accept_type(TokenType.DASH)
    if not p.peek_type(TokenType.NUMBER):
        raise p.error()
    tok = p.toks[p.i]
    p.i += 1
    try:
        value = int(tok.text)
    except ValueError:
        raise PgError(e.SYNTAX_ERROR, f'syntax error at or near "{tok.text}"', position=tok.start + 1) from None
    return -value if negative else value


def _at_number(p: Any) -> bool:
    return p.peek_type(TokenType.NUMBER) or p.peek_type(TokenType.DASH)


# --- the definition PostgreSQL's defaults give ---------------------------------------------------


def definition(name: str, o: SequenceOptions, base: Definition | None = None, as_type: str = "bigint") -> Definition:
    """The sequence `o` defines (or `base` altered by `o`), with PostgreSQL's checks (22023)."""
    bound = _TYPE_BOUNDS[o.as_type or as_type]
    increment = o.increment if o.increment is not None else (base.increment if base else 1)
    if increment == 0:
        raise PgError("22023", "INCREMENT must not be zero")
    up = increment > 0
    # (ALTER's NO MINVALUE / NO MAXVALUE keep the bound the sequence has: a known difference)
    min_value = o.min_value if o.min_value is not None else (base.min_value if base else (1 if up else -bound - 1))
    max_value = o.max_value if o.max_value is not None else (base.max_value if base else (bound if up else -1))
    if o.as_type is not None and (min_value < -bound - 1 or max_value > bound):
        which, value = ("MINVALUE", min_value) if min_value < -bound - 1 else ("MAXVALUE", max_value)
        raise PgError("22023", f"{which} ({value}) is out of range for sequence data type {o.as_type}")
    if min_value >= max_value:
        raise PgError("22023", f"MINVALUE ({min_value}) must be less than MAXVALUE ({max_value})")
    start = o.start if o.start is not None else (base.start if base else (min_value if up else max_value))
    if start < min_value:
        raise PgError("22023", f"START value ({start}) cannot be less than MINVALUE ({min_value})")
    if start > max_value:
        raise PgError("22023", f"START value ({start}) cannot be greater than MAXVALUE ({max_value})")
    cache = o.cache if o.cache is not None else (base.cache if base else 1)
    if cache < 1:
        raise PgError("22023", f"CACHE ({cache}) must be greater than zero")
    cycle = o.cycle if o.cycle is not None else (base.cycle if base else False)
    return Definition(name, increment, min_value, max_value, start, cycle, cache)


# --- the catalog ---------------------------------------------------------------------------------


def create(lakehouse: Lakehouse, namespace: str, name: str, d: Definition, notices: list[str],
           if_not_exists: bool = False, owned_by: str | None = None, identity: bool = False) -> bool:
    """A new sequence; False where the name was taken and IF NOT EXISTS said to skip."""
    if lakehouse.table_exists(namespace, name) or lakehouse.view_location(namespace, name):
        if if_not_exists:
            notices.append(f'relation "{name}" already exists, skipping')
            return False
        raise PgError(DUPLICATE_TABLE, f'relation "{name}" already exists')
    properties = definition_properties(d)
    if owned_by:
        properties[OWNED_BY_PROPERTY] = owned_by
    if identity:
        properties[IDENTITY_PROPERTY] = "true"
    lakehouse.create_table(namespace, name, sequence_schema(), properties)
    return True


def drop(lakehouse: Lakehouse, key: tuple[str, str]) -> None:
    lakehouse.drop_table(*key)


def find(lakehouse: Lakehouse, schema: str | None, name: str, path: list[str]) -> tuple[str, str] | None:
    """The sequence `name` names (42809 where that relation is no sequence)."""
    for namespace in [schema] if schema else path:
        if lakehouse.table_exists(namespace, name):
            if not is_sequence(lakehouse.load_table(namespace, name).properties):
                raise PgError(e.WRONG_OBJECT_TYPE, f'"{name}" is not a sequence')
            return namespace, name
    return None


def choose_name(lakehouse: Lakehouse, namespace: str, table: str, column: str) -> str:
    """PostgreSQL's name for a serial or identity column's sequence: table_column_seq, with a
    number appended while the name is taken."""
    stem = f"{table}_{column}"[: 63 - 4]
    for n in range(10_000):
        name = f"{stem}_seq" if n == 0 else f"{stem}_seq{n}"
        if not lakehouse.table_exists(namespace, name) and not lakehouse.view_location(namespace, name):
            return name
    raise PgError(DUPLICATE_TABLE, f'could not choose a sequence name for "{table}.{column}"')


OWNED_SEQUENCES_PROPERTY = "icegres.owned-sequences"  # on a table: its serial/identity columns' sequences


def apply(lakehouse: Lakehouse, cmd: CreateSequence | AlterSequence | DropSequence, path: list[str],
          create_in: str | None, notices: list[str]) -> tuple[str, str] | None:
    """Perform a sequence command; the sequence it changed (None where it skipped). `create_in`:
    the namespace a CREATE makes it in."""
    from icegres.engine.sequence_store import IcebergSequence, set_head

    if isinstance(cmd, CreateSequence):
        assert create_in is not None
        owned = _owned_by(lakehouse, cmd.options.owned_by, path)
        made = create(lakehouse, create_in, cmd.name, definition(cmd.name, cmd.options), notices,
                      cmd.if_not_exists, owned)
        return (create_in, cmd.name) if made else None
    if isinstance(cmd, AlterSequence):
        key = find(lakehouse, cmd.schema, cmd.name, path)
        if key is None:
            if cmd.if_exists:
                notices.append(f'relation "{cmd.name}" does not exist, skipping')
                return None
            raise PgError(e.UNDEFINED_TABLE, f'relation "{cmd.name}" does not exist')
        _alter(lakehouse, key, cmd.options)
        world = IcebergSequence(lakehouse, key)
        _, d = world.load()
        if cmd.options.restart is not None:
            value = d.start if cmd.options.restart is True else int(cmd.options.restart)
            if not d.min_value <= value <= d.max_value:
                raise PgError("22023", f"RESTART value ({value}) cannot be "
                                       f"{'less than MINVALUE' if value < d.min_value else 'greater than MAXVALUE'} "
                                       f"({d.min_value if value < d.min_value else d.max_value})")
            set_head(lakehouse, key, value, False)
        return key
    for schema, name in dict.fromkeys(cmd.names):
        key = find(lakehouse, schema, name, path)
        if key is None:
            shown = f"{schema}.{name}" if schema else name
            if not cmd.if_exists:
                raise PgError(e.UNDEFINED_TABLE, f'sequence "{shown}" does not exist')
            notices.append(f'sequence "{shown}" does not exist, skipping')
            continue
        _refuse_owned(lakehouse, key, cmd.cascade, notices)
        drop(lakehouse, key)
    return None


def _owned_by(lakehouse: Lakehouse, owned: tuple[str, ...] | None, path: list[str]) -> str | None:
    """OWNED BY [schema.]table.column as "schema.table.column" (42P01 / 42703 where it is not)."""
    if not owned:
        return None
    *table_parts, column = owned
    schema, table = (table_parts if len(table_parts) == 2 else (None, table_parts[-1]))
    for namespace in [schema] if schema else path:
        if namespace and lakehouse.table_exists(namespace, table):
            found = lakehouse.load_table(namespace, table)
            if column not in found.schema().column_names:
                raise PgError(e.UNDEFINED_COLUMN, f'column "{column}" of relation "{table}" does not exist')
            return f"{namespace}.{table}.{column}"
    raise PgError(e.UNDEFINED_TABLE, f'relation "{".".join(table_parts)}" does not exist')


def _alter(lakehouse: Lakehouse, key: tuple[str, str], o: SequenceOptions) -> None:
    """The options ALTER SEQUENCE changes, as the table's properties (one metadata commit)."""
    from icegres.engine.lake_world import commit_metadata_change
    from icegres.engine.sequence_store import definition_of

    table = lakehouse.load_table(*key)
    base = definition_of(key[1], table.properties)
    assert base is not None
    changed = SequenceOptions(o.as_type, o.increment, o.min_value, o.max_value, o.start, o.cache, o.cycle)
    if changed == SequenceOptions() and o.owned_by is None:
        return
    properties = definition_properties(definition(key[1], changed, base))
    if o.owned_by is not None:
        properties[OWNED_BY_PROPERTY] = _owned_by(lakehouse, o.owned_by, [key[0]]) or ""
    commit_metadata_change(lakehouse, key, table, lambda tx: tx.set_properties(properties))


def _refuse_owned(lakehouse: Lakehouse, key: tuple[str, str], cascade: bool, notices: list[str]) -> None:
    """A sequence a column's default uses goes only with CASCADE, which drops that default (2BP01)."""
    from icegres.engine.ddl_commands import column_default_property, declared_defaults
    from icegres.engine.lake_world import commit_metadata_change

    owner = lakehouse.load_table(*key).properties.get(OWNED_BY_PROPERTY, "")
    if owner.count(".") != 2:
        return
    schema, table_name, column = owner.split(".")
    try:
        table = lakehouse.load_table(schema, table_name)
    except Exception:  # noqa: BLE001 - the owning table is gone: nothing depends on it
        return
    field = next((f for f in table.schema().fields if f.name == column), None)
    defaults = declared_defaults(long_texts.texts(table.io, table.properties, f"{schema}.{table_name}"))
    uses = field is not None and key[1] in (defaults.get(field.field_id) or "")
    if not uses:
        return
    if not cascade:
        raise PgError("2BP01", f"cannot drop sequence {key[1]} because other objects depend on it",
                      detail=f"default value for column {column} of table {table_name} depends on sequence {key[1]}",
                      hint="Use DROP ... CASCADE to drop the dependent objects too.")
    notices.append(f"drop cascades to default value for column {column} of table {table_name}")
    assert field is not None
    commit_metadata_change(lakehouse, (schema, table_name), table,
                           lambda tx: tx.remove_properties(column_default_property(field.field_id)))


# --- serial and identity columns -----------------------------------------------------------------

_SERIALS = {"serial": "int", "serial4": "int", "bigserial": "bigint", "serial8": "bigint",
            "smallserial": "smallint", "serial2": "smallint"}


def serial_kind(kind: Any) -> str:
    """The integer type a serial pseudo-type stands for ('' for any other type)."""
    return _SERIALS.get(kind.sql(dialect="postgres").lower(), "")


def identity_of(constraint: Any, pg_type: str) -> tuple[str, SequenceOptions]:
    """GENERATED { ALWAYS | BY DEFAULT } AS IDENTITY [( options )] on a column of `pg_type`."""
    if pg_type not in ("smallint", "integer", "bigint"):
        raise PgError("22023", "identity column type must be smallint, integer, or bigint")

    def number(key: str) -> int | None:
        value = constraint.args.get(key)
        return None if value is None else int(value.sql(dialect="postgres"))

    options = SequenceOptions(as_type=pg_type, increment=number("increment"), min_value=number("minvalue"),
                              max_value=number("maxvalue"), start=number("start"),
                              cache=number("cache"), cycle=constraint.args.get("cycle"))
    return ("a" if constraint.this else "d"), options


def nextval_default(namespace: str, name: str) -> str:
    """A serial column's DEFAULT, as PostgreSQL shows it (`nextval('s.t_id_seq'::regclass)`)."""
    from icegres.pg.keywords import quote_ident

    return f"nextval('{quote_ident(namespace)}.{quote_ident(name)}'::regclass)"


def with_sequences(lakehouse: Lakehouse, namespace: str, cmd: Any) -> tuple[Any, list[tuple[str, str]]]:
    """CREATE TABLE's serial and identity columns: a sequence made for each (owned by the column,
    named as PostgreSQL names it) and the column's DEFAULT its nextval. The command as the table
    is then created, and the sequences made (the caller drops them if the table is not)."""
    from dataclasses import replace

    made: list[tuple[str, str]] = []
    columns = []
    try:
        for c in cmd.columns:
            if not c.identity:
                columns.append(c)
                continue
            name = choose_name(lakehouse, namespace, cmd.name, c.name)
            pg_type = c.type.pg_name if c.type.pg_name in _TYPE_BOUNDS else "bigint"
            d = definition(name, c.sequence or SequenceOptions(), as_type=pg_type)
            create(lakehouse, namespace, name, d, [], owned_by=f"{namespace}.{cmd.name}.{c.name}",
                   identity=c.identity in ("a", "d"))
            made.append((namespace, name))
            columns.append(replace(c, default=nextval_default(namespace, name)))
    except BaseException:
        for key in made:
            drop(lakehouse, key)
        raise
    return replace(cmd, columns=tuple(columns)), made
