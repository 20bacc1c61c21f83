"""Iceberg's snapshot procedures, with Spark's names and argument order.

    CALL system.rollback_to_snapshot('demo.trips', 8744241337125164453)
    CALL system.rollback_to_timestamp('demo.trips', TIMESTAMP '2026-12-01 10:00')
    CALL system.set_current_snapshot('demo.trips', 8744241337125164453)
    CALL system.set_current_snapshot(table => 'demo.trips', ref => 'dev')
    CALL system.fast_forward('demo.trips', 'main', 'dev')
    CALL system.cherrypick_snapshot('demo.trips', 8744241337125164453)
    CALL system.expire_snapshots('demo.trips', TIMESTAMP '2026-12-01 00:00', 10)
    CALL system.remove_orphan_files(table => 'demo.trips', dry_run => false)
    ALTER TABLE demo.trips EXECUTE expire_snapshots(retention_threshold => '7d')

The last three are table maintenance (engine/maintenance/, docs/maintenance.md): they answer with
Spark's result rows and are run by `maintenance.calls`, not by `apply`; Trino's `ALTER TABLE t
EXECUTE` spelling parses to the same `Call` (`parse_execute`).

Any catalog prefix (`iceberg.system`, `icegres.system`) is accepted; arguments by position or by
name (`name => value`). Each is one Iceberg commit to a ref of one table, asserting the ref's
snapshot as read (a race is 40001); no data file is written, except by cherrypick, whose new
snapshot lists the picked snapshot's files again. A NOTICE reports the ref's snapshot before and
after, as Spark's result row does. Not in a transaction block (25001), like the ref DDL.

Rolling main back does not undo what the write ladder acknowledged and has not yet published:
its rows are settled into the lake first, and the rollback then removes them from main's
history like any other commit's (docs/time-travel.md).
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from typing import TYPE_CHECKING, Any

from icegres.pg.errors import (
    FEATURE_NOT_SUPPORTED,
    INVALID_PARAMETER_VALUE,
    OBJECT_NOT_IN_PREREQUISITE_STATE,
    SYNTAX_ERROR,
    UNDEFINED_FUNCTION,
    UNDEFINED_OBJECT,
    UNDEFINED_TABLE,
    PgError,
)
from icegres.sql.lexer import Kind, tokenize

if TYPE_CHECKING:
    from pyiceberg.table import Table


# name -> its parameters in Spark's order (the first is always the table)
PROCEDURES: dict[str, tuple[str, ...]] = {
    "rollback_to_snapshot": ("table", "snapshot_id"),
    "rollback_to_timestamp": ("table", "timestamp"),
    "set_current_snapshot": ("table", "snapshot_id", "ref"),
    "fast_forward": ("table", "branch", "to"),
    "cherrypick_snapshot": ("table", "snapshot_id"),
    # Table maintenance. After Spark's own parameters, icegres's: dry_run for expiry, and
    # retention_threshold, Trino's "older than" as a duration back from now ('7d').
    "expire_snapshots": ("table", "older_than", "retain_last", "max_concurrent_deletes", "stream_results",
                         "dry_run", "retention_threshold"),
    "remove_orphan_files": ("table", "older_than", "location", "dry_run", "max_concurrent_deletes",
                            "retention_threshold"),
    "rewrite_data_files": ("table", "strategy", "sort_order", "options", "where"),
    "rewrite_manifests": ("table", "use_caching", "spec_id"),
}
# The procedures that answer with Spark's result rows and run in engine/maintenance/ (calls.py),
# not by `apply`; compaction's two commit through the commit machine (compaction_calls.py).
COMPACTION = frozenset({"rewrite_data_files", "rewrite_manifests"})
MAINTENANCE = frozenset({"expire_snapshots", "remove_orphan_files"}) | COMPACTION
# Trino's `ALTER TABLE t EXECUTE optimize(...)`: the Spark procedure it is, and its parameters.
TRINO_EXECUTE: dict[str, tuple[str, tuple[str, ...]]] = {
    "optimize": ("rewrite_data_files", ("file_size_threshold",)),
}


@dataclass(frozen=True)
class Timestamp:
    text: str  # a TIMESTAMP '...' argument, as written: read in the session's TimeZone


@dataclass(frozen=True)
class Call:
    procedure: str
    args: tuple[tuple[str, Any], ...]  # (parameter, value) in Spark's order, the given ones
    time_zone: str = "UTC"
    execute: str | None = None  # spelled ALTER TABLE ... EXECUTE <this> (Trino), not CALL

    @property
    def table(self) -> str:
        return dict(self.args)["table"]

    @property
    def schema(self) -> str | None:
        """The table argument's schema (None: unqualified, found on search_path)."""
        parts = _name_parts(self.table)
        return parts[-2] if len(parts) > 1 else None

    @property
    def name(self) -> str:
        return _name_parts(self.table)[-1]


def parse_call(sql: str, time_zone: str = "UTC") -> Call:
    """`CALL [catalog.]system.<procedure>(args)`; 42601 for what does not parse, 42883 for an
    unknown procedure."""
    tokens = tokenize(sql)
    if not tokens or tokens[0].value != "call":
        raise PgError(SYNTAX_ERROR, "syntax error at or near \"CALL\"")
    parts, i = _dotted(tokens, 1)
    name = parts[-1] if parts else ""
    if len(parts) < 2 or parts[-2] != "system" or name not in PROCEDURES:
        shown = ".".join(parts) or "?"
        raise PgError(UNDEFINED_FUNCTION, f"procedure {shown} does not exist",
                      hint="icegres's procedures: " + ", ".join(f"system.{p}" for p in PROCEDURES) + ".")
    return _arguments(tokens, i, name, None, time_zone)


def is_execute(sql: str) -> bool:
    """Whether `sql` is Trino's `ALTER TABLE t EXECUTE procedure(...)`."""
    tokens = tokenize(sql)
    if len(tokens) < 4 or [t.value for t in tokens[:2]] != ["alter", "table"]:
        return False
    _, i = _dotted(tokens, 2)
    return i < len(tokens) and tokens[i].kind is Kind.NAME and tokens[i].value == "execute"


def parse_execute(sql: str, time_zone: str = "UTC") -> Call:
    """Trino's `ALTER TABLE t EXECUTE expire_snapshots | remove_orphan_files (name => value, ...)`
    as the Call of the procedure; 42883 for another procedure (Trino's `optimize` is compaction's)."""
    tokens = tokenize(sql)
    parts, i = _dotted(tokens, 2)
    i += 1  # EXECUTE
    name = tokens[i].value if i < len(tokens) and tokens[i].kind is Kind.NAME else ""
    executable = sorted({"expire_snapshots", "remove_orphan_files", *TRINO_EXECUTE})
    if name not in executable:
        raise PgError(UNDEFINED_FUNCTION, f"table procedure {name or '?'} does not exist",
                      hint="icegres's table procedures: " + ", ".join(executable) + ".")
    table = ".".join(f'"{p}"' if not p.isidentifier() or p != p.lower() else p for p in parts)
    if name in TRINO_EXECUTE:
        return _trino_procedure(tokens, i + 1, name, table, time_zone)
    if i + 1 >= len(tokens):  # Trino allows the bare name: no arguments
        return replace(Call(name, (("table", table),), time_zone), execute=name)
    return replace(_arguments(tokens, i + 1, name, table, time_zone), execute=name)


def _trino_procedure(tokens: list[Any], i: int, name: str, table: str, time_zone: str) -> Call:
    """Trino's `optimize[(file_size_threshold => '128MB')]` from tokens[i] as the CALL it is:
    rewrite_data_files of the files under the threshold, in every partition with two or more of
    them (Trino's rule)."""
    procedure, params = TRINO_EXECUTE[name]
    given: dict[str, Any] = {}
    if i < len(tokens):
        if tokens[i].text != "(":
            raise _syntax(tokens, i)
        given = dict(_values(tokens, i + 1, name, params))
    options = {"min-input-files": "2"}
    if "file_size_threshold" in given:
        options["min-file-size-bytes"] = str(data_size_bytes(given["file_size_threshold"], "file_size_threshold"))
    return Call(procedure, (("table", table), ("options", options)), time_zone, execute=name)


def _dotted(tokens: list[Any], i: int) -> tuple[list[str], int]:
    """A dotted name from tokens[i]: its parts and the index after it."""
    parts = []
    while i < len(tokens) and tokens[i].kind in (Kind.NAME, Kind.QUOTED_NAME):
        parts.append(tokens[i].value)
        i += 1
        if i < len(tokens) and tokens[i].text == ".":
            i += 1
            continue
        break
    return parts, i


def _arguments(tokens: list[Any], i: int, name: str, table: str | None, time_zone: str) -> Call:
    """The `(args)` of procedure `name` from tokens[i] (`table`: given by ALTER TABLE, not in them)."""
    if i >= len(tokens) or tokens[i].text != "(":
        raise _syntax(tokens, i)
    given = dict(_values(tokens, i + 1, name, PROCEDURES[name] if table is None else PROCEDURES[name][1:]))
    if table is not None:
        given["table"] = table
    if "table" not in given:
        raise PgError(UNDEFINED_FUNCTION, f'procedure system.{name} needs its "table" argument')
    return Call(name, tuple((p, given[p]) for p in PROCEDURES[name] if p in given), time_zone)


def _values(tokens: list[Any], i: int, name: str, params: tuple[str, ...]) -> tuple[tuple[str, Any], ...]:
    """The arguments after a procedure's `(`, to the `)` that ends the statement, as (parameter,
    value) in `params`' order; 42601 / 42883 as for CALL."""
    positional: list[Any] = []
    named: dict[str, Any] = {}
    while i < len(tokens) and tokens[i].text != ")":
        if (i + 2 < len(tokens) and tokens[i].kind is Kind.NAME and tokens[i + 1].text == "="
                and tokens[i + 2].text == ">"):
            key, i = tokens[i].value, i + 3
        else:
            key = None
        value, i = _value(tokens, i)
        if key is None:
            if named:
                raise PgError(SYNTAX_ERROR, "positional argument cannot follow named argument")
            positional.append(value)
        else:
            named[key] = value
        if i < len(tokens) and tokens[i].text == ",":
            i += 1
            if i < len(tokens) and tokens[i].text == ")":
                raise _syntax(tokens, i)
        elif i >= len(tokens) or tokens[i].text != ")":
            raise _syntax(tokens, i)
    if i != len(tokens) - 1:
        raise _syntax(tokens, min(i + 1, len(tokens)))
    if len(positional) > len(params):
        raise PgError(UNDEFINED_FUNCTION, f"procedure system.{name} takes at most {len(params)} arguments")
    given = dict(zip(params, positional, strict=False))
    for key, value in named.items():
        if key not in params:
            raise PgError(UNDEFINED_FUNCTION, f'procedure system.{name} has no argument "{key}"')
        if key in given:
            raise PgError(SYNTAX_ERROR, f'argument "{key}" is given twice')
        given[key] = value
    return tuple((p, given[p]) for p in params if p in given)


_SIZE_UNITS = {"b": 1, "kb": 1 << 10, "mb": 1 << 20, "gb": 1 << 30, "tb": 1 << 40, "pb": 1 << 50}


def data_size_bytes(value: Any, name: str) -> int:
    """Trino's data size ('128MB', '10kB', '1GB', 1024-based) or a byte count, in bytes; 22023."""
    import re

    if isinstance(value, int) and not isinstance(value, bool) and value > 0:
        return value
    match = re.fullmatch(r"\s*(\d+(?:\.\d+)?)\s*([a-zA-Z]*)\s*", str(value))
    unit = match.group(2).lower() if match else ""
    if match is None or unit not in (*_SIZE_UNITS, "") or float(match.group(1)) <= 0:
        raise PgError(INVALID_PARAMETER_VALUE, f'invalid value for argument "{name}": {value!r}',
                      hint="A data size such as '128MB', '10kB' or '1GB'.")
    return int(float(match.group(1)) * _SIZE_UNITS.get(unit, 1))


def _syntax(tokens: list[Any], i: int) -> PgError:
    if i >= len(tokens):
        return PgError(SYNTAX_ERROR, "syntax error at end of input")
    return PgError(SYNTAX_ERROR, f'syntax error at or near "{tokens[i].text}"', position=tokens[i].start + 1)


def _value(tokens: list[Any], i: int) -> tuple[Any, int]:
    """A literal argument: a string, an integer (maybe negative), or TIMESTAMP '...'."""
    if i >= len(tokens):
        raise _syntax(tokens, i)
    tok = tokens[i]
    if tok.kind is Kind.STRING:
        return tok.value, i + 1
    if tok.kind is Kind.NAME and tok.value in ("timestamp", "timestamptz") and i + 1 < len(tokens) \
            and tokens[i + 1].kind is Kind.STRING:
        return Timestamp(tokens[i + 1].value), i + 2
    if tok.kind is Kind.NAME and tok.value in ("true", "false"):
        return tok.value == "true", i + 1
    if tok.kind is Kind.NAME and tok.value == "map" and i + 1 < len(tokens) and tokens[i + 1].text == "(":
        return _map(tokens, i + 2)
    negative = tok.text == "-"
    if negative:
        i += 1
        tok = tokens[i] if i < len(tokens) else tok
    if tok.kind is Kind.NUMBER and tok.text.isdigit():
        return (-1 if negative else 1) * int(tok.text), i + 1
    raise _syntax(tokens, i)


def _map(tokens: list[Any], i: int) -> tuple[dict[str, str], int]:
    """Spark's `map('k1', 'v1', 'k2', 'v2')` after its `(`: keys and values as text."""
    items: list[Any] = []
    while i < len(tokens) and tokens[i].text != ")":
        value, i = _value(tokens, i)
        items.append(value)
        if i < len(tokens) and tokens[i].text == ",":
            i += 1
        elif i >= len(tokens) or tokens[i].text != ")":
            raise _syntax(tokens, i)
    if i >= len(tokens):
        raise _syntax(tokens, i)
    if len(items) % 2:
        raise PgError(INVALID_PARAMETER_VALUE, "map() takes keys and values in pairs")
    return {str(k): str(v).lower() if isinstance(v, bool) else str(v)
            for k, v in zip(items[::2], items[1::2], strict=True)}, i + 1


def _name_parts(name: str) -> list[str]:
    return [t.value for t in tokenize(name) if t.kind in (Kind.NAME, Kind.QUOTED_NAME)]


# --- applying ----------------------------------------------------------------------------------


def apply(table: Table, call: Call, display: str, notices: list[str]) -> None:
    """Run `call` on `table` (one Iceberg commit; CommitFailedException on a race)."""
    args = dict(call.args)
    metadata = table.metadata
    if call.procedure == "fast_forward":
        branch, to = _text(args, "branch"), _text(args, "to")
        _fast_forward(table, branch, to, display, notices)
        return
    before = metadata.current_snapshot_id
    manage = table.manage_snapshots()
    if call.procedure == "rollback_to_snapshot":
        snapshot_id = _snapshot(table, _int(args, "snapshot_id"), display)
        if not _is_ancestor(table, snapshot_id, before):
            raise PgError(INVALID_PARAMETER_VALUE, f'snapshot {snapshot_id} is not an ancestor of the current '
                          f'snapshot of table "{display}"',
                          hint="system.set_current_snapshot makes any snapshot current.")
        manage.set_current_snapshot(snapshot_id=snapshot_id)
    elif call.procedure == "rollback_to_timestamp":
        at = args.get("timestamp")
        if not isinstance(at, Timestamp):
            raise PgError(INVALID_PARAMETER_VALUE, "rollback_to_timestamp takes TIMESTAMP '...' as its time")
        ms = epoch_ms(at, call.time_zone)
        from pyiceberg.table.snapshots import latest_ancestor_before_timestamp

        found = latest_ancestor_before_timestamp(metadata, ms)  # strictly older, as Spark's
        target = None if found is None else found.snapshot_id
        if target is None:
            raise PgError(INVALID_PARAMETER_VALUE,
                          f'table "{display}" has no snapshot older than {at.text} to roll back to')
        manage.set_current_snapshot(snapshot_id=target)
    elif call.procedure == "set_current_snapshot":
        if ("snapshot_id" in args) == ("ref" in args):
            raise PgError(INVALID_PARAMETER_VALUE, "set_current_snapshot takes either snapshot_id or ref")
        if "ref" in args:
            ref = _text(args, "ref")
            if ref not in metadata.refs:
                raise PgError(UNDEFINED_OBJECT, f'branch or tag "{ref}" of table "{display}" does not exist')
            manage.set_current_snapshot(snapshot_id=metadata.refs[ref].snapshot_id)
        else:
            manage.set_current_snapshot(snapshot_id=_snapshot(table, _int(args, "snapshot_id"), display))
    else:  # cherrypick_snapshot
        _cherrypick(table, _snapshot(table, _int(args, "snapshot_id"), display), display)
        notices.append(f'table "{display}": snapshot {before} -> {table.refresh().metadata.current_snapshot_id}')
        return
    manage.commit()
    notices.append(f'table "{display}": snapshot {before} -> {table.metadata.current_snapshot_id}')


def _fast_forward(table: Table, branch: str, to: str, display: str, notices: list[str]) -> None:
    refs = table.metadata.refs
    for name in (branch, to):
        if name not in refs:
            raise PgError(UNDEFINED_OBJECT, f'branch or tag "{name}" of table "{display}" does not exist')
    if refs[branch].snapshot_ref_type.value != "branch":
        raise PgError(INVALID_PARAMETER_VALUE, f'"{branch}" of table "{display}" is a tag; only a branch moves')
    before, after = refs[branch].snapshot_id, refs[to].snapshot_id
    if before == after:
        notices.append(f'table "{display}": branch {branch} is already at {to} ({after})')
        return
    if not _is_ancestor(table, before, after):
        raise PgError(OBJECT_NOT_IN_PREREQUISITE_STATE,
                      f'cannot fast-forward branch "{branch}" of table "{display}" to "{to}": '
                      f"{branch} is not an ancestor of {to}",
                      detail=f"{branch} has commits that {to} does not: the two diverged.")
    kept = refs[branch]
    table.manage_snapshots().create_branch(after, branch, max_ref_age_ms=kept.max_ref_age_ms,
                                           max_snapshot_age_ms=kept.max_snapshot_age_ms,
                                           min_snapshots_to_keep=kept.min_snapshots_to_keep).commit()
    notices.append(f'table "{display}": branch {branch} {before} -> {after}')


def _cherrypick(table: Table, snapshot_id: int, display: str) -> None:
    """A new snapshot on main adding the files an append snapshot added (Spark picks appends and
    dynamic overwrites; icegres appends, the only kind it can apply without a conflict check)."""
    snapshot = table.metadata.snapshot_by_id(snapshot_id)
    assert snapshot is not None
    operation = snapshot.summary.operation.value if snapshot.summary is not None else ""
    if operation != "append":
        raise PgError(FEATURE_NOT_SUPPORTED, f"cannot cherry-pick snapshot {snapshot_id}: it is an {operation}",
                      detail="Only append snapshots can be cherry-picked.")
    if _is_ancestor(table, snapshot_id, table.metadata.current_snapshot_id):
        raise PgError(OBJECT_NOT_IN_PREREQUISITE_STATE,
                      f'snapshot {snapshot_id} is already in the history of table "{display}"')
    from pyiceberg.manifest import ManifestEntryStatus

    added = [entry.data_file for manifest in snapshot.manifests(table.io)
             if manifest.added_snapshot_id == snapshot_id
             for entry in manifest.fetch_manifest_entry(table.io, discard_deleted=True)
             if entry.status == ManifestEntryStatus.ADDED]
    with table.transaction() as txn:
        with txn.update_snapshot(snapshot_properties={"source-snapshot-id": str(snapshot_id)}).fast_append() as append:
            for data_file in added:
                append.append_data_file(data_file)


def _is_ancestor(table: Table, ancestor: int | None, of: int | None) -> bool:
    """Whether snapshot `ancestor` is `of` or one of its parents."""
    from pyiceberg.table.snapshots import ancestors_of

    start = table.metadata.snapshot_by_id(of) if of is not None else None
    return any(s.snapshot_id == ancestor for s in ancestors_of(start, table.metadata))


def _snapshot(table: Table, snapshot_id: int, display: str) -> int:
    if table.metadata.snapshot_by_id(snapshot_id) is None:
        raise PgError(UNDEFINED_OBJECT, f'snapshot {snapshot_id} of table "{display}" does not exist')
    return snapshot_id


def _int(args: dict[str, Any], name: str) -> int:
    value = args.get(name)
    if isinstance(value, int) and not isinstance(value, bool):
        return value
    if isinstance(value, str) and value.lstrip("-").isdigit():
        return int(value)
    raise PgError(INVALID_PARAMETER_VALUE, f'argument "{name}" must be a snapshot id')


def _text(args: dict[str, Any], name: str) -> str:
    value = args.get(name)
    if not isinstance(value, str):
        raise PgError(INVALID_PARAMETER_VALUE, f'argument "{name}" must be a branch or tag name')
    return value


def epoch_ms(at: Timestamp, zone: str) -> int:
    """A TIMESTAMP argument in ms since the epoch, read in the session's time zone `zone`."""
    from icegres.pg.clock import TextSettings
    from icegres.pg.params import decode_param
    from icegres.pg.types import TIMESTAMPTZ

    value = decode_param(at.text.encode(), TIMESTAMPTZ.oid, 0, TextSettings(timezone=zone))
    return int(value.timestamp() * 1000)  # type: ignore[union-attr]


def maintained_table(lakehouse: Any, call: Call, search_path: list[str]) -> tuple[str, str]:
    """The (namespace, name) a maintenance CALL names: its schema's, else the first lake schema
    on the search path that holds it; 42P01 when none does."""
    schemas = [call.schema] if call.schema is not None else [
        s for s in search_path if s and not s.startswith(("$", "pg_")) and s != "information_schema"]
    for namespace in schemas:
        if lakehouse.table_exists(namespace, call.name):
            return namespace, call.name
    raise PgError(UNDEFINED_TABLE, f'relation "{call.table}" does not exist')
