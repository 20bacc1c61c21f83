"""SCRAM connect: a new connection's whole life (connect, SCRAM-SHA-256 login, `select 1`, close),
icegres vs PostgreSQL 15 with scram-sha-256 in its pg_hba.conf, in the same run.

Both over TCP on loopback with psycopg (libpq), `require_auth=scram-sha-256` so that libpq refuses
anything but SCRAM: the client's PBKDF2 (4096 iterations) is in both timings alike. icegres serves
a tiny embedded lake (a login does not read it) with the user in ICEGRES_USERS (hashed at load);
PostgreSQL has the role made with `CREATE ROLE ... PASSWORD` under password_encryption
scram-sha-256. Peers alternate round by round; each round makes CONNECTS_PER_ROUND connections
per peer, one after another.
"""

from __future__ import annotations

import shutil
import tempfile
import time
from pathlib import Path
from typing import Any

from bench.harness import (
    load_meter,
    median,
    percentile,
    provenance,
    rotation,
    round_ratio,
    short_error,
    write_report,
)

ICE, POSTGRES = "icegres", "postgres"
USER, PASSWORD = "bench_scram", "bench-scram-pw"
CONNECTS_PER_ROUND = 40


def _one_connect(conninfo: str) -> float:
    import psycopg

    t0 = time.perf_counter()
    with psycopg.connect(conninfo, autocommit=True) as c:
        c.execute("select 1").fetchall()
    return time.perf_counter() - t0


def _scram_postgres(cluster: Any) -> str:
    """The role with a SCRAM verifier, and pg_hba.conf's TCP lines switched to scram-sha-256."""
    import psycopg

    with psycopg.connect(cluster.conninfo, autocommit=True) as c:
        c.execute("SET password_encryption = 'scram-sha-256'")
        c.execute(f"CREATE ROLE {USER} LOGIN PASSWORD '{PASSWORD}'")
        hba = Path(c.execute("SHOW hba_file").fetchone()[0])
        hba.write_text("local all all trust\nhost all all 127.0.0.1/32 scram-sha-256\n")
        c.execute("SELECT pg_reload_conf()")
    time.sleep(0.5)  # the postmaster rereads pg_hba.conf on SIGHUP
    return f"host=127.0.0.1 port={cluster.port} dbname=postgres"


def run(opts: Any) -> list[dict[str, Any]]:
    import subprocess
    import sys

    from bench.peers.postgres import running_cluster, version
    from tests.support.icegres_server import start_icegres, stop

    report: dict[str, Any] = {"suite": "scram_connect", "section": "scram_connect", **provenance(opts.command)}
    rounds = opts.rounds_or(2 if opts.quick else 6)
    per_round = 10 if opts.quick else CONNECTS_PER_ROUND
    samples: dict[str, dict[str, list[tuple[int, float]]]] = {ICE: {"connect": []}, POSTGRES: {"connect": []}}
    errors: dict[str, str] = {}
    work = Path(tempfile.mkdtemp(prefix="icegres-bench-scram-"))
    try:
        subprocess.run([sys.executable, "-m", "icegres", "seed", "--data-dir", str(work / "lake"), "--rows", "1000"],
                       check=True, stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, timeout=300)
        started = start_icegres(["serve", "--data-dir", str(work / "lake"), "--host", "127.0.0.1", "--port", "0"],
                                log_dir=work, env={"ICEGRES_USERS": f"{USER}:{PASSWORD}"})
        try:
            with running_cluster() as cluster:
                pg_version = version(cluster.conninfo)
                suffix = f" user={USER} password={PASSWORD} require_auth=scram-sha-256 connect_timeout=10"
                conninfo = {
                    ICE: f"host=127.0.0.1 port={started.ports['port']} dbname=icegres" + suffix,
                    POSTGRES: _scram_postgres(cluster) + suffix,
                }
                for peer in (ICE, POSTGRES):  # warm: first connections pay imports and caches
                    for _ in range(3):
                        _one_connect(conninfo[peer])
                meter = load_meter()
                for rnd in range(rounds):
                    for peer in rotation((ICE, POSTGRES), rnd):
                        for _ in range(per_round):
                            try:
                                samples[peer]["connect"].append((rnd, _one_connect(conninfo[peer])))
                            except Exception as exc:
                                errors[f"{peer}/{rnd}"] = short_error(exc)
                    print(f"  round {rnd + 1}/{rounds}: " + ", ".join(
                        f"{p} {median(v for r, v in samples[p]['connect'] if r == rnd) * 1e3:.1f} ms"
                        for p in (ICE, POSTGRES)), flush=True)
                report["load"] = meter.finish()
        finally:
            stop(started.proc)
    finally:
        shutil.rmtree(work, ignore_errors=True)

    def ms(peer: str, q: float) -> float:
        return percentile([v for _, v in samples[peer]["connect"]], q) * 1e3

    ratio = round_ratio(samples[ICE]["connect"], samples[POSTGRES]["connect"])
    rows = [[p, f"{ms(p, 50):.1f}", f"{ms(p, 95):.1f}", len(samples[p]["connect"])] for p in (ICE, POSTGRES)]
    report.update(
        title="scram_connect: connect + SCRAM-SHA-256 login + `select 1` + close, icegres vs PostgreSQL",
        facts={
            "Peers": f"icegres (ICEGRES_USERS, default --auth-method scram-sha-256) and PostgreSQL {pg_version} "
                     "(scram-sha-256 in pg_hba.conf), both on 127.0.0.1, psycopg with require_auth=scram-sha-256",
            "Rounds": f"{rounds} x {per_round} connections per peer, peers alternating first; after 3 warm-up "
                      "connections each",
            "Ratio": f"icegres / PostgreSQL (median of per-round median ratios): {ratio or float('nan'):.2f}x",
        },
        tables=[{"title": "One connection's life", "columns": ["server", "p50 ms", "p95 ms", "n"],
                 "rows": rows, "align": "lrrr",
                 "notes": ["Both timings include the client's PBKDF2 of the password (4096 iterations, "
                           "~2 ms in libpq); neither server runs PBKDF2 on a SCRAM login (it holds the "
                           "verifier)."]}],
        samples=samples, errors=errors, mismatches=[],
        gate={"scram connect: icegres/postgres": ratio} if ratio else {},
    )
    write_report(report, opts.write)
    return [report]
