"""Start-up: process spawn to the first answered query, and memory, icegres vs PostgreSQL.

icegres: `icegres serve` on the embedded 1M-row lake, polled every 5 ms with psycopg until
`select 1` answers, then the first point lookup (footer reads, first DataFusion plan); peak RSS is
the kernel's VmHWM of the server over its life. PostgreSQL 15: `postgres` on an initdb'd cluster
already holding demo.trips (so both start on existing data), polled the same way; its memory is
the summed RSS of the postmaster and its children right after the first lookup (shared buffers
count once per process that touched them, so this overstates PostgreSQL a little). Starts
alternate icegres / PostgreSQL, round by round.
"""

from __future__ import annotations

import contextlib
import time
from typing import Any

from bench import datasets
from bench.harness import (
    PLOTS_DIR,
    latency_bars,
    load_meter,
    median,
    provenance,
    rotation,
    round_ratio,
    short_error,
    write_report,
)

ICE, POSTGRES = "icegres", "postgres"
POINT = "select * from demo.trips where id = 1"


def _poll(conninfo: str, started: float, timeout_s: float = 60) -> tuple[float, float]:
    import psycopg

    while True:
        try:
            with psycopg.connect(conninfo, autocommit=True, connect_timeout=5) as c:
                c.execute("select 1").fetchall()
                t1 = time.perf_counter() - started
                c.execute(POINT).fetchall()
                return t1, time.perf_counter() - started
        except psycopg.OperationalError:
            if time.perf_counter() - started > timeout_s:
                raise
            time.sleep(0.005)


def _tree_rss(pid: int) -> int:
    import psutil

    p = psutil.Process(pid)
    total = 0
    for q in [p, *p.children(recursive=True)]:
        with contextlib.suppress(psutil.Error):
            total += q.memory_info().rss
    return total


def run(opts: Any) -> list[dict[str, Any]]:
    from bench.peers.postgres import load_trips, running_cluster, version
    from bench.pgwire_read import Server

    report: dict[str, Any] = {"suite": "startup", "section": "startup", **provenance(opts.command)}
    rounds = opts.rounds_or(3 if opts.quick else 7)
    lake = datasets.trips(1_000_000)
    samples: dict[str, dict[str, list[tuple[int, float]]]] = {ICE: {}, POSTGRES: {}}
    errors: dict[str, str] = {}
    with running_cluster() as cluster:
        load_trips(cluster.conninfo, 1_000_000)
        pg_version = version(cluster.conninfo)
        cluster.stop()
        meter = load_meter()
        for rnd in range(rounds):
            for peer in rotation((ICE, POSTGRES), rnd):
                try:
                    if peer == ICE:
                        s = Server(lake, datasets.DATA_DIR / "logs" / f"startup-{rnd}.log")
                        s.start()
                        try:
                            s.wait_ready(POINT)
                            first1, first_q = s.ready_select1_s, s.ready_demo_s
                        finally:
                            s.stop()
                        rss = s.rss_peak
                    else:
                        t0 = cluster.start()
                        try:
                            first1, first_q = _poll(cluster.conninfo, t0)
                            assert cluster.proc is not None
                            rss = _tree_rss(cluster.proc.pid)
                        finally:
                            cluster.stop()
                except Exception as exc:
                    errors[f"{peer}/{rnd}"] = short_error(exc)
                    continue
                for k, v in (("select1", first1), ("point", first_q), ("rss", rss / 2**20)):
                    samples[peer].setdefault(k, []).append((rnd, v))
            print(f"  round {rnd + 1}/{rounds}: " + ", ".join(
                f"{p} {samples[p].get('point', [(0, float('nan'))])[-1][1]:.2f}s" for p in samples),
                flush=True)
        report["load"] = meter.finish()

    def med(p: str, k: str) -> float:
        return median(v for _, v in samples[p].get(k, []))

    rows = []
    for p in (ICE, POSTGRES):
        rows.append([p, f"{med(p, 'select1'):.2f}", f"{med(p, 'point'):.2f}",
                     f"{med(p, 'rss'):.0f}", len(samples[p].get("point", []))])
    ratio = round_ratio(samples[ICE].get("point", []), samples[POSTGRES].get("point", []))
    ice_s = med(ICE, "point")
    report.update(
        title="start-up: process start to first answered query, and memory (icegres vs PostgreSQL)",
        facts={
            "Data": "the embedded 1M-row lake (`icegres seed`); PostgreSQL "
                    f"{pg_version} with the same demo.trips (primary key), both on existing data",
            "Rounds": f"{rounds}, peers alternating first; figures are medians",
            "Target": f"process start to first answered query < 2 s: {ice_s:.2f} s -> "
                      f"**{'pass' if ice_s < 2 else 'miss'}**; icegres / PostgreSQL (median of "
                      f"per-round ratios, first point lookup): {ratio or float('nan'):.1f}x",
        },
        tables=[{"title": "Start-up", "columns": [
            "server", "to first `select 1` s", "to first point lookup s", "memory MB", "n"],
            "rows": rows, "align": "lrrrr",
            "notes": ["memory: icegres = peak RSS (VmHWM) of the server over its life; PostgreSQL = "
                      "RSS summed over the postmaster and its children after the first lookup."]}],
        samples=samples, errors=errors, mismatches=[],
        gate={"first point lookup: icegres/postgres": ratio} if ratio else {},
    )
    summary = {"start": {"peers": {p: {"p50_ms": med(p, "point") * 1e3, "p95_ms": med(p, "point") * 1e3}
                                   for p in (ICE, POSTGRES)}}}
    if opts.write:
        report["plots"] = [latency_bars(summary, {"start": "spawn -> first point lookup"},
                                        (ICE, POSTGRES), PLOTS_DIR / "startup.png", "start-up")]
    write_report(report, opts.write)
    return [report]
