"""Running compaction's procedures (CALL system.rewrite_data_files / rewrite_manifests, ALTER
TABLE ... EXECUTE optimize): their arguments read as options, the operation run, Spark's result
row made. (calls.py runs expiry and orphan GC.)

Apart from procedures.py because the snapshot procedures there sit below the commit path (the DDL
commands and ref changes import them) and these run a whole commit through it.
"""

from __future__ import annotations

from typing import Any

from icegres.engine.maintenance import compact, manifests
from icegres.engine.procedures import Call
from icegres.pg.errors import FEATURE_NOT_SUPPORTED, INVALID_PARAMETER_VALUE, PgError

# Spark's options for rewrite_data_files that icegres honours; any other is 22023, as Spark
# refuses an option its rewriter does not know.
_COMPACT_OPTIONS = ("target-file-size-bytes", "min-file-size-bytes", "min-input-files", "rewrite-all")


def result_schema(call: Call) -> Any:
    """The columns of the row a compaction CALL answers with (None for Trino's spelling, which
    answers with a command tag)."""
    if call.execute is not None:
        return None
    return compact.result_schema() if call.procedure == "rewrite_data_files" else manifests.result_schema()


def compact_options(call: Call) -> Any:
    """rewrite_data_files' arguments as CompactOptions; 22023 for a bad one, 0A000 for `where`."""
    args = dict(call.args)
    if "where" in args:
        raise PgError(FEATURE_NOT_SUPPORTED, "rewrite_data_files does not take a where filter yet",
                      hint="It compacts every partition whose small files qualify.")
    strategy = args.get("strategy", "binpack")
    if not isinstance(strategy, str) or strategy.lower() not in ("binpack", "sort"):
        raise PgError(INVALID_PARAMETER_VALUE, f"unknown strategy {strategy!r}: binpack or sort")
    sort_text = args.get("sort_order")
    if sort_text is not None and strategy.lower() != "sort":
        raise PgError(INVALID_PARAMETER_VALUE, "sort_order is only taken with strategy => 'sort'")
    if sort_text is not None and not isinstance(sort_text, str):
        raise PgError(INVALID_PARAMETER_VALUE, 'argument "sort_order" must be text, such as \'a, b DESC\'')
    options = args.get("options", {})
    if not isinstance(options, dict):
        raise PgError(INVALID_PARAMETER_VALUE, "argument \"options\" must be map('name', 'value', ...)")
    unknown = sorted(set(options) - set(_COMPACT_OPTIONS))
    if unknown:
        raise PgError(INVALID_PARAMETER_VALUE, f"rewrite_data_files has no option {', '.join(map(repr, unknown))}",
                      hint="Its options: " + ", ".join(_COMPACT_OPTIONS) + ".")

    def number(name: str) -> int | None:
        if name not in options:
            return None
        text = options[name].strip()
        if not text.isdigit():
            raise PgError(INVALID_PARAMETER_VALUE, f'option "{name}" must be a positive integer, not {options[name]!r}')
        return int(text)

    rewrite_all = options.get("rewrite-all", "false").lower()
    if rewrite_all not in ("true", "false"):
        raise PgError(INVALID_PARAMETER_VALUE, f'option "rewrite-all" must be true or false, not {rewrite_all!r}')
    min_input = number("min-input-files")
    return compact.CompactOptions(target_file_size_bytes=number("target-file-size-bytes"),
                          min_file_size_bytes=number("min-file-size-bytes"),
                          min_input_files=5 if min_input is None else min_input,
                          rewrite_all=rewrite_all == "true", sort=strategy.lower() == "sort",
                          sort_order=compact.parse_sort_order(sort_text) if sort_text is not None else None)


def maintain(lakehouse: Any, key: tuple[str, str], call: Call) -> tuple[Any, list[str]]:
    """Run a maintenance CALL on the table `key` (blocking: a worker thread's); its result row
    (a pyarrow Table) and NOTICEs."""
    display = f"{key[0]}.{key[1]}"
    if call.procedure == "rewrite_data_files":
        result = compact.compact(lakehouse, key, compact_options(call))
        notice = (f'table "{display}": {result.rewritten_data_files_count} data files rewritten as '
                  f"{result.added_data_files_count} in {result.groups} groups "
                  f"({result.data_files_before} files before)")
        return result.row(), [notice]
    args = dict(call.args)
    spec_id = args.get("spec_id")
    if spec_id is not None and not (isinstance(spec_id, int) and not isinstance(spec_id, bool)):
        raise PgError(INVALID_PARAMETER_VALUE, 'argument "spec_id" must be a partition spec id')
    if "use_caching" in args and not isinstance(args["use_caching"], bool):
        raise PgError(INVALID_PARAMETER_VALUE, 'argument "use_caching" must be true or false')
    done = manifests.rewrite_manifests(lakehouse, key, spec_id=spec_id)
    notice = (f'table "{display}": {done.rewritten_manifests_count} manifests rewritten as '
              f"{done.added_manifests_count} ({done.manifests_before} before)")
    return done.row(), [notice]
