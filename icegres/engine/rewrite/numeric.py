"""numeric division and avg() with PostgreSQL's digits, not DataFusion's four more than the input.

DataFusion gives `a / b` and `avg(a)` of a decimal the dividend's scale plus 4, truncated:
`2.00::numeric(15,2) / 3` was 0.666666 and avg() of a numeric(15,2) column six decimals, where
PostgreSQL answers 0.66666666666666666667 (TPC-H Q1 failed at 1e-6). PostgreSQL's numeric_div
chooses the result scale per value (at least 16 significant digits, and never less than either
input's scale), which an Arrow column cannot carry. Here both yield scale max(20, s1, s2),
rounded half away from zero as PostgreSQL rounds: PostgreSQL's own scale for every quotient
between 1e-4 and 1, and more digits than it prints (agreeing on every one it prints) above 1.
docs/types.md tabulates the scale of each operation.

The operands' types come from the columns scopes.py bound (their scale noted on the Column)
and the literals and casts of the statement; a division whose operands cannot be told to be
numeric, or where one is floating point, is left to DataFusion (PostgreSQL: numeric / float8 is
float8). The quotient is computed in Decimal256 four digits past the result scale, then cast
down, which rounds.
"""

from __future__ import annotations

from decimal import Decimal, InvalidOperation

from sqlglot import exp

from icegres.engine.rewrite.scopes import DECIMAL_SCALE, FLOAT
from icegres.engine.rewrite.tree import _bottom_up, _call, _Rewriter

MIN_QUOTIENT_SCALE = 20
_WIDE_PRECISION = 76  # Decimal256: PostgreSQL's numeric has no 38-digit ceiling


def numeric_division(tree: exp.Expression, rw: _Rewriter) -> exp.Expression:
    """`a / b` and `avg(a)` over numeric operands, at PostgreSQL's scale (module docstring)."""

    def fn(node: exp.Expression) -> exp.Expression:
        if isinstance(node, exp.Div) and not (_is_float(node.this) or _is_float(node.expression)):
            scales = [scale_of(node.this), scale_of(node.expression)]
            if any(s is not None for s in scales):
                result = max(MIN_QUOTIENT_SCALE, *(s or 0 for s in scales))
                quotient = node.copy()  # keeps `typed`: as PostgreSQL reads it, not float division
                quotient.set("this", _cast(node.this, result + 4))
                if _is_decimal_literal(node.expression):
                    quotient.set("expression", _cast(node.expression, scales[1] or 0))
                return _cast(quotient, result)
        if isinstance(node, exp.Avg) and not _is_float(node.this):
            scale = scale_of(node.this)
            if scale is not None:
                result = max(MIN_QUOTIENT_SCALE, scale)
                return _cast(exp.Avg(this=_cast(node.this, result, precision=60)), result)
        return node

    return _bottom_up(tree, fn)


def _cast(value: exp.Expression, scale: int, precision: int = _WIDE_PRECISION) -> exp.Expression:
    if _is_decimal_literal(value):
        # DataFusion reads 7.0 as a double; PostgreSQL, as the numeric it spells exactly
        value = exp.Literal.string(value.this)
    call = _call("arrow_cast", value, exp.Literal.string(f"Decimal256({precision}, {scale})"))
    call.meta[DECIMAL_SCALE] = scale
    return call


def scale_of(node: exp.Expression) -> int | None:
    """The scale of a numeric-valued expression; None if it is not numeric or not known to be."""
    known = node.meta.get(DECIMAL_SCALE) if node.meta else None
    if known is not None:
        return int(known)
    if isinstance(node, exp.Literal) and not node.is_string:
        try:
            exponent = Decimal(node.this).as_tuple().exponent
        except InvalidOperation:
            return None
        return -exponent if isinstance(exponent, int) and ("." in node.this) else None
    if isinstance(node, exp.Paren | exp.Neg | exp.Abs | exp.Sum | exp.Min | exp.Max):
        return scale_of(node.this)
    if isinstance(node, exp.Cast):
        to = node.to
        if to.this != exp.DataType.Type.DECIMAL:
            return None
        params = [p.this for p in to.expressions if isinstance(p, exp.DataTypeParam)]
        if len(params) == 2 and isinstance(params[1], exp.Literal):
            return int(params[1].this)
        return 0 if params else 10  # numeric(p): scale 0; bare numeric: DataFusion's (38, 10)
    if isinstance(node, exp.Add | exp.Sub | exp.Mul):
        a, b = scale_of(node.this), scale_of(node.expression)
        if a is None and b is None:
            return None
        if _is_float(node.this) or _is_float(node.expression):
            return None
        return (a or 0) + (b or 0) if isinstance(node, exp.Mul) else max(a or 0, b or 0)
    if isinstance(node, exp.Coalesce):
        scales = [scale_of(e) for e in (node.this, *node.expressions)]
        return max((s for s in scales if s is not None), default=None)
    return None


def _is_decimal_literal(node: exp.Expression) -> bool:
    return isinstance(node, exp.Literal) and not node.is_string and scale_of(node) is not None


def _is_float(node: exp.Expression) -> bool:
    if node.meta and node.meta.get(FLOAT):
        return True
    if isinstance(node, exp.Paren | exp.Neg):
        return _is_float(node.this)
    if isinstance(node, exp.Cast):
        return node.to.this in (exp.DataType.Type.DOUBLE, exp.DataType.Type.FLOAT)
    return False
