"""block_inserts: ROWS single-row INSERTs in one transaction block, as drivers and ORMs send them,
icegres vs PostgreSQL 15 (and with --before DIR, another checkout's icegres), same run.

Two clients, each in one BEGIN … COMMIT:
- psycopg's `executemany("insert … values (%s, %s, %s, %s)", rows)` (pipelined Bind/Execute);
- SQLAlchemy 2 Core's `conn.execute(table.insert(), rows)` with its psycopg dialect, which renders
  `VALUES (%(id)s::INTEGER, %(name)s::VARCHAR, %(score)s, %(day)s::DATE)`.
A block's INSERT rows wait in memory until the block reads the table or commits (engine/txn.py
`StagedWrite.pending`), and a parameter cast to its own column's type is the parameter
(engine/insert_shape.py `_uncast`); before both, every INSERT wrote a Parquet file and a cast
planned the statement in DataFusion. Peers alternate first round by round; each peer's table
grows over the run. Figures: seconds per block (BEGIN, the rows, COMMIT) and rows per second.
"""

from __future__ import annotations

import datetime
import shutil
import tempfile
import time
from pathlib import Path
from typing import Any

from bench.harness import (
    load_meter,
    median,
    percentile,
    provenance,
    rotation,
    round_ratio,
    short_error,
    write_report,
)

ICE, BEFORE, POSTGRES = "icegres", "icegres before", "postgres"
CLIENTS = ("psycopg executemany", "SQLAlchemy insert")
CREATE = "create table bench_block (id integer, name text, score double precision, day date)"
INSERT = "insert into bench_block (id, name, score, day) values (%s, %s, %s, %s)"


def _rows(n: int, start: int) -> list[tuple[Any, ...]]:
    return [(i, f"name {i:08d}", i * 0.5, datetime.date(2024, 1, 1) + datetime.timedelta(days=i % 365))
            for i in range(start, start + n)]


def _block(client: str, conninfo: str, rows: list[tuple[Any, ...]], engines: dict[str, Any]) -> float:
    import psycopg

    if client == CLIENTS[0]:
        with psycopg.connect(conninfo) as conn:
            t0 = time.perf_counter()
            with conn.cursor() as cur:
                cur.executemany(INSERT, rows)
            conn.commit()
            return time.perf_counter() - t0
    import sqlalchemy as sa

    engine = engines.get(conninfo)
    if engine is None:
        engine = engines[conninfo] = sa.create_engine("postgresql+psycopg://", creator=lambda: psycopg.connect(conninfo))
    table = sa.Table("bench_block", sa.MetaData(), sa.Column("id", sa.Integer), sa.Column("name", sa.String),
                     sa.Column("score", sa.Float), sa.Column("day", sa.Date))
    params = [dict(id=r[0], name=r[1], score=r[2], day=r[3]) for r in rows]
    with engine.connect() as conn:
        t0 = time.perf_counter()
        with conn.begin():
            conn.execute(table.insert(), params)
        return time.perf_counter() - t0



def _ready(conninfo: str, deadline_s: float = 120) -> None:
    import psycopg

    deadline = time.monotonic() + deadline_s
    while True:
        try:
            with psycopg.connect(conninfo, autocommit=True) as conn:
                conn.execute("select 1")
            return
        except psycopg.OperationalError:
            if time.monotonic() > deadline:
                raise
            time.sleep(0.2)


def run(opts: Any) -> list[dict[str, Any]]:
    import psycopg

    from bench.peers.postgres import running_cluster, version
    from bench.pgwire_read import Server, git_commit

    report: dict[str, Any] = {"suite": "block_inserts", "section": "block_inserts", **provenance(opts.command)}
    rounds = opts.rounds_or(2 if opts.quick else 5)
    size = 500 if opts.quick else 2_000
    peers = (ICE, POSTGRES, BEFORE) if opts.before else (ICE, POSTGRES)
    samples: dict[str, dict[str, list[tuple[int, float]]]] = {p: {c: [] for c in CLIENTS} for p in peers}
    errors: dict[str, str] = {}
    counts: dict[str, Any] = {}
    work = Path(tempfile.mkdtemp(prefix="icegres-bench-block-"))
    servers = {ICE: Server(work / "lake", work / "ice" / "server.log")}
    if opts.before:
        servers[BEFORE] = Server(work / "lake-before", work / "before" / "server.log", checkout=Path(opts.before))
    engines: dict[str, Any] = {}
    try:
        for server in servers.values():
            server.start()
        with running_cluster() as cluster:
            conninfo = {p: s.conninfo for p, s in servers.items()} | {POSTGRES: cluster.conninfo}
            for peer in peers:
                _ready(conninfo[peer])
                with psycopg.connect(conninfo[peer], autocommit=True) as conn:
                    conn.execute(CREATE)
            pg_version = version(cluster.conninfo)
            for client in CLIENTS:  # warm: the first block pays imports and caches
                for peer in peers:
                    _block(client, conninfo[peer], _rows(20, 0), engines)
            meter = load_meter()
            start = 1_000
            for rnd in range(rounds):
                for client in CLIENTS:
                    rows = _rows(size, start)
                    start += size
                    for peer in rotation(peers, rnd):
                        try:
                            samples[peer][client].append((rnd, _block(client, conninfo[peer], rows, engines)))
                        except Exception as exc:
                            errors[f"{peer}/{client}/{rnd}"] = short_error(exc)
                print(f"  round {rnd + 1}/{rounds}: " + ", ".join(
                    f"{p} {c} {samples[p][c][-1][1]:.2f} s" for c in CLIENTS for p in peers if samples[p][c]),
                    flush=True)
            report["load"] = meter.finish()
            for peer in peers:
                with psycopg.connect(conninfo[peer], autocommit=True) as conn:
                    counts[peer] = conn.execute("select count(*), sum(id) from bench_block").fetchone()
            for engine in engines.values():
                engine.dispose()
    finally:
        for server in servers.values():
            server.stop()
        shutil.rmtree(work, ignore_errors=True)

    mismatches = [f"count, sum(id): {p} {counts.get(p)}, postgres {counts.get(POSTGRES)}"
                  for p in peers if counts.get(p) != counts.get(POSTGRES)]
    rows_out, gate = [], {}
    for client in CLIENTS:
        ratio = round_ratio(samples[ICE][client], samples[POSTGRES][client])
        for peer in peers:
            values = [v for _, v in samples[peer][client]]
            if not values:
                continue
            mine = round_ratio(samples[peer][client], samples[POSTGRES][client])
            rows_out.append([client if peer == ICE else "", peer, f"{median(values):.3f}",
                             f"{percentile(values, 95):.3f}", f"{size / median(values):,.0f}",
                             f"{mine:.1f}x" if mine else ""])
        if ratio:
            gate[f"block inserts {client}: icegres/postgres"] = ratio
    before = (f"; `icegres before` = the checkout {opts.before} (commit {git_commit(Path(opts.before))})"
              if opts.before else "")
    report.update(
        title="block_inserts: single-row INSERTs in one block, icegres vs PostgreSQL",
        facts={
            "Clients": "psycopg executemany of `insert … values (%s, %s, %s, %s)`; SQLAlchemy 2 Core "
                       "`conn.execute(table.insert(), rows)` (psycopg dialect: `%(id)s::INTEGER, …`)",
            "Block": f"BEGIN, {size:,} rows, COMMIT, one connection per block",
            "Peers": f"`icegres serve` on an embedded lake and PostgreSQL {pg_version}{before}",
            "Rounds": f"{rounds}, peers alternating first; ratio: median of per-round peer/PostgreSQL",
        },
        tables=[{"title": "Seconds per block", "columns": ["client", "server", "p50 s", "p95 s", "rows/s", "vs pg"],
                 "rows": rows_out, "align": "llrrrr",
                 "notes": ["Each INSERT is a round trip through the server's event loop and a worker "
                           "thread (~1 ms here); PostgreSQL's is a heap insert. The rows reach one Parquet "
                           "file at COMMIT."]}],
        samples=samples, errors=errors, mismatches=mismatches, gate=gate,
    )
    write_report(report, opts.write)
    return [report]
