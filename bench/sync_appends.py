"""Concurrent synchronous appends (issue 25): N autocommit writers against one, same server, same run.

    .venv/bin/python -m bench.sync_appends [--rounds 3] [--seconds 5] [--writers 8] [--base REV]

Every 1-row autocommit INSERT on the synchronous path (no --write-buffer-ms) is one Iceberg commit
before its acknowledgement. Issue 25: with several writers on one table those commits collided,
and 35% of the INSERTs failed with 40001; the write_ladder run of 2026-12-04 measured 8 writers
at 0.12x the statements/s of one. This harness measures exactly that, beside the same tree's
ancestor in the same run:

- ``icegres``: `icegres serve` of this working tree;
- ``base``: `icegres serve` of REV (default: the merge base of HEAD and main), exported with
  `git archive` into a temporary directory and run from there: the code before the change;
- ``--also REV`` (repeatable): more revisions the same way, each a peer named by its short hash.

Each peer is one server on its own fresh embedded lake (SQLite catalog, local warehouse), alive for
the whole run. Per round, peers in rotating order, each runs two cells on a fresh table
`(id bigint, v text)`: 1 writer, then `--writers` writers, each for `--seconds`: one psycopg
connection per writer (opened before timing), `insert into t values (%s, %s)` with a unique id,
back to back; an error is counted by SQLSTATE and the writer goes on with its next id (no retry).
After a cell the table's snapshots (pyiceberg on the peer's catalog) count its commits, and
`count(*)`/`sum(id)` over the wire must equal the acknowledged ids (checked, reported).

Figures: statements/s = acknowledged INSERTs / the cell's wall time; its scaling = the N-writer
cell's statements/s / the 1-writer cell's, per round, median over rounds. Target (issue 25): on
`icegres`, N writers >= 1x the statements/s of one, with 0 failures. Writes
bench/results/<date>-sync_appends.json and the `sync_appends` section of bench/SCORECARD.md.
"""

from __future__ import annotations

import argparse
import contextlib
import os
import shutil
import subprocess
import sys
import tempfile
import threading
import time
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from bench.harness import (
    REPO_DIR,
    fmt_ms,
    fmt_x,
    load_meter,
    median,
    percentile,
    provenance,
    rotation,
    write_report,
)
from bench.pgwire_read import free_port

READY_TIMEOUT_S = 90


# --- one server per peer ------------------------------------------------------------------------


class PeerServer:
    """`python -m icegres serve` run from `tree` (this checkout, or an exported revision)."""

    def __init__(self, name: str, tree: Path, root: Path) -> None:
        self.name = name
        self.tree = tree
        self.data_dir = root / name / "data"
        self.log_path = root / name / "icegres.log"
        self.port = free_port()
        self.proc: subprocess.Popen[bytes] | None = None

    @property
    def conninfo(self) -> str:
        return f"host=127.0.0.1 port={self.port} dbname=icegres user=bench connect_timeout=10"

    def start(self) -> None:
        self.data_dir.mkdir(parents=True, exist_ok=True)
        subprocess.run([sys.executable, "-m", "compileall", "-q", str(self.tree / "icegres")], check=True)
        env = {**os.environ, "PYTHONPATH": str(self.tree)}
        cmd = [sys.executable, "-m", "icegres", "serve", "--data-dir", str(self.data_dir),
               "--host", "127.0.0.1", "--port", str(self.port)]
        with self.log_path.open("wb") as log:
            # cwd = the tree: `-m` puts it first on sys.path, before any installed icegres.
            self.proc = subprocess.Popen(cmd, cwd=self.tree, env=env, stdout=log, stderr=subprocess.STDOUT,
                                         stdin=subprocess.DEVNULL)

    def wait_ready(self) -> None:
        import psycopg

        deadline = time.monotonic() + READY_TIMEOUT_S
        while time.monotonic() < deadline:
            assert self.proc is not None
            if self.proc.poll() is not None:
                raise RuntimeError(f"{self.name}: icegres serve exited:\n{self.log_tail()}")
            try:
                with psycopg.connect(self.conninfo, autocommit=True) as conn:
                    conn.execute("select 1")
                    return
            except psycopg.OperationalError:
                time.sleep(0.05)
        raise RuntimeError(f"{self.name}: server did not start:\n{self.log_tail()}")

    def log_tail(self, n: int = 40) -> str:
        with contextlib.suppress(OSError):
            return "\n".join(self.log_path.read_text(errors="replace").splitlines()[-n:])
        return ""

    def execute(self, *sql: str) -> list[Any]:
        import psycopg

        out = []
        with psycopg.connect(self.conninfo, autocommit=True) as conn:
            for s in sql:
                cur = conn.execute(s)
                out.append(cur.fetchall() if cur.description else None)
        return out

    def snapshots(self, table: str) -> int:
        """Commits the table has had: its snapshot count, read with pyiceberg from the catalog."""
        from pyiceberg.catalog import load_catalog

        data = self.data_dir.resolve()
        catalog = load_catalog("icegres", type="sql", uri=f"sqlite:///{data / 'catalog.db'}",
                               warehouse=(data / "warehouse").as_uri())
        ns, name = table.split(".")
        return len(catalog.load_table((ns, name)).metadata.snapshots)

    def stop(self) -> None:
        if self.proc is not None and self.proc.poll() is None:
            self.proc.terminate()
            try:
                self.proc.wait(timeout=20)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait(timeout=10)
        self.proc = None


def export_tree(rev: str, root: Path) -> Path:
    """`rev`'s icegres package and pyproject.toml in a directory of their own."""
    out = root / f"tree-{rev[:12]}"
    out.mkdir(parents=True)
    archive = subprocess.run(["git", "archive", rev, "icegres", "pyproject.toml"], cwd=REPO_DIR,
                             capture_output=True, check=True).stdout
    subprocess.run(["tar", "-x", "-C", str(out)], input=archive, check=True)
    return out


def resolve_rev(rev: str | None) -> str:
    if rev is None:
        rev = subprocess.run(["git", "merge-base", "HEAD", "main"], cwd=REPO_DIR, capture_output=True,
                             text=True, check=True).stdout.strip()
    return subprocess.run(["git", "rev-parse", "--short", rev], cwd=REPO_DIR, capture_output=True, text=True,
                          check=True).stdout.strip()


# --- one cell: k writers for s seconds ----------------------------------------------------------


@dataclass
class Cell:
    writers: int
    seconds: float
    latencies_ms: list[float] = field(default_factory=list)
    acked_ids: list[int] = field(default_factory=list)
    failures: Counter[str] = field(default_factory=Counter)
    commits: int = 0
    table_rows: int = 0
    table_sum: int = 0

    @property
    def per_second(self) -> float:
        return len(self.acked_ids) / self.seconds if self.seconds > 0 else 0.0

    @property
    def exact(self) -> bool:
        """The table holds exactly the acknowledged rows."""
        return (self.table_rows, self.table_sum) == (len(self.acked_ids), sum(self.acked_ids))


def run_cell(server: PeerServer, table: str, writers: int, seconds: float) -> Cell:
    import psycopg

    server.execute(f"create table {table} (id bigint, v text)")
    conns = [psycopg.connect(server.conninfo, autocommit=True) for _ in range(writers)]
    sql = f"insert into {table} values (%s, %s)"
    lat: list[list[float]] = [[] for _ in range(writers)]
    ids: list[list[int]] = [[] for _ in range(writers)]
    failures: list[Counter[str]] = [Counter() for _ in range(writers)]
    errors: list[BaseException] = []
    start = threading.Barrier(writers + 1)
    stop_at = [0.0]

    def work(w: int) -> None:
        conn = conns[w]
        start.wait()
        i = 0
        while True:
            t = time.perf_counter()
            if t >= stop_at[0]:
                return
            row_id = w * 10_000_000 + i
            i += 1
            try:
                conn.execute(sql, (row_id, "x"))
            except psycopg.Error as exc:
                failures[w][getattr(exc, "sqlstate", None) or type(exc).__name__] += 1
                if conn.closed:
                    errors.append(exc)
                    return
                continue
            except BaseException as exc:  # noqa: BLE001 - reported by the caller
                errors.append(exc)
                return
            lat[w].append((time.perf_counter() - t) * 1000)
            ids[w].append(row_id)

    threads = [threading.Thread(target=work, args=(w,), daemon=True) for w in range(writers)]
    for t in threads:
        t.start()
    stop_at[0] = time.perf_counter() + seconds
    t0 = time.perf_counter()
    start.wait()
    for t in threads:
        t.join()
    elapsed = time.perf_counter() - t0
    for c in conns:
        with contextlib.suppress(Exception):
            c.close()
    if errors:
        raise errors[0]
    cell = Cell(writers, elapsed, [x for xs in lat for x in xs], [x for xs in ids for x in xs],
                sum(failures, Counter()))
    ((rows, total),) = server.execute(f"select count(*), coalesce(sum(id), 0) from {table}")[0]
    cell.table_rows, cell.table_sum = int(rows), int(total)
    cell.commits = server.snapshots(table)
    return cell


# --- summary ------------------------------------------------------------------------------------


def summarise(cells: dict[str, dict[int, dict[int, Cell]]], writers: int) -> dict[str, Any]:
    out: dict[str, Any] = {}
    for peer, by_w in cells.items():
        per_w: dict[str, Any] = {}
        for k, rounds in by_w.items():
            measured = sorted(r for r in rounds if r >= 0)
            flat = [x for r in measured for x in rounds[r].latencies_ms]
            acked = sum(len(rounds[r].acked_ids) for r in measured)
            commits = sum(rounds[r].commits for r in measured)
            per_w[str(k)] = {
                "per_second": median(rounds[r].per_second for r in measured),
                "p50_ms": percentile(flat, 50) if flat else None,
                "p95_ms": percentile(flat, 95) if flat else None,
                "acked": acked,
                "failures": dict(sum((rounds[r].failures for r in measured), Counter())),
                "commits": commits,
                "rows_per_commit": acked / commits if commits else None,
                "exact": all(rounds[r].exact for r in measured),
                "rounds": {r: {"per_second": rounds[r].per_second, "seconds": rounds[r].seconds,
                               "acked": len(rounds[r].acked_ids), "failures": dict(rounds[r].failures),
                               "commits": rounds[r].commits, "table_rows": rounds[r].table_rows,
                               "exact": rounds[r].exact,
                               "p50_ms": percentile(rounds[r].latencies_ms, 50) if rounds[r].latencies_ms else None}
                           for r in measured},
            }
        one, many = by_w.get(1, {}), by_w.get(writers, {})
        ratios = [many[r].per_second / one[r].per_second for r in many
                  if r >= 0 and r in one and one[r].per_second > 0]
        out[peer] = {"writers": per_w, "scaling": median(ratios) if ratios else None,
                     "scaling_rounds": ratios}
    return out


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--rounds", type=int, default=3, help="measured rounds (plus one warm-up round)")
    parser.add_argument("--seconds", type=float, default=5.0, help="duration of each cell")
    parser.add_argument("--writers", type=int, default=8)
    parser.add_argument("--base", default=None, help="the revision of the `base` peer (default: merge-base HEAD main)")
    parser.add_argument("--no-base", action="store_true", help="measure this tree alone")
    parser.add_argument("--also", action="append", default=[], metavar="REV",
                        help="another revision to run beside them, as a peer named by its short hash")
    parser.add_argument("--no-write", action="store_true", help="print only; no results file or scorecard")
    args = parser.parse_args(argv)
    argv_shown = sys.argv[1:] if argv is None else argv
    prov = provenance((".venv/bin/python -m bench.sync_appends " + " ".join(argv_shown)).strip())
    root = Path(tempfile.mkdtemp(prefix="icegres-sync-appends-"))
    base_rev = None if args.no_base else resolve_rev(args.base)
    servers: list[PeerServer] = [PeerServer("icegres", REPO_DIR, root)]
    if base_rev is not None:
        servers.append(PeerServer("base", export_tree(base_rev, root), root))
    also = [resolve_rev(rev) for rev in args.also]
    for rev in also:
        servers.append(PeerServer(rev, export_tree(rev, root), root))
    cells: dict[str, dict[int, dict[int, Cell]]] = {s.name: {} for s in servers}
    try:
        for s in servers:
            s.start()
        for s in servers:
            s.wait_ready()
            s.execute("create schema sa")
        meter = load_meter()
        t_start = time.perf_counter()
        for rnd in range(-1, args.rounds):  # round -1 warms every peer up, not counted
            t0 = time.perf_counter()
            shown = []
            for s in rotation(servers, rnd + 1):
                for k in (1, args.writers):
                    table = f"sa.{'warm' if rnd < 0 else f'r{rnd}'}_w{k}"
                    cell = run_cell(s, table, k, args.seconds)
                    cells[s.name].setdefault(k, {})[rnd] = cell
                    shown.append(f"{s.name} {k}w {cell.per_second:.0f}/s"
                                 f"{' ' + str(dict(cell.failures)) if cell.failures else ''}"
                                 f"{'' if cell.exact else ' NOT EXACT'} ({cell.commits} commits)")
            label = "warm-up" if rnd < 0 else f"round {rnd + 1}/{args.rounds}"
            print(f"  {label} ({time.perf_counter() - t0:.0f}s): " + "; ".join(shown), flush=True)
        load = meter.finish()
        wall = time.perf_counter() - t_start
    finally:
        for s in servers:
            with contextlib.suppress(Exception):
                s.stop()
        shutil.rmtree(root, ignore_errors=True)

    summary = summarise(cells, args.writers)
    write_report(_report(prov, args, summary, load, wall, base_rev, also), write=not args.no_write)
    return 0


def _report(prov: dict[str, Any], args: Any, summary: dict[str, Any], load: dict[str, Any], wall: float,
            base_rev: str | None, also: list[str]) -> dict[str, Any]:
    k = args.writers
    rows = []
    for peer, s in summary.items():
        for w in ("1", str(k)):
            st = s["writers"][w]
            failures = ", ".join(f"{n} x {code}" for code, n in sorted(st["failures"].items())) or "0"
            rows.append([peer if w == "1" else "", w, f"{st['per_second']:.1f}", fmt_ms(st["p50_ms"]),
                         fmt_ms(st["p95_ms"]), st["acked"], failures, st["commits"],
                         f"{st['rows_per_commit']:.2f}" if st["rows_per_commit"] else "-",
                         "yes" if st["exact"] else "**NO**", fmt_x(s["scaling"]) if w != "1" else ""])
    ours = summary["icegres"]
    failed = sum(sum(ours["writers"][w]["failures"].values()) for w in ours["writers"])
    scale = ours["scaling"]
    verdict = scale is not None and scale >= 1.0 and failed == 0 and all(
        ours["writers"][w]["exact"] for w in ours["writers"])
    target = {
        "title": "Issue-25 target",
        "columns": ["target", "measured", "verdict"],
        "rows": [[f"{k} synchronous writers: statements/s >= 1x one writer's, 0 failures, every acked row in the table",
                  f"{fmt_x(scale)} (per round: {', '.join(fmt_x(x) for x in ours['scaling_rounds'])}), "
                  f"{failed} failures", "**pass**" if verdict else "**MISS**"]],
        "align": "lll",
    }
    table = {
        "title": f"1-row autocommit INSERTs into one table: 1 writer vs {k}, each for {args.seconds:g} s",
        "columns": ["peer", "writers", "stmts/s (median of rounds)", "p50 ms", "p95 ms", "acked", "failures",
                    "commits", "rows per commit", "table = acked rows", f"{k}w / 1w stmts/s"],
        "rows": rows, "align": "lrrrrrrrrlr",
        "notes": ["stmts/s and the scaling are medians over rounds of each round's value; p50/p95 pool every "
                  "measured round's acknowledged statements; failures are errors the writers got (not retried); "
                  "commits = the table's snapshots after the cell (rows per commit > 1: appends shared a commit); "
                  "`table = acked rows`: count(*) and sum(id) equal the acknowledged ids in every round."],
    }
    peers = "`icegres` (this tree)" + (f", `base` ({base_rev}: the tree before the change, exported "
                                       "with git archive)" if base_rev else "")
    peers += "".join(f", `{rev}` (that revision, exported the same way)" for rev in also)
    return {
        "section": "sync_appends",
        "title": f"sync_appends: {k} concurrent synchronous writers vs 1 on one table (issue 25)",
        **prov,
        "load": load,
        "facts": {
            "Peers, same run": (f"{peers}; one `icegres serve` each (no write buffer: every INSERT is an Iceberg "
                                "commit before its ack) on its own fresh embedded lake, alive for the whole run. "
                                "Client: psycopg 3 in this process, one thread and connection per writer."),
            "Rounds": (f"{args.rounds} measured + 1 warm-up; per round the peers in rotating order, each a "
                       f"1-writer cell then a {k}-writer cell of {args.seconds:g} s on a fresh table. "
                       f"Measured span {wall:.0f} s."),
        },
        "tables": [target, table],
        "summary": summary,
        "base_rev": base_rev,
        "also": also,
    }


if __name__ == "__main__":
    raise SystemExit(main())
