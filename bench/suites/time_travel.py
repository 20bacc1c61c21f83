"""time_travel: reading an old snapshot against reading the head, "t$snapshots" on a long history,
and a whole-lake branch, icegres vs DuckDB's iceberg_scan(snapshot_from_id => ...), same run.

The lake (a fresh embedded one, built here): demo.tt, 1,000,000 rows (id, city, fare) in four
commits; the fourth commit's snapshot is `old`. Then twenty commits of 1,000 new rows each, so
the head has 24 files and `old` 4. Peers, interleaved per iteration:

- `icegres head`: `select * from demo.tt where id = {id}` over pgwire;
- `icegres as of`: `select * from demo.tt FOR VERSION AS OF old where id = {id}`;
- `duckdb as of`: DuckDB 1.5.5 running the same text with `demo.tt FOR VERSION AS OF old` read as
  its view `demo.tt_old` = `iceberg_scan(<metadata>, snapshot_from_id => old)` (DuckDB has no
  AS OF syntax for Iceberg).

Target (issue 28): the time-travel lookup within 1.2x of the head lookup.

Also measured, one after another: `select count(*) from "demo.hist$snapshots"` on a table of
1,000 snapshots (target < 50 ms), and `lake_refs.cut` + `commit_moves` of a branch over 50
tables on the embedded catalog (target < 1 s), in process, plus `icegres branch create --all` as
a command (its process start included).
"""

from __future__ import annotations

import contextlib
import random
import statistics
import subprocess
import tempfile
import time
from pathlib import Path
from typing import Any

from bench.harness import (
    Query,
    fmt_ms,
    fmt_x,
    load_meter,
    percentile,
    provenance,
    round_ratio,
    run_interleaved,
    write_report,
)

ROWS = 1_000_000
SEED = 20261206
HEAD, AS_OF, DUCK = "icegres head", "icegres as of", "duckdb as of"
PEERS = (HEAD, AS_OF, DUCK)


def _id(rng: random.Random) -> dict[str, int]:
    return {"id": rng.randint(1, ROWS)}


HEAD_Q = Query("head", "point lookup at the head", "select * from demo.tt where id = {id}", 50, 10, _id,
               only=(HEAD,))
def _old_query(old: int) -> Query:
    return Query("as_of", "point lookup as of an old snapshot",
                 f"select * from demo.tt for version as of {old} where id = {{id}}", 50, 10, _id, only=(AS_OF, DUCK))


def _as_of_duck() -> type:
    from bench.peers.sql import DuckPeer

    class AsOfDuck(DuckPeer):
        """DuckDB reading icegres's `FOR VERSION AS OF` text through a view of the snapshot."""

        def __init__(self, spelled: str, view: str, *args: Any, **kwargs: Any) -> None:
            super().__init__(*args, **kwargs)
            self.spelled, self.view = spelled, view

        def run(self, sql: str) -> list[tuple]:
            return super().run(sql.replace(self.spelled, self.view))

    return AsOfDuck


def _build(data_dir: Path) -> tuple[int, str]:
    """demo.tt as the docstring says; (old snapshot id, current metadata location)."""
    import numpy as np
    import pyarrow as pa

    from bench.datasets import cities_table
    from icegres.engine.catalog import Lakehouse

    lh = Lakehouse.embedded(data_dir)
    table = cities_table(lh, ROWS, SEED)
    schema = pa.schema([("id", pa.int64()), ("city", pa.string()), ("fare", pa.float64())])
    cities = np.array(["Berlin", "Paris", "Lima", "Osaka", "Accra"])
    rng = np.random.default_rng(SEED + 1)
    old = table.metadata.current_snapshot_id
    for k in range(20):
        ids = np.arange(ROWS + k * 1000 + 1, ROWS + (k + 1) * 1000 + 1, dtype=np.int64)
        table.append(pa.table({"id": ids, "city": cities[ids % 5], "fare": rng.random(len(ids)) * 100}, schema=schema))
    hist = lh.create_table("demo", "hist", pa.schema([("id", pa.int64())]))
    for i in range(1000):
        hist.append(pa.table({"id": pa.array([i], pa.int64())}))
    for i in range(50):
        t = lh.create_table("demo", f"b{i:02d}", pa.schema([("id", pa.int64())]))
        t.append(pa.table({"id": pa.array([i], pa.int64())}))
    assert old is not None
    return old, lh.load_table("demo", "tt").metadata_location


def _timed(fn: Any, n: int) -> list[float]:
    out = []
    for _ in range(n):
        t0 = time.perf_counter()
        fn()
        out.append(time.perf_counter() - t0)
    return out


def run(opts: Any) -> dict[str, Any]:
    import psycopg

    from bench import datasets
    from bench.peers.sql import PgwirePeer
    from bench.pgwire_read import Server, icegres_command
    from icegres.engine import lake_refs
    from icegres.engine.catalog import Lakehouse

    report: dict[str, Any] = {"suite": "time_travel", "section": "time_travel", **provenance(opts.command)}
    rounds, warmup = opts.rounds_or(3 if opts.quick else 10), 1 if opts.quick else 2
    with contextlib.ExitStack() as stack:
        tmp = Path(stack.enter_context(tempfile.TemporaryDirectory(prefix="icegres-bench-tt-")))
        data_dir = tmp / "lake"
        print("[time_travel] building demo.tt (1M rows, 24 commits), demo.hist (1,000 snapshots), 50 tables ...",
              flush=True)
        t0 = time.perf_counter()
        old, location = _build(data_dir)
        build_s = time.perf_counter() - t0
        server = Server(data_dir, datasets.DATA_DIR / "logs" / "time_travel.log")
        server.start()
        stack.callback(server.stop)
        server.wait_ready("select 1")
        loc = location.removeprefix("file://")
        duck = _as_of_duck()(f"demo.tt for version as of {old}", "demo.tt_old", {}, DUCK, setup=(
            "create schema if not exists demo",
            f"create view demo.tt_old as select * from iceberg_scan('{loc}', snapshot_from_id => {old})"))
        peers = [PgwirePeer(server.conninfo, HEAD), PgwirePeer(server.conninfo, AS_OF), duck]
        for p in peers:
            stack.callback(p.close)
        meter = load_meter()
        res = run_interleaved(peers, [HEAD_Q, _old_query(old)], rounds, warmup, opts.quick, SEED, reference=AS_OF)
        with psycopg.connect(server.conninfo, autocommit=True) as c:
            assert c.execute('select count(*) from demo."hist$snapshots"').fetchone() == (1000,)
            snapshots = _timed(lambda: c.execute('select count(*) from demo."hist$snapshots"').fetchall(),
                               5 if opts.quick else 30)
        lh = Lakehouse.embedded(data_dir)
        keys = [("demo", f"b{i:02d}") for i in range(50)]

        def branch_once(n: list[int] = [0]) -> None:  # noqa: B006 - a counter across calls
            n[0] += 1
            tables = lake_refs.cut(lh, keys=keys)
            moves = [lake_refs.Move(k, f"p{n[0]}", t.metadata.current_snapshot_id, asserts=((f"p{n[0]}", None),))
                     for k, t in tables.items()]
            lake_refs.commit_moves(lh, tables, moves)

        branches = _timed(branch_once, 3 if opts.quick else 10)
        cli = _timed(lambda: subprocess.run(
            [*icegres_command(), "branch", "create", f"cli{time.monotonic_ns()}", "--namespace", "demo",
             "--data-dir", str(data_dir), "--log-level", "warning"], check=True, capture_output=True), 3)
        report["load"] = meter.finish()

    head = res.of(HEAD, "head")
    as_of = res.of(AS_OF, "as_of")
    duck_s = res.of(DUCK, "as_of")
    summary = {
        "head_p50_ms": percentile([s for _, s in head], 50) * 1e3,
        "as_of_p50_ms": percentile([s for _, s in as_of], 50) * 1e3,
        "duck_p50_ms": percentile([s for _, s in duck_s], 50) * 1e3,
        "as_of/head": round_ratio(as_of, head),
        "as_of/duckdb": round_ratio(as_of, duck_s),
        "snapshots_1000_p50_ms": statistics.median(snapshots) * 1e3,
        "branch_50_tables_p50_ms": statistics.median(branches) * 1e3,
        "branch_cli_p50_s": statistics.median(cli),
    }
    rows = [
        ["point lookup", HEAD, fmt_ms(summary["head_p50_ms"]), fmt_ms(percentile([s for _, s in head], 99) * 1e3), ""],
        ["", AS_OF, fmt_ms(summary["as_of_p50_ms"]), fmt_ms(percentile([s for _, s in as_of], 99) * 1e3),
         fmt_x(summary["as_of/head"])],
        ["", DUCK, fmt_ms(summary["duck_p50_ms"]), fmt_ms(percentile([s for _, s in duck_s], 99) * 1e3), ""],
        ['count(*) of "hist$snapshots" (1,000 snapshots)', "icegres", fmt_ms(summary["snapshots_1000_p50_ms"]),
         fmt_ms(max(snapshots) * 1e3), ""],
        ["branch over 50 tables, one commit (in process)", "icegres", fmt_ms(summary["branch_50_tables_p50_ms"]),
         fmt_ms(max(branches) * 1e3), ""],
        ["`icegres branch create --namespace demo` (52 tables, process start included)", "icegres",
         fmt_ms(summary["branch_cli_p50_s"] * 1e3), fmt_ms(max(cli) * 1e3), ""],
    ]
    report["title"] = "time_travel: a snapshot read vs a head read, metadata tables, whole-lake branches"
    report["facts"] = {
        "Data": f"demo.tt {ROWS:,} rows in 4 commits (the old snapshot), then 20 commits of 1,000 rows; "
                f"demo.hist 1,000 one-row commits; 50 one-row tables (built in {build_s:.0f} s)",
        "Peers, same run, interleaved per iteration": "icegres head / icegres as of = one `icegres serve`, psycopg; "
                                                      "duckdb as of = DuckDB 1.5.5 in process, iceberg_scan "
                                                      "with snapshot_from_id",
        "Rounds": f"{rounds} measured (+{warmup} warm-up), {HEAD_Q.quick_iters if opts.quick else HEAD_Q.iters} "
                  "lookups per peer per round; ratios are medians of per-round ratios of per-round medians",
    }
    report["tables"] = [{
        "title": "Latency",
        "columns": ["measure", "peer", "p50 ms", "p99 / max ms", "as of / head"],
        "align": "llrrr",
        "rows": rows,
        "notes": ["Targets (issue 28): as of / head within 1.2x; $snapshots of 1,000 snapshots under 50 ms; a "
                  "branch over 50 tables under 1 s on the embedded catalog."],
    }]
    report["summary"] = summary
    report["gate"] = {"time travel point lookup: as of / head": summary["as_of/head"]}
    report["gate_better"] = {"time travel point lookup: as of / head": "lower"}
    report["errors"], report["mismatches"] = res.errors, res.mismatches
    write_report(report, opts.write)
    return report
