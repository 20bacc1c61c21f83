"""Integer `+ - *` (and negation) in the values an UPDATE assigns, computed so that overflow is 22003, not a
wrapped value written to the table.

DataFusion 55's integer kernels wrap on overflow (docs/limitations.md): `SET big = big + 1` at
2^63-1 stored -2^63. In a query the wrapped value is one wrong answer; in an assignment it
outlives the statement. So each `+ - *` that DataFusion types as an integer is computed in
numeric(38,0), which holds any product of two bigints, and cast back to its integer type: that
cast fails on a value the type cannot hold.

Pure: the caller plans the nodes to learn their types (`arithmetic_nodes` -> its planner ->
`check_overflow`).
"""

from __future__ import annotations

import pyarrow as pa
from sqlglot import exp

_ARITHMETIC = (exp.Add, exp.Sub, exp.Mul, exp.Neg)
_WIDE = "DECIMAL(38, 0)"
_INTEGER_TYPES = {pa.int8(): "SMALLINT", pa.int16(): "SMALLINT", pa.int32(): "INT", pa.int64(): "BIGINT",
                  pa.uint8(): "SMALLINT", pa.uint16(): "INT", pa.uint32(): "BIGINT"}


def arithmetic_nodes(value: exp.Expression) -> list[exp.Expression]:
    """The `+ - *` and negation nodes of `value` (not negative literals) outside its subqueries (a subquery's own arithmetic is a
    query's), innermost first, so that replacing them in order leaves every outer node whole."""
    found = [node for node in value.find_all(*_ARITHMETIC)
             if _within(node, value) and not (isinstance(node, exp.Neg) and isinstance(node.this, exp.Literal))]
    return sorted(found, key=lambda node: -node.depth)


def _within(node: exp.Expression, value: exp.Expression) -> bool:
    """Whether no subquery stands between `node` and `value` (`value` itself included)."""
    if node is value:
        return True
    parent = node.parent
    while parent is not None and parent is not value:
        if isinstance(parent, exp.Subquery | exp.Select):
            return False
        parent = parent.parent
    return True


def check_overflow(nodes: list[exp.Expression], types: list[pa.DataType]) -> None:
    """Replace, in place, each node of `nodes` that `types` (DataFusion's, one per node) says is
    an integer by the same operation over numeric(38,0), cast back to that integer type."""
    for node, result in zip(nodes, types, strict=True):
        name = _INTEGER_TYPES.get(result)
        if name is None:
            continue  # a date, an interval, a fraction, a uint64: not wrapped, or not ours to bound
        if isinstance(node, exp.Neg):  # -(-2^63) wraps too
            wide: exp.Expression = exp.Neg(this=_widened(node.this))
        else:
            wide = type(node)(this=_widened(node.left), expression=_widened(node.right))
        node.replace(exp.Cast(this=exp.Paren(this=wide), to=exp.DataType.build(name)))


def _widened(operand: exp.Expression) -> exp.Expression:
    return exp.Cast(this=operand.copy(), to=exp.DataType.build(_WIDE))
