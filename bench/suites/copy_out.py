"""COPY ... TO STDOUT of demo.trips (1M rows), text and CSV, to psycopg: icegres vs. its own
`SELECT *` text stream vs. PostgreSQL 15's COPY TO (and SELECT) of the same rows.

Six transfers, each to a fresh psycopg client process (as `pgwire_read`'s streams: the bench
process's heap would bill the client for garbage-collector passes), run back to back in every
round with the first one rotating:

- icegres `SELECT * FROM demo.trips` (text, `fetchall()`): the rate the issue compares COPY with;
- icegres `COPY demo.trips TO STDOUT` and `... (FORMAT csv)`, read whole by `for data in copy`;
- PostgreSQL 15 (`bench/peers/postgres.py`, loaded with the rows `icegres seed` writes) the same
  two COPYs and the same SELECT, to the same client.

The client times connect-free work only: execute (or COPY) to the last byte. The warm-up round
also checks that each COPY's lines from icegres are the very lines PostgreSQL writes (as sets:
neither orders the table) and that every transfer carried 1M rows. Ratios are medians over rounds
of that round's time ratio; the target is icegres COPY within 1.5x of icegres SELECT (text) and
of PostgreSQL's COPY, text and CSV.
"""

from __future__ import annotations

import contextlib
import json
import subprocess
import sys
from typing import Any

from bench import datasets
from bench.harness import (
    REPO_DIR,
    fmt_x,
    load_meter,
    median,
    provenance,
    rotation,
    round_ratio,
    short_error,
    write_report,
)
from icegres.engine.row_source import ENCODE_ROWS

ROWS = 1_000_000
TARGET_RATIO = 1.5
ICE, PG = "icegres", "postgres"
# (label, server, mode, SQL)
TRANSFERS = (
    ("icegres SELECT text", ICE, "select", "SELECT * FROM demo.trips"),
    ("icegres COPY text", ICE, "copy", "COPY demo.trips TO STDOUT"),
    ("icegres COPY csv", ICE, "copy", "COPY demo.trips TO STDOUT (FORMAT csv)"),
    ("postgres SELECT text", PG, "select", "SELECT * FROM demo.trips"),
    ("postgres COPY text", PG, "copy", "COPY demo.trips TO STDOUT"),
    ("postgres COPY csv", PG, "copy", "COPY demo.trips TO STDOUT (FORMAT csv)"),
)

# One transfer in a fresh process: prints [seconds, rows, client CPU s, CopyData messages,
# bytes, sha256 of the sorted lines or null]. Only execute/COPY to the last byte is timed.
_CLIENT = """
import hashlib, json, sys, time, psycopg
dsn, mode, sql, check = sys.argv[1], sys.argv[2], sys.argv[3], sys.argv[4] == "1"
with psycopg.connect(dsn, autocommit=True) as conn, conn.cursor() as cur:
    messages = size = 0
    kept = []
    t0, c0 = time.perf_counter(), time.process_time()
    if mode == "select":
        cur.execute(sql)
        rows = len(cur.fetchall())
    else:
        with cur.copy(sql) as copy:
            for data in copy:
                messages += 1
                size += len(data)
                if check:
                    kept.append(bytes(data))
        rows = cur.rowcount
    seconds, cpu = time.perf_counter() - t0, time.process_time() - c0
    digest = None
    if check and mode == "copy":
        digest = hashlib.sha256(b"\\n".join(sorted(b"".join(kept).splitlines()))).hexdigest()
    print(json.dumps([seconds, rows, cpu, messages, size, digest]))
"""


def _transfer(conninfo: str, mode: str, sql: str, check: bool) -> dict[str, Any]:
    out = subprocess.run(
        [sys.executable, "-c", _CLIENT, conninfo, mode, sql, "1" if check else "0"],
        capture_output=True, text=True, timeout=600, check=False,
    )
    if out.returncode != 0:
        raise RuntimeError(f"client failed: {out.stderr.strip()[-500:]}")
    seconds, rows, cpu, messages, size, digest = json.loads(out.stdout)
    return {"seconds": seconds, "rows": rows, "client_cpu_s": cpu, "messages": messages,
            "bytes": size, "digest": digest}


def encoders_in_process() -> dict[str, Any]:
    """CPU seconds of the row-by-row COPY encoder the vectorised one replaced (kept as the
    oracle in tests/unit/test_copy_out.py) and of the vectorised one, on the same 1M rows in
    the batches the server encodes, text and CSV; and whether their bytes are equal."""
    import gc
    import time

    from icegres.pg.clock import TextSettings
    from icegres.pg.copy_format import CopyFormat
    from icegres.pg.copy_out import encode_copy_rows
    from icegres.seed import trips_chunk
    from tests.unit.test_copy_out import row_by_row

    table = trips_chunk(1, ROWS)
    batches = table.to_batches(max_chunksize=ENCODE_ROWS)
    text = TextSettings()
    out: dict[str, Any] = {}
    for fmt_name, options in (("text", {}), ("csv", {"format": "csv"})):
        fmt = CopyFormat(options, is_from=False)
        fmt.columns(table.schema.names)
        gc.collect()
        c0 = time.process_time()
        new = b"".join(encode_copy_rows(b, fmt, text).data for b in batches)
        c1 = time.process_time()
        old = b"".join(row_by_row(b, fmt, text) for b in batches)
        c2 = time.process_time()
        out[fmt_name] = {"vectorised_cpu_s": c1 - c0, "row_by_row_cpu_s": c2 - c1,
                         "same_bytes": old == new, "bytes": len(new)}
    return out


def run(opts: Any) -> list[dict[str, Any]]:
    from bench.peers.postgres import load_trips, running_cluster, version
    from bench.pgwire_read import Server, wait_for_quiet

    report: dict[str, Any] = {"suite": "copy_out", "section": "copy_out", **provenance(opts.command)}
    rounds = opts.rounds_or(2 if opts.quick else 5)
    lake = datasets.trips(ROWS)
    samples: dict[str, list[tuple[int, float]]] = {label: [] for label, *_ in TRANSFERS}
    detail: dict[str, list[dict[str, Any]]] = {label: [] for label, *_ in TRANSFERS}
    errors: dict[str, str] = {}
    mismatches: list[str] = []
    with contextlib.ExitStack() as stack:
        # The server imports this checkout's icegres, whatever the venv's editable install names.
        server = Server(lake, datasets.DATA_DIR / "logs" / "copy_out.log",
                        {"PYTHONPATH": str(REPO_DIR)})
        server.start()
        stack.callback(server.stop)
        server.wait_ready("select count(*) from demo.trips")
        print("[copy_out] starting PostgreSQL 15 and loading demo.trips ...", flush=True)
        cluster = stack.enter_context(running_cluster())
        pg_load = load_trips(cluster.conninfo, ROWS)
        pg_version = version(cluster.conninfo)
        dsn = {ICE: server.conninfo, PG: cluster.conninfo}

        # Warm-up: every transfer once, the COPYs checked line for line against PostgreSQL's.
        digests: dict[str, str | None] = {}
        for label, who, mode, sql in TRANSFERS:
            try:
                got = _transfer(dsn[who], mode, sql, check=True)
            except Exception as exc:
                errors[label] = short_error(exc)
                continue
            digests[label] = got["digest"]
            if got["rows"] != ROWS:
                mismatches.append(f"{label}: {got['rows']} rows, expected {ROWS}")
        for fmt in ("text", "csv"):
            ours, theirs = digests.get(f"icegres COPY {fmt}"), digests.get(f"postgres COPY {fmt}")
            if ours is None or theirs is None or ours != theirs:
                mismatches.append(f"COPY {fmt}: icegres's lines differ from PostgreSQL's "
                                  f"(sha256 of sorted lines {ours} vs {theirs})")
        broken = {m.split(":", 1)[0] for m in mismatches} | set(errors)

        # On a shared 2-core machine: give other jobs a moment to finish before the measured span.
        report["others_share_before"] = wait_for_quiet(20 if opts.quick else 90)
        meter = load_meter()
        cpu0 = server.cpu_seconds()
        for rnd in range(rounds):
            for label, who, mode, sql in rotation(TRANSFERS, rnd):
                if label in broken:
                    continue
                before = server.cpu_seconds()
                try:
                    got = _transfer(dsn[who], mode, sql, check=False)
                except Exception as exc:
                    errors[label] = short_error(exc)
                    broken.add(label)
                    continue
                got["server_cpu_s"] = server.cpu_seconds() - before if who == ICE else None
                samples[label].append((rnd, got["seconds"]))
                detail[label].append(got)
            print(f"  round {rnd + 1}/{rounds}: " + ", ".join(
                f"{label} {samples[label][-1][1]:.2f}s" for label, *_ in TRANSFERS
                if samples[label] and samples[label][-1][0] == rnd), flush=True)
        report["load"] = meter.finish()
        report["server_cpu_s"] = server.cpu_seconds() - cpu0
    print("[copy_out] the row-by-row encoder it replaced vs the vectorised one, in-process ...",
          flush=True)
    encoders = encoders_in_process()
    for fmt, e in encoders.items():
        if not e["same_bytes"]:
            mismatches.append(f"encoders {fmt}: the vectorised bytes differ from the row-by-row ones")

    def ratio(a: str, b: str) -> float | None:
        return round_ratio(samples[a], samples[b])

    gate: dict[str, float] = {}
    target_rows = []
    for fmt in ("text", "csv"):
        for ref, what in (("icegres SELECT text", "icegres's own SELECT * (text)"),
                          (f"postgres COPY {fmt}", f"PostgreSQL 15's COPY TO ({fmt})")):
            r = ratio(f"icegres COPY {fmt}", ref)
            if r is not None:
                gate[f"COPY {fmt}: icegres seconds / {ref} seconds"] = r
            target_rows.append([f"COPY {fmt} vs {what}", f"<= {TARGET_RATIO}x time", fmt_x(r),
                                "—" if r is None else ("pass" if r <= TARGET_RATIO else "miss")])
    rows_table = []
    for label, who, _, sql in TRANSFERS:
        secs = [s for _, s in samples[label]]
        d = detail[label]
        if not secs:
            continue
        server_cpu = median(x["server_cpu_s"] for x in d) if who == ICE else None
        rows_table.append([
            label, f"`{sql}`", f"{ROWS / median(secs) / 1e3:,.0f}k", f"{ROWS / min(secs) / 1e3:,.0f}k",
            f"{median(secs):.2f}", "—" if server_cpu is None else f"{server_cpu:.2f}",
            f"{median(x['client_cpu_s'] for x in d):.2f}",
            f"{d[0]['messages']:,}" if d[0]["messages"] else "—",
            f"{d[0]['bytes'] / 2**20:.1f}" if d[0]["bytes"] else "—", len(secs),
        ])
    report.update(
        title="copy_out: COPY TO STDOUT of 1M rows to psycopg, icegres vs its SELECT and PostgreSQL 15",
        facts={
            "Data": "the embedded 1M-row lake (`icegres seed`: demo.trips, 8 columns incl. "
                    f"timestamptz); PostgreSQL {pg_version} loaded with the same rows "
                    f"({pg_load['load_s']} s, before the measured span)",
            "Peers, same run, interleaved": ", ".join(label for label, *_ in TRANSFERS)
            + "; each transfer in a fresh psycopg client process, timed from execute to the last byte",
            "Rounds": f"{rounds} (+1 warm-up that checks icegres's COPY lines equal PostgreSQL's, "
                      "text and CSV); ratios are medians of per-round time ratios",
        },
        tables=[
            {"title": "Targets", "columns": ["target", "goal", "measured", "verdict"],
             "rows": target_rows, "align": "llrl"},
            {"title": "Transfers", "columns": [
                "transfer", "statement", "rows/s (median)", "rows/s (best)", "seconds (median)",
                "server CPU s", "client CPU s", "CopyData messages", "MiB", "n"],
             "rows": rows_table, "align": "llrrrrrrrr",
             "notes": ["Server CPU is icegres's (psutil, per transfer); PostgreSQL's is not "
                       "measured. PostgreSQL sends one CopyData message per row, icegres "
                       "messages of ~256 KiB that end at row ends, so psycopg's client does a "
                       "million reads for PostgreSQL and a few hundred for icegres."]},
            {"title": "The encoder in-process (after the measured span)", "columns": [
                "format", "row-by-row CPU s", "vectorised CPU s", "speed-up", "same bytes", "MiB"],
             "rows": [[fmt, f"{e['row_by_row_cpu_s']:.1f}", f"{e['vectorised_cpu_s']:.2f}",
                       f"{e['row_by_row_cpu_s'] / e['vectorised_cpu_s']:.0f}x",
                       "yes" if e["same_bytes"] else "**no**", f"{e['bytes'] / 2**20:.1f}"]
                      for fmt, e in encoders.items()],
             "align": "lrrrlr",
             "notes": [f"The same 1M rows (`icegres.seed.trips_chunk`) in {ENCODE_ROWS:,}-row "
                       "batches, as the server gathers them; row-by-row is the path COPY TO took "
                       "before (each value by `encode_text_value`, each row by `CopyFormat.line`), "
                       "kept in tests/unit/test_copy_out.py as the oracle."]},
        ],
        samples=samples, transfers=detail, encoders=encoders, errors=errors,
        mismatches=mismatches, gate=gate,
        gate_better={k: "lower" for k in gate},
    )
    write_report(report, opts.write)
    return [report]
