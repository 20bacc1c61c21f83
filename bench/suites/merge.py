"""merge: MERGE of 1,000 changed rows into a 1M-row trips table, and the same change written as
UPDATE … FROM + INSERT, icegres vs DuckDB's iceberg extension and PostgreSQL 15, same run (issue 29).

The rows: demo.trips as `icegres seed` writes it (1,000,000 rows; `--rows N` takes its first N
ids, for development), copied per peer as (id, city, fare). Each iteration draws 1,000 source rows
from its own seed — 500 existing ids with a new fare, 500 new ids — loads them into the peer's
source table (untimed), then times one statement (or one transaction):

- `… merge`: `MERGE INTO t USING src s ON t.id = s.id WHEN MATCHED THEN UPDATE SET fare = s.fare
  WHEN NOT MATCHED THEN INSERT (id, city, fare) VALUES (s.id, s.city, s.fare)`;
- `… update+insert`: `BEGIN; UPDATE t SET fare = s.fare FROM src s WHERE t.id = s.id;
  INSERT INTO t SELECT … FROM src s WHERE NOT EXISTS (…); COMMIT`.

Peers, per backend (`--backend embedded|seaweedfs|both`):

- icegres (one `icegres serve`, psycopg), MERGE and UPDATE … FROM + INSERT, each on its own copy;
  its source table demo.m_src is an Iceberg table too, refilled by COPY. MERGE twice: copy-on-write
  (the default) and merge-on-read (the copy's `write.merge.mode` = merge-on-read), and UPDATE …
  FROM + INSERT both ways too (`write.update.mode`).
- DuckDB 1.5.5's iceberg extension (seaweedfs only: it writes only through a REST catalog):
  `ATTACH` of SeaweedFS's REST catalog (OAuth2 client credentials) with an S3 secret, MERGE and
  UPDATE … FROM + INSERT into its own copies of the same rows in the same catalog, each copy
  created by icegres (`CREATE TABLE … AS`), so it starts from the very file layout icegres's
  copies start from. Its source table is a DuckDB in-memory table, as a DuckDB user would stage
  one. DuckDB writes merge-on-read: position-delete files plus new data files, no data file
  rewritten, as icegres's merge-on-read peer does. (DuckDB's copies are read back through DuckDB.)
- DuckDB in memory: MERGE on a DuckDB table holding the same rows, no Iceberg: the engine alone.
- PostgreSQL 15: MERGE on a heap table of the same rows (read from the lake, loaded by COPY) with a
  primary key on id.

Rounds are comparable: every round (the unmeasured warm-up round first) starts from fresh copies
of the same rows — every table dropped and copied again — and then runs its iterations, peers in
an order rotating per iteration (A B C, B C A, ...). After every change, each peer's table must
hold exactly the expected rows: count(*), sum(id) and sum(id * fare in cents) equal to a model
of the change kept here; a sample whose check fails is reported and not counted.

Target (issue 29): icegres's MERGE within 2x of DuckDB-iceberg's. Per statement, the files each
Iceberg peer's commit(s) changed — data files rewritten (snapshot summary deleted-data-files),
data files added, delete files added, snapshots — read from the table's snapshots through the
catalog, are reported beside the time.
"""

from __future__ import annotations

import contextlib
import random
import statistics
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from typing import Any

from bench.harness import (
    fmt_ms,
    fmt_x,
    load_meter,
    percentile,
    provenance,
    rotation,
    round_ratio,
    short_error,
    write_report,
)

ROWS = 1_000_000
CHANGED = 1_000
SEED = 20261206
ICE_MERGE, ICE_UPD = "icegres merge", "icegres update+insert"
ICE_MOR_MERGE, ICE_MOR_UPD = "icegres merge, merge-on-read", "icegres update+insert, merge-on-read"
DUCK_ICE_MERGE, DUCK_ICE_UPD = "duckdb-iceberg merge", "duckdb-iceberg update+insert"
DUCK_MEM, PG_MERGE = "duckdb in-memory merge", "postgres merge"
PEERS = {
    "embedded": (ICE_MERGE, ICE_MOR_MERGE, ICE_UPD, ICE_MOR_UPD, DUCK_MEM, PG_MERGE),
    "seaweedfs": (ICE_MERGE, ICE_MOR_MERGE, ICE_UPD, ICE_MOR_UPD, DUCK_ICE_MERGE, DUCK_ICE_UPD, DUCK_MEM, PG_MERGE),
}
# Each backend's ratios are against this peer: the DuckDB-iceberg where it can write.
REFERENCE = {"embedded": DUCK_MEM, "seaweedfs": DUCK_ICE_MERGE}
TABLES = {ICE_MERGE: "m_merge", ICE_MOR_MERGE: "m_mor_merge", ICE_UPD: "m_upd", ICE_MOR_UPD: "m_mor_upd", DUCK_ICE_MERGE: "m_duck_merge",
          DUCK_ICE_UPD: "m_duck_upd", DUCK_MEM: "m_merge", PG_MERGE: "m_merge"}
COLUMNS = "id bigint, city text, fare double precision"

MERGE_SQL = ("merge into {t} t using {src} s on t.id = s.id "
             "when matched then update set fare = s.fare "
             "when not matched then insert (id, city, fare) values (s.id, s.city, s.fare)")
UPDATE_SQL = "update {t} t set fare = s.fare from {src} s where t.id = s.id"
INSERT_SQL = ("insert into {t} (id, city, fare) select s.id, s.city, s.fare from {src} s "
              "where not exists (select 1 from {t} x where x.id = s.id)")
# Exact on every engine: fares have two decimals, so fare * 100 rounds to the cents stored.
CHECK_SQL = "select count(*), sum(id), sum(id * cast(round(fare * 100) as bigint)) from {t}"
FILE_KEYS = ("deleted-data-files", "added-data-files", "added-delete-files")
# Iceberg's table properties that make icegres's MERGE (UPDATE, DELETE) write merge-on-read.
MERGE_ON_READ = ('("write.merge.mode" = \'merge-on-read\', "write.update.mode" = \'merge-on-read\', '
                 '"write.delete.mode" = \'merge-on-read\')')


def source_rows(iteration: int, rows: int = ROWS) -> list[tuple[int, str, float]]:
    """Iteration `iteration`'s source: CHANGED // 2 existing ids (of 1..rows) with a new fare, then
    CHANGED // 2 ids no iteration used before."""
    rng = random.Random(SEED + iteration)
    old = rng.sample(range(1, rows + 1), CHANGED // 2)
    new = range(rows + iteration * CHANGED + 1, rows + iteration * CHANGED + 1 + CHANGED // 2)
    return [(i, "Berlin", round(rng.random() * 100, 2)) for i in [*old, *new]]


class Model:
    """The expected (count, sum(id), sum(id * cents)) of a table after each change, from the
    copied rows' fares in cents indexed by id."""

    def __init__(self, ids: Any, fares: Any, rows: int) -> None:
        import numpy as np

        self._seed = np.zeros(rows + 1, dtype=np.int64)
        self._seed[np.asarray(ids)] = np.round(np.asarray(fares) * 100).astype(np.int64)
        self.reset()

    def reset(self) -> None:
        import numpy as np

        self.cents = self._seed.copy()
        ids = np.arange(len(self.cents), dtype=np.int64)
        self.extra: dict[int, int] = {}  # new ids -> cents
        self.totals = (len(self.cents) - 1, int(ids.sum()), int((ids * self.cents).sum()))

    def apply(self, src: list[tuple[int, str, float]]) -> tuple[int, int, int]:
        count, sum_id, sum_idc = self.totals
        for i, _, fare in src:
            cents = round(fare * 100)
            if i < len(self.cents):
                sum_idc += i * (cents - int(self.cents[i]))
                self.cents[i] = cents
            elif i in self.extra:
                sum_idc += i * (cents - self.extra[i])
                self.extra[i] = cents
            else:
                count, sum_id, sum_idc = count + 1, sum_id + i, sum_idc + i * cents
                self.extra[i] = cents
        self.totals = (count, sum_id, sum_idc)
        return self.totals


class _Pg:
    """icegres or PostgreSQL over psycopg: fresh copies per round, the source refilled by COPY."""

    def __init__(self, conninfo: str, table: str, split: bool, source: str, primary_key: bool,
                 merge_on_read: bool = False) -> None:
        import psycopg

        self.conn = psycopg.connect(conninfo, autocommit=True)
        self.table, self.split, self.source, self.primary_key = f"demo.{table}", split, source, primary_key
        self.merge_on_read = merge_on_read

    def reset(self) -> None:
        self.conn.execute(f"drop table if exists {self.table}")
        self.conn.execute(f"create table {self.table} as select id, city, fare from {self.source}")
        if self.merge_on_read:
            self.conn.execute(f"alter table {self.table} set {MERGE_ON_READ}")
        if self.primary_key:
            self.conn.execute(f"alter table {self.table} add primary key (id)")
            self.conn.execute(f"vacuum analyze {self.table}")

    def load(self, rows: list[tuple[int, str, float]]) -> None:
        self.conn.execute("delete from demo.m_src")
        with self.conn.cursor().copy("copy demo.m_src (id, city, fare) from stdin") as copy:
            for row in rows:
                copy.write_row(row)

    def change(self) -> None:
        names = {"t": self.table, "src": "demo.m_src"}
        if not self.split:
            self.conn.execute(MERGE_SQL.format(**names))
            return
        with self.conn.transaction():
            self.conn.execute(UPDATE_SQL.format(**names))
            self.conn.execute(INSERT_SQL.format(**names))

    def check(self) -> tuple[int, int, int]:
        row = self.conn.execute(CHECK_SQL.format(t=self.table)).fetchone()
        return int(row[0]), int(row[1]), int(row[2])


class _Duck:
    """DuckDB: on an in-memory table (`lake` None), or on an Iceberg table of the REST catalog
    attached as `lake`, copied afresh each round by icegres (`copy`). The source is in memory."""

    def __init__(self, con: Any, table: str, split: bool, reset: Callable[[], None]) -> None:
        self.con, self.table, self.split, self._reset = con, table, split, reset
        self.con.execute("create schema if not exists memory.demo")

    def reset(self) -> None:
        self._reset()

    def load(self, rows: list[tuple[int, str, float]]) -> None:
        import pyarrow as pa

        self.con.register("m_src_rows", pa.table({"id": pa.array([r[0] for r in rows], pa.int64()),
                                                  "city": [r[1] for r in rows],
                                                  "fare": pa.array([r[2] for r in rows], pa.float64())}))
        self.con.execute("create or replace table memory.demo.m_src as select * from m_src_rows")
        self.con.unregister("m_src_rows")

    def change(self) -> None:
        names = {"t": self.table, "src": "memory.demo.m_src"}
        if not self.split:
            self.con.execute(MERGE_SQL.format(**names))
            return
        self.con.execute("begin")
        try:
            self.con.execute(UPDATE_SQL.format(**names))
            self.con.execute(INSERT_SQL.format(**names))
            self.con.execute("commit")
        except BaseException:
            self.con.execute("rollback")
            raise

    def check(self) -> tuple[int, int, int]:
        row = self.con.execute(CHECK_SQL.format(t=self.table)).fetchone()
        return int(row[0]), int(row[1]), int(row[2])


def duck_lake(stack: Any) -> Any:
    """A DuckDB connection with SeaweedFS's REST catalog attached as `lake`: OAuth2 client
    credentials for the catalog (the S3 key pair, as the stack's catalog takes them), an S3
    secret for the files. Extensions from their wheels, offline."""
    from bench.datasets import duck_connect

    con = duck_connect(("avro", "httpfs", "iceberg"))
    host = stack.s3_endpoint.split("://", 1)[1]
    con.execute(f"CREATE SECRET seaweedfs_s3 (TYPE s3, KEY_ID '{stack.s3_access_key}', "
                f"SECRET '{stack.s3_secret_key}', ENDPOINT '{host}', URL_STYLE 'path', USE_SSL false, "
                f"REGION '{stack.s3_region}')")
    con.execute(f"CREATE SECRET seaweedfs_catalog (TYPE iceberg, CLIENT_ID '{stack.s3_access_key}', "
                f"CLIENT_SECRET '{stack.s3_secret_key}', OAUTH2_SERVER_URI '{stack.oauth2_uri}')")
    con.execute(f"ATTACH '{stack.catalog_prefix}' AS lake (TYPE iceberg, SECRET seaweedfs_catalog, "
                f"ENDPOINT '{stack.catalog_uri}')")
    return con


@dataclass
class Commits:
    """Reads what each change committed: the snapshots newer than the last one seen."""

    lakehouse: Any
    seen: dict[str, int]

    def mark(self, table: str) -> None:
        self.seen[table] = self.lakehouse.load_table("demo", table).metadata.last_sequence_number

    def since(self, table: str) -> dict[str, int]:
        meta = self.lakehouse.load_table("demo", table).metadata
        new = [s for s in meta.snapshots if (s.sequence_number or 0) > self.seen.get(table, 0)]
        self.seen[table] = meta.last_sequence_number
        out = {k: sum(int(s.summary.additional_properties.get(k, 0)) for s in new) for k in FILE_KEYS}
        out["snapshots"] = len(new)
        return out


@contextlib.contextmanager
def _backend(name: str) -> Iterator[Any]:
    from bench import datasets
    from bench.peers.sql import embedded_backend
    from bench.pgwire_read import DEFAULT_STACK_DIR, SEAWEEDFS, open_backend

    if name == "embedded":
        yield embedded_backend(datasets.trips(ROWS))
    else:
        with open_backend(SEAWEEDFS, datasets.lake_dir(ROWS), DEFAULT_STACK_DIR) as b:
            yield b


def pg_base(conninfo: str, arrow: Any) -> None:
    """demo.m_base in PostgreSQL: the very (id, city, fare) rows read from the lake's demo.trips
    (by COPY), which every round's copy starts from."""
    import io

    import psycopg
    import pyarrow.csv as pacsv

    buf = io.BytesIO()
    pacsv.write_csv(arrow, buf, pacsv.WriteOptions(include_header=False))
    with psycopg.connect(conninfo, autocommit=True) as conn:
        conn.execute("create schema if not exists demo")
        for t in ("m_base", "m_src"):
            conn.execute(f"drop table if exists demo.{t}")
            conn.execute(f"create table demo.{t} ({COLUMNS})")
        with conn.cursor() as cur, cur.copy("copy demo.m_base from stdin (format csv)") as cp:
            cp.write(buf.getvalue())
        conn.execute("vacuum analyze demo.m_base")


def run(opts: Any) -> list[dict[str, Any]]:
    from bench.peers.postgres import running_cluster, version

    rows = getattr(opts, "rows", None) or ROWS
    if not CHANGED <= rows <= ROWS:
        raise ValueError(f"--rows {rows}: the merge suite takes {CHANGED:,} to {ROWS:,} rows of demo.trips")
    with running_cluster() as cluster:
        pg = (cluster.conninfo, version(cluster.conninfo))
        return [run_backend(name, opts, rows, pg) for name in opts.backends]


def run_backend(name: str, opts: Any, rows: int, pg: tuple[str, str]) -> dict[str, Any]:
    import psycopg

    from bench import datasets
    from bench.pgwire_read import Server

    section = "merge" if name == "embedded" else f"merge_{name}"
    report: dict[str, Any] = {"suite": "merge", "section": section, **provenance(opts.command)}
    rounds = opts.rounds_or(2 if opts.quick else 5)
    per_round = 2 if opts.quick else 4
    peer_names = PEERS[name]
    times: dict[str, list[tuple[int, float]]] = {p: [] for p in peer_names}
    files: dict[str, list[dict[str, int]]] = {p: [] for p in (ICE_MERGE, ICE_MOR_MERGE, ICE_UPD, ICE_MOR_UPD,
                                                              DUCK_ICE_MERGE, DUCK_ICE_UPD) if p in peer_names}
    mismatches: list[str] = []
    errors: dict[str, str] = {}  # peer -> its first error; it sits out the rest of the run
    with contextlib.ExitStack() as stack:
        backend = stack.enter_context(_backend(name))
        server = Server(backend.data_dir, datasets.DATA_DIR / "logs" / f"{section}.log", env=backend.env)
        server.start()
        stack.callback(server.stop)
        server.wait_ready("select 1")
        admin = stack.enter_context(psycopg.connect(server.conninfo, autocommit=True))
        ours = [TABLES[p] for p in peer_names if p not in (DUCK_MEM, PG_MERGE)] + ["m_src"]

        def drop_copies() -> None:  # the cached lake stays as seeded
            for t in ours:
                admin.execute(f"drop table if exists demo.{t}")

        drop_copies()
        stack.callback(drop_copies)
        admin.execute(f"create table demo.m_src ({COLUMNS})")
        lakehouse = backend.lakehouse()
        arrow = (lakehouse.load_table("demo", "trips")
                 .scan(row_filter=f"id <= {rows}", selected_fields=("id", "city", "fare")).to_arrow())
        pg_base(pg[0], arrow)
        model = Model(arrow["id"].to_numpy(), arrow["fare"].to_numpy(), rows)

        def icegres_copy(table: str) -> Callable[[], None]:
            def reset() -> None:
                admin.execute(f"drop table if exists demo.{table}")
                admin.execute(f"create table demo.{table} as select id, city, fare from demo.trips "
                              f"where id <= {rows}")
            return reset

        def memory_copy(con: Any) -> Callable[[], None]:
            def reset() -> None:
                con.register("seed_rows", arrow)
                con.execute("create or replace table memory.demo.m_merge as select * from seed_rows")
                con.unregister("seed_rows")
            return reset

        lake_rows = f"demo.trips where id <= {rows}"
        peers: dict[str, Any] = {
            ICE_MERGE: _Pg(server.conninfo, TABLES[ICE_MERGE], False, lake_rows, primary_key=False),
            ICE_MOR_MERGE: _Pg(server.conninfo, TABLES[ICE_MOR_MERGE], False, lake_rows, primary_key=False,
                               merge_on_read=True),
            ICE_UPD: _Pg(server.conninfo, TABLES[ICE_UPD], True, lake_rows, primary_key=False),
            ICE_MOR_UPD: _Pg(server.conninfo, TABLES[ICE_MOR_UPD], True, lake_rows, primary_key=False,
                             merge_on_read=True),
            PG_MERGE: _Pg(pg[0], TABLES[PG_MERGE], False, "demo.m_base", primary_key=True),
        }
        mem = datasets.duck_connect()
        peers[DUCK_MEM] = _Duck(mem, "memory.demo.m_merge", False, memory_copy(mem))
        if DUCK_ICE_MERGE in peer_names:
            for p, split in ((DUCK_ICE_MERGE, False), (DUCK_ICE_UPD, True)):
                peers[p] = _Duck(duck_lake(backend.stack), f"lake.demo.{TABLES[p]}", split,
                                 icegres_copy(TABLES[p]))
        commits = Commits(lakehouse, {})
        print(f"[{section}] {rows:,} rows, {rounds} rounds x {per_round} changes; peers: "
              f"{', '.join(peer_names)}", flush=True)
        meter = load_meter((backend.stack.weed_pid,) if backend.stack is not None else ())
        iteration = 0
        for rnd in range(-1, rounds):  # round -1 warms every peer up, unmeasured
            t_round = time.perf_counter()
            for p in [p for p in peer_names if p not in errors]:  # fresh copies: same rows each round
                peers[p].reset()
                if p in files:
                    commits.mark(TABLES[p])
            model.reset()
            reset_s = time.perf_counter() - t_round
            for _ in range(per_round):
                src = source_rows(iteration, rows)
                expected = model.apply(src)
                for p in rotation([p for p in peer_names if p not in errors], iteration):
                    peer = peers[p]
                    peer.load(src)
                    try:
                        t0 = time.perf_counter()
                        peer.change()
                        took = time.perf_counter() - t0
                    except Exception as exc:  # e.g. a statement DuckDB's extension refuses: say so
                        errors[p] = f"round {rnd + 1}, iteration {iteration}: {short_error(exc)}"
                        continue
                    got = peer.check()
                    if p in files:
                        changed = commits.since(TABLES[p])
                        if rnd >= 0:
                            files[p].append(changed)
                    if got != expected:
                        mismatches.append(f"{p}, round {rnd + 1}, iteration {iteration}: (count, sum(id), "
                                          f"sum(id * cents)) = {got}, expected {expected}")
                    elif rnd >= 0:
                        times[p].append((rnd, took))
                iteration += 1
            print(f"  round {rnd + 1}/{rounds} (reset {reset_s:.1f} s, round "
                  f"{time.perf_counter() - t_round:.1f} s): " + "  ".join(
                      f"{p} {statistics.median(s for r, s in times[p] if r == rnd) * 1e3:.0f} ms"
                      for p in peer_names if any(r == rnd for r, _ in times[p])), flush=True)
        report["load"] = meter.finish()
    _summarise(report, name, rows, rounds, per_round, pg[1], times, files, mismatches)
    report["errors"] = errors
    write_report(report, opts.write)
    return report


def _median_files(samples: list[dict[str, int]], key: str) -> str:
    return f"{statistics.median(s[key] for s in samples):g}" if samples else "—"


def _summarise(report: dict[str, Any], name: str, rows: int, rounds: int, per_round: int, pg_version: str,
               times: dict[str, list[tuple[int, float]]], files: dict[str, list[dict[str, int]]],
               mismatches: list[str]) -> None:
    peer_names, ref = PEERS[name], REFERENCE[name]
    summary: dict[str, Any] = {"rows": rows}
    for p in peer_names:
        vals = [s for _, s in times[p]]
        summary[f"{p}_p50_ms"] = percentile(vals, 50) * 1e3
        summary[f"{p}_p95_ms"] = percentile(vals, 95) * 1e3
        summary[f"{p}/{ref}"] = round_ratio(times[p], times[ref])
    for p, samples in files.items():
        summary[f"{p}_files"] = {k: statistics.median(s[k] for s in samples) if samples else None
                                 for k in (*FILE_KEYS, "snapshots")}
    merge_ref = summary[f"{ICE_MERGE}/{ref}"]
    mor_ref = summary[f"{ICE_MOR_MERGE}/{ref}"]
    summary["update+insert/merge"] = round_ratio(times[ICE_UPD], times[ICE_MERGE])
    summary["merge/postgres"] = round_ratio(times[ICE_MERGE], times[PG_MERGE])
    columns = ["peer", "p50 ms", "p95 ms", "n", f"/ {ref}", "data files rewritten", "data files added",
               "delete files added", "snapshots"]
    table_rows = [[p, fmt_ms(summary[f"{p}_p50_ms"]), fmt_ms(summary[f"{p}_p95_ms"]), len(times[p]),
                   fmt_x(summary[f"{p}/{ref}"]),
                   *[_median_files(files.get(p, []), k) for k in (*FILE_KEYS, "snapshots")]]
                  for p in peer_names]
    iceberg = name != "embedded"
    target = "; ".join(f"{p} / {ref} = {fmt_x(r)} against the target of 2x: "
                       + ("**met**" if r is not None and r <= 2 else "**not met**")
                       for p, r in ((ICE_MERGE, merge_ref), (ICE_MOR_MERGE, mor_ref)))
    report["title"] = ("merge: MERGE of 1,000 changed rows into 1M rows, and UPDATE … FROM + INSERT"
                       + (", on SeaweedFS (REST + S3) vs DuckDB-iceberg" if iceberg else ""))
    duck = ("DuckDB 1.5.5's iceberg extension on its own copies in the same REST catalog (ATTACH, OAuth2), "
            "made by icegres's CREATE TABLE AS like icegres's, source in memory; "
            if iceberg else "")
    report["facts"] = {
        "Data": f"demo.trips ids 1..{rows:,} (icegres seed), copied per peer as (id, city, fare); each "
                f"iteration {CHANGED:,} source rows, half existing ids with a new fare, half new ids",
        "Backend": ("SeaweedFS (weed mini): Iceberg REST catalog + S3, on loopback" if iceberg else
                    "embedded: SQLite catalog, local disk (DuckDB's iceberg extension writes only through "
                    "a REST catalog, so its peer is in section merge_seaweedfs)"),
        "Peers, same run, rotating order": f"icegres (one `icegres serve`, psycopg; source an Iceberg table "
                                           f"refilled by COPY); {duck}DuckDB 1.5.5 in memory (no Iceberg); "
                                           f"PostgreSQL {pg_version} (heap table, primary key on id)",
        "Rounds": f"{rounds} measured (+1 warm-up) x {per_round} changes per peer, every round on fresh "
                  "copies; ratios are medians of per-round ratios of per-round medians",
        "Correctness": ("after every change every peer's (count, sum(id), sum(id * cents)) equalled the model's"
                        if not mismatches else f"**{len(mismatches)} checks failed** (listed below)"),
        "Target (issue 29)": target,
    }
    notes = ["Files per statement are medians over the measured changes, summed over the snapshots one "
             "change committed, from the snapshot summaries (deleted-data-files, added-data-files, "
             "added-delete-files). icegres writes copy-on-write by default: the data files holding a "
             "matched row are rewritten whole (the copy is one file of all its rows), in one snapshot per "
             "statement or transaction. Its merge-on-read peers' tables have write.merge.mode (and "
             "update, delete) = merge-on-read: one position-delete file for the matched rows and one "
             "data file of their new versions and the inserted rows, in one snapshot (UPDATE … FROM + "
             "INSERT: their two data files, merged into one by the COMMIT's compaction)."]
    if iceberg:
        notes.append("DuckDB-iceberg writes merge-on-read: a position-delete file for the updated rows and "
                     "new data files, no data file rewritten, and MERGE commits two snapshots (overwrite, "
                     "then append). Its delete files pile up over a round's changes (each round starts "
                     "fresh), as icegres's merge-on-read ones do; a reader pays for them later.")
    report["tables"] = [{
        "title": "Latency of one change of 1,000 rows, and the files it changed",
        "columns": columns, "align": "lrrrrrrrr", "rows": table_rows, "notes": notes,
    }]
    report["summary"] = summary
    report["samples_s"] = {p: times[p] for p in peer_names}
    report["files_per_change"] = files
    report["mismatches"] = mismatches
    gate = f"MERGE 1,000 rows: icegres / {'duckdb-iceberg' if iceberg else 'duckdb'}"  # as before
    mor_gate = f"MERGE 1,000 rows merge-on-read: icegres / {'duckdb-iceberg' if iceberg else 'duckdb'}"
    report["gate"] = {gate: merge_ref, mor_gate: mor_ref}
    report["gate_better"] = {gate: "lower", mor_gate: "lower"}
