"""`python -m bench [suite ...] [--backend embedded|seaweedfs|both] [--rounds N] [--quick]`

Runs the named suites (default: every suite below except the long write ones, see DEFAULT), each
interleaving its peers round by round, and writes bench/results/<date>-<section>.json, its
bench/SCORECARD.md section and its plots. `--check` instead compares the newest results' ratios
with bench/baselines.json and exits 1 on a regression beyond the tolerance.
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from dataclasses import dataclass
from typing import Any

SUITES = {
    "read": "read latency over pgwire (trips + TPC-H) vs in-process, DuckDB, PostgreSQL",
    "concurrency": "qps and p95 at 1/4/16/64 connections, icegres vs PostgreSQL",
    "startup": "process start to first answered query, peak RSS, icegres vs PostgreSQL",
    "scale": "point/filter/join/group-by at 1M and 10M rows (50M with --scale-50m)",
    "flight": "Flight SQL DoGet throughput to ADBC vs pyarrow.flight (1M, 10M), point lookup vs pgwire",
    "pgwire_read": "bench/pgwire_read.py (streaming, anatomy, S3 requests)",
    "pgwire_write": "bench/pgwire_write.py (sync DML vs pyiceberg appends)",
    "write_ladder": "bench/write_ladder.py (ack latency per write-ladder rung vs bare fsync)",
    "load": "TPC-H bulk load through icegres, COPY over pgwire vs Flight SQL ingest (--sf, default 1)",
    "wakeups": "one cross-thread hand-off (trio, SerialThread, bare threading.Event) by waiter idle time",
    "copy_out": "COPY TO STDOUT of 1M rows (text, CSV) vs icegres's SELECT and PostgreSQL's COPY",
    "pgbench": "pgbench point lookups by -M simple / extended / prepared, icegres vs PostgreSQL",
    "scram_connect": "connect + SCRAM-SHA-256 login + select 1 + close, icegres vs PostgreSQL 15 (scram in pg_hba)",
    "tls": "point lookup p50/p99 and connect time over TLS vs plaintext, icegres vs PostgreSQL (ssl=on)",
    "big_lake": "start to first answered query and RSS with 1,000 tables (100k data files) vs 2 tables",
    "time_travel": "point lookup as of an old snapshot vs the head (and DuckDB), $snapshots of 1,000, a 50-table branch",
    "merge": "MERGE of 1,000 changed rows into 1M rows, and UPDATE … FROM + INSERT, icegres vs DuckDB "
             "(iceberg on --backend seaweedfs, in memory) and PostgreSQL 15",
    "compaction": "point lookup and full scan of 2,000 one-row files before/after rewrite_data_files and "
                  "rewrite_manifests vs fresh; 1-row INSERT commit latency before/after rewrite_manifests",
    "rls": "point lookup and group-by under a row-level security policy (and a mask) vs without, same run",
    "auto_maintenance": "point-lookup p50/p95 while serve --maintain compacts and expires another table vs "
                        "that table's maintenance off, same server and run",
    "history": "1-row INSERT latency over 2,000 commits, a table never maintained vs one with rewrite_manifests + "
               "expire_snapshots every 50 commits, interleaved (--backend seaweedfs too)",
    "scan_links": "a re-mount's scan directory of 2,000 data files: ScanSets.acquire and its removal, hard vs "
                  "symbolic links, interleaved",
    "values_insert": "one INSERT … VALUES of 1,000 and 10,000 constant rows (and 10,000 typed ones: CHECK, "
                     "DEFAULT, casts, now()), icegres vs PostgreSQL 15 (--before DIR: another checkout's icegres too)",
    "block_inserts": "2,000 single-row INSERTs in one block by psycopg executemany and SQLAlchemy Core, "
                     "icegres vs PostgreSQL 15 (--before DIR: another checkout's icegres too)",
    "list_append_check": "bench/list_append_check.py (verify's Elle-style checker on 100k-transaction histories)",
}
# Suites whose module lives beside this file rather than in bench/suites/.
MODULES = {"list_append_check": "bench.list_append_check"}
DEFAULT = ("read", "concurrency", "startup", "scale", "flight", "pgbench", "pgwire_read", "pgwire_write")


@dataclass
class Options:
    backends: tuple[str, ...]
    rounds: int | None
    quick: bool
    write: bool
    command: str
    scale_50m: bool
    sf: float | None = None  # load suite: TPC-H scale factor (None: 1, or 0.1 with --quick)
    keep_lakes: bool = False  # load suite: keep bench/.data/load-{copy,flight}
    before: str | None = None  # pgbench, big_lake, block_inserts, values_insert suites: another checkout's icegres, run beside this one
    rows: int | None = None  # merge suite: the first N ids of demo.trips (None: all 1M)
    commits: int | None = None  # history suite: commits per table (None: 2,000, or 200 with --quick)

    def rounds_or(self, default: int) -> int:
        return self.rounds if self.rounds is not None else default


def _legacy(name: str, opts: Options) -> None:
    """The per-issue harnesses keep their own CLI, results and scorecard sections."""
    backend = "both" if len(opts.backends) > 1 else opts.backends[0]
    args: list[str] = []
    if name == "pgwire_read":
        from bench.pgwire_read import main

        args = ["--backend", backend, "--rounds", str(opts.rounds_or(3 if opts.quick else 15))]
        if opts.quick:
            args += ["--warmup", "1", "--starts", "1", "--stream-attempts", "1"]
    elif name == "pgwire_write":
        from bench.pgwire_write import main

        args = ["--backend", backend, "--rounds", str(opts.rounds_or(5 if opts.quick else 20))]
        if opts.quick:
            args.append("--no-profile")
    else:
        from bench.write_ladder import main

        if opts.quick:
            args = ["--statements", "100", "--seconds", "1.5"]
    if not opts.write:
        args.append("--no-write") if name != "write_ladder" else None
    print(f"[{name}] python -m bench.{name} {' '.join(args)}", flush=True)
    rc = main(args)
    if rc:
        raise RuntimeError(f"bench.{name} exited with {rc}")


def run_suite(name: str, opts: Options) -> None:
    if name in ("pgwire_read", "pgwire_write", "write_ladder"):
        _legacy(name, opts)
        return
    module = __import__(MODULES.get(name, f"bench.suites.{name}"), fromlist=["run"])
    module.run(opts)


def check(tolerance: float | None) -> int:
    from bench.harness import BASELINES, GATE_TOLERANCE, check, latest_results

    baselines = json.loads(BASELINES.read_text())
    tol = tolerance if tolerance is not None else float(baselines.get("_tolerance", GATE_TOLERANCE))
    ok, lines = check(latest_results(), baselines, tol)
    print(f"bench gate: newest results vs bench/baselines.json, tolerance {tol:.0%} (ratios only)")
    print("\n".join(lines))
    print("PASS" if ok else "FAIL: a ratio regressed beyond the tolerance")
    return 0 if ok else 1


def update_baselines() -> int:
    """Write the newest results' gated ratios as the baselines (review the diff before committing)."""
    from bench.harness import BASELINES, GATE_TOLERANCE, latest_results

    old: dict[str, Any] = json.loads(BASELINES.read_text()) if BASELINES.exists() else {}
    out: dict[str, Any] = {"_tolerance": old.get("_tolerance", GATE_TOLERANCE),
                           "_note": "ratios, not times; regenerate with python -m bench --update-baselines"}
    for section, rep in sorted(latest_results().items()):
        gate = rep.get("gate") or {}
        if gate:
            better = rep.get("gate_better", {})
            out[section] = {m: {"ratio": round(v, 3), "better": better.get(m, "lower"),
                                "from": f"{rep.get('date')} {rep.get('commit')}"}
                            for m, v in sorted(gate.items()) if v is not None}
    BASELINES.write_text(json.dumps(out, indent=1) + "\n")
    print(f"wrote {BASELINES}")
    return 0


def main(argv: list[str] | None = None) -> int:
    from icegres import allocator

    allocator.configure()  # the in-process engine allocates as `icegres serve` does
    ap = argparse.ArgumentParser(prog="python -m bench", description=__doc__.split("\n\n")[0],
                                 formatter_class=argparse.RawDescriptionHelpFormatter,
                                 epilog="suites:\n" + "\n".join(f"  {k:13} {v}" for k, v in SUITES.items()))
    ap.add_argument("suites", nargs="*", metavar="suite", help=f"default: {' '.join(DEFAULT)}")
    ap.add_argument("--backend", choices=("embedded", "seaweedfs", "both"), default="embedded")
    ap.add_argument("--rounds", type=int, default=None, help="measured rounds (per-suite default)")
    ap.add_argument("--quick", action="store_true", help="fewer rounds and iterations (smoke run)")
    ap.add_argument("--no-write", action="store_true", help="print only; no results/scorecard/plots")
    ap.add_argument("--scale-50m", action="store_true",
                    help="scale suite: add trips at 50M rows (long to build and run on 2 cores)")
    ap.add_argument("--sf", type=float, default=None,
                    help="load suite: TPC-H scale factor (default 1; 0.1 with --quick)")
    ap.add_argument("--keep-lakes", action="store_true", help="load suite: keep the two loaded lakes")
    ap.add_argument("--before", default=None, metavar="DIR",
                    help="pgbench suite: a checkout of icegres (a directory holding the package) whose "
                         "server runs beside this one's, interleaved, as the peer `icegres before`; "
                         "big_lake suite: the same, started once on each lake; block_inserts suite: "
                         "the same, interleaved")
    ap.add_argument("--rows", type=int, default=None,
                    help="merge suite: change a copy of the first N rows of demo.trips, not all 1M "
                         "(for development)")
    ap.add_argument("--commits", type=int, default=None,
                    help="history suite: one-row INSERTs per table (default 2,000; 200 with --quick)")
    ap.add_argument("--tpch-load", choices=("flight", "copy"), default=None,
                    help="how a missing TPC-H dataset is loaded (default: the measured-faster path, "
                         "see bench/datasets.py)")
    ap.add_argument("--check", action="store_true", help="regression gate: newest ratios vs baselines")
    ap.add_argument("--tolerance", type=float, default=None, help="gate tolerance (default in baselines.json)")
    ap.add_argument("--update-baselines", action="store_true", help="newest ratios -> bench/baselines.json")
    args = ap.parse_args(argv)
    if args.check:
        return check(args.tolerance)
    if args.update_baselines:
        return update_baselines()
    unknown = [s for s in args.suites if s not in SUITES]
    if unknown:
        ap.error(f"unknown suite(s) {unknown}; known: {', '.join(SUITES)}")
    command = "python -m bench " + " ".join(sys.argv[1:] if argv is None else argv)
    opts = Options(
        backends=("embedded", "seaweedfs") if args.backend == "both" else (args.backend,),
        rounds=args.rounds, quick=args.quick, write=not args.no_write, command=command.strip(),
        scale_50m=args.scale_50m, sf=args.sf, keep_lakes=args.keep_lakes, before=args.before,
        rows=args.rows, commits=args.commits,
    )
    if args.tpch_load:
        import os

        from bench.datasets import TPCH_LOAD_ENV

        os.environ[TPCH_LOAD_ENV] = args.tpch_load
    failed: list[str] = []
    for name in args.suites or DEFAULT:
        t0 = time.perf_counter()
        print(f"\n=== suite {name} ===", flush=True)
        try:
            run_suite(name, opts)
        except Exception as exc:  # one broken suite must not hide the others' numbers
            import traceback

            traceback.print_exc()
            failed.append(f"{name}: {type(exc).__name__}: {exc}")
        print(f"=== suite {name} done in {time.perf_counter() - t0:.0f} s ===", flush=True)
    for f in failed:
        print(f"SUITE FAILED {f}")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
