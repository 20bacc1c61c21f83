"""The catalog rows of roles and privileges: pg_authid, pg_roles, pg_user, pg_auth_members, and the
owners and ACLs of pg_class and pg_namespace, from the shared authorization state (pg/acl.py).

The bootstrap superuser (OID 10) is the row every catalog has had: the server's configured
users act as it. The roles made by CREATE ROLE follow with their own OIDs. No verifier is ever
shown: pg_authid.rolpassword is NULL (PostgreSQL shows it to superusers only; a lakehouse endpoint
has no reason to hand out SCRAM verifiers at all).
"""

from __future__ import annotations

from datetime import datetime
from typing import Any

from icegres.pg import acl

__all__ = ["attacl", "auth_member_rows", "authid_rows", "db_role_setting_rows", "owner_name", "view_options", "nspacl", "owner_oid", "relacl", "role_oid", "default_acl_rows", "policy_rows", "row_security_flags",
           "table_privilege_rows", "user_rows"]

BOOTSTRAP_OID = acl.BOOTSTRAP_OID
Rows = list[dict[str, Any]]


def _bootstrap(name: str) -> dict[str, Any]:
    return {"oid": BOOTSTRAP_OID, "rolname": name, "rolsuper": True, "rolinherit": True,
            "rolcreaterole": True, "rolcreatedb": True, "rolcanlogin": True, "rolreplication": True,
            "rolbypassrls": True, "rolconnlimit": -1, "rolpassword": None, "rolvaliduntil": None}


def _row(role: acl.Role) -> dict[str, Any]:
    return {"oid": role.oid, "rolname": role.name, "rolsuper": role.superuser,
            "rolinherit": role.inherit, "rolcreaterole": role.createrole, "rolcreatedb": role.createdb,
            "rolcanlogin": role.login, "rolreplication": False, "rolbypassrls": role.bypassrls,
            "rolconnlimit": role.connlimit, "rolpassword": None, "rolvaliduntil": _instant(role.valid_until)}


def _instant(valid_until: str | None) -> datetime | int | None:
    """A stored VALID UNTIL as a timestamptz value: 'infinity' is the largest µs (DT_NOEND,
    which the text output writes as infinity), '-infinity' the smallest."""
    if valid_until is None:
        return None
    if valid_until in ("infinity", "-infinity"):
        return 2**63 - 1 if valid_until == "infinity" else -(2**63)
    return datetime.fromisoformat(valid_until)


def authid_rows(authz: acl.Authz | None, bootstrap: str) -> Rows:
    """pg_authid: the bootstrap superuser, then every role."""
    rows = [_bootstrap(bootstrap)]
    if authz is not None:
        rows += [_row(r) for r in sorted(authz.roles.values(), key=lambda r: r.oid)]
    return rows


def roles_rows(authz: acl.Authz | None, bootstrap: str) -> Rows:
    """pg_roles: pg_authid with the password masked as PostgreSQL masks it, and the role's own
    settings (ALTER ROLE ... SET, in no particular database)."""
    return [{**row, "rolpassword": "********", "rolconfig": _config(authz, "", row["rolname"])}
            for row in authid_rows(authz, bootstrap)]


def user_rows(authz: acl.Authz | None, bootstrap: str) -> Rows:
    """pg_user: the roles that may log in."""
    return [{"usename": r["rolname"], "usesysid": r["oid"], "usecreatedb": r["rolcreatedb"],
             "usesuper": r["rolsuper"], "userepl": r["rolreplication"], "usebypassrls": r["rolbypassrls"],
             "passwd": "********", "valuntil": r["rolvaliduntil"], "useconfig": r["rolconfig"]}
            for r in roles_rows(authz, bootstrap) if r["rolcanlogin"]]


def db_role_setting_rows(authz: acl.Authz | None, database_oid: int) -> Rows:
    """pg_db_role_setting: ALTER ROLE / ALTER DATABASE ... SET (0: every database or role)."""
    if authz is None:
        return []
    return [{"setdatabase": database_oid if db else 0, "setrole": role_oid(authz, role) if role else 0,
             "setconfig": list(entries)} for (db, role), entries in sorted(authz.settings.items())]


def _config(authz: acl.Authz | None, database: str, role: str) -> list[str] | None:
    entries = authz.settings.get((database, role)) if authz is not None else None
    return list(entries) if entries else None


def role_oid(authz: acl.Authz | None, name: str) -> int:
    role = authz.role(name) if authz is not None else None
    return role.oid if role is not None else BOOTSTRAP_OID


def auth_member_rows(authz: acl.Authz | None) -> Rows:
    if authz is None:
        return []
    return [{"roleid": role_oid(authz, m.role), "member": role_oid(authz, m.member),
             "grantor": role_oid(authz, m.grantor), "admin_option": m.admin}
            for m in sorted(authz.members, key=lambda m: (m.role, m.member))]


def owner_oid(authz: acl.Authz | None, obj: acl.ObjectKey) -> int:
    return BOOTSTRAP_OID if authz is None else role_oid(authz, authz.owner(obj))


def view_options(authz: acl.Authz | None, schema: str, name: str) -> list[str] | None:
    """A view's pg_class.reloptions: the one option kept, security_invoker (CREATE / ALTER VIEW)."""
    return ["security_invoker=true"] if authz is not None and ("table", schema, name) in authz.invokers else None


def owner_name(authz: acl.Authz | None, obj: acl.ObjectKey, bootstrap: str) -> str:
    """The owner's name as pg_tables and pg_views show it (the bootstrap superuser by its name)."""
    owner = acl.BOOTSTRAP if authz is None else authz.owner(obj)
    return bootstrap if owner == acl.BOOTSTRAP else owner


def _acl_text(authz: acl.Authz, items: tuple[acl.AclItem, ...], bootstrap: str) -> list[str]:
    def shown(name: str) -> str:
        return bootstrap if name == acl.BOOTSTRAP else name

    return [acl.AclItem(shown(i.grantee) if i.grantee else "", shown(i.grantor), i.privs, i.options).text()
            for i in items]


def relacl(authz: acl.Authz | None, schema: str, name: str, bootstrap: str) -> list[str] | None:
    """pg_class.relacl: NULL while the default ACL is in force, as in PostgreSQL."""
    items = authz.explicit_acl(("table", schema, name)) if authz is not None else None
    return None if items is None else _acl_text(authz, items, bootstrap)


def nspacl(authz: acl.Authz | None, schema: str, bootstrap: str) -> list[str] | None:
    items = authz.explicit_acl(("schema", schema)) if authz is not None else None
    return None if items is None else _acl_text(authz, items, bootstrap)


def name_of(authz: acl.Authz | None, oid: int) -> str | None:
    """The role with OID `oid` (None for the bootstrap superuser and unknown OIDs)."""
    if authz is None:
        return None
    return next((r.name for r in authz.roles.values() if r.oid == oid), None)


_PRIVILEGE_TYPES = {"r": "SELECT", "a": "INSERT", "w": "UPDATE", "d": "DELETE", "D": "TRUNCATE",
                    "x": "REFERENCES", "t": "TRIGGER"}


def table_privilege_rows(authz: acl.Authz | None, bootstrap: str, database: str,
                         relations: list[tuple[str, str]]) -> Rows:
    """information_schema.table_privileges of the lake's tables and views: one row per privilege
    of each ACL entry, the default ACL's where none is recorded (aclexplode(coalesce(relacl,
    acldefault(...))), as PostgreSQL's view reads it). Which rows a role sees is the statement's
    business (rewrite/visibility.py)."""
    authz = authz or acl.EMPTY

    def shown(name: str) -> str:
        return bootstrap if name == acl.BOOTSTRAP else (name or "PUBLIC")

    rows = []
    for schema, name in sorted(relations):
        key = ("table", schema, name)
        owner = authz.owner(key)
        for item in authz.acl(key):
            for letter in item.privs:
                if letter not in _PRIVILEGE_TYPES:
                    continue
                grantable = letter in item.options or item.grantee == owner
                rows.append({"grantor": shown(item.grantor), "grantee": shown(item.grantee),
                             "table_catalog": database, "table_schema": schema, "table_name": name,
                             "privilege_type": _PRIVILEGE_TYPES[letter],
                             "is_grantable": "YES" if grantable else "NO",
                             "with_hierarchy": "YES" if letter == "r" else "NO"})
    return rows


_COLUMN_PRIVILEGE_TYPES = {"r": "SELECT", "a": "INSERT", "w": "UPDATE", "x": "REFERENCES"}


def column_privilege_rows(authz: acl.Authz | None, bootstrap: str, database: str,
                          relations: list[tuple[str, str, list[str]]]) -> Rows:
    """information_schema.column_privileges of the lake's tables and views ((schema, name,
    columns)): as PostgreSQL's view, each column gets the SELECT, INSERT, UPDATE and REFERENCES
    of its table's ACL (the default one where none is recorded) and those granted on the column
    itself, one row per distinct (grantor, grantee, column, privilege)."""
    authz = authz or acl.EMPTY

    def shown(name: str) -> str:
        return bootstrap if name == acl.BOOTSTRAP else (name or "PUBLIC")

    rows = []
    for schema, name, columns in sorted(relations):
        key = ("table", schema, name)
        owner = authz.owner(key)
        table_items = [(i, letter) for i in authz.acl(key) for letter in i.privs if letter in _COLUMN_PRIVILEGE_TYPES]
        for column in columns:
            seen: dict[tuple[str, str, str], bool] = {}
            own = [(i, letter) for i in authz.acl(("column", schema, name, column)) for letter in i.privs
                   if letter in _COLUMN_PRIVILEGE_TYPES]
            for item, letter in table_items + own:
                at = (item.grantor, item.grantee, letter)
                seen[at] = seen.get(at, False) or letter in item.options or item.grantee == owner
            for (grantor, grantee, letter), grantable in seen.items():
                rows.append({"grantor": shown(grantor), "grantee": shown(grantee), "table_catalog": database,
                             "table_schema": schema, "table_name": name, "column_name": column,
                             "privilege_type": _COLUMN_PRIVILEGE_TYPES[letter],
                             "is_grantable": "YES" if grantable else "NO"})
    return rows


_POLICY_COMMANDS = {"all": "*", "select": "r", "insert": "a", "update": "w", "delete": "d"}
_POLICY_OID_BASE = 2_000_000_000  # policies have no OIDs of their own in the lake: stable by position


def row_security_flags(authz: acl.Authz | None, schema: str, name: str) -> dict[str, bool]:
    state = authz.rls.get(("table", schema, name)) if authz is not None else None
    return {"relrowsecurity": state in ("enabled", "forced"), "relforcerowsecurity": state in ("forced", "forced-off")}


def policy_rows(authz: acl.Authz | None, relation_oids: dict[tuple[str, str], int]) -> Rows:
    """pg_policy: polqual / polwithcheck hold the expressions' text (pg_get_expr gives it back)."""
    if authz is None:
        return []
    rows = []
    for i, p in enumerate(authz.policies):
        oid = relation_oids.get((p.table[1], p.table[2]))
        if oid is None:
            continue
        roles = [0 if r == acl.PUBLIC else role_oid(authz, r) for r in p.roles]
        rows.append({"oid": _POLICY_OID_BASE + i, "polname": p.name, "polrelid": oid,
                     "polcmd": _POLICY_COMMANDS[p.command], "polpermissive": p.permissive,
                     "polroles": roles, "polqual": p.using, "polwithcheck": p.check})
    return rows


def default_acl_rows(authz: acl.Authz | None, bootstrap: str, namespace_oids: dict[str, int]) -> Rows:
    """pg_default_acl (psql's \\ddp): one row per (role, schema) of ALTER DEFAULT PRIVILEGES."""
    if authz is None:
        return []
    rows = []
    for i, ((role, schema), items) in enumerate(sorted(authz.default_acls.items())):
        shown = [acl.AclItem(x.grantee, role, x.privs, x.options) for x in items]
        rows.append({"oid": _POLICY_OID_BASE - 1 - i, "defaclrole": role_oid(authz, role),
                     "defaclnamespace": namespace_oids.get(schema, 0) if schema else 0,
                     "defaclobjtype": "r", "defaclacl": _acl_text(authz, tuple(shown), bootstrap)})
    return rows


def attacl(authz: acl.Authz | None, schema: str, table: str, column: str, bootstrap: str) -> list[str] | None:
    """pg_attribute.attacl: the privileges granted on the column itself (NULL: none)."""
    items = authz.explicit_acl(("column", schema, table, column)) if authz is not None else None
    return None if not items else _acl_text(authz, items, bootstrap)
