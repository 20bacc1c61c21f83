"""What pg_stat_activity shows of a pgwire session, and who may signal whom.

Each session keeps an `Activity` current (a statement starts; ReadyForQuery goes out); the server
turns its sessions' into `BackendActivity` rows for the engine's port (engine/activity.py), and
`check_signal` is PostgreSQL 15's permission rule for pg_cancel_backend and pg_terminate_backend
(signalfuncs.c): superusers signal anyone, others only sessions of their own user, and no
non-superuser signals a superuser's session.
"""

from __future__ import annotations

import datetime as dt
from dataclasses import dataclass, field

from icegres.engine.activity import BackendActivity
from icegres.pg import errors as E
from icegres.pg.errors import PgError

# PostgreSQL's track_activity_query_size default: longer statements show their first 1 KiB.
QUERY_TEXT_MAX = 1024
_STATES = {"I": "idle", "T": "idle in transaction", "E": "idle in transaction (aborted)"}


def _now() -> dt.datetime:
    return dt.datetime.now(dt.UTC)


@dataclass
class Activity:
    backend_start: dt.datetime = field(default_factory=_now)
    state: str | None = None  # None until the session is ready (startup and authentication)
    query: str = ""
    query_start: dt.datetime | None = None
    state_change: dt.datetime | None = None
    xact_start: dt.datetime | None = None

    def running(self, query: str) -> None:
        """A statement (a Query message's text, or a portal's) starts."""
        now = _now()
        self.query = query[:QUERY_TEXT_MAX]
        self.query_start = now
        if self.state != "active":
            self.state, self.state_change = "active", now
        if self.xact_start is None:
            self.xact_start = now

    def ready(self, status: str) -> None:
        """ReadyForQuery went out with this transaction status ('I', 'T' or 'E')."""
        state = _STATES.get(status, "idle")
        if state != self.state:
            self.state, self.state_change = state, _now()
        if status == "I":
            self.xact_start = None


def row(pid: int, activity: Activity, *, database: str, user: str, application_name: str,
        client: tuple[str | None, int | None], visible: bool) -> BackendActivity:
    """A session's pg_stat_activity row; `visible` False: as a non-superuser sees another
    user's session (PostgreSQL shows its pid, database, user and backend_start only)."""
    addr, port = client
    if not visible:
        return BackendActivity(pid, database, user, None, None, None, activity.backend_start, None, None, None,
                               None, None, None, "<insufficient privilege>")
    return BackendActivity(pid, database, user, application_name, addr, port, activity.backend_start,
                           activity.xact_start, activity.query_start, activity.state_change,
                           "Client" if activity.state != "active" else None,
                           "ClientRead" if activity.state != "active" else None, activity.state, activity.query)


def check_signal(*, terminate: bool, by: str, by_superuser: bool, target: str, target_superuser: bool) -> None:
    """PgError 42501 when user `by` may not signal a session of user `target` (PostgreSQL 15's
    messages)."""
    if by_superuser:
        return
    if target_superuser:
        what = "terminate superuser process" if terminate else "cancel superuser query"
        raise PgError(E.INSUFFICIENT_PRIVILEGE, f"must be a superuser to {what}")
    if by != target:
        what = "process is being terminated" if terminate else "query is being canceled"
        raise PgError(E.INSUFFICIENT_PRIVILEGE, f"must be a member of the role whose {what} or member of pg_signal_backend")
