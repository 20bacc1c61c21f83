"""values_insert: one `INSERT INTO t VALUES (…), (…), …` of constants, as pg_dump --inserts,
psql scripts and ORMs' bulk inserts without parameters send it, icegres vs PostgreSQL 15, same run.

Each statement carries ROWS_PER_STATEMENT rows of four columns (int, text, double precision,
boolean), written as literals. icegres reads such a list with its lexer, never building a tree
(sql/values_rows.py), and builds the rows straight into Arrow when every constant means one thing
for its column (engine/insert_shape.py); PostgreSQL parses and inserts into a heap table. Both in autocommit, one psycopg connection each,
peers alternating first round by round; each peer's table grows over the run (an append either
way). Figures: seconds per statement and rows per second.
"""

from __future__ import annotations

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

ICE, POSTGRES = "icegres", "postgres"
# (label, rows, what follows the rows): RETURNING id is Django's bulk_create on PostgreSQL
KINDS = (("1,000 rows", 1_000, ""), ("10,000 rows", 10_000, ""),
         ("10,000 rows RETURNING id", 10_000, " returning id"))
CREATE = "create table bench_values (id int, name text, price double precision, ok boolean)"


def statement(rows: int, start: int, tail: str = "") -> str:
    return "insert into bench_values values " + ", ".join(
        f"({i}, 'name {i:08d}', {i}.5, {'true' if i % 2 else 'false'})" for i in range(start, start + rows)) + tail


def _timed(conn: Any, sql: str) -> float:
    t0 = time.perf_counter()
    cur = conn.execute(sql)
    if cur.description is not None:
        cur.fetchall()
    return time.perf_counter() - t0


def run(opts: Any) -> list[dict[str, Any]]:
    import psycopg

    from bench.peers.postgres import running_cluster, version
    from tests.support.icegres_server import start_icegres, stop

    report: dict[str, Any] = {"suite": "values_insert", "section": "values_insert", **provenance(opts.command)}
    rounds = opts.rounds_or(2 if opts.quick else 6)
    samples: dict[str, dict[str, list[tuple[int, float]]]] = {p: {k[0]: [] for k in KINDS} for p in (ICE, POSTGRES)}
    errors: dict[str, str] = {}
    work = Path(tempfile.mkdtemp(prefix="icegres-bench-values-"))
    try:
        started = start_icegres(["serve", "--data-dir", str(work / "lake"), "--host", "127.0.0.1", "--port", "0"],
                                log_dir=work)
        try:
            with running_cluster() as cluster, \
                    psycopg.connect(f"host=127.0.0.1 port={started.ports['port']} dbname=icegres user=icegres",
                                    autocommit=True) as ice, \
                    psycopg.connect(cluster.conninfo, autocommit=True) as pg:
                pg_version = version(cluster.conninfo)
                conns = {ICE: ice, POSTGRES: pg}
                for c in conns.values():
                    c.execute(CREATE)
                    c.execute(statement(100, 0))  # warm: the first statement pays imports and caches
                meter = load_meter()
                start = 1_000
                for rnd in range(rounds):
                    for label, n, tail in KINDS:
                        sql = statement(n, start, tail)
                        start += n
                        for peer in rotation((ICE, POSTGRES), rnd):
                            try:
                                samples[peer][label].append((rnd, _timed(conns[peer], sql)))
                            except Exception as exc:
                                errors[f"{peer}/{label}/{rnd}"] = short_error(exc)
                    print(f"  round {rnd + 1}/{rounds}: " + ", ".join(
                        f"{p} {label} {samples[p][label][-1][1]:.2f} s" for label, _, _ in KINDS
                        for p in (ICE, POSTGRES) if samples[p][label]), flush=True)
                report["load"] = meter.finish()
                counts = {p: c.execute("select count(*), sum(id) from bench_values").fetchone() for p, c in conns.items()}
        finally:
            stop(started.proc)
    finally:
        shutil.rmtree(work, ignore_errors=True)

    mismatches = [] if counts[ICE] == counts[POSTGRES] else [f"count, sum(id): icegres {counts[ICE]}, "
                                                              f"postgres {counts[POSTGRES]}"]
    rows, gate = [], {}
    for label, n, _ in KINDS:
        ratio = round_ratio(samples[ICE][label], samples[POSTGRES][label])
        for peer in (ICE, POSTGRES):
            values = [v for _, v in samples[peer][label]]
            rows.append([label if peer == ICE else "", peer, f"{median(values):.3f}",
                         f"{percentile(values, 95):.3f}", f"{n / median(values):,.0f}",
                         f"{ratio:.1f}x" if peer == ICE and ratio else ""])
        if ratio:
            gate[f"values insert {label.replace(',', '')}: icegres/postgres"] = ratio
    report.update(
        title="values_insert: one INSERT … VALUES of constants, icegres vs PostgreSQL",
        facts={
            "Statement": "insert into bench_values values (i, 'name i', i.5, true|false), … "
                         f"({', '.join(label for label, _, _ in KINDS)})",
            "Peers": f"`icegres serve` on an embedded lake and PostgreSQL {pg_version}, psycopg, autocommit",
            "Rounds": f"{rounds}, peers alternating first; ratio: median of per-round icegres/PostgreSQL",
        },
        tables=[{"title": "Seconds per statement", "columns": ["statement", "server", "p50 s", "p95 s", "rows/s",
                                                                "icegres / pg"],
                 "rows": rows, "align": "llrrrr",
                 "notes": ["icegres reads the list with its lexer in Python (sql/values_rows.py, ~8 us a row of "
                           "four constants, no tree) and builds the rows straight into Arrow; the rest is the "
                           "Iceberg commit. Before the lexer read it (commit 683d852), sqlglot's tree made "
                           "100,000 rows take 13 s (docs/limitations.md, 'A big VALUES list'). With RETURNING "
                           "or ON CONFLICT after the rows the whole list was sqlglot's until the lexer took "
                           "such a tail too (20,000 rows with RETURNING id: 1.5 s, now 0.23 s)."]}],
        samples=samples, errors=errors, mismatches=mismatches, gate=gate,
    )
    write_report(report, opts.write)
    return [report]
