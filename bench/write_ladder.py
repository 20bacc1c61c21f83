"""The write ladder's ack latency: a 1-row autocommit INSERT on each rung, beside the fsync floor.

    .venv/bin/python -m bench.write_ladder [--statements N] [--writers 8]

Rungs, each a real `icegres serve` subprocess on its own fresh embedded lake (SQLite catalog,
local warehouse), driven by psycopg 3 in autocommit mode with `%s` parameters:

- ``sync``: `--write-buffer-ms 0` (the default): every INSERT is one Iceberg commit before its ack;
- ``buffer``: `--write-buffer-ms 200`: acked from memory, group-committed per table;
- ``buffer+wal``: `--write-buffer-ms 200 --tail-dir D`: acked once an fsync of the WAL covers it.

Floor, measured in the same run on the same filesystem as the tail directory: ``os.write`` of
100 B + ``os.fsync`` (DESIGN.md measured 0.38 ms on this machine). Figures: p50/p95 of the
per-statement ack latency for one writer, and the total statements per second of ``--writers``
concurrent writers (group fsync: many writers share one fsync). The sync rung's latency grows with
table history (DESIGN.md), so it runs fewer statements. Results go to bench/results/ as JSON.
"""

from __future__ import annotations

import argparse
import datetime as dt
import json
import os
import statistics
import tempfile
import threading
import time
from pathlib import Path
from typing import Any

from bench.pgwire_read import RESULTS_DIR, Server, git_commit, machine_facts, percentile

SYNC_STATEMENTS = 60


def fsync_floor(directory: Path, n: int) -> list[float]:
    """Milliseconds of one `os.write` of 100 B + `os.fsync`, n times, appending to one file."""
    path = directory / "fsync-floor.bin"
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o644)
    out = []
    try:
        payload = b"x" * 100
        for _ in range(n):
            t = time.perf_counter()
            os.write(fd, payload)
            os.fsync(fd)
            out.append((time.perf_counter() - t) * 1000)
    finally:
        os.close(fd)
        path.unlink()
    return out


def one_writer(conninfo: str, table: str, n: int) -> list[float]:
    import psycopg

    out = []
    with psycopg.connect(conninfo, autocommit=True) as conn:
        sql = f"insert into {table} values (%s, %s)"
        for i in range(10):  # warm up: connection, prepared statement, caches
            conn.execute(sql, (-1 - i, "warm"))
        for i in range(n):
            t = time.perf_counter()
            conn.execute(sql, (i, "x"))
            out.append((time.perf_counter() - t) * 1000)
    return out


def many_writers(conninfo: str, table: str, writers: int, seconds: float) -> dict[str, float]:
    import psycopg

    counts = [0] * writers
    failures = [0] * writers
    latencies: list[list[float]] = [[] for _ in range(writers)]
    stop = threading.Event()

    def run(w: int) -> None:
        with psycopg.connect(conninfo, autocommit=True) as conn:
            sql = f"insert into {table} values (%s, %s)"
            i = 0
            while not stop.is_set():
                t = time.perf_counter()
                try:
                    conn.execute(sql, (w * 10_000_000 + i, "m"))
                except psycopg.errors.SerializationFailure:
                    # The sync rung: concurrent commits to one table rebase, and may give up (40001).
                    failures[w] += 1
                    continue
                latencies[w].append((time.perf_counter() - t) * 1000)
                i += 1
                counts[w] += 1

    threads = [threading.Thread(target=run, args=(w,), daemon=True) for w in range(writers)]
    started = time.perf_counter()
    for t in threads:
        t.start()
    time.sleep(seconds)
    stop.set()
    for t in threads:
        t.join(timeout=60)
    elapsed = time.perf_counter() - started
    flat = [x for lat in latencies for x in lat]
    return {
        "writers": writers,
        "statements": sum(counts),
        "serialization_failures": sum(failures),
        "per_second": sum(counts) / elapsed,
        "p50_ms": percentile(flat, 50),
        "p95_ms": percentile(flat, 95),
    }


def run_rung(name: str, env: dict[str, str], root: Path, statements: int, writers: int, seconds: float) -> dict[str, Any]:
    import psycopg

    data_dir = root / name / "data"
    data_dir.mkdir(parents=True)
    server = Server(data_dir, root / name / "icegres.log", env=env)
    server.start()
    try:
        _wait(server)
        with psycopg.connect(server.conninfo, autocommit=True) as conn:
            conn.execute("create schema wl")
            conn.execute("create table wl.one (id bigint, v text)")
            conn.execute("create table wl.many (id bigint, v text)")
        lat = one_writer(server.conninfo, "wl.one", statements)
        concurrent = many_writers(server.conninfo, "wl.many", writers, seconds)
    finally:
        server.stop()
    return {
        "rung": name,
        "env": env,
        "statements": len(lat),
        "p50_ms": statistics.median(lat),
        "p95_ms": percentile(lat, 95),
        "mean_ms": statistics.fmean(lat),
        "concurrent": concurrent,
    }


def _wait(server: Server, timeout_s: float = 60) -> None:
    import psycopg

    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        try:
            with psycopg.connect(server.conninfo, autocommit=True) as conn:
                conn.execute("select 1")
                return
        except psycopg.OperationalError:
            time.sleep(0.05)
    raise RuntimeError(f"server did not start: {server.log_path.read_text(errors='replace')[-3000:]}")


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--statements", type=int, default=500, help="1-row INSERTs per buffered rung (one writer)")
    parser.add_argument("--writers", type=int, default=8)
    parser.add_argument("--seconds", type=float, default=3.0, help="duration of the concurrent-writers phase")
    parser.add_argument("--window-ms", type=int, default=200)
    args = parser.parse_args(argv)
    root = Path(tempfile.mkdtemp(prefix="icegres-ladder-bench-"))
    window = str(args.window_ms)
    rungs = [
        ("sync", {}, min(args.statements, SYNC_STATEMENTS)),
        ("buffer", {"ICEGRES_WRITE_BUFFER_MS": window}, args.statements),
        ("buffer+wal", {"ICEGRES_WRITE_BUFFER_MS": window, "ICEGRES_TAIL_DIR": str(root / "wal")}, args.statements),
    ]
    floor = fsync_floor(root, args.statements)
    results = [run_rung(name, env, root, n, args.writers, args.seconds) for name, env, n in rungs]
    floor_p50 = statistics.median(floor)
    print(f"fsync floor (os.write 100 B + fsync, {root}): p50 {floor_p50:.3f} ms  p95 {percentile(floor, 95):.3f} ms")
    print(f"{'rung':<12} {'n':>5} {'p50 ms':>9} {'p95 ms':>9} {'p50-floor':>10}   {args.writers} writers: stmts/s  p50 ms  p95 ms")
    for r in results:
        c = r["concurrent"]
        print(f"{r['rung']:<12} {r['statements']:>5} {r['p50_ms']:>9.3f} {r['p95_ms']:>9.3f} {r['p50_ms'] - floor_p50:>10.3f}"
              f"   {c['per_second']:>15.0f} {c['p50_ms']:>7.2f} {c['p95_ms']:>7.2f}")
    out = {
        "bench": "write_ladder",
        "date": dt.date.today().isoformat(),
        "commit": git_commit(),
        "machine": machine_facts(),
        "command": "python -m bench.write_ladder " + " ".join(argv or []),
        "fsync_floor": {"p50_ms": floor_p50, "p95_ms": percentile(floor, 95), "n": len(floor)},
        "rungs": results,
    }
    RESULTS_DIR.mkdir(parents=True, exist_ok=True)
    path = RESULTS_DIR / f"{out['date']}-write_ladder.json"
    path.write_text(json.dumps(out, indent=2, default=str) + "\n")
    print(f"wrote {path}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
