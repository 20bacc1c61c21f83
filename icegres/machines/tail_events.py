"""The events and effects the two single-writer tail cores share: the local WAL (`wal.py`) and the
Postgres tail (`pgtail.py`).

Both are the same log seen from its writers: an append gets the next LSN and waits until the
tail holds it durably (an fsync covers it, or the COMMIT holding it returned); a poisoned tail
refuses appends and fails the waiting ones; the lake's watermark lets old records go; time enters
as a numbered timer. Only how a record becomes durable differs, and those events and effects stay
in each core. Written once here, the shared ones let the drivers translate them in one place
(`drivers/tail.py`). Each core re-exports them, and its spec names them as its own.
"""

from __future__ import annotations

from dataclasses import dataclass

__all__ = [
    "Acknowledge",
    "AppendRequested",
    "FailAppends",
    "RefuseAppend",
    "StartTimer",
    "TimerFired",
    "WatermarkAdvanced",
]


# --- events (past tense) -------------------------------------------------------------------------


@dataclass(frozen=True)
class AppendRequested:
    payload: bytes


@dataclass(frozen=True)
class TimerFired:
    timer: int


@dataclass(frozen=True)
class WatermarkAdvanced:
    """The lake committed every record up to `lsn` (a flush's snapshot summary carries it)."""

    lsn: int


# --- effects (imperative) ------------------------------------------------------------------------


@dataclass(frozen=True)
class StartTimer:
    """Answer with TimerFired(timer) after `seconds`."""

    timer: int
    seconds: float


@dataclass(frozen=True)
class Acknowledge:
    """Records first_lsn..last_lsn are durable (fsynced, or committed): tell their writers."""

    first_lsn: int
    last_lsn: int


@dataclass(frozen=True)
class FailAppends:
    """The tail is poisoned. `unknown` LSNs were being made durable when it failed (they may be on
    disk or committed, and be replayed after a restart); `failed` LSNs definitely were not."""

    reason: str
    unknown: range
    failed: range


@dataclass(frozen=True)
class RefuseAppend:
    """An append arrived at a poisoned tail: it gets no LSN and is not written."""

    reason: str
