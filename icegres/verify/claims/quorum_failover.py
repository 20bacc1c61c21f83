"""Quorum failover: one keeper killed, and one keeper's disk wiped and rejoined, under load; writes
continue; nothing acknowledged is lost; the failover time is measured.

A scratch server on the quorum tail takes concurrent INSERTs, each recorded with its outcome. Each
round (with keepers this run started, `--local-keepers`):

- a keeper is SIGKILLed: writes must go on with the other two (the failover time is the longest
  stretch without an acknowledgement from the kill until the load has been acknowledged again for
  a while), then it is restarted on its log;
- a keeper is SIGKILLed and its data directory deleted (a lost disk): writes go on; it comes back
  with `icegres keeper --rejoin <the other two>`, catches up, and writes go on.

Then the majority itself: the load stops, two keepers are SIGKILLed and one more INSERT must not be
acknowledged (nothing is, without a majority). The writer is SIGKILLed, the one keeper left loses
its disk, the other two restart and it rejoins from them (one disk lost at a time, as the operator
procedure says), and a replacement writer recovers from the keepers: every acknowledged row must
be in the lake, exactly once. A writer that acknowledged on one keeper's word loses that row here.

Keepers this run did not start are never killed (verify ends only processes of its own): on
configured keepers the claim proves the writer's side only — the writer SIGKILLed under load and a
replacement winning the term from them, every acknowledged row in the lake — and says so.
"""

from __future__ import annotations

import shutil
import threading
import time
from collections import Counter
from typing import Any

from icegres.verify.claims.fencing import Clients, create_table, read_lake
from icegres.verify.deployment import TailPlan
from icegres.verify.lab import Lab, wait_until
from icegres.verify.nodes import Node, NodeFailed
from icegres.verify.outcome import Claim, Outcome

__all__ = ["CLAIM"]

DOCS = "docs/quorum-protocol.md#replacing-a-keeper-that-lost-its-disk"
WRITERS = 3
ACKS_PER_PHASE = 30
LOAD_TIMEOUT_S = 30.0
REJOIN_TIMEOUT_S = 60.0
RESTART_TIMEOUT_S = 20.0  # a keeper's port can be taken for a moment by an outgoing connection
NO_MAJORITY_WAIT_S = 20.0  # the writer gives an append up after 5 s without a majority
KEEPERS = ("keeper-1", "keeper-2", "keeper-3")


class Broken(Exception):
    """The claim does not hold (the message says how)."""


def run(lab: Lab) -> Outcome:
    plan = next((p for p in lab.tails() if p.kind == "quorum"), None)
    if plan is None:
        return Outcome.skipped("no quorum tail: give --tail-quorum (scratch keepers) or --local-keepers to prove "
                               "a quorum survives losing a keeper")
    local = lab.local_keepers is not None and plan.value == lab.local_keepers
    table = lab.table("t")
    writer = lab.server("w", tail=plan)
    create_table(lab, writer, table)
    figures: dict[str, Any] = {}
    try:
        if local:
            writer = _keeper_faults(lab, plan, table, writer, figures)
        else:
            writer = _writer_failover(lab, table, writer, figures)
    except Broken as exc:
        return Outcome.failed(str(exc), figures)
    if not local:
        return Outcome.passed(figures, "keepers not killed: they are not this run's (verify ends only processes it "
                                       "started); proved the writer's failover on them — give --local-keepers for "
                                       "the keeper failover")
    return Outcome.passed(figures, f"{lab.rounds} round(s) of a keeper killed and a keeper's disk lost, then "
                                   "a majority lost")


def _keeper_faults(lab: Lab, plan: TailPlan, table: str, writer: Node, figures: dict[str, Any]) -> Node:
    gaps: list[float] = []
    rejoins: list[float] = []
    with lab.step("keepers killed and wiped", 2 * lab.rounds + 1) as advance, \
            Clients(lab, writer, table, WRITERS, base=10_000_000) as load:
        _more_acks(load, "before any fault")
        steady = _longest_gap(load, min(s.done for s in load.acked() if s.done is not None))
        for r in range(lab.rounds):
            victim = lab.rng.choice(KEEPERS)
            killed = time.monotonic()
            lab.nodes.by_name[victim].kill()
            _more_acks(load, f"round {r + 1}: with {victim} killed")
            gaps.append(_longest_gap(load, killed))
            _restart_keeper(lab, victim)
            _more_acks(load, f"round {r + 1}: after {victim} restarted")
            advance(1)

            victim = lab.rng.choice(KEEPERS)
            killed = time.monotonic()
            _lose_disk(lab.nodes.by_name[victim])
            _more_acks(load, f"round {r + 1}: with {victim}'s disk lost")
            gaps.append(_longest_gap(load, killed))
            rejoins.append(_rejoin(lab, victim))
            _more_acks(load, f"round {r + 1}: after {victim} rejoined")
            advance(1)
        load.stop()
        figures.update({"keeper kills": lab.rounds, "disks lost": lab.rounds,
                        "failover ms": round(max(gaps) * 1000), "steady max gap ms": round(steady * 1000),
                        "rejoin ms": round(max(rejoins) * 1000)})

        # Without a majority nothing is acknowledged; a row acknowledged anyway lives on one keeper.
        survivor = lab.rng.choice(KEEPERS)
        down = [name for name in KEEPERS if name != survivor]
        for name in down:
            lab.nodes.by_name[name].kill()
        lone = _insert_without_majority(lab, writer, table, ident=9_000_000_000)
        figures["acked without majority"] = int(lone)
        writer.kill()
        _lose_disk(lab.nodes.by_name[survivor])
        for name in down:
            _restart_keeper(lab, name)
        _rejoin(lab, survivor)
        started = time.monotonic()
        writer = lab.restart(writer)
        figures["writer takeover ms"] = round((time.monotonic() - started) * 1000)
        advance(1)
    acked = {s.ident for s in load.acked()} | ({9_000_000_000} if lone else set())
    problems = _lake_problems(lab, table, acked, figures)
    if lone:
        problems.insert(0, "the writer acknowledged an INSERT with 2 of 3 keepers down (nothing may be "
                           "acknowledged without a majority)")
    if problems:
        raise Broken("; ".join(problems))
    return writer


def _writer_failover(lab: Lab, table: str, writer: Node, figures: dict[str, Any]) -> Node:
    with lab.step("writer killed on the configured keepers", lab.rounds) as advance, \
            Clients(lab, writer, table, WRITERS, base=20_000_000) as load:
        takeovers = []
        for r in range(lab.rounds):
            _more_acks(load, f"round {r + 1}: before the writer is killed")
            writer.kill()
            started = time.monotonic()
            writer = lab.restart(writer)
            takeovers.append(time.monotonic() - started)
            load.node = writer
            _more_acks(load, f"round {r + 1}: after the replacement writer took over")
            advance(1)
        load.stop()
    figures.update({"keeper kills": "not run (configured keepers)", "writer kills": lab.rounds,
                    "writer takeover ms": round(max(takeovers) * 1000)})
    writer.stop()  # SIGTERM: the writer drains what it acknowledged into the lake
    problems = _lake_problems(lab, table, {s.ident for s in load.acked()}, figures)
    if problems:
        raise Broken("; ".join(problems))
    return writer


# --- faults and measures -----------------------------------------------------------------------------


def _more_acks(load: Clients, when: str) -> None:
    target = load.acks() + ACKS_PER_PHASE
    if not load.wait_acks(target, LOAD_TIMEOUT_S):
        errors = [s.sqlstate for s in load.statements if s.sqlstate]
        raise Broken(f"writes stopped {when}: {load.acks() - target + ACKS_PER_PHASE} of {ACKS_PER_PHASE} INSERTs "
                     f"acknowledged in {LOAD_TIMEOUT_S:g} s" + (f" (last SQLSTATE {errors[-1]})" if errors else ""))


def _longest_gap(load: Clients, since: float) -> float:
    """The longest stretch without an acknowledgement from `since` to the last one recorded."""
    times = sorted(s.done for s in load.acked() if s.done is not None and s.done >= since)
    marks = [since, *times]
    return max((b - a for a, b in zip(marks, marks[1:], strict=False)), default=0.0)


def _lose_disk(node: Node) -> None:
    node.kill()
    shutil.rmtree(node.data_dir)


def _restart_keeper(lab: Lab, name: str) -> Node:
    """Keeper `name` started again on its log and its port (never with the --rejoin it may have
    been started with: that refuses a directory holding a log)."""
    deadline = time.monotonic() + RESTART_TIMEOUT_S
    while True:
        try:
            return lab.nodes.keeper(name, init=False)
        except NodeFailed:
            if time.monotonic() > deadline:
                raise
            time.sleep(0.2)


def _rejoin(lab: Lab, name: str) -> float:
    """Start keeper `name` (its disk lost) with --rejoin the other two; seconds until it caught up."""
    others = ",".join(lab.nodes.by_name[n].address for n in KEEPERS if n != name)
    log_path = lab.nodes.by_name[name].log_path
    offset = log_path.stat().st_size if log_path.exists() else 0
    started = time.monotonic()
    deadline = started + RESTART_TIMEOUT_S
    while True:
        try:
            node = lab.nodes.keeper(name, init=False, extra=["--rejoin", others])
            break
        except NodeFailed:
            if time.monotonic() > deadline:
                raise
            time.sleep(0.2)

    def caught_up() -> bool:
        with open(log_path, "rb") as log:
            log.seek(offset)
            return b"caught up and serving" in log.read()

    if not wait_until(lambda: caught_up() or not node.running(), REJOIN_TIMEOUT_S, 0.05) or not node.running():
        raise Broken(f"{name} did not catch up within {REJOIN_TIMEOUT_S:g} s after losing its disk: "
                     f"{node.log_tail(500)}")
    return time.monotonic() - started


def _insert_without_majority(lab: Lab, writer: Node, table: str, ident: int) -> bool:
    """Whether `writer` acknowledges one INSERT (it must not: the caller took its majority away)."""
    import psycopg

    acked = threading.Event()

    def insert() -> None:
        try:
            with lab.connect(writer) as conn:
                conn.execute(f"insert into {table} values (%s, -1, 'no majority')", (ident,))
            acked.set()
        except psycopg.Error:
            pass

    thread = threading.Thread(target=insert, daemon=True)
    thread.start()
    thread.join(NO_MAJORITY_WAIT_S)
    return acked.is_set()


def _lake_problems(lab: Lab, table: str, acked: set[int], figures: dict[str, Any]) -> list[str]:
    lake = read_lake(lab, table)
    in_lake = Counter(lake.ids)
    lost = acked - set(in_lake)
    twice = [i for i, n in in_lake.items() if n > 1]
    figures.update({"acked": len(acked), "acked lost": len(lost), "rows twice": len(twice)})
    problems = []
    if lost:
        problems.append(f"{len(lost)} acknowledged rows are not in the lake (e.g. id {min(lost)})")
    if twice:
        problems.append(f"{len(twice)} rows are in the lake twice (e.g. id {twice[0]})")
    return problems


CLAIM = Claim("quorum-failover", "Quorum failover", DOCS, run)
