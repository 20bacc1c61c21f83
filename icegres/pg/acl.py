"""PostgreSQL's authorization model as data: roles, memberships, ACLs and owners, and the checks.

One `Authz` value is the whole authorization state of a lakehouse (every icegres server of a
catalog shares it through engine/acl_store.py, which swaps its JSON by compare-and-swap). It is
immutable: every change is a pure function from one `Authz` to the next (`create_role`,
`grant`, ...), raising PgError with PostgreSQL's SQLSTATE and message where PostgreSQL refuses,
so a refused change writes nothing and a retried one applies to whatever state won the race.

The model is PostgreSQL's, kept as small as its behaviour allows:
- An object's ACL is PostgreSQL's aclitem list. `None` (no entry in `acls`) is the default ACL
  (acldefault(): the owner holds everything on its tables and schemas), materialised on the
  first GRANT or REVOKE exactly as PostgreSQL materialises it, so `relacl` reads the same.
- Privileges are aclitem's letters: r SELECT, a INSERT, w UPDATE, d DELETE, D TRUNCATE,
  x REFERENCES, t TRIGGER on tables; U USAGE, C CREATE on schemas.
- The bootstrap superusers are not rows here: they are the users the server is configured with
  (`Principal.configured`), as before roles existed, so that an upgraded deployment keeps
  working; objects with no recorded owner belong to them (shown as `BOOTSTRAP`).
- Objects are keyed by name (`("table", schema, name)`, `("schema", name)`): an Iceberg table has
  no OID, and a rename moves its entries (`renamed`).
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field, replace
from datetime import datetime
from typing import Any

from icegres.pg import errors as E
from icegres.pg.errors import PgError

__all__ = [
    "ALL_SCHEMA", "ALL_TABLE", "Authz", "AclItem", "BOOTSTRAP", "EMPTY", "Membership", "PUBLIC",
    "Principal", "Role", "from_json", "to_json",
]

PUBLIC = ""  # the grantee PUBLIC, as aclitem writes it (an empty name)
BOOTSTRAP = "icegres"  # owner of every object no role has been recorded as owning
BOOTSTRAP_OID = 10
FIRST_ROLE_OID = 16384  # FirstNormalObjectId: where PostgreSQL's own roles' OIDs start

ALL_TABLE = "arwdDxt"
ALL_SCHEMA = "UC"
PRIVILEGE_LETTERS = {
    "SELECT": "r", "INSERT": "a", "UPDATE": "w", "DELETE": "d", "TRUNCATE": "D",
    "REFERENCES": "x", "TRIGGER": "t", "USAGE": "U", "CREATE": "C",
}
_RESERVED = ("pg_", )
_RESERVED_NAMES = {"public", "current_role", "current_user", "session_user", "none"}

ObjectKey = tuple[str, ...]  # ("table", schema, name) | ("schema", name) | ("column", schema, table, column)


@dataclass(frozen=True)
class Role:
    name: str
    oid: int
    superuser: bool = False
    login: bool = False
    inherit: bool = True
    createrole: bool = False
    createdb: bool = False
    bypassrls: bool = False
    connlimit: int = -1
    password: str | None = None  # a SCRAM-SHA-256 verifier, never a password
    valid_until: str | None = None


def expired(valid_until: str | None, now: datetime) -> bool:
    """Whether a password VALID UNTIL `valid_until` (as stored: an ISO 8601 instant, or
    'infinity' / '-infinity') has expired at `now` (an aware datetime)."""
    if valid_until is None or valid_until == "infinity":
        return False
    if valid_until == "-infinity":
        return True
    return datetime.fromisoformat(valid_until) < now


@dataclass(frozen=True)
class Membership:
    role: str  # the role granted
    member: str  # to whom
    admin: bool = False
    grantor: str = BOOTSTRAP


@dataclass(frozen=True)
class AclItem:
    grantee: str  # PUBLIC is ""
    grantor: str
    privs: str  # letters, in ALL_TABLE / ALL_SCHEMA order
    options: str = ""  # the letters held WITH GRANT OPTION

    def text(self) -> str:
        """aclitemout: `grantee=privs/grantor`, a `*` after each letter held with grant option."""
        letters = "".join(p + ("*" if p in self.options else "") for p in self.privs)
        return f"{_quoted(self.grantee)}={letters}/{_quoted(self.grantor)}"


def _quoted(name: str) -> str:
    if name and not all(c.isalnum() or c == "_" for c in name):
        return '"' + name.replace('"', '""') + '"'
    return name


def _ordered(letters: Iterable[str], alphabet: str) -> str:
    got = set(letters)
    return "".join(c for c in alphabet if c in got)


@dataclass(frozen=True)
class Policy:
    """CREATE POLICY: `using` and `check` are SQL expression texts over the table's columns."""

    name: str
    table: ObjectKey
    permissive: bool = True
    command: str = "all"  # all | select | insert | update | delete
    roles: tuple[str, ...] = (PUBLIC,)
    using: str | None = None
    check: str | None = None


@dataclass(frozen=True)
class Mask:
    """CREATE MASK: what `roles` see of `column` instead of its value (`expression`, SQL over
    the table's columns: `'***'`, `md5(email)`, `NULL`, `left(phone, 3) || '-***'`)."""

    name: str
    table: ObjectKey
    column: str
    expression: str
    roles: tuple[str, ...] = (PUBLIC,)


@dataclass(frozen=True)
class Principal:
    """Who a session acts as: `user` (current_user) and whether the server's configuration makes
    it a bootstrap superuser (`configured`)."""

    user: str
    configured: bool = False


@dataclass(frozen=True)
class Authz:
    roles: Mapping[str, Role] = field(default_factory=dict)
    members: frozenset[Membership] = frozenset()
    acls: Mapping[ObjectKey, tuple[AclItem, ...]] = field(default_factory=dict)
    owners: Mapping[ObjectKey, str] = field(default_factory=dict)
    next_oid: int = FIRST_ROLE_OID
    # Row-level security: a table's state ("enabled" or "forced"; absent: off) and its policies.
    rls: Mapping[ObjectKey, str] = field(default_factory=dict)
    policies: tuple[Policy, ...] = ()
    masks: tuple[Mask, ...] = ()
    # ALTER DEFAULT PRIVILEGES: (creating role, schema or "" for every schema) -> the entries its
    # new tables' ACLs get (the grantor written as "" for the new table's owner).
    default_acls: Mapping[tuple[str, str], tuple[AclItem, ...]] = field(default_factory=dict)
    # Views made WITH (security_invoker): read with the reader's privileges and policies.
    invokers: frozenset[ObjectKey] = frozenset()
    # ALTER ROLE / ALTER DATABASE ... SET (pg_db_role_setting): (database, role) -> the
    # `name=value` entries a session of that role in that database starts with; "" is any.
    settings: Mapping[tuple[str, str], tuple[str, ...]] = field(default_factory=dict)

    # --- reading ------------------------------------------------------------------------------

    def role(self, name: str) -> Role | None:
        return self.roles.get(name)

    def is_superuser(self, who: Principal) -> bool:
        role = self.roles.get(who.user)
        if role is not None:
            return role.superuser
        return who.configured

    def owner(self, obj: ObjectKey) -> str:
        if obj[0] == "column":  # a column's owner is its table's
            obj = ("table", obj[1], obj[2])
        return self.owners.get(obj, BOOTSTRAP)

    def acl(self, obj: ObjectKey) -> tuple[AclItem, ...]:
        """The object's ACL, the default one (the owner holds everything) where none is recorded."""
        got = self.acls.get(obj)
        if got is not None:
            return got
        if obj[0] == "column":
            return ()  # a column's privileges are only those granted on it (attacl NULL)
        owner = self.owner(obj)
        alphabet = ALL_SCHEMA if obj[0] == "schema" else ALL_TABLE
        if obj == ("schema", "public"):
            # As PostgreSQL 15's initdb leaves it: USAGE for everyone, CREATE for its owner only.
            return (AclItem(owner, owner, alphabet), AclItem(PUBLIC, owner, "U"))
        return (AclItem(owner, owner, alphabet),)

    def explicit_acl(self, obj: ObjectKey) -> tuple[AclItem, ...] | None:
        """relacl / nspacl: None while the default ACL is in force."""
        return self.acls.get(obj)

    def privileged_roles(self, who: Principal) -> set[str]:
        """The roles whose privileges `who` has: itself, the roles it inherits (transitively,
        through members that inherit), PUBLIC; a configured superuser is also BOOTSTRAP."""
        got = {who.user, PUBLIC}
        if who.configured and who.user not in self.roles:
            got.add(BOOTSTRAP)
        frontier = [who.user]
        while frontier:
            member = frontier.pop()
            role = self.roles.get(member)
            if role is not None and not role.inherit:
                continue
            for m in self.members:
                if m.member == member and m.role not in got:
                    got.add(m.role)
                    frontier.append(m.role)
        return got

    def member_roles(self, name: str) -> set[str]:
        """Every role `name` is a member of, directly or not, inheriting or not, and itself:
        what SET ROLE may switch to."""
        got = {name}
        frontier = [name]
        while frontier:
            member = frontier.pop()
            for m in self.members:
                if m.member == member and m.role not in got:
                    got.add(m.role)
                    frontier.append(m.role)
        return got

    def has(self, who: Principal, obj: ObjectKey, letter: str) -> bool:
        if self.is_superuser(who):
            return True
        mine = self.privileged_roles(who)
        return any(item.grantee in mine and letter in item.privs for item in self.acl(obj))

    def column_grants(self, table: ObjectKey) -> bool:
        """Whether any privilege is granted on a column of `table` (a "table" key)."""
        return any(k[0] == "column" and k[1:3] == table[1:] for k in self.acls)

    def has_columns(self, who: Principal, table: ObjectKey, letter: str, columns: set[str]) -> bool:
        """PostgreSQL's column check where the table privilege is missing: `letter` on every
        column the statement uses, or, using none (count(*)), on at least one column."""
        if columns:
            return all(self.has(who, ("column", table[1], table[2], c), letter) for c in columns)
        return any(k[0] == "column" and k[1:3] == table[1:] and self.has(who, k, letter) for k in self.acls)

    def owns(self, who: Principal, obj: ObjectKey) -> bool:
        return self.is_superuser(who) or self.owner(obj) in self.privileged_roles(who)

    def can_grant(self, who: Principal, obj: ObjectKey, letter: str) -> bool:
        if self.owns(who, obj):
            return True
        mine = self.privileged_roles(who)
        return any(i.grantee in mine and letter in i.options for i in self.acl(obj))

    def role_names(self) -> list[str]:
        return sorted(self.roles)

    def row_filter(self, who: Principal, obj: ObjectKey, command: str) -> str | None:
        """The condition rows of `obj` must meet for `who` to see them in `command` (None: row
        security does not apply). PostgreSQL's rules: superusers, BYPASSRLS roles and the
        owner (unless FORCE) are exempt; the applicable permissive policies' USING are OR-ed,
        the restrictive ones AND-ed onto that; no permissive policy denies every row."""
        return self._combined(who, obj, command, "using")

    def masked_columns(self, who: Principal, obj: ObjectKey) -> dict[str, str]:
        """column -> the expression `who` sees instead of it. Superusers and the table's owner
        see values; of several masks of one column that apply, the first made wins."""
        if self.is_superuser(who) or self.owns(who, obj):
            return {}
        mine = self.privileged_roles(who)
        out: dict[str, str] = {}
        for m in self.masks:
            if m.table == obj and m.column not in out and any(r in mine for r in m.roles):
                out[m.column] = m.expression
        return out

    def row_check(self, who: Principal, obj: ObjectKey, command: str) -> str | None:
        """The condition a new row version of `obj` must meet (WITH CHECK, else USING)."""
        return self._combined(who, obj, command, "check")

    def _combined(self, who: Principal, obj: ObjectKey, command: str, which: str) -> str | None:
        state = self.rls.get(obj)
        if state not in ("enabled", "forced") or self.is_superuser(who):
            return None
        role = self.roles.get(who.user)
        if role is not None and role.bypassrls:
            return None
        if state != "forced" and self.owns(who, obj):
            return None
        mine = self.privileged_roles(who)
        applicable = [p for p in self.policies if p.table == obj and p.command in ("all", command)
                      and any(r in mine for r in p.roles)]

        def text(p: Policy) -> str:
            expr = (p.check or p.using) if which == "check" else p.using
            return f"({expr})" if expr else "true"

        permissive = [text(p) for p in applicable if p.permissive]
        restrictive = [text(p) for p in applicable if not p.permissive]
        if not permissive:
            return "false"
        out = "(" + " OR ".join(permissive) + ")"
        return " AND ".join([out, *restrictive])

    # --- checks that raise PostgreSQL's errors ------------------------------------------------

    def require(self, who: Principal, obj: ObjectKey, letter: str) -> None:
        if not self.has(who, obj, letter):
            raise denied(obj)

    def require_owner(self, who: Principal, obj: ObjectKey, kind: str = "table") -> None:
        if not self.owns(who, obj):
            raise PgError(E.INSUFFICIENT_PRIVILEGE, f"must be owner of {kind} {obj[-1]}")


def denied(obj: ObjectKey) -> PgError:
    kind = "schema" if obj[0] == "schema" else obj[0]
    return PgError(E.INSUFFICIENT_PRIVILEGE, f"permission denied for {kind} {obj[-1]}")


EMPTY = Authz()


# --- roles ---------------------------------------------------------------------------------------


def _check_new_name(name: str) -> None:
    if name.lower() in _RESERVED_NAMES:
        raise PgError(E.RESERVED_NAME, f'role name "{name}" is reserved')
    if name.startswith(_RESERVED):
        raise PgError(E.RESERVED_NAME, f'role name "{name}" is reserved',
                      detail='Role names starting with "pg_" are reserved.')


def _may_manage_roles(authz: Authz, who: Principal, what: str) -> None:
    if authz.is_superuser(who):
        return
    role = authz.roles.get(who.user)
    if role is None or not role.createrole:
        raise PgError(E.INSUFFICIENT_PRIVILEGE, f"permission denied to {what} role")


def _must_exist(authz: Authz, name: str) -> Role:
    role = authz.roles.get(name)
    if role is None:
        raise PgError(E.UNDEFINED_OBJECT, f'role "{name}" does not exist')
    return role


def create_role(authz: Authz, who: Principal, name: str, attrs: Mapping[str, Any],
                configured: frozenset[str] = frozenset(), in_roles: Iterable[str] = (),
                member_roles: Iterable[str] = ()) -> Authz:
    """CREATE ROLE name [WITH attrs] [IN ROLE ...] [ROLE ...]; `configured`: names the server's
    configuration already defines (its bootstrap users), which exist as far as SQL is concerned."""
    _may_manage_roles(authz, who, "create")
    if (attrs.get("superuser") or attrs.get("bypassrls")) and not authz.is_superuser(who):
        what = "superusers" if attrs.get("superuser") else "roles with BYPASSRLS"
        raise PgError(E.INSUFFICIENT_PRIVILEGE, "permission denied to create role",
                      detail=f'Only roles with the SUPERUSER attribute may create {what}.')
    if name in authz.roles or name in configured or name == BOOTSTRAP:
        raise PgError(E.DUPLICATE_OBJECT, f'role "{name}" already exists')
    _check_new_name(name)
    role = Role(name, authz.next_oid, **dict(attrs))
    roles = {**authz.roles, name: role}
    out = replace(authz, roles=roles, next_oid=authz.next_oid + 1)
    for parent in in_roles:
        out = grant_role(out, who, parent, name, admin=False, configured=configured)
    for child in member_roles:
        out = grant_role(out, who, name, child, admin=False, configured=configured)
    return out


def alter_role(authz: Authz, who: Principal, name: str, attrs: Mapping[str, Any]) -> Authz:
    role = _must_exist(authz, name)
    self_password = set(attrs) <= {"password"} and name == who.user
    if not self_password:
        if role.superuser or attrs.get("superuser") or attrs.get("bypassrls"):
            if not authz.is_superuser(who):
                raise PgError(E.INSUFFICIENT_PRIVILEGE, "permission denied to alter role",
                              detail="Only roles with the SUPERUSER attribute may alter roles with the SUPERUSER attribute.")
        _may_manage_roles(authz, who, "alter")
    return replace(authz, roles={**authz.roles, name: replace(role, **dict(attrs))})


def rename_role(authz: Authz, who: Principal, name: str, new: str,
                configured: frozenset[str] = frozenset()) -> Authz:
    role = _must_exist(authz, name)
    if name == who.user:
        raise PgError(E.FEATURE_NOT_SUPPORTED, "session user cannot be renamed")
    _may_manage_roles(authz, who, "rename")
    if new in authz.roles or new in configured or new == BOOTSTRAP:
        raise PgError(E.DUPLICATE_OBJECT, f'role "{new}" already exists')
    _check_new_name(new)
    roles = {k: v for k, v in authz.roles.items() if k != name}
    # A SCRAM verifier does not depend on the role's name: it is kept (PostgreSQL clears MD5 only).
    roles[new] = replace(role, name=new)

    def moved(n: str) -> str:
        return new if n == name else n

    members = frozenset(Membership(moved(m.role), moved(m.member), m.admin, moved(m.grantor)) for m in authz.members)
    acls = {k: tuple(AclItem(moved(i.grantee), moved(i.grantor), i.privs, i.options) for i in v)
            for k, v in authz.acls.items()}
    owners = {k: moved(v) for k, v in authz.owners.items()}
    settings = {(db, moved(role)): v for (db, role), v in authz.settings.items()}
    return replace(authz, roles=roles, members=members, acls=acls, owners=owners, settings=settings)


def drop_role(authz: Authz, who: Principal, name: str) -> Authz:
    role = _must_exist(authz, name)
    if name == who.user:
        raise PgError(E.OBJECT_IN_USE, "current user cannot be dropped")
    if role.superuser and not authz.is_superuser(who):
        raise PgError(E.INSUFFICIENT_PRIVILEGE, "permission denied to drop role",
                      detail="Only roles with the SUPERUSER attribute may drop roles with the SUPERUSER attribute.")
    _may_manage_roles(authz, who, "drop")
    depends = [f"owner of {_describe(k)}" for k, v in sorted(authz.owners.items()) if v == name]
    depends += [f"privileges for {_describe(k)}" for k, items in sorted(authz.acls.items())
                if any(name in (i.grantee, i.grantor) for i in items)]
    depends += [f"privileges for default privileges on new relations belonging to role {role}"
                + (f" in schema {schema}" if schema else "")
                for (role, schema), items in sorted(authz.default_acls.items())
                if role != name and any(i.grantee == name for i in items)]
    depends += [f"owner of default privileges on new relations belonging to role {name}"
                + (f" in schema {schema}" if schema else "")
                for (role, schema), items in sorted(authz.default_acls.items()) if role == name and items]
    if depends:
        raise PgError(E.DEPENDENT_OBJECTS_STILL_EXIST,
                      f'role "{name}" cannot be dropped because some objects depend on it',
                      detail="\n".join(depends))
    roles = {k: v for k, v in authz.roles.items() if k != name}
    members = frozenset(m for m in authz.members if name not in (m.role, m.member))
    defaults = {k: v for k, v in authz.default_acls.items() if k[0] != name}  # (none with entries)
    settings = {k: v for k, v in authz.settings.items() if k[1] != name}  # (DropSetting)
    return replace(authz, roles=roles, members=members, default_acls=defaults, settings=settings)


def set_setting(authz: Authz, who: Principal, role: str, database: str, name: str | None,
                value: str | None, configured: frozenset[str] = frozenset()) -> Authz:
    """ALTER ROLE role|ALL [IN DATABASE database] SET name = value | RESET name | RESET ALL, and
    ALTER DATABASE database SET/RESET (`role` ""): the entry for (database, role) with `name`
    set to `value` (None: removed; `name` None: all removed). Who may, as AlterRoleSet says: a
    superuser; for a role that is none, one with CREATEROLE or the role itself; for every role
    or the database, a superuser (the database's owner)."""
    if role:
        target = authz.roles.get(role)
        if target is None and role not in configured:
            raise PgError(E.UNDEFINED_OBJECT, f'role "{role}" does not exist')
        if not authz.is_superuser(who):
            if target is None or target.superuser:
                raise PgError(E.INSUFFICIENT_PRIVILEGE, "must be superuser to alter superusers")
            mine = authz.roles.get(who.user)
            if role != who.user and (mine is None or not mine.createrole):
                raise PgError(E.INSUFFICIENT_PRIVILEGE, "permission denied")
    elif not authz.is_superuser(who):
        if database:
            raise PgError(E.INSUFFICIENT_PRIVILEGE, f"must be owner of database {database}")
        raise PgError(E.INSUFFICIENT_PRIVILEGE, "must be superuser to alter settings globally")
    key = (database, role)
    kept = [] if name is None else [e for e in authz.settings.get(key, ()) if e.partition("=")[0] != name]
    if name is not None and value is not None:
        kept.append(f"{name}={value}")
    settings = {k: v for k, v in authz.settings.items() if k != key}
    if kept:
        settings[key] = tuple(kept)
    return replace(authz, settings=settings)


def session_settings(authz: Authz, database: str, role: str) -> list[tuple[str, str]]:
    """What a session of `role` in `database` starts with, in the order PostgreSQL applies it
    (process_settings): every database and role, the database, the role, the role in the
    database; a later one wins."""
    out = []
    for key in (("", ""), (database, ""), ("", role), (database, role)):
        out += [(n, v) for n, _, v in (e.partition("=") for e in authz.settings.get(key, ()))]
    return out


def _describe(obj: ObjectKey) -> str:
    if obj[0] == "column":
        return f"column {obj[3]} of table {obj[1]}.{obj[2]}"
    return f"schema {obj[1]}" if obj[0] == "schema" else f"table {obj[1]}.{obj[2]}"


def grant_role(authz: Authz, who: Principal, role: str, member: str, *, admin: bool,
               configured: frozenset[str] = frozenset()) -> Authz:
    _must_exist(authz, role)
    if member not in authz.roles and member not in configured:
        raise PgError(E.UNDEFINED_OBJECT, f'role "{member}" does not exist')
    _may_administer(authz, who, role)
    if member in authz.member_roles(role):
        # A loop, the trivial one (a role in itself) included: AddRoleMems' message.
        raise PgError(E.INVALID_GRANT_OPERATION, f'role "{role}" is a member of role "{member}"')
    kept = frozenset(m for m in authz.members if not (m.role == role and m.member == member))
    old = next((m for m in authz.members if m.role == role and m.member == member), None)
    new = Membership(role, member, admin or (old is not None and old.admin), who.user)
    return replace(authz, members=kept | {new})


def revoke_role(authz: Authz, who: Principal, role: str, member: str, *, admin_only: bool) -> Authz:
    _must_exist(authz, role)
    old = next((m for m in authz.members if m.role == role and m.member == member), None)
    _may_administer(authz, who, role)
    if old is None:
        return authz  # PostgreSQL warns "role ... is not a member of role ..." and succeeds
    kept = authz.members - {old}
    if admin_only:
        kept = kept | {replace(old, admin=False)}
    return replace(authz, members=kept)


def _may_administer(authz: Authz, who: Principal, role: str) -> None:
    """GRANT / REVOKE of membership in `role`: a superuser, a holder of its admin option, or a
    CREATEROLE role (PostgreSQL 15), never of a superuser role but by a superuser."""
    if authz.is_superuser(who):
        return
    mine = authz.member_roles(who.user)
    holds_admin = any(m.role == role and m.member in mine and m.admin for m in authz.members)
    creates = authz.roles.get(who.user) is not None and authz.roles[who.user].createrole
    if authz.roles[role].superuser or not (holds_admin or creates):
        raise PgError(E.INSUFFICIENT_PRIVILEGE, f'must have admin option on role "{role}"')


def is_member(authz: Authz, role: str, member: str) -> bool:
    return any(m.role == role and m.member == member for m in authz.members)


# --- object privileges ---------------------------------------------------------------------------


def grant(authz: Authz, who: Principal, objects: Iterable[ObjectKey], letters: str,
          grantees: Iterable[str], *, grant_option: bool) -> tuple[Authz, list[str]]:
    """GRANT letters ON objects TO grantees: the new state and PostgreSQL's warnings (a grantor
    holding some of the privileges with grant option but not all)."""
    warnings: list[str] = []
    out = authz
    for obj in objects:
        grantor, grantable = _grantable(out, who, obj, letters)
        if not grantable:
            warnings.append(f'no privileges were granted for "{obj[-1]}"')
            continue
        if len(grantable) < len(letters):
            warnings.append(f'not all privileges were granted for "{obj[-1]}"')
        items = list(out.acl(obj))
        for grantee in grantees:
            at = next((n for n, i in enumerate(items) if i.grantee == grantee and i.grantor == grantor), None)
            alphabet = ALL_SCHEMA if obj[0] == "schema" else ALL_TABLE
            if at is None:
                items.append(AclItem(grantee, grantor, _ordered(grantable, alphabet),
                                     _ordered(grantable, alphabet) if grant_option else ""))
            else:
                i = items[at]
                items[at] = AclItem(grantee, grantor, _ordered(i.privs + grantable, alphabet),
                                    _ordered(i.options + (grantable if grant_option else ""), alphabet))
        out = replace(out, acls={**out.acls, obj: tuple(items)})
    return out, warnings


def revoke(authz: Authz, who: Principal, objects: Iterable[ObjectKey], letters: str,
           grantees: Iterable[str], *, grant_option_only: bool, cascade: bool = False) -> tuple[Authz, list[str]]:
    warnings: list[str] = []
    out = authz
    targets = set(grantees)
    for obj in objects:
        grantor, grantable = _grantable(out, who, obj, letters)
        if not grantable:
            warnings.append(f'no privileges could be revoked for "{obj[-1]}"')
            continue
        if len(grantable) < len(letters):
            warnings.append(f'not all privileges could be revoked for "{obj[-1]}"')
        items = []
        for i in out.acl(obj):
            if i.grantee in targets and i.grantor == grantor:
                options = "".join(c for c in i.options if c not in grantable)
                privs = i.privs if grant_option_only else "".join(c for c in i.privs if c not in grantable)
                dependent = [d for d in out.acl(obj) if d.grantor == i.grantee and set(d.privs) & (set(i.options) - set(options))]
                if dependent and not cascade:
                    raise PgError(E.DEPENDENT_OBJECTS_STILL_EXIST, "dependent privileges exist",
                                  hint="Use CASCADE to revoke them too.")
                if privs:
                    items.append(AclItem(i.grantee, i.grantor, privs, options))
            else:
                items.append(i)
        if cascade:
            revoked = {i.grantee for i in out.acl(obj) if i.grantee in targets}
            items = [i for i in items if i.grantor not in revoked or i.grantor == grantor]
        out = replace(out, acls={**out.acls, obj: tuple(items)})
    return out, warnings


def _grantable(authz: Authz, who: Principal, obj: ObjectKey, letters: str) -> tuple[str, str]:
    """(grantor, the letters it may grant): the owner grants as the owner (a superuser too, as
    PostgreSQL does); others what they hold with grant option. Nothing held at all is 42501."""
    if authz.owns(who, obj):
        return authz.owner(obj), letters
    mine = authz.privileged_roles(who)
    held = {c for i in authz.acl(obj) if i.grantee in mine for c in i.options}
    if not any(i.grantee in mine and i.privs for i in authz.acl(obj)):
        raise denied(obj)
    return who.user, "".join(c for c in letters if c in held)


def set_owner(authz: Authz, who: Principal, obj: ObjectKey, new_owner: str,
              configured: frozenset[str] = frozenset(), kind: str = "table") -> Authz:
    """ALTER ... OWNER TO: the owner (a member of the new owner) or a superuser; the ACL's
    entries of the old owner pass to the new one, as aclnewowner() does."""
    if new_owner not in authz.roles and new_owner not in configured:
        raise PgError(E.UNDEFINED_OBJECT, f'role "{new_owner}" does not exist')
    if not authz.is_superuser(who):
        authz.require_owner(who, obj, kind)
        if new_owner not in authz.member_roles(who.user):
            raise PgError(E.INSUFFICIENT_PRIVILEGE, f'must be able to SET ROLE "{new_owner}"')
    stored = BOOTSTRAP if new_owner in configured and new_owner not in authz.roles else new_owner
    old = authz.owner(obj)
    acls = dict(authz.acls)
    if obj in acls:
        acls[obj] = tuple(AclItem(stored if i.grantee == old else i.grantee,
                                  stored if i.grantor == old else i.grantor, i.privs, i.options)
                          for i in acls[obj])
    owners = {k: v for k, v in authz.owners.items() if k != obj}
    if stored != BOOTSTRAP:
        owners[obj] = stored
    return replace(authz, owners=owners, acls=acls)


def owned_roles_checked(authz: Authz, who: Principal, names: Iterable[str], what: str,
                         configured: frozenset[str]) -> None:
    """REASSIGN / DROP OWNED: every role named exists (42704) and `who` has its privileges
    (42501), as shdepReassignOwned / DropOwnedObjects check."""
    for name in names:
        if name not in authz.roles and name not in configured and name != BOOTSTRAP:
            raise PgError(E.UNDEFINED_OBJECT, f'role "{name}" does not exist')
    if not authz.is_superuser(who):
        mine = authz.privileged_roles(who)
        if any(name not in mine for name in names):
            raise PgError(E.INSUFFICIENT_PRIVILEGE, f"permission denied to {what} objects")


def _pinned(authz: Authz, name: str, configured: frozenset[str]) -> bool:
    """The bootstrap superuser (and a configured user, whose objects it owns): what PostgreSQL
    calls a role required by the database system."""
    return name == BOOTSTRAP or (name in configured and name not in authz.roles)


def reassign_owned(authz: Authz, who: Principal, olds: Iterable[str], new: str,
                   configured: frozenset[str] = frozenset()) -> Authz:
    """REASSIGN OWNED BY olds TO new: every object a role of `olds` owns passes to `new`, its
    ACL with it (as ALTER ... OWNER TO does). Default privileges stay (DROP OWNED's)."""
    olds = tuple(olds)
    owned_roles_checked(authz, who, (*olds, new), "reassign", configured)
    for old in olds:
        if _pinned(authz, old, configured):
            raise PgError(E.DEPENDENT_OBJECTS_STILL_EXIST,
                          f"cannot reassign ownership of objects owned by role {old} because they are "
                          "required by the database system")
    system = Principal(BOOTSTRAP, True)
    for obj, owner in sorted(authz.owners.items()):
        if owner in olds:
            authz = set_owner(authz, system, obj, new, configured)
    return authz


def drop_owned(authz: Authz, who: Principal, names: Iterable[str], configured: frozenset[str] = frozenset()) -> Authz:
    """DROP OWNED BY names, once the objects they own are dropped (engine/drop_owned.py): every
    privilege granted to them (and by them, which rested on their grant options) revoked, their
    default privileges dropped, and they taken off every policy and mask (one left for no role
    is dropped), as shdepDropOwned does."""
    names = tuple(names)
    owned_roles_checked(authz, who, names, "drop", configured)
    for name in names:
        if _pinned(authz, name, configured):
            raise PgError(E.DEPENDENT_OBJECTS_STILL_EXIST,
                          f"cannot drop objects owned by role {name} because they are required by the database system")
    gone = set(names)
    # (what they owned was dropped before this, engine/drop_owned.py; an entry left names an
    # object no longer there)
    authz = replace(authz, owners={k: v for k, v in authz.owners.items() if v not in gone})
    acls = {}
    for obj, items in authz.acls.items():
        kept = tuple(i for i in items if i.grantee not in gone and i.grantor not in gone)
        acls[obj] = kept
    default_acls = {k: tuple(i for i in v if i.grantee not in gone) for k, v in authz.default_acls.items()
                    if k[0] not in gone}
    policies = tuple(replace(p, roles=tuple(r for r in p.roles if r not in gone)) for p in authz.policies)
    masks = tuple(replace(m, roles=tuple(r for r in m.roles if r not in gone)) for m in authz.masks)
    return replace(authz, acls=acls, default_acls={k: v for k, v in default_acls.items() if v},
                   policies=tuple(p for p in policies if p.roles), masks=tuple(m for m in masks if m.roles))


def owned_by(authz: Authz, names: Iterable[str]) -> list[ObjectKey]:
    """The objects the roles `names` own."""
    gone = set(names)
    return [obj for obj, owner in sorted(authz.owners.items()) if owner in gone]


def created(authz: Authz, who: Principal, obj: ObjectKey) -> Authz:
    """A new object: owned by its creator (a configured superuser's objects by BOOTSTRAP), with
    no ACL entries of a dropped namesake left behind, and the creator's default privileges
    (ALTER DEFAULT PRIVILEGES: for every schema, then for the object's) in its ACL."""
    out = dropped(authz, obj)
    if who.user in authz.roles:
        out = replace(out, owners={**out.owners, obj: who.user})
    defaults = [*authz.default_acls.get((who.user, ""), ()), *authz.default_acls.get((who.user, obj[1]), ())]
    if not defaults or obj[0] != "table":
        return out
    owner = out.owner(obj)
    items = list(out.acl(obj))
    for d in defaults:
        entry = AclItem(d.grantee, owner, d.privs, d.options)
        at = next((n for n, i in enumerate(items) if i.grantee == entry.grantee and i.grantor == owner), None)
        if at is None:
            items.append(entry)
        else:
            i = items[at]
            items[at] = AclItem(i.grantee, owner, _ordered(i.privs + entry.privs, ALL_TABLE),
                                _ordered(i.options + entry.options, ALL_TABLE))
    return replace(out, acls={**out.acls, obj: tuple(items)})


def alter_default_privileges(authz: Authz, who: Principal, roles: Iterable[str], schemas: Iterable[str],
                             letters: str, grantees: Iterable[str], *, revoke: bool,
                             grant_option: bool, configured: frozenset[str] = frozenset()) -> Authz:
    """ALTER DEFAULT PRIVILEGES [FOR ROLE r] [IN SCHEMA s] GRANT | REVOKE ... ON TABLES: only a
    member of `r` (or a superuser) changes r's defaults."""
    defaults = dict(authz.default_acls)
    for role in roles:
        if role not in authz.roles and role not in configured and role != BOOTSTRAP:
            raise PgError(E.UNDEFINED_OBJECT, f'role "{role}" does not exist')
        if not authz.is_superuser(who) and role not in authz.member_roles(who.user):
            raise PgError(E.INSUFFICIENT_PRIVILEGE, 'permission denied to change default privileges')
        for schema in schemas:
            items = list(defaults.get((role, schema), ()))
            for grantee in grantees:
                at = next((n for n, i in enumerate(items) if i.grantee == grantee), None)
                old = items[at] if at is not None else AclItem(grantee, "", "", "")
                if revoke:
                    options = "".join(c for c in old.options if c not in letters)
                    privs = old.privs if grant_option else "".join(c for c in old.privs if c not in letters)
                    new = AclItem(grantee, "", privs, options)
                else:
                    new = AclItem(grantee, "", _ordered(old.privs + letters, ALL_TABLE),
                                  _ordered(old.options + (letters if grant_option else ""), ALL_TABLE))
                if at is None:
                    items.append(new)
                else:
                    items[at] = new
            items = [i for i in items if i.privs]
            if items:
                defaults[(role, schema)] = tuple(items)
            else:
                defaults.pop((role, schema), None)
    return replace(authz, default_acls=defaults)


def dropped(authz: Authz, obj: ObjectKey) -> Authz:
    if obj[0] == "schema" and any(k[1] == obj[1] for k in authz.default_acls):
        # A schema's default privileges (ALTER DEFAULT PRIVILEGES IN SCHEMA) go with it.
        authz = replace(authz, default_acls={k: v for k, v in authz.default_acls.items() if k[1] != obj[1]})
    if obj[0] == "table" and any(k[0] == "column" and k[1:3] == obj[1:] for k in authz.acls):
        authz = replace(authz, acls={k: v for k, v in authz.acls.items() if not (k[0] == "column" and k[1:3] == obj[1:])})
    if obj not in authz.acls and obj not in authz.owners and obj not in authz.rls \
            and obj not in authz.invokers and not any(p.table == obj for p in (*authz.policies, *authz.masks)):
        return authz
    return replace(authz, acls={k: v for k, v in authz.acls.items() if k != obj},
                   owners={k: v for k, v in authz.owners.items() if k != obj},
                   rls={k: v for k, v in authz.rls.items() if k != obj},
                   policies=tuple(p for p in authz.policies if p.table != obj),
                   masks=tuple(m for m in authz.masks if m.table != obj),
                   invokers=authz.invokers - {obj})


def renamed(authz: Authz, old: ObjectKey, new: ObjectKey) -> Authz:
    if dropped(authz, old) == authz:
        return authz
    acls = {(new if k == old else ("column", *new[1:], k[3]) if k[0] == "column" and k[1:3] == old[1:] else k): v
            for k, v in authz.acls.items()}
    owners = {(new if k == old else k): v for k, v in authz.owners.items()}
    rls = {(new if k == old else k): v for k, v in authz.rls.items()}
    policies = tuple(replace(p, table=new) if p.table == old else p for p in authz.policies)
    masks = tuple(replace(m, table=new) if m.table == old else m for m in authz.masks)
    invokers = (authz.invokers - {old}) | {new} if old in authz.invokers else authz.invokers
    defaults = authz.default_acls if old[0] != "schema" else {
        ((role, new[1]) if schema == old[1] else (role, schema)): v for (role, schema), v in authz.default_acls.items()}
    return replace(authz, acls=acls, owners=owners, rls=rls, policies=policies, masks=masks, invokers=invokers,
                   default_acls=defaults)


# --- the stored form -----------------------------------------------------------------------------


def to_json(authz: Authz) -> str:
    return json.dumps({
        "format": 1,
        "next_oid": authz.next_oid,
        "roles": [{k: v for k, v in vars(r).items()} for r in sorted(authz.roles.values(), key=lambda r: r.oid)],
        "members": sorted([m.role, m.member, m.admin, m.grantor] for m in authz.members),
        "acls": [[list(k), [[i.grantee, i.grantor, i.privs, i.options] for i in v]]
                 for k, v in sorted(authz.acls.items())],
        "owners": [[list(k), v] for k, v in sorted(authz.owners.items())],
        "rls": [[list(k), v] for k, v in sorted(authz.rls.items())],
        "policies": [[p.name, list(p.table), p.permissive, p.command, list(p.roles), p.using, p.check]
                     for p in authz.policies],
        "masks": [[m.name, list(m.table), m.column, m.expression, list(m.roles)] for m in authz.masks],
        "default_acls": [[list(k), [[i.grantee, i.grantor, i.privs, i.options] for i in v]]
                         for k, v in sorted(authz.default_acls.items())],
        "invokers": sorted(list(k) for k in authz.invokers),
        "settings": [[list(k), list(v)] for k, v in sorted(authz.settings.items())],
    }, sort_keys=True, separators=(",", ":"))


def from_json(text: str) -> Authz:
    if not text:
        return EMPTY
    doc = json.loads(text)
    if doc.get("format") != 1:
        raise PgError(E.INTERNAL_ERROR, f"unknown authorization document format {doc.get('format')!r}")
    return Authz(
        roles={r["name"]: Role(**r) for r in doc["roles"]},
        members=frozenset(Membership(*m) for m in doc["members"]),
        acls={tuple(k): tuple(AclItem(*i) for i in v) for k, v in doc["acls"]},
        owners={tuple(k): v for k, v in doc["owners"]},
        next_oid=doc["next_oid"],
        rls={tuple(k): v for k, v in doc.get("rls", [])},
        policies=tuple(Policy(n, tuple(t), pm, c, tuple(r), u, ch) for n, t, pm, c, r, u, ch in doc.get("policies", [])),
        masks=tuple(Mask(n, tuple(t), c, e, tuple(r)) for n, t, c, e, r in doc.get("masks", [])),
        default_acls={tuple(k): tuple(AclItem(*i) for i in v) for k, v in doc.get("default_acls", [])},
        invokers=frozenset(tuple(k) for k in doc.get("invokers", [])),
        settings={tuple(k): tuple(v) for k, v in doc.get("settings", [])},  # type: ignore[misc]
    )


# --- row-level security --------------------------------------------------------------------------


def set_row_security(authz: Authz, who: Principal, obj: ObjectKey, *, enable: bool | None = None,
                     force: bool | None = None) -> Authz:
    """ALTER TABLE ... ENABLE / DISABLE / FORCE / NO FORCE ROW LEVEL SECURITY (the owner's)."""
    authz.require_owner(who, obj)
    state = authz.rls.get(obj)
    enabled = state is not None if enable is None else enable
    forced = state == "forced" if force is None else force
    rls = {k: v for k, v in authz.rls.items() if k != obj}
    if enabled:
        rls[obj] = "forced" if forced else "enabled"
    elif forced:
        rls[obj] = "forced-off"  # FORCE remembered while RLS is off, as relforcerowsecurity is
    return replace(authz, rls=rls)


def _policy_named(authz: Authz, obj: ObjectKey, name: str) -> Policy | None:
    return next((p for p in authz.policies if p.table == obj and p.name == name), None)


def create_policy(authz: Authz, who: Principal, policy: Policy) -> Authz:
    authz.require_owner(who, policy.table, "relation")  # (PostgreSQL names it so for policies)
    if _policy_named(authz, policy.table, policy.name) is not None:
        raise PgError(E.DUPLICATE_OBJECT, f'policy "{policy.name}" for table "{policy.table[-1]}" already exists')
    for role in policy.roles:
        if role != PUBLIC and role not in authz.roles and role != BOOTSTRAP:
            raise PgError(E.UNDEFINED_OBJECT, f'role "{role}" does not exist')
    return replace(authz, policies=(*authz.policies, policy))


def alter_policy(authz: Authz, who: Principal, obj: ObjectKey, policy_name: str, **changes: Any) -> Authz:
    authz.require_owner(who, obj, "relation")  # (PostgreSQL names it so for policies)
    old = _policy_named(authz, obj, policy_name)
    if old is None:
        raise PgError(E.UNDEFINED_OBJECT, f'policy "{policy_name}" for table "{obj[-1]}" does not exist')
    new_name = changes.get("name")
    if new_name and new_name != policy_name and _policy_named(authz, obj, new_name) is not None:
        raise PgError(E.DUPLICATE_OBJECT, f'policy "{new_name}" for table "{obj[-1]}" already exists')
    new = replace(old, **{k: v for k, v in changes.items() if v is not None})
    return replace(authz, policies=tuple(new if p is old else p for p in authz.policies))


def drop_policy(authz: Authz, who: Principal, obj: ObjectKey, name: str) -> Authz:
    authz.require_owner(who, obj, "relation")  # (PostgreSQL names it so for policies)
    if _policy_named(authz, obj, name) is None:
        raise PgError(E.UNDEFINED_OBJECT, f'policy "{name}" for table "{obj[-1]}" does not exist')
    return replace(authz, policies=tuple(p for p in authz.policies if not (p.table == obj and p.name == name)))


# --- column masks --------------------------------------------------------------------------------


def create_mask(authz: Authz, who: Principal, mask: Mask) -> Authz:
    authz.require_owner(who, mask.table, "relation")
    if any(m.table == mask.table and m.name == mask.name for m in authz.masks):
        raise PgError(E.DUPLICATE_OBJECT, f'mask "{mask.name}" for table "{mask.table[-1]}" already exists')
    for role in mask.roles:
        if role != PUBLIC and role not in authz.roles and role != BOOTSTRAP:
            raise PgError(E.UNDEFINED_OBJECT, f'role "{role}" does not exist')
    return replace(authz, masks=(*authz.masks, mask))


def drop_mask(authz: Authz, who: Principal, obj: ObjectKey, name: str, *, if_exists: bool = False) -> Authz:
    authz.require_owner(who, obj, "relation")
    if not any(m.table == obj and m.name == name for m in authz.masks):
        if if_exists:
            return authz
        raise PgError(E.UNDEFINED_OBJECT, f'mask "{name}" for table "{obj[-1]}" does not exist')
    return replace(authz, masks=tuple(m for m in authz.masks if not (m.table == obj and m.name == name)))


def set_security_invoker(authz: Authz, view: ObjectKey, invoker: bool) -> Authz:
    """A view's security_invoker option, as CREATE [OR REPLACE] VIEW gave it."""
    invokers = authz.invokers | {view} if invoker else authz.invokers - {view}
    return authz if invokers == authz.invokers else replace(authz, invokers=invokers)
