"""The HTTP operations endpoint (`--ops-port`): /health, /ready and /metrics, served by hypercorn
on trio inside the server process, on the same `--host` (loopback by default).

- `GET /health` -> 200 `{"status": "ok", ...}`, or 503 `{"status": "unhealthy", "reasons": [...]}`
  when the write tail is poisoned (WAL or PostgreSQL tail), the writer was fenced (a quorum
  writer by the keepers or at the lake, a PostgreSQL tail writer at the lake), or a quorum
  writer's last write found no majority. A process that is still starting (replaying its tail)
  is alive: 200 with `"ready": false`. A server with damaged tables (engine/damage.py: a file
  of theirs missing or corrupt) is alive and serves the others: 200 with `"status": "degraded"`
  and `damaged_tables` (table, SQLSTATE, error naming the file).
- `GET /ready` -> 200 once the server accepts clients, 503 before (during replay) and after a
  shutdown began.
- `GET /metrics` -> Prometheus text format 0.0.4 of `WriteLadder.stats()` (buffered rows, oldest
  un-flushed age, flush and fsync latency, replayed records, the writer term),
  `icegres_tables_damaged` and the statement-duration histogram (statement_metrics.py); the same
  in OpenMetrics 1.0, with a correlation id as each bucket's exemplar, to a scraper whose Accept
  asks for application/openmetrics-text.

The reports are built from plain values (`health_report`, `metrics_text`) so unit tests drive them
without sockets. Nothing secret is ever in a reply: the tail's own reason strings pass through
`scrub`, which takes out every secret setting (passwords, tokens, credential-bearing URLs).
The app reads in-memory state only: no request waits on a thread, the lake or the tail.
"""

from __future__ import annotations

import json
import logging
import math
import os
from collections.abc import Awaitable, Callable, Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import trio

from icegres.protocol.statement_metrics import STATEMENTS, StatementHistogram

if TYPE_CHECKING:
    from icegres.config import Settings
    from icegres.engine.lake import Engine
    from icegres.listeners import BoundPort

__all__ = ["HealthReport", "OpsServer", "damage_metrics", "health_report", "metrics_text", "openmetrics", "scrub",
           "wants_openmetrics", "with_damage"]

log = logging.getLogger("icegres.ops")

# Counters among the ladder's stats (monotonic totals); every other number is a gauge.
_COUNTERS = frozenset({
    "flushed_batches", "flushed_rows", "flush_failures", "lost_entries", "refused_appends",
    "flush_latency_count", "fsync_latency_count",
})
_HELP = {
    "buffered_rows": "acknowledged rows not yet committed to the lake",
    "buffered_entries": "acknowledged statements not yet committed to the lake",
    "buffered_bytes": "bytes held by the write buffer",
    "oldest_unflushed_age_ms": "age of the oldest acknowledged, un-flushed entry, ms",
    "flush_latency_ms_last": "latency of the last flush (write + commit + mount), ms",
    "fsync_latency_ms_last": "latency of the last tail append (fsync, COMMIT or quorum ack), ms",
    "replayed_records": "tail records replayed into the lake at start-up",
    "tail_ok": "1 while the write tail accepts appends",
    "writer_term_round": "the quorum writer's term round",
}


@dataclass(frozen=True)
class HealthReport:
    ok: bool
    body: dict[str, Any]

    @property
    def status_code(self) -> int:
        return 200 if self.ok else 503


def scrub(text: str, settings: Settings | None) -> str:
    """`text` on one line with the value of every secret setting replaced by ***."""
    from icegres.config import OPTIONS, redact_uri

    line = " ".join(str(text).split())
    if settings is None:
        return line
    secrets: set[str] = set()
    for option in OPTIONS:
        if not option.secret or option.key == "users":  # a dict: its passwords are added below
            continue
        value = getattr(settings, option.key, None)
        if not value:
            continue
        value = str(value)
        secrets.add(value)
        shown = redact_uri(value)
        if shown != value and "://" in value:
            # The password part of a URI, on its own (drivers may echo it).
            userinfo = value.split("://", 1)[1].rsplit("@", 1)[0]
            secrets.add(userinfo.partition(":")[2])
        for pair in value.split(","):  # user:password lists
            secrets.add(pair.partition(":")[2])
    users = getattr(settings, "users", None) or {}
    # The process holds verifiers, never passwords: the verifier and its two keys are the secrets.
    for verifier in users.values() if isinstance(users, Mapping) else ():
        text = verifier.format() if hasattr(verifier, "format") else str(verifier)
        secrets |= {text, *text.rpartition("$")[2].split(":")}
    for secret in sorted(secrets, key=len, reverse=True):
        if len(secret) > 2:
            line = line.replace(secret, "***")
    return line


def health_report(stats: Mapping[str, Any] | None, *, ready: bool, settings: Settings | None = None) -> HealthReport:
    """/health from the ladder's stats (None: no write buffer). Unhealthy when the tail cannot
    acknowledge: poisoned, fenced, or its last append failed (no majority) and none succeeded since."""
    reasons: list[str] = []
    body: dict[str, Any] = {"ready": ready}
    if stats is not None:
        tail = stats.get("tail", "memory")
        body["tail"] = tail
        if "writer_term" in stats:
            body["writer_term"] = stats["writer_term"]
        if tail != "memory":
            if not stats.get("tail_ok", True):
                phase = stats.get("tail_phase") or "poisoned"
                why = stats.get("tail_reason") or "the tail stopped acknowledging"
                if tail == "quorum":
                    reasons.append(f"quorum writer {phase}: lost its writer term: {why}"
                                   if phase == "fenced" else f"quorum writer {phase}: {why}")
                else:
                    reasons.append(f"{tail} tail {phase}: {why}")
            failure = stats.get("tail_failure")
            if failure:
                prefix = "no majority of keepers" if tail == "quorum" else f"{tail} tail append failed"
                reasons.append(f"{prefix}: {failure}")
    reasons = [scrub(r, settings) for r in reasons]
    if reasons:
        return HealthReport(False, {"status": "unhealthy", "reasons": reasons, **body})
    return HealthReport(True, {"status": "ok", **body})


def with_damage(report: HealthReport, damaged: list[dict[str, Any]], settings: Settings | None = None) -> HealthReport:
    """`report` with the damaged tables: still 200 (the process is up and serves every other
    table; a supervisor must not restart it, a restart cannot repair a file), `"degraded"`."""
    if not damaged:
        return report
    shown = [{**d, "error": scrub(str(d.get("error", "")), settings)} for d in damaged]
    body = {**report.body, "damaged_tables": shown}
    if report.ok:
        body["status"] = "degraded"
    return HealthReport(report.ok, body)


def damage_metrics(damaged: int) -> str:
    """The damaged-tables gauge, in the text format."""
    return ("# HELP icegres_tables_damaged tables left unmounted because a file of theirs is missing or corrupt\n"
            f"# TYPE icegres_tables_damaged gauge\nicegres_tables_damaged {int(damaged)}\n")


# /metrics names of automatic maintenance's counters (engine/maintenance/scheduler.py, Counters).
_MAINTENANCE_HELP = {
    "jobs_run": "automatic maintenance jobs that ran to their end under their table's lease",
    "jobs_failed": "automatic maintenance jobs that failed or were stopped (a lost lease commits nothing)",
    "jobs_skipped_lease": "automatic maintenance jobs skipped because another server held the table's lease",
    "files_compacted": "data files automatic compaction rewrote",
    "files_written": "data files automatic compaction wrote",
    "manifests_rewritten": "manifests automatic manifest rewrite merged",
    "snapshots_expired": "snapshots automatic expiry removed",
    "files_deleted": "files automatic expiry deleted",
    "rounds": "automatic maintenance's looks at the tables",
}


def maintenance_metrics(counters: Mapping[str, int]) -> str:
    """`icegres_maintenance_<name>_total` counters, in the text format."""
    lines = []
    for key, help_text in _MAINTENANCE_HELP.items():
        name = f"icegres_maintenance_{key}_total"
        lines += [f"# HELP {name} {help_text}", f"# TYPE {name} counter", f"{name} {int(counters.get(key, 0))}"]
    return "\n".join(lines) + "\n"


def _metric_name(key: str) -> str:
    return "icegres_ladder_" + "".join(c if c.isalnum() else "_" for c in key)


def _number(value: Any) -> float | None:
    if isinstance(value, bool):
        return 1.0 if value else 0.0
    if isinstance(value, int | float) and math.isfinite(value):
        return float(value)
    return None


def _label(value: str) -> str:
    return value.replace("\\", "\\\\").replace('"', '\\"').replace("\n", " ")


def metrics_text(stats: Mapping[str, Any] | None, *, ready: bool, healthy: bool) -> str:
    """Prometheus text exposition (format 0.0.4) of the ladder's numeric stats, plus
    `icegres_ready`, `icegres_healthy` and an info metric naming the tail (and the writer term)."""
    lines = [
        "# HELP icegres_ready 1 once the server accepts clients",
        "# TYPE icegres_ready gauge",
        f"icegres_ready {int(ready)}",
        "# HELP icegres_healthy 1 while /health answers 200",
        "# TYPE icegres_healthy gauge",
        f"icegres_healthy {int(healthy)}",
    ]
    if stats is None:
        return "\n".join(lines) + "\n"
    labels = {"tail": str(stats.get("tail", "memory"))}
    term = stats.get("writer_term")
    if term:
        labels["writer_term"] = str(term)
        round_, _, _ = str(term).partition("/")
        if round_.isdigit():
            stats = {**stats, "writer_term_round": int(round_)}
    shown = ",".join(f'{k}="{_label(v)}"' for k, v in labels.items())
    lines += ["# HELP icegres_ladder_info the write ladder's tail (and writer term)",
              "# TYPE icegres_ladder_info gauge", f"icegres_ladder_info{{{shown}}} 1"]
    for key in sorted(stats):
        value = _number(stats[key])
        if value is None or key in ("tail_id",):
            continue
        counter = key in _COUNTERS
        name = _metric_name(key) + ("_total" if counter else "")
        if key in _HELP:
            lines.append(f"# HELP {name} {_HELP[key]}")
        lines.append(f"# TYPE {name} {'counter' if counter else 'gauge'}")
        lines.append(f"{name} {value:g}" if value != int(value) else f"{name} {int(value)}")
    return "\n".join(lines) + "\n"


OPENMETRICS = b"application/openmetrics-text; version=1.0.0; charset=utf-8"


def wants_openmetrics(scope: Mapping[str, Any]) -> bool:
    """The scraper accepts OpenMetrics (Prometheus asks for it first): a media range of
    application/openmetrics-text in Accept whose q is not 0."""
    for name, value in scope.get("headers", ()):
        if name.lower() != b"accept":
            continue
        for item in value.decode("latin-1").split(","):
            kind, *params = (part.strip().lower() for part in item.split(";"))
            if kind == "application/openmetrics-text" and "q=0" not in params:
                return True
    return False


def openmetrics(text: str) -> str:
    """Prometheus text as OpenMetrics (without its `# EOF`): a counter's family is named without
    the `_total` its sample keeps."""
    out = []
    for line in text.splitlines():
        if line.startswith(("# TYPE ", "# HELP ")):
            kind, name, rest = line[2:6], *line[7:].split(" ", 1)
            if name.endswith("_total") and (kind == "HELP" or rest == "counter"):
                line = f"# {kind} {name[: -len('_total')]} {rest}"
        out.append(line)
    return "\n".join(out) + "\n"


def ladder_stats(engine: Engine) -> dict[str, Any] | None:
    """The ladder's stats, with its tail's phase and reason (None without a write buffer)."""
    ladder = engine.ladder
    return None if ladder is None else ladder.stats()


class OpsServer:
    """The endpoint of one server process. `serve` binds `--host:--ops-port`; `set_ready` once
    the server accepts clients, `set_stopping` when a shutdown begins."""

    def __init__(self, settings: Settings, engine: Engine, *, bound: BoundPort | None = None,
                 statements: StatementHistogram = STATEMENTS) -> None:
        """`bound`: the listen sockets, bound at start-up (serve.py); without it `serve` binds
        --host:--ops-port itself. `statements`: the statement-duration histogram shown."""
        self.statements = statements
        self.settings = settings
        self.engine = engine
        self.bound = bound
        self.ready = False
        self.port: int | None = None
        # `serve --maintain`'s scheduler (anything with `stats() -> {name: count}`): its counters.
        self.maintenance: Any = None

    def set_ready(self) -> None:
        self.ready = True

    def set_stopping(self) -> None:
        self.ready = False

    def health(self) -> HealthReport:
        report = health_report(ladder_stats(self.engine), ready=self.ready, settings=self.settings)
        report = with_damage(report, self.engine.damage.reports(), self.settings)
        # The PID lets a supervisor (or an operator) tell a replacement from its predecessor.
        return HealthReport(report.ok, {**report.body, "pid": os.getpid()})

    async def app(self, scope: dict[str, Any], receive: Callable[[], Awaitable[dict[str, Any]]],
                  send: Callable[[dict[str, Any]], Awaitable[None]]) -> None:
        """The ASGI application: three GET routes, everything else 404/405."""
        if scope["type"] == "lifespan":
            while True:
                message = await receive()
                if message["type"] == "lifespan.startup":
                    await send({"type": "lifespan.startup.complete"})
                elif message["type"] == "lifespan.shutdown":
                    await send({"type": "lifespan.shutdown.complete"})
                    return
        if scope["type"] != "http":
            return
        path, method = scope.get("path", ""), scope.get("method", "GET")
        if path not in ("/health", "/ready", "/metrics"):
            await _reply(send, 404, {"status": "not found"})
            return
        if method not in ("GET", "HEAD"):
            await _reply(send, 405, {"status": "method not allowed"})
            return
        try:
            if path == "/health":
                report = self.health()
                await _reply(send, report.status_code, report.body)
            elif path == "/ready":
                await _reply(send, 200 if self.ready else 503,
                             {"status": "ready" if self.ready else "not ready"})
            else:
                stats = ladder_stats(self.engine)
                healthy = health_report(stats, ready=self.ready).ok
                text = metrics_text(stats, ready=self.ready, healthy=healthy) + damage_metrics(len(self.engine.damage))
                if self.maintenance is not None:
                    text += maintenance_metrics(self.maintenance.stats())
                if wants_openmetrics(scope):
                    text = openmetrics(text) + self.statements.text(openmetrics=True) + "# EOF\n"
                    await _send(send, 200, text.encode(), OPENMETRICS)
                else:
                    text += self.statements.text(openmetrics=False)
                    await _send(send, 200, text.encode(), b"text/plain; version=0.0.4; charset=utf-8")
        except Exception as exc:  # noqa: BLE001 - an operations probe must get an answer
            log.exception("ops endpoint %s failed", path)
            await _reply(send, 500, {"status": "error", "reasons": [scrub(repr(exc), self.settings)]})

    async def serve(self, *, task_status: trio.TaskStatus[int] = trio.TASK_STATUS_IGNORED) -> None:
        """Serve until cancelled; `task_status.started(port)` once listening."""
        from hypercorn.config import Config
        from hypercorn.trio import serve

        config = Config()
        host = self.settings.host
        if self.bound is not None:
            # hypercorn takes sockets by descriptor; detached, they are its to close.
            config.bind = [f"fd://{sock.detach()}" for sock in self.bound.listen()]
        else:
            config.bind = [f"[{host}]:{self.settings.ops_port}" if ":" in host else f"{host}:{self.settings.ops_port}"]
        config.accesslog = None
        config.errorlog = logging.getLogger("icegres.ops.hypercorn")
        config.graceful_timeout = 0.5
        async with trio.open_nursery() as nursery:
            binds = await nursery.start(serve, self.app, config)
            self.port = int(str(binds[0]).rsplit(":", 1)[1])
            log.info("operations endpoint on %s (/health, /ready, /metrics)", binds[0])
            task_status.started(self.port)


async def _reply(send: Callable[[dict[str, Any]], Awaitable[None]], status: int, body: dict[str, Any]) -> None:
    await _send(send, status, json.dumps(body, default=str).encode() + b"\n", b"application/json")


async def _send(send: Callable[[dict[str, Any]], Awaitable[None]], status: int, body: bytes, kind: bytes) -> None:
    await send({"type": "http.response.start", "status": status,
                "headers": [(b"content-type", kind), (b"content-length", str(len(body)).encode()),
                            (b"cache-control", b"no-store")]})
    await send({"type": "http.response.body", "body": body})
