"""Claim: an acknowledged buffered write survives SIGKILL, on each configured tail.

For each tail (`lab.tails()`): a scratch server with the deployment's write buffer window on a
scratch log of that tail; concurrent writers insert unique ids into a table without a primary key
and record every acknowledgement; at a random moment (`lab.rng`) the server is SIGKILLed and
restarted on the same data directory, so with the same tail identity, and replays what the lake
lacks before it serves. `lab.rounds` kills per tail; then a reader must find every acknowledged id
exactly once (0 lost) and no id twice (0 duplicated), the ids in flight at a kill included: those
may be there or not, but never twice.
"""

from __future__ import annotations

import time

from icegres.verify.claims.ladder_workload import NO_TAIL, Tally, Writers, create_table, read_ids
from icegres.verify.lab import Lab
from icegres.verify.outcome import Claim, Outcome

__all__ = ["CLAIM", "run"]

KILL_AFTER_S_MIN = 0.05  # after the round's first acknowledgement
KILL_AFTER_S_MAX = 1.0


def run(lab: Lab) -> Outcome:
    tails = lab.tails()
    if not tails:
        return Outcome.skipped(NO_TAIL)
    total = Tally()
    per_tail: dict[str, str] = {}
    broken: list[str] = []
    with lab.step("SIGKILL under concurrent writers", len(tails) * lab.rounds) as advance:
        for plan in tails:
            tally = Tally()
            node = lab.server(f"acks-{plan.kind}", tail=plan)
            table = lab.table(plan.kind)
            create_table(lab, node, table)
            for round_ in range(lab.rounds):
                with Writers(lab, node, [table], base=(round_ + 1) * 10**9) as writers:
                    writers.wait_first_acks()
                    time.sleep(lab.rng.uniform(KILL_AFTER_S_MIN, KILL_AFTER_S_MAX))
                    node.kill()
                if writers.errors:
                    raise RuntimeError(f"a writer failed on {plan.shown}: {writers.errors[0]}")
                tally.add(writers)
                node = lab.restart(node)  # replays the tail before it serves
                advance(1)
            tally.check(read_ids(lab, node, [table]))
            node.stop()
            per_tail[f"{plan.kind} tail"] = tally.shown()
            if not tally.holds:
                broken.append(tally.broken(plan.shown))
            total.merge(tally)
    figures = {"rounds": lab.rounds * len(tails), "acked": total.acked_count, "lost": len(total.lost),
               "duplicated": len(total.duplicated),
               "unacked in flight": f"{total.in_flight_found}/{total.in_flight_count} present", **per_tail}
    if broken:
        return Outcome.failed("; ".join(broken), figures)
    return Outcome.passed(figures)


CLAIM = Claim(
    name="buffered-acks",
    title="Acknowledged buffered writes survive SIGKILL",
    docs="docs/architecture.md#the-write-ladder",
    run=run,
)
