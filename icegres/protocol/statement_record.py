"""One line per statement, for both front ends: its correlation id, who ran it, what came of it.

A statement (each statement of a pgwire Query message, each Execute, each Flight SQL call) gets
a correlation id when it starts: 16 hex digits, 64 random bits. The id rides in the statement's
error (pgwire ErrorResponse field `i`, Flight SQL trailing metadata `icegres-correlation-id`),
in its log line and in the /metrics exemplar of its duration bucket, so an error a user reports
finds its log line and a slow bucket finds a statement that landed in it.

*Why random and not `<backend pid>-<counter>`*: icegres's backend pids are per-process counters
(pgwire/server.py) that a restart, a failover to a standby or the Flight SQL front end (no pids)
would reuse, so such ids collide across the processes whose logs one collects. 64 random bits
need no coordination: among a billion statements the chance that two share an id is ~3%,
and an id is looked up next to a time and a user anyway. The log line carries the pid too.

The line is logfmt (`key=value`, values with spaces quoted), one line however many lines the
statement had, on the `icegres.statement` logger at INFO, after the usual
`<time> INFO icegres.statement:` prefix. Whether it is written is the PostgreSQL-named policy
`--log-statement` (none, ddl, mod, all) for statements that completed and
`--log-min-error-statement` (a severity: statements whose error is at least as severe) for the
others.

Nothing secret is logged. A statement's text is the client's, and PostgreSQL logs it as written;
icegres writes it with `PASSWORD '…'` clauses, anything shaped like a JWT (`eyJ….….…`), SCRAM
verifiers and bearer strings replaced by `***`, and cuts it to TEXT_MAX characters first (so a
big statement is never scanned whole; a secret the cut leaves unterminated is still taken). The
error message (which can quote a literal of the statement) and application_name are redacted the
same way. Bind parameters are never logged.
"""

from __future__ import annotations

import logging
import re
import secrets
import time
from dataclasses import dataclass, field

log = logging.getLogger("icegres.statement")

TEXT_MAX = 1024  # characters of a statement's text in its line
ERROR_MAX = 512  # characters of an error message in its line

# PostgreSQL's log_statement values, each logging what the ones before it do and more.
LOG_STATEMENT = ("none", "ddl", "mod", "all")
# PostgreSQL's message severities, least severe first (log_min_error_statement takes any of them).
SEVERITIES = ("debug5", "debug4", "debug3", "debug2", "debug1", "info", "notice", "warning", "error", "log",
              "fatal", "panic")

# Redaction. A JWT's header and payload are base64url JSON objects: they start with `eyJ` (`{"`),
# which keeps `schema.table.column` and other dotted names out of the pattern. One to three
# segments: a token the cut at TEXT_MAX left without its signature goes too.
_JWT = re.compile(r"eyJ[A-Za-z0-9_-]{2,}(?:\.[A-Za-z0-9_-]*){0,2}")
_PASSWORD = re.compile(r"""(?i)(\bpassword\b\s*(?:=\s*)?)(E?'(?:[^']|'')*'?|\$([A-Za-z_]*)\$.*?(?:\$\3\$|$))""",
                       re.DOTALL)
_VERIFIER = re.compile(r"SCRAM-SHA-256\$[^\s'\"]*")
_BEARER = re.compile(r"(?i)(\bbearer\s+)[A-Za-z0-9._~+/=-]+")


def new_id() -> str:
    """A fresh correlation id: 16 lowercase hex digits."""
    return secrets.token_hex(8)


def redact(text: str) -> str:
    """`text` with every secret-shaped part replaced by ***: PASSWORD clauses, JWTs, SCRAM
    verifiers, `Bearer …` strings."""
    if "eyJ" in text:
        text = _JWT.sub("***", text)
    if "SCRAM-SHA-256$" in text:
        text = _VERIFIER.sub("***", text)
    lowered = text.lower()
    if "password" in lowered:
        text = _PASSWORD.sub(lambda match: match.group(1) + "'***'", text)
    if "bearer" in lowered:
        text = _BEARER.sub(lambda match: match.group(1) + "***", text)
    return text


def statement_class(tag_or_kind: str) -> str:
    """Which of log_statement's classes a statement is in, by its command tag's first word:
    `ddl` (CREATE, ALTER, DROP, ...), `mod` (writes: INSERT, UPDATE, DELETE, MERGE, TRUNCATE,
    COPY ... FROM), else `all`."""
    word = tag_or_kind.split(" ", 1)[0].upper()
    if word in ("CREATE", "ALTER", "DROP", "COMMENT", "GRANT", "REVOKE", "REASSIGN"):
        return "ddl"
    if word in ("INSERT", "UPDATE", "DELETE", "MERGE", "TRUNCATE", "COPY_FROM"):
        return "mod"
    return "all"


@dataclass(frozen=True)
class Policy:
    """What gets a line: `log_statement` for completed statements, `log_min_error_statement`
    for failed ones (PostgreSQL's names and values)."""

    log_statement: str = "none"
    log_min_error_statement: str = "error"

    def logs(self, cls: str, severity: str | None) -> bool:
        if severity is not None:
            return SEVERITIES.index(severity.lower()) >= SEVERITIES.index(self.log_min_error_statement)
        wanted = LOG_STATEMENT.index(self.log_statement)
        return wanted > 0 and wanted >= LOG_STATEMENT.index(cls)


@dataclass
class Record:
    """One statement, from its start to its line. `tag` (a command tag, `SELECT 3`) once it
    completed; `sqlstate`, `severity` and `error` once it failed."""

    protocol: str  # pgwire, flightsql
    text: str = ""
    pid: int | None = None
    user: str = ""
    database: str = ""
    application: str = ""
    client: str = ""
    id: str = field(default_factory=new_id)
    started_s: float = field(default_factory=time.perf_counter)
    cls: str = "all"  # log_statement's class: ddl, mod, all
    tag: str | None = None
    rows: int | None = None
    sqlstate: str | None = None
    severity: str | None = None
    error: str | None = None
    rpc: str | None = None  # Flight SQL: the call's name

    def failed(self, sqlstate: str, message: str, severity: str = "ERROR") -> None:
        self.sqlstate, self.error, self.severity = sqlstate, message, severity

    def completed(self, tag: str) -> None:
        self.tag = tag
        last = tag.rpartition(" ")[2]
        self.rows = int(last) if last.isdigit() and " " in tag else None
        if self.cls == "all":
            self.cls = statement_class(tag)


def line(record: Record, duration_ms: float) -> str:
    """The record as a logfmt line (no newline)."""
    now = time.time()
    pairs: list[tuple[str, object]] = [
        ("id", record.id),
        ("ts", time.strftime("%Y-%m-%dT%H:%M:%S", time.gmtime(now)) + f".{int(now * 1000) % 1000:03d}Z"),
        ("protocol", record.protocol),
    ]
    if record.rpc:
        pairs.append(("rpc", record.rpc))
    if record.pid is not None:
        pairs.append(("pid", record.pid))
    pairs += [("user", record.user), ("db", record.database), ("app", redact(record.application)),
              ("client", record.client)]
    if record.severity is not None:
        pairs += [("severity", record.severity), ("sqlstate", record.sqlstate),
                  ("error", redact(_cut(record.error or "", ERROR_MAX)))]
    else:
        pairs.append(("tag", record.tag or ""))
        if record.rows is not None:
            pairs.append(("rows", record.rows))
    pairs += [("duration_ms", f"{duration_ms:.3f}"), ("statement", redact(_cut(record.text, TEXT_MAX)))]
    return " ".join(f"{key}={_value(value)}" for key, value in pairs)


def finish(record: Record, policy: Policy) -> float:
    """The statement is over: log its line if `policy` says so. Its duration, seconds."""
    elapsed_s = time.perf_counter() - record.started_s
    if policy.logs(record.cls, record.severity):
        log.info("statement %s", line(record, elapsed_s * 1000))
    return elapsed_s


def _cut(text: str, limit: int) -> str:
    return text if len(text) <= limit else text[:limit] + "…"


def _value(value: object) -> str:
    text = str(value)
    if text and not any(c in text for c in ' "=\\\n\r\t') and text.isprintable():
        return text
    escaped = text.replace("\\", "\\\\").replace('"', '\\"').replace("\n", "\\n").replace("\r", "\\r")
    escaped = escaped.replace("\t", "\\t")
    return '"' + "".join(c if c.isprintable() else f"\\x{ord(c):02x}" for c in escaped) + '"'
