"""The scale curve: point, filter, join and group-by on demo.trips at 1M and 10M rows (50M with
--scale-50m), icegres over pgwire beside DuckDB + iceberg on the same tables, all in one run.

Each scale is its own embedded lake seeded by `icegres seed --rows N` (250k-row files sorted by id,
64k-row groups) with its own `icegres serve`; every round runs every scale and peer, so the curve is
not skewed by load drifting between scales. Flatness = median of per-round ratios of icegres's p50
at N rows to its p50 at 1M (the issue's goal: within 1.5x for point and selective queries).
"""

from __future__ import annotations

import contextlib
import random
from typing import Any

from bench import datasets
from bench.harness import (
    PLOTS_DIR,
    Query,
    fmt_ms,
    fmt_x,
    line_plot,
    load_meter,
    provenance,
    round_ratio,
    run_interleaved,
    summarise,
    write_report,
)

BASE = 1_000_000
SEED = 20261204
KINDS = {
    "point": ("point lookup", "select * from demo.trips where id = {id}", 10, 5),
    "filter": ("selective filter", "select count(*), avg(fare) from demo.trips where id between "
               "{lo} and {hi} and passengers = 2", 6, 3),
    "groupby": ("group-by", "select city, count(*), avg(fare), sum(distance) from demo.trips "
                "group by city", 2, 1),
    "join": ("join", "select c.country, count(*), avg(t.fare) from demo.trips t join demo.cities c "
             "on t.city = c.city group by c.country", 2, 1),
}


def _tag(rows: int) -> str:
    return f"{rows // 1_000_000}M"


def _draw(rows: int) -> Any:
    def draw(rng: random.Random) -> dict[str, int]:
        lo = rng.randint(1, rows - 5000)
        return {"id": rng.randint(1, rows), "lo": lo, "hi": lo + 5000}
    return draw


def run(opts: Any) -> list[dict[str, Any]]:
    from bench.peers.sql import DuckPeer, PgwirePeer
    from bench.pgwire_read import Server

    scales = (BASE, 10_000_000) + ((50_000_000,) if opts.scale_50m else ())
    report: dict[str, Any] = {"suite": "scale", "section": "scale", **provenance(opts.command)}
    rounds = opts.rounds_or(3 if opts.quick else 8)
    lakes = {n: datasets.trips(n) for n in scales}
    queries: list[Query] = []
    for n in scales:
        pg, duck = f"pgwire {_tag(n)}", f"duckdb {_tag(n)}"
        for k, (label, sql, iters, quick) in KINDS.items():
            queries.append(Query(f"{k}@{_tag(n)}", f"{label} {_tag(n)}", sql, iters, quick,
                                 _draw(n), only=(pg, duck)))
    with contextlib.ExitStack() as stack:
        peers: list[Any] = []
        for n, lake in lakes.items():
            server = Server(lake, datasets.DATA_DIR / "logs" / f"scale-{_tag(n)}.log")
            server.start()
            stack.callback(server.stop)
            server.wait_ready("select 1")
            peers += [PgwirePeer(server.conninfo, f"pgwire {_tag(n)}"),
                      DuckPeer(datasets.metadata_locations(lake, ("demo",)), f"duckdb {_tag(n)}")]
        for p in peers:
            stack.callback(p.close)
        print(f"[scale] {', '.join(_tag(n) for n in scales)}; {rounds} rounds", flush=True)
        meter = load_meter()
        res = run_interleaved(peers, queries, rounds, 1, opts.quick, SEED)
        report["load"] = meter.finish()
    # The cross-peer check compares pgwire with duckdb per scale (`only` keeps them apart).
    names = [p.name for p in peers]
    summary = {}
    for n in scales:
        pg, duck = f"pgwire {_tag(n)}", f"duckdb {_tag(n)}"
        summary.update(summarise(res, [f"{k}@{_tag(n)}" for k in KINDS], (pg, duck), pg, (duck,)))
    rows, series, gate = [], {}, {}
    for k, (label, *_rest) in KINDS.items():
        for n in scales:
            t = _tag(n)
            e = summary[f"{k}@{t}"]
            pg, duck = e["peers"].get(f"pgwire {t}", {}), e["peers"].get(f"duckdb {t}", {})
            flat = round_ratio(res.of(f"pgwire {t}", f"{k}@{t}"), res.of(f"pgwire {_tag(BASE)}",
                                                                        f"{k}@{_tag(BASE)}"))
            dflat = round_ratio(res.of(f"duckdb {t}", f"{k}@{t}"), res.of(f"duckdb {_tag(BASE)}",
                                                                        f"{k}@{_tag(BASE)}"))
            r = e["ratios"].get(f"pgwire {t}/duckdb {t}")
            rows.append([label if n == BASE else "", f"{n:,}", fmt_ms(pg.get("p50_ms")),
                         fmt_ms(pg.get("p95_ms")), fmt_ms(duck.get("p50_ms")), fmt_x(r),
                         fmt_x(flat) if n != BASE else "", fmt_x(dflat) if n != BASE else ""])
            series.setdefault(f"icegres {label}", []).append((n, pg.get("p50_ms")))
            series.setdefault(f"duckdb {label}", []).append((n, duck.get("p50_ms")))
            if n != BASE and flat is not None:
                gate[f"{k}: icegres {t}/1M"] = flat
            if r is not None:
                gate[f"{k}@{t}: pgwire/duckdb"] = r
    top = _tag(scales[-1])
    verdicts = []
    for k in ("point", "filter"):
        f = gate.get(f"{k}: icegres {top}/1M")
        if f is not None:
            verdicts.append(f"{k} {f:.2f}x -> **{'pass' if f <= 1.5 else 'miss'}**")
    report.update(
        title="scale curve: demo.trips at " + " / ".join(_tag(n) for n in scales)
              + " rows, icegres over pgwire vs DuckDB",
        facts={
            "Data": "`icegres seed --rows N` per scale (250k-row files sorted by id, 64k-row groups of page-indexed 8192-row pages)"
                    + ("" if opts.scale_50m else "; 50M only with `--scale-50m` (slow to build and "
                       "run on this 2-core machine)"),
            "Peers": "pgwire = one `icegres serve` per scale + psycopg 3; duckdb = DuckDB 1.5.5 "
                     "`iceberg_scan` on the same metadata files; all scales interleaved in every round",
            "Rounds": f"{rounds} (+1 warm-up, answers checked pgwire vs duckdb per scale)",
            "Target (flat within 1.5x from 1M, point and selective)": ", ".join(verdicts) or "—",
        },
        tables=[{"title": "Scale", "columns": [
            "query", "rows", "pgwire p50 ms", "pgwire p95 ms", "DuckDB p50 ms", "pgwire / DuckDB",
            "pgwire vs 1M", "DuckDB vs 1M"], "rows": rows, "align": "lrrrrrrr"}],
        summary=summary, gate=gate, errors=res.errors, mismatches=res.mismatches,
        samples_ms={p: {q: [[r, round(s * 1e3, 4)] for r, s in v] for q, v in by.items()}
                    for p, by in res.data.items()}, peers=names,
    )
    if opts.write:
        report["plots"] = [line_plot(series, PLOTS_DIR / "scale.png",
                                     "scale curve: p50 by table size (same run)", "rows in demo.trips",
                                     "p50 ms (log)")]
    write_report(report, opts.write)
    return [report]
