"""Concurrency: queries per second and latency at 1, 4, 16 and 64 connections, icegres vs PostgreSQL.

Each connection is a thread with its own psycopg connection (opened before timing) that runs the
query back to back for a fixed window; qps = answered queries / window. Within a round, every
(query, connections) cell runs icegres then PostgreSQL, or the other way round (alternating), so
the two see the same machine. The client threads share this process's GIL on both sides alike.
"""

from __future__ import annotations

import contextlib
import random
import threading
import time
from typing import Any

from bench import datasets
from bench.harness import (
    PLOTS_DIR,
    fmt_ms,
    fmt_x,
    line_plot,
    load_meter,
    median,
    percentile,
    provenance,
    rotation,
    round_ratio,
    short_error,
    write_report,
)

LEVELS = (1, 4, 16, 64)
ROWS = 1_000_000
ICE, POSTGRES = "icegres", "postgres"
QUERIES = {
    "point": ("point lookup", "select * from demo.trips where id = {id}"),
    "filter": ("selective filter", "select count(*), avg(fare) from demo.trips where id between "
               "{lo} and {hi} and passengers = 2"),
}


def _params(rng: random.Random) -> dict[str, int]:
    lo = rng.randint(1, ROWS - 5000)
    return {"id": rng.randint(1, ROWS), "lo": lo, "hi": lo + 5000}


def drive(conns: list[Any], n: int, sql: str, window_s: float, seed: int) -> tuple[list[float], int]:
    """n threads, one connection each, looping `sql` for window_s; (latencies s, errors)."""
    lat: list[list[float]] = [[] for _ in range(n)]
    errors = [0] * n
    start = threading.Barrier(n + 1)
    stop_at = [0.0]

    def worker(i: int) -> None:
        rng = random.Random(seed * 1000 + i)
        start.wait()
        while True:
            t0 = time.perf_counter()
            if t0 >= stop_at[0]:
                return
            try:
                conns[i].execute(sql.format(**_params(rng))).fetchall()
                lat[i].append(time.perf_counter() - t0)
            except Exception:
                errors[i] += 1

    threads = [threading.Thread(target=worker, args=(i,), daemon=True) for i in range(n)]
    for t in threads:
        t.start()
    stop_at[0] = time.perf_counter() + window_s
    start.wait()
    for t in threads:
        t.join()
    return [x for xs in lat for x in xs], sum(errors)


def run(opts: Any) -> list[dict[str, Any]]:
    import psycopg

    from bench.peers.postgres import load_trips, running_cluster, version
    from bench.pgwire_read import Server

    report: dict[str, Any] = {"suite": "concurrency", "section": "concurrency",
                              **provenance(opts.command)}
    rounds = opts.rounds_or(2 if opts.quick else 5)
    window_s = 1.0 if opts.quick else 3.0
    lake = datasets.trips(ROWS)
    # cell -> peer -> [(round, qps)], and all latencies
    qps: dict[tuple[str, int], dict[str, list[tuple[int, float]]]] = {}
    lats: dict[tuple[str, int, str], list[float]] = {}
    errors: dict[str, str] = {}
    with contextlib.ExitStack() as stack:
        server = Server(lake, datasets.DATA_DIR / "logs" / "concurrency.log")
        server.start()
        stack.callback(server.stop)
        server.wait_ready("select 1")
        cluster = stack.enter_context(running_cluster())
        load_trips(cluster.conninfo, ROWS)
        pg_version = version(cluster.conninfo)
        conns = {}
        for peer, info in ((ICE, server.conninfo), (POSTGRES, cluster.conninfo)):
            conns[peer] = [psycopg.connect(info, autocommit=True) for _ in range(max(LEVELS))]
            for c in conns[peer]:
                stack.callback(c.close)
                c.execute(QUERIES["point"][1].format(id=1)).fetchall()  # warm every session
        print(f"[concurrency] {rounds} rounds x {len(QUERIES)} queries x levels {LEVELS} x 2 peers, "
              f"{window_s:.0f} s each", flush=True)
        meter = load_meter()
        cell = 0
        for rnd in range(rounds):
            for q, (_, sql) in QUERIES.items():
                for n in LEVELS:
                    for peer in rotation((ICE, POSTGRES), cell):
                        try:
                            got, errs = drive(conns[peer], n, sql, window_s, rnd * 100 + n)
                        except Exception as exc:
                            errors[f"{peer}/{q}/{n}"] = short_error(exc)
                            continue
                        if errs:
                            errors.setdefault(f"{peer}/{q}/{n}", f"{errs} failed queries")
                        qps.setdefault((q, n), {}).setdefault(peer, []).append((rnd, len(got) / window_s))
                        lats.setdefault((q, n, peer), []).extend(got)
                    cell += 1
            print(f"  round {rnd + 1}/{rounds}: " + "  ".join(
                f"{q}x{n} {median(v for r, v in qps.get((q, n), {}).get(ICE, []) if r == rnd):.0f}qps"
                for q in QUERIES for n in LEVELS), flush=True)
        report["load"] = meter.finish()

    rows, summary, gate, series = [], {}, {}, {}
    for q, (label, _) in QUERIES.items():
        base = {p: median(v for _, v in qps.get((q, 1), {}).get(p, [])) for p in (ICE, POSTGRES)}
        for n in LEVELS:
            ratio = round_ratio(qps.get((q, n), {}).get(ICE, []), qps.get((q, n), {}).get(POSTGRES, []))
            for peer in (ICE, POSTGRES):
                per = [v for _, v in qps.get((q, n), {}).get(peer, [])]
                lat = lats.get((q, n, peer), [])
                m = median(per)
                summary[f"{q}/{n}/{peer}"] = {"qps": m, "p50_ms": percentile(lat, 50) * 1e3,
                                              "p95_ms": percentile(lat, 95) * 1e3, "n": len(lat)}
                series.setdefault(f"{peer} {q}", []).append((n, m))
                rows.append([label if (n == 1 and peer == ICE) else "", n if peer == ICE else "", peer,
                             f"{m:,.0f}", fmt_ms(percentile(lat, 50) * 1e3),
                             fmt_ms(percentile(lat, 95) * 1e3), len(lat),
                             fmt_x(m / base[peer]) if base[peer] else "—",
                             fmt_x(ratio) if peer == ICE else ""])
            if ratio is not None:
                gate[f"{q} x{n}: icegres qps/postgres qps"] = ratio
        if base[ICE]:
            scale16 = summary[f"{q}/16/{ICE}"]["qps"] / base[ICE]
            gate[f"{q}: icegres qps x16/x1"] = scale16
    target = summary.get(f"point/16/{ICE}", {}).get("qps", 0) / max(
        summary.get(f"point/1/{ICE}", {}).get("qps", 0), 1e-9)
    report.update(
        title="concurrency: qps and latency at 1/4/16/64 connections, icegres vs PostgreSQL",
        facts={
            "Peers": f"icegres = `icegres serve` (embedded lake, default `--query-threads`); "
                     f"postgres = PostgreSQL {pg_version}, demo.trips with primary key, warmed. "
                     "Clients: psycopg 3 autocommit, one thread + connection per client, in this process",
            "Method": f"{rounds} rounds; each cell runs {window_s:.0f} s per peer, peers alternating "
                      "first; qps = median over rounds; p50/p95 over every query of the cell; "
                      "icegres/postgres = median of per-round qps ratios",
            "Target (issue 5)": f"point-lookup qps at 16 connections >= 4x single-connection qps: "
                                f"{target:.2f}x -> **{'pass' if target >= 4 else 'miss'}** (2 cores "
                                "here: the ceiling is the machine, see PostgreSQL's own scaling)",
        },
        tables=[{"title": "Throughput and latency", "columns": [
            "query", "connections", "peer", "qps", "p50 ms", "p95 ms", "n", "qps / 1-conn qps",
            "icegres / PostgreSQL qps"], "rows": rows, "align": "llrrrrrrr"}],
        summary=summary, gate=gate, gate_better={k: "higher" for k in gate}, errors=errors,
        mismatches=[],
    )
    if opts.write:
        report["plots"] = [line_plot(series, PLOTS_DIR / "concurrency.png",
                                     "qps by connections (same run)", "connections", "queries/s")]
    write_report(report, opts.write)
    return [report]
