"""Two checkouts of icegres in one run: point lookup, COPY, write-ladder ack and Flight SQL numbers,
interleaved round by round (A B, B A, ...), each side's servers on its own copy of one lake.

    python -m bench.ab --before ../before-checkout [--after .] [--rounds 6] [--rows 200000]

A checkout is a directory holding an `icegres` package (a git worktree of another commit, for
example `git worktree add --detach ../before <commit>`); its servers run `python -m icegres` with
it first on PYTHONPATH. What is measured, per side and round:

- point: a point lookup over pgwire (psycopg, a bound `%s`), median of `--queries` statements;
- copy: COPY FROM STDIN of `--copy-rows` rows (CSV) into a fresh table, rows per second;
- ladder: an autocommit one-row INSERT acknowledged by a server with `--write-buffer-ms 5
  --tail-dir` (a WAL fsync before the ack), median of `--queries` statements;
- flight: a point lookup over Arrow Flight SQL (ADBC), median of `--queries` statements.

The report gives each side's median over rounds and after/before per metric (the median of the
per-round ratios, and their range), in bench/SCORECARD.md section `ab` and bench/results/<date>-ab.json.
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
import time
from pathlib import Path
from typing import Any

from bench.harness import fmt_x, median, provenance, write_report
from bench.peers.flight import stop_process, wait_port

REPO = Path(__file__).resolve().parents[1]


def _commit(checkout: Path) -> str:
    try:
        return subprocess.run(["git", "rev-parse", "--short", "HEAD"], cwd=checkout, capture_output=True,
                              text=True, check=True).stdout.strip()
    except (OSError, subprocess.CalledProcessError):
        return "?"


BIND_ATTEMPTS_MAX = 5


def _pick_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


class Side:
    """One checkout's servers: a plain one (pgwire + Flight SQL) and a write-ladder one."""

    def __init__(self, name: str, checkout: Path, lake: Path, work: Path) -> None:
        self.name, self.checkout, self.work = name, checkout, work
        self.env = {**os.environ, "PYTHONPATH": str(checkout)}
        self.data = work / "data"
        shutil.copytree(lake, self.data)
        self.ladder_data = work / "ladder-data"
        shutil.copytree(lake, self.ladder_data)
        self.procs: list[Any] = []
        self.port = self.flight_port = self.ladder_port = 0

    def start(self) -> None:
        self.port, self.flight_port = self._serve(self.data, "--flight-port")
        self.ladder_port, _ = self._serve(self.ladder_data, None, "--write-buffer-ms", "5",
                                          "--tail-dir", str(self.work / "wal"))

    def _serve(self, data: Path, second: str | None, *extra: str) -> tuple[int, int]:
        """Start one server (with `second`, a second port flag) and return once it listens on its
        ports. The ports are picked here, not bound as 0 and read back (`--ports-file`), because
        the `--before` checkout may predate that: a start that finds a port taken meanwhile (an
        outgoing connection can take it) is retried on new ports."""
        log_path = self.work / "server.log"
        for _ in range(BIND_ATTEMPTS_MAX):
            ports = (_pick_port(), _pick_port() if second else 0)
            offset = log_path.stat().st_size if log_path.exists() else 0
            log = open(log_path, "ab")  # noqa: SIM115 - the server owns it until it exits
            cmd = [sys.executable, "-m", "icegres", "serve", "--data-dir", str(data), "--host", "127.0.0.1",
                   "--port", str(ports[0]), *([second, str(ports[1])] if second else []), *extra]
            proc = subprocess.Popen(cmd, env=self.env, cwd=self.work, stdout=log, stderr=log)
            try:
                for port in ports[: 2 if second else 1]:
                    wait_port(port, proc, 120, log_path)
            except RuntimeError:
                taken = "in use" in log_path.read_bytes()[offset:].decode(errors="replace")
                if proc.poll() is None or not taken:
                    stop_process(proc)
                    raise
                continue
            self.procs.append(proc)
            return ports
        raise RuntimeError(f"no free ports in {BIND_ATTEMPTS_MAX} attempts: {log_path}")

    def stop(self) -> None:
        for proc in self.procs:
            stop_process(proc)
        self.procs = []


def _dsn(port: int) -> str:
    return f"host=127.0.0.1 port={port} dbname=icegres user=bench"


def point_ms(side: Side, queries: int, rows: int) -> float:
    import psycopg

    with psycopg.connect(_dsn(side.port), autocommit=True) as conn:
        times = []
        for i in range(queries):
            t0 = time.perf_counter()
            conn.execute("select * from demo.trips where id = %s", (1 + (i * 7919) % rows,)).fetchall()
            times.append((time.perf_counter() - t0) * 1000)
    return median(times)


def copy_rows_per_s(side: Side, rows: int, round_no: int) -> float:
    import psycopg

    table = f"demo.copy_{round_no}"
    data = "".join(f"{i},city {i % 97},{i * 0.25}\n" for i in range(rows)).encode()
    with psycopg.connect(_dsn(side.port), autocommit=True) as conn:
        conn.execute(f"create table {table} (id bigint, city text, fare double precision)")
        t0 = time.perf_counter()
        with conn.cursor().copy(f"copy {table} from stdin (format csv)") as copy:
            copy.write(data)
        seconds = time.perf_counter() - t0
        assert conn.execute(f"select count(*) from {table}").fetchone() == (rows,)
    return rows / seconds


def ladder_ack_ms(side: Side, queries: int, round_no: int) -> float:
    import psycopg

    table = f"demo.acks_{round_no}"
    with psycopg.connect(_dsn(side.ladder_port), autocommit=True) as conn:
        conn.execute(f"create table {table} (id bigint, note text)")
        times = []
        for i in range(queries):
            t0 = time.perf_counter()
            conn.execute(f"insert into {table} values (%s, %s)", (i, "x"))
            times.append((time.perf_counter() - t0) * 1000)
    return median(times)


def flight_point_ms(side: Side, queries: int, rows: int) -> float:
    import adbc_driver_flightsql.dbapi as flight

    with flight.connect(f"grpc://127.0.0.1:{side.flight_port}") as conn, contextlib.closing(conn.cursor()) as cur:
        times = []
        for i in range(queries):
            t0 = time.perf_counter()
            cur.execute(f"select * from demo.trips where id = {1 + (i * 7919) % rows}")
            cur.fetchall()
            times.append((time.perf_counter() - t0) * 1000)
    return median(times)


METRICS = {  # name: (label, unit, lower is better)
    "point": ("point lookup over pgwire (psycopg, %s)", "ms", True),
    "copy": ("COPY FROM STDIN, CSV", "rows/s", False),
    "ladder": ("write-ladder ack, --tail-dir (one-row INSERT)", "ms", True),
    "flight": ("point lookup over Flight SQL (ADBC)", "ms", True),
}


def summarise(samples: dict[str, dict[str, list[float]]]) -> tuple[dict[str, Any], list[list[str]]]:
    """Each metric's medians and after/before ratios, and the scorecard rows that show them."""
    rows = []
    summary: dict[str, Any] = {}
    for metric, (label, unit, lower) in METRICS.items():
        before, after = samples[metric]["before"], samples[metric]["after"]
        # Pair by pair: each round's two sides ran back to back under the same load, so the
        # spread of the per-round ratios is the honest measure of how much the median can be trusted.
        ratios = [a / b for a, b in zip(after, before, strict=True) if b]
        ratio = median(ratios)
        summary[metric] = {"before": median(before), "after": median(after), "after_over_before": ratio,
                           "ratio_min": min(ratios), "ratio_max": max(ratios),
                           "unit": unit, "lower_is_better": lower}
        fmt = (lambda v: f"{v:.2f}") if unit == "ms" else (lambda v: f"{v:,.0f}")
        rows.append([label, unit, fmt(median(before)), fmt(median(after)), fmt_x(ratio),
                     f"{fmt_x(min(ratios))} – {fmt_x(max(ratios))}", "lower" if lower else "higher"])
    return summary, rows


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="python -m bench.ab", description=__doc__.splitlines()[0])
    ap.add_argument("--before", type=Path, required=True)
    ap.add_argument("--after", type=Path, default=REPO)
    ap.add_argument("--rounds", type=int, default=6)
    ap.add_argument("--rows", type=int, default=200_000, help="demo.trips rows of the lake")
    ap.add_argument("--copy-rows", type=int, default=100_000)
    ap.add_argument("--queries", type=int, default=200)
    ap.add_argument("--no-write", action="store_true", help="print, but write no result or scorecard")
    args = ap.parse_args(argv)
    checkouts = {"before": args.before.resolve(), "after": args.after.resolve()}
    for name, path in checkouts.items():
        if not (path / "icegres" / "__init__.py").exists():
            ap.error(f"--{name} {path}: no icegres package there")
    command = "python -m bench.ab " + " ".join(argv if argv is not None else sys.argv[1:])
    report = {**provenance(command), "section": "ab",
              "title": "Two checkouts in one run: point lookup, COPY, write ladder, Flight SQL"}
    from bench.harness import load_meter

    samples: dict[str, dict[str, list[float]]] = {m: {"before": [], "after": []} for m in METRICS}
    with tempfile.TemporaryDirectory(prefix="icegres-ab-") as tmp:
        root = Path(tmp)
        lake = root / "lake"
        subprocess.run([sys.executable, "-m", "icegres", "seed", "--data-dir", str(lake), "--rows", str(args.rows)],
                       env={**os.environ, "PYTHONPATH": str(checkouts["after"])}, check=True,
                       stdout=subprocess.DEVNULL)
        sides = {name: Side(name, path, lake, root / name) for name, path in checkouts.items()}
        meter = load_meter()
        try:
            for side in sides.values():
                side.start()
            for side in sides.values():  # warm both: imports, caches, the first mount
                point_ms(side, 20, args.rows)
                flight_point_ms(side, 5, args.rows)
            for r in range(args.rounds):
                order = ["before", "after"] if r % 2 == 0 else ["after", "before"]
                for name in order:
                    side = sides[name]
                    samples["point"][name].append(point_ms(side, args.queries, args.rows))
                    samples["copy"][name].append(copy_rows_per_s(side, args.copy_rows, r))
                    samples["ladder"][name].append(ladder_ack_ms(side, args.queries, r))
                    samples["flight"][name].append(flight_point_ms(side, args.queries, args.rows))
                print(f"round {r + 1}/{args.rounds}: " + ", ".join(
                    f"{m} {samples[m]['before'][-1]:.2f}/{samples[m]['after'][-1]:.2f}" for m in METRICS), flush=True)
        finally:
            for side in sides.values():
                side.stop()
        report["load"] = meter.finish()
    report["samples"] = samples
    report["summary"], rows = summarise(samples)
    report["facts"] = {
        "Before": f"`{checkouts['before'].name}` at {_commit(checkouts['before'])}",
        "After": f"`{checkouts['after'].name}` at {_commit(checkouts['after'])}",
        "Workload": f"demo.trips of {args.rows:,} rows; {args.rounds} rounds, sides alternating; "
                    f"{args.queries} statements per latency figure; COPY of {args.copy_rows:,} rows",
    }
    report["tables"] = [{"title": "Medians over rounds", "align": "llrrrrl",
                         "columns": ["what", "unit", "before", "after", "after / before",
                                     "per-round ratios", "better"],
                         "rows": rows}]
    write_report(report, write=not args.no_write)
    return 0


if __name__ == "__main__":
    sys.exit(main())
