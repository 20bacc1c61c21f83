"""Claim: replay is exactly once, even when the replay itself is killed, again and again.

For each tail (`lab.tails()`), `lab.rounds` rounds, each on three tables (a replay flushes each
table in a commit of its own, so a kill can land between them):
1. a scratch server with a write buffer window too long to flush (`FILL_WINDOW_MS`) takes
   concurrent writes; every acknowledged row is in the tail and none in the lake; SIGKILL;
2. restarted with the fault point `after-flush-commit=crash`: the replay's first flush commits
   (its snapshot holds the tail watermark) and the process dies before the tail hears of it;
3. restarted again and SIGKILLed at a random moment of the replay (`lab.rng`, within the time
   step 2's replay took);
4. restarted cleanly: it replays what the lake still lacks and serves (the next round writes
   on it).
Then a reader must find every acknowledged id exactly once and no id twice.
"""

from __future__ import annotations

import re
import time
from collections.abc import Callable

from icegres.verify.claims.ladder_workload import (
    NO_TAIL,
    Tally,
    Writers,
    create_table,
    log_since,
    log_size,
    read_ids,
    ready,
    start_unready,
    wait_exit_or_ready,
)
from icegres.verify.deployment import TailPlan
from icegres.verify.lab import Lab, wait_until
from icegres.verify.nodes import START_TIMEOUT_S, Node
from icegres.verify.outcome import Claim, Outcome

__all__ = ["CLAIM", "run"]

FILL_WINDOW_MS = 3_600_000  # nothing flushes while the tail fills: every acked row must be replayed
TABLES = 3
FILL_S_MIN = 0.5
FILL_S_MAX = 1.5
CRASH_POINT = "after-flush-commit=crash"
CRASH_EXIT = 137
TAIL_OPEN = "write tail open"  # serve.open_tail logs it before the ladder replays


def run(lab: Lab) -> Outcome:
    tails = lab.tails()
    if not tails:
        return Outcome.skipped(NO_TAIL)
    total = Tally()
    per_tail: dict[str, str] = {}
    broken: list[str] = []
    counts = {"crashed": 0, "killed in replay": 0, "kills": 0, "replayed": 0}
    with lab.step("kills during replay", len(tails) * lab.rounds) as advance:
        for plan in tails:
            tally = _prove_on(lab, plan, counts, advance)
            per_tail[f"{plan.kind} tail"] = tally.shown()
            if not tally.holds:
                broken.append(tally.broken(plan.shown))
            total.merge(tally)
    figures = {"rounds": lab.rounds * len(tails), "acked": total.acked_count, "lost": len(total.lost),
               "duplicated": len(total.duplicated), "replayed records": counts["replayed"],
               "crashed after a flush commit": counts["crashed"],
               "killed in replay": f"{counts['killed in replay']}/{counts['kills']}", **per_tail}
    if broken:
        return Outcome.failed("; ".join(broken), figures)
    return Outcome.passed(figures)


def _prove_on(lab: Lab, plan: TailPlan, counts: dict[str, int], advance: Callable[[int], None]) -> Tally:
    tally = Tally()
    node = lab.server(f"replay-{plan.kind}", tail=plan, write_buffer_ms=FILL_WINDOW_MS)
    tables = [lab.table(f"{plan.kind}_{n}") for n in range(TABLES)]
    for table in tables:
        create_table(lab, node, table)
    for round_ in range(lab.rounds):
        with Writers(lab, node, tables, base=(round_ + 1) * 10**9) as writers:
            writers.wait_first_acks()
            time.sleep(lab.rng.uniform(FILL_S_MIN, FILL_S_MAX))
            node.kill()
        if writers.errors:
            raise RuntimeError(f"a writer failed on {plan.shown}: {writers.errors[0]}")
        tally.add(writers)
        replay_s = _crash_after_first_flush(lab, node, counts)
        _kill_during_replay(lab, node, replay_s, counts)
        offset = log_size(node)
        node = lab.restart(node)
        counts["replayed"] += _replayed(log_since(node, offset))
        advance(1)
    tally.check(read_ids(lab, node, tables))
    node.stop()
    return tally


def _crash_after_first_flush(lab: Lab, node: Node, counts: dict[str, int]) -> float:
    """Restart `node` with the crash point armed; how long its replay ran before it crashed."""
    offset = log_size(node)
    started = start_unready(lab, node, faults=CRASH_POINT)
    replay_began = _wait_tail_open(started, offset)
    code = wait_exit_or_ready(started, START_TIMEOUT_S)
    took_s = time.monotonic() - replay_began
    log = log_since(started, offset)
    if code is None:
        started.kill()  # it flushed nothing (the lake held every record already) and serves
        return took_s
    if code != CRASH_EXIT or "icegres-fault: reached after-flush-commit" not in log:
        raise RuntimeError(f"{started.name} exited with {code} during replay, not at the crash point: "
                           f"{log.strip().splitlines()[-3:]}")
    counts["crashed"] += 1
    return took_s


def _kill_during_replay(lab: Lab, node: Node, replay_s: float, counts: dict[str, int]) -> None:
    offset = log_size(node)
    started = start_unready(lab, node)
    _wait_tail_open(started, offset)
    time.sleep(lab.rng.uniform(0.0, replay_s))
    if not started.running():
        raise RuntimeError(f"{started.name} exited with {started.proc.returncode if started.proc else '?'} "
                           f"during replay: {log_since(started, offset).strip().splitlines()[-3:]}")
    counts["kills"] += 1
    if not ready(started):
        counts["killed in replay"] += 1
    started.kill()


def _wait_tail_open(node: Node, offset: int) -> float:
    """Until `node` logs that its tail is open (its replay begins), or it exits or serves."""
    wait_until(lambda: TAIL_OPEN in log_since(node, offset) or not node.running() or ready(node),
               START_TIMEOUT_S, interval_s=0.01)
    return time.monotonic()


def _replayed(log: str) -> int:
    found = re.findall(r"replayed (\d+) records", log)
    return int(found[-1]) if found else 0


CLAIM = Claim(
    name="replay-once",
    title="Exactly-once replay, even when the replay is killed",
    docs="docs/architecture.md#the-write-ladder",
    run=run,
)
