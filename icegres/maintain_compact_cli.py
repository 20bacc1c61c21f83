"""`icegres maintain rewrite-data-files | rewrite-manifests`: compaction and manifest rewrite of
tables on the catalog serve's flags name (docs/maintenance-compaction.md).

`add_subcommands` puts both under a given subparsers object (the `icegres maintain` group);
`run` runs the one parsed. Each table is its own commit through the commit machine
(engine/maintenance/): a concurrent user write that touched the files being rewritten wins and the
compaction of that table aborts, changing nothing. Progress goes to stderr (icegres/progress.py:
a bar on a terminal, else one line per file group as it is written); the report goes to stdout,
as a table or, with --json, as one JSON document.
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from typing import TYPE_CHECKING, Any

from icegres.pg import errors as E
from icegres.pg.errors import PgError

if TYPE_CHECKING:
    from icegres.config import Settings

COMMANDS = ("rewrite-data-files", "rewrite-manifests")


def add_subcommands(subparsers: Any, catalog_keys: tuple[str, ...]) -> None:
    """Add `rewrite-data-files` and `rewrite-manifests` to `subparsers` (argparse's)."""
    from icegres.config import add_arguments

    def command(name: str, help_text: str) -> argparse.ArgumentParser:
        parser = subparsers.add_parser(name, help=help_text, description=help_text)
        parser.add_argument("--table", action="append", required=True, metavar="SCHEMA.TABLE",
                            help="a table (repeatable; each is its own commit)")
        parser.add_argument("--json", action="store_true",
                            help="one JSON document on stdout (progress goes to stderr)")
        add_arguments(parser, ("data_dir", "log_level", *catalog_keys))
        return parser

    data = command("rewrite-data-files", "compact small data files into files of the target size, per "
                   "partition, in one replace snapshot per table (Spark's rewrite_data_files)")
    data.add_argument("--target-file-size-bytes", type=int, metavar="N",
                      help="size of the files written (default: the table's write.target-file-size-bytes, "
                           "else 512 MiB)")
    data.add_argument("--min-file-size-bytes", type=int, metavar="N",
                      help="only files smaller than this are rewritten (default 75%% of the target)")
    data.add_argument("--min-input-files", type=int, default=5, metavar="N",
                      help="a group of small files is rewritten only if it has this many (default 5)")
    data.add_argument("--rewrite-all", action="store_true",
                      help="rewrite every file, whatever its size, and every group, whatever its count")
    data.add_argument("--sort", action="store_true",
                      help="write rows in the table's sort order (CREATE INDEX gives a table one)")
    data.add_argument("--sort-order", metavar="'COL [DESC] [NULLS FIRST|LAST], ...'",
                      help="write rows in this order instead (implies --sort)")
    data.set_defaults(maintain_compact=run_rewrite_data_files)
    manifests = command("rewrite-manifests", "merge small manifests into target-size ones in one replace "
                        "snapshot per table, so commits and planning stay fast (Spark's rewrite_manifests)")
    manifests.add_argument("--spec-id", type=int, metavar="N", help="only the manifests of this partition spec")
    manifests.set_defaults(maintain_compact=run_rewrite_manifests)


def run(settings: Settings, args: argparse.Namespace) -> int:
    """Run the parsed subcommand. Exit status: 0 done, 1 a table refused (a conflict, a table it
    cannot rewrite), 2 bad usage or no catalog."""
    return int(args.maintain_compact(settings, args))


def run_rewrite_data_files(settings: Settings, args: argparse.Namespace) -> int:
    from icegres.engine.maintenance.compact import CompactOptions, parse_sort_order

    try:
        options = CompactOptions(target_file_size_bytes=args.target_file_size_bytes,
                                 min_file_size_bytes=args.min_file_size_bytes, min_input_files=args.min_input_files,
                                 rewrite_all=args.rewrite_all, sort=args.sort or args.sort_order is not None,
                                 sort_order=parse_sort_order(args.sort_order) if args.sort_order else None)
    except PgError as err:
        print(f"icegres maintain rewrite-data-files: {err.message}", file=sys.stderr)
        return 2

    def one(lakehouse: Any, key: tuple[str, str]) -> dict[str, Any]:
        from icegres.engine.maintenance.compact import compact
        from icegres.progress import Steps

        with Steps(f"{key[0]}.{key[1]}: compacting") as steps:
            def progress(done: int, total: int, group: Any, written: int) -> None:
                steps.total(total)
                steps.step(f"[{done}/{total}] {key[0]}.{key[1]} {group.partition}: {len(group.tasks)} files, "
                           f"{_size(group.input_bytes)} -> {written} file{'s' if written != 1 else ''}")

            return compact(lakehouse, key, options, progress).as_dict()

    def line(name: str, r: dict[str, Any]) -> str:
        return (f"{name:<32} {r['data_files_before']:>7} {r['rewritten_data_files_count']:>9} "
                f"{r['added_data_files_count']:>7} {_size(r['rewritten_bytes_count']):>10}")

    header = f"{'table':<32} {'files':>7} {'rewritten':>9} {'added':>7} {'bytes':>10}"
    return _each_table(settings, args, "rewrite-data-files", one, header, line)


def run_rewrite_manifests(settings: Settings, args: argparse.Namespace) -> int:
    def one(lakehouse: Any, key: tuple[str, str]) -> dict[str, Any]:
        from icegres.engine.maintenance.manifests import rewrite_manifests

        return rewrite_manifests(lakehouse, key, spec_id=args.spec_id).as_dict()

    def line(name: str, r: dict[str, Any]) -> str:
        return (f"{name:<32} {r['manifests_before']:>9} {r['rewritten_manifests_count']:>9} "
                f"{r['added_manifests_count']:>7}")

    header = f"{'table':<32} {'manifests':>9} {'rewritten':>9} {'added':>7}"
    return _each_table(settings, args, "rewrite-manifests", one, header, line)


def _each_table(settings: Settings, args: argparse.Namespace, command: str, one: Any, header: str,
                line: Any) -> int:
    """`one(lakehouse, key)` for each --table, in order; a table that fails is reported and the
    others still run."""
    from icegres.serve import open_lakehouse

    try:
        keys = [_key(t) for t in args.table]
    except PgError as err:
        print(f"icegres maintain {command}: {err.message}", file=sys.stderr)
        return 2
    lakehouse = open_lakehouse(settings)
    if lakehouse is None:
        return 2
    document: list[dict[str, Any]] = []
    lines = [header]
    status = 0
    for key in keys:
        name = f"{key[0]}.{key[1]}"
        started = time.monotonic()
        try:
            if not lakehouse.table_exists(*key):
                raise PgError(E.UNDEFINED_TABLE, f'relation "{name}" does not exist')
            result = one(lakehouse, key)
        except PgError as err:
            status = 1
            print(f"icegres maintain {command}: {err.message} (SQLSTATE {err.sqlstate})", file=sys.stderr)
            if err.hint:
                print(f"  hint: {err.hint}", file=sys.stderr)
            document.append({"table": name, "error": err.message, "sqlstate": err.sqlstate})
            lines.append(f"{name:<32} failed: {err.message}")
            continue
        result = {"table": name, **result, "seconds": round(time.monotonic() - started, 3)}
        document.append(result)
        lines.append(line(name, result))
    if args.json:
        print(json.dumps(document, indent=2))
    else:
        print("\n".join(lines))
    return status


def _key(text: str) -> tuple[str, str]:
    schema, dot, name = text.rpartition(".")
    if not dot or not schema or not name:
        raise PgError(E.SYNTAX_ERROR, f'"{text}" is not a schema-qualified table name (schema.table)')
    return schema, name


def _size(n: int) -> str:
    for unit in ("B", "KiB", "MiB", "GiB"):
        if n < 1024 or unit == "GiB":
            return f"{n:.0f} {unit}" if unit == "B" else f"{n:.1f} {unit}"
        n /= 1024  # type: ignore[assignment]
    return str(n)
