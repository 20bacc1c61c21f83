"""`icegres branch list | create | drop | diff | merge | reset`: branches and tags of one table, of
a namespace or of the whole lake, on the catalog serve's flags name (docs/time-travel.md).

Every change is ONE atomic commit through the commit machine (engine/lake_refs.py): the tables'
refs move together, at a consistent cut, or none does. Nothing here reads a data file.
"""

from __future__ import annotations

import argparse
import json
import sys
from typing import TYPE_CHECKING, Any

from icegres.pg import errors as E
from icegres.pg.errors import PgError

if TYPE_CHECKING:
    from icegres.config import Settings

_DAY_MS = 86_400_000
MAIN = "main"


def add_parser(sub: Any, catalog_keys: tuple[str, ...]) -> None:
    from icegres.config import add_arguments

    branch = sub.add_parser("branch", help="branches and tags of tables, a namespace or the whole lake "
                            "(one atomic commit each; docs/time-travel.md)")
    actions = branch.add_subparsers(dest="action", required=True)

    def scoped(name: str, help_text: str) -> argparse.ArgumentParser:
        parser = actions.add_parser(name, help=help_text)
        scope = parser.add_mutually_exclusive_group(required=True)
        scope.add_argument("--table", action="append", metavar="SCHEMA.TABLE", help="a table (repeatable)")
        scope.add_argument("--namespace", metavar="NAME", help="every table of one namespace")
        scope.add_argument("--all", action="store_true", help="every table of the lake")
        parser.add_argument("--json", action="store_true", help="one JSON document on stdout")
        add_arguments(parser, ("data_dir", "log_level", *catalog_keys))
        return parser

    scoped("list", "each table's branches and tags")
    create = scoped("create", "create a branch (or --tag) at main's head, or --as-of a ref or snapshot")
    create.add_argument("name")
    create.add_argument("--tag", action="store_true", help="a tag rather than a branch")
    create.add_argument("--as-of", metavar="REF|SNAPSHOT", help="where it starts (default: main's head)")
    create.add_argument("--retain-days", type=int, metavar="N", help="the ref's maximum age")
    create.add_argument("--replace", action="store_true", help="move it where it exists already")
    drop = scoped("drop", "drop a branch (or --tag)")
    drop.add_argument("name")
    drop.add_argument("--tag", action="store_true", help="a tag rather than a branch")
    drop.add_argument("--if-exists", action="store_true", help="skip tables that lack it")
    diff = scoped("diff", "where ref B stands against ref A, per table (metadata only)")
    diff.add_argument("a")
    diff.add_argument("b")
    merge = scoped("merge", "fast-forward TO to FROM in every table where TO has not moved since the fork "
                   "(dry run unless --execute; refused if a table diverged, unless --rebase can re-apply "
                   "FROM's appends)")
    merge.add_argument("source", metavar="FROM")
    merge.add_argument("target", metavar="TO")
    merge.add_argument("--execute", action="store_true", help="commit it (default: print what it would do)")
    merge.add_argument("--rebase", action="store_true",
                       help="where both sides only appended since the fork, commit FROM's appended files on top "
                            "of TO (one append snapshot per table) instead of refusing")
    reset = scoped("reset", "move a branch to a ref, a snapshot id or a time")
    reset.add_argument("name")
    reset.add_argument("--to", required=True, metavar="REF|SNAPSHOT|TIMESTAMP",
                       help="a ref name, a snapshot id, or a time (ISO 8601; UTC unless it has an offset)")


def run(settings: Settings, args: argparse.Namespace) -> int:
    """Exit status: 0 done (or a dry run that would apply), 1 refused (a conflict, an error
    naming a table), 2 bad usage or no catalog."""
    from icegres.engine import lake_refs
    from icegres.serve import open_lakehouse

    lakehouse = open_lakehouse(settings)
    if lakehouse is None:
        return 2
    try:
        keys = [_key(t) for t in args.table] if args.table else None
        tables = lake_refs.cut(lakehouse, keys=keys, namespace=args.namespace)
        return _ACTIONS[args.action](lakehouse, tables, args)
    except PgError as err:
        print(f"icegres branch: {err.message} (SQLSTATE {err.sqlstate})", file=sys.stderr)
        return 1


def _key(text: str) -> tuple[str, str]:
    schema, dot, name = text.rpartition(".")
    if not dot or not schema or not name:
        raise PgError(E.SYNTAX_ERROR, f'"{text}" is not a schema-qualified table name (schema.table)')
    return schema, name


def _show(args: argparse.Namespace, document: Any, lines: list[str]) -> None:
    if args.json:
        print(json.dumps(document, indent=2))
    else:
        print("\n".join(lines))


# --- list -----------------------------------------------------------------------------------


def _list(lakehouse: Any, tables: dict[Any, Any], args: argparse.Namespace) -> int:
    document = []
    lines = [f"{'table':<32} {'ref':<20} {'type':<7} snapshot"]
    for key, table in tables.items():
        for name, ref in sorted(table.metadata.refs.items()):
            kind = ref.snapshot_ref_type.value
            document.append({"table": f"{key[0]}.{key[1]}", "ref": name, "type": kind,
                             "snapshot_id": ref.snapshot_id, "max_ref_age_ms": ref.max_ref_age_ms})
            lines.append(f"{key[0] + '.' + key[1]:<32} {name:<20} {kind:<7} {ref.snapshot_id}")
    _show(args, document, lines)
    return 0


# --- create / drop ----------------------------------------------------------------------------


def _create(lakehouse: Any, tables: dict[Any, Any], args: argparse.Namespace) -> int:
    from icegres.engine import lake_refs
    from icegres.engine.lake_refs import Move
    moves, skipped = [], []
    for key, table in tables.items():
        refs = table.metadata.refs
        source = args.as_of or MAIN
        if source in refs:
            target = refs[source].snapshot_id
        elif source.lstrip("-").isdigit() and table.metadata.snapshot_by_id(int(source)) is not None:
            target = int(source)
        elif args.as_of is None:
            skipped.append(f"{key[0]}.{key[1]}: no snapshot yet")
            continue
        else:
            raise PgError(E.UNDEFINED_OBJECT, f'branch, tag or snapshot "{source}" of table "{key[0]}.{key[1]}" does not exist')
        existing = refs.get(args.name)
        if existing is not None and not args.replace:
            raise PgError(E.DUPLICATE_OBJECT, f'{"tag" if args.tag else "branch"} "{args.name}" of table '
                          f'"{key[0]}.{key[1]}" already exists', )
        if args.name == MAIN and args.tag:
            raise PgError(E.OBJECT_NOT_IN_PREREQUISITE_STATE, '"main" is a table\'s main branch, not a tag')
        asserts = [(args.name, existing.snapshot_id if existing is not None else None)]
        if source in refs and source != args.name:
            asserts.append((source, target))
        moves.append(Move(key, args.name, target, tag=args.tag, asserts=tuple(asserts),
                          retain_ms=args.retain_days * _DAY_MS if args.retain_days is not None else None))
    lake_refs.commit_moves(lakehouse, tables, moves)
    lines = [f"created {'tag' if args.tag else 'branch'} {args.name} in {len(moves)} table(s) in one commit"]
    lines += [f"  skipped {s}" for s in skipped]
    _show(args, {"created": [f"{m.key[0]}.{m.key[1]}" for m in moves], "snapshots":
                 {f"{m.key[0]}.{m.key[1]}": m.snapshot_id for m in moves}, "skipped": skipped}, lines)
    return 0


def _drop(lakehouse: Any, tables: dict[Any, Any], args: argparse.Namespace) -> int:
    from icegres.engine import lake_refs
    from icegres.engine.lake_refs import Move
    if args.name == MAIN:
        raise PgError(E.OBJECT_NOT_IN_PREREQUISITE_STATE, 'cannot drop branch "main"')
    moves, skipped = [], []
    want = "tag" if args.tag else "branch"
    for key, table in tables.items():
        ref = table.metadata.refs.get(args.name)
        if ref is None or ref.snapshot_ref_type.value != want:
            if args.if_exists or args.all or args.namespace:
                skipped.append(f"{key[0]}.{key[1]}")
                continue
            raise PgError(E.UNDEFINED_OBJECT, f'{want} "{args.name}" of table "{key[0]}.{key[1]}" does not exist')
        moves.append(Move(key, args.name, None, asserts=((args.name, ref.snapshot_id),)))
    lake_refs.commit_moves(lakehouse, tables, moves)
    _show(args, {"dropped": [f"{m.key[0]}.{m.key[1]}" for m in moves], "skipped": skipped},
          [f"dropped {want} {args.name} in {len(moves)} table(s) in one commit"])
    return 0


# --- diff / merge / reset ---------------------------------------------------------------------


def _diff(lakehouse: Any, tables: dict[Any, Any], args: argparse.Namespace) -> int:
    from icegres.engine import lake_refs
    diffs = [lake_refs.diff(key, table, args.a, args.b) for key, table in tables.items()]
    lines = [f"{'table':<32} {'state':<9} {'commits':>7} {'+rows':>9} {'-rows':>9}  columns"]
    for d in diffs:
        columns = " ".join([*(f"+{c}" for c in d.columns_added), *(f"-{c}" for c in d.columns_dropped)])
        lines.append(f"{d.table:<32} {d.state.value:<9} {d.commits:>7} {d.rows_added:>9} {d.rows_deleted:>9}  {columns}")
    _show(args, [d.as_json() for d in diffs], lines)
    return 0


def _merge(lakehouse: Any, tables: dict[Any, Any], args: argparse.Namespace) -> int:
    from icegres.engine import lake_refs
    from icegres.engine.lake_refs import Move, Plan, State
    plan = Plan()
    for key, table in tables.items():
        d = lake_refs.diff(key, table, args.target, args.source)
        if d.state is State.ADVANCED or (d.state is State.CREATED and d.b is not None):
            asserts = ((args.target, d.a), (args.source, d.b))
            plan.moves.append(Move(key, args.target, d.b, asserts=asserts))
        elif d.state is State.DIVERGED and args.rebase and (rebase := _rebasable(table, d)) is not None:
            asserts = ((args.target, d.a), (args.source, d.b))
            plan.moves.append(Move(key, args.target, d.a, asserts=asserts, rebase=rebase))
        elif d.state is State.DIVERGED:
            plan.conflicts.append(d)
        else:
            plan.unchanged.append(f"{d.table} ({d.state.value})")
    lines = [f"fast-forward {args.target} to {args.source}: {m.key[0]}.{m.key[1]} -> {m.snapshot_id}"
             if not m.rebase else
             f"rebase {args.target} onto {args.source}'s appends: {m.key[0]}.{m.key[1]} +{len(m.rebase)} snapshot(s)"
             for m in plan.moves]
    lines += [f"unchanged: {u}" for u in plan.unchanged]
    for c in plan.conflicts:
        lines.append(f"CONFLICT {c.table}: {args.target} has {c.a_commits} commit(s) "
                     f"(+{c.a_rows_added}/-{c.a_rows_deleted} rows) and {args.source} {c.commits} "
                     f"(+{c.rows_added}/-{c.rows_deleted}) since their fork at {c.fork}")
    document = {"moves": {f"{m.key[0]}.{m.key[1]}": m.snapshot_id for m in plan.moves if not m.rebase},
                "rebased": {f"{m.key[0]}.{m.key[1]}": list(m.rebase) for m in plan.moves if m.rebase},
                "unchanged": plan.unchanged, "conflicts": [c.as_json() for c in plan.conflicts],
                "executed": False}
    if plan.conflicts:
        hint = "" if args.rebase else " (--rebase re-applies FROM's appends where both sides only appended)"
        lines.append(f"refused: {len(plan.conflicts)} table(s) diverged; nothing was merged{hint}")
        _show(args, document, lines)
        return 1
    if args.execute:
        lake_refs.commit_moves(lakehouse, tables, plan.moves)
        document["executed"] = True
        lines.append(f"merged {len(plan.moves)} table(s) in one commit")
    else:
        lines.append("dry run: nothing changed (--execute to merge)")
    _show(args, document, lines)
    return 0


def _rebasable(table: Any, d: Any) -> tuple[int, ...] | None:
    """FROM's snapshots since the fork, if both sides only appended since it (a union of rows
    then is what either side meant); None otherwise."""
    from icegres.engine import lake_refs

    if lake_refs.appends_since(table, d.a, d.fork) is None:
        return None
    return lake_refs.appends_since(table, d.b, d.fork)


def _reset(lakehouse: Any, tables: dict[Any, Any], args: argparse.Namespace) -> int:
    from icegres.engine import lake_refs
    from icegres.engine.lake_refs import Move
    moves, skipped = [], []
    at_ms = _time_ms(args.to)
    for key, table in tables.items():
        name = f"{key[0]}.{key[1]}"
        current = lake_refs.ref_snapshot(table, args.name)
        if current is None:
            if args.all or args.namespace:
                skipped.append(name)  # a lake-wide reset moves the branch where it exists
                continue
            raise PgError(E.UNDEFINED_OBJECT, f'branch "{args.name}" of table "{name}" does not exist')
        refs = table.metadata.refs
        if args.to in refs:
            target = refs[args.to].snapshot_id
            asserts: tuple[tuple[str, int | None], ...] = ((args.name, current), (args.to, target))
        elif at_ms is not None:
            target = next((s for s in lake_refs.lineage(table, current)
                           if table.metadata.snapshot_by_id(s).timestamp_ms <= at_ms), None)  # type: ignore[union-attr]
            if target is None:
                raise PgError(E.INVALID_PARAMETER_VALUE, f'branch "{args.name}" of table "{name}" has no snapshot as of {args.to}')
            asserts = ((args.name, current),)
        elif args.to.lstrip("-").isdigit() and table.metadata.snapshot_by_id(int(args.to)) is not None:
            target, asserts = int(args.to), ((args.name, current),)
        else:
            raise PgError(E.UNDEFINED_OBJECT, f'branch, tag or snapshot "{args.to}" of table "{name}" does not exist')
        if target != current:
            kept = refs[args.name]
            moves.append(Move(key, args.name, target, asserts=asserts, retain_ms=kept.max_ref_age_ms,
                              min_snapshots=kept.min_snapshots_to_keep,
                              max_snapshot_age_ms=kept.max_snapshot_age_ms))
    lake_refs.commit_moves(lakehouse, tables, moves)
    _show(args, {"reset": {f"{m.key[0]}.{m.key[1]}": m.snapshot_id for m in moves}, "skipped": skipped},
          [f"reset {args.name} in {len(moves)} table(s) in one commit", *(f"  skipped {s}: no {args.name}"
                                                                         for s in skipped)])
    return 0


def _time_ms(text: str) -> int | None:
    """A --to that reads as a time (an ISO 8601 date or timestamp), in ms since the epoch."""
    import datetime as dt

    if text.lstrip("-").isdigit():
        return None
    try:
        at = dt.datetime.fromisoformat(text)
    except ValueError:
        return None
    if at.tzinfo is None:
        at = at.replace(tzinfo=dt.UTC)
    return int(at.timestamp() * 1000)


_ACTIONS = {"list": _list, "create": _create, "drop": _drop, "diff": _diff, "merge": _merge, "reset": _reset}
