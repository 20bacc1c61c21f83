"""The statement-duration histogram of /metrics, with a correlation id as each bucket's exemplar.

`icegres_statement_duration_seconds{protocol="pgwire|flightsql",outcome="ok|error"}` counts every
statement (statement_record.py says what one is) by how long it ran. Each bucket keeps the last
statement that landed in it (in it, not below it: an exemplar's value lies within its bucket) as
an OpenMetrics exemplar, `# {correlation_id="…"} <seconds> <unix time>`, so a slow bucket on a
dashboard leads to one statement's log line and error. Exemplars exist only in the OpenMetrics
text format: /metrics serves that to a scraper that asks for it (`Accept:
application/openmetrics-text`, as Prometheus does) and the Prometheus text format 0.0.4, without
exemplars, to everyone else.

One histogram per process (`STATEMENTS`), as a metrics registry is: both front ends observe into
it and the operations endpoint reads it. Observations and reads come from the trio thread, but a
lock keeps a read whole whichever thread observes.
"""

from __future__ import annotations

import bisect
import threading
import time
from dataclasses import dataclass

NAME = "icegres_statement_duration_seconds"
BUCKETS_S = (0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0, 60.0)


@dataclass
class _Exemplar:
    correlation_id: str
    value_s: float
    unix_s: float


class _Series:
    def __init__(self) -> None:
        self.counts = [0] * (len(BUCKETS_S) + 1)  # per bucket, not cumulative; the last is +Inf
        self.exemplars: list[_Exemplar | None] = [None] * (len(BUCKETS_S) + 1)
        self.sum_s = 0.0
        self.created_unix_s = time.time()


class StatementHistogram:
    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._series: dict[tuple[str, str], _Series] = {}

    def observe(self, protocol: str, outcome: str, seconds: float, correlation_id: str) -> None:
        """One statement of `protocol` that ended `outcome` (ok, error) after `seconds`."""
        seconds = max(seconds, 0.0)
        index = bisect.bisect_left(BUCKETS_S, seconds)  # le is inclusive: 0.001 s is in le="0.001"
        with self._lock:
            series = self._series.get((protocol, outcome))
            if series is None:
                series = self._series[(protocol, outcome)] = _Series()
            series.counts[index] += 1
            series.sum_s += seconds
            series.exemplars[index] = _Exemplar(correlation_id, seconds, time.time())

    def count(self) -> int:
        """Statements observed so far (both front ends): automatic maintenance reads it to tell a
        quiet foreground from a busy one (engine/maintenance/scheduler.py)."""
        with self._lock:
            return sum(sum(series.counts) for series in self._series.values())

    def text(self, *, openmetrics: bool) -> str:
        """The histogram in the Prometheus text format, or OpenMetrics (with exemplars and
        `_created`; the caller ends the exposition with `# EOF`)."""
        lines = [f"# HELP {NAME} statements by how long they ran (both front ends)", f"# TYPE {NAME} histogram"]
        with self._lock:
            items = sorted((key, series.counts[:], series.exemplars[:], series.sum_s, series.created_unix_s)
                           for key, series in self._series.items())
        for (protocol, outcome), counts, exemplars, sum_s, created in items:
            labels = f'protocol="{protocol}",outcome="{outcome}"'
            total = 0
            for i, count in enumerate(counts):
                total += count
                le = "+Inf" if i == len(BUCKETS_S) else _number(BUCKETS_S[i])
                sample = f'{NAME}_bucket{{{labels},le="{le}"}} {total}'
                exemplar = exemplars[i]
                if openmetrics and exemplar is not None:
                    sample += (f' # {{correlation_id="{exemplar.correlation_id}"}} {_number(exemplar.value_s)}'
                               f" {exemplar.unix_s:.3f}")
                lines.append(sample)
            lines += [f"{NAME}_count{{{labels}}} {total}", f"{NAME}_sum{{{labels}}} {_number(sum_s)}"]
            if openmetrics:
                lines.append(f"{NAME}_created{{{labels}}} {created:.3f}")
        return "\n".join(lines) + "\n"


def _number(value: float) -> str:
    return repr(float(value)) if value != int(value) else f"{int(value)}.0"


STATEMENTS = StatementHistogram()
