"""Wake-ups: what one cross-thread hand-off costs on this machine, by how long the waiter idled.

Every statement icegres answers crosses threads: the event loop hands work to a worker thread and
waits for it; a worker waiting on DataFusion is woken by a tokio thread; a client waits on the
server's socket. This suite measures one such crossing — the time from the moment a job finishes
on its thread to the moment the thread that waited for it runs — as a function of how long the
waiter was idle (the job sleeps, or spins, that long first). Peers, same run, round-robin:

- `trio hop`: `trio.to_thread.run_sync` from a trio loop, as the front ends hand off work;
- `serial hop`: icegres's `SerialThread.run` (a thread already waiting on a queue), the tails' path;
- `event`: a bare `threading.Event` hand-off between two threads: the operating system's (and the
  hypervisor's) floor, with no event loop at all.

The bare hand-off grows a little with the idle time (an idle vCPU halts after a short poll, and
waking it takes the hypervisor); trio's grows much more (after an idle spell its loop pass, Python
code, runs on cold caches). Both bound what a design with thread hops can reach — issue 2's
"pgwire within 2 ms of in-process" pays a hop back to the loop after waiting as long as the query
ran — so what a design controls is the number of hops, not their price.
"""

from __future__ import annotations

import threading
import time
from typing import Any

from bench.harness import load_meter, median, percentile, provenance, rotation, write_report

IDLE_MS = (0.0, 0.5, 2.0, 10.0)
PEERS = ("trio hop", "serial hop", "event")


def _job(idle_s: float, spin: bool) -> float:
    if spin:
        end = time.perf_counter() + idle_s
        while time.perf_counter() < end:
            pass
    elif idle_s:
        time.sleep(idle_s)
    return time.perf_counter()


def _trio_hops(idle_s: float, spin: bool, n: int, serial: bool) -> list[float]:
    import trio

    from icegres.machines.drivers.serial_thread import SerialThread

    async def main() -> list[float]:
        worker = SerialThread("bench-wakeups")
        out = []
        try:
            for _ in range(n):
                if serial:
                    done = await worker.run(_job, idle_s, spin)
                else:
                    done = await trio.to_thread.run_sync(_job, idle_s, spin)
                out.append((time.perf_counter() - done) * 1000)
        finally:
            worker.close()
        return out

    return trio.run(main)


def _event_hops(idle_s: float, spin: bool, n: int) -> list[float]:
    go, done = threading.Event(), threading.Event()
    stamp = [0.0]
    stop = [False]

    def worker() -> None:
        while True:
            go.wait()
            go.clear()
            if stop[0]:
                return
            stamp[0] = _job(idle_s, spin)
            done.set()

    t = threading.Thread(target=worker, daemon=True)
    t.start()
    out = []
    for _ in range(n):
        go.set()
        done.wait()
        done.clear()
        out.append((time.perf_counter() - stamp[0]) * 1000)
    stop[0] = True
    go.set()
    t.join()
    return out


def run(opts: Any) -> list[dict[str, Any]]:
    report: dict[str, Any] = {"suite": "wakeups", "section": "wakeups", **provenance(opts.command)}
    rounds = opts.rounds_or(3 if opts.quick else 7)
    n = 40 if opts.quick else 120
    cases = [(idle, False) for idle in IDLE_MS] + [(10.0, True)]
    samples: dict[tuple[str, float, bool], list[float]] = {}
    meter = load_meter()
    for rnd in range(rounds):
        for idle_ms, spin in cases:
            for peer in rotation(PEERS, rnd):
                if peer == "event":
                    lat = _event_hops(idle_ms / 1000, spin, n)
                else:
                    lat = _trio_hops(idle_ms / 1000, spin, n, serial=peer == "serial hop")
                samples.setdefault((peer, idle_ms, spin), []).extend(lat[5:])
        print(f"  round {rnd + 1}/{rounds}", flush=True)
    report["load"] = meter.finish()

    def case_name(idle_ms: float, spin: bool) -> str:
        return f"job {'spins' if spin else 'sleeps'} {idle_ms:g} ms" if idle_ms else "job returns at once"

    rows = []
    for idle_ms, spin in cases:
        row: list[Any] = [case_name(idle_ms, spin)]
        for peer in PEERS:
            lat = samples[(peer, idle_ms, spin)]
            row.append(f"{percentile(lat, 50):.3f} / {percentile(lat, 95):.3f}")
        rows.append(row)
    trio_at_once = median(samples[("trio hop", 0.0, False)])
    trio_after_10 = median(samples[("trio hop", 10.0, False)])
    report.update(
        title="wake-ups: one cross-thread hand-off, by how long the waiting thread idled",
        facts={
            "Measured": "time from a job's last instruction on its thread to the waiting thread "
                        "running again (the job first sleeps, or spins, for the idle time)",
            "Peers": "trio hop = `trio.to_thread.run_sync`; serial hop = icegres's `SerialThread.run`; "
                     "event = a bare `threading.Event` between two threads (no event loop)",
            "Rounds": f"{rounds}, {n} hand-offs per case and peer per round, peers rotating",
            "Reading": f"a trio hop back costs {trio_at_once:.3f} ms when the loop never idled and "
                       f"{trio_after_10:.3f} ms after it idled 10 ms (medians): a statement that runs "
                       "10 ms pays the second figure for each thread it waits on",
        },
        tables=[{"title": "Wake-up latency, p50 / p95 ms", "columns": ["case", *PEERS],
                 "rows": rows, "align": "lrrr"}],
        samples={f"{p}|{i}|{s}": v for (p, i, s), v in samples.items()}, errors={}, mismatches=[],
        gate={},
    )
    write_report(report, opts.write)
    return [report]
