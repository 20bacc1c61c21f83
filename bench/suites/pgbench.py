"""pgbench: point lookups per second as pgbench itself drives them, by query protocol, icegres vs
PostgreSQL.

One custom script (`\\set id random(1, 1000000)` then `select * from demo.trips where id = :id`)
run by PostgreSQL 15's own `pgbench -n -f` with each `-M` protocol mode:

- `simple`: one Query message per lookup, the id written into the text;
- `extended`: an unnamed statement per lookup, `Parse Bind Describe Execute Sync` with the id as
  a text parameter of unspecified type (the type comes from the server's ParameterDescription);
- `prepared`: one named statement per connection, then `Bind Describe Execute Sync` per lookup.

Peers, same run: `icegres serve` on the embedded 1M-row lake, and PostgreSQL 15 holding the same
rows with a primary key on id (bench/peers/postgres.py); with `--before DIR`, also `icegres before`:
the icegres package of another checkout (a `git archive` of an older commit, say) serving the
same lake, for a before/after in one run. Within a round, at each client count,
every (server, mode) cell runs for the same window, the order rotating from round to round;
`--random-seed` is the round number, so every cell of a round draws the same ids. Per cell:
pgbench's tps (without connection time) and latency average, and the server's CPU time per
transaction (the process tree's user + system CPU over the window / transactions), which moves
less than tps when other work shares the machine.
"""

from __future__ import annotations

import contextlib
import re
import subprocess
import tempfile
from pathlib import Path
from typing import Any

from bench import datasets
from bench.harness import (
    PLOTS_DIR,
    REPO_DIR,
    fmt_ms,
    fmt_x,
    load_meter,
    median,
    provenance,
    rotation,
    round_ratio,
    short_error,
    write_report,
)

ROWS = 1_000_000
ICE, BEFORE, POSTGRES = "icegres", "icegres before", "postgres"
MODES = ("simple", "extended", "prepared")
CLIENTS = (1, 4)  # pgbench -c; threads -j = min(clients, 2): this machine has 2 cores
TARGET_X = 1.2  # issue 25: extended within 1.2x of simple (tps)
SCRIPT = "\\set id random(1, {rows})\nselect * from demo.trips where id = :id;\n"

_TPS = re.compile(r"^tps = ([0-9.]+) \(without initial connection time\)", re.M)
_LATENCY = re.compile(r"^latency average = ([0-9.]+) ms", re.M)
_PROCESSED = re.compile(r"^number of transactions actually processed: (\d+)", re.M)
_FAILED = re.compile(r"^number of failed transactions: (\d+)", re.M)


def parse_output(text: str) -> dict[str, float]:
    """pgbench's report -> {"tps", "latency_ms", "transactions", "failed"}; ValueError when it
    carries no tps line (pgbench failed before or while running)."""
    tps = _TPS.search(text)
    if tps is None:
        raise ValueError(f"no tps in pgbench output: {text.strip()[-400:]!r}")
    latency = _LATENCY.search(text)
    processed = _PROCESSED.search(text)
    failed = _FAILED.search(text)
    return {
        "tps": float(tps.group(1)),
        "latency_ms": float(latency.group(1)) if latency else float("nan"),
        "transactions": int(processed.group(1)) if processed else 0,
        "failed": int(failed.group(1)) if failed else 0,
    }


def pgbench_args(binary: Path, script: Path, *, host: str, port: int, user: str, dbname: str,
                 mode: str, clients: int, seconds: int, seed: int) -> list[str]:
    """The exact pgbench command line of one cell."""
    return [str(binary), "-n", "-f", str(script), "-M", mode, "-c", str(clients),
            "-j", str(min(clients, 2)), "-T", str(seconds), f"--random-seed={seed}",
            "-h", host, "-p", str(port), "-U", user, dbname]


def _tree_cpu_s(pid: int) -> float:
    """CPU seconds (user + system) of a server process, its live children and the children it
    has reaped: PostgreSQL's backend of a pgbench connection ends with the connection."""
    import psutil

    p = psutil.Process(pid)
    t = p.cpu_times()
    total = t.user + t.system + t.children_user + t.children_system
    for child in p.children(recursive=True):
        with contextlib.suppress(psutil.Error):
            c = child.cpu_times()
            total += c.user + c.system
    return total


def _checkout_commit(checkout: Path) -> str:
    """The commit a checkout is at: git's word, else what its directory name says."""
    try:
        return subprocess.run(["git", "rev-parse", "--short", "HEAD"], cwd=checkout, capture_output=True,
                              text=True, check=True).stdout.strip()
    except (OSError, subprocess.CalledProcessError):
        return f"not a git checkout: {checkout.name}"


def run(opts: Any) -> list[dict[str, Any]]:
    from bench.peers.postgres import load_trips, running_cluster, version
    from bench.pgwire_read import Server
    from tests.support.postgres import DB_NAME, DB_USER, PG_BIN_DIR

    report: dict[str, Any] = {"suite": "pgbench", "section": "pgbench", **provenance(opts.command)}
    rounds = opts.rounds_or(2 if opts.quick else 5)
    seconds = 2 if opts.quick else 5
    binary = PG_BIN_DIR / "pgbench"
    lake = datasets.trips(ROWS)
    # (clients, server, mode) -> [(round, figure)] per figure
    cells: dict[tuple[int, str, str], dict[str, list[tuple[int, float]]]] = {}
    errors: dict[str, str] = {}
    commands: dict[str, str] = {}
    with contextlib.ExitStack() as stack:
        tmp = Path(stack.enter_context(tempfile.TemporaryDirectory(prefix="icegres-pgbench-")))
        script = tmp / "point.sql"
        script.write_text(SCRIPT.format(rows=ROWS))
        server = Server(lake, datasets.DATA_DIR / "logs" / "pgbench.log")
        server.start()
        stack.callback(server.stop)
        server.wait_ready("select * from demo.trips where id = 1")
        servers = [(ICE, server)]
        before_dir = Path(opts.before).resolve() if getattr(opts, "before", None) else None
        if before_dir is not None:
            if not (before_dir / "icegres" / "__init__.py").exists():
                raise SystemExit(f"--before {before_dir}: no icegres package there")
            logs = tmp / "before"
            logs.mkdir()
            before = Server(lake, logs / "pgbench-before.log", checkout=before_dir)
            before.start()
            stack.callback(before.stop)
            before.wait_ready("select * from demo.trips where id = 1")
            servers.append((BEFORE, before))
        cluster = stack.enter_context(running_cluster())
        load_trips(cluster.conninfo, ROWS)
        pg_version = version(cluster.conninfo)
        assert cluster.proc is not None
        targets: dict[str, tuple[dict[str, Any], int]] = {}
        for name, s in servers:
            assert s.proc is not None
            targets[name] = (dict(host="127.0.0.1", port=s.port, user="bench", dbname="icegres"), s.proc.pid)
        targets[POSTGRES] = (dict(host="127.0.0.1", port=cluster.port, user=DB_USER, dbname=DB_NAME),
                             cluster.proc.pid)
        names = list(targets)
        order = [(target, mode) for target in names for mode in MODES]
        print(f"[pgbench] {rounds} rounds x clients {CLIENTS} x {len(order)} cells, {seconds} s each",
              flush=True)
        meter = load_meter()
        cell_no = 0
        for rnd in range(rounds):
            for clients in CLIENTS:
                for target, mode in rotation(order, cell_no):
                    conn, pid = targets[target]
                    args = pgbench_args(binary, script, mode=mode, clients=clients, seconds=seconds,
                                        seed=rnd + 1, **conn)
                    commands.setdefault(f"{target} -M {mode} -c {clients}", " ".join(
                        [Path(args[0]).name, *args[1:]]).replace(str(script), "point.sql"))
                    key = f"{target}/{mode}/c{clients}"
                    try:
                        cpu0 = _tree_cpu_s(pid)
                        done = subprocess.run(args, capture_output=True, text=True, timeout=seconds + 60)
                        cpu1 = _tree_cpu_s(pid)
                        got = parse_output(done.stdout + done.stderr)
                        if done.returncode != 0 or got["failed"]:
                            raise RuntimeError(f"exit {done.returncode}, {got['failed']:.0f} failed: "
                                               f"{(done.stderr or done.stdout).strip()[-300:]}")
                    except Exception as exc:
                        errors.setdefault(key, short_error(exc))
                        continue
                    figures = cells.setdefault((clients, target, mode), {})
                    figures.setdefault("tps", []).append((rnd, got["tps"]))
                    figures.setdefault("latency_ms", []).append((rnd, got["latency_ms"]))
                    if got["transactions"]:
                        figures.setdefault("cpu_ms", []).append(
                            (rnd, (cpu1 - cpu0) * 1e3 / got["transactions"]))
                cell_no += 1
            print(f"  round {rnd + 1}/{rounds}: " + "  ".join(
                f"c{c} {t.replace(' ', '-')} {m[:3]} "
                f"{dict(cells.get((c, t, m), {}).get('tps', [])).get(rnd, float('nan')):.0f}"
                for c in CLIENTS for t in names for m in MODES), flush=True)
        report["load"] = meter.finish()

    def figure(clients: int, target: str, mode: str, name: str) -> list[tuple[int, float]]:
        return cells.get((clients, target, mode), {}).get(name, [])

    rows, summary, gate, verdicts = [], {}, {}, []
    for clients in CLIENTS:
        for target in names:
            simple = figure(clients, target, "simple", "tps")
            for mode in MODES:
                tps = figure(clients, target, mode, "tps")
                slower = round_ratio(simple, tps)  # simple tps / this mode's tps
                versus = (round_ratio(tps, figure(clients, POSTGRES, mode, "tps"))
                          if target != POSTGRES else None)
                entry = {"tps": median(v for _, v in tps),
                         "latency_ms": median(v for _, v in figure(clients, target, mode, "latency_ms")),
                         "server_cpu_ms_per_txn": median(v for _, v in figure(clients, target, mode, "cpu_ms")),
                         "rounds": len(tps), "simple_over_this": slower, "icegres_over_postgres": versus}
                summary[f"{target}/{mode}/c{clients}"] = entry
                rows.append([clients if target == names[0] and mode == MODES[0] else "",
                             target if mode == MODES[0] else "", mode, f"{entry['tps']:,.0f}",
                             fmt_ms(entry["latency_ms"]), f"{entry['server_cpu_ms_per_txn']:.2f}",
                             len(tps), fmt_x(slower) if mode != "simple" else "", fmt_x(versus)])
                if target == ICE and mode != "simple" and slower is not None:
                    gate[f"c{clients}: icegres simple tps / {mode} tps"] = slower
                if target == ICE and versus is not None:
                    gate[f"c{clients}: icegres {mode} tps / postgres {mode} tps"] = versus
            ext = summary[f"{target}/extended/c{clients}"]["simple_over_this"]
            if target == ICE:
                verdict = "—" if ext is None else ("pass" if ext <= TARGET_X else "miss")
                verdicts.append(f"{clients} client{'s' if clients > 1 else ''}: {fmt_x(ext)} -> **{verdict}**")
            elif target == BEFORE:
                verdicts.append(f"(icegres before, {clients} client{'s' if clients > 1 else ''}: {fmt_x(ext)})")
    report.update(
        title="pgbench: point lookups by protocol mode (simple, extended, prepared), icegres vs PostgreSQL",
        facts={
            "Workload": f"`pgbench -n -f point.sql -M <mode> -c <clients> -j min(clients, 2) -T {seconds} "
                        "--random-seed=<round>`, point.sql = `\\set id random(1, 1000000)` + "
                        "`select * from demo.trips where id = :id;`",
            "Peers": "icegres = `icegres serve` of this checkout on the embedded 1M-row lake (`icegres seed`); "
                     + (f"icegres before = the same from `{before_dir}` ({_checkout_commit(before_dir)}); "
                        if before_dir is not None else "")
                     + f"postgres = PostgreSQL {pg_version}, the same demo.trips with a primary key on id, warmed",
            "Method": f"{rounds} rounds; per round and client count every (server, mode) cell runs "
                      f"{seconds} s, the order rotating; figures are medians over rounds, ratios medians "
                      "of per-round ratios; server CPU = the server's process tree, user + system, per "
                      "transaction",
            "Target (issue 25)": f"extended within {TARGET_X}x of simple (simple tps / extended tps): "
                                 + "; ".join(verdicts),
        },
        tables=[{"title": "Point lookups per second", "columns": [
            "clients", "server", "mode", "tps", "latency avg ms", "server CPU ms / txn", "rounds",
            "simple tps / this", "icegres / postgres tps"], "rows": rows, "align": "lllrrrrrr",
            "notes": ["Exact commands (the server's host, port, user and database last): "
                      + "; ".join(f"`{c}`" for c in dict.fromkeys(commands.values()))]}],
        summary=summary, gate=gate,
        gate_better={k: ("higher" if f"tps / {POSTGRES} " in k else "lower") for k in gate},
        errors=errors, mismatches=[],
    )
    if opts.write:
        report["plots"] = [_bars(summary, PLOTS_DIR / "pgbench.png")]
    write_report(report, opts.write)
    return [report]


def _bars(summary: dict[str, Any], path: Path) -> str:
    """tps per (server, mode), grouped by client count."""
    from bench.harness import COLORS, _plt

    plt = _plt()
    targets = list(dict.fromkeys(key.split("/")[0] for key in summary))
    groups = [(c, t) for c in CLIENTS for t in targets]
    fig, ax = plt.subplots(figsize=(3 + 1.6 * len(groups), 4.8))
    width = 0.8 / len(MODES)
    for j, mode in enumerate(MODES):
        xs = [i + (j - (len(MODES) - 1) / 2) * width for i in range(len(groups))]
        ax.bar(xs, [summary[f"{t}/{mode}/c{c}"]["tps"] for c, t in groups], width, label=f"-M {mode}",
               color=COLORS[j])
    ax.set_xticks(range(len(groups)), [f"{t}\n{c} client{'s' if c > 1 else ''}" for c, t in groups])
    ax.set_yscale("log")  # PostgreSQL answers ~50x more lookups than icegres
    ax.set_ylabel("transactions / s (pgbench, median over rounds; log)")
    ax.set_title("pgbench point lookup by protocol mode (same run)")
    ax.legend(fontsize=8)
    ax.grid(axis="y", alpha=0.3)
    fig.tight_layout()
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(path, dpi=100)
    plt.close(fig)
    return str(path.relative_to(REPO_DIR))
