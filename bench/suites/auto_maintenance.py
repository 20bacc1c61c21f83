"""auto_maintenance: foreground point-lookup latency while `serve --maintain` compacts and expires
another table, vs the same server with that table's maintenance off, same run (issue 30: "foreground
point-lookup p95 while automatic maintenance runs vs idle: within 1.5x").

One `icegres serve` with `--maintain` (through its environment twins: ICEGRES_MAINTAIN=true,
ICEGRES_MAINTAIN_INTERVAL_S=1, the default duty cycle 0.25) on a fresh embedded lake of two tables:
- `demo.lookup`: 500,000 rows (id, v) in one file: the foreground's point lookups
  (`select id, v from demo.lookup where id = {id}`, one psycopg connection, back to back);
- `demo.churn`: a writer thread INSERTs 20 rows into it every 0.4 s for the whole run, through the
  write buffer (ICEGRES_WRITE_BUFFER_MS=1000: one commit, one small file, a second; a faster stream
  of commits starves a compaction, docs/maintenance.md); its properties make it due often: `icegres.maintain.compact.min-files`
  = 10, `expire.max-snapshot-age-ms` = 0, `expire.min-snapshots` = 5.

Rounds alternate two phases on the same server, writer running in both: **off**
(`icegres.maintain.enabled = false` on demo.churn: the maintainer looks, finds nothing to do) and
**on** (`true`: it compacts, expires and maybe rewrites manifests as files pile up). Every lookup
is timed and stamped with wall-clock start and end; the server logs each job's held interval
(`held S-E`, failed jobs too), and an `on` lookup that overlaps one is a **during a job** sample, the rest **on,
between jobs**. The ratio that answers the issue: p95 during jobs / p95 with maintenance off.
"""

from __future__ import annotations

import contextlib
import random
import re
import tempfile
import threading
import time
from pathlib import Path
from typing import Any

from bench.harness import fmt_ms, fmt_x, load_meter, percentile, provenance, write_report

ROWS = 500_000
SEED = 20261206
# A job's line, done or failed, with the wall-clock interval it held the lease.
JOB = re.compile(r"maintenance demo\.churn: (?P<ops>\S+) (?:in|failed after) [\d.]+s \(epoch \d+, "
                 r"held (?P<s>[\d.]+)-(?P<e>[\d.]+)[;)]")
OFF, BETWEEN, DURING = "off", "on, between jobs", "on, during a job"


def _build(data_dir: Path) -> None:
    import pyarrow as pa

    from icegres.engine.catalog import Lakehouse

    lh = Lakehouse.embedded(data_dir)
    lh.create_namespace_if_missing("demo")
    schema = pa.schema([("id", pa.int64()), ("v", pa.float64())])
    lookup = pa.table({"id": pa.array(range(ROWS), pa.int64()), "v": pa.array([i * 0.5 for i in range(ROWS)])},
                      schema=schema)
    lh.create_table("demo", "lookup", schema).append(lookup)
    lh.create_table("demo", "churn", schema, {
        "icegres.maintain.enabled": "false", "icegres.maintain.compact.min-files": "10",
        "icegres.maintain.expire.max-snapshot-age-ms": "0", "icegres.maintain.expire.min-snapshots": "5"})


class Writer:
    """INSERTs into demo.churn every `period_s` until stopped: small files and snapshots to maintain."""

    def __init__(self, conninfo: str, period_s: float = 0.4, rows: int = 20) -> None:
        self.conninfo, self.period_s, self.rows = conninfo, period_s, rows
        self.written = 0
        self.errors: list[str] = []
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name="churn-writer", daemon=True)

    def start(self) -> None:
        self._thread.start()

    def stop(self) -> None:
        self._stop.set()
        self._thread.join(timeout=60)

    def _run(self) -> None:
        import psycopg

        with psycopg.connect(self.conninfo, autocommit=True) as c:
            while not self._stop.wait(self.period_s):
                values = ", ".join(f"({self.written + i}, 0.25)" for i in range(self.rows))
                try:
                    c.execute(f"insert into demo.churn values {values}")
                    self.written += self.rows
                except psycopg.Error as exc:
                    self.errors.append(str(exc).splitlines()[0])


def _lookups(conninfo: str, seconds: float, rng: random.Random, phase: str) -> list[tuple[str, float, float]]:
    """Back-to-back point lookups for `seconds`: (phase, wall start, wall end) each, checked."""
    import psycopg

    out = []
    with psycopg.connect(conninfo, autocommit=True) as c:
        deadline = time.monotonic() + seconds
        while time.monotonic() < deadline:
            i = rng.randrange(ROWS)
            t0 = time.time()
            row = c.execute(f"select id, v from demo.lookup where id = {i}").fetchone()
            out.append((phase, t0, time.time()))
            assert row == (i, i * 0.5), (i, row)
    return out


def _jobs(log: str) -> list[tuple[float, float, str]]:
    return [(float(m["s"]), float(m["e"]), m["ops"]) for m in JOB.finditer(log)]


def _metrics(ops_port: int) -> dict[str, int]:
    import urllib.request

    with urllib.request.urlopen(f"http://127.0.0.1:{ops_port}/metrics", timeout=5) as reply:
        text = reply.read().decode()
    return {m.group(1): int(m.group(2))
            for m in re.finditer(r"^icegres_maintenance_(\w+)_total (\d+)$", text, re.MULTILINE)}


def run(opts: Any) -> dict[str, Any]:
    import psycopg

    from bench import datasets
    from bench.pgwire_read import Server

    report: dict[str, Any] = {"suite": "auto_maintenance", "section": "auto_maintenance", **provenance(opts.command)}
    rounds = opts.rounds_or(2 if opts.quick else 4)
    off_s, on_s = (8.0, 15.0) if opts.quick else (15.0, 30.0)
    rng = random.Random(SEED)
    # The write buffer: demo.churn takes one commit a second, as a table written this often should
    # (docs/maintenance.md: a faster stream of commits starves a compaction's rebases).
    env = {"ICEGRES_MAINTAIN": "true", "ICEGRES_MAINTAIN_INTERVAL_S": "1", "ICEGRES_OPS_PORT": "0",
           "ICEGRES_WRITE_BUFFER_MS": "1000"}
    with contextlib.ExitStack() as stack:
        tmp = Path(stack.enter_context(tempfile.TemporaryDirectory(prefix="icegres-bench-automaint-")))
        data_dir = tmp / "lake"
        print(f"[auto_maintenance] building demo.lookup ({ROWS:,} rows) and demo.churn ...", flush=True)
        _build(data_dir)
        log_path = datasets.DATA_DIR / "logs" / "auto_maintenance.log"
        server = Server(data_dir, log_path, env=env)
        server.start()
        stack.callback(server.stop)
        server.wait_ready("select 1")
        writer = Writer(server.conninfo)
        writer.start()
        stack.callback(writer.stop)
        _lookups(server.conninfo, 3.0, rng, "warm-up")
        meter = load_meter()
        samples: list[tuple[str, float, float]] = []
        with psycopg.connect(server.conninfo, autocommit=True) as c:
            for r in range(rounds):
                for phase, seconds in ((OFF, off_s), ("on", on_s)) if r % 2 == 0 else (("on", on_s), (OFF, off_s)):
                    enabled = "true" if phase == "on" else "false"
                    c.execute(f'alter table demo.churn set ("icegres.maintain.enabled" = {enabled})')
                    print(f"[auto_maintenance] round {r + 1}/{rounds}: maintenance {phase} for {seconds:.0f} s",
                          flush=True)
                    samples += _lookups(server.conninfo, seconds, rng, phase)
            c.execute('alter table demo.churn set ("icegres.maintain.enabled" = false)')
        counters = _metrics(server.ports["ops_port"])
        writer.stop()
        report["load"] = meter.finish()
        with psycopg.connect(server.conninfo, autocommit=True) as c:
            churn_rows = c.execute("select count(*), count(distinct id) from demo.churn").fetchone()
            churn_files = c.execute('select count(*) from demo."churn$files"').fetchone()[0]
        jobs = _jobs(log_path.read_text())

    def during(start: float, end: float) -> bool:
        return any(start < e and end > s for s, e, _ in jobs)

    by: dict[str, list[float]] = {OFF: [], BETWEEN: [], DURING: []}
    for phase, start, end in samples:
        kind = OFF if phase == OFF else DURING if during(start, end) else BETWEEN
        # A lookup in an off phase that overlaps the tail of a job started while on is not "off".
        if phase == OFF and during(start, end):
            kind = DURING
        by[kind].append(end - start)
    job_s = sum(e - s for s, e, _ in jobs)
    summary: dict[str, Any] = {k: {"n": len(v), "p50_ms": percentile(v, 50) * 1e3, "p95_ms": percentile(v, 95) * 1e3,
                                   "p99_ms": percentile(v, 99) * 1e3} for k, v in by.items()}
    p95_off = summary[OFF]["p95_ms"]
    summary["p95 during a job / off"] = summary[DURING]["p95_ms"] / p95_off
    summary["p95 between jobs / off"] = summary[BETWEEN]["p95_ms"] / p95_off
    summary["p50 during a job / off"] = summary[DURING]["p50_ms"] / summary[OFF]["p50_ms"]
    summary.update({"jobs_logged": len(jobs), "seconds_in_jobs": job_s, "counters": counters,
                    "churn_rows_written": writer.written, "churn_rows_read": list(churn_rows),
                    "churn_files_at_end": churn_files, "writer_errors": writer.errors[:5]})
    report["title"] = "auto_maintenance: point-lookup latency while serve --maintain compacts and expires"
    report["facts"] = {
        "Server": "one `icegres serve` with ICEGRES_MAINTAIN=true, ICEGRES_MAINTAIN_INTERVAL_S=1 (duty cycle 0.25, "
                  "the default), ICEGRES_WRITE_BUFFER_MS=1000, embedded lake",
        "Foreground": f"`select id, v from demo.lookup where id = $random` on {ROWS:,} rows (one file), one psycopg "
                      "connection back to back, every answer checked",
        "Background": f"20-row INSERTs into demo.churn every 0.4 s for the whole run ({writer.written:,} rows; "
                      f"{len(writer.errors)} failed), through the write buffer: a commit (a small file) a second; "
                      "its maintenance toggled per phase by `icegres.maintain.enabled`",
        "Phases": f"{rounds} rounds of off ({off_s:.0f} s) and on ({on_s:.0f} s), order alternating; a lookup "
                  "overlapping a logged job's held interval counts as during a job",
        "Maintenance done": f"{len(jobs)} jobs on demo.churn ({job_s:.1f} s held in all): "
                            f"{counters.get('files_compacted', 0)} files compacted, "
                            f"{counters.get('snapshots_expired', 0)} snapshots expired, "
                            f"{counters.get('manifests_rewritten', 0)} manifests merged, "
                            f"{counters.get('jobs_failed', 0)} failed; demo.churn ended with {churn_files} files "
                            f"for {churn_rows[0]:,} rows ({churn_rows[1]:,} distinct)",
    }
    rows = [[k, str(summary[k]["n"]), fmt_ms(summary[k]["p50_ms"]), fmt_ms(summary[k]["p95_ms"]),
             fmt_ms(summary[k]["p99_ms"]), fmt_x(summary[k]["p95_ms"] / p95_off)] for k in (OFF, BETWEEN, DURING)]
    report["tables"] = [{
        "title": "Point lookup on demo.lookup, by what maintenance was doing",
        "columns": ["maintenance of demo.churn", "lookups", "p50 ms", "p95 ms", "p99 ms", "p95 / off"],
        "align": "lrrrrr",
        "rows": rows,
        "notes": [f"Target (issue 30): p95 while automatic maintenance runs within 1.5x of idle: during a job "
                  f"{fmt_x(summary['p95 during a job / off'])} of off."],
    }]
    report["summary"] = summary
    report["errors"], report["mismatches"] = {}, []
    write_report(report, opts.write)
    return report
