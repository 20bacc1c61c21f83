"""Snapshot isolation, checked on the history: concurrent clients on two servers of one catalog run
Jepsen/Elle's list-append workload over pgwire, and the recorded history is checked for every
anomaly snapshot isolation forbids (icegres/verify/list_append.py); a second phase runs the same
under SERIALIZABLE and checks for write skew (G2) as well.

How a list is kept in SQL (Jepsen's own encoding for PostgreSQL): each key is one row `(k int,
vals text)`, inserted by a statement of its own so that it has a data file of its own, and its
list is the text `,v1,v2,...`. An append is `UPDATE t SET vals = vals || ',v' WHERE k = key`, a
read is `SELECT vals FROM t WHERE k = key`. The list's order is the order in which the appends'
transactions committed, as the database decided it; no client computes a position. Appending is a
write of the key's row, so two transactions appending to one key write one object, and
first-committer-wins must abort one of them — snapshot isolation as it is defined over Elle's
objects. (A row per element would not do: inserts of new rows never conflict under snapshot
isolation, in PostgreSQL as in icegres, so two transactions could both "append" after reading the
same list, which the checker must report as a lost update, and the order would have to come from
a position column the clients compute.) icegres detects conflicts per data file; with one row per
file that is per key, as in PostgreSQL.

Tables rotate: every copy-on-write commit leaves a manifest that every later snapshot of the
table carries, so a commit's cost grows with the table's history (~5 ms per earlier commit on the
development machine: 60 ms fresh, 850 ms after 250 single-row UPDATEs). The workload moves to a
fresh table with fresh keys every TXNS_PER_TABLE transactions; different tables' keys are simply
different keys of one history.

Each worker draws a transaction of 1 to OPS_MAX micro-ops (a read or an append, on one of the
table's KEYS keys) and runs it in a block `BEGIN ISOLATION LEVEL ...`; on 40001 it records the
attempt as failed and runs it again with fresh values, at most ATTEMPTS_MAX times. A connection
lost during COMMIT is recorded with an unknown outcome (it may have committed) and the worker
reconnects.
"""

from __future__ import annotations

import itertools
import random
import threading
import time
from collections import Counter
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field

import psycopg

from icegres.verify.lab import Lab
from icegres.verify.list_append import Append, History, MicroOp, Read, Report, Status, Txn, check
from icegres.verify.nodes import Node
from icegres.verify.outcome import Claim, Outcome

__all__ = ["CLAIM", "PHASES", "Phase", "run", "run_phase"]

WORKERS = 4  # alternately on servers a and b
KEYS = 5  # per table: few, so that transactions collide
OPS_MAX = 4
TXNS_PER_ROUND = 30  # per phase
TXNS_PER_TABLE = 40
ATTEMPTS_MAX = 3  # per transaction: the first and two retries after 40001
WORKER_JOIN_S = 600.0
PHASES = ("repeatable read", "serializable")  # the second is also checked for G2
DETAIL_CHARS_MAX = 600
SERIALIZATION_FAILURE = "40001"


def run(lab: Lab) -> Outcome:
    """Both phases; the SERIALIZABLE one only if snapshot isolation held."""
    servers = (lab.server("a"), lab.server("b"))
    phases: list[Phase] = []
    for level in PHASES:
        phases.append(run_phase(lab, level, servers))
        if phases[-1].problem is not None:
            return Outcome.failed(phases[-1].problem, _figures(phases))
    return Outcome.passed(_figures(phases))


@dataclass(frozen=True)
class Phase:
    """One phase's history checked: `error` if a worker could not go on (the history ends there)."""

    level: str
    report: Report
    check_s: float
    error: str | None
    outcomes: Counter[str]  # attempts by how they ended

    @property
    def problem(self) -> str | None:
        """The phase's FAIL detail, or None if it passed."""
        if self.error is not None:
            return f"{self.level}: {self.error}"
        if not self.report.valid:
            text = f"{self.level}: {self.report.summary()}"
            return text if len(text) <= DETAIL_CHARS_MAX else text[:DETAIL_CHARS_MAX - 1] + "…"
        return None


def run_phase(lab: Lab, level: str, servers: tuple[Node, ...]) -> Phase:
    """TXNS_PER_ROUND x rounds transactions at isolation `level` by WORKERS clients spread over
    `servers`, and their history checked (for G2 too under SERIALIZABLE)."""
    txns = TXNS_PER_ROUND * lab.rounds
    workload = _Workload(lab, level.replace(" ", "_"), servers[0], iter(range(txns)))
    seeds = [lab.rng.getrandbits(64) for _ in range(WORKERS)]
    with lab.step(f"{level} txns", txns) as advance:
        workers = [_Worker(workload, servers[n % len(servers)], n, random.Random(seeds[n]), advance)
                   for n in range(WORKERS)]
        threads = [threading.Thread(target=w.run, name=f"list-append-{n}", daemon=True)
                   for n, w in enumerate(workers)]
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join(timeout=WORKER_JOIN_S)
    stuck = [t.name for t in threads if t.is_alive()]
    if stuck:
        raise RuntimeError(f"{level}: workers {', '.join(stuck)} still running after {WORKER_JOIN_S:g} s")
    started = time.monotonic()
    report = check(History(tuple(workload.txns)), serializable=level == "serializable")
    check_s = time.monotonic() - started
    return Phase(level, report, check_s, next((w.error for w in workers if w.error is not None), None),
                 workload.outcomes)


def _figures(phases: list[Phase]) -> dict[str, object]:
    """Totals over the phases run."""
    reports = [p.report for p in phases]
    outcomes = sum((p.outcomes for p in phases), Counter())
    figures: dict[str, object] = {
        "txns": sum(r.txns for r in reports),
        "ok": sum(r.ok for r in reports),
        "aborted_40001": outcomes[SERIALIZATION_FAILURE],
        "in_doubt": sum(r.unknown for r in reports),
        "ops": sum(r.ops for r in reports),
        "anomalies": sum(sum(r.counts.values()) for r in reports),
        "check_s": round(sum(p.check_s for p in phases), 3),
    }
    if outcomes["lost before COMMIT"]:
        figures["lost_connections"] = outcomes["lost before COMMIT"]
    return figures


class ClaimBroken(Exception):
    """The table is not what the workload made it (a key without exactly one row): no history
    can be recorded past this."""


@dataclass
class _Table:
    name: str
    first_key: int


@dataclass
class _Workload:
    """What the workers share: the tickets (one per transaction to run), the tables by
    generation, fresh values and the history recorded so far."""

    lab: Lab
    phase: str
    creator: Node
    tickets: Iterator[int]
    txns: list[Txn] = field(default_factory=list)
    outcomes: Counter[str] = field(default_factory=Counter)  # "ok", "40001", "lost before COMMIT", ...
    _tables: dict[int, _Table] = field(default_factory=dict)
    _lock: threading.Lock = field(default_factory=threading.Lock)
    _table_lock: threading.Lock = field(default_factory=threading.Lock)
    _values: itertools.count[int] = field(default_factory=lambda: itertools.count(1))

    def ticket(self) -> int | None:
        with self._lock:
            return next(self.tickets, None)

    def value(self) -> int:
        with self._lock:
            return next(self._values)

    def record(self, process: int, ops: list[MicroOp], status: Status, start_s: float, outcome: str = "ok") -> None:
        with self._lock:
            self.txns.append(Txn(len(self.txns), process, tuple(ops), status, start_s, time.monotonic()))
            self.outcomes[outcome] += 1

    def table(self, ticket: int) -> _Table:
        """The table of `ticket`'s generation, made (with its keys' rows) by the first to need it."""
        generation = ticket // TXNS_PER_TABLE
        with self._table_lock:
            table = self._tables.get(generation)
            if table is None:
                table = _Table(self.lab.table(f"lists_{self.phase}_{generation}"), generation * KEYS)
                with self.lab.connect(self.creator) as conn:
                    conn.execute(f"create table {table.name} (k int, vals text)")
                    for key in range(table.first_key, table.first_key + KEYS):
                        conn.execute(f"insert into {table.name} values ({key}, '')")  # a data file per key
                self._tables[generation] = table
            return table


@dataclass
class _Worker:
    workload: _Workload
    node: Node
    process: int
    rng: random.Random
    advance: Callable[[int], None]
    error: str | None = None

    def run(self) -> None:
        conn: psycopg.Connection[tuple[object, ...]] | None = None
        try:
            while (ticket := self.workload.ticket()) is not None:
                table = self.workload.table(ticket)
                plan = [(self.rng.random() < 0.5, table.first_key + self.rng.randrange(KEYS))
                        for _ in range(self.rng.randint(1, OPS_MAX))]
                for _ in range(ATTEMPTS_MAX):
                    if conn is None or conn.closed:
                        conn = self.workload.lab.connect(self.node)
                    if self._attempt(conn, table.name, plan) is not Status.FAIL:
                        break
                self.advance(1)
        except Exception as exc:  # reported by the phase: the history stops here
            self.error = f"{type(exc).__name__}: {exc}".splitlines()[0]
        finally:
            if conn is not None:
                conn.close()

    def _attempt(self, conn: psycopg.Connection[tuple[object, ...]], table: str, plan: list[tuple[bool, int]]) -> Status:
        """Run `plan` once as a transaction block and record it; its status."""
        workload = self.workload
        ops: list[MicroOp] = []
        started = time.monotonic()
        try:
            conn.execute(f"begin isolation level {workload.phase.replace('_', ' ')}")
            for append, key in plan:
                if append:
                    value = workload.value()
                    ops.append(Append(key, value))  # before the statement: if it fails, the attempt did
                    updated = conn.execute(f"update {table} set vals = vals || ',{value}' where k = {key}").rowcount
                    if updated != 1:
                        raise ClaimBroken(f"an append to key {key} of {table} updated {updated} rows, not 1")
                else:
                    rows = conn.execute(f"select vals from {table} where k = {key}").fetchall()
                    if len(rows) != 1:
                        raise ClaimBroken(f"key {key} of {table} has {len(rows)} rows, not 1")
                    ops.append(Read(key, tuple(int(v) for v in str(rows[0][0]).split(",") if v)))
        except psycopg.Error as exc:
            return self._ended(conn, ops, started, exc, committing=False)
        try:
            conn.execute("commit")
        except psycopg.Error as exc:
            return self._ended(conn, ops, started, exc, committing=True)
        workload.record(self.process, ops, Status.OK, started)
        return Status.OK

    def _ended(self, conn: psycopg.Connection[tuple[object, ...]], ops: list[MicroOp], started: float,
               exc: psycopg.Error, *, committing: bool) -> Status:
        """Record an attempt that `exc` ended; its status. 40001 is an abort. A lost connection, or
        class 08 with the connection alive (the server's own "outcome unknown"), is an abort
        before COMMIT and an unknown outcome during it (then the reads are unobserved: the
        transaction may not have committed). Any other error is none this workload can meet:
        it ends the worker, and the claim reports it."""
        sqlstate = exc.sqlstate or ""
        if conn.broken or sqlstate.startswith("08"):
            conn.close()
            outcome = "lost during COMMIT" if committing else "lost before COMMIT"
            status = Status.INFO if committing else Status.FAIL
            if committing:
                ops = [Read(op.key, None) if isinstance(op, Read) else op for op in ops]
        elif sqlstate == SERIALIZATION_FAILURE:
            conn.execute("rollback")  # after a COMMIT that failed the block is over: PostgreSQL only warns
            outcome, status = SERIALIZATION_FAILURE, Status.FAIL
        else:
            raise exc
        self.workload.record(self.process, ops, status, started, outcome)
        return status


CLAIM = Claim(
    name="snapshot-isolation",
    title="concurrent transactions show no anomaly snapshot isolation forbids (and SERIALIZABLE no write skew)",
    docs="docs/limitations.md#writes",
    run=run,
)
