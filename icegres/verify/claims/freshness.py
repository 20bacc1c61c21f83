"""Freshness: a row one server committed is visible to another server of the same catalog within
the bound icegres claims — at once for a synchronous commit (a statement sees every commit that
finished before it began, from any process: docs/architecture.md, "A query, end to end", step 3),
and within the group-commit window plus the flush's commit for a buffered write when the
deployment has one (--write-buffer-ms).

Two scratch servers, A and B. For synchronous commits, each round INSERTs on A and, the moment A
acknowledges, reads the row on B: it must be there on the first read. For buffered writes, B polls
every 10 ms after A's ack and the time to visibility must stay within the window plus
FLUSH_ALLOWANCE_MS.
"""

from __future__ import annotations

import statistics
import time

from icegres.verify.lab import Lab
from icegres.verify.outcome import Claim, Outcome

__all__ = ["CLAIM", "FLUSH_ALLOWANCE_MS"]

FLUSH_ALLOWANCE_MS = 2000  # one flush's Iceberg commit on a slow object store, beyond the window
SYNC_CHECKS_PER_ROUND = 20
BUFFERED_CHECKS_PER_ROUND = 5


def run(lab: Lab) -> Outcome:
    table = lab.table("rows")
    a = lab.server("a")
    with lab.connect(a) as conn:
        conn.execute(f"create table {table} (id bigint)")
    b = lab.server("b")
    figures: dict[str, object] = {}
    total = lab.rounds * SYNC_CHECKS_PER_ROUND
    stale = 0
    first_stale: int | None = None
    with lab.step("synchronous commits", total) as advance, lab.connect(a) as wa, lab.connect(b) as rb:
        for n in range(total):
            wa.execute(f"insert into {table} values ({n})")
            seen = rb.execute(f"select count(*) from {table} where id = {n}").fetchone()[0]
            if seen != 1:
                stale += 1
                first_stale = n if first_stale is None else first_stale
            advance(1)
    figures.update(sync_checks=total, sync_stale_reads=stale)
    if stale:
        return Outcome.failed(f"{stale} of {total} rows committed on server A were not visible on server B at "
                              f"once (first: id {first_stale}); icegres claims exact freshness", figures)
    window = lab.deployment.settings.write_buffer_ms
    if not window:
        return Outcome.passed(figures, "buffered writes not checked: the deployment has no --write-buffer-ms")
    return _buffered(lab, table, window, figures)


def _buffered(lab: Lab, table: str, window: int, figures: dict[str, object]) -> Outcome:
    """Rows acknowledged from A's write buffer reach B within the window plus one flush."""
    tails = lab.tails()
    a = lab.server("buffered-a", tail=tails[0] if tails else None, write_buffer_ms=window)
    b = lab.nodes.by_name[f"{lab.claim}-b"]
    bound_ms = window + FLUSH_ALLOWANCE_MS
    lags: list[float] = []
    total = lab.rounds * BUFFERED_CHECKS_PER_ROUND
    with lab.step("buffered writes", total) as advance, lab.connect(a) as wa, lab.connect(b) as rb:
        for n in range(10**6, 10**6 + total):
            wa.execute(f"insert into {table} values ({n})")
            acked = time.monotonic()
            while rb.execute(f"select count(*) from {table} where id = {n}").fetchone()[0] != 1:
                if (time.monotonic() - acked) * 1000 > bound_ms + 5000:
                    break
                time.sleep(0.01)
            lags.append((time.monotonic() - acked) * 1000)
            advance(1)
    figures.update(buffered_checks=total, window_ms=window, lag_ms_p50=round(statistics.median(lags), 1),
                   lag_ms_max=round(max(lags), 1), bound_ms=bound_ms)
    late = [lag for lag in lags if lag > bound_ms]
    if late:
        return Outcome.failed(f"{len(late)} of {total} buffered rows took longer than {bound_ms} ms to reach another "
                              f"server (worst {max(lags):.0f} ms)", figures)
    return Outcome.passed(figures)


CLAIM = Claim(
    name="freshness",
    title="a row committed by one server is visible to another at once (buffered: within the window)",
    docs="docs/architecture.md#a-query-end-to-end",
    run=run,
)
