"""The statement logs of a pgwire session: the slow-statement log (`--log-min-duration-statement`,
PostgreSQL's name and line format) and each statement's record (`Trace`: its correlation id, its
structured line, its exemplar in /metrics; icegres/protocol/statement_record.py).

A Query message that took at least the threshold is logged as PostgreSQL logs it,
`duration: 12.345 ms  statement: <its text>`, and an Execute as
`duration: 0.123 ms  execute <portal name or unnamed>: <the statement's text>`, on the
`icegres.statement` logger at INFO, with the session's pid and user as key=value fields after the
text. -1 is off, 0 logs every statement. The text is the client's, as PostgreSQL logs it, but
with PASSWORD clauses, JWT-shaped strings and SCRAM verifiers redacted (statement_record.redact);
the startup packet's password never is there. A text over TEXT_MAX characters is cut there.
"""

from __future__ import annotations

import logging
import time
from typing import TYPE_CHECKING, Any, Protocol

from icegres.pg.errors import PgError
from icegres.protocol.pgwire import messages as m
from icegres.protocol.statement_metrics import STATEMENTS
from icegres.protocol.statement_record import Policy, Record, finish, redact

if TYPE_CHECKING:
    from icegres.protocol.pgwire.port import ServerPort

log = logging.getLogger("icegres.statement")

TEXT_MAX = 64 * 1024


class SessionView(Protocol):
    """What a session's Trace reads of it."""

    server: ServerPort
    pid: int
    user: str
    client_addr: str
    settings: dict[str, str]
    portals: dict[str, Any]


def text_of(msg: m.FrontendMessage, portals: dict) -> str | None:
    """What the log line names for `msg`: a Query's text, an Execute's portal; None for others."""
    if isinstance(msg, m.Query):
        return f"statement: {_cut(msg.sql)}"
    if isinstance(msg, m.Execute):
        portal = portals.get(msg.portal)
        sql = portal.prepared.sql if portal is not None else ""
        return f"execute {msg.portal or '<unnamed>'}: {_cut(sql)}"
    return None


def _cut(sql: str) -> str:
    # Cut, then redact (a big statement's text is never scanned whole on the loop): redaction
    # also takes a secret the cut left unterminated. Never a password or a token in a log.
    return redact(sql if len(sql) <= TEXT_MAX else sql[:TEXT_MAX] + "…")


def record(threshold_ms: int, elapsed_s: float, what: str | None, *, pid: int, user: str,
           correlation: str | None = None) -> None:
    """The slow-statement line of one message; `correlation`: the id of its (last) statement,
    as in that statement's own line and its error."""
    if what is None or threshold_ms < 0 or elapsed_s * 1000 < threshold_ms:
        return
    log.info("duration: %.3f ms  %s  [pid=%d user=%s id=%s]", elapsed_s * 1000, what, pid, user, correlation or "-")


class Trace:
    """A session's statements as records (statement_record.py): each statement of a Query
    message and each Execute gets a correlation id when it starts; an error outside them (a
    Parse, a Bind, a failed commit at the end of a Query message, a FATAL) gets one when it is
    reported. `end` logs the record's line (by --log-statement / --log-min-error-statement) and
    counts its duration in /metrics, with its id as the bucket's exemplar."""

    def __init__(self, session: SessionView) -> None:
        self.session = session
        self.record: Record | None = None
        self._msg: m.FrontendMessage | None = None
        self._msg_started_s = 0.0
        self._timed = False  # the record is a statement's (its duration goes to /metrics)
        self.last_id: str | None = None  # the id of the record `end` closed last

    def message(self, msg: m.FrontendMessage) -> None:
        """A message from the client is about to be answered; an Execute starts a statement."""
        self._msg, self._msg_started_s = msg, time.perf_counter()
        if isinstance(msg, m.Execute):
            portal = self.session.portals.get(msg.portal)
            self.statement(portal.prepared.sql if portal is not None else "")

    def statement(self, text: str) -> None:
        """A statement starts (one of a Query message's, or an Execute's portal)."""
        self.end()
        self.record = self._new(text)
        self._timed = True

    def completed(self, tag: str) -> bytes:
        """The CommandComplete of the running statement, its tag noted for the log line."""
        if self.record is not None:
            self.record.completed(tag)
        return m.command_complete(tag)

    def failed(self, err: PgError) -> str:
        """The correlation id to send with `err`: the running statement's, else a new one for
        the message that failed."""
        if self.record is None:
            self.record = self._new(_message_text(self._msg, self.session.portals))
            self.record.started_s = self._msg_started_s or self.record.started_s
            self._timed = False
        self.record.failed(err.sqlstate, err.message, err.severity)
        return self.record.id

    def end(self) -> None:
        """The running statement (or failed message) is over: its line and its duration."""
        record, self.record = self.record, None
        if record is None:
            return
        self.last_id = record.id
        settings = self.session.server.settings
        policy = Policy(settings.log_statement, settings.log_min_error_statement)
        elapsed_s = finish(record, policy)
        if self._timed:
            STATEMENTS.observe("pgwire", "ok" if record.severity is None else "error", elapsed_s, record.id)

    def _new(self, text: str) -> Record:
        session = self.session
        return Record("pgwire", text, pid=session.pid, user=session.user, database=session.server.settings.database,
                      application=session.settings.get("application_name", ""), client=session.client_addr)


def _message_text(msg: m.FrontendMessage | None, portals: dict) -> str:
    if isinstance(msg, m.Query | m.Parse):
        return msg.sql
    if isinstance(msg, m.Bind | m.Execute):
        portal = portals.get(msg.portal)
        return portal.prepared.sql if portal is not None else ""
    return ""
