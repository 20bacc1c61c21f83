"""pg_stat_activity and the backend signals: a port the engine owns, the front end implements.

The live sessions are the pgwire server's (a layer above the engine), yet SQL reads them
(`select … from pg_stat_activity`) and signals them (`pg_cancel_backend(pid)`,
`pg_terminate_backend(pid)`). So the engine declares what it asks, `ActivityPort`, and the
session's `SessionEnv.activity` carries the server's implementation; no engine module imports
the front end. Each statement that names pg_stat_activity registers the rows of that moment
(`refresh`) before it is planned: the view is as fresh as PostgreSQL's (one snapshot per
statement), and statements that do not name it pay nothing.

The port is called from worker threads (DataFusion runs UDFs and planning there): its answers
are plain values, and a signal is handed to the server's event loop, never performed here.
"""

from __future__ import annotations

import datetime as dt
import re
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Protocol

if TYPE_CHECKING:
    import datafusion

__all__ = ["ActivityPort", "BackendActivity", "mentions_activity", "refresh"]


@dataclass(frozen=True)
class BackendActivity:
    """One row of pg_stat_activity, as its viewer may see it (PostgreSQL hides the query, state
    and times of other roles' sessions from non-superusers: `query` is then
    '<insufficient privilege>' and the rest None)."""

    pid: int
    datname: str | None
    usename: str | None
    application_name: str | None
    client_addr: str | None
    client_port: int | None
    backend_start: dt.datetime | None
    xact_start: dt.datetime | None
    query_start: dt.datetime | None
    state_change: dt.datetime | None
    wait_event_type: str | None
    wait_event: str | None
    state: str | None
    query: str | None
    backend_type: str = "client backend"


class ActivityPort(Protocol):
    """The server's sessions, as SQL run by the session of user `viewer` sees and signals them."""

    def activity(self, viewer: str) -> list[BackendActivity]: ...

    def signal(self, pid: int, *, terminate: bool, by: str) -> bool:
        """Cancel the statement of (or terminate) the session `pid` on behalf of user `by`: True
        if it was signalled, False if no such session; PgError 42501 when `by` may not."""
        ...


_NAMES = re.compile(r"pg_stat_activity", re.IGNORECASE)


def mentions_activity(sql: str) -> bool:
    return _NAMES.search(sql) is not None


def refresh(ctx: datafusion.SessionContext, env: Any) -> None:
    """Register pg_catalog.pg_stat_activity on `ctx` as the session `env` sees it now."""
    import pyarrow as pa

    from icegres.engine import pg_catalog, pg_relations

    port: ActivityPort | None = getattr(env, "activity", None)
    rows = port.activity(env.user) if port is not None else []
    index = pg_catalog.current_index(env)
    datid = index.database_oid if index is not None else None
    rel = pg_relations.RELATIONS_BY_KEY["pg_catalog.pg_stat_activity"]
    table = pa.Table.from_pylist([{**vars(row), "datid": datid if row.datname else None} for row in rows],
                                 schema=rel.arrow_schema)
    schema = ctx.catalog().schema("pg_catalog")
    if "pg_stat_activity" in schema.table_names():
        schema.deregister_table("pg_stat_activity")
    schema.register_table("pg_stat_activity", ctx.from_arrow(table))
