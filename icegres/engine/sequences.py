"""nextval, currval, setval and lastval: a server's blocks of each sequence, and a session's last values.

A server reserves values in blocks (the sequence's CACHE, at least `icegres.sequence_block`
values — see docs/configuration.md) through the sequence machine, and hands them out from memory
to all its sessions, in order; a crash loses a block's unused values (a gap, as PostgreSQL
allows). The block is keyed by the sequence table's uuid, so a sequence dropped and created
again never continues an old block. Called from worker threads (DataFusion's UDFs, the write
path); each reservation runs the machine's trio driver on a short-lived loop of its own, as
metadata commits do (lake_world.commit_metadata_changes).
"""

from __future__ import annotations

import threading
import uuid
import weakref
from dataclasses import dataclass, field, replace
from typing import TYPE_CHECKING, Any

from icegres.engine.sequence_store import IcebergSequence, set_head
from icegres.machines.sequence import Request
from icegres.pg.errors import PgError

if TYPE_CHECKING:
    from icegres.engine.lake import Engine

OBJECT_NOT_IN_PREREQUISITE_STATE = "55000"
# The least block a reservation takes, whatever the sequence's CACHE: one catalog commit per
# this many values at most (a documented setting: ICEGRES_SEQUENCE_BLOCK / --sequence-block).
DEFAULT_BLOCK = 32


@dataclass
class _Block:
    table_uuid: str
    next: int
    last: int
    increment: int

    def take(self, n: int) -> list[int]:
        out = []
        while len(out) < n and (self.next <= self.last if self.increment > 0 else self.next >= self.last):
            out.append(self.next)
            self.next += self.increment
        return out


@dataclass
class Allocator:
    """One server's blocks of every sequence."""

    engine: Engine
    block: int = DEFAULT_BLOCK
    _blocks: dict[tuple[str, str], _Block] = field(default_factory=dict)
    _locks: dict[tuple[str, str], threading.Lock] = field(default_factory=dict)
    _guard: threading.Lock = field(default_factory=threading.Lock)

    def take(self, key: tuple[str, str], n: int, table: Any = None) -> list[int]:
        """`n` values of the sequence `key`, in order, each never handed out before (`table`: the
        sequence's table, if the caller just loaded it)."""
        with self._guard:
            lock = self._locks.setdefault(key, threading.Lock())
        with lock:
            world = IcebergSequence(self.engine.lakehouse, key)
            table, definition = _loaded(world) if table is None else world.adopt(table)
            table_uuid = str(table.metadata.table_uuid)
            block = self._blocks.get(key)
            out = block.take(n) if block is not None and block.table_uuid == table_uuid else []
            while len(out) < n:
                out += self._reserve(key, world, replace(definition, cache=max(definition.cache, self.block)),
                                     n - len(out), table_uuid).take(n - len(out))
            return out

    def _reserve(self, key: tuple[str, str], world: IcebergSequence, definition: Any, count: int,
                 table_uuid: str) -> _Block:
        import trio

        from icegres.machines.drivers.sequence import run_reservation

        request = Request(definition, count, uuid.uuid4().hex)
        outcome = trio.run(run_reservation, request, world)
        if outcome.grant is None:
            raise PgError(outcome.sqlstate or "XX000", outcome.message or "nextval failed")
        first, last = outcome.grant
        block = _Block(table_uuid, first, last, definition.increment)
        self._blocks[key] = block
        return block

    def forget(self, key: tuple[str, str]) -> None:
        """This server's block of `key` is void (setval, ALTER SEQUENCE, DROP)."""
        with self._guard:
            self._blocks.pop(key, None)


def _loaded(world: IcebergSequence) -> tuple[Any, Any]:
    from icegres.machines.drivers.sequence import SequenceGone

    try:
        return world.load()
    except SequenceGone:
        raise PgError("42P01", f'relation "{world.key[1]}" does not exist') from None


_ALLOCATORS: weakref.WeakKeyDictionary[Any, Allocator] = weakref.WeakKeyDictionary()
_ALLOCATORS_LOCK = threading.Lock()


def allocator_of(engine: Engine) -> Allocator:
    with _ALLOCATORS_LOCK:
        found = _ALLOCATORS.get(engine)
        if found is None:
            found = _ALLOCATORS[engine] = Allocator(engine, block=getattr(engine, "sequence_block", DEFAULT_BLOCK))
        return found


@dataclass
class SessionSequences:
    """A session's view: nextval / currval / setval / lastval as PostgreSQL's session functions."""

    engine: Engine
    env: Any
    current: dict[tuple[str, str], int] = field(default_factory=dict)
    last: tuple[str, str] | None = None

    def resolve(self, name: str) -> tuple[tuple[str, str], Any]:
        """A sequence name as nextval's regclass argument reads it: `schema.name` or along the
        search path, and its table as loaded now; 42P01 where there is none."""
        from icegres.engine.sequence_store import is_sequence
        from icegres.sql.statement import unquote_ident

        parts = [unquote_ident(p) if p.startswith('"') else p.lower() for p in _split(name)]
        if len(parts) == 3:
            parts = parts[1:]  # database.schema.name
        candidates = [tuple(parts)] if len(parts) == 2 else [(s, parts[0]) for s in self.env.search_path]
        lake = self.engine.lakehouse
        for schema, relation in candidates:
            try:
                table = lake.load_table(schema, relation)
            except Exception:  # noqa: BLE001 - not there (or not readable): try the next schema
                continue
            if not is_sequence(table.properties):
                raise PgError("42809", f'"{relation}" is not a sequence')
            return (schema, relation), table
        raise PgError("42P01", f'relation "{name}" does not exist')

    def nextval(self, name: str, n: int = 1) -> list[int]:
        key, table = self.resolve(name)
        values = allocator_of(self.engine).take(key, n, table)
        self.current[key], self.last = values[-1], key
        return values

    def currval(self, name: str) -> int:
        key, _ = self.resolve(name)
        if key not in self.current:
            raise PgError(OBJECT_NOT_IN_PREREQUISITE_STATE,
                          f'currval of sequence "{key[1]}" is not yet defined in this session')
        return self.current[key]

    def lastval(self) -> int:
        if self.last is None:
            raise PgError(OBJECT_NOT_IN_PREREQUISITE_STATE, "lastval is not yet defined in this session")
        return self.current[self.last]

    def setval(self, name: str, value: int, is_called: bool = True) -> int:
        key, table = self.resolve(name)
        _, definition = IcebergSequence(self.engine.lakehouse, key).adopt(table)
        if not definition.min_value <= value <= definition.max_value:
            raise PgError("22003", f'setval: value {value} is out of bounds for sequence "{key[1]}" '
                                   f"({definition.min_value}..{definition.max_value})")
        set_head(self.engine.lakehouse, key, value, is_called)
        allocator_of(self.engine).forget(key)
        if is_called:
            self.current[key], self.last = value, key
        return value


def _split(name: str) -> list[str]:
    """A dotted name's parts, a double-quoted part kept whole."""
    parts, buf, quoted = [], "", False
    for ch in name.strip():
        if ch == '"':
            quoted = not quoted
            buf += ch
        elif ch == "." and not quoted:
            parts.append(buf.strip())
            buf = ""
        else:
            buf += ch
    parts.append(buf.strip())
    return parts


def udfs(env: Any) -> list[Any]:
    """nextval, currval, setval and lastval as DataFusion UDFs over the session's `env.sequences`
    (volatile: one nextval per row, reserved in blocks; a batch's rows of one sequence at once)."""
    import pyarrow as pa
    from datafusion import udf

    def session() -> SessionSequences:
        found = getattr(env, "sequences", None)
        if found is None:
            raise PgError("0A000", "sequences are not available in this session")
        return found

    def nextval(names: pa.Array) -> pa.Array:
        values: list[int | None] = [None] * len(names)
        rows: dict[str, list[int]] = {}
        for i, name in enumerate(names.to_pylist()):
            if name is not None:
                rows.setdefault(name, []).append(i)
        for name, where in rows.items():  # (in the order each first appears)
            for i, value in zip(where, session().nextval(name, len(where)), strict=True):
                values[i] = value
        return pa.array(values, pa.int64())

    def currval(names: pa.Array) -> pa.Array:
        return pa.array([None if n is None else session().currval(n) for n in names.to_pylist()], pa.int64())

    def lastval() -> pa.Array:
        return pa.array([session().lastval()], pa.int64())

    def setval(names: pa.Array, values: pa.Array) -> pa.Array:
        return pa.array([None if n is None or v is None else session().setval(n, int(v))
                         for n, v in zip(names.to_pylist(), values.to_pylist(), strict=True)], pa.int64())

    def setval3(names: pa.Array, values: pa.Array, called: pa.Array) -> pa.Array:
        return pa.array([None if n is None or v is None else session().setval(n, int(v), bool(c))
                         for n, v, c in zip(names.to_pylist(), values.to_pylist(), called.to_pylist(), strict=True)],
                        pa.int64())

    return [udf(nextval, [pa.string()], pa.int64(), "volatile", "nextval"),
            udf(currval, [pa.string()], pa.int64(), "volatile", "currval"),
            udf(lastval, [], pa.int64(), "volatile", "lastval"),
            udf(setval, [pa.string(), pa.int64()], pa.int64(), "volatile", "setval"),
            udf(setval3, [pa.string(), pa.int64(), pa.bool_()], pa.int64(), "volatile", "setval_called")]
