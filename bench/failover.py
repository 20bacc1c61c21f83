"""Failover time of the quorum tail: kill -9 of the writer -> first acknowledged INSERT on its
replacement (issue 8).

    .venv/bin/python -m bench.failover [--kills 5] [--load-s 1.5] [--window-ms 200] [--cold-only]

One run starts three `icegres keeper` processes on 127.0.0.1 (fresh data dirs, `--init`) and a
writer, `icegres serve --write-buffer-ms W --tail-quorum k1,k2,k3` on a fresh embedded lake. Then,
`--kills` times: one client inserts 1-row statements every `--load-interval-ms` into the writer
for `--load-s` (so the writer holds acked, unflushed rows), the bench SIGKILLs the writer, waits
for its PID to be reaped and at once starts a replacement `icegres serve` with the same options
on the same port, data dir and keepers. A prober connects and INSERTs in a loop (5 ms apart
while refused) until one INSERT is acknowledged.

Two kinds of replacement, alternating kill by kill (cold, warm, cold, ...) so drift hits both:

- ``cold``: a new process started after the kill (what any supervisor does);
- ``warm``: a warm standby, `icegres serve --standby` started before the load (imports done, lake
  open, waiting), promoted with SIGUSR1 once the killed PID is reaped (what `icegres supervise
  --warm-standby` does).

Failover time = the SIGKILL -> that first acknowledged INSERT, wall clock. Its parts, from the
replacement's own log (timestamps in ms, same clock):

- ``start-up``: kill -> "opening the write tail" (process start, imports, opening the lake; for
  a warm standby only the SIGUSR1 and its wake-up);
- ``election``: -> "write tail open" (a writer term won from a majority, the keepers' accepted
  records recovered);
- ``replay``: -> "write buffer on" (every recovered record above the lake watermark flushed);
- ``serve``: -> the first acknowledged INSERT (the listener comes up, the prober's connect and
  its INSERT, acked once a majority fsynced it).

At the end every acknowledged row (from every writer generation) must be in the table exactly
once: the report says so. Writes bench/results/<date>-failover.json and the `failover` section of
bench/SCORECARD.md.
"""

from __future__ import annotations

import argparse
import contextlib
import datetime as dt
import os
import re
import shutil
import signal
import subprocess
import sys
import tempfile
import threading
import time
from collections import Counter
from pathlib import Path
from typing import Any

from bench.harness import fmt_ms, load_meter, median, percentile, provenance, write_report
from bench.write_ladder import KEEPERS, Keeper, start_keepers

READY_TIMEOUT_S = 60
PROBE_PAUSE_S = 0.005
FAILOVER_TIMEOUT_S = 60
PHASES = ("start-up", "election", "replay", "serve")
# The replacement's log lines that end each phase (icegres/serve.py).
MARKERS = {"start-up": "opening the write tail", "election": "write tail open",
           "replay": "write buffer on"}
_LOG_TIME = re.compile(r"^(\d{4}-\d\d-\d\d \d\d:\d\d:\d\d,\d{3}) ")


class Writer:
    """One `icegres serve` generation on the quorum tail; killed by PID."""

    def __init__(self, root: Path, generation: int, port: int, data_dir: Path, window_ms: int, quorum: str,
                 *, standby: bool = False) -> None:
        from bench.pgwire_read import icegres_command

        self.log_path = root / f"writer{generation}.log"
        self.ports_file = root / f"writer{generation}.ports.json"
        cmd = [*icegres_command(), "serve", "--data-dir", str(data_dir), "--host", "127.0.0.1",
               "--port", str(port), "--ports-file", str(self.ports_file), "--write-buffer-ms", str(window_ms),
               "--tail-quorum", quorum, *(["--standby"] if standby else [])]
        self.port = port  # 0 (the first writer's: the kernel picks) until `bound_port`
        with self.log_path.open("wb") as log:
            self.started = time.time()
            self.proc = subprocess.Popen(cmd, stdout=log, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL)

    def bound_port(self) -> int:
        """The port it bound (its --ports-file): every later writer is started on it."""
        from bench.pgwire_read import icegres_ports

        self.port = icegres_ports(self.proc, self.ports_file, self.log_path, READY_TIMEOUT_S)["port"]
        return self.port

    @property
    def conninfo(self) -> str:
        return f"host=127.0.0.1 port={self.port} dbname=icegres user=bench connect_timeout=2"

    def log(self) -> str:
        return self.log_path.read_text(errors="replace")

    def marker_time(self, text: str) -> float | None:
        """Wall-clock time of the first log line containing `text` (ms resolution)."""
        for line in self.log().splitlines():
            m = _LOG_TIME.match(line)
            if m and text in line:
                return dt.datetime.strptime(m.group(1), "%Y-%m-%d %H:%M:%S,%f").timestamp()
        return None

    def kill(self) -> None:
        if self.proc.poll() is None:
            os.kill(self.proc.pid, signal.SIGKILL)
        self.proc.wait(timeout=10)

    def terminate(self) -> int:
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
        return self.proc.wait(timeout=60)


class Load:
    """One client inserting unique ids every `interval_s`; `acked` holds what the server acked."""

    def __init__(self, conninfo: str, table: str, base: int, interval_s: float) -> None:
        self.conninfo, self.table, self.base, self.interval_s = conninfo, table, base, interval_s
        self.acked: list[int] = []
        self.errors: list[str] = []
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)
        self._thread.start()

    def _run(self) -> None:
        import psycopg

        try:
            with psycopg.connect(self.conninfo, autocommit=True) as conn:
                i = 0
                while not self._stop.is_set():
                    ident = self.base + i
                    i += 1
                    conn.execute(f"insert into {self.table} values (%s, 'load')", (ident,))
                    self.acked.append(ident)
                    time.sleep(self.interval_s)
        except psycopg.OperationalError:
            pass  # the writer was killed: what it acked is in `acked`
        except Exception as exc:  # noqa: BLE001 - reported
            self.errors.append(f"{type(exc).__name__}: {exc}")

    def stop(self) -> None:
        self._stop.set()
        self._thread.join(timeout=30)


def wait_ready(writer: Writer, timeout_s: float = READY_TIMEOUT_S) -> None:
    import psycopg

    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        if writer.proc.poll() is not None:
            raise RuntimeError(f"icegres serve exited:\n{writer.log()[-3000:]}")
        try:
            with psycopg.connect(writer.conninfo, autocommit=True) as conn:
                conn.execute("select 1")
                return
        except psycopg.OperationalError:
            time.sleep(0.05)
    raise RuntimeError(f"icegres serve did not start:\n{writer.log()[-3000:]}")


def wait_standing_by(writer: Writer, timeout_s: float = READY_TIMEOUT_S) -> None:
    deadline = time.monotonic() + timeout_s
    while "warm standby: waiting" not in writer.log():
        if writer.proc.poll() is not None or time.monotonic() > deadline:
            raise RuntimeError(f"the standby did not come up:\n{writer.log()[-3000:]}")
        time.sleep(0.05)


def probe_first_ack(writer: Writer, table: str, ident: int) -> float:
    """Connect and INSERT until one INSERT is acknowledged; its wall-clock time."""
    import psycopg

    deadline = time.monotonic() + FAILOVER_TIMEOUT_S
    while time.monotonic() < deadline:
        if writer.proc.poll() is not None:
            raise RuntimeError(f"the replacement exited:\n{writer.log()[-3000:]}")
        try:
            with psycopg.connect(writer.conninfo, autocommit=True) as conn:
                conn.execute(f"insert into {table} values (%s, 'probe')", (ident,))
                return time.time()
        except psycopg.OperationalError:
            time.sleep(PROBE_PAUSE_S)
    raise RuntimeError(f"no acknowledged INSERT within {FAILOVER_TIMEOUT_S} s:\n{writer.log()[-3000:]}")


def measure_kill(old: Writer, new_writer: Any, table: str, probe_id: int) -> tuple[Writer, dict[str, Any]]:
    """SIGKILL `old`, start the replacement at once, time kill -> first ack and its phases."""
    t_kill = time.time()
    old.kill()
    t_reaped = time.time()
    new = new_writer()
    t_ack = probe_first_ack(new, table, probe_id)
    marks = {phase: new.marker_time(text) for phase, text in MARKERS.items()}
    ends = [marks["start-up"], marks["election"], marks["replay"], t_ack]
    starts = [t_kill, *ends[:-1]]
    parts = {phase: (e - s) * 1000 if e is not None and s is not None else None
             for phase, s, e in zip(PHASES, starts, ends, strict=True)}
    replayed = re.search(r"replayed (\d+) records", new.log())
    return new, {
        "failover_ms": (t_ack - t_kill) * 1000,
        "reap_ms": (t_reaped - t_kill) * 1000,
        "phases_ms": parts,
        "replayed_records": int(replayed.group(1)) if replayed else None,
    }


def main(argv: list[str] | None = None) -> int:
    import psycopg

    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--kills", type=int, default=5, help="measured kills (plus one warm-up kill)")
    parser.add_argument("--load-s", type=float, default=1.5, help="INSERT load on each writer before its kill")
    parser.add_argument("--load-interval-ms", type=float, default=10.0, help="pause between the load's INSERTs")
    parser.add_argument("--window-ms", type=int, default=200, help="--write-buffer-ms of the writers")
    parser.add_argument("--cold-only", action="store_true", help="no warm-standby kills")
    parser.add_argument("--no-write", action="store_true", help="print only; no results file or scorecard")
    args = parser.parse_args(argv)
    modes = ("cold",) if args.cold_only else ("cold", "warm")
    argv_shown = sys.argv[1:] if argv is None else argv
    prov = provenance((".venv/bin/python -m bench.failover " + " ".join(argv_shown)).strip())
    root = Path(tempfile.mkdtemp(prefix="icegres-failover-bench-"))
    keepers: list[Keeper] = []
    writer: Writer | None = None
    kills: list[dict[str, Any]] = []
    standby: Writer | None = None
    acked: list[int] = []
    errors: list[str] = []
    table = "fo.t"
    try:
        keepers = start_keepers(root / "keepers")
        quorum = ",".join(k.address for k in keepers)
        port, data_dir = 0, root / "data"
        generation = iter(range(1_000_000))

        def new_writer(standby: bool = False) -> Writer:
            # Every replacement on the first writer's port, as clients expect; a replacement that
            # finds it taken (an outgoing connection got it after the kill) fails the run loudly.
            return Writer(root, next(generation), port, data_dir, args.window_ms, quorum, standby=standby)

        writer = new_writer()
        port = writer.bound_port()
        wait_ready(writer)
        with psycopg.connect(writer.conninfo, autocommit=True) as conn:
            conn.execute("create schema fo")
            conn.execute(f"create table {table} (id bigint, v text)")
        meter = load_meter()
        t0 = time.perf_counter()
        # The first of each mode warms the page cache and the keepers, not counted.
        for k in range(-len(modes), args.kills * len(modes)):
            mode = modes[k % len(modes)]
            base = (k + len(modes) + 1) * 10_000_000
            if mode == "warm":
                standby = new_writer(standby=True)
                wait_standing_by(standby)
            load = Load(writer.conninfo, table, base, args.load_interval_ms / 1000)
            time.sleep(args.load_s)
            if mode == "warm":
                def promote(s: Writer | None = standby) -> Writer:
                    assert s is not None
                    s.proc.send_signal(signal.SIGUSR1)
                    return s

                writer, measured = measure_kill(writer, promote, table, base + 9_000_000)
                standby = None
            else:
                writer, measured = measure_kill(writer, new_writer, table, base + 9_000_000)
            measured["mode"] = mode
            load.stop()
            acked += [*load.acked, base + 9_000_000]
            errors += load.errors
            measured["acked_before_kill"] = len(load.acked)
            label = f"{mode} warm-up" if k < 0 else f"{mode} kill {k // len(modes) + 1}/{args.kills}"
            print(f"  {label}: {measured['failover_ms']:.0f} ms " + ", ".join(
                f"{p} {fmt_ms(v)}" for p, v in measured["phases_ms"].items())
                + f" (replayed {measured['replayed_records']})", flush=True)
            if k >= 0:
                kills.append(measured)
        load_facts = meter.finish()
        wall = time.perf_counter() - t0
        with psycopg.connect(writer.conninfo, autocommit=True) as conn:
            ids = [r[0] for r in conn.execute(f"select id from {table}").fetchall()]
        counts = Counter(ids)
        duplicates = sum(1 for n in counts.values() if n > 1)
        missing = len(set(acked) - set(ids))
        clean_exit = writer.terminate()
        writer = None
    finally:
        for w in (writer, standby):
            if w is not None:
                with contextlib.suppress(Exception):
                    w.kill()
        for keeper in keepers:
            with contextlib.suppress(Exception):
                keeper.stop()
        shutil.rmtree(root, ignore_errors=True)

    report = _report(prov, args, modes, kills, load_facts, wall, acked=len(acked), duplicates=duplicates,
                     missing=missing, clean_exit=clean_exit, errors=errors)
    write_report(report, write=not args.no_write)
    return 0 if not (duplicates or missing) else 1


def _mode_rows(kills: list[dict[str, Any]], mode: str) -> tuple[list[list[Any]], float, float | None]:
    mine = [k for k in kills if k["mode"] == mode]
    total = [k["failover_ms"] for k in mine]
    p50 = median(total)
    rows = [[f"{mode}: kill → first acked INSERT", fmt_ms(p50), fmt_ms(percentile(total, 95)),
             fmt_ms(min(total) if total else None), fmt_ms(max(total) if total else None), "100%"]]
    for phase in PHASES:
        vals = [k["phases_ms"][phase] for k in mine if k["phases_ms"][phase] is not None]
        share = median(vals) / p50 * 100 if vals and p50 else float("nan")
        rows.append([f"  {phase}", fmt_ms(median(vals)), fmt_ms(percentile(vals, 95)),
                     fmt_ms(min(vals) if vals else None), fmt_ms(max(vals) if vals else None), f"{share:.0f}%"])
    startup = median([k["phases_ms"]["start-up"] for k in mine if k["phases_ms"]["start-up"] is not None])
    return rows, p50, startup


def _report(prov: dict[str, Any], args: Any, modes: tuple[str, ...], kills: list[dict[str, Any]],
            load: dict[str, Any], wall: float, *, acked: int, duplicates: int, missing: int, clean_exit: int,
            errors: list[str]) -> dict[str, Any]:
    rows: list[list[Any]] = []
    p50s: dict[str, float] = {}
    notes = ["Parts come from the replacement's log timestamps (ms resolution): start-up = kill → "
             "\"opening the write tail\" (cold: process start, imports, opening the lake; warm: SIGUSR1 "
             "and wake-up); election = → \"write tail open\" (term won from a majority, accepted records "
             "recovered); replay = → \"write buffer on\" (recovered records above the lake watermark "
             "flushed); serve = → first acked INSERT (listener up, prober connect, quorum ack). The parts' "
             "p50s need not add up to the total's."]
    for mode in modes:
        mode_rows, p50, startup = _mode_rows(kills, mode)
        rows += mode_rows
        p50s[mode] = p50
        if mode == "cold" and startup and p50 and startup > p50 / 2:
            notes.append(f"Cold: process start-up dominates ({fmt_ms(startup)} ms of the {fmt_ms(p50)} ms p50).")
    per_kill = [[i + 1, k["mode"], fmt_ms(k["failover_ms"]), *(fmt_ms(k["phases_ms"][p]) for p in PHASES),
                 k["acked_before_kill"], k["replayed_records"]] for i, k in enumerate(kills)]
    checks = []
    for mode in modes:
        checks += [
            {"target": f"failover under 1 s (p50, {mode})", "shown": f"{fmt_ms(p50s[mode])} ms",
             "pass": p50s[mode] < 1000},
            {"target": f"(aim) failover under 300 ms (p50, {mode})", "shown": f"{fmt_ms(p50s[mode])} ms",
             "pass": p50s[mode] < 300},
        ]
    checks.append({"target": "every acked row in the table exactly once",
                   "shown": f"{acked} acked, {missing} missing, {duplicates} duplicated",
                   "pass": not (missing or duplicates)})
    return {
        "section": "failover",
        "title": "Quorum tail failover: kill -9 of the writer → first acked INSERT on its replacement (issue 8)",
        **prov,
        "load": load,
        "facts": {
            "Setup": (f"{KEEPERS} `icegres keeper` processes on 127.0.0.1 (fresh data dirs); one writer at a "
                      f"time, `icegres serve --write-buffer-ms {args.window_ms} --tail-quorum …` on a fresh "
                      "embedded lake (SQLite catalog, local warehouse); the replacement has the same options, "
                      "port, data dir and keepers. cold = a new process started once the killed PID is reaped; "
                      "warm = a `serve --standby` process started before the load (lake open, waiting), sent "
                      "SIGUSR1 once the killed PID is reaped."),
            "Procedure": (f"{args.kills} measured kills per kind ({' and '.join(modes)}, alternating) + 1 warm-up "
                          f"each; before each, one client inserts a 1-row statement every "
                          f"{args.load_interval_ms:g} ms for {args.load_s:g} s; then SIGKILL; a prober connects "
                          f"and INSERTs ({PROBE_PAUSE_S * 1000:g} ms apart while refused) until one is acked. "
                          f"Measured span {wall:.0f} s."),
            "Exactly once": (f"{acked} rows acked over all writer generations (load + probes): {missing} "
                             f"missing, {duplicates} duplicated in the final table; the last writer exited "
                             f"{clean_exit} on SIGTERM."),
        },
        "tables": [
            {"title": "Failover time and its parts (ms; p50 = median over kills)",
             "columns": ["", "p50", "p95", "min", "max", "share of p50"], "rows": rows, "align": "lrrrrr",
             "notes": [" ".join(notes)]},
            {"title": "Per kill (ms)", "columns": ["kill", "kind", "total", *PHASES, "acked before kill", "replayed"],
             "rows": per_kill, "align": "rl" + "r" * (3 + len(PHASES))},
            {"title": "Issue-8 targets", "columns": ["target", "measured", "verdict"],
             "rows": [[c["target"], c["shown"], "**pass**" if c["pass"] else "**MISS**"] for c in checks],
             "align": "lll"},
        ],
        "kills": kills,
        "checks": checks,
        "errors": {f"load/{i}": e for i, e in enumerate(errors)},
    }


if __name__ == "__main__":
    raise SystemExit(main())
