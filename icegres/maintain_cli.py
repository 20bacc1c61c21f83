"""`icegres maintain <operation> --table SCHEMA.TABLE …`: table maintenance from the command line,
on the catalog serve's flags name (docs/maintenance.md).

    icegres maintain expire-snapshots --table demo.trips [--older-than 7d|TIME] [--retain-last N] [--dry-run]
    icegres maintain remove-orphan-files --table demo.trips [--older-than 3d|TIME] [--delete]

Operations are a registry (`OPERATIONS`): a module adds one with `register(Operation(...))` and is
named in `PROVIDERS`, which `add_parser` imports, so compaction and manifest rewrite plug in beside
these without touching them. Every operation prints a summary (or `--json`, one document) and
exits 0 done, 1 refused (a table or metadata error), 2 bad usage or no catalog.

The command line sees no server's transactions: expiry from here keeps ref heads and each
branch's newest snapshots but not what a running server's open transaction pinned; `CALL
system.expire_snapshots` on that server does keep those.
"""

from __future__ import annotations

import argparse
import importlib
import json
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from icegres.pg import errors as E
from icegres.pg.errors import PgError
from icegres.progress import Steps

if TYPE_CHECKING:
    from icegres.config import Settings


@dataclass(frozen=True)
class Operation:
    """One `icegres maintain` subcommand: `arguments` adds its own flags (beside --table, --json
    and the catalog's); `run(lakehouse, (schema, table), args)` returns the JSON document and the
    summary lines to print."""

    name: str
    help: str
    arguments: Callable[[argparse.ArgumentParser], None]
    run: Callable[[Any, tuple[str, str], argparse.Namespace], tuple[dict[str, Any], list[str]]]


OPERATIONS: dict[str, Operation] = {}
# Modules that register further operations when imported (compaction, manifest rewrite).
PROVIDERS: tuple[str, ...] = ()


def register(operation: Operation) -> None:
    OPERATIONS[operation.name] = operation


def add_parser(sub: Any, catalog_keys: tuple[str, ...]) -> Any:
    """`icegres maintain` and its registered operations; the subparsers, for more to be added
    (cli.py adds compaction's: maintain_compact_cli.py)."""
    from icegres.config import add_arguments

    for module in PROVIDERS:
        importlib.import_module(module)
    maintain = sub.add_parser("maintain", help="table maintenance: snapshot expiry, orphan-file GC, compaction, "
                              "manifest rewrite (docs/maintenance.md)")
    actions = maintain.add_subparsers(dest="action", required=True)
    for operation in OPERATIONS.values():
        parser = actions.add_parser(operation.name, help=operation.help, description=operation.help)
        parser.add_argument("--table", required=True, metavar="SCHEMA.TABLE", help="the table")
        parser.add_argument("--json", action="store_true", help="one JSON document on stdout")
        operation.arguments(parser)
        add_arguments(parser, ("data_dir", "log_level", *catalog_keys))
    return actions


def run(settings: Settings, args: argparse.Namespace) -> int:
    from icegres.serve import open_lakehouse

    lakehouse = open_lakehouse(settings)
    if lakehouse is None:
        return 2
    try:
        key = _key(args.table)
        if not lakehouse.table_exists(*key):
            raise PgError(E.UNDEFINED_TABLE, f'relation "{args.table}" does not exist')
        document, lines = OPERATIONS[args.action].run(lakehouse, key, args)
    except PgError as err:
        print(f"icegres maintain {args.action}: {err.message} (SQLSTATE {err.sqlstate})", file=sys.stderr)
        if err.detail:
            print(f"DETAIL: {err.detail}", file=sys.stderr)
        return 2 if err.sqlstate in (E.INVALID_PARAMETER_VALUE, E.SYNTAX_ERROR) else 1
    print(json.dumps(document, indent=2) if args.json else "\n".join(lines))
    return 0


def _key(text: str) -> tuple[str, str]:
    schema, dot, name = text.rpartition(".")
    if not dot or not schema or not name:
        raise PgError(E.SYNTAX_ERROR, f'"{text}" is not a schema-qualified table name (schema.table)')
    return schema, name


def _older_than(text: str | None) -> int | None:
    from icegres.engine.maintenance.times import older_than_ms

    return None if text is None else older_than_ms(text, int(time.time() * 1000))


# --- expire-snapshots ---------------------------------------------------------------------------


def _expire_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--older-than", metavar="DURATION|TIME",
                        help="expire snapshots older than this: a duration back from now (7d, 36h) or a time "
                             "(ISO 8601, UTC unless it has an offset) (default: the table's "
                             "history.expire.max-snapshot-age-ms, else 7d)")
    parser.add_argument("--retain-last", type=int, metavar="N",
                        help="keep each branch's N newest snapshots whatever their age (default: the table's "
                             "history.expire.min-snapshots-to-keep, else 1)")
    parser.add_argument("--dry-run", action="store_true", help="print what would be expired and deleted; change nothing")


def _expire(lakehouse: Any, key: tuple[str, str], args: argparse.Namespace) -> tuple[dict[str, Any], list[str]]:
    from icegres.engine.maintenance import expire

    if args.retain_last is not None and args.retain_last < 1:
        raise PgError(E.INVALID_PARAMETER_VALUE, f"--retain-last must be at least 1, not {args.retain_last}")
    display = f"{key[0]}.{key[1]}"
    with Steps(f"{display}: deleting files") as steps:
        report = expire.expire(lambda: lakehouse.load_table(*key), display,
                               expire.Policy(_older_than(args.older_than), args.retain_last), dry_run=args.dry_run,
                               local_requirements=lakehouse.kind == "sql", deleted=_advance(steps))
    would = "would " if report.dry_run else ""
    lines = [f"{display}: {would}expire {len(report.expired_snapshots)} snapshot(s) older than "
             f"{_iso(report.older_than_ms)} (keeping each branch's newest {report.retain_last})",
             f"{display}: {would}delete {len(report.deleted.kinds)} file(s), {report.deleted_bytes} bytes: "
             + ", ".join(f"{k.removeprefix('deleted_').removesuffix('_count').replace('_', ' ')} {v}"
                         for k, v in report.spark_row().items())]
    if report.kept_files:
        lines.append(f"{display}: the metadata could not be read after the expiry: no file was deleted "
                     "(remove-orphan-files collects them later)")
    if report.dry_run:
        lines.append("dry run: nothing changed")
    return report.as_json(), lines


# --- remove-orphan-files ------------------------------------------------------------------------


def _orphan_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--older-than", metavar="DURATION|TIME",
                        help="only files last modified before this: a duration back from now or a time "
                             "(default 3d: files of commits still in flight are younger)")
    mode = parser.add_mutually_exclusive_group()
    mode.add_argument("--dry-run", action="store_true", default=True,
                      help="print the orphan files and their bytes; delete nothing (the default)")
    mode.add_argument("--delete", action="store_true", help="delete the orphan files")


def _orphans(lakehouse: Any, key: tuple[str, str], args: argparse.Namespace) -> tuple[dict[str, Any], list[str]]:
    from icegres.engine.maintenance import orphans
    from icegres.engine.maintenance.calls import neighbours

    display = f"{key[0]}.{key[1]}"
    with Steps(f"{display}: deleting orphan files") as steps:
        report = orphans.remove_orphans(lakehouse.load_table(*key), display,
                                        older_than_ms=_older_than(args.older_than), dry_run=not args.delete,
                                        neighbours=neighbours(lakehouse, key), deleted=_advance(steps))
    lines = [f"{o.size_bytes:>12}  {o.path}" for o in report.orphans]
    verb = "would delete" if report.dry_run else "deleted"
    lines.append(f"{display}: {verb} {len(report.orphans)} orphan file(s), {report.orphan_bytes} bytes, "
                 f"older than {_iso(report.older_than_ms)} ({report.scanned_files} files listed under "
                 f"{report.location})")
    if report.dry_run:
        lines.append("dry run: nothing deleted (--delete deletes)")
    return report.as_json(), lines


def _advance(steps: Steps) -> Callable[[int, int], None]:
    """A deletion loop's (done, total) as `steps`' bar (no line per file where there is none)."""

    def advance(done: int, total: int) -> None:
        steps.total(total)
        steps.step("")

    return advance


def _iso(ms: int) -> str:
    import datetime as dt

    return dt.datetime.fromtimestamp(ms / 1000, dt.UTC).isoformat(timespec="seconds")


register(Operation("expire-snapshots", "expire old snapshots and delete the files only they referenced",
                   _expire_arguments, _expire))
register(Operation("remove-orphan-files", "list (or --delete) files under the table's location that no snapshot "
                   "or metadata file references", _orphan_arguments, _orphans))
