"""A big Query's string literals planned as data, never as literals in a plan.

The front end makes a string literal over a few kB of a big Query a parameter whose value is
UTF-8 pieces (`sql.pieces.BigText`, protocol/pgwire/statements.py). Bound as a parameter value,
DataFusion would copy it into the plan as a literal, and planning copies and folds literals while
holding the GIL: ~0.5 s per 20 MB, during which every other session's statement waits. Here each
such `$n` reads a one-row table of the session's private catalog instead,
`(select icegres_big_value from "icegres_work"."w"."big_value_…")`: planning reads its schema,
not its value (~2 ms for 50 MB), and the value is read where execution needs it, in DataFusion's
threads. In the queries a DML statement plans, the table is cross-joined instead where it can be
(`joined`: no scalar subquery's copies of the value).

A DML statement's big literal stays a parameter only where PostgreSQL reads the literal as text,
or as a bytea column's hex input, then bound to its bytes (`settled`, `value_places`); elsewhere
it is written back as the literal it was.

The table's string buffer is filled a piece at a time (no copy of the value's size in one call)
and the table is dropped from the catalog once the statement is planned; the plan keeps it until
the statement ends.
"""

from __future__ import annotations

import itertools
import re
import struct
import threading
import weakref
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

import pyarrow as pa

from icegres.engine.lake import PRIVATE_CATALOG, PRIVATE_SCHEMA
from icegres.sql.lexer import Kind, scan
from icegres.sql.pieces import BigText, has_big

if TYPE_CHECKING:
    from datafusion import DataFrame, SessionContext
    from sqlglot import exp

_names = itertools.count(1)


def array_of(value: BigText) -> pa.Array:
    """A one-row string (binary, for a bytea's bytes) array of the value, its buffer filled a
    piece at a time."""
    data = pa.allocate_buffer(value.size, memory_pool=pa.system_memory_pool())
    view = memoryview(data).cast("B")  # type: ignore[arg-type]
    at = 0
    for piece in value.pieces:
        view[at : at + len(piece)] = piece
        at += len(piece)
    offsets = pa.py_buffer(struct.pack("<ii", 0, value.size))
    return pa.Array.from_buffers(pa.binary() if value.binary else pa.string(), 1, [None, offsets, data])


def sql(ctx: SessionContext, text: str, params: dict[str, Any]) -> DataFrame:
    """`ctx.sql(text, param_values=params)` with each BigText parameter `text` names read from a
    one-row table: a `$n` as a scalar subquery over it, a `big_param_<n>` table (`joined`) as
    the table itself."""
    from datafusion.catalog import Catalog, Schema

    named: set[tuple[str, bool]] = set()  # (parameter, read joined)
    for kind, start, end in scan(text):
        word = text[start:end]
        if kind is Kind.PARAM:
            named.add((word[1:], False))
        elif kind is Kind.NAME and word.startswith(_JOINED):
            named.add((word[len(_JOINED):], True))
    big = {name: value for name, value in params.items() if isinstance(value, BigText)}
    rest = {name: value for name, value in params.items() if name not in big} or None
    try:
        ctx.catalog(PRIVATE_CATALOG)
    except KeyError:
        catalog = Catalog.memory_catalog()
        catalog.register_schema(PRIVATE_SCHEMA, Schema.memory_schema())
        ctx.register_catalog_provider(PRIVATE_CATALOG, catalog)
    # Registered by name (not `from_arrow`, which leaves a table of its own in the context).
    # Only the values this text reads: a DML statement plans several queries over its parts.
    tables = {(name, joined): f"{PRIVATE_CATALOG}.{PRIVATE_SCHEMA}.big_value_{next(_names)}"
              for name, joined in named if name in big}
    try:
        for (name, joined), table in tables.items():
            array = _array(big[name])
            if joined:  # (see `joined`: its rows share the one value, a join's copies do not)
                array = pa.DictionaryArray.from_arrays(pa.array([0], pa.int32()), array)
            column = f"{_COLUMN}_{name}" if joined else _COLUMN
            ctx.register_record_batches(table, [[pa.record_batch([array], names=[column])]])
        return ctx.sql(_reading(text, tables), param_values=rest)
    finally:
        for table in tables.values():
            ctx.deregister_table(table)


_JOINED = "big_param_"  # (`joined`'s table of parameter n: big_param_<n>, its alias _icegres_big_<n>)
_COLUMN = "icegres_big_value"  # (no column of the statement's own tables is likely to be so named)


def joined(tree: exp.Expression, params: dict[str, Any] | None) -> exp.Expression:
    """`tree` (a query the engine built: a DML statement's reads and probes) with each BigText
    parameter that stands in a SELECT's own list, WHERE or ORDER BY read from a one-row table
    cross-joined to its FROM, not from a scalar subquery. DataFusion turns a scalar subquery's
    value into a literal and copies it into every batch that uses it: for 50 MB, 0.1-1.3 s of
    a DataFusion thread per query alone, and a MERGE's five queries kept DataFusion's shared
    threads so busy that another session's `select 1` waited 3.2 s for one; a joined column is
    a view of the value's one buffer (~1 ms alone). A SELECT that groups, aggregates, is
    DISTINCT or has a window, and a parameter in a JOIN's ON or a subquery, keep the subquery."""
    from sqlglot import exp

    big = {name for name, value in (params or {}).items() if isinstance(value, BigText)}
    if not big:
        return tree
    tree = tree.copy()
    for select in _branches(tree):
        if (select.args.get("group") or select.args.get("distinct") or select.find(exp.AggFunc, exp.Window)
                or select.args.get("having")):
            continue
        names: set[str] = set()
        for node in list(select.find_all(exp.Parameter)):
            name = str(node.this.this)
            if name in big and _in_own_scope(node, select):
                # (each value its own column name: a SELECT of two is told apart by name, `plain_columns`)
                node.replace(exp.column(f"{_COLUMN}_{name}", table=exp.to_identifier(f"_icegres_big_{name}")))
                names.add(name)
        for name in sorted(names):
            table = exp.Table(this=exp.to_identifier(_JOINED + name), db=exp.to_identifier(PRIVATE_SCHEMA),
                              catalog=exp.to_identifier(PRIVATE_CATALOG),
                              alias=exp.TableAlias(this=exp.to_identifier(f"_icegres_big_{name}")))
            if select.args.get("from_") is None and select.args.get("from") is None:
                select.from_(table, copy=False)
            else:
                select.join(table, join_type="cross", copy=False)
    return tree


def plain_columns(df: DataFrame) -> DataFrame:
    """`df` with each column that carries a joined value (a dictionary: `sql`) as plain text or
    bytes. The join repeats the value's one entry per row; a plain column would copy it into every
    row of the join, 5 MB over 1,000 rows past a string array's 2 GB of offsets (an UPDATE of one
    row of such a file failed so). Cast at the top, the value is copied once per row that
    carries it out. (Duplicate output names cannot be told apart here: left as they are.)"""
    from datafusion import col

    fields = list(df.schema())
    if not any(pa.types.is_dictionary(f.type) for f in fields) or len({f.name for f in fields}) < len(fields):
        return df
    quoted = ['"' + f.name.replace('"', '""') + '"' for f in fields]
    return df.select(*[col(name).cast(f.type.value_type) if pa.types.is_dictionary(f.type) else col(name)
                       for name, f in zip(quoted, fields, strict=True)])


def _branches(tree: exp.Expression) -> list[exp.Select]:
    """The SELECTs a query's rows come from: itself, or each branch of its UNION ALLs."""
    from sqlglot import exp

    if isinstance(tree, exp.Select):
        return [tree]
    if isinstance(tree, exp.Union):
        return [*_branches(tree.this), *_branches(tree.expression)]
    return []


def _in_own_scope(node: exp.Expression, select: exp.Select) -> bool:
    """Whether `node` is evaluated per row of `select`'s FROM: in its list, WHERE or ORDER BY,
    not in a subquery or a JOIN's ON."""
    from sqlglot import exp

    parent = node.parent
    while parent is not None and parent is not select:
        if isinstance(parent, exp.Select | exp.Subquery | exp.Join | exp.From | exp.Union):
            return False
        parent = parent.parent
    return parent is select


# A value's array, made once however many queries a statement plans over it (an UPDATE plans
# three, a MERGE five or more: each copy of 50 MB was ~70 ms of a worker thread, in 64 kB steps
# that hand the GIL back and forth), and gone with the value.
_arrays: weakref.WeakKeyDictionary[BigText, pa.Array] = weakref.WeakKeyDictionary()
_arrays_lock = threading.Lock()


def _array(value: BigText) -> pa.Array:
    with _arrays_lock:
        array = _arrays.get(value)
    if array is None:
        array = array_of(value)
        with _arrays_lock:
            _arrays[value] = array
    return array


def settled(tree: exp.Expression, params: dict[str, Any] | None,
            places: Callable[[exp.Parameter], str | None]) -> tuple[exp.Expression, dict[str, Any] | None]:
    """`tree` with each parameter bound to a BigText kept where `places` says its context makes it
    text ("text"), or bound to its bytes where it is a bytea column's value written in hex
    ("bytea": `hex_bytes`), and read from a one-row table (`sql`, `joined`); elsewhere written
    back in as the string literal it was, with the parameters still bound. Written back is the
    whole-text path (seconds of GIL for 50 MB: docs/limitations.md), but as PostgreSQL reads the
    literal: its context decides its type (a number and its errors, a bytea's escape format)."""
    from sqlglot import exp

    if not has_big(params):
        return tree, params
    assert params is not None
    big = {name: value for name, value in params.items() if isinstance(value, BigText)}
    kept: dict[str, BigText] = {}
    decoded: dict[str, BigText | None] = {}

    def literal(node: exp.Expression) -> exp.Expression:
        if isinstance(node, exp.Parameter) and (name := str(node.this.this)) in big:
            place = places(node)
            value = big[name] if place == "text" or place in INTEGER_TYPES else None
            if place == "bytea":
                value = decoded[name] if name in decoded else decoded.setdefault(name, hex_bytes(big[name]))
            if value is not None and kept.setdefault(name, value) is value:
                # (one value per parameter: text in one place and bytes in another is written back)
                return exp.Cast(this=node, to=exp.DataType.build(place)) if place in INTEGER_TYPES else node
            return exp.Literal.string(big[name].text())
        return node

    # (`transform` copies the tree first, so `places` sees each node in its place among the copy's)
    out = tree.transform(literal)
    rest = {n: v for n, v in params.items() if n not in big}
    return out, {**rest, **kept} or None


# A place where the literal is read by an integer type's input function, as a cast to it.
INTEGER_TYPES = frozenset({"smallint", "integer", "bigint"})

_HEX = re.compile(rb"[0-9A-Fa-f]*")


def hex_bytes(value: BigText) -> BigText | None:
    """The bytes a bytea's hex input (`\\x` and an even number of hex digits) means, decoded a
    piece at a time; None for anything else — whitespace, a bad digit, the escape format — which
    is written back for the engine to read (or refuse: 22P02) as PostgreSQL does."""
    if value.binary or not value.pieces or not value.pieces[0].startswith(b"\\x"):
        return None
    out: list[bytes] = []
    carry = b""
    for k, piece in enumerate(value.pieces):
        digits = carry + (piece[2:] if k == 0 else piece)
        if not _HEX.fullmatch(digits):
            return None
        even = len(digits) & ~1
        out.append(bytes.fromhex(digits[:even].decode("ascii")))
        carry = digits[even:]
    if carry:
        return None
    return BigText(tuple(out), sum(map(len, out)), 0, binary=True)


def value_places(columns: dict[str, str], alias: str, inserted: list[str] | None = None,
                 ) -> Callable[[exp.Parameter], str | None]:
    """What each of a DML statement's parameters is to PostgreSQL where it reads the untyped
    literal so ("text", "bytea"; None: not known here), outside any subquery (`columns`: the
    target's text and varchar columns as "text", its bytea columns as "bytea", the columns a
    string is cast to when assigned as "assigned"; `alias`: the name
    its rows go by; `inserted`: an INSERT's target columns, in order, or for a MERGE the target's):

    - a column's value, its type: `SET c = $n`, a VALUES row's or a top-level INSERT … SELECT
      item's place, a MERGE's INSERT value ("text" too for a column that is "assigned": the
      string is cast to the column's type as the literal's string was);
    - "text" for an operand of a comparison, LIKE or `||` whose other operand is a text column
      of the target, a string literal or a `||` of them (`'a' || '<big>'`), or for `||` a number;
    - the integer type's name ("smallint", "integer", "bigint": `INTEGER_TYPES`) for an operand
      of a comparison whose other operand is an integer column of the target (PostgreSQL reads
      the literal with that type's input function: a cast to it, its 22P02 quoting the value);
    - "text" for a string argument of a string function (`_text_arguments`).

    Anything else (another column type, another function's argument, a subquery) is not known
    here: its literal is written back (`settled`)."""
    from sqlglot import exp

    comparisons = (exp.EQ, exp.NEQ, exp.GT, exp.GTE, exp.LT, exp.LTE)
    operators = (*comparisons, exp.Like, exp.ILike, exp.DPipe)
    text_arguments = _text_arguments()

    def target_text(node: exp.Expression | None) -> bool:
        return (isinstance(node, exp.Column) and columns.get(node.name) == "text"
                and node.table in ("", alias))

    def text_operand(node: exp.Expression | None) -> bool:
        """Text to PostgreSQL whatever else is around: a text column of the target, a string
        literal (unknown beside unknown resolves as text), a `||` of either."""
        while isinstance(node, exp.Paren):
            node = node.this
        if isinstance(node, exp.DPipe):
            return text_operand(node.this) or text_operand(node.expression)
        return target_text(node) or (isinstance(node, exp.Literal) and node.is_string)

    def assigned(name: str) -> str | None:
        kind = columns.get(name)
        return "text" if kind == "assigned" or kind in INTEGER_TYPES else kind

    def target_integer(node: exp.Expression | None) -> str | None:
        while isinstance(node, exp.Paren):
            node = node.this
        if isinstance(node, exp.Column) and node.table in ("", alias) and columns.get(node.name) in INTEGER_TYPES:
            return columns[node.name]
        return None

    def place(node: exp.Parameter) -> str | None:
        parent = node.parent
        if parent is None or node.find_ancestor(exp.Subquery) is not None:
            return None
        if isinstance(parent, exp.EQ) and parent.arg_key == "expressions" and isinstance(parent.parent, exp.Update):
            return assigned(parent.this.name) if node.arg_key == "expression" else None
        if isinstance(parent, operators):
            other = parent.this if node.arg_key == "expression" else parent.expression
            if isinstance(parent, exp.DPipe) and isinstance(other, exp.Literal) and not other.is_string:
                return "text"  # (`anynonarray || text`: a number beside it leaves the literal text)
            if text_operand(other):
                return "text"
            if not isinstance(parent, comparisons) or node.find_ancestor(exp.Select) is not None:
                return None  # (an INSERT … SELECT's columns are its source's, not the target's)
            return target_integer(other)
        if isinstance(parent, exp.Tuple) and node.arg_key == "expressions":
            if isinstance(parent.parent, exp.Values) and isinstance(parent.parent.parent, exp.Insert):
                names: list[str] | None = inserted
            elif isinstance(parent.parent, exp.Insert) and parent.arg_key == "expression":
                written = parent.parent.this  # a MERGE's INSERT: its column list, else `inserted`
                names = [c.name for c in written.expressions] if isinstance(written, exp.Tuple) else inserted
            else:
                return None
            return assigned(names[node.index]) if names is not None and node.index < len(names) else None
        if (isinstance(parent, exp.Select) and node.arg_key == "expressions" and inserted is not None
                and isinstance(parent.parent, exp.Insert) and parent.find_ancestor(exp.Select) is None):
            return assigned(inserted[node.index]) if node.index < len(inserted) else None
        if node.arg_key in text_arguments.get(type(parent), ()):
            return "text"
        return None

    return place


def _text_arguments() -> dict[type, frozenset[str]]:
    """String functions by sqlglot's class, and the arguments of each that PostgreSQL reads an
    untyped literal in as text: where the function's candidates take text there (and perhaps
    bytea, bit or bpchar: `md5`, `length`, `substring`, `btrim`), PostgreSQL's resolution of
    an unknown argument picks the string category's preferred type, text (the manual's "Type
    Conversion: Functions", step 4.e). Counts, positions and other non-string arguments are
    left out: a literal there is a number to PostgreSQL."""
    from sqlglot import exp

    this = frozenset({"this"})
    return {exp.Upper: this, exp.Lower: this, exp.Length: this, exp.MD5: this, exp.Initcap: this,
            exp.Reverse: this, exp.Ascii: this, exp.Substring: this, exp.Left: this, exp.Right: this,
            exp.Repeat: this, exp.Trim: frozenset({"this", "expression"}),
            exp.Replace: frozenset({"this", "expression", "replacement"}),
            exp.StrPosition: frozenset({"this", "substr"}), exp.SplitPart: frozenset({"this", "delimiter"}),
            exp.Pad: frozenset({"this", "fill_pattern"}), exp.StartsWith: frozenset({"this", "expression"}),
            # (VARIADIC "any": the literal reaches the function as its text)
            exp.Concat: frozenset({"expressions"}), exp.ConcatWs: frozenset({"expressions"})}


def _reading(text: str, tables: dict[tuple[str, bool], str]) -> str:
    """`text` with each `$n` named in `tables` a scalar subquery over its table, and each
    `big_param_<n>` table (`joined`) its table."""
    out, pos = [], 0
    for kind, start, end in scan(text):
        word = text[start:end]
        if kind is Kind.PARAM and (word[1:], False) in tables:
            quoted = ".".join(f'"{part}"' for part in tables[word[1:], False].split("."))
            out.append(f"{text[pos:start]}(select {_COLUMN} from {quoted})")
            pos = end
        elif kind is Kind.NAME and word.startswith(_JOINED) and (word[len(_JOINED):], True) in tables:
            out.append(f'{text[pos:start]}"{tables[word[len(_JOINED):], True].rsplit(".", 1)[1]}"')
            pos = end
    out.append(text[pos:])
    return "".join(out)
