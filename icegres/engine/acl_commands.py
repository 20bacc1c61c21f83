"""Running the role and privilege statements (sql/acl_statements.py) against the shared state.

Names are resolved here, against this server's catalog, before the change is made: a GRANT
names tables as the session's search_path finds them (42P01 for none), ALL TABLES IN SCHEMA is
the tables the schema holds now (PostgreSQL's meaning: later tables are not included). The change
itself is a pure fold of pg/acl.py applied by Authorization.change, so a change that loses a
race to another server is applied again to the state that won, and a refused one writes nothing.
None of these statements runs inside a transaction block's snapshot: like a sequence's nextval,
a GRANT is in force when it returns (PostgreSQL would roll it back with the block: the
difference is in docs/limitations.md).
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from icegres.engine import authz
from icegres.pg import acl
from icegres.pg import errors as E
from icegres.pg import settings as guc
from icegres.pg.errors import PgError
from icegres.pg.scram import make_verifier, parse_verifier
from icegres.sql.acl_statements import (
    AclCommand,
    AlterOwner,
    AlterRole,
    CreateRole,
    DefaultPrivileges,
    DropRole,
    GrantPrivileges,
    GrantRole,
    MaskCommand,
    Owned,
    PolicyCommand,
    RoleSetting,
    RowSecurity,
    ViewOptions,
    parse_acl,
)

if TYPE_CHECKING:
    from icegres.engine.query import QueryContext

__all__ = ["acl_command", "run_acl"]


def acl_command(sql: str) -> AclCommand | None:
    return parse_acl(sql)


def _verifier_text(password: str | None) -> str | None:
    """What is stored for a password: a verifier as given, or one made from the text."""
    if password is None:
        return None
    if parse_verifier(password) is not None:
        return password
    return make_verifier(password).format()


def _named_role(name: str, qctx: QueryContext) -> str:
    env = qctx.env
    if name in ("current_user", "current_role"):
        return env.current_user
    if name == "session_user":
        return env.user
    return name


def _served(database: str, qctx: QueryContext) -> str:
    """The database an ALTER names: the served one (`postgres` is another name for it)."""
    if database not in (qctx.env.database, "postgres"):
        raise PgError(E.INVALID_CATALOG_NAME, f'database "{database}" does not exist')
    return qctx.env.database


def _setting_value(cmd: RoleSetting, current: dict[str, str]) -> str | None:
    """The value to store, checked as the session's SET checks it (42704 for a parameter that
    does not exist, 22023 for a value it refuses, 55P02 for one that cannot be set); FROM
    CURRENT: the session's own; None: removed."""
    if cmd.name is None or (cmd.value is None and not cmd.from_current):
        if cmd.name is not None and cmd.name not in current and "." not in cmd.name:
            raise PgError(E.UNDEFINED_OBJECT, f'unrecognized configuration parameter "{cmd.name}"')
        return None
    if cmd.from_current:
        guc.validate(cmd.name, None, current, current)
        return current.get(cmd.name, "")
    guc.validate(cmd.name, cmd.value, current, current)
    return cmd.value  # (as written, as PostgreSQL keeps it: checked, not normalised)


def _valid_until_read(attrs: dict[str, Any], zone: str) -> dict[str, Any]:
    """VALID UNTIL as PostgreSQL reads it: a timestamptz (22007 for text that is not one; one
    without an offset in the session's TimeZone `zone`), kept as an ISO 8601 instant, or
    'infinity' / '-infinity'."""
    text = attrs.get("valid_until")
    if text is None:
        return attrs
    word = text.strip().lower()
    if word in ("infinity", "+infinity", "-infinity"):
        attrs["valid_until"] = word.lstrip("+")
        return attrs
    from icegres.pg.clock import TextSettings
    from icegres.pg.params import decode_param
    from icegres.pg.types import TIMESTAMPTZ

    attrs["valid_until"] = decode_param(text.encode(), TIMESTAMPTZ.oid, 0, TextSettings(timezone=zone)).isoformat()
    return attrs


async def run_acl(qctx: QueryContext, cmd: AclCommand, run: Any, drop_objects: Any = None) -> tuple[str, list[str]]:
    """Apply `cmd`; (command tag, warnings). `run(fn, *args)` runs blocking work in a worker thread;
    `drop_objects(roles, cascade)` drops what DROP OWNED's roles own (its notices)."""
    authorization = authz.in_effect(qctx.engine.authorization, qctx.txn)
    if authorization is None:
        raise PgError(E.FEATURE_NOT_SUPPORTED, "roles and privileges need a server (icegres serve)")
    who = await run(lambda: authorization.principal(qctx.env.user, qctx.env.settings.get("role")))
    configured = authorization.configured_names()
    warnings: list[str] = []

    if isinstance(cmd, CreateRole):
        attrs = _valid_until_read(dict(cmd.attrs), qctx.env.time_zone)
        attrs["password"] = await run(_verifier_text, cmd.password)
        await authz.change(authorization, lambda a: acl.create_role(
            a, who, cmd.name, attrs, configured, cmd.in_roles, cmd.members), run)
        return "CREATE ROLE", warnings
    if isinstance(cmd, AlterRole):
        name = _named_role(cmd.name, qctx)
        if cmd.rename_to is not None:
            await authz.change(authorization, lambda a: acl.rename_role(a, who, name, cmd.rename_to, configured), run)
            return "ALTER ROLE", []
        attrs = _valid_until_read(dict(cmd.attrs), qctx.env.time_zone)
        if cmd.password_given:
            attrs["password"] = await run(_verifier_text, cmd.password)
        if name in configured and name not in (await run(authorization.current)).roles:
            raise PgError(E.FEATURE_NOT_SUPPORTED, f'role "{name}" is defined by the server\'s configuration',
                          hint="Change it in --password-file / ICEGRES_USERS.")
        await authz.change(authorization, lambda a: acl.alter_role(a, who, name, attrs), run)
        return "ALTER ROLE", warnings
    if isinstance(cmd, RoleSetting):
        role = _named_role(cmd.role, qctx) if cmd.role is not None else ""
        database = _served(cmd.database, qctx) if cmd.database is not None else ""
        value = _setting_value(cmd, qctx.env.settings)
        name = None if cmd.name is None else guc.canonical_name(cmd.name)
        await authz.change(authorization, lambda a: acl.set_setting(
            a, who, role, database, name, value, configured), run)
        return cmd.tag, warnings
    if isinstance(cmd, Owned):
        roles = tuple(_named_role(name, qctx) for name in cmd.roles)
        if cmd.new_owner is not None:
            new = _named_role(cmd.new_owner, qctx)
            await authz.change(authorization, lambda a: acl.reassign_owned(a, who, roles, new, configured), run)
            return cmd.tag, warnings
        if drop_objects is not None:
            warnings += await drop_objects(roles, cmd.cascade)
        await authz.change(authorization, lambda a: acl.drop_owned(a, who, roles, configured), run)
        return cmd.tag, warnings
    if isinstance(cmd, DropRole):
        def drop(a: acl.Authz) -> acl.Authz:
            for name in cmd.names:
                if a.role(name) is None and cmd.if_exists:
                    continue
                a = acl.drop_role(a, who, name)
            return a

        before = await run(authorization.current)
        for name in cmd.names:
            if before.role(name) is None and cmd.if_exists:
                warnings.append(f'role "{name}" does not exist, skipping')
        await authz.change(authorization, drop, run)
        return "DROP ROLE", warnings
    if isinstance(cmd, GrantRole):
        members = [_named_role(m, qctx) for m in cmd.members]
        roles = [_named_role(r, qctx) for r in cmd.roles]

        def fold(a: acl.Authz) -> acl.Authz:
            for role in roles:
                for member in members:
                    if cmd.revoke:
                        a = acl.revoke_role(a, who, role, member, admin_only=cmd.admin)
                    else:
                        a = acl.grant_role(a, who, role, member, admin=cmd.admin, configured=configured)
            return a

        await authz.change(authorization, fold, run)
        return cmd.tag, warnings
    if isinstance(cmd, GrantPrivileges):
        return await _grant_privileges(qctx, cmd, who, configured, run)
    if isinstance(cmd, RowSecurity):
        key = ("table", *await run(_relation, qctx, cmd.schema, cmd.name))
        await authz.change(authorization, lambda a: acl.set_row_security(a, who, key, enable=cmd.enable, force=cmd.force), run)
        return cmd.tag, warnings
    if isinstance(cmd, PolicyCommand):
        return await _policy(qctx, cmd, who, run), warnings
    if isinstance(cmd, DefaultPrivileges):
        g = cmd.grant
        roles = [_named_role(r, qctx) for r in cmd.roles] or [who.user]
        grantees = [_named_role(x, qctx) if x else acl.PUBLIC for x in g.grantees]
        letters = acl.ALL_TABLE if g.all_privileges else g.letters
        for schema in cmd.schemas:
            if not await run(qctx.engine.has_schema, schema):
                raise PgError(E.INVALID_SCHEMA_NAME, f'schema "{schema}" does not exist')
        await authz.change(authorization, lambda a: acl.alter_default_privileges(
            a, who, roles, list(cmd.schemas) or [""], letters, grantees, revoke=g.revoke,
            grant_option=g.grant_option, configured=configured), run)
        return cmd.tag, warnings
    if isinstance(cmd, MaskCommand):
        return await _mask(qctx, cmd, who, run), warnings
    if isinstance(cmd, ViewOptions):
        view = await run(_view_named, qctx, cmd.schema, cmd.name, cmd.if_exists)
        if view is None:
            return cmd.tag, [f'relation "{cmd.name}" does not exist, skipping']

        def options(a: acl.Authz) -> acl.Authz:
            a.require_owner(who, view, "view")
            return acl.set_security_invoker(a, view, cmd.invoker)

        await authz.change(authorization, options, run)
        return cmd.tag, warnings
    if isinstance(cmd, AlterOwner):
        obj = await run(_owned_object, qctx, cmd)
        owner = _named_role(cmd.owner, qctx)
        await authz.change(authorization, lambda a: acl.set_owner(a, who, obj, owner, configured, cmd.kind), run)
        return cmd.tag, warnings
    raise AssertionError(cmd)


def _view_named(qctx: QueryContext, schema: str | None, name: str, if_exists: bool) -> acl.ObjectKey | None:
    """The view an ALTER VIEW names (42809 for a table, 42P01 for nothing; None: IF EXISTS)."""
    qctx.engine.refresh({(schema, name)} if schema else {(s, name) for s in qctx.env.search_path})
    found = qctx.resolver().resolve(schema, name)
    if found is None or found[0] == "system":
        if if_exists:
            return None
        raise PgError(E.UNDEFINED_TABLE, f'relation "{name if schema is None else schema + "." + name}" does not exist')
    if found[0] != "view":
        raise PgError(E.WRONG_OBJECT_TYPE, f'"{name}" is not a view')
    return ("table", *found[1])


def _owned_object(qctx: QueryContext, cmd: AlterOwner) -> acl.ObjectKey:
    if cmd.kind == "schema":
        if not qctx.engine.has_schema(cmd.name):
            raise PgError(E.INVALID_SCHEMA_NAME, f'schema "{cmd.name}" does not exist')
        return ("schema", cmd.name)
    if cmd.kind == "view":
        found = _view_named(qctx, cmd.schema, cmd.name, False)
        assert found is not None
        return found
    return ("table", *_relation(qctx, cmd.schema, cmd.name))


def _relation(qctx: QueryContext, schema: str | None, name: str) -> tuple[str, str]:
    qctx.engine.refresh({(schema, name)} if schema else {(s, name) for s in qctx.env.search_path})
    found = qctx.resolver().resolve(schema, name)
    if found is None or found[0] == "system":
        raise PgError(E.UNDEFINED_TABLE, f'relation "{name if schema is None else schema + "." + name}" does not exist')
    return found[1]


async def _grant_privileges(qctx: QueryContext, cmd: GrantPrivileges, who: acl.Principal,
                            configured: frozenset[str], run: Any) -> tuple[str, list[str]]:
    authorization = authz.in_effect(qctx.engine.authorization, qctx.txn)

    def objects() -> list[acl.ObjectKey]:
        if cmd.object_kind == "schema":
            for _, name in cmd.objects:
                if not qctx.engine.has_schema(name):
                    raise PgError(E.INVALID_SCHEMA_NAME, f'schema "{name}" does not exist')
            return [("schema", name) for _, name in cmd.objects]
        if cmd.object_kind == "all_tables":
            qctx.engine.refresh(None)
            out: list[acl.ObjectKey] = []
            for _, schema in cmd.objects:
                if not qctx.engine.has_schema(schema):
                    raise PgError(E.INVALID_SCHEMA_NAME, f'schema "{schema}" does not exist')
                keys = {k for k in qctx.engine.plans() if k[0] == schema} | {k for k in qctx.engine.views() if k[0] == schema}
                out += [("table", *k) for k in sorted(keys)]
            return out
        return [("table", *_relation(qctx, schema, name)) for schema, name in cmd.objects]

    targets = await run(objects)
    alphabet = acl.ALL_SCHEMA if cmd.object_kind == "schema" else acl.ALL_TABLE
    letters = alphabet if cmd.all_privileges else cmd.letters
    bad = [c for c in letters if c not in alphabet]
    if bad:
        word = next(w for w, c in acl.PRIVILEGE_LETTERS.items() if c == bad[0])
        kind = "schema" if cmd.object_kind == "schema" else "relation"
        raise PgError(E.INVALID_GRANT_OPERATION, f"invalid privilege type {word} for {kind}")
    grantees = [_named_role(g, qctx) if g else acl.PUBLIC for g in cmd.grantees]
    warnings: list[str] = []
    column_grants = await run(_column_objects, qctx, cmd, targets) if cmd.columns else []

    def apply(a: acl.Authz, objs: list[acl.ObjectKey], privileges: str) -> acl.Authz:
        if cmd.revoke:
            out, said = acl.revoke(a, who, objs, privileges, grantees,
                                   grant_option_only=cmd.grant_option, cascade=cmd.cascade)
        else:
            out, said = acl.grant(a, who, objs, privileges, grantees, grant_option=cmd.grant_option)
        warnings.extend(said)
        return out

    def fold(a: acl.Authz) -> acl.Authz:
        for g in grantees:
            if g != acl.PUBLIC and a.role(g) is None and g not in configured:
                raise PgError(E.UNDEFINED_OBJECT, f'role "{g}" does not exist')
        warnings.clear()
        if letters:
            a = apply(a, targets, letters)
        for letter, objs in column_grants:
            a = apply(a, objs, letter)
        return a

    await authz.change(authorization, fold, run)
    return cmd.tag, warnings


async def _policy(qctx: QueryContext, cmd: PolicyCommand, who: acl.Principal, run: Any) -> str:
    """CREATE / ALTER / DROP POLICY; an expression is planned over the table first, so that a
    wrong column or type is the error PostgreSQL gives at CREATE POLICY, not at the first read."""
    from icegres.sql.statement import query

    authorization = authz.in_effect(qctx.engine.authorization, qctx.txn)
    schema, name = await run(_relation, qctx, cmd.schema, cmd.table)
    key = ("table", schema, name)
    for expression in (cmd.using, cmd.check):
        if expression is not None:
            probe = query(f"SELECT 1 FROM {_quoted(schema)}.{_quoted(name)} WHERE ({expression}) LIMIT 0")
            await run(qctx.plan, probe)
    roles = None if cmd.roles is None else tuple(_named_role(r, qctx) if r else acl.PUBLIC for r in cmd.roles)
    if cmd.action == "create":
        policy = acl.Policy(cmd.name, key, cmd.permissive, cmd.command, roles or (acl.PUBLIC,), cmd.using, cmd.check)
        await authz.change(authorization, lambda a: acl.create_policy(a, who, policy), run)
    elif cmd.action == "alter":
        await authz.change(authorization, lambda a: acl.alter_policy(
            a, who, key, cmd.name, name=cmd.rename_to, roles=roles, using=cmd.using, check=cmd.check), run)
    else:
        def drop(a: acl.Authz) -> acl.Authz:
            if cmd.if_exists and not any(p.table == key and p.name == cmd.name for p in a.policies):
                return a
            return acl.drop_policy(a, who, key, cmd.name)
        await authz.change(authorization, drop, run)
    return cmd.tag


def _quoted(name: str) -> str:
    return '"' + name.replace('"', '""') + '"'


async def _mask(qctx: QueryContext, cmd: MaskCommand, who: acl.Principal, run: Any) -> str:
    """CREATE / DROP MASK; the column must exist and the expression plan over the table."""
    from icegres.sql.statement import query

    authorization = authz.in_effect(qctx.engine.authorization, qctx.txn)
    schema, name = await run(_relation, qctx, cmd.schema, cmd.table)
    key = ("table", schema, name)
    if cmd.action == "drop":
        await authz.change(authorization, lambda a: acl.drop_mask(a, who, key, cmd.name, if_exists=cmd.if_exists), run)
        return cmd.tag
    columns = (await run(qctx.engine.table_schema, (schema, name))).names
    if cmd.column not in columns:
        raise PgError(E.UNDEFINED_COLUMN, f'column "{cmd.column}" of relation "{name}" does not exist')
    await run(qctx.plan, query(f"SELECT ({cmd.expression}) FROM {_quoted(schema)}.{_quoted(name)} LIMIT 0"))
    roles = tuple(_named_role(r, qctx) if r else acl.PUBLIC for r in cmd.roles)
    mask = acl.Mask(cmd.name, key, cmd.column, cmd.expression, roles)
    await authz.change(authorization, lambda a: acl.create_mask(a, who, mask), run)
    return cmd.tag


def _column_objects(qctx: QueryContext, cmd: GrantPrivileges,
                    targets: list[acl.ObjectKey]) -> list[tuple[str, list[acl.ObjectKey]]]:
    """`SELECT (a, b)`: each privilege's column keys over every table named (42703 for a
    column the table lacks)."""
    if cmd.object_kind != "table":
        raise PgError(E.SYNTAX_ERROR, "column privileges are given on tables only")
    out = []
    for letter, columns in cmd.columns:
        objs: list[acl.ObjectKey] = []
        for target in targets:
            names = set(qctx.engine.table_schema((target[1], target[2])).names)
            for column in columns:
                if column not in names:
                    raise PgError(E.UNDEFINED_COLUMN, f'column "{column}" of relation "{target[2]}" does not exist')
                objs.append(("column", target[1], target[2], column))
        out.append((letter, objs))
    return out
