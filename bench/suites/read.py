"""Read latency: icegres over pgwire and over Flight SQL vs. its engine in-process vs. DuckDB +
iceberg vs. PostgreSQL.

Queries: point lookup, selective filter, top-k, group-by, join on demo.trips (1M) / demo.cities,
and TPC-H SF1 Q1, Q3, Q5, Q6, Q10 (DuckDB's query texts) on the tpch schema. The same icegres
process answers both protocols: psycopg 3 over pgwire, the ADBC Flight SQL driver (`execute` +
`fetch_arrow_table`) over Flight. PostgreSQL 15 holds demo.trips with a primary key (the OLTP
floor) and answers the trips queries only. Every peer's answer is checked against DuckDB's in the
first warm-up round; a wrong answer's time is dropped.
"""

from __future__ import annotations

import contextlib
import random
from typing import Any

from bench import datasets
from bench.harness import (
    PLOTS_DIR,
    Query,
    latency_bars,
    latency_table,
    load_meter,
    provenance,
    run_interleaved,
    summarise,
    write_report,
)

PG, FLIGHT, INPROC, DUCK, POSTGRES = "pgwire", "flight", "in-process", "duckdb", "postgres"
PEERS = (PG, FLIGHT, INPROC, DUCK, POSTGRES)
TRIPS_ROWS = 1_000_000
SEED = 20261203


def _ids(rng: random.Random) -> dict[str, int]:
    lo = rng.randint(1, TRIPS_ROWS - 5000)
    return {"id": rng.randint(1, TRIPS_ROWS), "lo": lo, "hi": lo + 5000,
            "p": rng.randint(1, 6)}


def queries() -> list[Query]:
    tpch = datasets.tpch_queries()
    trips = [
        Query("point", "point lookup", "select * from demo.trips where id = {id}", 20, 8, _ids),
        Query("filter", "selective filter", "select count(*), avg(fare) from demo.trips where id "
              "between {lo} and {hi} and passengers = 2", 10, 5, _ids),
        Query("topk", "top-k", "select id, city, fare from demo.trips where passengers = {p} "
              "order by fare desc, id limit 10", 5, 2, _ids),
        Query("groupby", "group-by", "select city, count(*), avg(fare), sum(distance) from "
              "demo.trips group by city", 3, 2),
        Query("join", "join", "select c.country, count(*), avg(t.fare) from demo.trips t join "
              "demo.cities c on t.city = c.city group by c.country", 3, 2),
    ]
    iters = {1: (2, 1), 3: (1, 1), 5: (1, 1), 6: (3, 1), 10: (1, 1)}
    return trips + [
        Query(f"q{n}", f"TPC-H Q{n}", sql.replace("{", "{{").replace("}", "}}"), *iters[n],
              skip=(POSTGRES,))
        for n, sql in sorted(tpch.items())
    ]


def run(opts: Any) -> list[dict[str, Any]]:
    reports = []
    for backend in opts.backends:
        reports.append(run_backend(backend, opts))
    return reports


@contextlib.contextmanager
def _backend(name: str) -> Any:
    from bench.pgwire_read import DEFAULT_STACK_DIR, SEAWEEDFS, open_backend

    if name == "embedded":
        lake = datasets.trips(TRIPS_ROWS)
        from bench.peers.sql import embedded_backend

        yield embedded_backend(lake), lake
    else:
        with open_backend(SEAWEEDFS, datasets.lake_dir(TRIPS_ROWS), DEFAULT_STACK_DIR) as b:
            yield b, DEFAULT_STACK_DIR


def run_backend(name: str, opts: Any) -> dict[str, Any]:
    from bench.peers.flight import AdbcPeer
    from bench.peers.postgres import PostgresPeer, load_trips, running_cluster, version
    from bench.peers.sql import DuckPeer, InProcessPeer, PgwirePeer
    from bench.pgwire_read import Server

    section = "read" if name == "embedded" else f"read_{name}"
    report: dict[str, Any] = {"suite": "read", "section": section, **provenance(opts.command)}
    rounds, warmup = opts.rounds_or(3 if opts.quick else 10), 1 if opts.quick else 2
    qs = queries()
    peers: list[Any] = []
    with contextlib.ExitStack() as stack:
        backend, marker_dir = stack.enter_context(_backend(name))
        # The same server answers Flight SQL, so a missing TPC-H dataset is loaded by Flight ingest
        # (the measured-faster path, `tpch_load`) on the embedded lake and on SeaweedFS alike.
        server = Server(backend.data_dir, datasets.DATA_DIR / "logs" / f"read-{name}.log",
                        {**backend.env, "ICEGRES_FLIGHT_PORT": "0"})
        server.start()
        stack.callback(server.stop)
        flight_port = server.ports["flight_port"]
        server.wait_ready("select 1")
        tpch = datasets.tpch(marker_dir, server.conninfo, flight_uri=f"grpc://127.0.0.1:{flight_port}")
        server.wait_file_cache()  # on SeaweedFS: measure the server its copies warmed
        print(f"[read/{name}] starting PostgreSQL 15 and loading demo.trips ...", flush=True)
        cluster = stack.enter_context(running_cluster())
        pg_load = load_trips(cluster.conninfo, TRIPS_ROWS)
        if name == "embedded":
            locations = datasets.metadata_locations(backend.data_dir)
        else:
            lh = backend.lakehouse()
            locations = {f"demo.{t}": lh.load_table("demo", t).metadata_location
                         for t in ("trips", "cities")}
            locations |= {f"tpch.{t}": lh.load_table("tpch", t).metadata_location
                          for t in datasets.TPCH_TABLES}
        peers = [PgwirePeer(server.conninfo, PG), AdbcPeer(f"grpc://127.0.0.1:{flight_port}", FLIGHT),
                 InProcessPeer(backend, INPROC),
                 DuckPeer(locations, DUCK, **backend.duck_options()),
                 PostgresPeer(cluster.conninfo, POSTGRES)]
        for p in peers:
            stack.callback(p.close)
        print(f"[read/{name}] peers {', '.join(p.name for p in peers)}; {rounds} rounds", flush=True)
        meter = load_meter()
        res = run_interleaved(peers, qs, rounds, warmup, opts.quick, SEED, reference=DUCK)
        report["load"] = meter.finish()
        pg_version = version(cluster.conninfo)

    labels = {q.key: q.label for q in qs}
    summary = summarise(res, [q.key for q in qs], PEERS, PG, (DUCK, INPROC, POSTGRES))
    over_flight = summarise(res, [q.key for q in qs], (FLIGHT, DUCK, INPROC), FLIGHT, (DUCK, INPROC, PG))
    for q, entry in over_flight.items():
        summary[q]["ratios"].update(entry["ratios"])
    report["title"] = (f"read latency ({name}): icegres over pgwire and Flight SQL vs. in-process "
                       "engine vs. DuckDB vs. PostgreSQL")
    report["facts"] = {
        "Peers, same run, interleaved per iteration (A B C D, B C D A, ...)":
            "pgwire = `icegres serve` + psycopg 3 (defaults, autocommit); flight = the same "
            "process's Flight SQL port + adbc-driver-flightsql (autocommit; `cursor.execute` "
            "prepares, gets the FlightInfo and starts the DoGet, `fetch_arrow_table` reads it); "
            "in-process = icegres's "
            "engine `ctx.sql(q).collect()`; duckdb = DuckDB 1.5.5 `iceberg_scan` on the same "
            f"metadata files, opened once; postgres = PostgreSQL {pg_version} with demo.trips "
            "(primary key id) loaded by COPY from the same seeded rows, warmed (trips queries only)",
        "Data": f"demo.trips {TRIPS_ROWS:,} rows (`icegres seed`) + TPC-H SF{tpch['sf']:g} loaded "
                f"through icegres by {tpch.get('path', 'COPY FROM STDIN (CSV)')} "
                f"({tpch['rows_per_copy']:,} rows per statement) at {tpch['rows_per_s']:,} rows/s "
                f"({tpch['load_s']:.0f} s, {tpch.get('loaded_utc', '?')}); PostgreSQL load "
                f"{pg_load['load_s']:.0f} s",
        "Rounds": f"{rounds} measured (+{warmup} warm-up{', --quick: fewer iterations' if opts.quick else ''}); "
                  "ratios are medians of per-round ratios of per-round medians",
        "Flight SQL throughput": "measured in the `flight` section (`python -m bench flight`): "
                                 "DoGet of 1M and 10M rows vs pyarrow.flight",
    }
    report["tables"] = [latency_table(summary, labels, PEERS, PG, (DUCK, INPROC, POSTGRES),
                                      {DUCK: "DuckDB", POSTGRES: "PostgreSQL"})]
    flight_table = latency_table(over_flight, labels, (FLIGHT,), FLIGHT, (DUCK, INPROC, PG),
                                 {DUCK: "DuckDB"})
    flight_table["title"] = "Over Flight SQL (the same process, ADBC): ratios to the peers above"
    report["tables"].append(flight_table)
    report["summary"] = summary
    report["gate"] = {f"{q}: {subject}/duckdb": e["ratios"][f"{subject}/{DUCK}"]
                      for subject in (PG, FLIGHT)
                      for q, e in summary.items() if f"{subject}/{DUCK}" in e["ratios"]}
    if "point" in summary and f"{PG}/{POSTGRES}" in summary["point"]["ratios"]:
        report["gate"]["point: pgwire/postgres"] = summary["point"]["ratios"][f"{PG}/{POSTGRES}"]
    report["errors"], report["mismatches"] = res.errors, res.mismatches
    report["samples_ms"] = {p: {q: [[r, round(s * 1e3, 4)] for r, s in v] for q, v in by.items()}
                            for p, by in res.data.items()}
    report["tpch_load"], report["postgres_load"] = tpch, pg_load
    if opts.write:
        report["plots"] = [latency_bars(summary, labels, PEERS, PLOTS_DIR / f"{section}.png",
                                        f"read latency ({name}), same tables, same run")]
    write_report(report, opts.write)
    return report
