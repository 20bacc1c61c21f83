"""Stale-writer fencing: two writers on one tail, the older is fenced — its late acks are refused and
nothing it wrote after losing the term reaches the lake.

The scenario is a paused writer, not a dead one (a GC pause, a VM frozen, a partition): writer A
serves with clients writing, holding acknowledged rows it has not flushed yet (a long window); A is
SIGSTOPped; writer B takes the same tail — on a quorum B wins a higher term from the keepers; on
the Postgres tail A's session is ended first (`pg_terminate_backend`, what a failover script or
TCP keepalives do to a partitioned writer, since A's live session holds the tail's advisory lock)
and B claims the tail, bumping its epoch. B replays what A acknowledged and serves. A is resumed
(SIGCONT) and its clients keep writing. Then, from the clients' records and the lake itself:

- no statement sent to A after B took over is acknowledged (A's late acks are refused);
- none of those rows is in the lake, and no commit of A lands after one of B's: along the table's
  history the tail's LSN never goes back (and, on a quorum, the writer term never decreases);
- every acknowledged row (A's and B's) is in the lake, exactly once.

Figures: statements A refused after the takeover, A's acks after it (0), stale rows and stale
commits in the lake (0), acked rows lost and rows twice (0), the takeover time (B started to B
serving) and the fencing time (A resumed to A's first refusal).
"""

from __future__ import annotations

import contextlib
import os
import re
import signal
import socket
import threading
import time
from collections import Counter
from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import Any

from icegres.verify.deployment import TailPlan
from icegres.verify.lab import Lab, wait_until
from icegres.verify.nodes import Node
from icegres.verify.outcome import Claim, Outcome, Verdict

__all__ = ["CLAIM", "Clients", "LakeTable", "Statement", "read_lake"]

DOCS = "docs/quorum-protocol.md#lake-side-fencing, docs/architecture.md#the-write-ladder"
PAUSED_WINDOW_MS = 3000  # A's group-commit window: it holds acked rows unflushed when paused
ACKS_BEFORE_PAUSE = 20
ACKS_ON_B = 10
RESUMED_S = 4.0  # A runs this long after SIGCONT: past its overdue flush and many refused statements
WAIT_S = 60.0
PG_TERMINATE_WAIT_S = 10.0


# --- clients that record every statement ----------------------------------------------------------


@dataclass
class Statement:
    """One INSERT of one row `ident`, as its client saw it (monotonic seconds)."""

    ident: int
    node: str
    sent: float
    done: float | None = None
    acked: bool = False
    sqlstate: str | None = None  # the error's, when it failed


@dataclass
class Clients:
    """`n` threads inserting unique ids into `table` on `node`, one row per autocommit statement,
    each statement recorded (`statements`). `pause_s` between statements."""

    lab: Lab
    node: Node
    table: str
    n: int
    base: int
    pause_s: float = 0.0
    statements: list[Statement] = field(default_factory=list)
    _lock: threading.Lock = field(default_factory=threading.Lock)
    _stop: threading.Event = field(default_factory=threading.Event)
    _threads: list[threading.Thread] = field(default_factory=list)

    def __enter__(self) -> Clients:
        self._threads = [threading.Thread(target=self._run, args=(w,), daemon=True) for w in range(self.n)]
        for thread in self._threads:
            thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop()

    def stop(self, timeout_s: float = 30.0) -> None:
        self._stop.set()
        for thread in self._threads:
            thread.join(timeout=timeout_s)

    def acked(self) -> list[Statement]:
        with self._lock:
            return [s for s in self.statements if s.acked]

    def acks(self) -> int:
        with self._lock:
            return sum(s.acked for s in self.statements)

    def wait_acks(self, at_least: int, timeout_s: float = WAIT_S) -> bool:
        return wait_until(lambda: self.acks() >= at_least, timeout_s)

    def _run(self, w: int) -> None:
        import psycopg

        i = 0
        conn = None
        try:
            while not self._stop.is_set():
                if conn is None or conn.closed or conn.broken:
                    try:
                        conn = self.lab.connect(self.node)
                    except psycopg.Error:
                        time.sleep(0.1)  # the server is down or restarting: the load waits
                        continue
                ident = self.base + w * 1_000_000 + i
                i += 1
                statement = Statement(ident, self.node.name, time.monotonic())
                with self._lock:
                    self.statements.append(statement)
                try:
                    conn.execute(f"insert into {self.table} values (%s, %s, 'verify')", (ident, w))
                except psycopg.Error as exc:
                    statement.sqlstate = exc.sqlstate or "08006"
                    statement.done = time.monotonic()
                    time.sleep(0.02)
                    continue
                statement.done = time.monotonic()
                statement.acked = True
                if self.pause_s:
                    time.sleep(self.pause_s)
        finally:
            if conn is not None:
                with contextlib.suppress(Exception):
                    conn.close()


# --- what reached the lake --------------------------------------------------------------------------


@dataclass(frozen=True)
class LakeTable:
    """A table as the lake holds it: every id of its current snapshot, and its history's flushes
    of tails, oldest first, as (tail id, tail LSN, quorum term or "")."""

    ids: list[int]
    flushes: list[tuple[str, int, str]]


def read_lake(lab: Lab, table: str) -> LakeTable:
    """Read `table` straight from the deployment's catalog (not through a server)."""
    from pyiceberg.table.snapshots import ancestors_of

    from icegres.engine.catalog import Lakehouse
    from icegres.ladder import QUORUM_TERM_PROPERTY, TAIL_ID_PROPERTY, TAIL_LSN_PROPERTY

    loaded = Lakehouse.from_settings(lab.deployment.settings).catalog.load_table(table)
    current = loaded.current_snapshot()
    if current is None:
        return LakeTable([], [])
    ids = loaded.scan(selected_fields=("id",)).to_arrow().column("id").to_pylist()
    flushes = []
    for snapshot in reversed(list(ancestors_of(current, loaded.metadata))):
        summary = snapshot.summary
        if summary is None or summary.get(TAIL_ID_PROPERTY) is None:
            continue
        flushes.append((summary.get(TAIL_ID_PROPERTY), int(summary.get(TAIL_LSN_PROPERTY) or 0),
                        summary.get(QUORUM_TERM_PROPERTY) or ""))
    return LakeTable(ids, flushes)


def stale_commits(flushes: list[tuple[str, int, str]]) -> int:
    """Flushes that came after a newer writer's: one tail's LSN went back, or its term went down."""
    from icegres.machines.quorum import Term

    stale = 0
    highest: dict[str, tuple[int, Term | None]] = {}
    for tail_id, lsn, term_text in flushes:
        try:
            term = Term.parse(term_text) if term_text else None
        except ValueError:
            term = None  # not a quorum term: the LSN alone tells
        seen = highest.get(tail_id)
        if seen is not None:
            lsn_back = lsn <= seen[0]
            term_down = term is not None and seen[1] is not None and term < seen[1]
            if lsn_back or term_down:
                stale += 1
                continue
        highest[tail_id] = (lsn, term)
    return stale


def create_table(lab: Lab, node: Node, table: str) -> None:
    with lab.connect(node) as conn:
        conn.execute(f"create table {table} (id bigint, w int, note text)")


# --- the claim --------------------------------------------------------------------------------------


def run(lab: Lab) -> Outcome:
    plans = [p for p in lab.tails() if p.kind in ("quorum", "url")]
    if not plans:
        if any(p.kind == "dir" for p in lab.tails()):
            return Outcome.skipped(
                "--tail-dir has no writer to depose: it is one server's local WAL, held with a lock a second "
                "server is refused (tests/e2e/test_write_buffer.py) and taken over only by that server "
                "restarted. Give --tail-quorum (scratch keepers) or --local-keepers, or --tail-url, to prove a "
                "stale writer is fenced")
        return Outcome.skipped("no shared tail configured: give --tail-quorum (scratch keepers) or "
                               "--local-keepers, or --tail-url (a Postgres tail), to prove a stale writer is fenced")
    figures: dict[str, Any] = {}
    failures: list[str] = []
    for plan in plans:
        prefix = f"{plan.kind}: " if len(plans) > 1 else ""
        for r in range(lab.rounds):
            outcome = _round(lab, plan, r)
            for name, value in outcome.figures.items():
                key = prefix + name
                figures[key] = max(figures.get(key, value), value) if isinstance(value, int | float) else value
            if outcome.verdict is Verdict.FAIL:
                failures.append(prefix + outcome.detail)
                break
    if failures:
        return Outcome.failed("; ".join(failures), figures)
    return Outcome.passed(figures, f"{lab.rounds} takeover(s) of a paused writer on " +
                          ", ".join(p.shown for p in plans))


def _round(lab: Lab, plan: TailPlan, r: int) -> Outcome:
    table = lab.table(f"{plan.kind}_{r}")
    a = lab.server(f"{plan.kind}-a{r}", tail=plan, write_buffer_ms=PAUSED_WINDOW_MS)
    create_table(lab, a, table)
    with lab.step(f"{plan.kind} round {r + 1}", 5) as advance, \
            Clients(lab, a, table, 2, base=(2 * r + 1) * 10_000_000) as on_a:
        if not on_a.wait_acks(ACKS_BEFORE_PAUSE):
            return Outcome.failed(f"writer A acknowledged {on_a.acks()} INSERTs in {WAIT_S:g} s: {_last_error(on_a)}")
        advance(1)
        os.kill(a.pid, signal.SIGSTOP)
        try:
            with _stopped(a):
                if plan.kind == "url":
                    _end_session(plan, a)
                b_started = time.monotonic()
                b = lab.server(f"{plan.kind}-b{r}", tail=plan,
                               args=["--data-dir", str(a.data_dir)] if plan.kind == "url" else ())
                took_over = time.monotonic()
                advance(1)
                with Clients(lab, b, table, 1, base=(2 * r + 2) * 10_000_000) as on_b:
                    if not on_b.wait_acks(ACKS_ON_B):
                        return Outcome.failed(f"writer B acknowledged {on_b.acks()} INSERTs in {WAIT_S:g} s "
                                              f"after taking the tail over: {_last_error(on_b)}")
                    advance(1)
                resumed = time.monotonic()
        finally:
            with contextlib.suppress(ProcessLookupError):
                os.kill(a.pid, signal.SIGCONT)
        # A's clients go on after the resume: A's overdue flush runs, their statements are refused.
        time.sleep(RESUMED_S)
        advance(1)
    b.stop()  # SIGTERM: B drains what it acknowledged into the lake
    a.kill()
    lake = read_lake(lab, table)
    advance(1)
    return _judge(on_a, on_b, lake, took_over, resumed, replayed=_replayed(b), takeover_s=took_over - b_started)


@contextlib.contextmanager
def _stopped(node: Node) -> Iterator[None]:
    """While A is paused; if anything fails, A must not be left stopped (nor running unfenced)."""
    try:
        yield
    except BaseException:
        with contextlib.suppress(ProcessLookupError):
            os.kill(node.pid, signal.SIGCONT)
        node.kill()
        raise


def _end_session(plan: TailPlan, node: Node) -> None:
    """End A's Postgres tail session (it holds the tail's advisory lock while A is paused): what a
    failover script does before starting a replacement, and what TCP keepalives do to a
    partitioned writer."""
    import psycopg

    owner = f"{socket.gethostname()}:{node.pid}"
    with psycopg.connect(plan.value, autocommit=True, connect_timeout=10) as conn:
        row = conn.execute("select backend_pid from icegres_tail_owner where owner = %s", (owner,)).fetchone()
        if row is None:
            raise RuntimeError(f"no Postgres tail is owned by {owner} (writer A)")
        conn.execute("select pg_terminate_backend(%s)", (row[0],))
        if not wait_until(lambda: conn.execute("select count(*) from pg_stat_activity where pid = %s",
                                               (row[0],)).fetchone()[0] == 0, PG_TERMINATE_WAIT_S, 0.1):
            raise RuntimeError(f"writer A's Postgres session (backend {row[0]}) did not end")


def _replayed(node: Node) -> int:
    match = re.search(r"replaying (\d+) \w+ tail records", node.log_tail(200_000))
    return int(match.group(1)) if match else 0


def _last_error(clients: Clients) -> str:
    errors = [s for s in clients.statements if s.sqlstate]
    return f"last error SQLSTATE {errors[-1].sqlstate}" if errors else "no error either"


def _judge(on_a: Clients, on_b: Clients, lake: LakeTable, took_over: float, resumed: float, *,
           replayed: int, takeover_s: float) -> Outcome:
    late = [s for s in on_a.statements if s.sent >= took_over]
    late_acked = [s for s in late if s.acked]
    late_refused = [s for s in late if s.sqlstate]
    in_lake = Counter(lake.ids)
    stale_rows = [s.ident for s in late if s.ident in in_lake]
    acked = {s.ident for s in on_a.acked() + on_b.acked()}
    lost = acked - set(in_lake)
    twice = [i for i, n in in_lake.items() if n > 1]
    stale = stale_commits(lake.flushes)
    refusals = [s.done for s in late_refused if s.done is not None]
    figures: dict[str, Any] = {
        "refused after takeover": len(late_refused),
        "acked after takeover": len(late_acked),
        "stale rows in lake": len(stale_rows),
        "stale commits": stale,
        "acked lost": len(lost),
        "rows twice": len(twice),
        "replayed by B": replayed,
        "takeover ms": round(takeover_s * 1000),
        "fenced after resume ms": round((min(refusals) - resumed) * 1000) if refusals else "never",
    }
    problems = []
    if late_acked:
        problems.append(f"writer A acknowledged {len(late_acked)} INSERTs sent after B took the tail over "
                        f"(e.g. id {late_acked[0].ident})")
    if stale_rows:
        problems.append(f"{len(stale_rows)} rows written to A after B took over are in the lake")
    if stale:
        problems.append(f"{stale} commits of the deposed writer A landed after B's (the tail's LSN or term went back)")
    if twice:
        problems.append(f"{len(twice)} rows are in the lake twice (e.g. id {twice[0]}): A published rows B replayed")
    if lost:
        problems.append(f"{len(lost)} acknowledged rows are not in the lake (e.g. id {min(lost)})")
    if not late_refused:
        problems.append("A's clients sent nothing A refused after the resume: the fence was not exercised")
    if problems:
        return Outcome.failed("; ".join(problems), figures)
    return Outcome.passed(figures)


CLAIM = Claim("fencing", "Stale-writer fencing", DOCS, run)
