"""Branches and tags of one table: ALTER TABLE t CREATE / REPLACE / DROP BRANCH or TAG.

Spark's syntax (Iceberg's SQL extensions), which Trino's proposal follows:

    ALTER TABLE t CREATE [OR REPLACE] BRANCH [IF NOT EXISTS] b [AS OF VERSION v]
        [RETAIN n {DAYS | HOURS | MINUTES}] [WITH SNAPSHOT RETENTION [n SNAPSHOTS] [m DAYS]]
    ALTER TABLE t REPLACE BRANCH b [AS OF VERSION v] [RETAIN ...] [WITH SNAPSHOT RETENTION ...]
    ALTER TABLE t DROP BRANCH [IF EXISTS] b
    ALTER TABLE t CREATE [OR REPLACE] TAG [IF NOT EXISTS] g [AS OF VERSION v] [RETAIN ...]
    ALTER TABLE t REPLACE TAG g [AS OF VERSION v] [RETAIN ...]
    ALTER TABLE t DROP TAG [IF EXISTS] g

`v` is a snapshot id, or a branch or tag whose snapshot the new ref takes; without it, the head
of main. Zero-copy: one metadata commit that names a snapshot, never a data file written. The
commit asserts the ref's snapshot as it was read (pyiceberg's AssertRefSnapshotId), so two
sessions creating or moving one ref race to a 40001 for the loser, as any Iceberg commit does.

Errors: a ref that exists is 42710 (duplicate_object), one that does not 42704
(undefined_object), an unknown snapshot 42704, main cannot be dropped or made a tag (55000), a
table without any snapshot has nothing to branch from (55000). Not in a transaction block (25001):
a ref is the table's, not the block's, and applies at once.
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from enum import Enum
from typing import TYPE_CHECKING, Any

from sqlglot.tokens import TokenType

from icegres.pg.errors import (
    DUPLICATE_OBJECT,
    OBJECT_NOT_IN_PREREQUISITE_STATE,
    UNDEFINED_OBJECT,
    PgError,
)

if TYPE_CHECKING:
    from pyiceberg.table import Table

MAIN = "main"
_DAY_MS = 86_400_000
_UNIT_MS = {"DAYS": _DAY_MS, "DAY": _DAY_MS, "HOURS": 3_600_000, "HOUR": 3_600_000,
            "MINUTES": 60_000, "MINUTE": 60_000}


class RefKind(Enum):
    BRANCH = "BRANCH"
    TAG = "TAG"


class RefVerb(Enum):
    CREATE = "create"
    REPLACE = "replace"  # the ref must exist
    CREATE_OR_REPLACE = "create or replace"
    DROP = "drop"


@dataclass(frozen=True)
class RefChange:
    """One ref change of an ALTER TABLE (an action of `AlterTable`, alone in it)."""

    verb: RefVerb
    kind: RefKind
    name: str
    version: str | None = None  # AS OF VERSION: a snapshot id or a ref name (None: main's head)
    retain_ms: int | None = None  # RETAIN: the ref's max age
    min_snapshots: int | None = None  # WITH SNAPSHOT RETENTION n SNAPSHOTS (branches)
    max_snapshot_age_ms: int | None = None  # WITH SNAPSHOT RETENTION ... m DAYS (branches)
    if_exists: bool = False  # DROP ... IF EXISTS
    if_not_exists: bool = False  # CREATE ... IF NOT EXISTS


def changes_refs(cmd: Any) -> bool:
    """Whether a DDL command moves a table's refs at once (an ALTER TABLE whose action is a ref
    change, or a snapshot procedure's CALL)."""
    from icegres.engine.procedures import Call

    if isinstance(cmd, Call):
        return True
    actions = getattr(cmd, "actions", ())
    return len(actions) == 1 and isinstance(actions[0], RefChange)


def starts_ref_change(p: Any) -> bool:
    """Whether the ALTER TABLE action at the parser's position is a branch or tag change."""
    return any(p.peek(*words) for words in (
        ("CREATE", "BRANCH"), ("CREATE", "TAG"), ("CREATE", "OR", "REPLACE"), ("REPLACE", "BRANCH"),
        ("REPLACE", "TAG"), ("DROP", "BRANCH"), ("DROP", "TAG")))


def parse_ref_change(p: Any) -> RefChange:
    """The ref change at the parser's position (`ddl._Parser`), to the end of the statement."""
    if p.accept("DROP"):
        kind = _kind(p)
        if_exists = p.accept("IF", "EXISTS")
        name = p.ident()
        p.expect_end()
        return RefChange(RefVerb.DROP, kind, name, if_exists=if_exists)
    if p.accept("REPLACE"):
        verb = RefVerb.REPLACE
    else:
        p.expect("CREATE")
        verb = RefVerb.CREATE_OR_REPLACE if p.accept("OR", "REPLACE") else RefVerb.CREATE
    kind = _kind(p)
    if_not_exists = verb is RefVerb.CREATE and p.accept("IF", "NOT", "EXISTS")
    name = p.ident()
    version = retain = min_snapshots = max_age = None
    if p.accept("AS", "OF", "VERSION"):
        version = _version(p)
    if p.accept("RETAIN"):
        retain = _duration(p)
    if kind is RefKind.BRANCH and p.accept("WITH", "SNAPSHOT", "RETENTION"):
        if p.peek_type(TokenType.NUMBER) and p._words(p.i + 1) == ["SNAPSHOTS"]:
            min_snapshots = _number(p)
            p.expect("SNAPSHOTS")
        if p.peek_type(TokenType.NUMBER):
            max_age = _duration(p)
        if min_snapshots is None and max_age is None:
            raise p.error()
    p.expect_end()
    return RefChange(verb, kind, name, version, retain, min_snapshots, max_age, if_not_exists=if_not_exists)


def _kind(p: Any) -> RefKind:
    if p.accept("BRANCH"):
        return RefKind.BRANCH
    p.expect("TAG")
    return RefKind.TAG


def _number(p: Any) -> int:
    if not p.peek_type(TokenType.NUMBER):
        raise p.error()
    value = p.toks[p.i].text
    if not value.isdigit():
        raise p.error()
    p.i += 1
    return int(value)


def _version(p: Any) -> str:
    """AS OF VERSION's value: a snapshot id (digits, maybe signed) or a ref name (quoted or not)."""
    negative = p.accept_type(TokenType.DASH)
    if p.peek_type(TokenType.NUMBER):
        return ("-" if negative else "") + str(_number(p))
    if negative:
        raise p.error()
    if p.peek_type(TokenType.STRING):
        p.i += 1
        return p.toks[p.i - 1].text
    return p.ident()


def _duration(p: Any) -> int:
    n = _number(p)
    words = p._words(p.i)
    if not words or words[0] not in _UNIT_MS:
        raise p.error()
    p.i += 1
    return n * _UNIT_MS[words[0]]


# --- applying ----------------------------------------------------------------------------------


def apply(table: Table, change: RefChange, display: str, notices: list[str]) -> None:
    """Commit `change` to `table` (one Iceberg metadata commit; CommitFailedException on a race,
    which the caller answers 40001)."""
    refs = table.metadata.refs
    existing = refs.get(change.name)
    what = change.kind.value.lower()
    if change.verb is RefVerb.DROP:
        if change.name == MAIN:
            raise PgError(OBJECT_NOT_IN_PREREQUISITE_STATE, f'cannot drop branch "{MAIN}" of table "{display}"',
                          detail="main is the table's own history: every other ref branches from it.")
        if existing is None or existing.snapshot_ref_type.value.upper() != change.kind.value:
            if change.if_exists:
                notices.append(f'{what} "{change.name}" of table "{display}" does not exist, skipping')
                return
            raise PgError(UNDEFINED_OBJECT, f'{what} "{change.name}" of table "{display}" does not exist')
        manage = table.manage_snapshots()
        (manage.remove_branch if change.kind is RefKind.BRANCH else manage.remove_tag)(change.name)
        manage.commit()
        return
    if change.name == MAIN and change.kind is RefKind.TAG:
        raise PgError(OBJECT_NOT_IN_PREREQUISITE_STATE, f'"{MAIN}" is the table\'s main branch, not a tag')
    if existing is not None:
        if existing.snapshot_ref_type.value.upper() != change.kind.value:
            other = existing.snapshot_ref_type.value.lower()
            raise PgError(DUPLICATE_OBJECT, f'"{change.name}" is already a {other} of table "{display}"')
        if change.verb is RefVerb.CREATE:
            if change.if_not_exists:
                notices.append(f'{what} "{change.name}" of table "{display}" already exists, skipping')
                return
            raise PgError(DUPLICATE_OBJECT, f'{what} "{change.name}" of table "{display}" already exists')
    elif change.verb is RefVerb.REPLACE:
        raise PgError(UNDEFINED_OBJECT, f'{what} "{change.name}" of table "{display}" does not exist')
    snapshot_id = _target_snapshot(table, change, display)
    if existing is not None:
        # Replacing moves the ref; what it keeps is kept unless the statement says otherwise
        # (Iceberg's replaceBranch).
        change = replace(change,
                         retain_ms=_given(change.retain_ms, existing.max_ref_age_ms),
                         min_snapshots=_given(change.min_snapshots, existing.min_snapshots_to_keep),
                         max_snapshot_age_ms=_given(change.max_snapshot_age_ms, existing.max_snapshot_age_ms))
    manage = table.manage_snapshots()
    if change.kind is RefKind.BRANCH:
        manage.create_branch(snapshot_id, change.name, max_ref_age_ms=change.retain_ms,
                             max_snapshot_age_ms=change.max_snapshot_age_ms,
                             min_snapshots_to_keep=change.min_snapshots)
    else:
        manage.create_tag(snapshot_id, change.name, max_ref_age_ms=change.retain_ms)
    manage.commit()


def _given(value: int | None, kept: int | None) -> int | None:
    return kept if value is None else value


def _target_snapshot(table: Table, change: RefChange, display: str) -> int:
    metadata = table.metadata
    version = change.version
    if version is None:
        if metadata.current_snapshot_id is None:
            raise PgError(OBJECT_NOT_IN_PREREQUISITE_STATE,
                          f'table "{display}" has no snapshot to {change.kind.value.lower()} from',
                          hint="Write a row first: a ref names a snapshot.")
        return metadata.current_snapshot_id
    if version in metadata.refs:
        return metadata.refs[version].snapshot_id
    if version.lstrip("-").isdigit() and metadata.snapshot_by_id(int(version)) is not None:
        return int(version)
    if version.lstrip("-").isdigit():
        raise PgError(UNDEFINED_OBJECT, f'snapshot {version} of table "{display}" does not exist')
    raise PgError(UNDEFINED_OBJECT, f'branch or tag "{version}" of table "{display}" does not exist')
