"""A large lake: process start to the first answered query with 1,000 tables and 100,000 data
files, beside the same with 2 tables, in the same run (issue 26: within 1.5x).

Both lakes are embedded (SQLite catalog, local files) and built once under bench/.data
(`big-lake-<tables>x<files>`): every table has the same two columns and FILES_PER_TABLE data
files. Building must be cheap, so no row is written per file: one tiny Parquet file is written
through pyiceberg, copied once per table, and every other data file is a hard link to that copy, added to its table by a fast
append of copies of the first file's DataFile (same statistics, another path). One commit per
table. The query timed is the same in both lakes, `select count(*) from big.t0` (100 files).

Per round, both lakes are started alternately (first one, then the other), each measured as
`icegres serve` spawn -> first `select 1`, -> first count over t0, and the server's RSS right after
(and its peak, VmHWM). A first catalog query (psql's \\dt over the schema) is timed after that:
it loads every table's metadata JSON (lazy mounting's shapes), so it grows with the lake.
"""

from __future__ import annotations

import os
import shutil
import time
from pathlib import Path
from typing import Any

from bench import datasets
from bench.harness import (
    load_meter,
    median,
    provenance,
    rotation,
    round_ratio,
    short_error,
    write_report,
)

NS = "big"
FILES_PER_TABLE = 100
SIZES = (2, 1000)
FIRST_QUERY = f"select count(*) from {NS}.t0"
CATALOG_QUERY = ("select c.relname from pg_catalog.pg_class c join pg_catalog.pg_namespace n "
                 f"on n.oid = c.relnamespace where n.nspname = '{NS}' and c.relkind in ('r', 'p')")
TARGET_RATIO = 1.5
READY_TIMEOUT_S = 60.0
BEFORE_TIMEOUT_S = 900.0


def lake(tables: int, files: int = FILES_PER_TABLE) -> Path:
    """The cached lake of `tables` tables of `files` data files each (built on first use)."""
    path = datasets.DATA_DIR / f"big-lake-{tables}x{files}"
    done = path / "BUILT"
    if done.exists():
        return path / "data"
    shutil.rmtree(path, ignore_errors=True)
    started = time.perf_counter()
    _build(path / "data", tables, files)
    done.write_text(f"{tables} tables x {files} files, built in {time.perf_counter() - started:.1f} s\n")
    print(f"  built {path.name} in {time.perf_counter() - started:.1f} s", flush=True)
    return path / "data"


def _build(data_dir: Path, tables: int, files: int) -> None:
    import pyarrow as pa

    from icegres.engine.catalog import Lakehouse

    lakehouse = Lakehouse.embedded(data_dir)
    lakehouse.create_namespace_if_missing(NS)
    rows = pa.table({"id": pa.array([1, 2, 3], pa.int64()), "name": pa.array(["a", "b", "c"])})
    template = None
    for i in range(tables):
        table = lakehouse.create_table(NS, f"t{i}", rows.schema)
        if template is None:
            table.append(rows)  # the one real Parquet file
            (template,) = [task.file for task in table.scan().plan_files()]
            first = 1
        else:
            first = 0
        data = Path(table.location().removeprefix("file://")) / "data"
        data.mkdir(parents=True, exist_ok=True)
        # One copy per table, the table's other files hard links to it (a file system allows
        # some 65,000 links to one inode, fewer than the lake's files).
        source = data / "copy.parquet"
        shutil.copyfile(template.file_path.removeprefix("file://"), source)
        with table.transaction() as tx, tx.update_snapshot().fast_append() as append:
            for n in range(first, files):
                path = data / f"link-{n:05d}.parquet"
                os.link(source, path)
                append.append_data_file(_copy(template, path.as_uri()))


def _copy(template: Any, path: str) -> Any:
    from pyiceberg.manifest import DataFile

    fields = {name: getattr(template, name) for name in (
        "content", "file_format", "partition", "record_count", "file_size_in_bytes", "column_sizes",
        "value_counts", "null_value_counts", "nan_value_counts", "lower_bounds", "upper_bounds",
        "key_metadata", "split_offsets", "equality_ids", "sort_order_id")}
    copied = DataFile.from_args(file_path=path, **fields)
    copied.spec_id = template.spec_id
    return copied


def _start(data_dir: Path, log: Path, checkout: Path | None = None) -> dict[str, float]:
    import psycopg

    from bench import pgwire_read
    from bench.pgwire_read import Server

    server = Server(data_dir, log, checkout=checkout)
    # another checkout may mount every table before it listens: give it time
    pgwire_read.READY_TIMEOUT_S = BEFORE_TIMEOUT_S if checkout is not None else READY_TIMEOUT_S
    server.start()
    try:
        server.wait_ready(FIRST_QUERY)
        rss_mb = server.rss_after_ready / 2**20
        t0 = time.perf_counter()
        with psycopg.connect(server.conninfo, autocommit=True) as conn:
            listed = len(conn.execute(CATALOG_QUERY).fetchall())
        catalog_s = time.perf_counter() - t0
    finally:
        server.stop()
    return {"select1": server.ready_select1_s, "first": server.ready_demo_s, "rss": rss_mb,
            "hwm": server.vm_hwm / 2**20, "catalog": catalog_s, "listed": listed}



def run(opts: Any) -> list[dict[str, Any]]:
    from bench.pgwire_read import git_commit

    report: dict[str, Any] = {"suite": "big_lake", "section": "big_lake", **provenance(opts.command)}
    rounds = opts.rounds_or(3 if opts.quick else 5)
    lakes = {n: lake(n) for n in SIZES}
    peers = [f"{n} tables" for n in SIZES]
    # --before DIR: that checkout's icegres on both lakes too, in the first round only (before lazy
    # mounting it read every file of the big lake at start-up)
    before = [f"{n} tables, before" for n in SIZES] if opts.before else []
    samples: dict[str, dict[str, list[tuple[int, float]]]] = {p: {} for p in peers + before}
    errors: dict[str, str] = {}
    meter = load_meter()
    for rnd in range(rounds):
        for peer in rotation(peers, rnd) + (before if rnd == 0 else []):
            n = int(peer.split()[0])
            checkout = Path(opts.before) if peer in before else None
            tag = "-before" if checkout is not None else ""
            try:
                got = _start(lakes[n], datasets.DATA_DIR / "logs" / f"big-lake-{n}{tag}-{rnd}.log", checkout)
                if got["listed"] != n:
                    raise RuntimeError(f"the catalog listed {got['listed']} tables, not {n}")
            except Exception as exc:
                errors[f"{peer}/{rnd}"] = short_error(exc)
                continue
            for k in ("select1", "first", "rss", "hwm", "catalog"):
                samples[peer].setdefault(k, []).append((rnd, got[k]))
        print(f"  round {rnd + 1}/{rounds}: " + ", ".join(
            f"{p} {samples[p].get('first', [(0, float('nan'))])[-1][1]:.2f}s" for p in peers), flush=True)
    report["load"] = meter.finish()

    def med(p: str, k: str) -> float:
        return median(v for _, v in samples[p].get(k, []))

    big, small = peers[-1], peers[0]
    ratio = round_ratio(samples[big].get("first", []), samples[small].get("first", []))
    rows = [[p, f"{n * FILES_PER_TABLE:,}", f"{med(p, 'select1'):.2f}", f"{med(p, 'first'):.2f}",
             f"{med(p, 'rss'):.0f}", f"{med(p, 'hwm'):.0f}", f"{med(p, 'catalog'):.2f}",
             len(samples[p].get("first", []))]
            for p, n in [*zip(peers, SIZES, strict=True), *zip(before, SIZES, strict=False)]]
    verdict = "pass" if ratio is not None and ratio <= TARGET_RATIO else "miss"
    report.update(
        title=f"big_lake: start to first answered query, {SIZES[-1]:,} tables vs {SIZES[0]}",
        facts={
            "Data": f"embedded lakes of {SIZES[0]} and {SIZES[-1]:,} tables, {FILES_PER_TABLE} data files each "
                    "(3-row Parquet files, hard links to one per table), built once by bench/suites/big_lake.py",
            "Query": f"`{FIRST_QUERY}` (reads {FILES_PER_TABLE} files in either lake)",
            "Rounds": f"{rounds}, the two lakes alternating first; figures are medians"
                      + (f"; `before` = the checkout {opts.before} (its commit: "
                         f"{git_commit(Path(opts.before))}), first round only" if before else ""),
            "Target": f"first answered query, {SIZES[-1]:,} tables / {SIZES[0]} (median of per-round ratios): "
                      f"{ratio or float('nan'):.2f}x, goal <= {TARGET_RATIO}x -> **{verdict}**",
        },
        tables=[{"title": "Start-up by lake size", "columns": [
            "lake", "data files", "to first `select 1` s", "to first count(*) s", "RSS after MB",
            "peak RSS MB", "then first catalog query s", "n"],
            "rows": rows, "align": "lrrrrrrr",
            "notes": ["RSS after: the server's RSS right after the first answered query; peak: its VmHWM "
                      "until stopped (the catalog query included). The catalog query is psql's \\dt "
                      "shape over the schema: it reads every table's metadata JSON (no manifest, no "
                      "data file), so it grows with the lake while start-up does not."]}],
        samples=samples, errors=errors, mismatches=[],
        gate={},
    )
    write_report(report, opts.write)
    return [report]
