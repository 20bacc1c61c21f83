"""The slow-statement log: `--log-min-duration-statement` (PostgreSQL's name and line format).

A Query message that took at least the threshold is logged as PostgreSQL logs it,
`duration: 12.345 ms  statement: <its text>`, and an Execute as
`duration: 0.123 ms  execute <portal name or unnamed>: <the statement's text>`, on the
`icegres.statement` logger at INFO, with the session's pid and user as key=value fields after the
text. -1 is off, 0 logs every statement. The text is the client's, as PostgreSQL logs it (a
password in a literal would be there too, as in PostgreSQL's log); the startup packet's password
never is. A text over TEXT_MAX characters is cut there.
"""

from __future__ import annotations

import logging

from icegres.protocol.pgwire import messages as m

log = logging.getLogger("icegres.statement")

TEXT_MAX = 64 * 1024


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
    return sql if len(sql) <= TEXT_MAX else sql[:TEXT_MAX] + "…"


def record(threshold_ms: int, elapsed_s: float, what: str | None, *, pid: int, user: str) -> None:
    if what is None or threshold_ms < 0 or elapsed_s * 1000 < threshold_ms:
        return
    log.info("duration: %.3f ms  %s  [pid=%d user=%s]", elapsed_s * 1000, what, pid, user)
