"""The list-append checker's speed (issue 27: a history of 100k operations checked in under 10 s).

    .venv/bin/python -m bench list_append_check [--rounds 3] [--quick] [--no-write]
    .venv/bin/python -m bench.list_append_check [--rounds 3] [--txns 100000] [--no-write]

Histories come from the checker's reference store (`icegres.verify.list_append.simulate`, seeded):
100k transactions of 1 to 7 micro-ops (4 on average: reads and appends, half each) by 8 concurrent
clients on 16 keys at a time, each key retired after 32 appends (Elle's key rotation), 2% rolled
back, 1% with an unknown outcome. Cases:

- ``SI history, check SI``: a valid snapshot-isolated history; nothing to report, but its write
  skews make strongly connected components that the G-single search must clear;
- ``SI history, check SERIALIZABLE``: the same history, where each of those components is a G2
  to find and explain;
- ``broken store, check SI``: the store without first-committer-wins (lost updates, incompatible
  orders everywhere).

Peers, same run, rotating per round, on prefixes of the SI history:

- ``check``: `list_append.check` as the claim runs it;
- ``naive search``: the same graph (built by the checker's own code), then the textbook G-single
  search without SCCs or ranks: for every rw edge u -> v, a BFS from v over ww+wr edges looking
  for u. It is quadratic, so it runs on the first 2,000 and 10,000 transactions only, each run
  capped at NAIVE_CAP_S (a capped run is shown as "> cap").

Writes bench/results/<date>-list_append_check.json and the `list_append_check` section of
bench/SCORECARD.md.
"""

from __future__ import annotations

import argparse
import random
import sys
import time
from collections import deque
from typing import Any

from bench.harness import load_meter, median, provenance, rotation, write_report
from icegres.verify import list_append
from icegres.verify.list_append import History, check, simulate

SEED = 27
TXNS = 100_000
NAIVE_SIZES = (2_000, 10_000)
NAIVE_CAP_S = 120.0
TARGET_S = 10.0
STORE = {"processes": 8, "keys": 16, "ops_max": 7}  # randint(1, 7) micro-ops: 4 on average


def _checked(history: History, serializable: bool) -> tuple[float, Any]:
    """Seconds to check `history`, and the report."""
    started = time.perf_counter()
    report = check(history, serializable=serializable)
    return time.perf_counter() - started, report


def _naive(history: History, cap_s: float) -> tuple[float, bool, int]:
    """The G-single search without SCCs or ranks, on the checker's own graph: seconds, whether it
    ran to the end within `cap_s`, and how many G-single cycles it found (stopping at none)."""
    started = time.perf_counter()
    facts = list_append._Facts(history.txns)
    graph = list_append._Graph(len(history.txns))
    found = list_append._Findings()
    facts.index_appends()
    facts.read_txns(found)
    for key, reads in facts.reads_by_key.items():
        facts.order_key(key, reads, graph, found)
    wwwr = [graph.ww[v] + graph.wr[v] for v in range(graph.n)]
    cycles = 0
    for u in range(graph.n):
        for v in graph.rw[u]:
            seen = {v}
            queue = deque([v])
            while queue:
                w = queue.popleft()
                if w == u:
                    cycles += 1
                    break
                for x in wwwr[w]:
                    if x not in seen:
                        seen.add(x)
                        queue.append(x)
            if time.perf_counter() - started > cap_s:
                return time.perf_counter() - started, False, cycles
    return time.perf_counter() - started, True, cycles


def run(opts: Any, txns: int | None = None) -> list[dict[str, Any]]:
    """The suite (`python -m bench list_append_check`): `txns` per history, TXNS by default
    (20,000 with --quick)."""
    rounds = opts.rounds_or(2 if opts.quick else 3)
    txns = txns or (20_000 if opts.quick else TXNS)
    report: dict[str, Any] = {"suite": "list_append_check", "section": "list_append_check",
                              **provenance(opts.command)}
    started = time.perf_counter()
    histories = {
        "SI history": simulate(random.Random(SEED), txns=txns, **STORE),
        "broken store": simulate(random.Random(SEED), txns=txns, first_committer_wins=False, **STORE),
    }
    generate_s = time.perf_counter() - started
    cases = [("SI history, check SI", "SI history", False), ("SI history, check SERIALIZABLE", "SI history", True),
             ("broken store, check SI", "broken store", False)]
    samples: dict[str, list[float]] = {}
    reports: dict[str, Any] = {}
    naive: dict[int, list[tuple[float, bool, int]]] = {}
    ours_small: dict[int, list[float]] = {}
    meter = load_meter()
    for rnd in range(rounds):
        for name, source, serializable in rotation(cases, rnd):
            seconds, reports[name] = _checked(histories[source], serializable)
            samples.setdefault(name, []).append(seconds)
        for size in NAIVE_SIZES:
            prefix = History(histories["SI history"].txns[:size])
            for peer in rotation(("check", "naive"), rnd):
                if peer == "check":
                    ours_small.setdefault(size, []).append(_checked(prefix, False)[0])
                else:
                    naive.setdefault(size, []).append(_naive(prefix, NAIVE_CAP_S))
        print(f"  round {rnd + 1}/{rounds}", flush=True)
    report["load"] = meter.finish()

    rows = []
    for name, _, _ in cases:
        rep = reports[name]
        found = ", ".join(f"{n} {k}" for k, n in rep.counts.items()) or "none"
        times = samples[name]
        rows.append([name, f"{rep.txns:,} / {rep.ops:,}", f"{rep.edges:,}", f"{rep.components:,}", found,
                     f"{median(times):.2f}", f"{max(times):.2f}"])
    naive_rows = []
    for size in NAIVE_SIZES:
        runs = naive[size]
        finished = all(done for _, done, _ in runs)
        shown = f"{median([s for s, _, _ in runs]):.2f}" if finished else f"> {NAIVE_CAP_S:g}"
        naive_rows.append([f"first {size:,} txns of the SI history", f"{median(ours_small[size]):.3f}", shown,
                           str(runs[0][2])])
    worst = max(max(times) for times in samples.values())
    si = reports["SI history, check SI"]
    report.update(
        title="list_append_check: the Elle-style checker on 100k-transaction histories (issue 27)",
        facts={
            "Measured": "wall time of `icegres.verify.list_append.check` on a history in memory (no I/O), "
                        "median over rounds; histories generated once per run, not timed in the check "
                        f"({generate_s:.1f} s for both)",
            "Histories": f"`simulate(Random({SEED}), txns={txns:,}, processes=8, keys=16, ops_max=7)`: "
                         f"{si.txns:,} transactions, {si.ops:,} micro-ops ({si.ops / si.txns:.1f} per "
                         f"transaction), {si.ok:,} committed, {si.failed:,} aborted, {si.unknown:,} unknown",
            "Peers": "none for the 100k cases (the target is absolute); on prefixes of the SI history, "
                     "check against a naive search: the checker's graph, then for every rw edge a BFS "
                     "over ww+wr edges (no SCCs, no ranks)",
            "Rounds": f"{rounds}, cases and peers rotating",
            "Target": f"100k transactions checked in under {TARGET_S:g} s: slowest check here "
                      f"{worst:.2f} s for {txns:,} ({'met' if worst < TARGET_S and txns >= TXNS else 'not shown'})",
        },
        tables=[
            {"title": "Check time, s", "columns": ["case", "txns / micro-ops", "edges", "components",
                                                   "anomalies found", "median", "slowest"],
             "rows": rows, "align": "lrrrlrr"},
            {"title": "The G-single search against the naive one (SI history prefixes, check SI), s",
             "columns": ["history", "check (whole check)", "naive search (graph + search)", "G-single found"],
             "rows": naive_rows, "align": "lrrr"},
        ],
        samples=samples | {
            f"naive|{size}": [s for s, _, _ in naive[size]] for size in NAIVE_SIZES} | {
            f"check-prefix|{size}": v for size, v in ours_small.items()},
        errors={}, mismatches=[], gate={},
    )
    write_report(report, opts.write)
    return [report]


def main(argv: list[str] | None = None) -> int:
    from bench.__main__ import Options

    ap = argparse.ArgumentParser(prog="python -m bench.list_append_check", description=__doc__.split("\n\n")[0])
    ap.add_argument("--rounds", type=int, default=None)
    ap.add_argument("--txns", type=int, default=None, help=f"history size (default {TXNS:,})")
    ap.add_argument("--quick", action="store_true")
    ap.add_argument("--no-write", action="store_true")
    args = ap.parse_args(argv)
    shown = " ".join(sys.argv[1:] if argv is None else argv)
    opts = Options(backends=("embedded",), rounds=args.rounds, quick=args.quick, write=not args.no_write,
                   command=f"python -m bench.list_append_check {shown}".strip(), scale_50m=False)
    run(opts, args.txns)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
