"""sqlglot rewrites that make real clients' catalog SQL plannable by DataFusion.

`rewrite(tree, env)` takes a statement parsed by `parse` (sqlglot's postgres dialect, taught
`$1::oid[]`) and returns a tree that, written out by `to_sql`, DataFusion 55 plans against the
relations of pg_catalog.py and the functions of pg_functions.py. Each rewrite is a small function
naming the client that sends the construct, run in the order of `_STEPS`;
tests/unit/test_pg_catalog.py runs every statement real clients sent to PostgreSQL 15.

The output depends on env.search_path (regclass literals) and on the catalog, so cache it per
(statement, search_path) and forget it when the catalog changes. Top-level computed columns come
out aliased with the names PostgreSQL gives them (`pg_output_names`).

env: search_path, and optionally catalog_snapshot (see pg_catalog.current_index) and
relation_oid(schema, name).
"""

from __future__ import annotations

import re
import uuid
from collections.abc import Callable
from decimal import Decimal
from typing import Any

from sqlglot import exp
from sqlglot.dialects.postgres import Postgres
from sqlglot.tokens import TokenType

from icegres.engine import pg_catalog
from icegres.engine.pg_functions import FUNCTION_DEFAULTS
from icegres.pg.errors import (
    FEATURE_NOT_SUPPORTED,
    UNDEFINED_OBJECT,
    UNDEFINED_TABLE,
    PgError,
)


class IcegresPostgres(Postgres):
    """sqlglot's postgres dialect, plus `::oid[]` (and the other reg* arrays).

    sqlglot parses `x::oid` but stops at the `[]` after an OID-like type; asyncpg's type
    introspection sends `ti.oid = any($1::oid[])`.
    """

    class Parser(Postgres.Parser):
        # to_char's template stays as written: sqlglot's own translation of it is lossy ('Day'
        # became '%uay'); `to_char_formats` spells it for DataFusion (to_char.py).
        FUNCTIONS = {**Postgres.Parser.FUNCTIONS,
                     "TO_CHAR": lambda args: exp.Anonymous(this="to_char", expressions=args),
                     "TO_DATE": lambda args: exp.Anonymous(this="to_date", expressions=args),
                     "TO_TIMESTAMP": lambda args: (exp.Anonymous(this="to_timestamp", expressions=args)
                                                   if len(args) == 2 else exp.UnixToTime(this=args[0]))}

        def _parse_types(self, *args: Any, **kwargs: Any) -> exp.Expr | None:
            this = super()._parse_types(*args, **kwargs)
            if isinstance(this, exp.ObjectIdentifier) and self._match_pair(
                TokenType.L_BRACKET, TokenType.R_BRACKET
            ):
                return exp.DataType(this=exp.DType.ARRAY, expressions=[this], nested=True)
            return this


DIALECT = IcegresPostgres


def parse(sql: str) -> exp.Expression:
    """Parse one statement the way `rewrite` expects it."""
    import sqlglot

    tree = sqlglot.parse_one(sql, read=DIALECT)
    if tree is None:
        raise ValueError("empty statement")
    return tree


def to_sql(tree: exp.Expression) -> str:
    """SQL text for DataFusion: function names in lower case, which its table functions need
    (sqlglot upper-cases them by default, and DataFusion finds no table function GENERATE_SERIES),
    and PostgreSQL's typed literals spelled so that DataFusion reads the same values
    (`typed_literals`). `tree` is left untouched."""
    return typed_literals(tree).sql(dialect="postgres", normalize_functions="lower")


# --- typed literals -----------------------------------------------------------------------------
#
# Every statement that reaches DataFusion through sqlglot is written by `to_sql`: the rewrite path
# and every INSERT / UPDATE (dml.py renders its parts with it). So the literal fixes live there.


def typed_literals(tree: exp.Expression) -> exp.Expression:
    """A copy of `tree` with the literals DataFusion would misread spelled exactly (else `tree`).

    - `'\\x00ff'::bytea` and `'a\\000b'::bytea`: byteain's hex and escape formats (DataFusion
      would take the text's own bytes), as a binary literal; bad input fails with byteain's
      SQLSTATE (22023 for bad hex, 22P02 for a bad escape);
    - `'a0eebc99-...'::uuid`: a FixedSizeBinary(16) literal, icegres's uuid (DataFusion has none);
    - unquoted numeric literals in the values an INSERT or UPDATE assigns: numeric, as in
      PostgreSQL, where DataFusion plans float64 (`1234567890123456789.0123456789` would be
      stored as ...768.0, `123456789.1` in numeric(38,10) as 123456789.0999999940).

    Numeric literals elsewhere stay float64 on purpose: DataFusion coerces a comparison, CASE or
    COALESCE of a double column with a decimal to the decimal's type, which overflows or cuts
    digits of the column's values (`fare > 0.5` fails on a fare of 1e20).
    """
    assigned = _assignment(tree)
    if not _typed_literal_sites(tree, assigned):
        return tree
    tree = tree.copy()  # the copy has no parent: `assigned` says where it stood
    for node, replacement in _typed_literal_sites(tree, assigned):
        if node is tree:
            return replacement
        node.replace(replacement)
    return tree


def _typed_literal_sites(
    tree: exp.Expression, assigned: str | None
) -> list[tuple[exp.Expression, exp.Expression]]:
    """(node, what DataFusion must read instead) for every literal `typed_literals` fixes."""
    sites: list[tuple[exp.Expression, exp.Expression]] = []
    for cast in tree.find_all(exp.Cast):
        value = cast.this
        if not (isinstance(value, exp.Literal) and value.is_string):
            continue
        target = _type_name(cast.to)
        if target in ("bytea", "varbinary"):
            sites.append((cast, _bytea_literal(value.this)))
        elif target == "uuid":
            sites.append((cast, _uuid_literal(value.this)))
        elif target in _CLOCK_TYPES and (seconds := _with_seconds(value.this)) is not None:
            sites.append((value, exp.Literal.string(seconds)))
    for node, room in _assigned_values(tree, assigned):
        number = exact_number(node, room=room)
        if number is not None:
            sites.append((node, number))
    return sites


_CLOCK_TYPES = frozenset({"timestamp", "timestamptz", "time"})
# A time of day to the minute, PostgreSQL's input takes it; Arrow's parser wants the seconds.
_TO_THE_MINUTE = re.compile(r"^(\s*(?:\d{4,}-\d{1,2}-\d{1,2}[ T])?\d{1,2}:\d{2})(?=$|[\s+\-zZ])")


def _with_seconds(text: str) -> str | None:
    """`text` with ':00' after its minutes when it gives a time to the minute (else None)."""
    found = _TO_THE_MINUTE.match(text)
    return None if found is None else found.group(1) + ":00" + text[found.end():]


def _bytea_literal(text: str) -> exp.Expression:
    from icegres.pg.params import decode_param
    from icegres.pg.types import BYTEA

    data = decode_param(text.encode("utf-8"), BYTEA.oid, 0)
    assert isinstance(data, bytes)
    return exp.HexString(this=data.hex())


def _uuid_literal(text: str) -> exp.Expression:
    from icegres.pg.params import decode_param
    from icegres.pg.types import UUID

    value = decode_param(text.encode("utf-8"), UUID.oid, 0)
    assert isinstance(value, uuid.UUID)
    return _call("arrow_cast", exp.HexString(this=value.hex), exp.Literal.string("FixedSizeBinary(16)"))


def _assignment(tree: exp.Expression) -> str | None:
    """Whether `tree` is what an INSERT inserts ("insert") or an UPDATE SET assigns ("update").

    dml.py renders an INSERT's source (VALUES or SELECT) and each UPDATE SET value separately,
    each still attached to its statement.
    """
    parent = tree.parent
    if isinstance(parent, exp.Insert) and tree.arg_key == "expression":
        return "insert"
    if isinstance(parent, exp.EQ) and isinstance(parent.parent, exp.Update) and tree.arg_key == "expression":
        return "update"
    return None


def _assigned_values(tree: exp.Expression, assigned: str | None) -> list[tuple[exp.Expression, bool]]:
    """The expressions of `tree` that are values assigned to a column, each with whether its
    type must leave room for the column's values too.

    The UPDATE value becomes `CASE WHEN hit THEN value ELSE column END`, whose planned type is the
    THEN branch's (DataFusion's schema says numeric(2,1) for `THEN 1.5 ELSE numeric_column`), and
    a decimal there makes DataFusion turn a double column into a decimal for every row of the file.
    """
    if assigned == "update":
        return [(tree, True)]
    if assigned != "insert":
        return []
    if isinstance(tree, exp.Values):
        return [(v, False) for row in tree.expressions if isinstance(row, exp.Tuple) for v in row.expressions]
    if isinstance(tree, exp.Select):
        return [(item.this if isinstance(item, exp.Alias) else item, False) for item in tree.expressions]
    return []  # a UNION's branches would coerce a double column to the literal's decimal


# DataFusion's decimals: Decimal128 up to 38 digits, Decimal256 up to 76.
_DECIMAL_DIGITS_MAX = 76
_INT64 = range(-(2**63), 2**63)


def exact_number(node: exp.Expression, *, room: bool) -> exp.Expression | None:
    """A numeric literal (maybe negated) as an exact decimal, if DataFusion's float64 (or
    UInt64) reading would differ from PostgreSQL's numeric; else None.

    `room`: when the literal meets the target column in a CASE (UPDATE), whose type icegres does
    not know here, only literals float64 cannot even spell are changed (a decimal would damage a
    double column), and to a decimal wide enough for the column's values. A literal float64 does
    spell still reaches a numeric column through DataFusion's float-to-decimal cast (`SET n =
    123456789.1` stores 123456789.0999999956): only the UPDATE code, which knows the column, can
    cast it to the column's type.
    """
    negative = isinstance(node, exp.Neg)
    literal = node.this if negative else node
    if not (isinstance(literal, exp.Literal) and not literal.is_string):
        return None
    text = str(literal.this)
    try:
        value = Decimal(text)
    except ArithmeticError:
        return None
    if not value.is_finite():
        return None
    value = value.copy_negate() if negative else value  # exact: `-value` rounds to 28 digits
    if value == value.to_integral_value() and "." not in text and "e" not in text.lower():
        if int(value) in _INT64:
            return None  # an integer DataFusion reads exactly
    elif room and Decimal(repr(float(value))) == value:
        return None  # its shortest float64 spelling is the literal
    _, digits, exponent = value.as_tuple()
    assert isinstance(exponent, int)
    scale = max(-exponent, 0)
    precision = max(len(digits) + max(exponent, 0), scale, 1)
    if precision > _DECIMAL_DIGITS_MAX:
        return None  # beyond DataFusion's decimals: float64 is the best it can do
    if room:
        precision = max(precision, 38)
    decimal = exp.DataType.build(f"DECIMAL({precision}, {scale})")
    return exp.Cast(this=exp.Literal.string(f"{value:f}"), to=decimal)


def rewrite(expression: exp.Expression, env: Any) -> exp.Expression:
    """Return a copy of `expression` that DataFusion can plan; `expression` is left untouched."""
    tree = expression.copy()
    rw = _Rewriter(env, tree)
    for step in _STEPS:
        tree = step(tree, rw)
    return tree


class _Rewriter:
    """What every step may need: the session, and facts gathered from the whole statement."""

    def __init__(self, env: Any, tree: exp.Expression) -> None:
        self.env = env
        self.cte_names = {cte.alias_or_name.lower() for cte in tree.find_all(exp.CTE)}
        self.zero_based = _zero_based_names(tree)
        self.output_names = pg_output_names(tree)

    @property
    def search_path(self) -> list[str]:
        return list(getattr(self.env, "search_path", ["public"]))


def _bottom_up(node: exp.Expression, fn: Callable[[exp.Expression], exp.Expression]) -> exp.Expression:
    """Apply fn to every node, children before parents (a parent sees its rewritten children).

    fn sees node.parent as it was, so a rewrite can look at its context.
    """
    for key, value in list(node.args.items()):
        if isinstance(value, exp.Expression):
            new = _bottom_up(value, fn)
            if new is not value:
                node.set(key, new)
        elif isinstance(value, list):
            items = [_bottom_up(v, fn) if isinstance(v, exp.Expression) else v for v in value]
            if any(a is not b for a, b in zip(items, value, strict=True)):
                node.set(key, items)
    return fn(node)


def _call(name: str, *args: exp.Expression) -> exp.Anonymous:
    return exp.Anonymous(this=name, expressions=list(args))


def _func_name(node: exp.Expression) -> str | None:
    if isinstance(node, exp.Anonymous):
        return str(node.this).lower()
    if isinstance(node, exp.Func):
        return node.sql_name().lower()
    return None


# --- names ------------------------------------------------------------------------------------


def qualify_catalog_tables(tree: exp.Expression, rw: _Rewriter) -> exp.Expression:
    """pg_class -> pg_catalog.pg_class: PostgreSQL searches pg_catalog first, implicitly.

    Every client except psql sends some unqualified (psycopg: `FROM pg_type t`).
    """
    for table in tree.find_all(exp.Table):
        if isinstance(table.this, exp.Identifier) and not table.args.get("db"):
            name = table.name.lower()
            if name in pg_catalog.CATALOG_RELATION_NAMES and name not in rw.cte_names:
                table.set("db", exp.to_identifier("pg_catalog"))
    return tree


def strip_function_schemas(tree: exp.Expression, rw: _Rewriter) -> exp.Expression:
    """pg_catalog.format_type(...) -> format_type(...): psql qualifies every function it calls."""

    def fn(node: exp.Expression) -> exp.Expression:
        if (
            isinstance(node, exp.Dot)
            and isinstance(node.this, exp.Identifier)
            and node.this.name.lower() in ("pg_catalog", "information_schema")
            and isinstance(node.expression, exp.Func)
        ):
            return node.expression
        if isinstance(node, exp.Table) and not isinstance(node.this, exp.Identifier):
            # FROM pg_catalog.generate_series(1, 32) pos(n)   (pgjdbc getImportedKeys)
            if node.args.get("db") and node.text("db").lower() == "pg_catalog":
                node.set("db", None)
        return node

    return _bottom_up(tree, fn)


def set_returning_functions(tree: exp.Expression, rw: _Rewriter) -> exp.Expression:
    """generate_series / unnest as PostgreSQL means them, wherever they stand.

    In FROM (pgjdbc getImportedKeys: `pg_catalog.generate_series(1, 32) pos(n)`) they become the
    lower-case calls DataFusion's table functions answer to; in a select list (psqlODBC
    foreignKeys: `generate_series(array_lower(conkey, 1), ...) as i`) PostgreSQL expands rows,
    while DataFusion's scalar generate_series returns a list, so it is unnested.
    """

    def fn(node: exp.Expression) -> exp.Expression:
        if not isinstance(node, exp.ExplodingGenerateSeries):
            return node
        args = [a for a in (node.args.get("start"), node.args.get("end"), node.args.get("step")) if a]
        series = _call("generate_series", *args)
        return series if isinstance(node.parent, exp.Table) else exp.Unnest(expressions=[series])

    tree = _bottom_up(tree, fn)
    for table in tree.find_all(exp.Table):
        if isinstance(table.this, exp.Explode):
            table.set("this", _call("unnest", table.this.this))
        if _func_name(table.this) == "generate_series":
            _name_series_column(table)
    for unnest in tree.find_all(exp.Unnest):
        alias = unnest.args.get("alias")
        # unnest(array) u in FROM: one column, named u (PostgreSQL names a scalar function's
        # column after the table alias).
        if alias is not None and alias.this and not alias.columns and len(unnest.expressions) == 1:
            alias.set("columns", [alias.this.copy()])
    return tree


def _name_series_column(table: exp.Table) -> None:
    """PostgreSQL names the column of `generate_series(...) g` after its alias, and of a bare
    `generate_series(...)` after the function; DataFusion calls it `value` either way."""
    alias = table.args.get("alias")
    if alias is not None and alias.columns:
        return
    name = alias.this.copy() if alias is not None and alias.this else exp.to_identifier("generate_series")
    table.set("alias", exp.TableAlias(this=name, columns=[name.copy()]))


_TEMPLATED = frozenset({"to_char", "to_date", "to_timestamp"})


def to_char_formats(tree: exp.Expression, rw: _Rewriter) -> exp.Expression:
    """to_char(value, 'YYYY-MM-DD') -> to_char(value, '%Y-%m-%d'), and to_date / to_timestamp
    (text, template) likewise: DataFusion reads the template as chrono's (to_char.py). A template
    that is no constant cannot be spelled before it runs: refused (0A000), where DataFusion would
    have printed it back as chrono text."""
    from icegres.engine.to_char import chrono_format

    def fn(node: exp.Expression) -> exp.Expression:
        name = _func_name(node) if isinstance(node, exp.Anonymous) else None
        if name not in _TEMPLATED or len(node.expressions) != 2:
            return node
        value, template = node.expressions
        if not (isinstance(template, exp.Literal) and template.is_string):
            raise PgError(FEATURE_NOT_SUPPORTED, f"{name} with a template that is not a constant is not supported")
        return _call(name, value, exp.Literal.string(chrono_format(template.this)))

    return _bottom_up(tree, fn)


def postgres_semantics(tree: exp.Expression, rw: _Rewriter) -> exp.Expression:
    """Constructs DataFusion runs, but otherwise than PostgreSQL (found by a differential run
    against PostgreSQL 15):
    - extract(second from t) keeps the fraction (DataFusion's date_part gave whole seconds);
    - x SIMILAR TO 'a%' is SQL's regular expression, anchored (DataFusion matched it as a regex
      as written: 'abc' SIMILAR TO 'a%' was false);
    - array_remove removes every match (DataFusion's removes the first);
    - FETCH FIRST n ROWS ONLY is LIMIT n (DataFusion refused it)."""

    def fn(node: exp.Expression) -> exp.Expression:
        if isinstance(node, exp.Extract) and node.this.name.lower() in ("second", "seconds"):
            micros = exp.Extract(this=exp.var("MICROSECOND"), expression=node.expression)
            return exp.Div(this=micros, expression=exp.Literal.number("1e6"))
        if isinstance(node, exp.Escape) and isinstance(node.this, exp.SimilarTo):
            return _similar(node.this, node.expression)
        if isinstance(node, exp.SimilarTo) and not isinstance(node.parent, exp.Escape):
            return _similar(node, None)
        if isinstance(node, exp.ArrayRemove):
            return _call("array_remove_all", node.this, node.expression)
        if isinstance(node, exp.Fetch):
            options = node.args.get("limit_options")
            if options is not None and (options.args.get("with_ties") or options.args.get("percent")):
                raise PgError(FEATURE_NOT_SUPPORTED, "FETCH ... WITH TIES (or PERCENT) is not supported")
            return exp.Limit(expression=node.args.get("count") or exp.Literal.number(1))
        return node

    return _bottom_up(tree, fn)


def _similar(node: exp.SimilarTo, escape: exp.Expression | None) -> exp.Expression:
    from icegres.engine.similar_to import similar_to_regex

    pattern = node.expression
    if not (isinstance(pattern, exp.Literal) and pattern.is_string) or (
            escape is not None and not (isinstance(escape, exp.Literal) and escape.is_string)):
        raise PgError(FEATURE_NOT_SUPPORTED, "SIMILAR TO with a pattern that is not a constant is not supported")
    regex = similar_to_regex(pattern.this, "\\" if escape is None else escape.this)
    return exp.RegexpLike(this=node.this, expression=exp.Literal.string(regex))


# CURRENT_USER and SESSION_USER DataFusion already calls as functions (ours: pg_functions).
_SESSION_KEYWORDS: dict[type[exp.Expression], str] = {
    exp.CurrentSchema: "current_schema",
    exp.CurrentCatalog: "current_database",
}


def session_keywords(tree: exp.Expression, rw: _Rewriter) -> exp.Expression:
    """CURRENT_SCHEMA, current_catalog, user -> function calls.

    DataFusion reads them as column names (ibis: SELECT CURRENT_SCHEMA; pgjdbc: current_catalog).
    """

    def fn(node: exp.Expression) -> exp.Expression:
        name = _SESSION_KEYWORDS.get(type(node))
        if name is not None:
            return _call(name)
        if (
            isinstance(node, exp.Column)
            and not node.table
            and not node.this.args.get("quoted")
            and node.name.lower() == "user"
        ):
            return exp.CurrentUser()
        return node

    return _bottom_up(tree, fn)


# --- operators ----------------------------------------------------------------------------------


def drop_collate(tree: exp.Expression, rw: _Rewriter) -> exp.Expression:
    """`x COLLATE pg_catalog.default` -> x: psql adds it to every name pattern; DataFusion compares
    strings bytewise, which is what the C collation of icegres's database does anyway."""
    return _bottom_up(tree, lambda n: n.this if isinstance(n, exp.Collate) else n)


def _not(cls: type[exp.Expression]) -> Callable[[exp.Expression, exp.Expression], exp.Expression]:
    return lambda a, b: exp.Not(this=cls(this=a, expression=b))


_OPERATORS: dict[str, Callable[[exp.Expression, exp.Expression], exp.Expression]] = {
    "~": lambda a, b: exp.RegexpLike(this=a, expression=b),
    "~*": lambda a, b: exp.RegexpILike(this=a, expression=b),
    "!~": _not(exp.RegexpLike),
    "!~*": _not(exp.RegexpILike),
    "~~": lambda a, b: exp.Like(this=a, expression=b),
    "!~~": _not(exp.Like),
    "=": lambda a, b: exp.EQ(this=a, expression=b),
    "<>": lambda a, b: exp.NEQ(this=a, expression=b),
}


def explicit_operators(tree: exp.Expression, rw: _Rewriter) -> exp.Expression:
    """`a OPERATOR(pg_catalog.~) b` -> `a ~ b` (psql \\d with a pattern)."""

    def fn(node: exp.Expression) -> exp.Expression:
        if isinstance(node, exp.Operator):
            op = str(node.args.get("operator", "")).split(".")[-1].strip()
            make = _OPERATORS.get(op)
            if make is not None:
                return make(node.this, node.expression)
        return node

    return _bottom_up(tree, fn)


def like_escape(tree: exp.Expression, rw: _Rewriter) -> exp.Expression:
    """`LIKE p ESCAPE '/'` -> `LIKE pg_like_escape(p, '/')`: DataFusion knows only backslash.

    SQLAlchemy's get_schema_names sends `NOT LIKE 'pg/_' || '%' ESCAPE '/'` (psycopg: with the
    'pg/_' as a parameter), so the pattern is translated when the query runs.
    """

    def fn(node: exp.Expression) -> exp.Expression:
        if not isinstance(node, exp.Escape) or not isinstance(node.this, (exp.Like, exp.ILike)):
            return node
        like = node.this
        like.set("expression", _call("pg_like_escape", like.expression, node.expression))
        return like

    return _bottom_up(tree, fn)


_BOOL_TEXT = {"t": True, "true": True, "f": False, "false": False}


def boolean_literals(tree: exp.Expression, rw: _Rewriter) -> exp.Expression:
    """`i.indisprimary = 't'` -> `= true`: PostgreSQL reads the literal as bool, DataFusion can't
    compare bool with text (psqlODBC primaryKeys)."""

    def fn(node: exp.Expression) -> exp.Expression:
        if isinstance(node, (exp.EQ, exp.NEQ)):
            for side, other in (("expression", node.this), ("this", node.expression)):
                lit = node.args.get(side)
                if (
                    isinstance(lit, exp.Literal)
                    and lit.is_string
                    and lit.this.lower() in _BOOL_TEXT
                    and isinstance(other, exp.Column)
                    and other.name.lower() in pg_catalog.BOOL_COLUMNS
                ):
                    node.set(side, exp.Boolean(this=_BOOL_TEXT[lit.this.lower()]))
        return node

    return _bottom_up(tree, fn)


# --- casts --------------------------------------------------------------------------------------


def _type_name(dt: exp.Expression) -> str | None:
    """The PostgreSQL name of a cast target: 'regclass', 'oid[]', 'int2[]', 'text', ..."""
    if isinstance(dt, exp.ObjectIdentifier):
        return str(dt.this).lower()
    if not isinstance(dt, exp.DataType):
        return None
    if dt.this == exp.DType.ARRAY and dt.expressions:
        inner = _type_name(dt.expressions[0])
        return f"{inner}[]" if inner else None
    if dt.this == exp.DType.USERDEFINED:
        kind = dt.args.get("kind")
        if isinstance(kind, exp.Dot):
            schema, name = kind.this, kind.expression
            if isinstance(schema, exp.Identifier) and schema.name.lower() == "pg_catalog":
                return str(name.name if isinstance(name, exp.Identifier) else name).lower()
            return None
        return str(kind.name if isinstance(kind, exp.Identifier) else kind).lower()
    if dt.this == exp.DType.CHAR and not dt.expressions:
        return "char"  # sqlglot loses the quotes of "char"; bpchar(1) is text to us as well
    return dt.this.value.lower()


def _is_texty(node: exp.Expression) -> bool:
    """Whether node surely yields text (a name to resolve, not an OID to keep)."""
    if isinstance(node, (exp.Placeholder, exp.Parameter)):
        return True
    if isinstance(node, exp.Literal):
        return node.is_string
    if isinstance(node, exp.Cast):
        return _type_name(node.to) in ("text", "varchar", "name")
    if isinstance(node, exp.DPipe):
        return True
    return _func_name(node) in ("pg_get_serial_sequence", "quote_ident", "concat", "format")


def _is_projection(node: exp.Expression) -> bool:
    parent = node.parent
    if isinstance(parent, exp.Alias):
        parent = parent.parent
    return isinstance(parent, exp.Select) and node.arg_key in ("expressions", "this")


def _bigint(node: exp.Expression) -> exp.Expression:
    return exp.Cast(this=node, to=exp.DataType.build("BIGINT"))


# A reg* value a query returns prints as a name; compared or joined, it is an OID.


def _regclass(node: exp.Cast, rw: _Rewriter) -> exp.Expression:
    """'demo.trips'::regclass -> its OID; c.oid::regclass returned -> its name.

    psql (\\d: c.oid::pg_catalog.regclass), SQLAlchemy (CAST('pg_catalog.pg_class' AS REGCLASS)),
    CLIENTS.md: CAST($2 AS REGCLASS) with a bound text value.
    """
    value = node.this
    if isinstance(value, exp.Literal) and value.is_string:
        return exp.Literal.number(_resolve_relation(value.this, rw))
    if _is_texty(value):
        return _call("to_regclass", value)
    if _is_projection(node):
        return _call("pg_regclass_out", _bigint(value))
    return _bigint(value)


def _resolve_relation(name: str, rw: _Rewriter) -> int:
    ix = pg_catalog.current_index(rw.env)
    oid = ix.resolve(name, rw.search_path) if ix is not None else None
    if oid is None:
        relation_oid = getattr(rw.env, "relation_oid", None)
        parts = name.split(".")
        if relation_oid is not None and len(parts) == 2:
            oid = relation_oid(parts[0], parts[1])
    if oid is None:
        raise PgError(UNDEFINED_TABLE, f'relation "{name}" does not exist')
    return oid


def _regtype(node: exp.Cast, rw: _Rewriter) -> exp.Expression:
    """'int4'::regtype -> 23; t.oid::regtype::text -> format_type (psycopg TypeInfo, asyncpg)."""
    value = node.this
    if isinstance(value, exp.Literal) and value.is_string:
        oid = pg_catalog.type_oid_by_name(value.this)
        if oid is None:
            raise PgError(UNDEFINED_OBJECT, f'type "{value.this}" does not exist')
        return exp.Literal.number(oid)
    if _is_texty(value):
        return _call("to_regtype", value)
    if _is_projection(node):
        return _call("pg_regtype_out", _bigint(value))
    return _bigint(value)


def _regnamespace(node: exp.Cast, rw: _Rewriter) -> exp.Expression:
    """stxnamespace::pg_catalog.regnamespace::pg_catalog.text (psql \\d)."""
    value = node.this
    if isinstance(value, exp.Literal) and value.is_string:
        return _call("to_regnamespace", value)
    if _is_projection(node):
        return _call("pg_regnamespace_out", _bigint(value))
    return _bigint(value)


def _regproc(node: exp.Cast, rw: _Rewriter) -> exp.Expression:
    """'pg_catalog.array_in'::regproc -> 'array_in': pg_type.typinput & co. hold names here
    (pgjdbc getTypeInfo compares typinput with it)."""
    value = node.this
    if isinstance(value, exp.Literal) and value.is_string:
        name = value.this.split("(")[0].split(".")[-1].strip('"')
        return exp.Literal.string(name)
    return value


def _regrole(node: exp.Cast, rw: _Rewriter) -> exp.Expression:
    value = node.this
    if isinstance(value, exp.Literal) and value.is_string:
        return exp.Literal.number(pg_catalog.BOOTSTRAP_SUPERUSER_OID)
    return _bigint(value)


def _to(type_sql: str) -> Callable[[exp.Cast, _Rewriter], exp.Expression]:
    def retype(node: exp.Cast, rw: _Rewriter) -> exp.Expression:
        return exp.Cast(this=node.this, to=exp.DataType.build(type_sql))

    return retype


# Cast targets DataFusion lacks, by PostgreSQL type name. Everything OID-like is BIGINT here.
_CASTS: dict[str, Callable[[exp.Cast, _Rewriter], exp.Expression]] = {
    "regclass": _regclass,
    "regtype": _regtype,
    "regnamespace": _regnamespace,
    "regproc": _regproc,
    "regprocedure": _regproc,
    "regrole": _regrole,
    "oid": _to("BIGINT"),
    "xid": _to("BIGINT"),
    "regclass[]": _to("BIGINT[]"),
    "regtype[]": _to("BIGINT[]"),
    "oid[]": _to("BIGINT[]"),
    "oidvector": _to("BIGINT[]"),
    "int2vector": _to("SMALLINT[]"),
    "int2[]": _to("SMALLINT[]"),
    "name": _to("TEXT"),
    "name[]": _to("TEXT[]"),
    "char": _to("TEXT"),
    "text": _to("TEXT"),  # spelled pg_catalog.text by psql, which DataFusion doesn't know
    "pg_node_tree": _to("TEXT"),
}

_PG_ARRAY_LITERAL = re.compile(r"^\{(.*)\}$", re.S)


def array_literal(text: str) -> list[str | None] | None:
    """Elements of a one-dimensional PostgreSQL array literal ('{a,"b c",NULL}'), else None."""
    m = _PG_ARRAY_LITERAL.match(text.strip())
    if m is None:
        return None
    body, items, buf, quoted, i = m.group(1), [], [], False, 0
    was_quoted = False
    while i < len(body):
        ch = body[i]
        if ch == "\\" and i + 1 < len(body):
            buf.append(body[i + 1])
            i += 2
            continue
        if ch == '"':
            quoted, was_quoted = not quoted, True
        elif ch == "," and not quoted:
            items.append(_array_item("".join(buf), was_quoted))
            buf, was_quoted = [], False
        elif ch == "{" and not quoted:
            return None  # multi-dimensional: not something clients send to catalogs
        else:
            buf.append(ch)
        i += 1
    if body.strip() or was_quoted:
        items.append(_array_item("".join(buf), was_quoted))
    return items


def _array_item(raw: str, quoted: bool) -> str | None:
    text = raw if quoted else raw.strip()
    return None if not quoted and text.upper() == "NULL" else text


def _make_array(items: list[str | None], numeric: bool) -> exp.Expression:
    def lit(v: str | None) -> exp.Expression:
        if v is None:
            return exp.Null()
        return exp.Literal.number(v) if numeric else exp.Literal.string(v)

    return _call("make_array", *[lit(v) for v in items])


_NUMERIC_ARRAYS = {"int2[]", "int4[]", "int8[]", "int[]", "integer[]", "bigint[]", "smallint[]",
                   "oid[]", "regclass[]", "regtype[]", "int2vector", "oidvector"}


def casts(tree: exp.Expression, rw: _Rewriter) -> exp.Expression:
    """Every cast DataFusion can't do, by target type (see _CASTS)."""

    def fn(node: exp.Expression) -> exp.Expression:
        if not isinstance(node, exp.Cast):
            return node
        name = _type_name(node.to)
        if name is None:
            return node
        value = node.this
        if name.endswith("[]") or name in ("int2vector", "oidvector"):
            items = array_literal(value.this) if isinstance(value, exp.Literal) and value.is_string else None
            if items is not None:  # '{1,2}'::int2[]: DataFusion can't cast text to a list
                return _make_array(items, name in _NUMERIC_ARRAYS)
        rule = _CASTS.get(name)
        return rule(node, rw) if rule is not None else node

    return _bottom_up(tree, fn)


def regclass_text(tree: exp.Expression, rw: _Rewriter) -> exp.Expression:
    """x::regclass::text -> pg_regclass_out(x) (and the same for regtype / regnamespace).

    psql orders partitions by c.oid::pg_catalog.regclass::pg_catalog.text; SQLAlchemy passes
    CAST(CAST(attrelid AS REGCLASS) AS TEXT) to pg_get_serial_sequence; psycopg and asyncpg
    read t.oid::regtype::text. Runs before `casts`, which would turn the inner cast into BIGINT.
    """

    def fn(node: exp.Expression) -> exp.Expression:
        if isinstance(node, exp.Cast) and _type_name(node.to) in ("text", "varchar", "name"):
            inner = node.this
            if isinstance(inner, exp.Cast) and not _is_texty(inner.this):
                render = _REG_TEXT.get(_type_name(inner.to) or "")
                if render is not None:
                    return render(_bigint(inner.this))
        return node

    return _bottom_up(tree, fn)


_REG_TEXT: dict[str, Callable[[exp.Expression], exp.Expression]] = {
    "regclass": lambda v: _call("pg_regclass_out", v),
    "regtype": lambda v: _call("pg_regtype_out", v),
    "regnamespace": lambda v: _call("pg_regnamespace_out", v),
}


def array_comparisons(tree: exp.Expression, rw: _Rewriter) -> exp.Expression:
    """`pol.polroles = '{0}'` -> `= make_array(0)` (psql \\d policies), and
    `coalesce(a.fnames, '{}')` -> `coalesce(a.fnames, make_array())` (psycopg CompositeInfo)."""

    def fn(node: exp.Expression) -> exp.Expression:
        if isinstance(node, exp.Coalesce) and isinstance(node.this, exp.Column):
            args = []
            for arg in node.expressions:
                items = array_literal(arg.this) if isinstance(arg, exp.Literal) and arg.is_string else None
                args.append(arg if items is None else _make_array(items, False))
            node.set("expressions", args)
        if isinstance(node, (exp.EQ, exp.NEQ)):
            for side, other in (("expression", node.this), ("this", node.expression)):
                lit = node.args.get(side)
                if isinstance(lit, exp.Literal) and lit.is_string and isinstance(other, exp.Column):
                    items = array_literal(lit.this)
                    if items is not None:
                        numeric = all(v is None or v.lstrip("-").isdigit() for v in items)
                        node.set(side, _make_array(items, numeric))
        return node

    return _bottom_up(tree, fn)


_ARRAY_OF_KIND = {"oid": "BIGINT[]", "name": "TEXT[]", "text": "TEXT[]", "char": "TEXT[]",
                  "int2": "SMALLINT[]", "int4": "INT[]", "int8": "BIGINT[]"}


def typed_any_parameters(tree: exp.Expression, rw: _Rewriter) -> exp.Expression:
    """`n.nspname = ANY($1)` -> `= ANY(CAST($1 AS TEXT[]))`, typed by the catalog column.

    ibis sends the list as an untyped '{demo}'; PostgreSQL infers text[] from nspname, while
    DataFusion infers nothing for $1 here. The cast tells the session what to decode it as.
    """

    def fn(node: exp.Expression) -> exp.Expression:
        if not (isinstance(node, exp.EQ) and isinstance(node.expression, exp.Any)):
            return node
        inner = node.expression.this
        param = inner.this if isinstance(inner, exp.Paren) else inner
        column = node.this
        if isinstance(param, (exp.Placeholder, exp.Parameter)) and isinstance(column, exp.Column):
            array_type = _ARRAY_OF_KIND.get(pg_catalog.COLUMN_KINDS.get(column.name.lower(), ""))
            if array_type is not None:
                cast = exp.Cast(this=param, to=exp.DataType.build(array_type))
                node.expression.set("this", exp.Paren(this=cast))
        return node

    return _bottom_up(tree, fn)


# --- arrays -------------------------------------------------------------------------------------


def _zero_based_names(tree: exp.Expression) -> set[str]:
    """Column names holding 0-based vectors here, including aliases of such columns.

    pgjdbc selects `i.indoption AS I_INDOPTION` and later subscripts I_INDOPTION[pos - 1].
    """
    names = set(pg_catalog.ZERO_BASED_ARRAY_COLUMNS)
    for alias in tree.find_all(exp.Alias):
        if isinstance(alias.this, exp.Column) and alias.this.name.lower() in names:
            names.add(alias.alias.lower())
    return names


def _is_zero_based(node: exp.Expression, rw: _Rewriter) -> bool:
    while isinstance(node, (exp.Cast, exp.Paren)):
        node = node.this
    return isinstance(node, exp.Column) and node.name.lower() in rw.zero_based


def zero_based_subscripts(tree: exp.Expression, rw: _Rewriter) -> exp.Expression:
    """i.indkey[ia.attnum - 1] -> one more: int2vector/oidvector count from 0 in PostgreSQL,
    DataFusion lists from 1 (psqlODBC primaryKeys, pgjdbc getIndexInfo)."""

    def fn(node: exp.Expression) -> exp.Expression:
        if isinstance(node, exp.Bracket) and _is_zero_based(node.this, rw) and len(node.expressions) == 1:
            index = node.expressions[0]
            if isinstance(index, exp.Literal) and not index.is_string:
                shifted: exp.Expression = exp.Literal.number(int(index.this) + 1)
            else:
                shifted = exp.Add(this=exp.Paren(this=index), expression=exp.Literal.number(1))
            node.set("expressions", [shifted])
        return node

    return _bottom_up(tree, fn)


def _length(array: exp.Expression) -> exp.Expression:
    return _bigint(_call("cardinality", array))


def array_bounds(tree: exp.Expression, rw: _Rewriter) -> exp.Expression:
    """array_upper / array_lower, which DataFusion lacks (psql, pgjdbc, psqlODBC)."""

    def fn(node: exp.Expression) -> exp.Expression:
        name = _func_name(node)
        if name in ("array_upper", "array_lower") and len(node.expressions) == 2:
            array = node.expressions[0]
            base = 0 if _is_zero_based(array, rw) else 1
            nonempty = exp.GT(this=_length(array), expression=exp.Literal.number(0))
            bound: exp.Expression = exp.Literal.number(base)
            if name == "array_upper":
                bound = exp.Sub(this=_length(array), expression=exp.Literal.number(1 - base))
            return exp.Case(ifs=[exp.If(this=nonempty, true=bound)])
        return node

    return _bottom_up(tree, fn)


def generate_subscripts(tree: exp.Expression, rw: _Rewriter) -> exp.Expression:
    """generate_subscripts(a, 1) -> unnest(generate_series(lo, hi)) (SQLAlchemy reflection)."""

    def fn(node: exp.Expression) -> exp.Expression:
        if _func_name(node) == "generate_subscripts" and node.expressions:
            array = node.expressions[0]
            base = 0 if _is_zero_based(array, rw) else 1
            hi = exp.Sub(this=_length(array), expression=exp.Literal.number(1 - base))
            series = _call("generate_series", exp.Literal.number(base), hi)
            return exp.Unnest(expressions=[series])
        return node

    return _bottom_up(tree, fn)


def expand_array(tree: exp.Expression, rw: _Rewriter) -> exp.Expression:
    """information_schema._pg_expandarray(a) -> unnest of {x, n} structs (pgjdbc getPrimaryKeys,
    getIndexInfo): `(_pg_expandarray(a)).n` and `(KEYS).x` become field accesses."""

    def fn(node: exp.Expression) -> exp.Expression:
        if _func_name(node) == "_pg_expandarray" and node.expressions:
            array = exp.Cast(this=node.expressions[0], to=exp.DataType.build("BIGINT[]"))
            return exp.Unnest(expressions=[_call("pg_expandarray", array)])
        if (
            isinstance(node, exp.Dot)
            and isinstance(node.this, exp.Paren)
            and isinstance(node.expression, exp.Identifier)
            and node.expression.name.lower() in ("x", "n")
        ):
            return exp.Bracket(this=node.this.this,
                               expressions=[exp.Literal.string(node.expression.name.lower())])
        return node

    return _bottom_up(tree, fn)


def array_subqueries(tree: exp.Expression, rw: _Rewriter) -> exp.Expression:
    """ARRAY(SELECT e FROM ... ORDER BY o) -> (SELECT array_agg(e ORDER BY o) FROM ...).

    psql \\du (memberof) and \\d (policy roles); DataFusion has no ARRAY(subquery).
    """

    def fn(node: exp.Expression) -> exp.Expression:
        if not (isinstance(node, exp.Array) and len(node.expressions) == 1):
            return node
        select = node.expressions[0]
        if isinstance(select, exp.Subquery):
            select = select.this
        if not isinstance(select, exp.Select) or len(select.expressions) != 1:
            return node
        mapped = _map_over_unnest(select)
        if mapped is not None:
            return mapped
        select = select.copy()
        value = select.expressions[0].unalias()
        order = select.args.get("order")
        agg_arg: exp.Expression = value
        if order is not None:
            keys = [_resolve_order_key(o, value) for o in order.expressions]
            agg_arg = exp.Order(this=value, expressions=keys)
            select.set("order", None)
        select.set("expressions", [exp.ArrayAgg(this=agg_arg)])
        # ARRAY() of no rows is '{}', array_agg of no rows NULL (psql \\du shows memberof {})
        return exp.Coalesce(this=exp.Subquery(this=select), expressions=[_call("make_array")])

    return _bottom_up(tree, fn)


def _resolve_order_key(ordered: exp.Expression, value: exp.Expression) -> exp.Expression:
    """ORDER BY 1 inside ARRAY(...) means the selected value."""
    key = ordered.copy()
    if isinstance(key.this, exp.Literal) and not key.this.is_string:
        key.set("this", value.copy())
    return key


def _map_over_unnest(select: exp.Select) -> exp.Expression | None:
    """ARRAY(SELECT 'toast.' || x FROM unnest(tc.reloptions) x) -> pg_prefix_elements(...).

    psql \\d+ builds the toast options so; DataFusion can't unnest an outer column in FROM.
    """
    source = select.args.get("from_") or select.args.get("from")
    if source is None or select.args.get("where") or select.args.get("joins"):
        return None
    table = source.this
    if not (isinstance(table, exp.Table) and _func_name(table.this) in ("unnest", "explode")):
        return None
    alias = table.alias_or_name.lower()
    value = select.expressions[0].unalias()
    if (
        isinstance(value, exp.DPipe)
        and isinstance(value.this, exp.Literal)
        and isinstance(value.expression, exp.Column)
        and value.expression.name.lower() == alias
    ):
        call = table.this
        array = call.expressions[0] if isinstance(call, (exp.Anonymous, exp.Unnest)) else call.this
        return _call("pg_prefix_elements", array, value.this)
    return None


def psql_publication_columns(tree: exp.Expression, rw: _Rewriter) -> exp.Expression:
    """psql \\d's publication footer:
    (SELECT string_agg(attname, ', ') FROM generate_series(0, array_upper(pr.prattrs, 1)) s,
    pg_attribute WHERE attrelid = pr.prrelid AND attnum = prattrs[s]) -> pg_attnames(...).

    DataFusion's generate_series table function takes constants only, and this one is bound to
    the outer row; the catalog answers the same question directly.
    """

    def fn(node: exp.Expression) -> exp.Expression:
        if not (isinstance(node, exp.Subquery) and isinstance(node.this, exp.Select)):
            return node
        select = node.this
        value = select.expressions[0].unalias() if len(select.expressions) == 1 else None
        if not (isinstance(value, exp.GroupConcat) or _func_name(value) == "string_agg"):
            return node
        source = select.args.get("from_") or select.args.get("from")
        series = source.this if source is not None else None
        if not (isinstance(series, exp.Table) and _func_name(series.this) == "generate_series"):
            return node
        equal = {_column_key(c.this): c.expression for c in _where(select) if isinstance(c, exp.EQ)}
        relid, attnum = equal.get("attrelid"), equal.get("attnum")
        if relid is None or not isinstance(attnum, exp.Bracket):
            return node
        if isinstance(value, exp.GroupConcat):
            separator = value.args.get("separator")
        else:
            separator = value.expressions[1] if len(value.expressions) > 1 else None
        attnums = exp.Cast(this=attnum.this, to=exp.DataType.build("BIGINT[]"))
        return _call("pg_attnames", relid, attnums, separator or exp.Literal.string(","))

    return _bottom_up(tree, fn)


def asyncpg_domain_base_types(tree: exp.Expression, rw: _Rewriter) -> exp.Expression:
    """asyncpg's type introspection finds a domain's base type with a correlated WITH RECURSIVE
    (`typebases`, anchored at `t2.oid = t.oid`) -> pg_domain_basetype(t.oid).

    DataFusion can't correlate a recursive CTE; asyncpg sends this query for every array type it
    meets (SQLAlchemy reflection over asyncpg asks for _bool, _int8, int2vector).
    """

    def fn(node: exp.Expression) -> exp.Expression:
        if not (isinstance(node, exp.Subquery) and isinstance(node.this, exp.Select)):
            return node
        with_ = node.this.args.get("with_") or node.this.args.get("with")
        if with_ is None or not with_.args.get("recursive"):
            return node
        for cte in with_.expressions:
            anchor = cte.this.this if isinstance(cte.this, exp.Union) else None
            if cte.alias_or_name.lower() != "typebases" or not isinstance(anchor, exp.Select):
                continue
            local = _local_names(anchor)
            for cond in _where(anchor):
                if isinstance(cond, exp.EQ) and _outer_columns(cond.expression, local):
                    return _call("pg_domain_basetype", cond.expression.copy())
        return node

    return _bottom_up(tree, fn)


def literal_oid_arguments(tree: exp.Expression, rw: _Rewriter) -> exp.Expression:
    """pg_relation_is_publishable('16386') -> (16386): PostgreSQL reads a quoted literal passed
    for an oid/regclass argument as that type; a UDF takes only the declared one (psql \\d)."""

    def fn(node: exp.Expression) -> exp.Expression:
        kinds = _OID_ARGUMENTS.get(str(node.this).lower()) if isinstance(node, exp.Anonymous) else None
        if not kinds:
            return node
        args = list(node.expressions)
        for i, arg in enumerate(args):
            if i in kinds and isinstance(arg, exp.Literal) and arg.is_string:
                text = arg.this.strip()
                args[i] = exp.Literal.number(text if text.isdigit() else _resolve_relation(text, rw))
        node.set("expressions", args)
        return node

    return _bottom_up(tree, fn)


def _oid_arguments() -> dict[str, frozenset[int]]:
    from icegres.engine import pg_functions

    out = {}
    for fn in pg_functions.catalog_functions(None):  # type: ignore[arg-type]
        positions = frozenset(i for i, t in enumerate(fn.args) if t == pg_functions.OID)
        if positions:
            out[fn.name] = positions
    return out


_OID_ARGUMENTS = _oid_arguments()


def _where(select: exp.Select) -> list[exp.Expression]:
    where = select.args.get("where")
    return _conjuncts(where.this) if where is not None else []


def _column_key(node: exp.Expression) -> str | None:
    return node.name.lower() if isinstance(node, exp.Column) else None


# --- functions ----------------------------------------------------------------------------------


def json_build_object(tree: exp.Expression, rw: _Rewriter) -> exp.Expression:
    """json_build_object(k1, v1, ...) -> pg_json_build_object(keys, arrow types, text values).

    SQLAlchemy's column reflection builds identity and collation options so; a Python UDF has
    one fixed signature, so values travel as text with their Arrow type to re-type them.
    """

    def fn(node: exp.Expression) -> exp.Expression:
        if _func_name(node) != "json_build_object":
            return node
        args = list(node.expressions) if isinstance(node, exp.Anonymous) else _json_args(node)
        keys, values = args[0::2], args[1::2]
        return _call(
            "pg_json_build_object",
            _call("make_array", *[exp.Cast(this=k, to=exp.DataType.build("TEXT")) for k in keys]),
            _call("make_array", *[_call("arrow_typeof", v.copy()) for v in values]),
            _call("make_array", *[exp.Cast(this=v, to=exp.DataType.build("TEXT")) for v in values]),
        )

    return _bottom_up(tree, fn)


def _json_args(node: exp.Expression) -> list[exp.Expression]:
    out: list[exp.Expression] = []
    for item in node.expressions:
        if isinstance(item, (exp.JSONKeyValue, exp.PropertyEQ, exp.Slice)):
            out += [item.this, item.expression]
        else:
            out.append(item)
    return out


def privilege_checks(tree: exp.Expression, rw: _Rewriter) -> exp.Expression:
    """has_*_privilege(...) -> TRUE: icegres's one role is a superuser (DBeaver, pgAdmin)."""

    def fn(node: exp.Expression) -> exp.Expression:
        name = _func_name(node) or ""
        if name.startswith("has_") and name.endswith("_privilege"):
            return exp.true()
        return node

    return _bottom_up(tree, fn)


def pad_default_arguments(tree: exp.Expression, rw: _Rewriter) -> exp.Expression:
    """current_setting('jit') -> current_setting('jit', false): each UDF has one arity, so the
    short PostgreSQL overloads get their defaults spelled out (see FUNCTION_DEFAULTS)."""

    def fn(node: exp.Expression) -> exp.Expression:
        if isinstance(node, exp.Anonymous):
            defaults = FUNCTION_DEFAULTS.get(str(node.this).lower())
            if defaults is not None and len(node.expressions) < len(defaults):
                extra = [exp.maybe_parse(d, dialect=DIALECT) for d in defaults[len(node.expressions):]]
                node.set("expressions", [*node.expressions, *extra])
        return node

    return _bottom_up(tree, fn)


def exists_in_expressions(tree: exp.Expression, rw: _Rewriter) -> exp.Expression:
    """EXISTS(...) outside WHERE/ON -> (SELECT count(*) ...) > 0.

    DataFusion plans EXISTS only as a filter; ibis's column query has it in a CASE.
    """

    def fn(node: exp.Expression) -> exp.Expression:
        if not isinstance(node, exp.Exists) or _in_filter(node):
            return node
        select = node.this.this if isinstance(node.this, exp.Subquery) else node.this
        if not isinstance(select, exp.Select):
            return node
        counted = select.copy()
        counted.set("expressions", [exp.Count(this=exp.Star())])
        return exp.GT(this=exp.Subquery(this=counted), expression=exp.Literal.number(0))

    return _bottom_up(tree, fn)


def _in_filter(node: exp.Expression) -> bool:
    parent = node.parent
    while parent is not None and not isinstance(parent, (exp.Select, exp.Subquery)):
        if isinstance(parent, exp.Where) or (isinstance(parent, exp.Join) and node.arg_key == "on"):
            return True
        if isinstance(parent, (exp.Case, exp.If, exp.Func)) and not isinstance(parent, exp.Connector):
            return False
        node, parent = parent, parent.parent
    return False


def decorrelate_scalar_subqueries(tree: exp.Expression, rw: _Rewriter) -> exp.Expression:
    """Shape correlated scalar subqueries the way DataFusion can turn them into joins.

    DataFusion decorrelates `(SELECT agg(e) FROM t WHERE t.k = outer.k AND <inner-only>)` and
    nothing else, while clients send (psql \\d, SQLAlchemy get_columns, pgjdbc, asyncpg):
      - no aggregate: PostgreSQL raises on a second row anyway, so max() of the one row;
      - a condition on outer columns only (`AND a.atthasdef`): moved out as CASE WHEN ... THEN;
      - an outer column beside an equality that already binds it (`c.oid = a.attcollation AND
        a.attcollation <> t.typcollation`): the inner twin replaces it;
      - correlation inside JOIN ... ON: moved to WHERE.
    """

    def fn(node: exp.Expression) -> exp.Expression:
        if not (isinstance(node, exp.Subquery) and isinstance(node.this, exp.Select)):
            return node
        if not _in_expression_position(node) or not _is_correlated(node.this):
            return node
        select = node.this
        if len(select.expressions) != 1 or select.args.get("group") or select.args.get("limit"):
            return node
        local = _local_names(select)
        _move_join_correlation_to_where(select, local)
        guards = _extract_outer_conditions(select, local)
        if select.find(exp.AggFunc) is None and not select.args.get("distinct"):
            if _outer_columns(select.expressions[0], local):
                node = _split_by_inner_columns(select, local)
            else:
                value = select.expressions[0]
                aggregated = exp.Max(this=value.unalias().copy())
                aliased = exp.alias_(aggregated, value.alias) if value.alias else aggregated
                select.set("expressions", [aliased])
        if not guards:
            return node
        if select.find(exp.Count) is not None:  # count() over nothing is 0, not NULL
            return exp.Case(ifs=[exp.If(this=exp.and_(*guards), true=node)], default=exp.Literal.number(0))
        return exp.Case(ifs=[exp.If(this=exp.and_(*guards), true=node)])

    return _bottom_up(tree, fn)


def _split_by_inner_columns(select: exp.Select, local: set[str]) -> exp.Expression:
    """(SELECT f(outer, i1, i2) FROM t WHERE p) -> CASE WHEN (SELECT count(*) ... ) > 0 THEN
    f(outer, (SELECT max(i1) ...), (SELECT max(i2) ...)) END.

    DataFusion can't decorrelate outer columns in a subquery's select list. The subquery yields
    at most one row (PostgreSQL raises otherwise), so each inner column can come separately.
    SQLAlchemy's identity options pass pg_attribute.attidentity into json_build_object so.
    """
    value = select.expressions[0].unalias()

    def subquery(projection: exp.Expression) -> exp.Subquery:
        one = select.copy()
        one.set("expressions", [projection])
        return exp.Subquery(this=one)

    def fn(node: exp.Expression) -> exp.Expression:
        if isinstance(node, exp.Column) and not (node.table and node.table.lower() not in local):
            return subquery(exp.Max(this=node.copy()))
        return node

    lifted = value.copy().transform(fn)
    found = exp.GT(this=subquery(exp.Count(this=exp.Star())), expression=exp.Literal.number(0))
    return exp.Paren(this=exp.Case(ifs=[exp.If(this=found, true=lifted)]))


def _in_expression_position(node: exp.Subquery) -> bool:
    parent = node.parent
    return not isinstance(parent, (exp.From, exp.Join, exp.In, exp.Exists, exp.Union, exp.With,
                                   exp.CTE, exp.Table, exp.Lateral))


def _local_names(select: exp.Select) -> set[str]:
    local = {t.alias_or_name.lower() for t in select.find_all(exp.Table)}
    local |= {cte.alias_or_name.lower() for cte in select.find_all(exp.CTE)}
    return local


def _outer_columns(node: exp.Expression, local: set[str]) -> list[exp.Column]:
    return [c for c in node.find_all(exp.Column) if c.table and c.table.lower() not in local]


def _is_correlated(select: exp.Select) -> bool:
    """Whether the subquery names a table that it doesn't itself bring into scope."""
    return bool(_outer_columns(select, _local_names(select)))


def _conjuncts(node: exp.Expression | None) -> list[exp.Expression]:
    if node is None:
        return []
    if isinstance(node, exp.And):
        return [*_conjuncts(node.this), *_conjuncts(node.expression)]
    if isinstance(node, exp.Paren) and isinstance(node.this, exp.And):
        return _conjuncts(node.this)
    return [node]


def _move_join_correlation_to_where(select: exp.Select, local: set[str]) -> None:
    moved: list[exp.Expression] = []
    for join in select.args.get("joins") or []:
        if join.side or join.kind not in ("", "INNER", None):
            continue
        keep = []
        for cond in _conjuncts(join.args.get("on")):
            (moved if _outer_columns(cond, local) else keep).append(cond)
        if len(keep) != len(_conjuncts(join.args.get("on"))):
            join.set("on", exp.and_(*keep) if keep else exp.true())
    if moved:
        where = select.args.get("where")
        conds = [*_conjuncts(where.this if where else None), *moved]
        select.set("where", exp.Where(this=exp.and_(*conds)))


def _extract_outer_conditions(select: exp.Select, local: set[str]) -> list[exp.Expression]:
    """Take outer-only conditions out of WHERE; rewrite outer columns bound by equalities."""
    where = select.args.get("where")
    if where is None:
        return []
    conds = _conjuncts(where.this)
    twins: dict[str, exp.Expression] = {}
    for cond in conds:
        if isinstance(cond, exp.EQ):
            for inner, outer in ((cond.this, cond.expression), (cond.expression, cond.this)):
                bound = inner.find(exp.Column) and not _outer_columns(inner, local)
                if bound and _outer_columns(outer, local):
                    twins.setdefault(outer.sql(), inner)
    guards, kept = [], []
    for cond in conds:
        outer = _outer_columns(cond, local)
        if outer and all(c.table.lower() not in local for c in cond.find_all(exp.Column)):
            guards.append(cond)
            continue
        if outer and not (isinstance(cond, exp.EQ) and any(cond is c for c in conds)
                          and _binds_twin(cond, twins)):
            cond = _replace_twins(cond, twins)
        kept.append(cond)
    select.set("where", exp.Where(this=exp.and_(*kept)) if kept else None)
    return guards


def _binds_twin(cond: exp.EQ, twins: dict[str, exp.Expression]) -> bool:
    return cond.this.sql() in twins or cond.expression.sql() in twins


def _replace_twins(cond: exp.Expression, twins: dict[str, exp.Expression]) -> exp.Expression:
    def fn(node: exp.Expression) -> exp.Expression:
        twin = twins.get(node.sql()) if isinstance(node, exp.Column) else None
        return twin.copy() if twin is not None else node

    return cond.transform(fn)


# --- output names -------------------------------------------------------------------------------


def pg_output_names(tree: exp.Expression) -> list[list[str]]:
    """What PostgreSQL calls each result column of the top-level SELECT(s), before rewriting.

    psycopg and pgjdbc read rows by column name; PostgreSQL's names (FigureColname) differ from
    DataFusion's ("version" vs "version()"), and rewrites replace expressions wholesale.
    """
    return [[item.alias if isinstance(item, exp.Alias) else _figure_colname(item)[0]
             for item in select.expressions] for select in _top_selects(tree)]


def output_names(tree: exp.Expression, rw: _Rewriter) -> exp.Expression:
    """Alias every computed top-level column with its PostgreSQL name, kept unique.

    DataFusion refuses two columns with one name (psql's publication query selects NULL twice),
    so later duplicates get a suffix.
    """
    for select, names in zip(_top_selects(tree), rw.output_names, strict=False):
        if len(names) == len(select.expressions):
            _name_projections(select, names)
    return tree


def _top_selects(tree: exp.Expression) -> list[exp.Select]:
    if isinstance(tree, exp.Select):
        return [tree]
    if isinstance(tree, exp.SetOperation):
        return [*_top_selects(tree.this), *_top_selects(tree.expression)]
    if isinstance(tree, exp.Subquery):
        return _top_selects(tree.this)
    return []


def _name_projections(select: exp.Select, names: list[str]) -> None:
    # Plain columns keep their names: DataFusion tells a.x from b.x apart itself.
    used = {item.alias_or_name for item in select.expressions if isinstance(item, (exp.Alias, exp.Column))}
    projections = []
    for item, name in zip(select.expressions, names, strict=True):
        if isinstance(item, (exp.Alias, exp.Column, exp.Star)):
            projections.append(item)
            continue
        unique, n = name, 1
        while unique in used:
            n += 1
            unique = f"{name}_{n}"
        used.add(unique)
        projections.append(exp.alias_(item, unique, quoted=True))
    select.set("expressions", projections)


_KEYWORD_NAMES: dict[type[exp.Expression], str] = {
    exp.CurrentUser: "current_user", exp.SessionUser: "session_user",
    exp.CurrentSchema: "current_schema", exp.CurrentCatalog: "current_catalog",
    exp.CurrentDate: "current_date", exp.CurrentTimestamp: "current_timestamp",
    exp.Array: "array", exp.Coalesce: "coalesce", exp.Nullif: "nullif", exp.Exists: "exists",
}


def _figure_colname(node: exp.Expression) -> tuple[str, int]:
    """PostgreSQL's FigureColnameInternal: (name, strength); strength 2 beats a CASE's "case"."""
    if isinstance(node, exp.Column):
        return (node.name, 2) if not isinstance(node.this, exp.Star) else ("?column?", 0)
    if isinstance(node, exp.Dot) and isinstance(node.expression, exp.Identifier):
        return node.expression.name, 2  # (x).n
    if isinstance(node, (exp.Paren, exp.Collate, exp.Bracket)):
        return _figure_colname(node.this)
    if isinstance(node, exp.Cast):
        name, strength = _figure_colname(node.this)
        return (name, strength) if strength > 1 else (_type_name(node.to) or "?column?", 1)
    if isinstance(node, exp.Case):
        default = node.args.get("default")
        name, strength = _figure_colname(default) if default is not None else ("?column?", 0)
        return (name, strength) if strength > 1 else ("case", 1)
    if isinstance(node, exp.Subquery) and isinstance(node.this, exp.Select) and node.this.expressions:
        first = node.this.expressions[0]
        return (first.alias, 2) if isinstance(first, exp.Alias) else _figure_colname(first)
    keyword = _KEYWORD_NAMES.get(type(node))
    if keyword is not None:
        return keyword, 2
    if isinstance(node, exp.Dot) and isinstance(node.expression, exp.Func):
        return _figure_colname(node.expression)  # pg_catalog.version()
    if isinstance(node, exp.Anonymous):
        return str(node.this).lower(), 2
    if isinstance(node, exp.Func) and not isinstance(node, (exp.Binary, exp.Unary, exp.Not, exp.Connector)):
        # sqlglot types many calls (CurrentVersion for version()); the name is what it writes
        m = _CALL_NAME.match(node.sql(dialect="postgres", normalize_functions="lower"))
        return (m.group(1), 2) if m else ("?column?", 0)
    return "?column?", 0


_CALL_NAME = re.compile(r"([a-z_][a-z0-9_]*)\(")


# Order matters: names and operators first, then the reg*::text pairs before the casts that would
# take them apart, then the array and function shapes, then subquery aggregation and names.
def _oid_columns() -> frozenset[str]:
    from icegres.engine.pg_catalog import RELATIONS

    return frozenset(name for rel in RELATIONS for name, kind in rel.columns if kind == "oid")


def oid_array_aggregates(tree: exp.Expression, rw: _Rewriter) -> exp.Expression:
    """array_agg over an oid column is oid[] (1028), not int8[]: asyncpg's type introspection
    (`attrtypoids`) would otherwise describe a type it must introspect itself, forever."""
    oid_columns = _oid_columns()

    def fix(node: exp.Expression) -> exp.Expression:
        if isinstance(node, exp.ArrayAgg):
            inner = node.this.this if isinstance(node.this, exp.Order) else node.this
            if isinstance(inner, exp.Column) and inner.name.lower() in oid_columns:
                return _call("pg_oid_array", node.copy())
        return node

    return tree.transform(fix)


def asyncpg_oid_array_outputs(tree: exp.Expression, rw: _Rewriter) -> exp.Expression:
    """asyncpg's type introspection builds `attrtypoids` with CASE inside a recursive CTE, which
    drops the oid[] annotation; re-annotate it where it is defined, so every SELECT (and the
    final `SELECT *`) passes it on. Without it asyncpg sees int8[] and introspects forever."""

    def fix(node: exp.Expression) -> exp.Expression:
        if isinstance(node, exp.Alias) and node.alias.lower() == "attrtypoids":
            inner = node.this
            if not (isinstance(inner, exp.Anonymous) and inner.name.lower() == "pg_oid_array"):
                return exp.alias_(_call("pg_oid_array", inner.copy()), "attrtypoids")
        return node

    return tree.transform(fix)


_STEPS: tuple[Callable[[exp.Expression, _Rewriter], exp.Expression], ...] = (
    qualify_catalog_tables,
    strip_function_schemas,
    set_returning_functions,
    to_char_formats,
    postgres_semantics,
    session_keywords,
    drop_collate,
    explicit_operators,
    like_escape,
    boolean_literals,
    regclass_text,
    casts,
    array_comparisons,
    typed_any_parameters,
    zero_based_subscripts,
    array_bounds,
    psql_publication_columns,
    asyncpg_domain_base_types,
    literal_oid_arguments,
    generate_subscripts,
    expand_array,
    array_subqueries,
    json_build_object,
    privilege_checks,
    pad_default_arguments,
    exists_in_expressions,
    decorrelate_scalar_subqueries,
    oid_array_aggregates,
    asyncpg_oid_array_outputs,
    output_names,
)
