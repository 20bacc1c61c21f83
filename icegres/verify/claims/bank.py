"""The bank invariant: money moves between accounts under concurrency and none is made or lost.

Accounts live in one table, one row (and one data file) each. Workers on two scratch servers run
transfers as REPEATABLE READ transaction blocks that read both balances and write the new ones as
computed values — the read-modify-write pattern that snapshot isolation's first-committer-wins
rule must protect from lost updates — retrying on 40001. Readers meanwhile sum every balance
(autocommit) and read the table twice in one block. Checked:
- every read of the total equals the initial total, and sees every account;
- two reads inside one block see the same balances (a snapshot does not move);
- the final balances equal the initial ones plus the committed transfers (a transfer whose
  COMMIT got no answer may have landed or not: some subset of those must explain the rest).
"""

from __future__ import annotations

import itertools
import random
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field

import psycopg

from icegres.verify.lab import Lab
from icegres.verify.nodes import Node
from icegres.verify.outcome import Claim, Outcome

__all__ = ["CLAIM"]

ACCOUNTS = 8
OPENING_BALANCE = 1000
WORKERS = 4
TRANSFERS_PER_WORKER_PER_ROUND = 8
IN_DOUBT_SUBSETS_MAX = 12  # 2**12 subsets at most to explain transfers whose COMMIT got no answer


@dataclass
class Books:
    lock: threading.Lock = field(default_factory=threading.Lock)
    committed: list[tuple[int, int, int]] = field(default_factory=list)  # (from, to, amount)
    in_doubt: list[tuple[int, int, int]] = field(default_factory=list)
    conflicts: int = 0
    reads: int = 0
    bad_reads: list[str] = field(default_factory=list)


def run(lab: Lab) -> Outcome:
    table = lab.table("accounts")
    a, b = lab.server("a"), lab.server("b")
    with lab.connect(a) as conn:
        conn.execute(f"create table {table} (id int, balance bigint)")
        for n in range(ACCOUNTS):  # one statement, one data file each: transfers touch their own files
            conn.execute(f"insert into {table} values ({n}, {OPENING_BALANCE})")
    books = Books()
    done = threading.Event()
    total = WORKERS * TRANSFERS_PER_WORKER_PER_ROUND * lab.rounds
    with lab.step("transfers", total) as advance:
        workers = [threading.Thread(target=_worker, args=(lab, (a, b)[n % 2], table, books, n, advance), daemon=True)
                   for n in range(WORKERS)]
        readers = [threading.Thread(target=_reader, args=(lab, node, table, books, done), daemon=True)
                   for node in (a, b)]
        for thread in workers + readers:
            thread.start()
        for thread in workers:
            thread.join(timeout=600)
        done.set()
        for thread in readers:
            thread.join(timeout=60)
    with lab.connect(a) as conn:
        final = dict(conn.execute(f"select id, balance from {table}").fetchall())
    figures = {"transfers": len(books.committed), "conflicts_40001": books.conflicts, "in_doubt": len(books.in_doubt),
               "total_reads": books.reads, "bad_reads": len(books.bad_reads)}
    if books.bad_reads:
        return Outcome.failed(books.bad_reads[0], figures)
    problem = _explain_final(final, books)
    return Outcome.failed(problem, figures) if problem else Outcome.passed(figures)


def _worker(lab: Lab, node: Node, table: str, books: Books, n: int, advance: Callable[[int], None]) -> None:
    rng = random.Random(lab.rng.random() + n)
    with lab.connect(node) as conn:
        for _ in range(TRANSFERS_PER_WORKER_PER_ROUND * lab.rounds):
            src, dst = rng.sample(range(ACCOUNTS), 2)
            while True:
                amount = 0
                try:
                    conn.execute("begin isolation level repeatable read")
                    balances = dict(conn.execute(f"select id, balance from {table} where id in ({src}, {dst})").fetchall())
                    amount = rng.randint(1, 50)
                    conn.execute(f"update {table} set balance = {balances[src] - amount} where id = {src}")
                    conn.execute(f"update {table} set balance = {balances[dst] + amount} where id = {dst}")
                    conn.execute("commit")
                except psycopg.errors.SerializationFailure:
                    conn.execute("rollback")
                    with books.lock:
                        books.conflicts += 1
                    continue
                except psycopg.OperationalError:
                    with books.lock:
                        books.in_doubt.append((src, dst, amount))
                    return
                with books.lock:
                    books.committed.append((src, dst, amount))
                break
            advance(1)


def _reader(lab: Lab, node: Node, table: str, books: Books, done: threading.Event) -> None:
    expected = ACCOUNTS * OPENING_BALANCE
    with lab.connect(node) as conn:
        while not done.is_set():
            count, total = conn.execute(f"select count(*), sum(balance) from {table}").fetchone()
            with conn.transaction():
                first = conn.execute(f"select id, balance from {table} order by id").fetchall()
                time.sleep(0.05)
                second = conn.execute(f"select id, balance from {table} order by id").fetchall()
            with books.lock:
                books.reads += 1
                if count != ACCOUNTS or total != expected:
                    books.bad_reads.append(f"a read saw {count} accounts holding {total} (expected {ACCOUNTS} "
                                           f"holding {expected})")
                if first != second:
                    books.bad_reads.append(f"two reads in one transaction block differ: {first} then {second}")


def _explain_final(final: dict[int, int], books: Books) -> str | None:
    if len(final) != ACCOUNTS:
        return f"{len(final)} accounts at the end, not {ACCOUNTS}"
    doubt = books.in_doubt[:IN_DOUBT_SUBSETS_MAX]
    if len(books.in_doubt) > IN_DOUBT_SUBSETS_MAX:
        return f"{len(books.in_doubt)} transfers in doubt: too many to explain the final balances"
    base = _balances(books.committed)
    for size in range(len(doubt) + 1):
        for landed in itertools.combinations(doubt, size):
            if _balances(list(landed), base) == final:
                return None
    total = sum(final.values())
    return (f"final balances {final} (total {total}) are not the opening ones plus the {len(books.committed)} "
            f"committed transfers, which give {base} (total {sum(base.values())}): an update was lost")


def _balances(transfers: list[tuple[int, int, int]], start: dict[int, int] | None = None) -> dict[int, int]:
    out = dict(start) if start else {n: OPENING_BALANCE for n in range(ACCOUNTS)}
    for src, dst, amount in transfers:
        out[src] -= amount
        out[dst] += amount
    return out


CLAIM = Claim(
    name="bank",
    title="concurrent transfers never make or lose money; every read of the total equals the opening total",
    docs="docs/architecture.md#the-transaction-block",
    run=run,
)
