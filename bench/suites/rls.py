"""rls: a point lookup and a group-by under a row-level security policy (and a column mask) vs the
same statements without them, same server, same run (issue 31: within 1.1x).

The lake (a fresh embedded one, built here): demo.tt, 1,000,000 rows (id, city, fare) in four
commits. Roles: the superuser `bench` (exempt from policies: the baseline) and `analyst`, with
SELECT and a policy `USING (fare >= 0)`, which every row meets, so both see the same rows and
answers are compared. Peers, interleaved per iteration, one psycopg connection each:

- `no policy`: `bench`;
- `policy`: `analyst` (the statement gets the policy's condition under a security barrier);
- `policy + mask`: `masked`, as `analyst` plus a mask on `city` that shows it unchanged
  (`USING (city)`), so the mask's projection is paid and the answers still equal.
"""

from __future__ import annotations

import contextlib
import random
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
BASE, POLICY, MASKED = "no policy", "policy", "policy + mask"
PEERS = (BASE, POLICY, MASKED)


def _id(rng: random.Random) -> dict[str, int]:
    return {"id": rng.randint(1, ROWS)}


POINT = Query("point", "point lookup", "select * from demo.tt where id = {id}", 50, 10, _id)
# The same lookup as applications send it: one server-side prepared statement, the id bound.
PREPARED = Query("prepared", "point lookup, prepared ($1)", "prepared:{id}", 50, 10, _id)
GROUP = Query("group", "group-by over 1M rows", "select city, count(*), sum(fare) from demo.tt group by city order by city",
              10, 3)


def _peer_class() -> type:
    from bench.peers.sql import PgwirePeer

    class Peer(PgwirePeer):
        """psycopg; a `prepared:<id>` text runs the lookup as a prepared statement with $1 bound."""

        def run(self, sql: str) -> list[tuple]:
            if sql.startswith("prepared:"):
                return self.conn.execute("select * from demo.tt where id = %s", (int(sql[9:]),),
                                         prepare=True).fetchall()
            return super().run(sql)

    return Peer


def _build(data_dir: Path) -> None:
    from bench.datasets import cities_table
    from icegres.engine.catalog import Lakehouse

    cities_table(Lakehouse.embedded(data_dir), ROWS, SEED)


def run(opts: Any) -> dict[str, Any]:
    import psycopg

    from bench import datasets
    from bench.pgwire_read import Server

    report: dict[str, Any] = {"suite": "rls", "section": "rls", **provenance(opts.command)}
    rounds, warmup = opts.rounds_or(3 if opts.quick else 10), 1 if opts.quick else 2
    with contextlib.ExitStack() as stack:
        tmp = Path(stack.enter_context(tempfile.TemporaryDirectory(prefix="icegres-bench-rls-")))
        data_dir = tmp / "lake"
        print("[rls] building demo.tt (1M rows) ...", flush=True)
        t0 = time.perf_counter()
        _build(data_dir)
        build_s = time.perf_counter() - t0
        server = Server(data_dir, datasets.DATA_DIR / "logs" / "rls.log")
        server.start()
        stack.callback(server.stop)
        server.wait_ready("select 1")
        with psycopg.connect(server.conninfo, autocommit=True) as c:
            for sql in ("CREATE ROLE analyst LOGIN", "CREATE ROLE masked LOGIN",
                        "GRANT USAGE ON SCHEMA demo TO analyst, masked",
                        "GRANT SELECT ON demo.tt TO analyst, masked",
                        "ALTER TABLE demo.tt ENABLE ROW LEVEL SECURITY",
                        "CREATE POLICY every_fare ON demo.tt TO analyst, masked USING (fare >= 0)",
                        "CREATE MASK same_city ON demo.tt (city) TO masked USING (city)"):
                c.execute(sql)
        peer = _peer_class()
        peers = [peer(server.conninfo, BASE),
                 peer(server.conninfo.replace("user=bench", "user=analyst"), POLICY),
                 peer(server.conninfo.replace("user=bench", "user=masked"), MASKED)]
        for p in peers:
            stack.callback(p.close)
        meter = load_meter()
        res = run_interleaved(peers, [POINT, PREPARED, GROUP], rounds, warmup, opts.quick, SEED, reference=BASE)
        report["load"] = meter.finish()

    summary: dict[str, Any] = {}
    rows = []
    for q in (POINT, PREPARED, GROUP):
        base = res.of(BASE, q.key)
        for peer in PEERS:
            samples = res.of(peer, q.key)
            p50 = percentile([s for _, s in samples], 50) * 1e3
            ratio = round_ratio(samples, base) if peer != BASE else None
            summary[f"{q.key}_{peer.replace(' ', '_').replace('+', 'and')}_p50_ms"] = p50
            if ratio is not None:
                summary[f"{q.key} {peer} / no policy"] = ratio
            rows.append([q.label if peer == BASE else "", peer, fmt_ms(p50),
                         fmt_ms(percentile([s for _, s in samples], 99) * 1e3), fmt_x(ratio) if ratio else ""])
    report["title"] = "rls: statements under a row-level security policy and a column mask vs without"
    report["facts"] = {
        "Data": f"demo.tt {ROWS:,} rows in 4 commits (built in {build_s:.0f} s)",
        "Peers, same run, interleaved per iteration": "one `icegres serve`, psycopg: the superuser (exempt), "
                                                      "a role under `USING (fare >= 0)`, and one also under a mask",
        "Rounds": f"{rounds} measured (+{warmup} warm-up); ratios are medians of per-round ratios of per-round medians",
    }
    report["tables"] = [{
        "title": "Latency",
        "columns": ["statement", "peer", "p50 ms", "p99 ms", "/ no policy"],
        "align": "llrrr",
        "rows": rows,
        "notes": ["Target (issue 31): a point lookup and the group-by under an RLS policy within 1.1x of without it.",
                  "A literal statement is rewritten for the role's policy each time (parse, wrap, write out: "
                  "about 1 ms); a prepared one once per session (the secured statement is cached by text)."],
    }]
    report["summary"] = summary
    report["gate"] = {f"rls {q.key}: policy / none": summary[f"{q.key} {POLICY} / no policy"]
                      for q in (POINT, PREPARED, GROUP)}
    report["gate_better"] = {k: "lower" for k in report["gate"]}
    report["errors"], report["mismatches"] = res.errors, res.mismatches
    write_report(report, opts.write)
    return report
