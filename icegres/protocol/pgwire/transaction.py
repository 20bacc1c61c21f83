"""Transaction control on a pgwire session: the statements that feed its transaction block.

BEGIN, COMMIT, ROLLBACK, SAVEPOINT, RELEASE, ROLLBACK TO, SET [LOCAL], SET TRANSACTION and RESET
become events of the transaction block machine (`icegres.machines.txblock`), which pgwire shares
with Flight SQL; `SessionBlockPort` does on the session what the machine asks of a front end. What
the statements mean (warnings, 25P02 in a failed block, what a block's end restores) is the
machine's; this module only turns statements into events and sends the command tags.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from typing import TYPE_CHECKING

from icegres.engine.txblock_driver import finish
from icegres.engine.txn import TxnState
from icegres.machines import txblock
from icegres.pg import settings as guc
from icegres.pg.errors import FEATURE_NOT_SUPPORTED, UNDEFINED_TABLE, PgError
from icegres.protocol.pgwire import messages as m
from icegres.protocol.pgwire import writes
from icegres.sql.statement import Kind, Statement, unquote_ident

if TYPE_CHECKING:
    from icegres.protocol.pgwire.port import SessionPort

# Statements a failed block still runs (PostgreSQL's IsTransactionExitStmt).
EXITS_BLOCK = (Kind.ROLLBACK, Kind.ROLLBACK_TO, Kind.COMMIT)


class SessionBlockPort:
    """What the transaction block asks of a pgwire session (`txblock_driver.BlockPort`)."""

    __slots__ = ("session",)

    def __init__(self, session: SessionPort) -> None:
        self.session = session

    def new_txn(self, isolation: str | None) -> TxnState:
        return writes.new_transaction(self.session, isolation)

    def bind(self, txn: TxnState | None) -> None:
        if txn is None:
            self.session.qctx.end_transaction()
        else:
            self.session.qctx.txn = txn

    def warn(self, sqlstate: str, message: str) -> None:
        self.session.send(m.notice_response(PgError(sqlstate, message, severity="WARNING")))

    def restore_settings(self, values: tuple[tuple[str, str], ...]) -> None:
        session = self.session
        for key, value in values:
            session.settings[key] = value
            if key == "search_path":
                session.qctx.forget_routes()

    def close_portals(self, block_only: bool) -> None:
        session = self.session
        if not block_only:
            session.portals.clear()  # a Sync ended the extended protocol's implicit transaction
            return
        # The unnamed portal may be the one running this COMMIT or ROLLBACK: it lasts to the Sync.
        session.portals = {k: p for k, p in session.portals.items() if k == ""}
        for name in [n for n, c in session.cursors.items() if not c.hold]:
            del session.cursors[name]


def gate(session: SessionPort, stmt: Statement) -> None:
    """A failed block refuses every statement but COMMIT and ROLLBACK [TO] (25P02)."""
    session.block.feed(txblock.StatementStarted(exits_block=stmt.kind in EXITS_BLOCK))


def default_read_only(session: SessionPort) -> bool:
    return session.settings.get("default_transaction_read_only", "off") == "on"


def set_in_block(session: SessionPort, key: str, value: str | None, local: bool) -> None:
    """SET (LOCAL): applied, then told to the transaction block, which keeps what the block's end
    restores (and takes a SET LOCAL outside a block back at once, with a warning)."""
    before = dict(session.settings)
    assigned = session.set_setting(key, value)
    # The assigned setting even if its value did not change: a plain SET to the value a SET LOCAL
    # gave still outlasts the block, as in PostgreSQL.
    # A custom setting (`icegres.branch`, `myapp.x`) the session had not set before was "" then,
    # as PostgreSQL shows a placeholder once a SET LOCAL of it lapsed.
    changes = tuple((name, before.get(name, ""), session.settings[name]) for name in session.settings
                    if session.settings[name] != before.get(name, "") or name == assigned)
    session.block.feed(txblock.SettingChanged(local, changes))


async def _set(session: SessionPort, stmt: Statement, describe: bool) -> None:
    for key, value in stmt.options:  # READ ONLY / READ WRITE of SET [SESSION CHARACTERISTICS AS] TRANSACTION
        if key == "transaction_read_only":
            session.block.feed(txblock.ReadOnlyRequested(value == "on"))
        else:
            set_in_block(session, key, value, stmt.flag)
    if stmt.name == "transaction_isolation" and stmt.value is None:
        session.send(session.trace.completed("SET"))
        return
    authorization = session.qctx.authorization
    name = (stmt.name or "").lower()
    if name == "role" and authorization is not None:
        await session.in_thread(authorization.check_set_role, session.qctx.env.user, stmt.value)
    if name == "session_authorization":
        await _session_authorization(session, stmt.value, stmt.flag)
    else:
        set_in_block(session, stmt.name or "", stmt.value, stmt.flag)
    session.send(session.trace.completed("SET"))


async def _session_authorization(session: SessionPort, user: str | None, local: bool) -> None:
    """SET [LOCAL] SESSION AUTHORIZATION user | DEFAULT (and RESET): session_user and
    current_user become `user` (None: who logged in), SET ROLE lapses. Only a session whose
    login user is a superuser may (PostgreSQL's check_session_authorization); going back to
    the login user is always allowed."""
    login = session.qctx.env.login_user
    authorization = session.qctx.authorization
    if user is not None and user != login and authorization is not None:
        await session.in_thread(authorization.check_session_authorization, login, user)
    set_in_block(session, "role", None, local)
    set_in_block(session, "session_authorization", user or login, local)


async def _reset(session: SessionPort, stmt: Statement, describe: bool) -> None:
    # A RESET is a SET to the default: inside a block, ROLLBACK undoes it.
    if stmt.name is None:
        for key, value in session.initial_settings.items():
            if session.settings.get(key) != value and key not in guc.READ_ONLY and key not in guc.NO_RESET_ALL:
                set_in_block(session, key, value, local=False)
    elif stmt.name == "session_authorization":
        await _session_authorization(session, None, local=False)
    else:
        set_in_block(session, stmt.name, None, local=False)
    session.send(session.trace.completed("RESET"))


async def _begin(session: SessionPort, stmt: Statement, describe: bool) -> None:
    read_only = dict(stmt.options).get("transaction_read_only")
    asked = default_read_only(session) if read_only is None else read_only == "on"
    session.block.feed(txblock.BeginRequested(stmt.value, asked))
    session.send(session.trace.completed(stmt.tag))


async def _commit(session: SessionPort, stmt: Statement, describe: bool) -> None:
    # The block ends whatever the commit's verdict: a failed COMMIT rolls back, as in PostgreSQL.
    ending = session.block.feed(txblock.CommitRequested())
    await finish(writes.host(session), ending)
    rolled_back = ending is not None and ending.rolled_back
    session.send(session.trace.completed("ROLLBACK" if rolled_back else "COMMIT"))


async def _rollback(session: SessionPort, stmt: Statement, describe: bool) -> None:
    await finish(writes.host(session), session.block.feed(txblock.RollbackRequested()))
    session.send(session.trace.completed("ROLLBACK"))


async def _savepoint(session: SessionPort, stmt: Statement, describe: bool) -> None:
    session.block.feed(txblock.SavepointDeclared(stmt.name or ""))
    session.send(session.trace.completed("SAVEPOINT"))


async def _release(session: SessionPort, stmt: Statement, describe: bool) -> None:
    session.block.feed(txblock.SavepointReleased(stmt.name or ""))
    session.send(session.trace.completed("RELEASE"))


async def _rollback_to(session: SessionPort, stmt: Statement, describe: bool) -> None:
    session.block.feed(txblock.RolledBackTo(stmt.name or ""))
    session.send(session.trace.completed("ROLLBACK"))


async def _lock(session: SessionPort, stmt: Statement, describe: bool) -> None:
    """LOCK TABLE in a block: the block reads the snapshot it pinned of each table, which no other
    session's DROP or ALTER changes, so ACCESS SHARE (pg_dump) and ROW SHARE hold already; the
    stronger modes would have to block writers, which never wait here."""
    session.block.feed(txblock.CursorDeclareRequested(hold=False, what="LOCK TABLE"))
    for name, _ in stmt.options:
        schema, _, table = name.rpartition(".")
        if session.qctx.resolve_table(unquote_ident(schema) if schema else None, unquote_ident(table)) is None:
            raise PgError(UNDEFINED_TABLE, f'relation "{name}" does not exist')
    if stmt.value not in ("ACCESS SHARE", "ROW SHARE"):
        raise PgError(FEATURE_NOT_SUPPORTED, f"LOCK TABLE IN {stmt.value} MODE is not supported",
                      hint="Writers never block each other: conflicting commits fail with 40001 "
                           "(docs/limitations.md).")
    session.send(session.trace.completed(stmt.tag))


COMMANDS: dict[Kind, Callable[[SessionPort, Statement, bool], Awaitable[None]]] = {
    Kind.SET: _set,
    Kind.RESET: _reset,
    Kind.BEGIN: _begin,
    Kind.COMMIT: _commit,
    Kind.ROLLBACK: _rollback,
    Kind.SAVEPOINT: _savepoint,
    Kind.RELEASE: _release,
    Kind.ROLLBACK_TO: _rollback_to,
    Kind.LOCK: _lock,
}
