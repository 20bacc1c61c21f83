"""Benchmark datasets, built reproducibly and cached under bench/.data/ (git-ignored).

- ``trips(rows)``: ``icegres seed --rows N`` into ``bench/.data/lake-1m`` (1M) or
  ``bench/.data/trips-<N>`` (the scale curve): deterministic ``demo.trips`` (sorted by id, 250k-row
  files, 64k-row groups) and ``demo.cities``. The seed writes through pyiceberg directly.
- ``tpch(lake)``: TPC-H SF1 (lineitem, orders, customer, part, supplier, nation, region) generated
  by DuckDB's tpch extension (``CALL dbgen(sf=1)``, deterministic) and loaded **through icegres**:
  ``CREATE SCHEMA`` / ``CREATE TABLE`` over the Postgres wire, then ``COPY ... FROM STDIN (FORMAT
  csv)`` with psycopg's copy, 1M rows per COPY statement (each COPY is one Iceberg commit, so
  lineitem lands as 7 files). Flight SQL ingest does not exist yet (issue 7), so COPY is the only
  bulk path to compare; the load time is recorded in the marker file.

A marker file (``.bench-seeded``, ``.bench-tpch-sf1``) says a dataset is whole; delete the
directory (or the marker) to rebuild.
"""

from __future__ import annotations

import datetime as dt
import json
import os
import re
import subprocess
import tempfile
import time
from pathlib import Path
from typing import Any

from bench.harness import BENCH_DIR

DATA_DIR = Path(os.environ.get("ICEGRES_BENCH_DATA", BENCH_DIR / ".data"))
SEEDED_MARKER = ".bench-seeded"  # the same marker bench/pgwire_read.py writes
TPCH_MARKER = ".bench-tpch-sf1"
TPCH_SCHEMA = "tpch"
TPCH_TABLES = ("region", "nation", "supplier", "customer", "part", "orders", "lineitem")
COPY_ROWS = 1_000_000  # rows per COPY statement: one commit, one data file
COPY_BLOCK_BYTES = 1 << 20


def lake_dir(rows: int) -> Path:
    return DATA_DIR / ("lake-1m" if rows == 1_000_000 else f"trips-{rows // 1_000_000}m")


def trips(rows: int = 1_000_000) -> Path:
    """The embedded lake holding demo.trips with `rows` rows (seeded once, then cached)."""
    from bench.pgwire_read import icegres_command

    d = lake_dir(rows)
    if (d / SEEDED_MARKER).exists() and (d / "catalog.db").exists():
        return d
    d.mkdir(parents=True, exist_ok=True)
    print(f"dataset: seeding demo.trips with {rows:,} rows into {d} (once; cached) ...", flush=True)
    t0 = time.perf_counter()
    subprocess.run([*icegres_command(), "seed", "--data-dir", str(d), "--rows", str(rows)],
                   check=True)
    took = time.perf_counter() - t0
    (d / SEEDED_MARKER).write_text(
        f"seeded {dt.datetime.now(dt.UTC).isoformat()} rows={rows} seconds={took:.1f}\n")
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


def _pg_type(duck_type: str) -> str:
    t = duck_type.upper()
    if t.startswith("DECIMAL"):
        return t.lower()
    return {"BIGINT": "bigint", "INTEGER": "integer", "VARCHAR": "varchar", "DATE": "date",
            "DOUBLE": "double precision"}[t]


def tpch_ddl(con: Any, table: str) -> tuple[str, list[str]]:
    cols = con.execute(
        "select column_name, data_type, is_nullable from information_schema.columns "
        "where table_name = ? order by ordinal_position", [table]).fetchall()
    body = ", ".join(f"{c} {_pg_type(t)}{' not null' if n == 'NO' else ''}" for c, t, n in cols)
    return f"create table {TPCH_SCHEMA}.{table} ({body})", [c for c, _, _ in cols]


def tpch_info(lake: Path) -> dict[str, Any] | None:
    m = lake / TPCH_MARKER
    return json.loads(m.read_text()) if m.exists() else None


def tpch(lake: Path, conninfo: str, sf: float = 1.0) -> dict[str, Any]:
    """Load TPC-H at scale factor `sf` into `lake` through the icegres server at `conninfo`
    (which must serve `lake`). Returns the load facts (also kept in the marker)."""
    import psycopg

    info = tpch_info(lake)
    if info is not None and info.get("sf") == sf:
        return info
    print(f"dataset: TPC-H SF{sf:g}: generating with DuckDB's tpch extension ...", flush=True)
    con = duck_connect(("tpch",))
    t0 = time.perf_counter()
    con.execute(f"CALL dbgen(sf={sf})")
    gen_s = time.perf_counter() - t0
    facts: dict[str, Any] = {"sf": sf, "generate_s": round(gen_s, 1), "tables": {},
                             "path": "COPY FROM STDIN (FORMAT csv) over pgwire, psycopg copy",
                             "rows_per_copy": COPY_ROWS}
    with psycopg.connect(conninfo, autocommit=True) as pg, tempfile.TemporaryDirectory(
        prefix="tpch-", dir=DATA_DIR
    ) as tmp:
        pg.execute(f"create schema if not exists {TPCH_SCHEMA}")
        total0 = time.perf_counter()
        for table in TPCH_TABLES:
            ddl, columns = tpch_ddl(con, table)
            pg.execute(f"drop table if exists {TPCH_SCHEMA}.{table}")
            pg.execute(ddl)
            n = con.execute(f"select count(*) from {table}").fetchone()[0]
            csv = Path(tmp) / f"{table}.csv"
            con.execute(f"COPY {table} TO '{csv}' (FORMAT csv, HEADER false)")
            t1 = time.perf_counter()
            loaded = 0
            with csv.open("rb") as f:
                while loaded < n:
                    chunk = [line for _, line in zip(range(COPY_ROWS), f, strict=False)]
                    if not chunk:
                        break
                    with pg.cursor() as cur, cur.copy(
                        f"COPY {TPCH_SCHEMA}.{table} ({', '.join(columns)}) FROM STDIN (FORMAT csv)"
                    ) as cp:
                        buf = b"".join(chunk)
                        for i in range(0, len(buf), COPY_BLOCK_BYTES):
                            cp.write(buf[i:i + COPY_BLOCK_BYTES])
                    loaded += len(chunk)
                    el = time.perf_counter() - t1
                    print(f"  {table}: {loaded:,}/{n:,} rows ({el:.0f} s, "
                          f"{loaded / max(el, 1e-9):,.0f} rows/s)", flush=True)
            csv.unlink()
            got = pg.execute(f"select count(*) from {TPCH_SCHEMA}.{table}").fetchone()[0]
            if got != n:
                raise RuntimeError(f"tpch.{table}: loaded {got} rows, DuckDB generated {n}")
            facts["tables"][table] = {"rows": n, "load_s": round(time.perf_counter() - t1, 1)}
        facts["load_s"] = round(time.perf_counter() - total0, 1)
    facts["loaded_utc"] = dt.datetime.now(dt.UTC).isoformat(timespec="seconds")
    rows = sum(t["rows"] for t in facts["tables"].values())
    facts["rows_per_s"] = round(rows / facts["load_s"])
    (lake / TPCH_MARKER).write_text(json.dumps(facts, indent=1) + "\n")
    print(f"dataset: TPC-H SF{sf:g} loaded through icegres: {rows:,} rows in {facts['load_s']:.0f} s "
          f"({facts['rows_per_s']:,} rows/s)", flush=True)
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
