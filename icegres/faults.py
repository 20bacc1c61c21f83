"""Fault-injection points for crash tests: inert unless the environment variable ICEGRES_FAULTS is set.

A point is a named place in a blocking code path (`point("mid-publish")`, called from worker
threads) where a test can make the server stall or die, to prove what a crash there leaves behind:

    ICEGRES_FAULTS="before-publish=sleep:30,mid-publish=crash"

Each comma-separated entry is `NAME=ACTION`, where NAME is one of `POINTS` and ACTION is
`sleep:SECONDS` (0 <= SECONDS <= `SLEEP_S_MAX`, the calling thread blocks) or `crash`
(`os._exit(137)` on the spot: no cleanup, no flush, as close to SIGKILL as a process can do to
itself). Before acting, a point writes one line to stderr, `icegres-fault: reached NAME (ACTION)`,
so a test that reads the server's log knows the fault has been reached.

Points:
  before-publish  the commit's snapshots (manifests, manifest lists) are written, the catalog
                  has not been asked to commit (`LakeWorld.publish`).
  mid-publish     SQL catalogs: the new table metadata files are written, the database
                  transaction that moves the pointers has not begun; REST: just before the
                  `transactions/commit` POST (`catalog.commit_tables`).
  after-flush-commit  the write buffer's flush committed (its snapshot carries the tail
                  watermark) and is mounted; the WAL has not been told it may trim
                  (`icegres.ladder`).
  after-publish   a session's commit is in the catalog; the client has not been answered
                  (`protocol/pgwire/writes.publish`).
  after-catalog-intent  a block's catalog plan (its DDL) is recorded, or its decision is;
                  (`engine/catalog_world.py`, the catalog commit machine).
  after-catalog-move    one rename of a block's plan applied; the next not begun.
  after-catalog-purge   the block is decided and its hidden tables dropped; the intent
                  record not yet forgotten.

Broken guarantees (`icegres verify`'s own tests): a few points name a guarantee instead of a place,
and their only action is `break` — the code path that keeps the guarantee asks `broken(NAME)` and,
when it is set, does the wrong thing on purpose. They exist so a test can prove that the verify
claim covering the guarantee FAILs when it does not hold; nothing else sets them.

Broken guarantees:
  atomic-publish  SQL catalogs: a multi-table commit moves each table's pointer in a database
                  transaction of its own, pausing 1 s after the first (`catalog.commit_tables`).
  exact-freshness SQL catalogs: a statement naming only tables the server listed before does not look at the
                  catalog again (`Engine.refresh`): other servers' commits stay invisible to it.
  durable-ack     the WAL and Postgres tails acknowledge an append as soon as it is queued, and
                  hand each write (or COMMIT) to the disk (or database) a second late, so acked
                  records sit in memory only (`drivers/tail.SteppedTail`).
  replay-watermark  replay ignores the lake watermark: every record the tail still holds is
                  replayed, those a flush already put in the lake too (`ladder.WriteLadder.replay`).
  lake-fencing    a quorum or Postgres tail writer flushes as if it held its tail alone: no
                  writer term (epoch) asserted or checked at the lake, no drop of records another
                  writer of its tail already flushed, rebased onto any head (`ladder.WriteLadder`).
  quorum-majority a quorum writer counts one keeper's answer as a majority, for promises and
                  for acknowledgements (`drivers/quorum.open_quorum_tail`).
  first-committer-wins  a commit whose base is no longer the head is published anyway, as if
                  nobody had committed since its base: the table becomes base - removed + added,
                  undoing what the commits in between did (last committer wins: lost updates).
                  The inspection reports the rows it rewrote as untouched, so the machine
                  rebases instead of answering 40001 (`engine/lake_world.py`).

The variable is read and parsed once, when this module is first imported (at server start-up,
via the catalog module). A malformed value raises ValueError then — a typo must never silently
disable a crash test. Unset, empty or all-blank means off, and `point` returns at once.
"""

from __future__ import annotations

import math
import os
import time
from dataclasses import dataclass

ENV_VAR = "ICEGRES_FAULTS"
POINTS = frozenset({"before-publish", "mid-publish", "after-flush-commit", "after-publish",
                    "after-catalog-intent", "after-catalog-move", "after-catalog-purge"})
GUARANTEES = frozenset({  # points whose only action is `break` (see above)
    "atomic-publish", "exact-freshness", "durable-ack", "replay-watermark", "lake-fencing", "quorum-majority",
    "first-committer-wins"})
SLEEP_S_MAX = 3600.0
CRASH_EXIT_CODE = 137  # what a shell reports for SIGKILL (128 + 9)


@dataclass(frozen=True)
class Sleep:
    seconds: float

    def __str__(self) -> str:
        return f"sleep:{self.seconds:g}"


@dataclass(frozen=True)
class Crash:
    def __str__(self) -> str:
        return "crash"


@dataclass(frozen=True)
class Break:
    def __str__(self) -> str:
        return "break"


Action = Sleep | Crash | Break


def parse(spec: str) -> dict[str, Action]:
    """The actions an ICEGRES_FAULTS value configures, by point name; ValueError if malformed."""
    if not spec.strip():
        return {}
    actions: dict[str, Action] = {}
    for entry in spec.split(","):
        name, sep, action = (part.strip() for part in entry.partition("="))
        if not sep or not name or not action:
            raise ValueError(f"{ENV_VAR}: entry {entry.strip()!r} is not NAME=ACTION")
        if name not in POINTS | GUARANTEES:
            known = ", ".join(sorted(POINTS | GUARANTEES))
            raise ValueError(f"{ENV_VAR}: unknown fault point {name!r} (known: {known})")
        if name in actions:
            raise ValueError(f"{ENV_VAR}: fault point {name!r} is configured twice")
        actions[name] = _parse_action(name, action)
    return actions


def _parse_action(name: str, action: str) -> Action:
    if name in GUARANTEES:
        if action != "break":
            raise ValueError(f"{ENV_VAR}: {name} names a guarantee: its only action is 'break', not {action!r}")
        return Break()
    if action == "crash":
        return Crash()
    kind, sep, value = action.partition(":")
    if kind != "sleep" or not sep:
        raise ValueError(f"{ENV_VAR}: {name}: action {action!r} is neither 'crash' nor 'sleep:SECONDS'")
    try:
        seconds = float(value)
    except ValueError:
        raise ValueError(f"{ENV_VAR}: {name}: {value!r} is not a number of seconds") from None
    if not (math.isfinite(seconds) and 0 <= seconds <= SLEEP_S_MAX):
        raise ValueError(f"{ENV_VAR}: {name}: sleep must be 0..{SLEEP_S_MAX:g} seconds, not {value!r}")
    return Sleep(seconds)


_ACTIVE: dict[str, Action] = parse(os.environ.get(ENV_VAR, ""))


def point(name: str) -> None:
    """Do what ICEGRES_FAULTS configures for `name` (block, or exit the process); nothing if unset."""
    if _ACTIVE:
        _fire(name)


def _fire(name: str) -> None:
    if name not in POINTS:  # a call site with a misspelt name could never be triggered
        raise ValueError(f"unknown fault point {name!r}")
    action = _ACTIVE.get(name)
    if action is None:
        return
    # Straight to fd 2, unbuffered and independent of the log level: a test waits for this line,
    # and `crash` exits without flushing any Python buffer.
    os.write(2, f"icegres-fault: reached {name} ({action})\n".encode())
    if isinstance(action, Crash):
        os._exit(CRASH_EXIT_CODE)
    if isinstance(action, Sleep):
        time.sleep(action.seconds)


def broken(name: str) -> bool:
    """Whether ICEGRES_FAULTS breaks the guarantee `name` on purpose (see the module doc)."""
    if not _ACTIVE:
        return False
    if name not in GUARANTEES:
        raise ValueError(f"unknown guarantee {name!r}")
    return isinstance(_ACTIVE.get(name), Break)
