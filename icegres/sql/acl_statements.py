"""The role and privilege statements, parsed into commands: CREATE/ALTER/DROP ROLE (and USER,
GROUP), GRANT and REVOKE of privileges and of roles, ALTER TABLE/SCHEMA ... OWNER TO.

PostgreSQL's grammar (gram.y: CreateRoleStmt, AlterRoleStmt, DropRoleStmt, GrantStmt,
RevokeStmt, GrantRoleStmt, RevokeRoleStmt), read over the one lexer's tokens. sqlglot parses
GRANT into a generic tree that loses the grant option and role grants, and none of the role
statements, so these small statements get a parser of their own; what it does not accept is
42601 at the token, as PostgreSQL's parser would answer.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from typing import Any

from icegres.pg import errors as E
from icegres.pg.errors import PgError
from icegres.sql.lexer import Kind, Token, tokenize

__all__ = [
    "AlterOwner", "AlterRole", "CreateRole", "DropRole", "GrantPrivileges", "GrantRole", "parse_acl",
]


@dataclass(frozen=True)
class CreateRole:
    name: str
    attrs: dict[str, Any]
    in_roles: tuple[str, ...] = ()
    members: tuple[str, ...] = ()
    password: str | None = None  # the text given, hashed to a verifier before it is stored
    tag: str = "CREATE ROLE"


@dataclass(frozen=True)
class AlterRole:
    name: str
    attrs: dict[str, Any] = field(default_factory=dict)
    password: str | None = None
    password_given: bool = False
    rename_to: str | None = None
    tag: str = "ALTER ROLE"


@dataclass(frozen=True)
class RoleSetting:
    """ALTER ROLE name|ALL [IN DATABASE db] SET name {TO|=} value | SET name FROM CURRENT |
    RESET name | RESET ALL, and ALTER DATABASE db SET/RESET: a session's starting settings."""

    role: str | None  # None: ALL (or ALTER DATABASE)
    database: str | None
    name: str | None  # None: RESET ALL
    value: str | None  # None: RESET name, or SET name TO DEFAULT
    from_current: bool = False
    tag: str = "ALTER ROLE"


@dataclass(frozen=True)
class Owned:
    """REASSIGN OWNED BY roles TO new_owner, or DROP OWNED BY roles [CASCADE | RESTRICT]
    (`new_owner` None)."""

    roles: tuple[str, ...]
    new_owner: str | None = None
    tag: str = "REASSIGN OWNED"
    cascade: bool = False


@dataclass(frozen=True)
class DropRole:
    names: tuple[str, ...]
    if_exists: bool = False
    tag: str = "DROP ROLE"


@dataclass(frozen=True)
class GrantPrivileges:
    revoke: bool
    letters: str  # aclitem letters; "" with `all_privileges`
    all_privileges: bool
    object_kind: str  # "table" | "schema" | "all_tables"
    objects: tuple[tuple[str | None, str], ...]  # (schema, name); a schema is (None, name)
    grantees: tuple[str, ...]  # "" is PUBLIC; CURRENT_USER etc. as "current_user"
    grant_option: bool = False  # WITH GRANT OPTION / REVOKE GRANT OPTION FOR
    cascade: bool = False
    # Column privileges: (letter, columns) of `SELECT (a, b)`, `UPDATE (c)` (`letters` holds
    # the privileges given for whole tables)
    columns: tuple[tuple[str, tuple[str, ...]], ...] = ()

    @property
    def tag(self) -> str:
        return "REVOKE" if self.revoke else "GRANT"


@dataclass(frozen=True)
class GrantRole:
    revoke: bool
    roles: tuple[str, ...]
    members: tuple[str, ...]
    admin: bool = False  # WITH ADMIN OPTION / REVOKE ADMIN OPTION FOR

    @property
    def tag(self) -> str:
        return "REVOKE ROLE" if self.revoke else "GRANT ROLE"


@dataclass(frozen=True)
class AlterOwner:
    kind: str  # "table" | "schema"
    schema: str | None
    name: str
    owner: str
    tag: str = "ALTER TABLE"


@dataclass(frozen=True)
class ViewOptions:
    """ALTER VIEW [IF EXISTS] name SET (security_invoker [= bool]) | RESET (security_invoker):
    the one view option icegres keeps (docs/security.md)."""

    schema: str | None
    name: str
    invoker: bool
    if_exists: bool = False
    tag: str = "ALTER VIEW"


@dataclass(frozen=True)
class RowSecurity:
    """ALTER TABLE ... ENABLE | DISABLE | FORCE | NO FORCE ROW LEVEL SECURITY."""

    schema: str | None
    name: str
    enable: bool | None = None
    force: bool | None = None
    tag: str = "ALTER TABLE"


@dataclass(frozen=True)
class PolicyCommand:
    """CREATE / ALTER / DROP POLICY name ON table: `using` and `check` as the expression's text."""

    action: str  # create | alter | drop
    name: str
    schema: str | None
    table: str
    permissive: bool = True
    command: str = "all"
    roles: tuple[str, ...] | None = None  # None: not given (ALTER keeps them; CREATE: PUBLIC)
    using: str | None = None
    check: str | None = None
    rename_to: str | None = None
    if_exists: bool = False

    @property
    def tag(self) -> str:
        return f"{self.action.upper()} POLICY"


@dataclass(frozen=True)
class MaskCommand:
    """CREATE MASK name ON table (column) [TO role, ...] USING (expression) | DROP MASK [IF EXISTS]
    name ON table: icegres's own statement (PostgreSQL has no masking; docs/security.md)."""

    action: str  # create | drop
    name: str
    schema: str | None
    table: str
    column: str = ""
    expression: str = ""
    roles: tuple[str, ...] = ("",)
    if_exists: bool = False

    @property
    def tag(self) -> str:
        return f"{self.action.upper()} MASK"


@dataclass(frozen=True)
class DefaultPrivileges:
    """ALTER DEFAULT PRIVILEGES [FOR ROLE r, ...] [IN SCHEMA s, ...] GRANT | REVOKE ... ON TABLES."""

    roles: tuple[str, ...]  # () : the current role
    schemas: tuple[str, ...]  # () : every schema
    grant: GrantPrivileges
    tag: str = "ALTER DEFAULT PRIVILEGES"


AclCommand = (DefaultPrivileges | MaskCommand | CreateRole | AlterRole | DropRole | GrantPrivileges | GrantRole | AlterOwner | RowSecurity
              | PolicyCommand | RoleSetting | Owned | ViewOptions)

_LETTERS = {"select": "r", "insert": "a", "update": "w", "delete": "d", "truncate": "D",
            "references": "x", "trigger": "t", "usage": "U", "create": "C"}
_SPECIAL_GRANTEES = {"current_user", "current_role", "session_user"}


class _Reader:
    def __init__(self, sql: str) -> None:
        self.sql = sql
        self.tokens = [t for t in tokenize(sql) if t.kind is not Kind.COMMENT]
        self.at = 0

    def peek(self, *words: str, ahead: int = 0) -> bool:
        i = self.at + ahead
        if i >= len(self.tokens):
            return False
        t = self.tokens[i]
        return t.kind is Kind.NAME and t.value.lower() in words

    def take(self, *words: str) -> bool:
        if self.peek(*words):
            self.at += 1
            return True
        return False

    def expect(self, *words: str) -> str:
        if not self.peek(*words):
            raise self.error()
        self.at += 1
        return self.tokens[self.at - 1].value.lower()

    def op(self, char: str) -> bool:
        if self.at < len(self.tokens) and self.tokens[self.at].kind is Kind.OP and self.tokens[self.at].text == char:
            self.at += 1
            return True
        return False

    def name(self) -> str:
        if self.at >= len(self.tokens) or self.tokens[self.at].kind not in (Kind.NAME, Kind.QUOTED_NAME):
            raise self.error()
        self.at += 1
        return self.tokens[self.at - 1].value

    def qualified(self) -> tuple[str | None, str]:
        first = self.name()
        if self.op("."):
            return first, self.name()
        return None, first

    def string(self) -> str:
        if self.at >= len(self.tokens) or self.tokens[self.at].kind is not Kind.STRING:
            raise self.error()
        self.at += 1
        return self.tokens[self.at - 1].value

    def number(self) -> int:
        negative = self.op("-")
        if self.at >= len(self.tokens) or self.tokens[self.at].kind is not Kind.NUMBER:
            raise self.error()
        self.at += 1
        value = int(self.tokens[self.at - 1].text)
        return -value if negative else value

    def done(self) -> bool:
        return self.at >= len(self.tokens)

    def end(self) -> None:
        if not self.done():
            raise self.error()

    def error(self) -> PgError:
        if self.at >= len(self.tokens):
            return PgError(E.SYNTAX_ERROR, "syntax error at end of input", position=len(self.sql) + 1)
        t: Token = self.tokens[self.at]
        return PgError(E.SYNTAX_ERROR, f'syntax error at or near "{t.text}"', position=t.start + 1)

    def names(self) -> tuple[str, ...]:
        out = [self.name()]
        while self.op(","):
            out.append(self.name())
        return tuple(out)


_CANDIDATE = re.compile(r"\s*(?:GRANT|REVOKE|(?:CREATE|DROP|ALTER)\s+(?:ROLE|USER|GROUP|POLICY|MASK)|ALTER\s+DEFAULT\s+PRIVILEGES"
                        r"|ALTER\s+DATABASE\s+\S+\s+(?:SET|RESET)|(?:REASSIGN|DROP)\s+OWNED|ALTER\s+(TABLE|SCHEMA|VIEW))\b", re.I)
_OWNER_TO = re.compile(r"\b(?:OWNER\s+TO\s+\S+|ROW\s+LEVEL\s+SECURITY|(?:RE)?SET\s*\([^;]*\))\s*$", re.I)


def parse_acl(sql: str) -> AclCommand | None:
    """The command `sql` is, or None when it is none of these statements (a CREATE TABLE, an
    ALTER TABLE that changes no owner): those go on to the DDL parser. Only a statement whose
    head says so is tokenized (a DDL statement may be megabytes: a DEFAULT's literal)."""
    m = _CANDIDATE.match(sql[:200])
    if m is None or (m.group(1) and not _OWNER_TO.search(sql[-300:])):
        return None
    r = _Reader(sql)
    if r.take("grant"):
        return _grant(r, revoke=False)
    if r.take("revoke"):
        return _grant(r, revoke=True)
    if r.peek("create") and r.peek("role", "user", "group", ahead=1):
        r.at += 1
        return _create_role(r, r.expect("role", "user", "group"))
    if r.peek("drop") and r.peek("role", "user", "group", ahead=1):
        r.at += 2
        if_exists = r.take("if") and r.expect("exists") == "exists"
        names = r.names()
        r.end()
        return DropRole(names, if_exists)
    if r.peek("alter") and r.peek("role", "user", "group", ahead=1):
        r.at += 2
        return _alter_role(r)
    if r.peek("reassign", "drop") and r.peek("owned", ahead=1):
        reassign = r.peek("reassign")
        r.at += 2
        r.expect("by")
        roles = [_grantee(r)]
        while r.op(","):
            roles.append(_grantee(r))
        if reassign:
            r.expect("to")
            new = _grantee(r)
            r.end()
            return Owned(tuple(roles), new)
        cascade = r.take("cascade")
        if not cascade:
            r.take("restrict")
        r.end()
        return Owned(tuple(roles), tag="DROP OWNED", cascade=cascade)
    if r.peek("alter") and r.peek("database", ahead=1):
        r.at += 2
        return _setting(r, None, r.name(), "ALTER DATABASE")
    if r.peek("alter") and r.peek("default", ahead=1):
        r.at += 2
        r.expect("privileges")
        return _default_privileges(r)
    if r.peek("create", "alter", "drop") and r.peek("policy", ahead=1):
        return _policy(r)
    if r.peek("create", "drop") and r.peek("mask", ahead=1):
        return _mask(r)
    if r.peek("alter") and r.peek("table", "schema", "view", ahead=1):
        return _alter_owner(r)
    return None


def _role_options(r: _Reader, attrs: dict[str, Any], extra: dict[str, list[str]]) -> tuple[str | None, bool]:
    """The options of CREATE/ALTER ROLE into `attrs`; IN ROLE / ROLE / ADMIN lists into `extra`;
    (password text, whether PASSWORD was given)."""
    flags = {"superuser": "superuser", "createdb": "createdb", "createrole": "createrole",
             "inherit": "inherit", "login": "login", "bypassrls": "bypassrls", "replication": None}
    password: str | None = None
    given = False
    r.take("with")
    while not r.done():
        t = r.tokens[r.at]
        word = t.value.lower() if t.kind is Kind.NAME else ""
        if word in flags or (word.startswith("no") and word[2:] in flags):
            r.at += 1
            key = flags[word] if word in flags else flags[word[2:]]
            if key is not None:
                attrs[key] = word in flags
        elif word == "connection":
            r.at += 1
            r.expect("limit")
            attrs["connlimit"] = r.number()
        elif word in ("encrypted", "password"):
            r.at += 1
            if word == "encrypted":
                r.expect("password")
            given = True
            password = None if r.take("null") else r.string()
        elif word == "valid":
            r.at += 1
            r.expect("until")
            attrs["valid_until"] = r.string()
        elif word == "in":
            r.at += 1
            r.expect("role", "group")
            extra.setdefault("in_roles", []).extend(r.names())
        elif word in ("role", "user"):
            r.at += 1
            extra.setdefault("members", []).extend(r.names())
        elif word == "admin":
            r.at += 1
            extra.setdefault("admins", []).extend(r.names())
        elif word == "sysid":
            r.at += 1
            r.number()
        else:
            raise r.error()
    return password, given


def _create_role(r: _Reader, kind: str) -> CreateRole:
    name = r.name()
    attrs: dict[str, Any] = {"login": kind == "user"}
    extra: dict[str, list[str]] = {}
    password, _ = _role_options(r, attrs, extra)
    return CreateRole(name, attrs, tuple(extra.get("in_roles", ())),
                      tuple(extra.get("members", []) + extra.get("admins", [])), password)


def _alter_role(r: _Reader) -> AlterRole | RoleSetting:
    if r.take("all"):
        return _setting(r, None, r.name() if r.take("in") and r.expect("database") else None, "ALTER ROLE")
    name = _grantee(r)
    if r.take("rename"):
        r.expect("to")
        new = r.name()
        r.end()
        return AlterRole(name, rename_to=new)
    if r.take("in"):
        r.expect("database")
        return _setting(r, name, r.name(), "ALTER ROLE")
    if r.peek("set", "reset"):
        return _setting(r, name, None, "ALTER ROLE")
    attrs: dict[str, Any] = {}
    extra: dict[str, list[str]] = {}
    password, given = _role_options(r, attrs, extra)
    if extra:
        raise r.error()
    return AlterRole(name, attrs, password, given)


def _setting(r: _Reader, role: str | None, database: str | None, tag: str) -> RoleSetting:
    """The SET or RESET that ends an ALTER ROLE or ALTER DATABASE: read as the session's SET
    and RESET read it (`statement.classify`)."""
    from icegres.sql.statement import Kind as StatementKind
    from icegres.sql.statement import classify

    if r.take("reset"):
        name = None if r.take("all") else r.name().lower()
        r.end()
        return RoleSetting(role, database, name, None, tag=tag)
    if not r.peek("set"):
        raise r.error()
    if r.peek("from", ahead=2) and r.peek("current", ahead=3):
        r.at += 1
        name = r.name().lower()
        r.at += 2
        r.end()
        return RoleSetting(role, database, name, None, from_current=True, tag=tag)
    stmt = classify(r.sql[r.tokens[r.at].start:])
    if stmt.kind is not StatementKind.SET or stmt.name is None or stmt.sql.split()[1].lower() in (
            "transaction", "session", "local", "characteristics"):
        raise r.error()
    return RoleSetting(role, database, stmt.name.lower(), stmt.value, tag=tag)


def _alter_owner(r: _Reader) -> AlterOwner | ViewOptions | None:
    start = r.at
    r.at += 1
    kind = r.expect("table", "schema", "view")
    if_exists = kind != "schema" and r.take("if") and r.expect("exists") == "exists"
    r.take("only")
    schema, name = (None, r.name()) if kind == "schema" else r.qualified()
    if kind == "view" and r.peek("set", "reset"):
        return _view_options(r, schema, name, if_exists)
    if kind == "table" and r.peek("enable", "disable", "force", "no"):
        word = r.expect("enable", "disable", "force", "no")
        if word == "no":
            r.expect("force")
        r.expect("row")
        r.expect("level")
        r.expect("security")
        r.end()
        if word in ("enable", "disable"):
            return RowSecurity(schema, name, enable=word == "enable")  # type: ignore[return-value]
        return RowSecurity(schema, name, force=word == "force")  # type: ignore[return-value]
    if not (r.take("owner") and r.take("to")):
        r.at = start
        return None
    owner = _grantee(r)
    r.end()
    return AlterOwner(kind, schema, name, owner, tag=f"ALTER {kind.upper()}")


_BOOLEAN_WORDS = {"true": True, "on": True, "1": True, "yes": True, "false": False, "off": False, "0": False, "no": False}


def _view_options(r: _Reader, schema: str | None, name: str, if_exists: bool) -> ViewOptions:
    """SET (security_invoker [= value]) or RESET (security_invoker); another option (check_option,
    security_barrier) is 0A000, as at CREATE VIEW."""
    reset = r.expect("set", "reset") == "reset"
    if not r.op("("):
        raise r.error()
    invoker = False
    while True:
        at = r.tokens[r.at] if not r.done() else None
        option = r.name().lower()
        if option != "security_invoker":
            raise PgError(E.FEATURE_NOT_SUPPORTED, f"view option {option} is not supported",
                          position=at.start + 1 if at is not None else None)
        invoker = not reset
        if not reset and r.op("="):
            word = r.tokens[r.at].value.lower() if not r.done() else ""
            if word not in _BOOLEAN_WORDS:
                raise PgError(E.INVALID_PARAMETER_VALUE, f'invalid value for boolean option "security_invoker": {word}')
            r.at += 1
            invoker = _BOOLEAN_WORDS[word]
        if not r.op(","):
            break
    if not r.op(")"):
        raise r.error()
    r.end()
    return ViewOptions(schema, name, invoker, if_exists)


def _grantee(r: _Reader) -> str:
    if r.peek(*_SPECIAL_GRANTEES):
        return r.expect(*_SPECIAL_GRANTEES)
    return r.name()


def _grantees(r: _Reader) -> tuple[str, ...]:
    out = []
    while True:
        r.take("group")
        if r.take("public"):
            out.append("")
        else:
            out.append(_grantee(r))
        if not r.op(","):
            return tuple(out)


def _grant(r: _Reader, *, revoke: bool, defaults: bool = False) -> GrantPrivileges | GrantRole:
    """GRANT / REVOKE after its first word; `defaults`: ALTER DEFAULT PRIVILEGES's abbreviated
    form, whose objects are `ON TABLES` (given as the object kind "tables")."""
    option_for = False
    if revoke and r.peek("grant", "admin") and r.peek("option", ahead=1) and r.peek("for", ahead=2):
        option_for = True
        r.at += 3
    all_privileges = False
    words: list[str] = []
    column_lists: dict[int, tuple[str, ...]] = {}
    if r.take("all"):
        all_privileges = True
        r.take("privileges")
        if r.op("("):  # ALL (a, b): every column privilege on those columns
            listed = r.names()
            column_lists = dict.fromkeys(range(4), listed)
            if not r.op(")"):
                raise r.error()
            words, all_privileges = ["insert", "select", "update", "references"], False
    else:
        while True:
            words.append(_grantee(r))
            if r.op("("):
                column_lists[len(words) - 1] = r.names()
                if not r.op(")"):
                    raise r.error()
            if not r.op(","):
                break
    if r.take("on"):
        letters = ""
        columns: list[tuple[str, tuple[str, ...]]] = []
        for i, word in enumerate(words):
            if word not in _LETTERS:
                raise PgError(E.SYNTAX_ERROR, f'unrecognized privilege type "{word}"')
            if i in column_lists:
                if _LETTERS[word] not in "arwx":
                    raise PgError(E.INVALID_GRANT_OPERATION, f"invalid privilege type {word.upper()} for column")
                columns.append((_LETTERS[word], column_lists[i]))
            else:
                letters += _LETTERS[word]
        if defaults:
            kind = r.expect("tables", "sequences", "functions", "routines", "types", "schemas")
            if kind != "tables":
                raise PgError(E.FEATURE_NOT_SUPPORTED, f"default privileges on {kind} are not supported")
            objects: tuple[tuple[str | None, str], ...] = ()
        else:
            kind, objects = _objects(r)
        r.expect("from" if revoke else "to")
        grantees = _grantees(r)
        grant_option = option_for
        if not revoke and r.take("with"):
            r.expect("grant")
            r.expect("option")
            grant_option = True
        if r.take("granted"):
            r.expect("by")
            _grantee(r)
        cascade = bool(revoke and r.take("cascade"))
        if revoke and not cascade:
            r.take("restrict")
        r.end()
        return GrantPrivileges(revoke, letters, all_privileges, kind, objects, grantees, grant_option, cascade,
                               tuple(columns))
    if all_privileges or defaults or column_lists:
        raise r.error()
    roles = words
    r.expect("from" if revoke else "to")
    members = _grantees(r)
    admin = option_for
    if not revoke and r.take("with"):
        r.expect("admin")
        r.expect("option")
        admin = True
    if r.take("granted"):
        r.expect("by")
        _grantee(r)
    if revoke:
        if not r.take("cascade"):
            r.take("restrict")
    r.end()
    return GrantRole(revoke, tuple(roles), members, admin)


def _default_privileges(r: _Reader) -> DefaultPrivileges:
    roles: tuple[str, ...] = ()
    schemas: tuple[str, ...] = ()
    while r.peek("for", "in"):
        if r.take("for"):
            r.expect("role", "user")
            roles = _grantees(r)
        else:
            r.at += 1
            r.expect("schema")
            schemas = r.names()
    revoke = r.expect("grant", "revoke") == "revoke"
    grant = _grant(r, revoke=revoke, defaults=True)
    assert isinstance(grant, GrantPrivileges)
    return DefaultPrivileges(roles, schemas, grant)


def _objects(r: _Reader) -> tuple[str, tuple[tuple[str | None, str], ...]]:
    if r.take("all"):
        r.expect("tables")
        r.expect("in")
        r.expect("schema")
        return "all_tables", tuple((None, n) for n in r.names())
    if r.take("schema"):
        return "schema", tuple((None, n) for n in r.names())
    if r.peek("sequence", "function", "procedure", "routine", "database", "foreign", "language",
              "large", "tablespace", "type", "domain"):
        raise PgError(E.FEATURE_NOT_SUPPORTED, f"privileges on {r.tokens[r.at].value.lower()} objects are not supported")
    r.take("table")
    out = [r.qualified()]
    while r.op(","):
        out.append(r.qualified())
    return "table", tuple(out)


def _expression(r: _Reader) -> str:
    """The text of a parenthesised expression (USING (...), WITH CHECK (...)), as written."""
    if not r.op("("):
        raise r.error()
    start = r.tokens[r.at - 1].end
    depth = 1
    while not r.done():
        t = r.tokens[r.at]
        r.at += 1
        if t.kind is Kind.OP and t.text == "(":
            depth += 1
        elif t.kind is Kind.OP and t.text == ")":
            depth -= 1
            if depth == 0:
                text = r.sql[start:t.start].strip()
                if not text:
                    raise r.error()
                return text
    raise r.error()


def _policy(r: _Reader) -> PolicyCommand:
    action = r.expect("create", "alter", "drop")
    r.expect("policy")
    if_exists = action == "drop" and r.take("if") and r.expect("exists") == "exists"
    name = r.name()
    r.expect("on")
    schema, table = r.qualified()
    if action == "drop":
        if not r.take("cascade"):
            r.take("restrict")
        r.end()
        return PolicyCommand("drop", name, schema, table, if_exists=bool(if_exists))
    if action == "alter" and r.take("rename"):
        r.expect("to")
        new = r.name()
        r.end()
        return PolicyCommand("alter", name, schema, table, rename_to=new)
    permissive, command = True, "all"
    roles: tuple[str, ...] | None = None
    using = check = None
    if action == "create" and r.take("as"):
        permissive = r.expect("permissive", "restrictive") == "permissive"
    if action == "create" and r.take("for"):
        command = r.expect("all", "select", "insert", "update", "delete")
    if r.take("to"):
        roles = _grantees(r)
    if r.take("using"):
        using = _expression(r)
    if r.take("with"):
        r.expect("check")
        check = _expression(r)
    r.end()
    if command == "insert" and using is not None:
        raise PgError(E.SYNTAX_ERROR, "only WITH CHECK expression allowed for INSERT")
    if command in ("select", "delete") and check is not None:
        raise PgError(E.SYNTAX_ERROR, "WITH CHECK cannot be applied to SELECT or DELETE")
    return PolicyCommand(action, name, schema, table, permissive, command, roles, using, check)


def _mask(r: _Reader) -> MaskCommand:
    action = r.expect("create", "drop")
    r.expect("mask")
    if_exists = action == "drop" and r.take("if") and r.expect("exists") == "exists"
    name = r.name()
    r.expect("on")
    schema, table = r.qualified()
    if action == "drop":
        r.end()
        return MaskCommand("drop", name, schema, table, if_exists=bool(if_exists))
    if not r.op("("):
        raise r.error()
    column = r.name()
    if not r.op(")"):
        raise r.error()
    roles: tuple[str, ...] = ("",)
    if r.take("to"):
        roles = _grantees(r)
    r.expect("using")
    expression = _expression(r)
    r.end()
    return MaskCommand("create", name, schema, table, column, expression, roles)
