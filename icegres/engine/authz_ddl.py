"""Who may change the catalog: PostgreSQL's ownership rules for DDL, and the owner a new object gets.

CREATE of a table, view or sequence needs CREATE on its schema; CREATE SCHEMA is a superuser's
(PostgreSQL: CREATE on the database, which icegres does not grant); DROP, ALTER, COMMENT, CREATE
INDEX and the maintenance procedures need ownership of the object (or a superuser). After a
CREATE, the creator (a role of the shared state) is recorded as its owner; a DROP or RENAME moves
or forgets the object's entries. The catalog change and the authorization change are two atomic
acts, not one: a crash between them leaves a new table owned by the bootstrap superuser (the safe
side: nobody but superusers may then change it) or a dropped table's stale entries (dropped again
by the next CREATE of that name: `acl.created`).
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from icegres.engine import authz
from icegres.engine import ddl_commands as C
from icegres.pg import acl
from icegres.pg import errors as E
from icegres.pg.errors import PgError

if TYPE_CHECKING:
    from icegres.engine.query import QueryContext

__all__ = ["check_ddl", "record_ddl"]

_CREATES = (C.CreateTable, C.CreateTableAs, C.CreateView, C.CreateSequence)
_KIND = {C.DropView: "view", C.RenameView: "view", C.DropSequence: "sequence", C.AlterSequence: "sequence",
         C.CreateView: "view"}


def _principal(qctx: QueryContext) -> tuple[Any, acl.Principal] | None:
    authorization = authz.in_effect(qctx.engine.authorization, qctx.txn)
    if authorization is None:
        return None
    return authorization, authorization.principal(qctx.env.user, qctx.env.settings.get("role"))


def _schema_of(qctx: QueryContext, schema: str | None) -> str:
    if schema is not None:
        return schema
    return qctx.engine.first_schema(qctx.env.search_path) or "public"


def _existing(qctx: QueryContext, schema: str | None, name: str) -> tuple[str, str] | None:
    found = qctx.resolver().resolve(schema, name)
    return None if found is None or found[0] == "system" else found[1]


def _owned(cmd: Any) -> list[tuple[str | None, str]]:
    """The existing relations `cmd` changes or drops."""
    if isinstance(cmd, C.DropTable | C.DropView | C.DropSequence):
        return list(cmd.names)
    if isinstance(cmd, C.AlterTable | C.AlterSequence | C.RenameView):
        return [(cmd.schema, cmd.name)]
    if isinstance(cmd, C.CreateIndex):
        return [(cmd.schema, cmd.table)]
    if isinstance(cmd, C.CreateView) and cmd.or_replace:
        return [(cmd.schema, cmd.name)]
    if hasattr(cmd, "procedure") and "table" in dict(cmd.args):
        schema, _, name = str(cmd.table).rpartition(".")
        return [(schema or None, name)]
    return []


def check_ddl(qctx: QueryContext, cmd: Any) -> None:
    """42501 unless this session's role may run `cmd` (blocking: a worker thread's call)."""
    got = _principal(qctx)
    if got is None:
        return
    authorization, who = got
    if authorization.is_superuser(who):
        return
    authz = authorization.current()
    if authz.is_superuser(who):
        return
    if isinstance(cmd, C.CreateSchema):
        raise PgError(E.INSUFFICIENT_PRIVILEGE, f"permission denied for database {qctx.env.database}")
    if isinstance(cmd, C.DropSchema):
        for name in cmd.names:
            if qctx.engine.has_schema(name):
                authz.require_owner(who, ("schema", name), "schema")
        return
    if isinstance(cmd, _CREATES) and not getattr(cmd, "temporary", False):
        if not (isinstance(cmd, C.CreateView) and cmd.or_replace and _existing(qctx, cmd.schema, cmd.name)):
            authz.require(who, ("schema", _schema_of(qctx, cmd.schema)), "C")
    for schema, name in _owned(cmd):
        key = _existing(qctx, schema, name)
        if key is not None:
            authz.require_owner(who, ("table", *key), _KIND.get(type(cmd), "table"))


def _entries_in(authz: acl.Authz, schema: str) -> list[acl.ObjectKey]:
    """The recorded tables of a schema (a DROP SCHEMA ... CASCADE drops them all)."""
    return [k for k in {*authz.acls, *authz.owners} if k[0] == "table" and k[1] == schema]


async def record_ddl(qctx: QueryContext, cmd: Any, run: Any) -> None:
    """After `cmd` succeeded: the new object's owner, a dropped or renamed object's entries."""
    got = _principal(qctx)
    if got is None or getattr(cmd, "temporary", False):
        return
    authorization, who = got

    def fold_of() -> Any:
        if isinstance(cmd, C.CreateView):
            key = ("table", _schema_of(qctx, cmd.schema), cmd.name)
            invoker = bool(cmd.security_invoker)  # (OR REPLACE replaces the options, as PostgreSQL's)
            if cmd.or_replace:
                return lambda a: acl.set_security_invoker(a, key, invoker)
            return lambda a: acl.set_security_invoker(acl.created(a, who, key), key, invoker)
        if isinstance(cmd, _CREATES):
            key = ("table", _schema_of(qctx, cmd.schema), cmd.name)
            return lambda a: acl.created(a, who, key)
        if isinstance(cmd, C.DropTable | C.DropView | C.DropSequence | C.DropSchema):
            if isinstance(cmd, C.DropSchema):
                keys = [("schema", n) for n in cmd.names]
                keys += [k for n in cmd.names for k in _entries_in(authorization.current(), n)]
            else:
                keys = [("table", _schema_of(qctx, s), n) for s, n in cmd.names]

            def drop(a: acl.Authz) -> acl.Authz:
                for key in keys:
                    a = acl.dropped(a, key)
                return a
            return drop
        if isinstance(cmd, C.RenameView):
            schema = _schema_of(qctx, cmd.schema)
            return lambda a: acl.renamed(a, ("table", schema, cmd.name), ("table", schema, cmd.new_name))
        if isinstance(cmd, C.AlterTable):
            for action in cmd.actions:
                if isinstance(action, C.RenameTable):
                    schema = _schema_of(qctx, cmd.schema)
                    new = getattr(action, "new_name", None) or getattr(action, "name", None)
                    return lambda a: acl.renamed(a, ("table", schema, cmd.name), ("table", schema, new))
        return None

    fold = await run(fold_of)
    if fold is None:
        return
    current = await run(authorization.current)
    if fold(current) == current:
        return  # nothing to record: no shared write for a superuser's every CREATE
    await authz.change(authorization, fold, run)
