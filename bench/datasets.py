"""Benchmark datasets, built reproducibly and cached under bench/.data/ (git-ignored).

- ``trips(rows)``: ``icegres seed --rows N`` into ``bench/.data/lake-1m`` (1M) or
  ``bench/.data/trips-<N>`` (the scale curve): deterministic ``demo.trips`` (sorted by id, 250k-row
  files, 64k-row groups of page-indexed 8192-row pages) and ``demo.cities``. The seed writes through pyiceberg directly.
- ``tpch(lake)``: TPC-H SF1 (lineitem, orders, customer, part, supplier, nation, region) generated
  by DuckDB's tpch extension (``CALL dbgen(sf=1)``, deterministic) and loaded **through icegres**:
  ``CREATE SCHEMA`` / ``CREATE TABLE`` (the same DDL on either path, so the Iceberg schemas are
  identical), then the rows by one of two paths, 1M rows per statement (each one Iceberg commit, so
  lineitem lands as 7 files on either path):

  - ``flight`` (the default: it measured faster, 11x over all seven tables at SF1 in the same run,
    see the ``tpch_load`` section of SCORECARD.md and ``python -m bench load``): Arrow straight from DuckDB's record-batch reader (64k-row batches)
    into ADBC's ``adbc_ingest(..., mode="append")``, i.e. Flight SQL CommandStatementIngest, one
    DoPut per 1M rows (the server holds one stream in memory up to 1 GiB), DDL over Flight too.
    Ingest mode ``create`` would make every column nullable (as CREATE TABLE AS does), hence the
    DDL first and ``append``.
  - ``copy``: ``COPY ... FROM STDIN (FORMAT csv)`` over pgwire with psycopg's copy, from a CSV that
    DuckDB exports.

  Choose with ``path=`` or ``ICEGRES_BENCH_TPCH_LOAD=copy|flight`` (``python -m bench --tpch-load
  copy``). The facts of the load (path, seconds, rows/s) are kept in the marker file.

A marker file (``.bench-seeded``, ``.bench-tpch-sf1``) says a dataset is whole and which data
layout it was written with (``DATA_LAYOUT``); delete the directory (or the marker) to rebuild. A
dataset of another layout is rebuilt on first use, so a run measures the files icegres writes today.
"""

from __future__ import annotations

import contextlib
import datetime as dt
import json
import os
import re
import shutil
import subprocess
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from bench.harness import BENCH_DIR

DATA_DIR = Path(os.environ.get("ICEGRES_BENCH_DATA", BENCH_DIR / ".data"))
SEEDED_MARKER = ".bench-seeded"  # the same marker bench/pgwire_read.py writes
TPCH_MARKER = ".bench-tpch-sf1"
TPCH_SCHEMA = "tpch"
TPCH_TABLES = ("region", "nation", "supplier", "customer", "part", "orders", "lineitem")
COPY_ROWS = 1_000_000  # rows per COPY statement or ingest call: one commit, one data file
COPY_BLOCK_BYTES = 1 << 20
INGEST_BATCH_ROWS = 65_536  # Arrow batch size inside one ingest stream (DoGet sends the same)
TPCH_LOAD_PATHS = ("flight", "copy")
TPCH_LOAD_DEFAULT = "flight"  # measured faster: SCORECARD.md section tpch_load (python -m bench load)
TPCH_LOAD_ENV = "ICEGRES_BENCH_TPCH_LOAD"
TPCH_LOAD_DESCRIPTIONS = {
    "copy": "COPY FROM STDIN (FORMAT csv) over pgwire, psycopg copy",
    "flight": "Flight SQL ingest (ADBC adbc_ingest, mode append) of DuckDB's Arrow record batches",
}


# Bumped whenever the data files icegres writes change layout. 2: a page index and 8192-row pages
# with a 64 KB dictionary bound (icegres/engine/parquet_files.py, DEFAULT_TABLE_PROPERTIES).
# 3: integer columns of mostly distinct values DELTA_BINARY_PACKED (parquet_files.integer_encodings).
DATA_LAYOUT = 3


def seeded_marker_text(**facts: Any) -> str:
    extra = "".join(f" {k}={v}" for k, v in facts.items())
    return f"seeded {dt.datetime.now(dt.UTC).isoformat()} layout={DATA_LAYOUT}{extra}\n"


def is_cached(d: Path, marker: str = SEEDED_MARKER, *, needs_catalog: bool = True) -> bool:
    """True when `d` holds a whole dataset of today's layout. One of another layout is removed
    here when it lives under bench/.data (the caller then builds it afresh); elsewhere it is the
    user's directory, and this stops with what to do."""
    m = d / marker
    if not m.exists():
        return False
    if f"layout={DATA_LAYOUT}" in m.read_text().split() and (not needs_catalog or (d / "catalog.db").exists()):
        return True
    if not needs_catalog or (d / "catalog.db").exists():
        if not d.resolve().is_relative_to(DATA_DIR.resolve()):
            raise SystemExit(f"{d} holds data files of an older layout than this icegres writes "
                             f"(bench/datasets.py DATA_LAYOUT={DATA_LAYOUT}): remove it or pass a fresh directory")
        print(f"dataset: {d} was written with an older data layout: rebuilding it", flush=True)
        shutil.rmtree(d)
    return False


def lake_dir(rows: int) -> Path:
    return DATA_DIR / ("lake-1m" if rows == 1_000_000 else f"trips-{rows // 1_000_000}m")


def trips(rows: int = 1_000_000) -> Path:
    """The embedded lake holding demo.trips with `rows` rows (seeded once, then cached)."""
    from bench.pgwire_read import icegres_command

    d = lake_dir(rows)
    if is_cached(d):
        return d
    d.mkdir(parents=True, exist_ok=True)
    print(f"dataset: seeding demo.trips with {rows:,} rows into {d} (once; cached) ...", flush=True)
    t0 = time.perf_counter()
    subprocess.run([*icegres_command(), "seed", "--data-dir", str(d), "--rows", str(rows)],
                   check=True)
    took = time.perf_counter() - t0
    (d / SEEDED_MARKER).write_text(seeded_marker_text(rows=rows, seconds=f"{took:.1f}"))
    print(f"dataset: demo.trips {rows:,} rows seeded in {took:.0f} s", flush=True)
    return d


def duck_connect(extensions: tuple[str, ...] = ()) -> Any:
    """An in-memory DuckDB with extensions installed offline from their wheels."""
    import duckdb

    from bench.pgwire_read import _duck_extension

    con = duckdb.connect()
    con.execute("SET autoinstall_known_extensions=false")
    con.execute("SET autoload_known_extensions=false")
    for ext in extensions:
        con.execute(f"INSTALL '{_duck_extension(ext)}'")
        con.execute(f"LOAD {ext}")
    return con


def tpch_load_path(path: str | None = None) -> str:
    """The TPC-H load path to use: `path`, else $ICEGRES_BENCH_TPCH_LOAD, else the measured-faster
    default (TPCH_LOAD_DEFAULT)."""
    chosen = path or os.environ.get(TPCH_LOAD_ENV) or TPCH_LOAD_DEFAULT
    if chosen not in TPCH_LOAD_PATHS:
        raise ValueError(f"TPC-H load path {chosen!r}: expected one of {TPCH_LOAD_PATHS}")
    return chosen


def _pg_type(duck_type: str) -> str:
    t = duck_type.upper()
    if t.startswith("DECIMAL"):
        return t.lower()
    return {"BIGINT": "bigint", "INTEGER": "integer", "VARCHAR": "varchar", "DATE": "date",
            "DOUBLE": "double precision"}[t]


def _columns(con: Any, table: str) -> list[tuple[str, str, str]]:
    return con.execute(
        "select column_name, data_type, is_nullable from information_schema.columns "
        "where table_name = ? order by ordinal_position", [table]).fetchall()


def tpch_ddl(con: Any, table: str) -> tuple[str, list[str]]:
    """The CREATE TABLE both load paths send (so both lakes get the same Iceberg schema)."""
    cols = _columns(con, table)
    body = ", ".join(f"{c} {_pg_type(t)}{' not null' if n == 'NO' else ''}" for c, t, n in cols)
    return f"create table {TPCH_SCHEMA}.{table} ({body})", [c for c, _, _ in cols]


def tpch_checksum_sql(con: Any, table: str, qualified: bool = True) -> str:
    """One row that pins a table's contents: count(*), sum of every number, sum(length()) / min /
    max of every string, min / max of every date. The same text runs on icegres (pgwire) and on
    DuckDB's generated source (`qualified=False`)."""
    parts = ["count(*)"]
    for c, t, _ in _columns(con, table):
        t = t.upper()
        if t.startswith("DECIMAL") or t in ("BIGINT", "INTEGER", "DOUBLE"):
            parts.append(f"sum({c})")
        elif t == "VARCHAR":
            parts += [f"sum(length({c}))", f"min({c})", f"max({c})"]
        elif t == "DATE":
            parts += [f"min({c})", f"max({c})"]
    return f"select {', '.join(parts)} from {TPCH_SCHEMA + '.' if qualified else ''}{table}"


def tpch_generate(sf: float) -> tuple[Any, float]:
    """An in-memory DuckDB holding TPC-H at `sf` (`CALL dbgen`), and the seconds it took."""
    print(f"dataset: TPC-H SF{sf:g}: generating with DuckDB's tpch extension ...", flush=True)
    con = duck_connect(("tpch",))
    t0 = time.perf_counter()
    con.execute(f"CALL dbgen(sf={sf})")
    return con, time.perf_counter() - t0


def copy_table(pg: Any, con: Any, table: str, tmp_dir: Path) -> dict[str, Any]:
    """Create tpch.<table> over pgwire (`pg`: an autocommit psycopg connection) and load DuckDB's
    rows of it by COPY FROM STDIN (FORMAT csv), COPY_ROWS rows per COPY (one commit each).
    Returns rows, statements, wire bytes (CSV), the CSV export's seconds and the total seconds."""
    ddl, columns = tpch_ddl(con, table)
    n = con.execute(f"select count(*) from {table}").fetchone()[0]
    t0 = time.perf_counter()
    pg.execute(f"drop table if exists {TPCH_SCHEMA}.{table}")
    pg.execute(ddl)
    csv = tmp_dir / f"{table}.csv"
    con.execute(f"COPY {table} TO '{csv}' (FORMAT csv, HEADER false)")
    export_s = time.perf_counter() - t0
    loaded = statements = wire = 0
    try:
        with csv.open("rb") as f:
            while loaded < n:
                chunk = [line for _, line in zip(range(COPY_ROWS), f, strict=False)]
                if not chunk:
                    break
                buf = b"".join(chunk)
                with pg.cursor() as cur, cur.copy(
                    f"COPY {TPCH_SCHEMA}.{table} ({', '.join(columns)}) FROM STDIN (FORMAT csv)"
                ) as cp:
                    for i in range(0, len(buf), COPY_BLOCK_BYTES):
                        cp.write(buf[i:i + COPY_BLOCK_BYTES])
                loaded += len(chunk)
                statements += 1
                wire += len(buf)
                el = time.perf_counter() - t0
                print(f"  copy   {table}: {loaded:,}/{n:,} rows ({el:.0f} s, "
                      f"{loaded / max(el, 1e-9):,.0f} rows/s)", flush=True)
    finally:
        csv.unlink(missing_ok=True)
    if loaded != n:
        raise RuntimeError(f"tpch.{table}: sent {loaded} rows by COPY, DuckDB generated {n}")
    return {"rows": n, "statements": statements, "wire_bytes": wire, "wire": "CSV",
            "export_s": round(export_s, 3), "seconds": time.perf_counter() - t0}


def _row_chunks(reader: Any, rows: int) -> Iterator[list[Any]]:
    """The batches of `reader` regrouped into lists of exactly `rows` rows (the last: the rest)."""
    chunk: list[Any] = []
    n = 0
    for batch in reader:
        while batch.num_rows:
            take = min(rows - n, batch.num_rows)
            chunk.append(batch.slice(0, take))
            n += take
            batch = batch.slice(take)
            if n == rows:
                yield chunk
                chunk, n = [], 0
    if chunk:
        yield chunk


def flight_table(fc: Any, con: Any, table: str) -> dict[str, Any]:
    """Create tpch.<table> over Flight SQL (`fc`: an autocommit ADBC Flight SQL connection) and
    load DuckDB's rows of it as Arrow by `adbc_ingest(mode="append")` (CommandStatementIngest),
    COPY_ROWS rows per ingest (one DoPut, one commit), sent as INGEST_BATCH_ROWS-row batches.
    DuckDB's Arrow types are the DDL's (checked), so no cast is needed. Returns rows, statements,
    wire bytes (Arrow IPC) and the total seconds."""
    import pyarrow as pa

    ddl, columns = tpch_ddl(con, table)
    n = con.execute(f"select count(*) from {table}").fetchone()[0]
    t0 = time.perf_counter()
    loaded = statements = wire = 0
    with fc.cursor() as cur:
        cur.execute(f"drop table if exists {TPCH_SCHEMA}.{table}")
        cur.execute(ddl)
        described = _columns(con, table)
        # The reader is the connection's pending result: no other query on `con` until it is read.
        reader = con.execute(f"select {', '.join(columns)} from {table}").to_arrow_reader(
            INGEST_BATCH_ROWS)
        _check_arrow_types(described, table, reader.schema)
        for chunk in _row_chunks(reader, COPY_ROWS):
            rows = sum(b.num_rows for b in chunk)
            wire += sum(pa.ipc.get_record_batch_size(b) for b in chunk)
            got = cur.adbc_ingest(table, pa.RecordBatchReader.from_batches(reader.schema, chunk),
                                  mode="append", db_schema_name=TPCH_SCHEMA)
            if got != rows:
                raise RuntimeError(f"tpch.{table}: ingest of {rows} rows reported {got}")
            loaded += rows
            statements += 1
            el = time.perf_counter() - t0
            print(f"  flight {table}: {loaded:,}/{n:,} rows ({el:.0f} s, "
                  f"{loaded / max(el, 1e-9):,.0f} rows/s)", flush=True)
    if loaded != n:
        raise RuntimeError(f"tpch.{table}: ingested {loaded} rows, DuckDB generated {n}")
    return {"rows": n, "statements": statements, "wire_bytes": wire, "wire": "Arrow IPC",
            "export_s": None, "seconds": time.perf_counter() - t0}


def _check_arrow_types(columns: list[tuple[str, str, str]], table: str, schema: Any) -> None:
    """DuckDB's Arrow export of `table` has the Arrow type of each column the DDL creates."""
    import pyarrow as pa

    def expected(duck: str) -> Any:
        t = duck.upper()
        if t.startswith("DECIMAL"):
            p, s = (int(x) for x in t[t.index("(") + 1:-1].split(","))
            return pa.decimal128(p, s)
        return {"BIGINT": pa.int64(), "INTEGER": pa.int32(), "VARCHAR": pa.string(),
                "DATE": pa.date32(), "DOUBLE": pa.float64()}[t]

    for (c, t, _), f in zip(columns, schema, strict=True):
        if f.name != c or f.type != expected(t):
            raise RuntimeError(f"tpch.{table}.{c}: DuckDB exports {f.type}, the DDL says {t}")


@contextlib.contextmanager
def flight_server(data_dir: Path, env: dict[str, str] | None = None) -> Iterator[str]:
    """`icegres flight-serve` on `data_dir` (loopback, a free port) for a load; yields its URI and
    stops it (by PID) afterwards."""
    from bench.peers.flight import stop_process, wait_port
    from bench.pgwire_read import icegres_command, icegres_ports

    log_path = DATA_DIR / "logs" / "tpch-flight-load.log"
    ports_file = log_path.with_name(log_path.name + ".ports.json")
    log_path.parent.mkdir(parents=True, exist_ok=True)
    with log_path.open("wb") as log:
        proc = subprocess.Popen(
            [*icegres_command(), "flight-serve", "--data-dir", str(data_dir), "--host", "127.0.0.1",
             "--port", "0", "--ports-file", str(ports_file)], stdout=log, stderr=subprocess.STDOUT,
            stdin=subprocess.DEVNULL, env={**os.environ, **env} if env else None)
    try:
        port = icegres_ports(proc, ports_file, log_path)["flight_port"]
        wait_port(port, proc, 120, log_path)
        yield f"grpc://127.0.0.1:{port}"
    finally:
        stop_process(proc)


def tpch_info(lake: Path) -> dict[str, Any] | None:
    m = lake / TPCH_MARKER
    return json.loads(m.read_text()) if m.exists() else None


def tpch(lake: Path, conninfo: str, sf: float = 1.0, *, path: str | None = None,
         flight_uri: str | None = None, server_env: dict[str, str] | None = None) -> dict[str, Any]:
    """Load TPC-H at scale factor `sf` into `lake` through the icegres server at `conninfo`
    (which must serve `lake`), unless its marker says it is there already. Returns the load facts
    (also kept in the marker).

    `path` (see `tpch_load_path`) picks the load path. The Flight path uses `flight_uri` if given,
    else starts its own `icegres flight-serve` on `lake` for the load (with `server_env`); that
    needs `lake` to be an embedded lake (its catalog.db), otherwise it falls back to COPY and says
    so."""
    import psycopg

    info = tpch_info(lake)
    if info is not None and info.get("sf") == sf and info.get("layout") == DATA_LAYOUT:
        return info
    chosen = tpch_load_path(path)
    if chosen == "flight" and flight_uri is None and not (lake / "catalog.db").exists():
        print(f"dataset: {lake} is not an embedded lake and no Flight endpoint was given: "
              "loading TPC-H by COPY instead", flush=True)
        chosen = "copy"
    con, gen_s = tpch_generate(sf)
    facts: dict[str, Any] = {"sf": sf, "layout": DATA_LAYOUT, "generate_s": round(gen_s, 1), "tables": {},
                             "load_path": chosen, "path": TPCH_LOAD_DESCRIPTIONS[chosen],
                             "rows_per_copy": COPY_ROWS, "rows_per_statement": COPY_ROWS}
    with contextlib.ExitStack() as stack:
        pg = stack.enter_context(psycopg.connect(conninfo, autocommit=True))
        pg.execute(f"create schema if not exists {TPCH_SCHEMA}")
        if chosen == "flight":
            import adbc_driver_flightsql.dbapi as adbc

            uri = flight_uri or stack.enter_context(flight_server(lake, server_env))
            fc = stack.enter_context(adbc.connect(uri, autocommit=True))
        else:
            tmp = Path(stack.enter_context(tempfile.TemporaryDirectory(prefix="tpch-", dir=DATA_DIR)))
        total0 = time.perf_counter()
        for table in TPCH_TABLES:
            done = flight_table(fc, con, table) if chosen == "flight" else copy_table(pg, con, table, tmp)
            got = pg.execute(f"select count(*) from {TPCH_SCHEMA}.{table}").fetchone()[0]
            if got != done["rows"]:
                raise RuntimeError(f"tpch.{table}: {got} rows over pgwire, DuckDB generated {done['rows']}")
            facts["tables"][table] = {"rows": done["rows"], "load_s": round(done["seconds"], 1)}
        facts["load_s"] = round(time.perf_counter() - total0, 1)
    con.close()
    facts["loaded_utc"] = dt.datetime.now(dt.UTC).isoformat(timespec="seconds")
    rows = sum(t["rows"] for t in facts["tables"].values())
    facts["rows_per_s"] = round(rows / facts["load_s"])
    (lake / TPCH_MARKER).write_text(json.dumps(facts, indent=1) + "\n")
    print(f"dataset: TPC-H SF{sf:g} loaded through icegres ({chosen}): {rows:,} rows in "
          f"{facts['load_s']:.0f} s ({facts['rows_per_s']:,} rows/s)", flush=True)
    return facts


def tpch_queries(numbers: tuple[int, ...] = (1, 3, 5, 6, 10)) -> dict[int, str]:
    """DuckDB's own TPC-H query texts (default substitution parameters), tables schema-qualified."""
    con = duck_connect(("tpch",))
    out = {}
    names = "|".join(TPCH_TABLES)
    for nr, q in con.execute(
        f"select query_nr, query from tpch_queries() where query_nr in {tuple(numbers)}"
    ).fetchall():
        q = re.sub(rf"\b({names})\b", rf"{TPCH_SCHEMA}.\1", q.strip().rstrip(";"))
        out[int(nr)] = q
    con.close()
    return out


def metadata_locations(lake: Path, namespaces: tuple[str, ...] = ("demo", TPCH_SCHEMA)) -> dict[str, str]:
    """'ns.table' -> current metadata file, read from the embedded SQLite catalog directly."""
    import contextlib
    import sqlite3

    marks = ",".join("?" * len(namespaces))
    with contextlib.closing(sqlite3.connect(lake / "catalog.db")) as db:
        rows = db.execute(
            "select table_namespace, table_name, metadata_location from iceberg_tables "
            f"where table_namespace in ({marks})", namespaces).fetchall()
    return {f"{ns}.{name}": loc.removeprefix("file://") for ns, name, loc in rows}


def cities_table(lakehouse: Any, rows: int, seed: int, name: str = "tt", parts: int = 4) -> Any:
    """demo.<name>: `rows` rows (id 1..rows, city of five, fare in [0, 100)) in `parts` commits,
    the table the time-travel and row-security suites read; returns the pyiceberg table."""
    import numpy as np
    import pyarrow as pa

    lakehouse.create_namespace_if_missing("demo")
    schema = pa.schema([("id", pa.int64()), ("city", pa.string()), ("fare", pa.float64())])
    table = lakehouse.create_table("demo", name, schema)
    cities = np.array(["Berlin", "Paris", "Lima", "Osaka", "Accra"])
    rng = np.random.default_rng(seed)
    for part in range(parts):
        ids = np.arange(part * rows // parts + 1, (part + 1) * rows // parts + 1, dtype=np.int64)
        table.append(pa.table({"id": ids, "city": cities[ids % 5], "fare": rng.random(len(ids)) * 100}, schema=schema))
    return table
