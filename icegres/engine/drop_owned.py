"""DROP OWNED BY roles [CASCADE | RESTRICT]: what the roles own in the lake dropped, then every
privilege granted to them, as PostgreSQL's DropOwnedObjects does.

The roles' views, sequences, tables and schemas go through the DROP commands of each kind, in
that order (a view before what it reads, a schema last), by the role that runs the statement
(a member of the roles owns what they own). PostgreSQL drops them as one set: without CASCADE,
an object outside the set that depends on one inside (another role's view of the table, another
role's table in the schema) refuses the whole statement with 2BP01. The same is found here
before anything is dropped, so a refused DROP OWNED changes nothing; with CASCADE the
dependents go too. Then the privileges, default privileges, policies and masks (`acl.drop_owned`).
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from typing import Any

from icegres.engine import authz, view_ddl
from icegres.engine.ddl_commands import DropSchema, DropSequence, DropTable, DropView
from icegres.engine.sequence_store import is_sequence
from icegres.pg import acl
from icegres.pg.errors import PgError

Key = tuple[str, str]


async def owned_objects_dropped(host: Any, roles: tuple[str, ...], cascade: bool,
                                run_ddl_command: Callable[[Any, Any], Awaitable[Any]]) -> list[str]:
    """Drop what `roles` own (after checking the runner may: 42704 / 42501 as DROP OWNED checks),
    each kind by `run_ddl_command(host, command)` (writes.py's); the notices of the drops."""
    qctx = host.qctx
    authorization = authz.in_effect(qctx.engine.authorization, qctx.txn)
    if authorization is None:
        return []
    current = await host.run(authorization.current)
    who = await host.run(authorization.principal, qctx.env.user, qctx.env.settings.get("role"))
    acl.owned_roles_checked(current, who, roles, "drop", authorization.configured_names())
    owned = acl.owned_by(current, roles)
    schemas = sorted(k[1] for k in owned if k[0] == "schema")
    views, sequences, tables = await host.run(_kinds, qctx, [(k[1], k[2]) for k in owned if k[0] == "table"])
    if not cascade:
        await host.run(_refuse_dependents, qctx, set(views) | set(sequences) | set(tables), schemas)
    notices: list[str] = []
    for command in (DropView(tuple(views), True, cascade), DropSequence(tuple(sequences), True, cascade),
                    DropTable(tuple(tables), True, cascade), DropSchema(tuple(schemas), True, cascade)):
        if command.names:
            notices += (await run_ddl_command(host, command)).notices
    return notices


def _kinds(qctx: Any, keys: list[Key]) -> tuple[list[Key], list[Key], list[Key]]:
    """The owned relations that exist, as views, sequences and tables (blocking: a sequence is a
    table whose properties say so)."""
    engine = qctx.engine
    known_views = engine.views()
    views, sequences, tables = [], [], []
    for key in sorted(set(keys)):
        if key in known_views:
            views.append(key)
        elif engine.lakehouse.table_exists(*key):
            (sequences if is_sequence(engine.lakehouse.load_table(*key).properties) else tables).append(key)
    return views, sequences, tables


def _refuse_dependents(qctx: Any, relations: set[Key], schemas: list[str]) -> None:
    """2BP01, PostgreSQL's RESTRICT: a view outside the set that reads a relation in it, or a
    relation of another role in a schema of the set. Blocking (it lists the schemas' tables)."""
    path = list(qctx.env.search_path)
    views = qctx.engine.views()
    lines = [f"view {view_ddl.shown(v, path)} depends on {'view' if r in views else 'table'} {view_ddl.shown(r, path)}"
             for r in sorted(relations) for v in sorted(views)
             if r in views[v].reads and v not in relations]
    for schema in schemas:
        for name in sorted(qctx.engine.lakehouse.list_table_names(schema)):
            if (schema, name) not in relations:
                lines.append(f"table {schema}.{name} depends on schema {schema}")
        lines += [f"view {schema}.{v[1]} depends on schema {schema}" for v in sorted(views)
                  if v[0] == schema and v not in relations]
    if not lines:
        return
    single = len(relations) + len(schemas) == 1
    what = (f"{'view' if next(iter(relations), None) in views else 'table'} "
            f"{view_ddl.shown(next(iter(relations)), path)}" if relations else f"schema {schemas[0]}") if single else ""
    raise PgError(view_ddl.DEPENDENT_OBJECTS_STILL_EXIST,
                  f"cannot drop {what} because other objects depend on it" if single
                  else "cannot drop desired object(s) because other objects depend on them",
                  detail="\n".join(lines), hint="Use DROP ... CASCADE to drop the dependent objects too.")
