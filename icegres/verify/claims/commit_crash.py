"""Crash recovery of synchronous commits: a server SIGKILLed anywhere in a commit leaves every
table it was committing either as it was or as the commit made it — never one table of a
multi-table commit without the other, never part of a rewrite — and readers see no staged file.

Each commit is one transaction block over two tables: an INSERT of id n into both, and an UPDATE
(a copy-on-write rewrite) of id n-1's `mark` in the first. Rounds alternate between two ways of
dying: a fault point of the commit path (`icegres/faults.py`: manifests written, metadata files
written, catalog committed but client not answered) where the server waits until verify SIGKILLs
it, and a SIGKILL at a random moment of a commit in flight (uniform over 1.2 commit latencies
after COMMIT is sent). After each crash a restarted server must show, for ids 0..n:
- the same ids in both tables (atomic multi-table commit);
- every acknowledged id (durability), and nothing but acknowledged ids and the one in flight;
- no id twice (count = distinct count), and the first table's marks agreeing with its ids (id k
  is marked iff k+1 is in the table: the rewrite landed with its insert, or neither did);
- a full read of both tables succeeding: a snapshot that referenced a file the crash kept from
  being written fails this read (a read never answers without the data it should hold).
"""

from __future__ import annotations

import statistics
import threading
import time
from dataclasses import dataclass, field

from icegres.verify.lab import Lab, wait_until
from icegres.verify.nodes import Node
from icegres.verify.outcome import Claim, Outcome

__all__ = ["CLAIM"]

POINTS = ("before-publish", "mid-publish", "after-publish")
POINT_WAIT_S = 60.0


@dataclass
class Ledger:
    """What clients were told: ids acknowledged, and ids whose COMMIT got no answer."""

    acked: set[int] = field(default_factory=set)
    in_doubt: set[int] = field(default_factory=set)
    next_id: int = 1


def run(lab: Lab) -> Outcome:
    left, right = lab.table("left"), lab.table("right")
    ledger = Ledger()
    node = lab.server("a")
    with lab.connect(node) as conn:
        conn.execute(f"create table {left} (id bigint, mark text)")
        conn.execute(f"create table {right} (id bigint)")
        conn.execute(f"insert into {left} values (0, null)")
        conn.execute(f"insert into {right} values (0)")
    ledger.acked.add(0)
    latency = _warm_up(lab, node, left, right, ledger)
    kills: dict[str, int] = {}
    with lab.step("crashes", lab.rounds * 2) as advance:
        for round_ in range(lab.rounds * 2):
            if round_ % 2 == 0:
                how = "random"
                _random_kill(lab, node, left, right, ledger, latency)
            else:
                how = lab.rng.choice(POINTS)
                node.stop()
                node = lab.server("a", env={"ICEGRES_FAULTS": f"{how}=sleep:{POINT_WAIT_S:g}"})
                problem = _check(lab, node, left, right, ledger)
                if problem:
                    return Outcome.failed(problem, _figures(ledger, kills, latency))
                _point_kill(lab, node, left, right, ledger, how)
            kills[how] = kills.get(how, 0) + 1
            node = lab.server("a")
            problem = _check(lab, node, left, right, ledger)
            if problem:
                return Outcome.failed(f"after a SIGKILL ({how}): {problem}", _figures(ledger, kills, latency))
            advance(1)
    return Outcome.passed(_figures(ledger, kills, latency))


def _figures(ledger: Ledger, kills: dict[str, int], latency: float) -> dict[str, object]:
    return {"kills": sum(kills.values()), **{f"at_{k}": v for k, v in sorted(kills.items())},
            "acked_commits": len(ledger.acked) - 1, "in_doubt": len(ledger.in_doubt),
            "commit_ms": round(latency * 1000, 1)}


def _commit(conn: object, left: str, right: str, n: int) -> None:
    with conn.transaction():  # type: ignore[attr-defined]
        conn.execute(f"insert into {left} values ({n}, null)")  # type: ignore[attr-defined]
        conn.execute(f"insert into {right} values ({n})")  # type: ignore[attr-defined]
        conn.execute(f"update {left} set mark = 'm' where id = {n - 1}")  # type: ignore[attr-defined]


def _warm_up(lab: Lab, node: Node, left: str, right: str, ledger: Ledger) -> float:
    """A few commits acknowledged; the median commit latency."""
    took = []
    with lab.connect(node) as conn:
        for _ in range(5):
            n = ledger.next_id
            ledger.next_id += 1
            started = time.monotonic()
            _commit(conn, left, right, n)
            took.append(time.monotonic() - started)
            ledger.acked.add(n)
    return statistics.median(took)


def _writer(lab: Lab, node: Node, left: str, right: str, ledger: Ledger, sending: threading.Event,
            stop: threading.Event, limit: int | None = None) -> None:
    """Commit ids one after another until the server dies (or `stop`, or `limit` commits)."""
    try:
        with lab.connect(node) as conn:
            while not stop.is_set() and (limit is None or limit > 0):
                limit = None if limit is None else limit - 1
                n = ledger.next_id
                ledger.next_id += 1
                ledger.in_doubt.add(n)
                sending.set()
                _commit(conn, left, right, n)
                sending.clear()
                ledger.in_doubt.discard(n)
                ledger.acked.add(n)
    except Exception:
        return  # the kill: the id in flight stays in doubt


def _random_kill(lab: Lab, node: Node, left: str, right: str, ledger: Ledger, latency: float) -> None:
    sending, stop = threading.Event(), threading.Event()
    thread = threading.Thread(target=_writer, args=(lab, node, left, right, ledger, sending, stop), daemon=True)
    thread.start()
    time.sleep(lab.rng.uniform(0, 3) * latency)  # a few commits land first
    if not sending.wait(timeout=30):
        stop.set()
    time.sleep(lab.rng.uniform(0, 1.2 * latency))
    node.kill()
    stop.set()
    thread.join(timeout=30)


def _point_kill(lab: Lab, node: Node, left: str, right: str, ledger: Ledger, point: str) -> None:
    """One commit, held at `point` until the SIGKILL."""
    sending, stop = threading.Event(), threading.Event()
    thread = threading.Thread(target=_writer, args=(lab, node, left, right, ledger, sending, stop, 1), daemon=True)
    thread.start()
    reached = wait_until(lambda: f"reached {point}" in node.log_tail(20000), POINT_WAIT_S / 2)
    node.kill()
    thread.join(timeout=30)
    if not reached:
        raise RuntimeError(f"the commit never reached the fault point {point}")


def _check(lab: Lab, node: Node, left: str, right: str, ledger: Ledger) -> str | None:
    """What is wrong with the two tables now (None: old or new state of every commit)."""
    with lab.connect(node) as conn:
        rows = conn.execute(f"select id, mark from {left}").fetchall()
        right_ids = [r[0] for r in conn.execute(f"select id from {right}").fetchall()]
    left_ids = [r[0] for r in rows]
    for name, ids in (("left", left_ids), ("right", right_ids)):
        if len(ids) != len(set(ids)):
            dups = sorted(i for i in set(ids) if ids.count(i) > 1)[:5]
            return f"ids twice in the {name} table: {dups}"
    if set(left_ids) != set(right_ids):
        only_left = sorted(set(left_ids) - set(right_ids))[:5]
        only_right = sorted(set(right_ids) - set(left_ids))[:5]
        return (f"a multi-table commit landed in one table only: ids {only_left} in the left table alone, "
                f"{only_right} in the right alone")
    lost = sorted(ledger.acked - set(left_ids))
    if lost:
        return f"acknowledged commits lost: ids {lost[:5]}"
    unknown = sorted(set(left_ids) - ledger.acked - ledger.in_doubt)
    if unknown:
        return f"ids no client ever sent: {unknown[:5]}"
    present = set(left_ids)
    for id_, mark in rows:
        if (mark == "m") != (id_ + 1 in present):
            return f"id {id_} marked={mark!r} but id {id_ + 1} {'is' if id_ + 1 in present else 'is not'} there: " \
                   "a rewrite landed without its insert, or the other way"
    # What landed is acknowledged now (a later crash must not take it back); what did not is gone.
    ledger.acked |= present
    ledger.in_doubt -= present
    ledger.in_doubt.clear()
    return None


CLAIM = Claim(
    name="commit-crash",
    title="a SIGKILL anywhere in a commit leaves every table old or new, never partial",
    docs="docs/architecture.md#a-write-end-to-end",
    run=run,
)
