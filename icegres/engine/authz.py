"""Who may do what, as this server sees it: the lakehouse's authorization state (pg/acl.py) read
from its shared store, the principal a session acts as, and the checks a statement passes before
anything of it is planned or read.

The state is one document every server of a catalog shares (engine/acl_store.py). A server keeps
the last one it read and reads again when it is older than `max_age_s`, so a GRANT or REVOKE made
on another server is in force here within that bound; a change made here is in force here at
once. Checks never read the store on the event loop: `current()` is called from the worker
threads statements already run in.

Why checks sit where they do: a read's relations are known once its names are resolved, before
any view is expanded or anything planned (`check_read`); a write's target and the relations it
reads are known from its tree (`check_write`). Both run before planning, so no plan cache, no
describe cache and no error message of the planner ever reaches a session that may not read the
table: authorization comes first, and the caches (which key on statements, not on roles) only
ever serve a session that passed it.
"""

from __future__ import annotations

import logging
import threading
import time
import uuid
from collections.abc import Callable, Iterable
from datetime import UTC, datetime
from typing import Any

from icegres.pg import acl
from icegres.pg.acl import Authz, Principal
from icegres.pg.errors import PgError

__all__ = ["Authorization", "BlockAuthorization", "change", "in_effect", "write_letters"]

log = logging.getLogger("icegres.authz")

MAX_AGE_S_DEFAULT = 1.0


class Authorization:
    """One server's view of the roles and privileges. `configured`: the users the server's
    configuration makes superusers (None: every user who is not a role, as under trust)."""

    def __init__(self, store: Any, configured: frozenset[str] | None,
                 max_age_s: float = MAX_AGE_S_DEFAULT) -> None:
        self.store = store
        self.configured = configured
        self.max_age_s = max_age_s
        self._lock = threading.Lock()
        self._authz: Authz = acl.EMPTY
        self._version: int | None = None
        self._document = ""
        # Moves whenever the state in hand is replaced: what caches of secured statements key on.
        self.generation = 0
        self._read_ok = False  # a read ever succeeded: what a failing catalog falls back on
        self._read_at = float("-inf")

    # --- the state ----------------------------------------------------------------------------

    def current(self) -> Authz:
        """The state, read again when older than max_age_s (blocking: a worker thread's call)."""
        now = time.monotonic()
        if now - self._read_at <= self.max_age_s:
            return self._authz
        with self._lock:
            if time.monotonic() - self._read_at <= self.max_age_s:
                return self._authz
            try:
                version, document = self.store.read()
            except Exception as exc:
                # The catalog is down: the state last read stays in force (writes the buffer
                # acks go on), read again after max_age_s. Never read at all: under trust or
                # token logins (every non-role a superuser) there is none to keep to; with
                # configured users only they may go on (is_superuser), the rest is refused.
                if self._read_ok or self.configured is None:
                    log.warning("roles and privileges could not be read again (%s): keeping the last state", exc)
                    self._read_at = time.monotonic()
                    return self._authz
                raise PgError("58030", f"catalog unavailable: roles and privileges cannot be read ({exc})") from exc
            self._read_ok = True
            if version != self._version or document != self._document:
                self._authz = acl.from_json(document)
                self._version, self._document = version, document
                self.generation += 1
            self._read_at = time.monotonic()
            return self._authz

    def fresh(self) -> Authz:
        """The state read now, whatever its age (blocking)."""
        with self._lock:
            self._read_at = float("-inf")
        return self.current()

    def is_superuser(self, who: Principal) -> bool:
        """A configured superuser (--superusers / the configured users) needs no state read: they
        go on while the catalog is down; any other principal is judged by the state."""
        if who.configured and self.configured is not None:
            return True
        return self.current().is_superuser(who)

    def cached(self) -> Authz:
        """The state as last read, without reading (for the event loop: no I/O)."""
        return self._authz

    async def change(self, fold: Callable[[Authz], Authz]) -> Authz:
        """Apply `fold` to the shared state by compare-and-swap (re-applied to whatever state won
        a race); PgError from `fold` refuses the change with nothing written."""
        def apply(document: str) -> str:
            return acl.to_json(fold(acl.from_json(document)))

        document = await self.store.change(uuid.uuid4().hex, apply)
        authz = acl.from_json(document)
        with self._lock:
            # The version the swap made is not known here: the next read takes it, and keeps
            # this object if the document is the same.
            self._authz, self._document, self._read_at = authz, document, time.monotonic()
            self.generation += 1
        return authz

    # --- who -----------------------------------------------------------------------------------

    def configured_names(self) -> frozenset[str]:
        return self.configured or frozenset()

    def principal(self, session_user: str, role: str | None = None, authz: Authz | None = None) -> Principal:
        """Whom a session acts as: its SET ROLE if any, else its login user (judged by `authz`,
        or by the state read now)."""
        user = role if role and role.lower() != "none" else session_user
        return Principal(user, self.is_configured(user, authz))

    def is_configured(self, user: str, authz: Authz | None = None) -> bool:
        if self.configured is None:
            return user not in (authz or self.current()).roles
        return user in self.configured

    def verifier(self, user: str) -> str | None:
        """The stored SCRAM verifier of a role that may log in (blocking); None once its VALID
        UNTIL has passed, so that the login fails as a wrong password does (PostgreSQL's
        get_role_password)."""
        role = self.current().role(user)
        if role is None:
            return None
        if acl.expired(role.valid_until, datetime.now(UTC)):
            log.info('password authentication refused: User "%s" has an expired password.', user)
            return None
        return role.password

    def session_settings(self, database: str, user: str) -> list[tuple[str, str]]:
        """What ALTER ROLE / ALTER DATABASE ... SET stored for a session of `user` in
        `database`, in the order to apply them (blocking)."""
        return acl.session_settings(self.current(), database, user)

    def connection_limit(self, user: str) -> int:
        """A role's CONNECTION LIMIT: -1 for none, and for a superuser or a configured user."""
        if self.configured is not None and user in self.configured:
            return -1
        role = self.current().role(user)
        return -1 if role is None or role.superuser else role.connlimit

    def may_log_in(self, user: str) -> bool:
        if self.configured is not None and user in self.configured:
            return True  # (a configured user is no role: no state to read, catalog down or not)
        role = self.current().role(user)
        return role is None or role.login or role.superuser

    # --- checks --------------------------------------------------------------------------------

    def check_relations(self, who: Principal, relations: Iterable[tuple[str, tuple[str, str]]],
                        letter: str = "r", columns: Callable[[tuple[str, str]], set[str] | None] | None = None) -> None:
        """42501 unless `who` may use each relation's schema and has `letter` on it, or, lacking
        it, on every column of it the statement uses (`columns(key)`; None: not known, denied).
        `relations`: (kind, (schema, name)) as the resolver gives them; catalog relations are
        everyone's."""
        if self.is_superuser(who):
            return
        authz = self.current()
        for kind, (schema, name) in relations:
            if kind == "system":
                continue
            authz.require(who, ("schema", schema), "U")
            table = ("table", schema, name)
            if not authz.has(who, table, letter):
                if columns is not None and authz.column_grants(table):
                    used = columns((schema, name))
                    if used is not None and authz.has_columns(who, table, letter, used):
                        continue
                noun = "view" if kind == "view" else "table"
                raise PgError("42501", f"permission denied for {noun} {name}")

    def check_set_role(self, session_user: str, role: str | None) -> None:
        """SET ROLE: the session user must be a member of the role (PostgreSQL's check_role)."""
        if role is None or role.lower() == "none":
            return
        authz = self.current()
        if role not in authz.roles and role not in self.configured_names() and not (
                self.configured is None and role == session_user):
            raise PgError("22023", f'role "{role}" does not exist')
        who = Principal(session_user, self.is_configured(session_user))
        if authz.is_superuser(who) or role == session_user:
            return
        if role not in authz.member_roles(session_user):
            raise PgError("42501", f'permission denied to set role "{role}"')


    def check_session_authorization(self, login_user: str, user: str) -> None:
        """SET SESSION AUTHORIZATION: the login user must be a superuser (42501 otherwise) and
        `user` a role, a configured user or the bootstrap superuser (22023, as its check hook says)."""
        authz = self.current()
        if not authz.is_superuser(Principal(login_user, self.is_configured(login_user))):
            raise PgError("42501", "permission denied to set session authorization")
        if user not in authz.roles and user not in self.configured_names() and user != acl.BOOTSTRAP:
            raise PgError("22023", f'role "{user}" does not exist')


class BlockAuthorization(Authorization):
    """A transaction block's view of the roles and privileges: the shared state with the block's
    own changes (`txn.acl_folds`) folded over it. The block's statements are checked against it
    (a GRANT, then SET ROLE and a SELECT, as in PostgreSQL); COMMIT applies the folds to the
    shared state (`commit_block`), ROLLBACK forgets them."""

    def __init__(self, base: Authorization, txn: Any) -> None:  # (no super().__init__: no state of its own)
        self.base, self.txn = base, txn
        self.store, self.configured, self.max_age_s = base.store, base.configured, base.max_age_s
        self._folded: tuple[Authz, int, Authz] | None = None  # (base state, folds applied, result)

    @property  # type: ignore[override]
    def generation(self) -> tuple[int, int, int]:
        """What caches of secured statements key on: moves with the base and with each change."""
        return (self.base.generation, self.txn.ident, len(self.txn.acl_folds))

    def _fold(self, base: Authz) -> Authz:
        folds = list(self.txn.acl_folds)
        done = self._folded
        if done is not None and done[0] is base and done[1] == len(folds):
            return done[2]
        state = base
        for fold in folds:
            state = fold(state)
        self._folded = (base, len(folds), state)
        return state

    def current(self) -> Authz:
        return self._fold(self.base.current())

    def cached(self) -> Authz:
        return self._fold(self.base.cached())

    async def change(self, fold: Callable[[Authz], Authz]) -> Authz:
        raise AssertionError("a block's role and privilege changes are staged (authz.change)")


def in_effect(base: Authorization | None, txn: Any) -> Authorization | None:
    """The authorization a session's statement is checked against: inside a transaction block,
    the block's view (BlockAuthorization); else the shared one."""
    if base is None or txn is None or txn.autocommit:
        return base
    if txn.acl_overlay is None or txn.acl_overlay.base is not base:
        txn.acl_overlay = BlockAuthorization(base, txn)
    return txn.acl_overlay


async def change(authorization: Authorization, fold: Callable[[Authz], Authz], run: Any) -> None:
    """Apply a role or privilege change: at once to the shared state, or, inside a transaction
    block, staged on the block after checking it against the block's view (refused now as it
    would be: PgError, nothing staged)."""
    if not isinstance(authorization, BlockAuthorization):
        await authorization.change(fold)
        return
    await run(lambda: fold(authorization.current()))
    authorization.txn.acl_folds.append(fold)


def _block_changes(txn: Any) -> Callable[[Authz], Authz] | None:
    """A block's role and privilege changes as one fold, in order (None: it made none)."""
    folds = list(getattr(txn, "acl_folds", ()))
    if not folds:
        return None

    def all_of(state: Authz) -> Authz:
        for fold in folds:
            state = fold(state)
        return state

    return all_of


async def check_block(base: Authorization | None, txn: Any) -> None:
    """Before a block's data commits: its role and privilege changes applied, in order, to the
    shared state as it is now, and kept nowhere. One the state no longer allows (a role another
    server dropped since the block changed it) fails the COMMIT before anything is committed;
    `commit_block` then meets it only if another server changed the state in between."""
    import trio

    all_of = _block_changes(txn)
    if base is None or all_of is None:
        return
    await trio.to_thread.run_sync(lambda: all_of(base.fresh()))


async def commit_block(base: Authorization | None, txn: Any) -> None:
    """After a block's data committed: its role and privilege changes, in order, as one change of
    the shared state (re-applied to whatever state won a race; a change the state no longer
    allows — a role another server dropped meanwhile — is the COMMIT's error, the data kept)."""
    all_of = _block_changes(txn)
    if base is None or all_of is None:
        return
    try:
        await base.change(all_of)
    except PgError as err:
        raise PgError(err.sqlstate, f"the transaction's data changes were committed, but its role and privilege "
                      f"changes were not: {err.message}", detail=err.detail, hint=err.hint) from None


def write_letters(stmt: Any) -> str:
    """The privileges a write needs on its target: the write's own (INSERT a, UPDATE w, DELETE
    d, TRUNCATE D, MERGE each action's) and SELECT (r) where it reads the target's columns
    (a WHERE, a RETURNING, an assignment from a column, a join), as PostgreSQL requires."""
    from sqlglot import exp

    if stmt.tag == "TRUNCATE":
        return "D"
    try:
        tree = stmt.tree
    except PgError:
        return ""
    reads = bool(tree.args.get("returning"))
    if isinstance(tree, exp.Insert):
        conflict = tree.args.get("conflict")
        updates = conflict is not None and bool(conflict.args.get("expressions"))
        return "a" + ("wr" if updates else ("r" if reads else ""))
    if isinstance(tree, exp.Update):
        reads = reads or bool(tree.args.get("where") or tree.args.get("from")) or any(
            e.find(exp.Column) is not None for a in tree.expressions for e in [a.expression] if e is not None)
        return "w" + ("r" if reads else "")
    if isinstance(tree, exp.Delete):
        reads = reads or bool(tree.args.get("where") or tree.args.get("using"))
        return "d" + ("r" if reads else "")
    if isinstance(tree, exp.Merge):
        letters = "r"
        for when in tree.find_all(exp.When):
            then = when.args.get("then")
            if isinstance(then, exp.Insert):
                letters += "a"
            elif isinstance(then, exp.Update):
                letters += "w"
            elif then is not None and "DELETE" in then.sql().upper():
                letters += "d"
        return letters
    return ""


_PRIVILEGE_WORDS = {
    "table": {"select": "r", "insert": "a", "update": "w", "delete": "d", "truncate": "D",
              "references": "x", "trigger": "t"},
    "schema": {"usage": "U", "create": "C"},
    "column": {"select": "r", "insert": "a", "update": "w", "references": "x"},
    "any_column": {"select": "r", "insert": "a", "update": "w", "references": "x"},
}
_SYSTEM_SCHEMAS = ("pg_catalog", "information_schema")


def has_privilege(env: Any, kind: str, user: str | None, obj: str | None, privileges: str | None) -> bool | None:
    """has_table_privilege / has_schema_privilege: whether `user` (None: current_user) holds any
    of `privileges` ('SELECT, INSERT WITH GRANT OPTION') on `obj` (a name or an OID as text)."""
    from icegres.engine import pg_catalog

    if obj is None or privileges is None:
        return None
    wanted: list[tuple[str, bool]] = []
    for part in privileges.split(","):
        word = " ".join(part.lower().split())
        option = word.endswith(" with grant option")
        word = word.removesuffix(" with grant option")
        letter = _PRIVILEGE_WORDS[kind].get(word)
        if letter is None:
            raise PgError("22023", f'unrecognized privilege type: "{part.strip()}"')
        wanted.append((letter, option))
    authorization = env.authorization
    if authorization is None:
        return True
    authz = authorization.current()
    name = env.current_user if user is None else user
    if name.isdigit():
        name = _role_named(authz, int(name), env)
    elif user is not None and authz.role(name) is None and name not in (env.user, acl.BOOTSTRAP) \
            and name not in authorization.configured_names():
        raise PgError("42704", f'role "{name}" does not exist')
    who = Principal(name, authorization.is_configured(name))
    ix = pg_catalog.current_index(env)
    if kind == "schema":
        schema = obj if not obj.isdigit() else (ix.namespace_names.get(int(obj)) if ix else None)
        if schema is None or (ix is not None and schema not in ix.namespaces):
            raise PgError("3F000", f'schema "{obj}" does not exist')
        if schema in _SYSTEM_SCHEMAS:
            return all(letter == "U" for letter, _ in wanted[:1]) or authz.is_superuser(who)
        key: acl.ObjectKey = ("schema", schema)
    else:
        obj, _, column = obj.partition("\x00")
        oid = int(obj) if obj.isdigit() else (ix.resolve(obj, list(env.search_path)) if ix else None)
        entry = next((e for e in ix.relations.values() if e.oid == oid), None) if ix and oid is not None else None
        if entry is None:
            raise PgError("42P01", f'relation "{obj}" does not exist')
        if entry.schema in _SYSTEM_SCHEMAS:
            return any(letter == "r" for letter, _ in wanted) or authz.is_superuser(who)
        key = ("table", entry.schema, entry.name)
        if kind in ("column", "any_column"):
            names = [c.name for c in entry.columns]
            if kind == "column" and column not in names:
                raise PgError("42703", f'column "{column}" of relation "{entry.name}" does not exist')
            cols = [column] if kind == "column" else names
            return any((authz.has(who, key, letter) and (not option or authz.can_grant(who, key, letter)))
                       or any(authz.has(who, ("column", *key[1:], c), letter) for c in cols)
                       for letter, option in wanted)
    return any(authz.has(who, key, letter) and (not option or authz.can_grant(who, key, letter))
               for letter, option in wanted)


def pg_has_role(env: Any, user: str | None, role: str | None, privileges: str | None) -> bool | None:
    """pg_has_role([user,] role, 'MEMBER | USAGE [WITH ADMIN OPTION], …'): whether `user`
    (None: current_user; a name or an OID as text) is a member of `role` (MEMBER: directly or
    not, inheriting or not), has its privileges (USAGE: through members that inherit), or may
    administer it (WITH ADMIN OPTION), as pg_has_role_aclcheck says; a superuser is all three."""
    if role is None or privileges is None:
        return None
    wanted = []
    for part in privileges.split(","):
        word = " ".join(part.lower().split())
        admin = word.endswith((" with admin option", " with grant option"))
        word = word.removesuffix(" with admin option").removesuffix(" with grant option")
        if word not in ("member", "usage"):
            raise PgError("22023", f'unrecognized privilege type: "{part.strip()}"')
        wanted.append((word, admin))
    authorization = env.authorization
    if authorization is None:
        return True
    authz = authorization.current()
    names = [env.current_user if user is None else user, role]
    for i, name in enumerate(names):
        if name.isdigit():
            names[i] = _role_named(authz, int(name), env)
        elif authz.role(name) is None and name not in (env.user, acl.BOOTSTRAP) \
                and name not in authorization.configured_names():
            raise PgError("42704", f'role "{name}" does not exist')
    name, role = names
    who = Principal(name, authorization.is_configured(name))
    if authz.is_superuser(who):
        return True
    mine = authz.member_roles(name)
    for word, admin in wanted:
        if admin and any(m.role == role and m.member in mine and m.admin for m in authz.members):
            return True
        if not admin and role in (mine if word == "member" else authz.privileged_roles(who)):
            return True
    return False


def _role_named(authz: Authz, oid: int, env: Any) -> str:
    if oid == acl.BOOTSTRAP_OID:
        return env.user
    found = next((r.name for r in authz.roles.values() if r.oid == oid), None)
    if found is None:
        raise PgError("42704", f"role with OID {oid} does not exist")
    return found


def _session_principal(env: Any) -> tuple[Any, Authz, Principal] | None:
    authorization = getattr(env, "authorization", None)
    if authorization is None:
        return None
    return authorization, authorization.current(), authorization.principal(env.user, env.settings.get("role"))


def may_see(env: Any, schema: str, name: str) -> bool:
    """information_schema's condition for a relation's rows: its owner's role, or any privilege."""
    got = _session_principal(env)
    if got is None or schema in _SYSTEM_SCHEMAS:
        return True
    _, authz, who = got
    key = ("table", schema, name)
    return authz.owns(who, key) or any(authz.has(who, key, letter) for letter in acl.ALL_TABLE)


def may_see_schema(env: Any, schema: str) -> bool:
    """information_schema.schemata's condition: the schema's owner's role, or USAGE or CREATE."""
    got = _session_principal(env)
    if got is None or schema in _SYSTEM_SCHEMAS:
        return True
    _, authz, who = got
    key = ("schema", schema)
    return authz.owns(who, key) or authz.has(who, key, "U") or authz.has(who, key, "C")


def is_my_role(env: Any, name: str) -> bool:
    """pg_has_role(name, 'USAGE') of the session's role, PUBLIC counting as everyone's."""
    got = _session_principal(env)
    if got is None or name == "PUBLIC":
        return True
    _, authz, who = got
    if authz.is_superuser(who):
        return True
    mine = authz.privileged_roles(who)
    return name in mine or (name == env.user and acl.BOOTSTRAP in mine)
