"""Arrow Flight SQL: DoGet throughput to ADBC vs. a pyarrow.flight (C++) server, and small-query
latency over Flight vs. the same query over pgwire — all peers of a part in the same run.

- Throughput: `select * from demo.trips` (1M rows; 10M when bench/.data/trips-10m exists or
  --scale is asked for) read by the ADBC driver with `fetch_arrow_table` from `icegres serve
  --flight-port` (plain and --result-compression zstd) and from a pyarrow.flight server (Arrow's
  C++ Flight server, its own process) streaming the same Arrow table from memory in the same
  64k-row batches: the ceiling. rows/s and MB/s count the Arrow bytes the client holds.
- Latency: a point lookup by id (`select * from demo.trips where id = N`, one row): ADBC's
  `cursor.execute` + fetch (CreatePreparedStatement, GetFlightInfo, DoGet, close) against psycopg
  3 over pgwire to the same icegres process.

Targets (issue 7): ADBC from icegres >= 40% of the pyarrow.flight throughput; point lookup p50
over Flight <= 10 ms.
"""

from __future__ import annotations

import contextlib
import os
import subprocess
from pathlib import Path
from typing import Any

from bench import datasets
from bench.harness import (
    Query,
    fmt_ms,
    fmt_x,
    load_meter,
    percentile,
    provenance,
    round_ratio,
    run_interleaved,
    summarise,
    write_report,
)

ICEGRES, ZSTD, CEILING = "icegres (ADBC)", "icegres zstd (ADBC)", "pyarrow.flight (ADBC)"
TRANSPORT = "grpclib transport only (ADBC)"
FLIGHT, PGWIRE = "flight (ADBC)", "pgwire (psycopg)"
SEED = 20261203
TARGET_SHARE = 0.40
TARGET_P50_MS = 10.0


def _uptime() -> str:
    try:
        return subprocess.run(["uptime"], capture_output=True, text=True, timeout=5).stdout.strip()
    except (OSError, subprocess.SubprocessError):
        return "?"


def _combined_load(loads: list[dict[str, Any]]) -> dict[str, Any]:
    """The measured parts' load meters as one: CPU-seconds and wall time summed, load averages
    from the first part's start to the last part's end."""
    wall = sum(x.get("wall_s", 0) for x in loads)
    others = sum(x.get("others_cpu_s", 0) for x in loads)
    cores = os.cpu_count() or 1
    return {"wall_s": wall, "others_cpu_s": others, "parts": loads,
            "others_share_of_machine": others / (wall * cores) if wall else None,
            "loadavg_start": loads[0].get("loadavg_start"), "loadavg_end": loads[-1].get("loadavg_end")}


class IcegresProcess:
    """`icegres serve --port P --flight-port F [extra]`: both protocols over one engine."""

    def __init__(self, data_dir: Path, log_path: Path, *extra: str) -> None:
        self.data_dir, self.log_path, self.extra = data_dir, log_path, extra
        self.pg_port = self.flight_port = 0  # the kernel's choice, known once started
        self.proc: Any = None

    @property
    def uri(self) -> str:
        return f"grpc://127.0.0.1:{self.flight_port}"

    @property
    def conninfo(self) -> str:
        return f"host=127.0.0.1 port={self.pg_port} dbname=icegres user=bench connect_timeout=5"

    def start(self) -> None:
        from bench.peers.flight import wait_port
        from bench.pgwire_read import icegres_command, icegres_ports

        self.log_path.parent.mkdir(parents=True, exist_ok=True)
        ports_file = self.log_path.with_name(self.log_path.name + ".ports.json")
        with self.log_path.open("wb") as log:
            self.proc = subprocess.Popen(
                [*icegres_command(), "serve", "--data-dir", str(self.data_dir), "--host", "127.0.0.1",
                 "--port", "0", "--flight-port", "0", "--ports-file", str(ports_file), *self.extra],
                stdout=log, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL)
        ports = icegres_ports(self.proc, ports_file, self.log_path)
        self.pg_port, self.flight_port = ports["port"], ports["flight_port"]
        wait_port(self.flight_port, self.proc, 120, self.log_path)
        wait_port(self.pg_port, self.proc, 120, self.log_path)

    def stop(self) -> None:
        from bench.peers.flight import stop_process

        stop_process(self.proc)


def ceiling_table(uri: str, rows: int) -> Path:
    """demo.trips as icegres serves it over Flight (wire types), cached as an Arrow IPC file."""
    import pyarrow as pa

    from bench.peers.flight import BATCH_ROWS, AdbcPeer

    path = datasets.DATA_DIR / f"flight-trips-{rows}.arrow"
    if path.exists():
        return path
    peer = AdbcPeer(uri, "loader")
    try:
        with peer.conn.cursor() as cur:
            cur.execute("select * from demo.trips")
            table = cur.fetch_arrow_table()
    finally:
        peer.close()
    tmp = path.with_suffix(".tmp")
    with pa.OSFile(str(tmp), "wb") as sink, pa.ipc.new_file(sink, table.schema) as writer:
        for batch in table.to_batches(max_chunksize=BATCH_ROWS):
            writer.write_batch(batch)
    os.replace(tmp, path)
    return path


def _throughput(lake: Path, rows: int, rounds: int, warmup: int, quick: bool, zstd: bool,
                logs: Path) -> dict[str, Any]:
    from bench.peers.flight import AdbcPeer, CeilingServer

    names = [ICEGRES, CEILING, TRANSPORT] + ([ZSTD] if zstd else [])
    iters = 1 if rows > 1_000_000 else (1 if quick else 2)
    q = Query(f"scan{rows}", f"select * ({rows:,} rows)", "select * from demo.trips", iters, 1)
    with contextlib.ExitStack() as stack:
        server = IcegresProcess(lake, logs / f"flight-{rows}.log")
        server.start()
        stack.callback(server.stop)
        table_file = ceiling_table(server.uri, rows)
        ceiling = CeilingServer(table_file, logs / f"flight-ceiling-{rows}.log")
        ceiling.start()
        stack.callback(ceiling.stop)
        transport = CeilingServer(table_file, logs / f"flight-grpclib-{rows}.log", grpclib=True)
        transport.start()
        stack.callback(transport.stop)
        uris = {ICEGRES: server.uri, CEILING: ceiling.uri, TRANSPORT: transport.uri}
        if zstd:
            packed = IcegresProcess(lake, logs / f"flight-zstd-{rows}.log", "--result-compression", "zstd")
            packed.start()
            stack.callback(packed.stop)
            uris[ZSTD] = packed.uri
        peers = [AdbcPeer(uris[n], n, bulk=True) for n in names]
        for p in peers:
            stack.callback(p.close)
        uptime_start = _uptime()
        meter = load_meter()
        res = run_interleaved(peers, [q], rounds, warmup, quick, SEED, reference=CEILING)
        load = meter.finish()
        arrow_bytes = {p.name: p.bytes_last for p in peers}
        uptime_end = _uptime()
    out: dict[str, Any] = {"rows": rows, "peers": {}, "load": load, "uptime": [uptime_start, uptime_end],
                           "errors": res.errors, "mismatches": res.mismatches,
                           "samples_s": {p: [[r, s] for r, s in res.of(p, q.key)] for p in names}}
    for name in names:
        times = [s for _, s in res.of(name, q.key)]
        if not times:
            continue
        p50 = percentile(times, 50)
        out["peers"][name] = {
            "p50_ms": p50 * 1e3, "p95_ms": percentile(times, 95) * 1e3, "n": len(times),
            "rows_per_s": rows / p50, "mb_per_s": arrow_bytes[name] / p50 / 1e6,
            "arrow_bytes": arrow_bytes[name],
        }
    # Throughput share = time of the ceiling / time of icegres, per round, median over rounds.
    for name in names:
        if name != CEILING:
            out["peers"].get(name, {})["share_of_ceiling"] = round_ratio(res.of(CEILING, q.key), res.of(name, q.key))
    return out


def _latency(lake: Path, rounds: int, warmup: int, quick: bool, logs: Path) -> dict[str, Any]:
    from bench.peers.flight import AdbcPeer
    from bench.peers.sql import PgwirePeer

    q = Query("point", "point lookup by id (1 row)", "select * from demo.trips where id = {id}", 40, 10,
              lambda rng: {"id": rng.randint(1, 1_000_000)})
    with contextlib.ExitStack() as stack:
        server = IcegresProcess(lake, logs / "flight-latency.log")
        server.start()
        stack.callback(server.stop)
        peers = [AdbcPeer(server.uri, FLIGHT), PgwirePeer(server.conninfo, PGWIRE)]
        for p in peers:
            stack.callback(p.close)
        uptime_start = _uptime()
        meter = load_meter()
        res = run_interleaved(peers, [q], rounds, warmup, quick, SEED, reference=PGWIRE)
        load = meter.finish()
        uptime_end = _uptime()
    summary = summarise(res, [q.key], [FLIGHT, PGWIRE], FLIGHT, [PGWIRE])
    return {"summary": summary, "load": load, "uptime": [uptime_start, uptime_end], "errors": res.errors,
            "mismatches": res.mismatches,
            "samples_ms": {p: [[r, round(s * 1e3, 4)] for r, s in res.of(p, q.key)] for p in (FLIGHT, PGWIRE)}}


def run(opts: Any) -> list[dict[str, Any]]:
    if opts.backends != ("embedded",):
        print("[flight] only the embedded backend is measured (the target is on the embedded default)")
    rounds = opts.rounds_or(3 if opts.quick else 7)
    warmup = 1
    logs = datasets.DATA_DIR / "logs"
    report: dict[str, Any] = {"suite": "flight", "section": "flight", **provenance(opts.command)}
    lake_1m = datasets.trips(1_000_000)
    sizes = [(1_000_000, lake_1m)]
    lake_10m = datasets.lake_dir(10_000_000)
    if getattr(opts, "scale_50m", False) or (lake_10m / datasets.SEEDED_MARKER).exists():
        sizes.append((10_000_000, datasets.trips(10_000_000)))
    throughput = []
    for rows, lake in sizes:
        print(f"[flight] throughput {rows:,} rows, {rounds} rounds ...", flush=True)
        throughput.append(_throughput(lake, rows, rounds if rows == 1_000_000 else max(3, rounds // 2),
                                      warmup, opts.quick, rows == 1_000_000, logs))
    print(f"[flight] small-query latency, {rounds} rounds ...", flush=True)
    latency = _latency(lake_1m, rounds, warmup, opts.quick, logs)
    report["throughput"], report["latency"] = throughput, latency

    t_rows = []
    for t in throughput:
        for name in (ICEGRES, ZSTD, TRANSPORT, CEILING):
            st = t["peers"].get(name)
            if st:
                t_rows.append([f"{t['rows']:,}", name, fmt_ms(st["p50_ms"]), fmt_ms(st["p95_ms"]), st["n"],
                               f"{st['rows_per_s'] / 1e6:.2f} M", f"{st['mb_per_s']:.0f}",
                               fmt_x(st.get("share_of_ceiling")) if name != CEILING else ""])
    point = latency["summary"]["point"]
    l_rows = [[q, p, fmt_ms(st["p50_ms"]), fmt_ms(st["p95_ms"]), st["n"],
               fmt_x(point["ratios"].get(f"{FLIGHT}/{PGWIRE}")) if p == FLIGHT else ""]
              for q in ("point lookup by id",) for p, st in point["peers"].items()]
    targets = []
    for t in throughput:
        share = t["peers"].get(ICEGRES, {}).get("share_of_ceiling")
        if share is not None:
            targets.append([f"DoGet {t['rows']:,} rows to ADBC vs pyarrow.flight", f">= {TARGET_SHARE:.0%}",
                            f"{share:.0%}", "pass" if share >= TARGET_SHARE else "**miss**"])
    flight_p50 = point["peers"].get(FLIGHT, {}).get("p50_ms")
    if flight_p50 is not None:
        targets.append(["point lookup p50 over Flight (prepare+execute+fetch)", f"<= {TARGET_P50_MS:.0f} ms",
                        f"{flight_p50:.2f} ms", "pass" if flight_p50 <= TARGET_P50_MS else "**miss**"])
    report["title"] = "flight: Arrow Flight SQL throughput vs pyarrow.flight, small-query latency vs pgwire"
    loads = [t["load"] for t in throughput] + [latency["load"]]
    report["load"] = _combined_load(loads)
    report["facts"] = {
        "Peers, same run, interleaved per iteration":
            f"{ICEGRES} = `icegres serve --flight-port` read by adbc-driver-flightsql "
            "(`cursor.execute` + `fetch_arrow_table`); "
            f"{ZSTD} = the same with `--result-compression zstd`; {TRANSPORT} = the same Arrow "
            "table pre-encoded once and sent by grpclib under trio-asyncio exactly as icegres sends "
            "a result (codec, FlightData encoding, pre-built HTTP/2 DATA frames, corked writes) — "
            f"icegres's transport without its engine; {CEILING} = Arrow's C++ Flight "
            "server (pyarrow.flight, own process) streaming the same Arrow table from memory in "
            "64k-row batches, answering just enough Flight SQL for ADBC; latency: the same icegres "
            "process over Flight (ADBC) and pgwire (psycopg 3, autocommit)",
        "Throughput": "MB/s = Arrow bytes the client holds (`Table.nbytes`) / p50 time; share of "
                      "ceiling = median over rounds of (ceiling time / icegres time)",
        "uptime (load) at start/end of each part": "; ".join(
            f"{label}: `{u[0]}` -> `{u[1]}`" for label, u in
            [*((f"{t['rows']:,} rows", t["uptime"]) for t in throughput), ("latency", latency["uptime"])]),
        "Rounds": f"{rounds} measured (+{warmup} warm-up checking every peer's answer); 10M: "
                  f"{max(3, rounds // 2)} rounds",
    }
    report["tables"] = [
        {"title": "Targets (issue 7)", "columns": ["target", "goal", "measured", "verdict"], "rows": targets},
        {"title": "DoGet throughput to the ADBC driver", "align": "llrrrrrr",
         "columns": ["rows", "server", "p50 ms", "p95 ms", "n", "rows/s", "MB/s", "share of pyarrow.flight"],
         "rows": t_rows},
        {"title": "Small-query latency (one row by id)", "align": "llrrrr",
         "columns": ["query", "peer", "p50 ms", "p95 ms", "n", "flight / pgwire"], "rows": l_rows},
    ]
    report["errors"] = {**{k: v for t in throughput for k, v in t["errors"].items()}, **latency["errors"]}
    report["mismatches"] = [m for t in throughput for m in t["mismatches"]] + latency["mismatches"]
    report["gate"] = {}
    report["gate_better"] = {}
    for t in throughput:
        share = t["peers"].get(ICEGRES, {}).get("share_of_ceiling")
        if share is not None:
            report["gate"][f"scan {t['rows']}: icegres/pyarrow.flight throughput"] = share
            report["gate_better"][f"scan {t['rows']}: icegres/pyarrow.flight throughput"] = "higher"
    ratio = point["ratios"].get(f"{FLIGHT}/{PGWIRE}")
    if ratio is not None:
        report["gate"]["point: flight/pgwire"] = ratio
    write_report(report, opts.write)
    return [report]

