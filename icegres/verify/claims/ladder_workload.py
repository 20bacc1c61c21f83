"""What the write-ladder claims share: writers that record exactly which ids a scratch server
acknowledged, a restart that is not waited for (to kill it while it replays), and the count of
what came back.

The writers are clients as an operator's would be: psycopg, autocommit, one INSERT of one
unique id per statement into a table without a primary key, which is the statement the write
ladder buffers (docs/architecture.md, "The write ladder"). An id counts as acknowledged once
the INSERT returned; the one in flight when the server died is recorded apart, since it may or
may not have been made durable.
"""

from __future__ import annotations

import threading
from collections import Counter
from collections.abc import Iterable
from dataclasses import dataclass, field, replace

from icegres.verify.lab import Lab, wait_until
from icegres.verify.nodes import Node

__all__ = ["NO_TAIL", "Tally", "Writers", "create_table", "log_since", "log_size", "read_ids", "ready",
           "start_unready", "wait_exit_or_ready"]

NO_TAIL = ("no write tail configured: give --write-buffer-ms with --tail-dir DIR, --tail-url postgresql://… "
           "or --tail-quorum host:port,… (or --local-keepers)")
WRITER_THREADS = 4
FIRST_ACK_TIMEOUT_S = 60.0
EXAMPLES_SHOWN_MAX = 8


class Writers:
    """`threads` clients inserting ids `base + thread * 10**7 + i`, spread over `tables`, until
    stopped or the server goes away. `acked` holds every id whose INSERT returned."""

    def __init__(self, lab: Lab, node: Node, tables: Iterable[str], *, base: int,
                 threads: int = WRITER_THREADS) -> None:
        self.lab, self.node, self.tables, self.base = lab, node, list(tables), base
        self.acked: list[int] = []
        self.in_flight: list[int] = []  # sent when the server went away: outcome unknown
        self.errors: list[str] = []
        self._lock = threading.Lock()
        self._stop = threading.Event()
        self._threads = [threading.Thread(target=self._run, args=(n,), daemon=True, name=f"verify-writer-{n}")
                         for n in range(threads)]

    def __enter__(self) -> Writers:
        for thread in self._threads:
            thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop()

    def stop(self) -> None:
        self._stop.set()
        for thread in self._threads:
            thread.join(timeout=60)

    def count(self) -> int:
        with self._lock:
            return len(self.acked)

    def wait_first_acks(self, n: int = 1) -> None:
        """Until `n` ids are acknowledged; RuntimeError if a writer failed or none came in time."""
        if not wait_until(lambda: self.count() >= n or bool(self.errors), FIRST_ACK_TIMEOUT_S):
            raise RuntimeError(f"no write was acknowledged by {self.node.name} within {FIRST_ACK_TIMEOUT_S:g} s")
        if self.errors:
            raise RuntimeError(f"a writer failed: {self.errors[0]}")

    def table_of(self, ident: int) -> str:
        return self.tables[ident % len(self.tables)]

    def _run(self, n: int) -> None:
        import psycopg

        ident = None
        try:
            with self.lab.connect(self.node) as conn:
                for i in range(10**7):
                    if self._stop.is_set():
                        return
                    ident = self.base + n * 10**7 + i
                    conn.execute(f"INSERT INTO {self.table_of(ident)} VALUES (%s, %s)", (ident, n))
                    with self._lock:
                        self.acked.append(ident)
                    ident = None
        except (psycopg.OperationalError, psycopg.InterfaceError):
            # The server went away (killed, or shutting down): what it acknowledged is in `acked`.
            if ident is not None:
                with self._lock:
                    self.in_flight.append(ident)
        except Exception as exc:
            self.errors.append(f"{type(exc).__name__}: {exc}")


def create_table(lab: Lab, node: Node, table: str) -> None:
    """An empty `table (id bigint, w int)`: no primary key, so its autocommit INSERTs are buffered."""
    with lab.connect(node) as conn:
        conn.execute(f"DROP TABLE IF EXISTS {table}")
        conn.execute(f"CREATE TABLE {table} (id bigint, w int)")


def read_ids(lab: Lab, node: Node, tables: Iterable[str]) -> Counter[int]:
    """How many times each id is in `tables`, read over pgwire as any client would."""
    seen: Counter[int] = Counter()
    with lab.connect(node) as conn:
        for table in tables:
            seen.update(row[0] for row in conn.execute(f"SELECT id FROM {table}"))
    return seen


@dataclass
class Tally:
    """Acknowledged ids against what a reader found: lost (acked, absent) and duplicated (any id
    present more than once, acknowledged or not)."""

    acked: set[int] = field(default_factory=set)
    in_flight: set[int] = field(default_factory=set)
    lost: list[int] = field(default_factory=list)
    duplicated: list[int] = field(default_factory=list)
    in_flight_found: int = 0
    acked_count: int = 0  # merged tallies: how many ids each tail acknowledged, added up
    in_flight_count: int = 0

    def add(self, writers: Writers) -> None:
        self.acked.update(writers.acked)
        self.in_flight.update(writers.in_flight)

    def check(self, seen: Counter[int]) -> None:
        self.lost = sorted(self.acked - seen.keys())
        self.duplicated = sorted(i for i, n in seen.items() if n > 1)
        self.in_flight_found = len(self.in_flight & seen.keys())

    def merge(self, other: Tally) -> None:
        """`other`'s findings (another tail's, checked) added to these. Tails reuse ids (each has
        tables of its own), so the totals are counts, not unions of ids."""
        self.acked_count += len(other.acked)
        self.in_flight_count += len(other.in_flight)
        self.lost += other.lost
        self.duplicated += other.duplicated
        self.in_flight_found += other.in_flight_found

    def shown(self) -> str:
        return f"{len(self.acked)} acked/{len(self.lost)} lost/{len(self.duplicated)} dup"

    @property
    def holds(self) -> bool:
        return not self.lost and not self.duplicated

    def broken(self, where: str) -> str:
        """One line naming what broke (empty when nothing did)."""
        parts = []
        if self.lost:
            parts.append(f"{len(self.lost)} acknowledged id(s) lost ({_examples(self.lost)})")
        if self.duplicated:
            parts.append(f"{len(self.duplicated)} id(s) duplicated ({_examples(self.duplicated)})")
        return f"{where}: {'; '.join(parts)}" if parts else ""


def _examples(ids: list[int]) -> str:
    shown = ", ".join(str(i) for i in ids[:EXAMPLES_SHOWN_MAX])
    return f"ids {shown}{', …' if len(ids) > EXAMPLES_SHOWN_MAX else ''}"


def start_unready(lab: Lab, node: Node, *, faults: str = "") -> Node:
    """`node` started again without waiting for /ready (it is replaying its tail), with the fault
    points `faults` added to whatever ICEGRES_FAULTS it and the run already carry."""
    env = dict(node.env)
    if faults:
        given = env.get("ICEGRES_FAULTS", lab.nodes.base_env.get("ICEGRES_FAULTS", ""))
        env["ICEGRES_FAULTS"] = ",".join(part for part in (given, faults) if part.strip())
    return lab.nodes.restart(replace(node, env=env), wait_ready=False)


def log_since(node: Node, offset: int) -> str:
    """What `node`'s log gained after `offset` bytes (the log is appended to across restarts)."""
    try:
        with open(node.log_path, "rb") as log:
            log.seek(offset)
            return log.read().decode(errors="replace")
    except OSError:
        return ""


def log_size(node: Node) -> int:
    try:
        return node.log_path.stat().st_size
    except OSError:
        return 0


def wait_exit_or_ready(node: Node, timeout_s: float) -> int | None:
    """The process's exit status once it ends; None once it serves (or still runs after
    `timeout_s`)."""
    assert node.proc is not None
    wait_until(lambda: not node.running() or ready(node), timeout_s, interval_s=0.02)
    return node.proc.poll()


def ready(node: Node) -> bool:
    """Whether /ready answers 200 (the tail is replayed and the server serves)."""
    import urllib.request

    try:
        with urllib.request.urlopen(f"http://127.0.0.1:{node.ports['ops_port']}/ready", timeout=1) as reply:
            return bool(reply.status == 200)
    except Exception:
        return False
