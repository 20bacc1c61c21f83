"""tls: what TLS costs a point lookup and a connection, icegres vs PostgreSQL 15, same run.

One `icegres serve` with --tls-cert/--tls-key answers both its peers: `icegres plain`
(psycopg, sslmode=disable) and `icegres tls` (sslmode=require, TLS 1.3 after an SSLRequest).
PostgreSQL 15 runs with ssl=on and the same certificate and key, and holds the same demo.trips
(primary key on id): `postgres plain` and `postgres tls`. Each peer is one autocommit psycopg
connection; within a round every lookup draws one id and runs it on all four peers, the order
rotating. Connection set-up is measured the same way: connect, `select 1`, close.

Why TLS costs icegres more than it costs PostgreSQL: a statement's answer is written to the
socket from the worker thread that computed it when it fits one chunk (pgwire/direct.py), which
saves the trio loop's wake-up (~0.3 ms). Over TLS the bytes must go through the session's
SSLStream on the loop, so that path is off and the wake-up is paid; the encryption itself is a
few microseconds for a lookup's few hundred bytes.
"""

from __future__ import annotations

import contextlib
import random
import tempfile
import time
from pathlib import Path
from typing import Any

from bench import datasets
from bench.harness import (
    Query,
    fmt_ms,
    fmt_x,
    load_meter,
    percentile,
    provenance,
    rotation,
    round_ratio,
    run_interleaved,
    write_report,
)

ROWS = 1_000_000
SEED = 20261205
ICE_PLAIN, ICE_TLS, PG_PLAIN, PG_TLS = "icegres plain", "icegres tls", "postgres plain", "postgres tls"
PEERS = (ICE_PLAIN, ICE_TLS, PG_PLAIN, PG_TLS)
PAIRS = ((ICE_TLS, ICE_PLAIN), (PG_TLS, PG_PLAIN))  # (over TLS, the same server in plaintext)


def _id(rng: random.Random) -> dict[str, int]:
    return {"id": rng.randint(1, ROWS)}


POINT = Query("point", "point lookup", "select * from demo.trips where id = {id}", 50, 10, _id)


def _connect_samples(conninfos: dict[str, str], rounds: int, per_round: int) -> dict[str, list[tuple[int, float]]]:
    """peer -> [(round, seconds)] of connect + `select 1` + close, peers rotating."""
    import psycopg

    out: dict[str, list[tuple[int, float]]] = {p: [] for p in conninfos}
    for rnd in range(rounds):
        for i in range(per_round):
            for peer in rotation(list(conninfos), rnd * per_round + i):
                t0 = time.perf_counter_ns()
                with psycopg.connect(conninfos[peer], autocommit=True) as conn:
                    conn.execute("select 1").fetchone()
                out[peer].append((rnd, (time.perf_counter_ns() - t0) / 1e9))
    return out


def _encrypted(conninfo: str) -> bool:
    import psycopg

    with psycopg.connect(conninfo) as conn:
        return bool(conn.pgconn.ssl_in_use)


def run(opts: Any) -> dict[str, Any]:
    from bench.peers.postgres import PostgresPeer, load_trips, running_cluster, version
    from bench.peers.sql import PgwirePeer
    from bench.pgwire_read import Server
    from tests.support.tls import ca_signed

    report: dict[str, Any] = {"suite": "tls", "section": "tls", **provenance(opts.command)}
    rounds, warmup = opts.rounds_or(3 if opts.quick else 10), 1 if opts.quick else 2
    connects = 3 if opts.quick else 10
    lake = datasets.trips(ROWS)
    with contextlib.ExitStack() as stack:
        tmp = Path(stack.enter_context(tempfile.TemporaryDirectory(prefix="icegres-bench-tls-")))
        pki = ca_signed(tmp / "pki")
        server = Server(lake, datasets.DATA_DIR / "logs" / "tls.log",
                        {"ICEGRES_TLS_CERT": str(pki.cert), "ICEGRES_TLS_KEY": str(pki.key)})
        server.start()
        stack.callback(server.stop)
        server.wait_ready("select * from demo.trips where id = 1")
        print("[tls] starting PostgreSQL 15 (ssl=on, the same certificate) and loading demo.trips ...", flush=True)
        cluster = stack.enter_context(running_cluster(tls=(pki.cert, pki.key)))
        pg_load = load_trips(cluster.conninfo, ROWS)
        conninfos = {
            ICE_PLAIN: f"{server.conninfo} sslmode=disable",
            ICE_TLS: f"{server.conninfo} sslmode=require",
            PG_PLAIN: f"{cluster.conninfo} sslmode=disable",
            PG_TLS: f"{cluster.conninfo} sslmode=require",
        }
        for name, conninfo in conninfos.items():
            if _encrypted(conninfo) != name.endswith("tls"):
                raise RuntimeError(f"{name}: the connection's encryption is not what the peer says")
        peers = [PgwirePeer(conninfos[ICE_PLAIN], ICE_PLAIN), PgwirePeer(conninfos[ICE_TLS], ICE_TLS),
                 PostgresPeer(conninfos[PG_PLAIN], PG_PLAIN), PostgresPeer(conninfos[PG_TLS], PG_TLS)]
        for p in peers:
            stack.callback(p.close)
        with peers[3].conn.cursor() as cur:
            tls_facts = cur.execute("select version, cipher from pg_stat_ssl where pid = pg_backend_pid()").fetchone()
        print(f"[tls] peers {', '.join(PEERS)}; {rounds} rounds", flush=True)
        meter = load_meter()
        res = run_interleaved(peers, [POINT], rounds, warmup, opts.quick, SEED, reference=PG_PLAIN)
        connect = _connect_samples(conninfos, rounds, connects)
        report["load"] = meter.finish()
        pg_version = version(cluster.conninfo)

    samples = {"point": {p: res.of(p, "point") for p in PEERS}, "connect": connect}
    labels = {"point": "point lookup", "connect": "connect + select 1 + close"}
    rows, summary = [], {}
    for key, by_peer in samples.items():
        summary[key] = {}
        for peer in PEERS:
            vals = [s for _, s in by_peer[peer]]
            if not vals:
                continue
            entry = {"p50_ms": percentile(vals, 50) * 1e3, "p99_ms": percentile(vals, 99) * 1e3, "n": len(vals)}
            pair = next(((tls, plain) for tls, plain in PAIRS if tls == peer), None)
            if pair is not None:
                entry["tls/plain"] = round_ratio(by_peer[pair[0]], by_peer[pair[1]])
                entry["tls-plain_ms"] = entry["p50_ms"] - percentile([s for _, s in by_peer[pair[1]]], 50) * 1e3
            summary[key][peer] = entry
            rows.append([labels[key] if peer == PEERS[0] else "", peer, fmt_ms(entry["p50_ms"]),
                         fmt_ms(entry["p99_ms"]), entry["n"], fmt_x(entry.get("tls/plain")),
                         f"{entry['tls-plain_ms']:+.2f} ms" if "tls-plain_ms" in entry else ""])
    report["title"] = "tls: point lookup and connection over TLS vs plaintext, icegres vs PostgreSQL 15"
    report["facts"] = {
        "Peers, same run, interleaved per iteration (A B C D, B C D A, ...)":
            "icegres plain / icegres tls = one `icegres serve --tls-cert --tls-key` process, psycopg 3 "
            "(libpq 18) with sslmode=disable / sslmode=require; postgres plain / postgres tls = "
            f"PostgreSQL {pg_version} with ssl=on and the same certificate (RSA 2048, signed by a test CA), "
            "demo.trips with a primary key on id, loaded by COPY from the same seeded rows and warmed. "
            f"TLS negotiated with PostgreSQL: {tls_facts[0]} {tls_facts[1]} (icegres: the same, Python's "
            "OpenSSL defaults)",
        "Data": f"demo.trips {ROWS:,} rows (`icegres seed`); PostgreSQL load {pg_load['load_s']:.0f} s",
        "Rounds": f"{rounds} measured (+{warmup} warm-up); per round {POINT.quick_iters if opts.quick else POINT.iters} "
                  f"lookups and {connects} connections per peer. Ratios are medians of per-round ratios of "
                  "per-round medians; `tls - plain` is the difference of the p50s",
    }
    report["tables"] = [{
        "title": "Latency",
        "columns": ["measure", "peer", "p50 ms", "p99 ms", "n", "tls / plain", "tls - plain"],
        "align": "llrrrrr",
        "rows": rows,
        "notes": ["Over TLS icegres answers from the trio loop, not from the worker thread "
                  "(pgwire/direct.py writes plaintext to the socket), so a lookup pays the loop's "
                  "wake-up as well as the encryption."],
    }]
    report["summary"] = summary
    report["gate"] = {f"{key}: {ICE_TLS}/{ICE_PLAIN}": summary[key][ICE_TLS]["tls/plain"]
                      for key in summary if summary[key].get(ICE_TLS, {}).get("tls/plain") is not None}
    report["errors"], report["mismatches"] = res.errors, res.mismatches
    report["samples_ms"] = {key: {p: [[r, round(s * 1e3, 4)] for r, s in by[p]] for p in PEERS}
                            for key, by in samples.items()}
    write_report(report, opts.write)
    return report
