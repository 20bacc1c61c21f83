"""compaction: scans of a table of 2,000 one-row files before and after compaction (and after a
manifest rewrite alone), against the same rows written fresh; 1-row INSERT commit latency before
and after rewrite_manifests, and into the fresh table. One server, same run, peers interleaved per iteration (issue 30).

The lake (a fresh embedded one, built here): four tables of the same 2,000 rows (id, v):
- `demo.small`, `demo.small_m`, `demo.small_c`: 2,000 one-row Parquet files, each listed in a
  manifest of its own, as 2,000 one-row INSERTs leave a table (built in one snapshot, because
  2,000 real commits take ~30 min here: pyiceberg's append grows to ~1 s at 500 snapshots. So
  the history is one snapshot, not 2,000: what is measured is what the files and manifests cost);
- `demo.fresh`: the same rows in one append (one file, one manifest).
Then, through the server, `CALL system.rewrite_manifests('demo.small_m')` (2,000 manifests -> 1)
and `CALL system.rewrite_data_files('demo.small_c')` (2,000 files -> 1), each timed once.

Peers (one `icegres serve`, psycopg), each the same text on its own table:
`before` = demo.small, `manifests rewritten` = demo.small_m, `compacted` = demo.small_c,
`fresh` = demo.fresh. Queries: a point lookup `where id = {id}` and a full scan
`count(*), sum(v), min(id), max(id)`.

Commit latency, after the scans: 1-row INSERTs into each peer's table, rotating, each a commit
(autocommit, no write buffer).

Targets (issue 30): after compaction within 1.1x of fresh; commit cost after a manifest rewrite
flat, i.e. the INSERT into the rewritten table no slower than one into a fresh table's.
"""

from __future__ import annotations

import contextlib
import random
import statistics
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

FILES = 2000
SEED = 20261206
BEFORE, MANIFESTS, COMPACTED, FRESH = "before", "manifests rewritten", "compacted", "fresh"
TABLES = {BEFORE: "demo.small", MANIFESTS: "demo.small_m", COMPACTED: "demo.small_c", FRESH: "demo.fresh"}


def _id(rng: random.Random) -> dict[str, int]:
    return {"id": rng.randrange(FILES)}


QUERIES = [
    Query("point", "point lookup", "select id, v from demo.small where id = {id}", 20, 5, _id),
    Query("scan", "full scan", "select count(*), sum(v), min(id), max(id) from demo.small", 5, 2),
]


def _peer_class() -> type:
    from bench.peers.sql import PgwirePeer

    class TablePeer(PgwirePeer):
        """The same text on another table of the same rows."""

        def __init__(self, conninfo: str, name: str) -> None:
            super().__init__(conninfo, name)
            self.table = TABLES[name]

        def run(self, sql: str) -> list[tuple]:
            return super().run(sql.replace("demo.small", self.table))

    return TablePeer


def _build(data_dir: Path) -> None:
    """The four tables of the docstring."""
    import pyarrow as pa
    from pyiceberg.io.pyarrow import _dataframe_to_data_files
    from pyiceberg.manifest import ManifestEntry, ManifestEntryStatus
    from pyiceberg.table.snapshots import Operation
    from pyiceberg.table.update.snapshot import _FastAppendFiles

    from icegres.engine.catalog import Lakehouse

    class ManifestPerFile(_FastAppendFiles):
        """A fast append listing each added file in a manifest of its own, as one commit each would."""

        def _manifests(self) -> list[Any]:
            out = []
            for data_file in self._added_data_files:
                with self.new_manifest_writer(spec=self._transaction.table_metadata.spec()) as writer:
                    writer.add(ManifestEntry.from_args(status=ManifestEntryStatus.ADDED, snapshot_id=self._snapshot_id,
                                                       sequence_number=None, file_sequence_number=None,
                                                       data_file=data_file))
                out.append(writer.to_manifest_file())
            return out + self._existing_manifests()

    lh = Lakehouse.embedded(data_dir)
    lh.create_namespace_if_missing("demo")
    schema = pa.schema([("id", pa.int64()), ("v", pa.float64())])
    rows = pa.table({"id": pa.array(range(FILES), pa.int64()), "v": pa.array([i * 0.5 for i in range(FILES)])},
                    schema=schema)
    for name in ("small", "small_m", "small_c"):
        table = lh.create_table("demo", name, schema)
        files = [f for i in range(FILES) for f in _dataframe_to_data_files(table.metadata, rows.slice(i, 1), table.io)]
        tx = table.transaction()
        producer = ManifestPerFile(Operation.APPEND, tx, table.io)
        for data_file in files:
            producer.append_data_file(data_file)
        producer.commit()
        tx.commit_transaction()
    lh.create_table("demo", "fresh", schema).append(rows)


COMMIT_PEERS = (BEFORE, MANIFESTS, COMPACTED, FRESH)


def _inserts(conninfo: str, n: int) -> dict[str, list[float]]:
    """n 1-row INSERTs into each peer's table, rotating who goes first."""
    import psycopg

    from bench.harness import rotation

    out: dict[str, list[float]] = {p: [] for p in COMMIT_PEERS}
    with psycopg.connect(conninfo, autocommit=True) as c:
        for i in range(n + 2):
            for peer in rotation(COMMIT_PEERS, i):
                t0 = time.perf_counter()
                c.execute(f"insert into {TABLES[peer]} values ({FILES + i}, 0.25)")
                if i >= 2:  # two warm-up commits each
                    out[peer].append(time.perf_counter() - t0)
    return out


def _files_and_manifests(conninfo: str) -> dict[str, tuple[int, int]]:
    """Each peer's table: (data files, manifests) of its head, from its metadata tables."""
    import psycopg

    from bench.peers.sql import metadata_counts

    out = {}
    with psycopg.connect(conninfo, autocommit=True) as c:
        for peer, table in TABLES.items():
            counts = metadata_counts(c, table, ("files", "manifests"))
            out[peer] = (counts["files"], counts["manifests"])
    return out


def run(opts: Any) -> dict[str, Any]:
    import psycopg

    from bench import datasets
    from bench.pgwire_read import Server

    report: dict[str, Any] = {"suite": "compaction", "section": "compaction", **provenance(opts.command)}
    rounds, warmup = opts.rounds_or(3 if opts.quick else 8), 1
    inserts_n = 8 if opts.quick else 40
    with contextlib.ExitStack() as stack:
        tmp = Path(stack.enter_context(tempfile.TemporaryDirectory(prefix="icegres-bench-compaction-")))
        data_dir = tmp / "lake"
        print(f"[compaction] building 3 tables of {FILES:,} one-row files (a manifest each) and demo.fresh ...",
              flush=True)
        t0 = time.perf_counter()
        _build(data_dir)
        build_s = time.perf_counter() - t0
        server = Server(data_dir, datasets.DATA_DIR / "logs" / "compaction.log")
        server.start()
        stack.callback(server.stop)
        server.wait_ready("select 1")
        before_counts = _files_and_manifests(server.conninfo)
        with psycopg.connect(server.conninfo, autocommit=True) as c:
            t0 = time.perf_counter()
            manifests_row = c.execute("call system.rewrite_manifests('demo.small_m')").fetchone()
            rewrite_manifests_s = time.perf_counter() - t0
            t0 = time.perf_counter()
            compact_row = c.execute("call system.rewrite_data_files('demo.small_c')").fetchone()
            compact_s = time.perf_counter() - t0
        after_counts = _files_and_manifests(server.conninfo)
        peer_class = _peer_class()
        peers = [peer_class(server.conninfo, name) for name in TABLES]
        for p in peers:
            stack.callback(p.close)
        meter = load_meter()
        res = run_interleaved(peers, QUERIES, rounds, warmup, opts.quick, SEED, reference=FRESH)
        commits = _inserts(server.conninfo, inserts_n)
        report["load"] = meter.finish()

    def p50(peer: str, key: str) -> float:
        return percentile([s for _, s in res.of(peer, key)], 50) * 1e3

    summary: dict[str, Any] = {
        "build_s": build_s, "rewrite_manifests_s": rewrite_manifests_s, "rewrite_data_files_s": compact_s,
        "rewrite_manifests_row": list(manifests_row), "rewrite_data_files_row": list(compact_row),
        "files_manifests_before": before_counts, "files_manifests_after": after_counts,
    }
    rows = []
    for key, label in (("point", "point lookup"), ("scan", "full scan")):
        fresh = res.of(FRESH, key)
        for peer in TABLES:
            samples = res.of(peer, key)
            summary[f"{key}_{peer}_p50_ms"] = p50(peer, key)
            ratio = round_ratio(samples, fresh)
            summary[f"{key}_{peer}/fresh"] = ratio
            files, manifests = after_counts[peer]
            rows.append([label if peer == BEFORE else "", peer, f"{files:,} / {manifests:,}", fmt_ms(p50(peer, key)),
                         fmt_ms(percentile([s for _, s in samples], 95) * 1e3), fmt_x(ratio)])
    commit_rows = []
    for peer in COMMIT_PEERS:
        samples = commits[peer]
        summary[f"insert_{peer}_p50_ms"] = statistics.median(samples) * 1e3
        files, manifests = after_counts[peer]
        commit_rows.append([peer, f"{files:,} / {manifests:,} -> +{inserts_n + 2}",
                            fmt_ms(statistics.median(samples) * 1e3),
                            fmt_ms(percentile(samples, 95) * 1e3), str(len(samples))])
    summary["insert_manifests/before"] = summary[f"insert_{MANIFESTS}_p50_ms"] / summary[f"insert_{BEFORE}_p50_ms"]
    summary["insert_manifests/fresh"] = summary[f"insert_{MANIFESTS}_p50_ms"] / summary[f"insert_{FRESH}_p50_ms"]
    summary["insert_compacted/fresh"] = summary[f"insert_{COMPACTED}_p50_ms"] / summary[f"insert_{FRESH}_p50_ms"]
    summary["insert_compacted/before"] = summary[f"insert_{COMPACTED}_p50_ms"] / summary[f"insert_{BEFORE}_p50_ms"]
    report["title"] = "compaction: 2,000 one-row files before and after rewrite_data_files / rewrite_manifests"
    report["facts"] = {
        "Data": f"{FILES:,} rows (id bigint, v double) per table: demo.small / small_m / small_c as {FILES:,} one-row "
                "files with a manifest each (one snapshot; see bench/suites/compaction.py), demo.fresh one "
                f"append (built in {build_s:.0f} s)",
        "Maintenance, through the server": f"`CALL system.rewrite_manifests('demo.small_m')` {rewrite_manifests_s:.2f} s "
                                           f"-> {tuple(manifests_row)}; `CALL system.rewrite_data_files('demo.small_c')` "
                                           f"{compact_s:.2f} s -> {tuple(compact_row)}",
        "Peers, same run, interleaved per iteration": "one `icegres serve`, psycopg; each peer runs the text on its "
                                                      "own table",
        "Rounds": f"{rounds} measured (+{warmup} warm-up); ratios are medians of per-round ratios of per-round "
                  "medians",
    }
    report["tables"] = [{
        "title": "Scans",
        "columns": ["query", "peer (table)", "files / manifests", "p50 ms", "p95 ms", "/ fresh"],
        "align": "llrrrr",
        "rows": rows,
        "notes": ["Target (issue 30): after compaction within 1.1x of fresh."],
    }, {
        "title": "1-row INSERT commit latency (autocommit, one commit each, rotating)",
        "columns": ["table", "files / manifests at the start", "p50 ms", "p95 ms", "n"],
        "align": "lrrrr",
        "rows": commit_rows,
        "notes": [f"p50 manifests rewritten / before: {fmt_x(summary['insert_manifests/before'])}; manifests "
                  f"rewritten / fresh: {fmt_x(summary['insert_manifests/fresh'])}; compacted / before: "
                  f"{fmt_x(summary['insert_compacted/before'])}; compacted / fresh: "
                  f"{fmt_x(summary['insert_compacted/fresh'])}. Each INSERT adds one file, one manifest and one "
                  "snapshot to its table; every table starts with one snapshot, so this separates what the "
                  "data files and the manifests cost a commit (snapshot history is expiry's part of issue 30)."],
    }]
    report["summary"] = summary
    report["gate"] = {"full scan: compacted / fresh": summary[f"scan_{COMPACTED}/fresh"],
                      "point lookup: compacted / fresh": summary[f"point_{COMPACTED}/fresh"]}
    report["gate_better"] = {k: "lower" for k in report["gate"]}
    report["errors"], report["mismatches"] = res.errors, res.mismatches
    write_report(report, opts.write)
    return report
