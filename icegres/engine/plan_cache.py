"""What a session remembers about the statements it ran, so a repeat costs less.

Everything here is keyed on what decides it: a statement's literal shape (`shape.literal_shape`:
the text with its value literals masked) and search_path for what follows from its tokens and
names (the tables it reads, its result column names, its plan's node kinds, whether pruning can
apply). What holds or follows from the literal values keys on the text: the route (the text
DataFusion planned, whose rewrite reads literals: a regclass literal becomes its OID), the
statement with its views expanded, and with parameter values and mounted snapshots a reusable
logical plan, and the same with no values for a statement's description (result schema,
parameter types); docs/architecture.md, "What the per-statement caches key on". Bounded; the
oldest entry goes first.
"""

from __future__ import annotations

from collections import OrderedDict
from collections.abc import Callable
from typing import Any, Generic, TypeVar

K = TypeVar("K")
V = TypeVar("V")

SHAPES_MAX = 2048  # per cache: a session's distinct statement shapes
PLANNED_MAX = 64  # a session's recent repeated statements


class Bounded(Generic[K, V]):
    """A dict that forgets its oldest entry beyond `limit`."""

    __slots__ = ("_data", "_limit")

    def __init__(self, limit: int) -> None:
        self._data: OrderedDict[K, V] = OrderedDict()
        self._limit = limit

    def get(self, key: K) -> V | None:
        return self._data.get(key)

    def __len__(self) -> int:
        return len(self._data)

    def __contains__(self, key: K) -> bool:
        return key in self._data

    def __getitem__(self, key: K) -> V:
        return self._data[key]

    def put(self, key: K, value: V) -> V:
        self._data[key] = value
        if len(self._data) > self._limit:
            self._data.popitem(last=False)
        return value

    def touch(self, key: K) -> None:
        """`key` is used again: it is forgotten last."""
        self._data.move_to_end(key)

    def pop(self, key: K) -> None:
        self._data.pop(key, None)

    def clear(self) -> None:
        self._data.clear()

    def computed(self, key: K, compute: Callable[[], V]) -> V:
        if key in self._data:
            return self._data[key]
        return self.put(key, compute())


ShapeKey = tuple[str, tuple[str, ...]]  # (literal shape, search_path)


class PlanCache:
    """One session's memory of its statements."""

    def __init__(self) -> None:
        # (table uuid, snapshot id) -> that snapshot's read plan (time_travel.py): never changes
        self.snapshots: Bounded[tuple[str, int], Any] = Bounded(PLANNED_MAX)
        # time-travel relation name -> what builds it on a context (time_travel.py)
        self.travelled: Bounded[str, Callable[[Any, list[Any]], Any]] = Bounded(PLANNED_MAX)
        # (literal shape, search_path) -> a rewrite of snapshots named by id (time_travel._Template)
        self.travel_templates: Bounded[ShapeKey, Any] = Bounded(PLANNED_MAX)
        # statement text and search_path -> the SQL DataFusion accepted for it (the text itself or
        # its rewrite): by text, as the rewrite reads literal values
        self.routes: Bounded[tuple[str, tuple[str, ...]], str] = Bounded(SHAPES_MAX)
        self.select_names: Bounded[str, list[str] | None] = Bounded(SHAPES_MAX)
        self.refs: Bounded[ShapeKey, set[tuple[str, str]] | None] = Bounded(SHAPES_MAX)
        self.kinds: Bounded[ShapeKey, frozenset[str]] = Bounded(SHAPES_MAX)  # plan node kinds
        # Logical plans of statements run before, by `repeat_key` (text, parameters, snapshots),
        # with the context they were made on and its generation then.
        self.planned: Bounded[tuple[Any, ...], tuple[Any, int, Any]] = Bounded(PLANNED_MAX)
        # Result schemas and inferred parameter types of statements described before, by the same
        # key with no parameter values, with the context and generation they were planned on.
        self.described: Bounded[tuple[Any, ...], tuple[Any, int, Any, dict[int, Any]]] = Bounded(PLANNED_MAX)
        # Final result column names per shape and DataFusion's names for them (`pg_schema`).
        self.pg_names: Bounded[tuple[str, tuple[str, ...]], list[str]] = Bounded(SHAPES_MAX)
        # Per shape: the relations it reads and writes ((schema or None, name)).
        self.names: Bounded[str, Any] = Bounded(SHAPES_MAX)
        # A statement naming views, as planned: (text, what its names resolved to, the view
        # registry's generation) -> the text with the views expanded and its tree, which the
        # expanded statement carries (query.with_views): shared, never changed. By text: sqlglot
        # writes a literal out by its value (`interval '1 day'` as `INTERVAL '1 DAY'`).
        self.expanded: Bounded[tuple[Any, ...], tuple[str, Any]] = Bounded(SHAPES_MAX)
        # A statement as a role's policies and masks rewrote it (row_security.applied), by (text,
        # search_path, role, the roles' state generation): a prepared statement is secured once.
        self.secured: Bounded[tuple[Any, ...], tuple[str, Any] | None] = Bounded(SHAPES_MAX)
        # ... and by literal shape: the secured text's pieces between the statement's literals and
        # which literal goes between them (row_security._Template), so that a point lookup sent
        # with its values inline is secured without a parse.
        self.secured_shapes: Bounded[tuple[Any, ...], Any] = Bounded(SHAPES_MAX)
        # Statement shapes whose WHERE clause can never narrow the files read (prune.py).
        self.unprunable: Bounded[ShapeKey, bool] = Bounded(SHAPES_MAX)
