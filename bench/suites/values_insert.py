"""values_insert: one `INSERT INTO t VALUES (…), (…), …` of constants, as pg_dump --inserts,
psql scripts and ORMs' bulk inserts without parameters send it, icegres vs PostgreSQL 15 (and with
--before DIR, another checkout's icegres), same run.

Plain statements carry rows of four columns (int, text, double precision, boolean), written as
literals: icegres reads such a list with its lexer, never building a tree (sql/values_rows.py),
and builds the rows straight into Arrow when every constant means one thing for its column
(engine/insert_shape.py). The typed statement is what that recipe does not take: a table with a
CHECK and a DEFAULT, rows with a cast to varchar(20), a number numeric(10,2) rounds, now() and
DEFAULT in every row; icegres makes each column a typed Arrow column (engine/dml/constant_rows.py;
before, it parsed the whole text and planned a VALUES of every row). The expressions statement's
rows compute an item each (`'name ' || i`, `md5('row i')`), as scripts write them; icegres
evaluates each column's one expression over a column of the constants that differ
(sql/values_template.py; before, it parsed the whole text). PostgreSQL parses and
inserts into a heap table. All in autocommit, one psycopg connection each, peers alternating
first round by round; each peer's tables grow over the run (an append either way). Figures:
seconds per statement and rows per second.
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

ICE, BEFORE, POSTGRES = "icegres", "icegres before", "postgres"
TYPED = "10,000 rows typed: CHECK, DEFAULT, ::varchar(20), numeric rounding, now()"
EXPR = "10,000 rows of expressions differing in a constant: 'name ' || i, md5('row i')"
# (label, rows, what follows the rows): RETURNING id is Django's bulk_create on PostgreSQL
KINDS = (("1,000 rows", 1_000, ""), ("10,000 rows", 10_000, ""),
         ("10,000 rows RETURNING id", 10_000, " returning id"), (TYPED, 10_000, ""), (EXPR, 10_000, ""))
CREATES = ("create table bench_values (id int, name text, price double precision, ok boolean)",
           "create table bench_typed (id int check (id >= 0), name varchar(20), price numeric(10,2), "
           "seen timestamptz, note text default 'none')",
           "create table bench_expr (id int, name text, digest text)")


def statement(rows: int, start: int, tail: str = "", label: str = "") -> str:
    if label == TYPED:
        return "insert into bench_typed values " + ", ".join(
            f"({i}, 'name {i:08d}'::varchar(20), {i}.125, now(), DEFAULT)" for i in range(start, start + rows)) + tail
    if label == EXPR:
        return "insert into bench_expr values " + ", ".join(
            f"({i}, 'name ' || {i}, md5('row {i}'))" for i in range(start, start + rows)) + tail
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
    from bench.pgwire_read import Server, git_commit

    report: dict[str, Any] = {"suite": "values_insert", "section": "values_insert", **provenance(opts.command)}
    rounds = opts.rounds_or(2 if opts.quick else 6)
    peers = (ICE, POSTGRES, BEFORE) if opts.before else (ICE, POSTGRES)
    samples: dict[str, dict[str, list[tuple[int, float]]]] = {p: {k[0]: [] for k in KINDS} for p in peers}
    errors: dict[str, str] = {}
    counts: dict[str, Any] = {}
    work = Path(tempfile.mkdtemp(prefix="icegres-bench-values-"))
    servers = {ICE: Server(work / "lake", work / "ice" / "server.log")}
    if opts.before:
        servers[BEFORE] = Server(work / "lake-before", work / "before" / "server.log", checkout=Path(opts.before))
    try:
        for server in servers.values():
            server.start()
            server.wait_ready("select 1")
        with running_cluster() as cluster:
            conns = {p: psycopg.connect(s.conninfo, autocommit=True) for p, s in servers.items()}
            conns[POSTGRES] = psycopg.connect(cluster.conninfo, autocommit=True)
            try:
                pg_version = version(cluster.conninfo)
                for c in conns.values():
                    for create in CREATES:
                        c.execute(create)
                    for label, _, _ in KINDS:  # warm: the first statements pay imports and caches
                        c.execute(statement(100, 0, label=label))
                meter = load_meter()
                start = 1_000
                for rnd in range(rounds):
                    for label, n, tail in KINDS:
                        sql = statement(n, start, tail, label)
                        start += n
                        for peer in rotation(peers, rnd):
                            try:
                                samples[peer][label].append((rnd, _timed(conns[peer], sql)))
                            except Exception as exc:
                                errors[f"{peer}/{label}/{rnd}"] = short_error(exc)
                    print(f"  round {rnd + 1}/{rounds}: " + ", ".join(
                        f"{p} {label} {samples[p][label][-1][1]:.2f} s" for label, _, _ in KINDS
                        for p in peers if samples[p][label]), flush=True)
                report["load"] = meter.finish()
                for p, c in conns.items():
                    counts[p] = (c.execute("select count(*), sum(id) from bench_values").fetchone(),
                                 c.execute("select count(*), sum(id), sum(price), count(*) filter (where note = 'none') "
                                           "from bench_typed").fetchone(),
                                 c.execute("select count(*), sum(id), count(*) filter (where name = 'name ' || id "
                                           "and digest = md5('row ' || id)) from bench_expr").fetchone())
            finally:
                for c in conns.values():
                    c.close()
    finally:
        for server in servers.values():
            server.stop()
        shutil.rmtree(work, ignore_errors=True)

    mismatches = [f"(count, sum(id)) of each table: {p} {counts.get(p)}, postgres {counts.get(POSTGRES)}"
                  for p in peers if counts.get(p) != counts.get(POSTGRES)]
    rows, gate = [], {}
    for label, n, _ in KINDS:
        ratio = round_ratio(samples[ICE][label], samples[POSTGRES][label])
        for peer in peers:
            values = [v for _, v in samples[peer][label]]
            if not values:
                continue
            mine = round_ratio(samples[peer][label], samples[POSTGRES][label])
            rows.append([label if peer == ICE else "", peer, f"{median(values):.3f}",
                         f"{percentile(values, 95):.3f}", f"{n / median(values):,.0f}",
                         f"{mine:.1f}x" if peer != POSTGRES and mine else ""])
        if ratio and label not in (TYPED, EXPR):
            gate[f"values insert {label.replace(',', '')}: icegres/postgres"] = ratio
    report.update(
        title="values_insert: one INSERT … VALUES of constants, icegres vs PostgreSQL",
        facts={
            "Statement": "insert into bench_values values (i, 'name i', i.5, true|false), … "
                         f"({', '.join(label for label, _, _ in KINDS[:3])}); typed: insert into bench_typed "
                         "values (i, 'name i'::varchar(20), i.125, now(), DEFAULT), … into (id int check (id >= 0), "
                         "name varchar(20), price numeric(10,2), seen timestamptz, note text default 'none'); "
                         "expressions: insert into bench_expr values (i, 'name ' || i, md5('row i')), …",
            "Peers": f"`icegres serve` on an embedded lake and PostgreSQL {pg_version}, psycopg, autocommit"
                     + (f"; `icegres before` = the checkout {opts.before} (commit {git_commit(Path(opts.before))})"
                        if opts.before else ""),
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
                           "such a tail too (20,000 rows with RETURNING id: 1.5 s, now 0.23 s). The typed "
                           "statement's columns are made typed Arrow columns (engine/dml/constant_rows.py): "
                           "the cast and now() computed by DataFusion over a column, the numbers as an exact "
                           "decimal, DEFAULT filled, the CHECK evaluated. The expressions' rows differ in a "
                           "constant only: each column is one expression evaluated over a column of the "
                           "constants that differ (sql/values_template.py). `icegres before`, where given, "
                           "shows what its checkout does (commit 9f155af parsed the expressions' whole text)."]}],
        samples=samples, errors=errors, mismatches=mismatches, gate=gate,
    )
    write_report(report, opts.write)
    return [report]
