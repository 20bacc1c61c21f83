"""File pruning from Iceberg column bounds: a query reads only the data files whose bounds can hold
the rows its WHERE clause asks for.

A table on an object store is mounted as a union of one Parquet scan per data file (local files
are one scan: scan_sets.py, which DataFusion prunes by file statistics itself), and DataFusion plans and opens
every branch of that union even when its row-group statistics rule the whole file out: about a
millisecond per file per statement on this machine, so a point lookup got slower with every file
the table gained (bench/SCORECARD.md, the scale curve). A local scan of 100 or more files has the
same problem more mildly (it opens every file before pruning): it is pruned too, to per-file scans
of the files that can match (engine.PRUNE_MIN_LINKED_FILES). Iceberg's manifests already hold each
file's lower and upper bound per column; this module decides, before DataFusion sees the
statement, which files a single-table SELECT can possibly read.

Pure logic: `constraints` reads a parsed WHERE clause, `matching_files` applies the constraints
to a plan's files. Sound by construction: a conjunct this module does not understand constrains
nothing, a file without bounds for a column is kept, and only AND-ed conjuncts are used, so the
files dropped are exactly files in which no row can satisfy the WHERE clause.
"""

from __future__ import annotations

import itertools
import threading
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import numpy as np

if TYPE_CHECKING:
    from sqlglot import exp

    from icegres.engine.mounts import FileRead, ReadPlan


@dataclass(frozen=True)
class Constraint:
    """What one column's values must satisfy: inside [lo, hi] and, if given, one of `values`."""

    lo: Any = None
    lo_inclusive: bool = True
    hi: Any = None
    hi_inclusive: bool = True
    values: frozenset[Any] | None = None

    def admits(self, lo: Any, hi: Any) -> bool:
        """Can a file whose column lies within [lo, hi] hold a row satisfying this?"""
        try:
            if self.values is not None and not any(lo <= v <= hi for v in self.values):
                return False
            if self.lo is not None and (hi < self.lo or (hi == self.lo and not self.lo_inclusive)):
                return False
            if self.hi is not None and (lo > self.hi or (lo == self.hi and not self.hi_inclusive)):
                return False
        except TypeError:  # bounds of another type than the literal: keep the file
            return True
        return True

    def narrowed(self, other: Constraint) -> Constraint:
        """Both constraints at once (two conjuncts on one column)."""
        lo, lo_inc = self.lo, self.lo_inclusive
        if other.lo is not None and (lo is None or other.lo > lo or (other.lo == lo and not other.lo_inclusive)):
            lo, lo_inc = other.lo, other.lo_inclusive
        hi, hi_inc = self.hi, self.hi_inclusive
        if other.hi is not None and (hi is None or other.hi < hi or (other.hi == hi and not other.hi_inclusive)):
            hi, hi_inc = other.hi, other.hi_inclusive
        values = self.values
        if other.values is not None:
            values = other.values if values is None else values & other.values
        return Constraint(lo, lo_inc, hi, hi_inc, values)


# Column kinds whose Iceberg bounds compare like the Python values a literal gives.
_INT = "int"
_STR = "str"
_MIRROR = {"GT": "LT", "GTE": "LTE", "LT": "GT", "LTE": "GTE", "EQ": "EQ"}


def column_kinds(plan: ReadPlan) -> dict[str, str]:
    """The plan's prunable columns: integer and string columns (name -> kind)."""
    import pyarrow as pa

    kinds = {}
    for f in plan.schema:
        if pa.types.is_integer(f.type):
            kinds[f.name] = _INT
        elif pa.types.is_string(f.type) or pa.types.is_large_string(f.type) or pa.types.is_string_view(f.type):
            kinds[f.name] = _STR
    return kinds


def constraints(where: exp.Expression, names: set[str], kinds: dict[str, str],
                params: dict[str, Any] | None) -> dict[str, Constraint] | None:
    """Per column, what the AND-ed conjuncts of `where` demand of the table's rows.

    `names` are the qualifiers the table goes by in the statement (its alias, or its name).
    None when no conjunct constrains a prunable column. A `$n` parameter without a value (a
    statement being described, not run) constrains nothing.
    """
    from sqlglot import exp

    out: dict[str, Constraint] = {}
    for conjunct in _conjuncts(where):
        found = _constraint(conjunct, names, kinds, params, exp)
        if found is None:
            continue
        column, constraint = found
        out[column] = out[column].narrowed(constraint) if column in out else constraint
    return out or None


def prunable_shape(where: exp.Expression | None, names: set[str], kinds: dict[str, str]) -> bool:
    """Whether some conjunct of `where` could constrain a prunable column, whatever the literal
    and parameter values: the answer is cached per statement shape."""
    from sqlglot import exp

    if where is None:
        return False
    return any(_constraint(c, names, kinds, None, exp, shape_only=True) is not None for c in _conjuncts(where))


def matching_files(plan: ReadPlan, found: dict[str, Constraint]) -> tuple[FileRead, ...]:
    """The plan's files that can hold a row satisfying every constraint."""
    ids = dict(zip((f.name for f in plan.schema), plan.field_ids, strict=True))
    keep: np.ndarray | None = None
    for column, constraint in found.items():
        field_id = ids[column]
        bounds = plan.column_bounds.get(field_id)
        if bounds is None:
            files = (_bounds(plan, f.path) for f in plan.files)
            bounds = ColumnBounds.of([None if b is None else b.get(field_id) for b in files])
            plan.column_bounds[field_id] = bounds  # the plan's files never change
        admitted = bounds.admitting(constraint)
        keep = admitted if keep is None else keep & admitted
    if keep is None:
        return plan.files
    return tuple(itertools.compress(plan.files, keep.tolist()))


_INT64 = (-(1 << 63), (1 << 63) - 1)


@dataclass(frozen=True)
class ColumnBounds:
    """One column's bounds in each file of a plan, as arrays: a statement's constraint is checked
    against every file at once (a 200-file table took ~0.14 ms a statement file by file).

    `pairs` are the bounds as decoded: (lower, upper), None (unknown: the file is kept) or
    ALL_NULL (the file is dropped). `lo` / `hi` hold them as int64 when every known bound is an
    integer, else they are None and `admitting` compares file by file, as `Constraint.admits`.
    """

    pairs: tuple[Any, ...]
    lo: np.ndarray | None
    hi: np.ndarray | None
    known: np.ndarray  # the file has (lower, upper)
    all_null: np.ndarray

    @classmethod
    def of(cls, pairs: list[Any]) -> ColumnBounds:
        known = np.array([p is not None and p is not ALL_NULL for p in pairs], dtype=bool)
        all_null = np.array([p is ALL_NULL for p in pairs], dtype=bool)
        bounded = [p for p, k in zip(pairs, known.tolist(), strict=True) if k]
        lo = hi = None
        if all(_is_int64(v) for p in bounded for v in p):
            lo = np.array([p[0] if k else 0 for p, k in zip(pairs, known.tolist(), strict=True)], dtype=np.int64)
            hi = np.array([p[1] if k else 0 for p, k in zip(pairs, known.tolist(), strict=True)], dtype=np.int64)
        return cls(tuple(pairs), lo, hi, known, all_null)

    def admitting(self, c: Constraint) -> np.ndarray:
        """Per file, whether it can hold a row satisfying `c` (`Constraint.admits`, vectorized)."""
        literals = [*(c.values or ()), *(v for v in (c.lo, c.hi) if v is not None)]
        if self.lo is None or self.hi is None or not all(_is_int64(v) for v in literals):
            return np.array([p is not ALL_NULL and (p is None or c.admits(*p)) for p in self.pairs], dtype=bool)
        lo, hi = self.lo, self.hi
        ok = np.ones(len(self.pairs), dtype=bool)
        if c.values is not None:
            values = np.array(sorted(c.values), dtype=np.int64)[:, None]
            ok &= ((lo <= values) & (values <= hi)).any(axis=0)
        if c.lo is not None:
            ok &= hi >= c.lo if c.lo_inclusive else hi > c.lo
        if c.hi is not None:
            ok &= lo <= c.hi if c.hi_inclusive else lo < c.hi
        return (ok | ~self.known) & ~self.all_null


def _is_int64(v: Any) -> bool:
    return type(v) is int and _INT64[0] <= v <= _INT64[1]


# --- conjuncts -----------------------------------------------------------------------------------


def _conjuncts(where: exp.Expression) -> list[exp.Expression]:
    from sqlglot import exp

    node = where.this if isinstance(where, exp.Where) else where
    out: list[exp.Expression] = []
    stack = [node]
    while stack:
        node = stack.pop()
        if isinstance(node, exp.Paren):
            stack.append(node.this)
        elif isinstance(node, exp.And):
            stack.extend((node.left, node.right))
        else:
            out.append(node)
    return out


def _constraint(node: Any, names: set[str], kinds: dict[str, str], params: dict[str, Any] | None,
                exp: Any, shape_only: bool = False) -> tuple[str, Constraint] | None:
    kind_of = type(node).__name__
    if kind_of in _MIRROR:
        left, right = node.this, node.expression
        column = _column(left, names, kinds, exp)
        value_node = right
        if column is None:
            column, value_node, kind_of = _column(right, names, kinds, exp), left, _MIRROR[kind_of]
        if column is None:
            return None
        value = _value(value_node, kinds[column], params, exp, shape_only)
        if value is _NONE:
            return None
        if shape_only:
            return column, Constraint()
        return column, {
            "EQ": Constraint(values=frozenset((value,))),
            "GT": Constraint(lo=value, lo_inclusive=False),
            "GTE": Constraint(lo=value),
            "LT": Constraint(hi=value, hi_inclusive=False),
            "LTE": Constraint(hi=value),
        }[kind_of]
    if isinstance(node, exp.Between):
        column = _column(node.this, names, kinds, exp)
        if column is None:
            return None
        lo = _value(node.args.get("low"), kinds[column], params, exp, shape_only)
        hi = _value(node.args.get("high"), kinds[column], params, exp, shape_only)
        if lo is _NONE or hi is _NONE:
            return None
        return column, Constraint() if shape_only else Constraint(lo=lo, hi=hi)
    if isinstance(node, exp.In) and not node.args.get("query") and not node.args.get("unnest"):
        column = _column(node.this, names, kinds, exp)
        if column is None or not node.expressions:
            return None
        values = [_value(v, kinds[column], params, exp, shape_only) for v in node.expressions]
        if any(v is _NONE for v in values):
            return None
        return column, Constraint() if shape_only else Constraint(values=frozenset(values))
    return None


def folded(ident: Any) -> str:
    """An identifier as PostgreSQL resolves it: unquoted names fold to lower case."""
    return ident.this if ident.quoted else ident.this.lower()


def _column(node: Any, names: set[str], kinds: dict[str, str], exp: Any) -> str | None:
    if not isinstance(node, exp.Column) or node.args.get("db") or node.args.get("catalog"):
        return None
    qualifier = node.args.get("table")
    if qualifier is not None and folded(qualifier) not in names:
        return None
    name = node.name
    if name in kinds:
        return name
    ident = node.this
    if isinstance(ident, exp.Identifier) and not ident.quoted and name.lower() in kinds:
        return name.lower()  # PostgreSQL folds unquoted names to lower case
    return None


_NONE = object()  # not a value this module understands


def _value(node: Any, kind: str, params: dict[str, Any] | None, exp: Any, shape_only: bool) -> Any:
    if isinstance(node, exp.Parameter | exp.Placeholder):
        if shape_only:
            return None
        key = str(node.this.this if isinstance(node, exp.Parameter) else node.name).lstrip("$")
        value = None if params is None else params.get(key)
        if kind == _INT and isinstance(value, int) and not isinstance(value, bool):
            return value
        if kind == _STR and isinstance(value, str):
            return value
        return _NONE
    negative = False
    if isinstance(node, exp.Neg):
        node, negative = node.this, True
    if not isinstance(node, exp.Literal):
        return _NONE
    text = node.this
    if kind == _INT and not node.is_string and text.isdigit():
        return -int(text) if negative else int(text)
    if kind == _STR and node.is_string and not negative:
        return text
    return _NONE


# --- bounds --------------------------------------------------------------------------------------
#
# A data file never changes, so its decoded bounds are cached by path for the life of the process.

# A column holding only NULLs in a file: no comparison with a value can be true there.
ALL_NULL: Any = ("all", "null")

_BOUNDS: dict[str, dict[int, tuple[Any, Any]] | None] = {}
_BOUNDS_LOCK = threading.Lock()
_BOUNDS_MAX = 100_000


def _bounds(plan: ReadPlan, path: str) -> dict[int, tuple[Any, Any]] | None:
    cached = _BOUNDS.get(path, _NONE)
    if cached is not _NONE:
        return cached  # type: ignore[return-value]
    decoded = _decode(plan, path)
    with _BOUNDS_LOCK:
        if len(_BOUNDS) >= _BOUNDS_MAX:
            _BOUNDS.clear()
        _BOUNDS[path] = decoded
    return decoded


def _decode(plan: ReadPlan, path: str) -> dict[int, tuple[Any, Any]] | None:
    from pyiceberg.conversions import from_bytes
    from pyiceberg.types import IntegerType, LongType, StringType

    data_file: Any = plan.data_files.get(path)
    table: Any = plan.table
    if data_file is None or table is None:
        return None
    lower, upper = data_file.lower_bounds or {}, data_file.upper_bounds or {}
    nulls = data_file.null_value_counts or {}
    out = {}
    for field in table.schema().fields:
        if not isinstance(field.field_type, IntegerType | LongType | StringType):
            continue
        if data_file.record_count and nulls.get(field.field_id) == data_file.record_count:
            out[field.field_id] = ALL_NULL
            continue
        lo, hi = lower.get(field.field_id), upper.get(field.field_id)
        if lo is None or hi is None:
            continue
        try:
            out[field.field_id] = (from_bytes(field.field_type, lo), from_bytes(field.field_type, hi))
        except Exception:  # noqa: BLE001 - an undecodable bound prunes nothing
            continue
    return out
