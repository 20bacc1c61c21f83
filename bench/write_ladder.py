"""The write ladder's ack latency: a 1-row autocommit INSERT on each rung, beside its floors.

    .venv/bin/python -m bench.write_ladder [--rounds 5] [--statements 300] [--seconds 2] [--writers 8]

One run starts a throwaway PostgreSQL 15 (bench/peers/postgres.py: initdb in a temp dir, the
on-disk binaries, fsync=on), three `icegres keeper` processes on 127.0.0.1 (fresh data dirs, `--init`)
and five `icegres serve` subprocesses, each on its own fresh embedded lake (SQLite catalog, local
warehouse), all alive for the whole run:

- ``sync``: `--write-buffer-ms 0` (the default): every INSERT is one Iceberg commit before its ack;
- ``buffer``: `--write-buffer-ms W`: acked from memory, group-committed per table every W ms;
- ``tail-dir``: `--write-buffer-ms W --tail-dir D`: acked once an fsync of the local WAL covers it;
- ``tail-url``: `--write-buffer-ms W --tail-url postgresql://…` (the bench's PostgreSQL): acked once
  a COMMIT of the tail's log table covers it;
- ``tail-quorum``: `--write-buffer-ms W --tail-quorum k1,k2,k3` (the bench's three keepers): acked
  once a majority of keepers fsynced the record (docs/quorum-protocol.md).

Floors, measured in the same run, on the same machine, interleaved with the rungs:

- ``fsync``: `os.write` of 100 B + `os.fsync`, appending to a file in a sibling of the WAL directory
  (same filesystem); with several writers each thread does its own write + fsync on one
  shared file (no group fsync: the naive baseline);
- ``pg-insert``: a bare single-row `INSERT … VALUES (%s, %s)` into that PostgreSQL (psycopg,
  autocommit: one COMMIT, one WAL flush per statement; PostgreSQL's own group commit with many).

Each round runs every target (5 rungs + 2 floors) back to back in a rotating order (A B C …,
B C … A, …) so drift on this shared machine hits all alike. Per target and round: 1 writer runs
`--statements` INSERTs back to back (the sync rung at most SYNC_STATEMENTS: each is a commit), then
`--writers` threads each with its own connection (opened and warmed before timing) insert for
`--seconds`. Every (round, writers) cell writes a fresh table, so table history (which slows the
sync rung) is the same in every round; after a cell the bench idles one flush window plus a margin
so a rung's background flush never lands in the next target's cell. Latency = client-side
`execute()` round trip (the ack); throughput = acked statements / wall time of the cell.

Targets (issue 6): buffer-only ack < 1 ms; tail-dir within 1 ms of the fsync floor; tail-url
within 1 ms of the PostgreSQL INSERT floor; 8 writers on tail-dir get more total throughput than 1.
Issue 8: quorum ack (p50) within 2x of tail-dir, 1 and 8 writers.
Differences and ratios are medians over rounds of the per-round values. Writes
bench/results/<date>-write_ladder.json and the `write_ladder` section of bench/SCORECARD.md.
"""

from __future__ import annotations

import argparse
import contextlib
import os
import shutil
import socket
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from bench.harness import (
    PLOTS_DIR,
    fmt_ms,
    fmt_x,
    latency_bars,
    load_meter,
    median,
    percentile,
    provenance,
    rotation,
    write_report,
)
from bench.pgwire_read import Server

SYNC_STATEMENTS = 40
WARM_STATEMENTS = 5  # per connection, before timing: connection, prepared statement, caches
RUNGS = ("sync", "buffer", "tail-dir", "tail-url", "tail-quorum")
KEEPERS = 3
KEEPER_READY_TIMEOUT_S = 20
FLOORS = ("fsync", "pg-insert")


# --- writers: one connection each ---------------------------------------------------------------


class Writer:
    """One client: `do(i)` runs one 1-row INSERT (or one write + fsync) and returns on its ack."""

    def do(self, i: int) -> None:
        raise NotImplementedError

    def close(self) -> None:
        pass


class SqlWriter(Writer):
    def __init__(self, conninfo: str, table: str, base: int) -> None:
        import psycopg

        self.conn = psycopg.connect(conninfo, autocommit=True)
        self.sql = f"insert into {table} values (%s, %s)"
        self.base = base
        for i in range(WARM_STATEMENTS):
            self.conn.execute(self.sql, (-(base + i) - 1, "warm"))

    def do(self, i: int) -> None:
        self.conn.execute(self.sql, (self.base + i, "x"))

    def close(self) -> None:
        self.conn.close()


class FsyncWriter(Writer):
    def __init__(self, path: Path) -> None:
        self.fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o644)
        self.payload = b"x" * 100
        for i in range(WARM_STATEMENTS):
            self.do(i)

    def do(self, i: int) -> None:
        os.write(self.fd, self.payload)
        os.fsync(self.fd)

    def close(self) -> None:
        os.close(self.fd)


@dataclass
class Cell:
    """One (target, round, writers) measurement."""

    latencies_ms: list[float]
    statements: int
    seconds: float
    retries: int = 0  # 40001 serialization failures (the sync rung's concurrent commits)

    @property
    def per_second(self) -> float:
        return self.statements / self.seconds if self.seconds > 0 else 0.0


def run_one(writer: Writer, n: int) -> Cell:
    lat = []
    t0 = time.perf_counter()
    for i in range(n):
        t = time.perf_counter()
        writer.do(i)
        lat.append((time.perf_counter() - t) * 1000)
    return Cell(lat, n, time.perf_counter() - t0)


def run_many(writers: list[Writer], seconds: float) -> Cell:
    import psycopg

    k = len(writers)
    lat: list[list[float]] = [[] for _ in range(k)]
    retries = [0] * k
    errors: list[BaseException] = []
    start = threading.Barrier(k + 1)
    stop_at = [0.0]

    def work(w: int) -> None:
        start.wait()
        i = 0
        while True:
            t = time.perf_counter()
            if t >= stop_at[0]:
                return
            try:
                writers[w].do(i)
            except psycopg.errors.SerializationFailure:
                retries[w] += 1  # concurrent sync commits to one table rebase, and may give up
                continue
            except BaseException as exc:  # noqa: BLE001 - reported by the caller
                errors.append(exc)
                return
            lat[w].append((time.perf_counter() - t) * 1000)
            i += 1

    threads = [threading.Thread(target=work, args=(w,), daemon=True) for w in range(k)]
    for t in threads:
        t.start()
    stop_at[0] = time.perf_counter() + seconds
    t0 = time.perf_counter()
    start.wait()
    for t in threads:
        t.join()
    elapsed = time.perf_counter() - t0
    if errors:
        raise errors[0]
    flat = [x for xs in lat for x in xs]
    return Cell(flat, len(flat), elapsed, sum(retries))


# --- the quorum tail's keepers ------------------------------------------------------------------


class Keeper:
    """One `icegres keeper` subprocess on 127.0.0.1 with its own data dir; stopped by PID."""

    def __init__(self, data_dir: Path) -> None:
        self.data_dir = data_dir
        self.port = 0  # the kernel's choice at the first start (its --ports-file), then kept
        self.log_path = data_dir.parent / f"{data_dir.name}.log"
        self.ports_file = data_dir.parent / f"{data_dir.name}.ports.json"
        self.proc: subprocess.Popen[bytes] | None = None

    @property
    def address(self) -> str:
        return f"127.0.0.1:{self.port}"

    def start(self, *, init: bool = False) -> None:
        from bench.pgwire_read import icegres_command

        self.log_path.parent.mkdir(parents=True, exist_ok=True)
        cmd = [*icegres_command(), "keeper", "--host", "127.0.0.1", "--port", str(self.port),
               "--ports-file", str(self.ports_file), "--data-dir", str(self.data_dir), *(["--init"] if init else [])]
        with self.log_path.open("ab") as log:
            self.proc = subprocess.Popen(cmd, stdout=log, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL)

    def wait_ready(self, timeout_s: float = KEEPER_READY_TIMEOUT_S) -> None:
        from bench.pgwire_read import icegres_ports

        deadline = time.monotonic() + timeout_s
        assert self.proc is not None
        self.port = icegres_ports(self.proc, self.ports_file, self.log_path, timeout_s)["port"]
        while time.monotonic() < deadline:
            assert self.proc is not None
            if self.proc.poll() is not None:
                raise RuntimeError(f"icegres keeper exited:\n{self.log_path.read_text(errors='replace')[-3000:]}")
            try:
                socket.create_connection(("127.0.0.1", self.port), timeout=1).close()
                return
            except OSError:
                time.sleep(0.05)
        raise RuntimeError(f"icegres keeper on port {self.port} did not start")

    def stop(self) -> None:
        if self.proc is not None and self.proc.poll() is None:
            self.proc.kill()  # its log is fsynced per record: nothing to drain
            self.proc.wait(timeout=10)
        self.proc = None


def start_keepers(root: Path, n: int = KEEPERS) -> list[Keeper]:
    """`n` fresh keepers (`--init`), ready to accept connections."""
    keepers = [Keeper(root / f"keeper{i}") for i in range(n)]
    for k in keepers:
        k.start(init=True)
    for k in keepers:
        k.wait_ready()
    return keepers


# --- targets ------------------------------------------------------------------------------------


@dataclass
class Target:
    name: str
    kind: str  # "rung" or "floor"
    open_writer: Callable[[str, int], Writer]  # (table, writer index) -> a warmed writer
    make_table: Callable[[str], None]
    settle_s: float = 0.0
    one_statements: int = 0
    cells: dict[int, dict[int, Cell]] = field(default_factory=dict)  # writers -> round -> cell
    server: Server | None = None


def _wait(server: Server, timeout_s: float = 90) -> None:
    import psycopg

    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        assert server.proc is not None
        if server.proc.poll() is not None:
            raise RuntimeError(f"icegres serve exited:\n{server.log_tail(40)}")
        try:
            with psycopg.connect(server.conninfo, autocommit=True) as conn:
                conn.execute("select 1")
                return
        except psycopg.OperationalError:
            time.sleep(0.05)
    raise RuntimeError(f"server did not start:\n{server.log_tail(40)}")


def _exec(conninfo: str, *sql: str) -> None:
    import psycopg

    with psycopg.connect(conninfo, autocommit=True) as conn:
        for s in sql:
            conn.execute(s)


def table_name(rnd: int, writers: int) -> str:
    return f"r{rnd}_w{writers}" if rnd >= 0 else f"warm_w{writers}"


def measure_cell(target: Target, rnd: int, writers: int, statements: int, seconds: float) -> Cell:
    table = table_name(rnd, writers)
    target.make_table(table)
    ws = [target.open_writer(table, w) for w in range(writers)]
    try:
        cell = run_one(ws[0], statements) if writers == 1 else run_many(ws, seconds)
    finally:
        for w in ws:
            with contextlib.suppress(Exception):
                w.close()
    if target.settle_s:
        time.sleep(target.settle_s)  # the rung's flush of this cell lands before the next cell
    return cell


# --- summary ------------------------------------------------------------------------------------


def summarise(targets: list[Target], writers: int) -> dict[str, Any]:
    out: dict[str, Any] = {}
    for t in targets:
        per_w: dict[str, Any] = {}
        for k, cells in t.cells.items():
            rounds = sorted(r for r in cells if r >= 0)
            flat = [x for r in rounds for x in cells[r].latencies_ms]
            per_w[str(k)] = {
                "p50_ms": percentile(flat, 50),
                "p95_ms": percentile(flat, 95),
                "p99_ms": percentile(flat, 99),
                "n": len(flat),
                "per_second": median(cells[r].per_second for r in rounds),
                "retries_40001": sum(cells[r].retries for r in rounds),
                "rounds": {r: {"p50_ms": percentile(cells[r].latencies_ms, 50),
                               "p95_ms": percentile(cells[r].latencies_ms, 95),
                               "n": cells[r].statements, "seconds": cells[r].seconds,
                               "per_second": cells[r].per_second, "retries_40001": cells[r].retries}
                           for r in rounds},
            }
        one, many = per_w.get("1"), per_w.get(str(writers))
        out[t.name] = {"kind": t.kind, "writers": per_w,
                       "scaling": _round_ratio(t, writers, 1, "per_second") if one and many else None}
    return out


def _round_values(t: Target, writers: int, what: str) -> dict[int, float]:
    cells = t.cells.get(writers, {})
    if what == "p50":
        return {r: percentile(c.latencies_ms, 50) for r, c in cells.items() if r >= 0}
    return {r: c.per_second for r, c in cells.items() if r >= 0}


def _round_ratio(t: Target, wa: int, wb: int, what: str) -> float | None:
    a, b = _round_values(t, wa, what), _round_values(t, wb, what)
    vals = [a[r] / b[r] for r in a if r in b and b[r] > 0]
    return median(vals) if vals else None


def _round_diff(a: Target, b: Target, writers: int) -> float | None:
    va, vb = _round_values(a, writers, "p50"), _round_values(b, writers, "p50")
    vals = [va[r] - vb[r] for r in va if r in vb]
    return median(vals) if vals else None


def _signed(v: float | None) -> str:
    return "—" if v is None else f"{v:+.3f}"


def verdicts(by: dict[str, Target], summary: dict[str, Any], writers: int) -> list[dict[str, Any]]:
    buf = summary["buffer"]["writers"]["1"]
    d_dir = _round_diff(by["tail-dir"], by["fsync"], 1)
    d_url = _round_diff(by["tail-url"], by["pg-insert"], 1)
    d_dir8 = _round_diff(by["tail-dir"], by["fsync"], writers)
    d_url8 = _round_diff(by["tail-url"], by["pg-insert"], writers)
    scale = summary["tail-dir"]["scaling"]
    q1 = _round_p50_ratio(by["tail-quorum"], by["tail-dir"], 1)
    qk = _round_p50_ratio(by["tail-quorum"], by["tail-dir"], writers)
    quorum = [
        {"target": f"quorum ack within 2x of tail-dir ({k} writer{'s' if k > 1 else ''}, p50)", "value": q,
         "shown": f"{fmt_x(q)} the tail-dir p50", "pass": q is not None and q <= 2.0}
        for k, q in ((1, q1), (writers, qk))
    ]
    return [
        {"target": "buffer-only ack < 1 ms (1 writer, p50)", "value": buf["p50_ms"],
         "shown": f"p50 {buf['p50_ms']:.3f} ms (p95 {buf['p95_ms']:.3f} ms)",
         "pass": buf["p50_ms"] < 1.0},
        {"target": "tail-dir ack within 1 ms of the fsync floor (1 writer, p50)", "value": d_dir,
         "shown": f"{_signed(d_dir)} ms over the floor", "pass": d_dir is not None and d_dir <= 1.0},
        {"target": "tail-url ack within 1 ms of the PostgreSQL INSERT floor (1 writer, p50)",
         "value": d_url, "shown": f"{_signed(d_url)} ms over the floor",
         "pass": d_url is not None and d_url <= 1.0},
        {"target": f"{writers} writers on tail-dir: more total throughput than 1", "value": scale,
         "shown": f"{fmt_x(scale)} the 1-writer statements/s", "pass": scale is not None and scale > 1.0},
        {"target": f"(not a target) tail-dir vs fsync floor at {writers} writers, p50", "value": d_dir8,
         "shown": f"{_signed(d_dir8)} ms", "pass": None},
        {"target": f"(not a target) tail-url vs PostgreSQL INSERT floor at {writers} writers, p50",
         "value": d_url8, "shown": f"{_signed(d_url8)} ms", "pass": None},
        *quorum,
    ]


def _round_p50_ratio(a: Target, b: Target, writers: int) -> float | None:
    """Median over rounds of (a's p50 / b's p50) within the same round."""
    va, vb = _round_values(a, writers, "p50"), _round_values(b, writers, "p50")
    vals = [va[r] / vb[r] for r in va if r in vb and vb[r] > 0]
    return median(vals) if vals else None


# --- main ---------------------------------------------------------------------------------------


def main(argv: list[str] | None = None) -> int:
    from bench.peers.postgres import running_cluster

    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--rounds", type=int, default=5, help="measured rounds (plus one warm-up round)")
    parser.add_argument("--statements", type=int, default=300,
                        help=f"1-writer INSERTs per target and round (the sync rung: at most {SYNC_STATEMENTS})")
    parser.add_argument("--writers", type=int, default=8)
    parser.add_argument("--seconds", type=float, default=2.0, help="duration of each concurrent-writers cell")
    parser.add_argument("--window-ms", type=int, default=200, help="--write-buffer-ms of the buffered rungs")
    parser.add_argument("--no-write", action="store_true", help="print only; no results file or scorecard")
    args = parser.parse_args(argv)
    argv_shown = sys.argv[1:] if argv is None else argv
    command = ".venv/bin/python -m bench.write_ladder " + " ".join(argv_shown)
    prov = provenance(command.strip())
    root = Path(tempfile.mkdtemp(prefix="icegres-ladder-bench-"))
    window = str(args.window_ms)
    settle = args.window_ms / 1000 + 0.4
    servers: list[Server] = []
    keepers: list[Keeper] = []
    try:
        with running_cluster() as pg:
            url = f"postgresql://postgres@127.0.0.1:{pg.port}/postgres"
            _exec(pg.conninfo, "create schema if not exists floor")
            keepers = start_keepers(root / "keepers")
            quorum = ",".join(k.address for k in keepers)
            envs = {
                "sync": {},
                "buffer": {"ICEGRES_WRITE_BUFFER_MS": window},
                "tail-dir": {"ICEGRES_WRITE_BUFFER_MS": window, "ICEGRES_TAIL_DIR": str(root / "wal")},
                "tail-url": {"ICEGRES_WRITE_BUFFER_MS": window, "ICEGRES_TAIL_URL": url},
                "tail-quorum": {"ICEGRES_WRITE_BUFFER_MS": window, "ICEGRES_TAIL_QUORUM": quorum},
            }
            targets: list[Target] = []
            for name in RUNGS:
                server = Server(root / name / "data", root / name / "icegres.log", env=envs[name])
                server.start()
                servers.append(server)
            for name, server in zip(RUNGS, servers, strict=True):
                _wait(server)
                _exec(server.conninfo, "create schema wl")
                ci = server.conninfo
                targets.append(Target(
                    name, "rung",
                    open_writer=lambda table, w, ci=ci: SqlWriter(ci, f"wl.{table}", w * 10_000_000),
                    make_table=lambda table, ci=ci: _exec(ci, f"create table wl.{table} (id bigint, v text)"),
                    settle_s=settle if name != "sync" else 0.2,
                    one_statements=min(args.statements, SYNC_STATEMENTS) if name == "sync" else args.statements,
                    server=server,
                ))
            fsync_dir = root / "fsync-floor"  # beside the WAL directory: the same filesystem
            fsync_dir.mkdir(exist_ok=True)
            targets.append(Target(
                "fsync", "floor",
                open_writer=lambda table, w: FsyncWriter(fsync_dir / f"floor-{table}.bin"),
                make_table=lambda table: None, settle_s=0.2, one_statements=args.statements,
            ))
            targets.append(Target(
                "pg-insert", "floor",
                open_writer=lambda table, w: SqlWriter(pg.conninfo, f"floor.{table}", w * 10_000_000),
                make_table=lambda table: _exec(pg.conninfo, f"create table floor.{table} (id bigint, v text)"),
                settle_s=0.2, one_statements=args.statements,
            ))
            meter = load_meter()
            t_start = time.perf_counter()
            for rnd in range(-1, args.rounds):  # round -1 warms every target up, not counted
                t0 = time.perf_counter()
                for t in rotation(targets, rnd + 1):
                    for k in (1, args.writers):
                        cell = measure_cell(t, rnd, k, t.one_statements, args.seconds)
                        t.cells.setdefault(k, {})[rnd] = cell
                label = "warm-up" if rnd < 0 else f"round {rnd + 1}/{args.rounds}"
                print(f"  {label} ({time.perf_counter() - t0:.1f}s): " + ", ".join(
                    f"{t.name} {percentile(t.cells[1][rnd].latencies_ms, 50):.2f}/"
                    f"{t.cells[args.writers][rnd].per_second:.0f}/s" for t in targets), flush=True)
            load = meter.finish()
            wall = time.perf_counter() - t_start
            pg_version = _pg_version(pg.conninfo)
    finally:
        for s in servers:
            with contextlib.suppress(Exception):
                s.stop()
        for k in keepers:
            with contextlib.suppress(Exception):
                k.stop()
        shutil.rmtree(root, ignore_errors=True)

    by = {t.name: t for t in targets}
    summary = summarise(targets, args.writers)
    checks = verdicts(by, summary, args.writers)
    report = _report(prov, args, summary, checks, load, wall, pg_version)
    if not args.no_write:
        report["plots"] = [ladder_plot(summary, [t.name for t in targets], args.writers)]
    write_report(report, write=not args.no_write)
    return 0


def ladder_plot(summary: dict[str, Any], order: list[str], writers: int) -> str:
    """The ladder as bars: ack p50 (whisker p95) of every rung and floor, for 1 and `writers`."""
    cells = {str(w): {"peers": {name: summary[name]["writers"][str(w)] for name in order
                                if str(w) in summary[name]["writers"]}}
             for w in (1, writers)}
    labels = {str(w): f"{w} writer{'s' if w > 1 else ''}" for w in (1, writers)}
    return latency_bars(cells, labels, order, PLOTS_DIR / "write_ladder.png",
                        "1-row INSERT ack latency per rung of the write ladder, floors beside it")


def _pg_version(conninfo: str) -> str:
    import psycopg

    with psycopg.connect(conninfo) as c:
        return str(c.execute("show server_version").fetchone()[0])


def _report(prov: dict[str, Any], args: Any, summary: dict[str, Any], checks: list[dict[str, Any]],
            load: dict[str, Any], wall: float, pg_version: str) -> dict[str, Any]:
    k = args.writers
    rows = []
    for name in (*FLOORS, *RUNGS):
        s = summary[name]
        for w in ("1", str(k)):
            st = s["writers"][w]
            rows.append([name if w == "1" else "", w, fmt_ms(st["p50_ms"]), fmt_ms(st["p95_ms"]),
                         f"{st['per_second']:.0f}", st["n"], st["retries_40001"] or "",
                         fmt_x(s["scaling"]) if w != "1" else ""])
    lat_table = {
        "title": "Ack latency of a 1-row autocommit INSERT (client round trip) and throughput",
        "columns": ["target", "writers", "p50 ms", "p95 ms", "stmts/s (median of rounds)", "n",
                    "40001 retries", f"{k}w / 1w stmts/s"],
        "rows": rows, "align": "lrrrrrrr",
        "notes": ["p50/p95 pool every measured round's statements; stmts/s and the scaling ratio are "
                  "medians over rounds of each round's value. Floors: `fsync` = os.write 100 B + "
                  f"os.fsync on the WAL's filesystem (with {k} writers: {k} threads, one shared file, no "
                  "group fsync); `pg-insert` = a bare single-row INSERT into the bench's PostgreSQL "
                  f"{pg_version} (fsync=on, synchronous_commit on), psycopg autocommit."],
    }
    check_table = {
        "title": "Issue-6 and issue-8 targets",
        "columns": ["target", "measured", "verdict"],
        "rows": [[c["target"], c["shown"], "—" if c["pass"] is None else ("**pass**" if c["pass"] else "**MISS**")]
                 for c in checks],
        "align": "lll",
        "notes": ["Differences are medians over rounds of (rung p50 − floor p50) within the same round; "
                  "the quorum ratios are medians over rounds of (tail-quorum p50 / tail-dir p50) within the "
                  "same round (issue 8)."],
    }
    return {
        "section": "write_ladder",
        "title": "Write ladder: 1-row INSERT ack latency per rung vs fsync and PostgreSQL floors (issues 6, 8)",
        **prov,
        "load": load,
        "facts": {
            "Setup": (f"5 `icegres serve` subprocesses alive for the whole run (sync; buffer "
                      f"`--write-buffer-ms {args.window_ms}`; + `--tail-dir`; + `--tail-url` to the bench's "
                      f"PostgreSQL {pg_version}; + `--tail-quorum` on {KEEPERS} `icegres keeper` processes "
                      "on 127.0.0.1, fresh data dirs on the WAL's filesystem), each on a fresh embedded "
                      "lake; one throwaway PostgreSQL (floors and the tail-url rung's log). Client: psycopg 3 in this process, one thread "
                      "and connection per writer, connections opened and warmed before timing."),
            "Rounds": (f"{args.rounds} measured + 1 warm-up; per round every target in rotating order; "
                       f"1 writer: {args.statements} statements back to back (sync: "
                       f"{min(args.statements, SYNC_STATEMENTS)}); "
                       f"{k} writers: {args.seconds:g} s; a fresh table per (round, writers) cell; idle "
                       f"{args.window_ms / 1000 + 0.4:.1f} s after each buffered cell so its flush lands "
                       f"before the next target's cell. Measured span {wall:.0f} s."),
        },
        "tables": [lat_table, check_table],
        "summary": summary,
        "checks": checks,
    }


if __name__ == "__main__":
    raise SystemExit(main())
