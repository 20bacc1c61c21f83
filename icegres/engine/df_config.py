"""The DataFusion settings every context of the engine is made with, and the execution processes
plan with (engine/executor.py sends them along with a logical plan)."""

from __future__ import annotations

from icegres.engine.batches import BATCH_ROWS
from icegres.engine.session_zone import UTC

DEFAULT_CATALOG = "datafusion"
ENGINE_ZONE = UTC  # every context's time zone as made (the master's, always)

SETTINGS: dict[str, str] = {
    "datafusion.sql_parser.dialect": "PostgreSQL",
    # Row-level filter pushdown stays off (DataFusion's default). It decodes the filter
    # columns first and the others only for matching rows; with the page index icegres
    # writes (parquet_files.py) a point lookup already reads one page per column, so that
    # saves ~0.3 ms there, while a scan with several moderately selective conjuncts pays for
    # one filtering pass per conjunct: TPC-H Q6 ran 368 -> 189 ms without it, top-k 21 -> 18
    # (in-process A/B, interleaved). On object stores it also costs a second GET per row
    # group (SeaweedFS point lookup 21 -> 15 ms without it).
    "datafusion.execution.parquet.pushdown_filters": "false",
    # The dynamic IN-list filter a hash join pushes into the probe-side scan pruned nothing on
    # the demo joins and cost time in every file: the join with demo.cities ran 34 -> 20 ms
    # without it (with row-level pushdown; 37 -> 31 ms without that, Q3 297 -> 279 ms).
    "datafusion.optimizer.enable_join_dynamic_filter_pushdown": "false",
    # A hash join whose build side is under 1M rows / 16 MB builds one table shared by every
    # partition (CollectLeft) instead of hash-repartitioning both inputs: with few cores the
    # shuffle costs more than the single build. TPC-H SF1 in-process, interleaved: Q3
    # 250 -> 203 ms, Q5 389 -> 306 ms, Q10 337 -> 323 ms; DataFusion's defaults are 128k rows / 1 MB.
    "datafusion.optimizer.hash_join_single_partition_threshold": str(16 << 20),
    "datafusion.optimizer.hash_join_single_partition_threshold_rows": str(1 << 20),
    # Set, not left to DataFusion's default: `Engine.rebatched` sets it back to this value.
    "datafusion.execution.batch_size": str(BATCH_ROWS),
    # `::timestamptz` must plan as a zoned timestamp (OID 1184), as in PostgreSQL. A session
    # context is set to its session's TimeZone (`QueryContext._in_session_zone`).
    "datafusion.execution.time_zone": ENGINE_ZONE,
    # Identifiers fold to lower case exactly as in PostgreSQL.
    "datafusion.sql_parser.enable_ident_normalization": "true",
}


def session_config(default_schema: str = "public"):
    """DataFusion settings of every context."""
    from datafusion import SessionConfig

    config = (SessionConfig().with_default_catalog_and_schema(DEFAULT_CATALOG, default_schema)
              .with_information_schema(False))
    for key, value in SETTINGS.items():
        config = config.set(key, value)
    return config
