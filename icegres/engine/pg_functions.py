"""PostgreSQL's catalog and session functions as DataFusion scalar UDFs.

Clients call these inside their catalog queries (CLIENTS.md ranks them: pg_get_expr, format_type,
current_schema, pg_table_is_visible, ...). DataFusion 55 already has array_to_string, string_agg,
bool_and, unnest, generate_series, array_agg(... ORDER BY ...), nullif, replace and the regex
operators, so those are not redefined here. What DataFusion cannot express as a function —
generate_subscripts, _pg_expandarray's record, json_build_object's variadic mixed arguments,
array_upper on 0-based vectors — the rewrite (engine/rewrite) turns into calls of the helpers at the end of this
file (their names start with `pg_` and no client sends them).

Each UDF has one fixed signature: DataFusion only widens arguments (int2 -> int8, never back), so
integer arguments are declared Int64. PostgreSQL overloads that differ in arity (current_setting
with or without missing_ok, pg_get_expr with or without pretty) are registered once with every
argument, and the rewrite pads short calls with the defaults (`FUNCTION_DEFAULTS`).

Session functions read `env` when they are called, never when they are registered, so a SET or
set_config() is seen by the next statement.
"""

from __future__ import annotations

import datetime as _dt
import itertools
import json
import re
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Protocol

import pyarrow as pa

from icegres.engine import (
    authz,
    pg_builtins,
    pg_catalog,
    pg_constraints,
    pg_relations,
    pg_sequence_rows,
    sequences,
)
from icegres.pg.errors import (
    INVALID_PARAMETER_VALUE,
    INVALID_REGULAR_EXPRESSION,
    PROGRAM_LIMIT_EXCEEDED,
    UNDEFINED_OBJECT,
    PgError,
)
from icegres.pg.keywords import quote_ident

if TYPE_CHECKING:
    import datafusion


class SessionEnv(Protocol):
    database: str
    user: str
    current_user: str
    search_path: list[str]
    settings: dict[str, str]
    backend_pid: int
    server_version: str


_STARTED_AT = _dt.datetime.now(_dt.UTC)
_TXIDS = itertools.count(1000)

OID = pa.int64()
INT = pa.int64()
INT4 = pa.int32()
TEXT = pa.string()
BOOL = pa.bool_()
IMMUTABLE = "immutable"
VOLATILE = "volatile"

# Arguments the rewrite appends to short calls, by function: PostgreSQL's own defaults.
FUNCTION_DEFAULTS: dict[str, tuple[str, ...]] = {
    "current_setting": ("NULL", "false"),
    "pg_get_expr": ("NULL", "NULL", "false"),
    "pg_get_indexdef": ("NULL", "0", "false"),
    "pg_get_constraintdef": ("NULL", "false"),
    "pg_get_viewdef": ("NULL", "false"),
    "pg_get_triggerdef": ("NULL", "false"),
    "pg_get_ruledef": ("NULL", "false"),
    "format_type": ("NULL", "NULL"),
    "obj_description": ("NULL", "'pg_class'"),
    "shobj_description": ("NULL", "'pg_database'"),
    "col_description": ("NULL", "0"),
    "regexp_split_to_array": ("NULL", "NULL", "''"),
    "pg_terminate_backend": ("NULL", "0"),
}


@dataclass(frozen=True)
class Fn:
    """One UDF: `impl` maps one row's Python values to the result (None in, None out if strict)."""

    name: str
    args: tuple[pa.DataType, ...]
    returns: pa.DataType
    impl: Callable[..., Any]
    # "stable": DataFusion folds a call with constant arguments while planning, which is when
    # session functions read env. It must: pgjdbc's getTypeInfo feeds current_schemas() into
    # generate_series(), whose arguments DataFusion wants constant, and a zero-argument
    # volatile UDF can't learn how many rows to return. So plan a statement again (not reuse a
    # plan) when a session setting may have changed in between.
    volatility: str = "stable"
    strict: bool = True

    def udf(self) -> datafusion.ScalarUDF:
        from datafusion import udf

        return udf(self._vectorised(), list(self.args), self.returns, self.volatility, self.name)

    def _vectorised(self) -> Callable[..., pa.Array]:
        impl, returns, strict = self.impl, self.returns, self.strict

        def run(*arrays: pa.Array) -> pa.Array:
            if not arrays:  # DataFusion broadcasts a one-row result of a zero-argument UDF
                return pa.array([impl()], type=returns)
            columns = [a.to_pylist() for a in arrays]
            out = [
                None if strict and any(v is None for v in row) else impl(*row)
                for row in zip(*columns, strict=True)
            ]
            return pa.array(out, type=returns)

        return run


def register_functions(ctx: datafusion.SessionContext, env: SessionEnv) -> None:
    """Register every function on ctx; session functions answer from `env` at call time."""
    for fn in (*session_functions(env), *catalog_functions(env), *helper_functions(env)):
        ctx.register_udf(fn.udf())
    ctx.register_udf(_OID_ARRAY)
    ctx.register_udf(_text_length_limit_udf())
    for sequence_udf in sequences.udfs(env):
        ctx.register_udf(sequence_udf)


# PostgreSQL's largest value (MaxAllocSize, 1 GB - 1) less its 4-byte header: repeat(), lpad()
# and rpad() refuse results beyond it with 54000 "requested length too large". DataFusion
# builds them whatever their size, outside its memory pool (`repeat('x', 2147483647)` reached
# 9 GB of RSS in 4.5 s); the rewrite pass `functions.bounded_text_lengths` routes their counts
# through this check first.
TEXT_BYTES_MAX = (1 << 30) - 1 - 4


def _text_length_limit(counts: pa.Array, unit_bytes: pa.Array) -> pa.Array:
    """pg_text_length_limit(count, bytes_per_unit): `count`, once count x bytes_per_unit is
    known to fit (vectorised: one check per batch)."""
    import pyarrow.compute as pc

    product = pc.multiply(pc.cast(counts, pa.float64()), pc.cast(unit_bytes, pa.float64()))
    largest = pc.max(product).as_py()
    if largest is not None and largest > TEXT_BYTES_MAX:
        raise PgError(PROGRAM_LIMIT_EXCEEDED, "requested length too large")
    return pc.cast(counts, pa.int64())


def _text_length_limit_udf() -> datafusion.ScalarUDF:
    from datafusion import udf

    return udf(_text_length_limit, [pa.int64(), pa.int64()], pa.int64(), "immutable", "pg_text_length_limit")


def _annotated_identity(name: str, arrow_type: pa.DataType, pg_oid: int) -> datafusion.ScalarUDF:
    """An identity function whose result column carries a PostgreSQL type annotation."""
    from datafusion import udf

    field = pa.field(name, arrow_type, metadata={pg_relations.PG_TYPE_OID_KEY: str(pg_oid).encode()})
    return udf(lambda values: values, [arrow_type], field, "immutable", name)


_OID_ARRAY = _annotated_identity("pg_oid_array", pa.list_(pa.int64()), 1028)


# --- session functions ----------------------------------------------------------------------


def version_string(env: SessionEnv) -> str:
    # SQLAlchemy parses this and refuses anything not starting "PostgreSQL X.Y" (CLIENTS.md).
    from icegres import __version__

    return (f"PostgreSQL {env.server_version} (icegres {__version__}) on x86_64-pc-linux-gnu, "
            "compiled by DataFusion, 64-bit")


def _existing_path(env: SessionEnv) -> list[str]:
    ix = pg_catalog.current_index(env)
    known = ix.namespaces if ix is not None else {}
    return [s for s in env.search_path if not known or s in known]


def current_schemas(env: SessionEnv, include_implicit: bool) -> list[str]:
    path = _existing_path(env)
    if include_implicit and "pg_catalog" not in path:
        path = ["pg_catalog", *path]
    return path


def current_setting(env: SessionEnv, name: str, missing_ok: bool | None) -> str | None:
    key = name.lower()
    if key in env.settings:
        return env.settings[key]
    if missing_ok:
        return None
    raise PgError(UNDEFINED_OBJECT, f'unrecognized configuration parameter "{name}"')


def set_config(env: SessionEnv, name: str, value: str | None, is_local: bool | None) -> str:
    """SET by a function, checked as SET is: a read-only or unknown setting refused, SET ROLE's
    and SET SESSION AUTHORIZATION's privilege checks made (a role escalated by a function call
    is still an escalation). The session compares settings before and after a statement to send
    ParameterStatus."""
    from icegres.pg import settings as guc

    key, authorization = name.lower(), getattr(env, "authorization", None)
    if key == "session_authorization":
        login = getattr(env, "login_user", env.user)
        user = value or login
        if user != login and authorization is not None:
            authorization.check_session_authorization(login, user)
        env.settings["role"] = "none"
        env.settings[key] = user
        return user
    if key == "role" and authorization is not None:
        authorization.check_set_role(env.user, value)
    change = guc.validate(key, "" if value is None else value, env.settings, env.settings)
    env.settings[change.key] = change.value
    return change.value


def _signal(env: SessionEnv, pid: int | None, *, terminate: bool) -> bool | None:
    port = getattr(env, "activity", None)
    if pid is None:
        return None
    return False if port is None else port.signal(int(pid), terminate=terminate, by=env.user)


def session_functions(env: SessionEnv) -> list[Fn]:
    return [
        Fn("version", (), TEXT, lambda: version_string(env)),
        Fn("current_database", (), TEXT, lambda: env.database),
        Fn("current_user", (), TEXT, lambda: env.current_user),
        Fn("session_user", (), TEXT, lambda: env.user),
        Fn("current_schema", (), TEXT, lambda: next(iter(_existing_path(env)), None)),
        Fn("current_schemas", (BOOL,), pa.list_(TEXT), lambda implicit: current_schemas(env, implicit)),
        Fn("pg_backend_pid", (), INT4, lambda: env.backend_pid),
        Fn("current_setting", (TEXT, BOOL), TEXT,
           lambda name, missing_ok: None if name is None else current_setting(env, name, missing_ok),
           strict=False),
        Fn("set_config", (TEXT, TEXT, BOOL), TEXT,
           lambda name, value, local: set_config(env, name, value, local),
           volatility=VOLATILE, strict=False),
        Fn("pg_my_temp_schema", (), OID, lambda: 0),
        # No session has a temporary schema here, so no schema is another session's (dbt's
        # catalog query for `docs generate` filters with it).
        Fn("pg_is_other_temp_schema", (OID,), BOOL, lambda _oid: False),
        Fn("pg_is_in_recovery", (), BOOL, lambda: False),
        Fn("pg_postmaster_start_time", (), pa.timestamp("us", tz="UTC"), lambda: _STARTED_AT),
        Fn("pg_conf_load_time", (), pa.timestamp("us", tz="UTC"), lambda: _STARTED_AT),
        # void in PostgreSQL, which clients read as an empty string (asyncpg's pool release)
        Fn("pg_advisory_unlock_all", (), TEXT, lambda: ""),
        Fn("txid_current", (), INT, lambda: next(_TXIDS)),  # stable: one value per statement
        # Signals to other sessions (engine/activity.py); a session that does not exist is
        # false, as PostgreSQL answers after a WARNING. pg_terminate_backend's timeout is taken
        # and not waited for.
        Fn("pg_cancel_backend", (INT,), BOOL, lambda pid: _signal(env, pid, terminate=False), volatility=VOLATILE),
        Fn("pg_terminate_backend", (INT, INT), BOOL, lambda pid, _timeout: _signal(env, pid, terminate=True),
           volatility=VOLATILE, strict=False),
        Fn("inet_server_addr", (), TEXT, lambda: None),
        Fn("inet_server_port", (), INT4, lambda: None),
    ]


# --- catalog functions ----------------------------------------------------------------------


def table_is_visible(env: SessionEnv, oid: int) -> bool:
    ix = pg_catalog.current_index(env)
    return ix is not None and ix.is_visible(oid, list(env.search_path))


def regclass_in(env: SessionEnv, name: str) -> int | None:
    ix = pg_catalog.current_index(env)
    if ix is None:
        return None
    return ix.resolve(name, list(env.search_path))


def regclass_out(env: SessionEnv, oid: int) -> str:
    if oid == 0:
        return "-"  # what PostgreSQL prints for InvalidOid in every reg* output
    ix = pg_catalog.current_index(env)
    name = ix.relation_name(oid, list(env.search_path)) if ix is not None else None
    return name if name is not None else str(oid)  # PostgreSQL prints unknown OIDs as numbers


def namespace_in(env: SessionEnv, name: str) -> int | None:
    ix = pg_catalog.current_index(env)
    key = name.strip('"') if name.startswith('"') else name.lower()
    return ix.namespaces.get(key) if ix is not None else None


def namespace_out(env: SessionEnv, oid: int) -> str:
    if oid == 0:
        return "-"
    ix = pg_catalog.current_index(env)
    name = ix.namespace_names.get(oid) if ix is not None else None
    return pg_catalog.quote_ident(name) if name is not None else str(oid)


def userbyid(env: SessionEnv, oid: int) -> str:
    if oid == pg_catalog.BOOTSTRAP_SUPERUSER_OID:
        return env.user
    authorization = getattr(env, "authorization", None)
    if authorization is not None:
        name = next((r.name for r in authorization.current().roles.values() if r.oid == oid), None)
        if name is not None:
            return name
    return f"unknown (OID={oid})"


_ENCODINGS = {0: "SQL_ASCII", 6: "UTF8"}

# acldefault(objtype, owner): what PostgreSQL 15 grants by default, per object type (acldefault()
# in src/backend/utils/adt/acl.c): (to PUBLIC, to the owner).
_DEFAULT_PRIVILEGES = {
    "c": ("", "U"), "r": ("", "arwdDxt"), "s": ("", "rwU"), "d": ("Tc", "CTc"), "f": ("X", "X"),
    "l": ("U", "U"), "L": ("", "rw"), "n": ("", "UC"), "t": ("", "C"), "F": ("", "U"),
    "S": ("", "U"), "T": ("U", "U"), "p": ("", "sA"),
}


def acldefault(env: SessionEnv, objtype: str, owner: int) -> list[str] | None:
    """The aclitem[] PostgreSQL grants an object of `objtype` owned by `owner` (pg_dump)."""
    privileges = _DEFAULT_PRIVILEGES.get(objtype)
    if privileges is None:
        return None
    who = userbyid(env, owner)
    public, own = privileges
    items = [f"={public}/{who}"] if public else []
    return [*items, f"{who}={own}/{who}"]


def _index_def(env: SessionEnv, oid: int, column: int | None, pretty: bool | None) -> str | None:
    ix = pg_catalog.current_index(env)
    return pg_catalog.index_definition(ix, oid, column or 0) if ix is not None else None


def _view_def(env: SessionEnv, oid: int | None, pretty: bool | None) -> str | None:
    ix = pg_catalog.current_index(env)
    return pg_catalog.view_definition(ix, oid, bool(pretty)) if ix is not None else None


def _constraint_def(env: SessionEnv, oid: int, pretty: bool | None) -> str | None:
    ix = pg_catalog.current_index(env)
    return pg_constraints.constraint_definition(ix, oid) if ix is not None else None


_PROCS = {p.oid: p for p in pg_builtins.BUILTIN_FUNCTIONS}


def function_result(oid: int) -> str | None:
    proc = _PROCS.get(oid)
    if proc is None:
        return None
    return ("SETOF " if proc.retset else "") + (pg_builtins.format_type(proc.rettype, None) or "")


_MODE_WORDS = {"i": "", "o": "OUT ", "b": "INOUT ", "v": "VARIADIC "}


def function_arguments(oid: int, identity: bool = False) -> str | None:
    """pg_get_function_arguments (with defaults) / _identity_arguments (without)."""
    proc = _PROCS.get(oid)
    if proc is None:
        return None
    inputs = [i for i, (mode, _, _) in enumerate(proc.arguments) if mode != "o"]
    defaults = dict(zip(inputs[len(inputs) - len(proc.argdefaults):], proc.argdefaults, strict=True))
    parts = []
    for i, (mode, name, type_oid) in enumerate(proc.arguments):
        text = _MODE_WORDS.get(mode, "") + (f"{name} " if name else "") + (pg_builtins.format_type(type_oid, None) or "")
        if i in defaults and not identity:
            text += f" DEFAULT {defaults[i]}"
        parts.append(text)
    return ", ".join(parts)


def size_pretty(size: int) -> str:
    """pg_size_pretty, with PostgreSQL's rounding: a unit is used below 10240 of it."""
    limit = 10 * 1024
    if abs(size) < limit:
        return f"{size} bytes"
    half = size // 512  # sizes in half-units, so the last step can round half away from zero
    for unit in ("kB", "MB", "GB", "TB"):
        if abs(half) < limit * 2 - 1:
            return f"{_half_rounded(half)} {unit}"
        half //= 1024
    return f"{_half_rounded(half)} PB"


def _half_rounded(half: int) -> int:
    return (half + (1 if half >= 0 else -1)) // 2


def _serial_sequence(env: SessionEnv, table: str, column: str) -> str | None:
    ix = pg_catalog.current_index(env)
    return pg_sequence_rows.serial_sequence(ix, table, column, env.search_path) if ix is not None else None


def catalog_functions(env: SessionEnv) -> list[Fn]:
    def always(value: Any) -> Callable[..., Any]:
        return lambda *_args: value

    return [
        Fn("pg_table_is_visible", (OID,), BOOL, lambda oid: table_is_visible(env, oid)),
        Fn("pg_type_is_visible", (OID,), BOOL, lambda oid: oid in pg_builtins.BUILTIN_TYPES,
           volatility=IMMUTABLE),
        Fn("pg_function_is_visible", (OID,), BOOL, always(True)),
        Fn("pg_collation_is_visible", (OID,), BOOL, always(True)),
        Fn("pg_opclass_is_visible", (OID,), BOOL, always(True)),
        Fn("pg_statistics_obj_is_visible", (OID,), BOOL, always(True)),
        Fn("format_type", (OID, INT), TEXT,
           lambda oid, typmod: None if oid is None else pg_builtins.format_type(oid, typmod),
           volatility=IMMUTABLE, strict=False),
        # We keep no stored expressions (no defaults, no partial indexes), so a node tree, if
        # ever there is one, is already its own text.
        Fn("pg_get_expr", (TEXT, OID, BOOL), TEXT, lambda expr, rel, pretty: expr, strict=False),
        Fn("pg_get_constraintdef", (OID, BOOL), TEXT,
           lambda oid, pretty: _constraint_def(env, oid, pretty), strict=False),
        Fn("pg_get_indexdef", (OID, INT, BOOL), TEXT,
           lambda oid, column, pretty: _index_def(env, oid, column, pretty), strict=False),
        Fn("pg_get_viewdef", (OID, BOOL), TEXT, lambda oid, pretty: _view_def(env, oid, pretty),
           strict=False),
        Fn("pg_get_userbyid", (OID,), TEXT, lambda oid: userbyid(env, oid)),
        Fn("acldefault", (TEXT, OID), pa.list_(TEXT), lambda objtype, owner: acldefault(env, objtype, owner)),
        Fn("pg_encoding_to_char", (INT,), TEXT, lambda enc: _ENCODINGS.get(enc, ""),
           volatility=IMMUTABLE),
        Fn("pg_get_serial_sequence", (TEXT, TEXT), TEXT, lambda table, column: _serial_sequence(env, table, column)),
        Fn("pg_get_function_result", (OID,), TEXT, function_result),
        Fn("pg_get_function_arguments", (OID,), TEXT, function_arguments),
        Fn("pg_get_function_identity_arguments", (OID,), TEXT, lambda oid: function_arguments(oid, True)),
        Fn("pg_get_statisticsobjdef_columns", (OID,), TEXT, always(None)),
        # Objects the lake has none of: PostgreSQL answers NULL for an OID that names none.
        Fn("pg_get_triggerdef", (OID, BOOL), TEXT, always(None), strict=False),
        Fn("pg_get_ruledef", (OID, BOOL), TEXT, always(None), strict=False),
        Fn("pg_get_partkeydef", (OID,), TEXT, always(None)),
        Fn("pg_get_statisticsobjdef", (OID,), TEXT, always(None)),
        Fn("pg_relation_is_publishable", (OID,), BOOL, always(False)),
        Fn("to_regtype", (TEXT,), OID, pg_builtins.type_oid_by_name, volatility=IMMUTABLE),
        Fn("to_regclass", (TEXT,), OID, lambda name: regclass_in(env, name)),
        Fn("icegres_has_privilege", (TEXT, TEXT, TEXT, TEXT), BOOL,
           lambda kind, user, obj, privileges: authz.has_privilege(env, kind, user, obj, privileges),
           strict=False),
        Fn("icegres_may_see", (TEXT, TEXT), BOOL, lambda schema, name: authz.may_see(env, schema, name)),
        Fn("icegres_may_see_schema", (TEXT,), BOOL, lambda schema: authz.may_see_schema(env, schema)),
        Fn("icegres_is_my_role", (TEXT,), BOOL, lambda name: authz.is_my_role(env, name)),
        Fn("icegres_pg_has_role", (TEXT, TEXT, TEXT), BOOL,
           lambda user, role, privileges: authz.pg_has_role(env, user, role, privileges), strict=False),
        Fn("to_regnamespace", (TEXT,), OID, lambda name: namespace_in(env, name)),
        # COMMENT ON: Iceberg's table `comment` property and column docs.
        Fn("obj_description", (OID, TEXT), TEXT,
           lambda oid, catalog: pg_catalog.object_description(env, oid, catalog), strict=False),
        Fn("col_description", (OID, INT), TEXT,
           lambda oid, attnum: pg_catalog.column_description(env, oid, attnum), strict=False),
        Fn("shobj_description", (OID, TEXT), TEXT, always(None), strict=False),
        # Sizes of Parquet files are the lakehouse's business; catalog browsers only show them.
        Fn("pg_relation_size", (OID,), INT, always(0)),
        Fn("pg_total_relation_size", (OID,), INT, always(0)),
        Fn("pg_table_size", (OID,), INT, always(0)),
        Fn("pg_indexes_size", (OID,), INT, always(0)),
        Fn("pg_size_pretty", (INT,), TEXT, size_pretty, volatility=IMMUTABLE),
        Fn("quote_ident", (TEXT,), TEXT, pg_catalog.quote_ident, volatility=IMMUTABLE),
        # icegres has no domains, so no type has a base type (asyncpg's introspection asks)
        Fn("pg_domain_basetype", (OID,), OID, always(None)),
        Fn("pg_regclass_out", (OID,), TEXT, lambda oid: regclass_out(env, oid)),
        Fn("pg_regnamespace_out", (OID,), TEXT, lambda oid: namespace_out(env, oid)),
        Fn("pg_regtype_out", (OID,), TEXT, regtype_out, volatility=IMMUTABLE),
        # regtype[] / regclass[] as text[] (pgcli's functions(): argument types for completion)
        Fn("pg_regtype_array_out", (pa.list_(OID),), pa.list_(TEXT),
           lambda oids: [None if o is None else regtype_out(o) for o in oids], volatility=IMMUTABLE),
        Fn("pg_regclass_array_out", (pa.list_(OID),), pa.list_(TEXT),
           lambda oids: [None if o is None else regclass_out(env, o) for o in oids]),
    ]


def regtype_out(oid: int) -> str:
    return "-" if oid == 0 else pg_builtins.format_type(oid, None)


# --- helpers that the rewrite targets ----------------------------------------------------------

_EXPAND = pa.list_(pa.struct([("x", pa.int64()), ("n", pa.int64())]))


def expand_array(values: Sequence[int | None]) -> list[dict[str, int | None]]:
    """information_schema._pg_expandarray: each element with its 1-based position."""
    return [{"x": v, "n": i} for i, v in enumerate(values, start=1)]


def json_build_object(keys: list[str], types: list[str], values: list[str | None]) -> str:
    """json_build_object over text-cast values, re-typed by their Arrow type names."""
    out: dict[str, Any] = {}
    for key, arrow_type, value in zip(keys, types, values, strict=True):
        out[key] = _json_value(arrow_type, value)
    return json.dumps(out, separators=(", ", " : "))


def _json_value(arrow_type: str, value: str | None) -> Any:
    if value is None:
        return None
    if arrow_type == "Boolean":
        return value.lower() in ("true", "t")
    if arrow_type.startswith(("Int", "UInt")):
        return int(value)
    if arrow_type.startswith(("Float", "Decimal")):
        return float(value)
    return value


def prefix_elements(values: list[str | None] | None, prefix: str) -> list[str | None]:
    # ARRAY(SELECT ... FROM unnest(NULL)) is an empty array, not NULL
    return [None if v is None else prefix + v for v in values or []]


def options_clauses(options: list[str | None] | None) -> list[str]:
    """ARRAY(SELECT quote_ident(option_name) || ' ' || quote_literal(option_value) FROM
    pg_options_to_table(opts) ORDER BY option_name): pg_dump's OPTIONS (...) of a foreign object."""
    pairs = sorted(item.partition("=")[::2] for item in options or [] if item is not None)
    return [f"{quote_ident(name)} {_quote_literal(value)}" for name, value in pairs]


def _quote_literal(value: str) -> str:
    quoted = "'" + value.replace("'", "''").replace("\\", "\\\\") + "'"
    return ("E" + quoted) if "\\" in value else quoted


def like_escape(pattern: str, escape: str) -> str:
    """A LIKE pattern with escape character `escape` rewritten for backslash (DataFusion's only)."""
    out, i = [], 0
    while i < len(pattern):
        ch = pattern[i]
        if escape and ch == escape and i + 1 < len(pattern):
            out.append("\\" + pattern[i + 1])
            i += 2
            continue
        out.append("\\\\" if ch == "\\" else ch)
        i += 1
    return "".join(out)


def attnames(env: SessionEnv, relid: int, attnums: list[int | None], separator: str) -> str | None:
    """The names of columns attnums of relation relid, joined (psql's publication footer)."""
    ix = pg_catalog.current_index(env)
    entry = ix.by_oid.get(relid) if ix is not None else None
    if entry is None:
        return None
    by_num = {c.attnum: c.name for c in entry.columns}
    names = [by_num[n] for n in attnums if n in by_num]
    return separator.join(names) if names else None


def role_names(env: SessionEnv, oids: list[int | None]) -> list[str]:
    """The names of the roles among `oids`, sorted (psql \\d's policy footer)."""
    ix = pg_catalog.current_index(env)
    if ix is None:
        return []
    wanted = set(oids)
    return sorted(row["rolname"] for row in pg_catalog.role_rows(ix) if row["oid"] in wanted)


def helper_functions(env: SessionEnv) -> list[Fn]:
    return [*HELPER_FUNCTIONS,
            Fn("pg_attnames", (OID, pa.list_(pa.int64()), TEXT), TEXT,
               lambda relid, attnums, sep: attnames(env, relid, attnums, sep)),
            Fn("pg_role_names", (pa.list_(pa.int64()),), pa.list_(TEXT), lambda oids: role_names(env, oids)),
            Fn("pg_role_idents", (pa.list_(pa.int64()),), pa.list_(TEXT),
               lambda oids: [quote_ident(n) for n in role_names(env, oids)])]


# PostgreSQL's regex flags that Python's `re` has; a regex in PostgreSQL lets `.` match a
# newline unless 'n' (newline-sensitive) is given.
_REGEX_FLAGS = {"i": re.IGNORECASE, "c": 0, "x": re.VERBOSE, "s": 0, "n": re.MULTILINE, "m": re.MULTILINE,
                "p": 0, "w": re.MULTILINE, "q": 0, "b": 0, "e": 0}


def regexp_split(text: str, pattern: str, flags: str) -> list[str]:
    """regexp_split_to_array(text, pattern, flags): the pieces between matches, as PostgreSQL
    cuts them: a zero-length match at the start or end of the text, or right after the previous
    match, is no separator (textregexsubstr's ignore_degenerate). The pattern is read by
    Python's `re`, which agrees with PostgreSQL's ARE on the common constructs (classes such as
    \\W and \\s, quantifiers, alternation, groups) but knows no [[:alpha:]] or \\m / \\M.
    """
    if "g" in flags:
        raise PgError(INVALID_PARAMETER_VALUE, "regexp_split_to_array() does not support the \"global\" option")
    bits = 0 if any(f in flags for f in "nmpw") else re.DOTALL
    for flag in flags:
        if flag not in _REGEX_FLAGS:
            raise PgError(INVALID_PARAMETER_VALUE, f'invalid regular expression option: "{flag}"')
        bits |= _REGEX_FLAGS[flag]
    try:
        regex = re.compile(re.escape(pattern) if "q" in flags else pattern, bits)
    except re.error as e:
        raise PgError(INVALID_REGULAR_EXPRESSION, f"invalid regular expression: {e}") from None
    pieces, start, previous_end = [], 0, 0
    for m in regex.finditer(text):
        if m.start() >= len(text) or m.end() <= previous_end:
            continue
        pieces.append(text[start:m.start()])
        start = previous_end = m.end()
    pieces.append(text[start:])
    return pieces


HELPER_FUNCTIONS: tuple[Fn, ...] = (
    # regexp_split_to_table(t, p) is unnest(regexp_split_to_array(t, p)) (rewrite/names.py)
    Fn("regexp_split_to_array", (TEXT, TEXT, TEXT), pa.list_(TEXT), regexp_split, volatility=IMMUTABLE),
    Fn("pg_like_escape", (TEXT, TEXT), TEXT, like_escape, volatility=IMMUTABLE),
    Fn("pg_expandarray", (pa.list_(pa.int64()),), _EXPAND, expand_array, volatility=IMMUTABLE),
    Fn("pg_json_build_object", (pa.list_(TEXT), pa.list_(TEXT), pa.list_(TEXT)), TEXT,
       json_build_object, volatility=IMMUTABLE),
    Fn("pg_prefix_elements", (pa.list_(TEXT), TEXT), pa.list_(TEXT), prefix_elements,
       volatility=IMMUTABLE, strict=False),
    Fn("pg_options_clauses", (pa.list_(TEXT),), pa.list_(TEXT), options_clauses,
       volatility=IMMUTABLE, strict=False),
    Fn("pg_quote_literals", (pa.list_(TEXT),), pa.list_(TEXT),
       lambda values: [None if v is None else _quote_literal(v) for v in values or []],
       volatility=IMMUTABLE, strict=False),
    Fn("quote_ident", (TEXT,), TEXT, lambda name: quote_ident(name), volatility=IMMUTABLE),
    Fn("quote_literal", (TEXT,), TEXT, lambda value: _quote_literal(value), volatility=IMMUTABLE),
)
