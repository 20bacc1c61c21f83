"""Rewrites of casts: reg* types resolved against the catalog, array literals, casts DataFusion
reads differently from PostgreSQL."""

from __future__ import annotations

import re
from collections.abc import Callable

from sqlglot import exp

from icegres.engine import pg_builtins, pg_catalog, pg_relations
from icegres.engine.rewrite.tree import _bottom_up, _call, _func_name, _Rewriter, _type_name
from icegres.pg.errors import (
    UNDEFINED_OBJECT,
    UNDEFINED_TABLE,
    PgError,
)

# --- casts --------------------------------------------------------------------------------------




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
        oid = pg_builtins.type_oid_by_name(value.this)
        if oid is None:
            raise PgError(UNDEFINED_OBJECT, f'type "{value.this}" does not exist')
        return exp.Literal.number(oid)
    if _is_texty(value):
        return _call("to_regtype", value)
    if _is_projection(node):
        return _call("pg_regtype_out", _bigint(value))
    return _bigint(value)


def _reg_array(node: exp.Cast, render: str) -> exp.Expression:
    """x::regtype[] returned -> the names of the types, as PostgreSQL prints it; compared or
    passed on -> the OIDs."""
    value = exp.Cast(this=node.this, to=exp.DataType.build("BIGINT[]"))
    return _call(render, value) if _is_projection(node) else value


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
    "regclass[]": lambda node, rw: _reg_array(node, "pg_regclass_array_out"),
    "regtype[]": lambda node, rw: _reg_array(node, "pg_regtype_array_out"),
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
        length = _char_length(node.to)
        if length is not None:
            return _char_cast(node.this, node.to.this, length)
        rule = _CASTS.get(name)
        if rule is not None:
            return rule(node, rw)
        if node.to.this == exp.DataType.Type.USERDEFINED and name in _BUILTIN_SPELLINGS:
            # 0::pg_catalog.int2 (pg_dump qualifies every type): the built-in type itself
            node.set("to", exp.DataType.build(_BUILTIN_SPELLINGS[name], dialect="postgres"))
        return node

    return _bottom_up(tree, fn)


_CHAR_TYPES = (exp.DataType.Type.VARCHAR, exp.DataType.Type.CHAR, exp.DataType.Type.BPCHAR)


def _char_length(to: exp.Expression) -> int | None:
    """n of a cast to varchar(n) / char(n), which DataFusion ignores."""
    if not isinstance(to, exp.DataType) or to.this not in _CHAR_TYPES or len(to.expressions) != 1:
        return None
    param = to.expressions[0]
    value = param.this if isinstance(param, exp.DataTypeParam) else None
    if isinstance(value, exp.Literal) and not value.is_string and str(value.this).isdigit():
        return int(value.this)
    return None


def _char_cast(value: exp.Expression, kind: exp.DataType.Type, length: int) -> exp.Expression:
    """An explicit cast to varchar(n) / char(n) cuts the value to n characters, with no error
    (PostgreSQL's length coercion with isExplicit). A char(n) value is given without its
    padding, which PostgreSQL ignores in comparisons, length() and casts to text (pg/chars.py)."""
    text = _call("left", exp.Cast(this=value, to=exp.DataType.build("VARCHAR")), exp.Literal.number(length))
    return text if kind == exp.DataType.Type.VARCHAR else _call("rtrim", text, exp.Literal.string(" "))


# Built-in types that a schema-qualified cast names, as DataFusion reads them.
_BUILTIN_SPELLINGS = {
    "int2": "SMALLINT", "int4": "INT", "int8": "BIGINT", "float4": "REAL", "float8": "DOUBLE PRECISION",
    "bool": "BOOLEAN", "text": "TEXT", "varchar": "VARCHAR", "bpchar": "TEXT", "numeric": "NUMERIC",
    "date": "DATE", "timestamp": "TIMESTAMP", "timestamptz": "TIMESTAMPTZ", "time": "TIME",
    "interval": "INTERVAL", "bytea": "BYTEA", "int2[]": "SMALLINT[]", "int4[]": "INT[]",
    "int8[]": "BIGINT[]", "text[]": "TEXT[]",
}


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
        if isinstance(node, exp.Cast) and _type_name(node.to) in ("text[]", "varchar[]", "name[]"):
            # COALESCE(proallargtypes::regtype[], proargtypes::regtype[])::text[] (pgcli's
            # functions(), for completion): the names of the types; the inner casts become
            # BIGINT[] in `casts`
            render = _REG_ARRAY_TEXT.get(_reg_array_kind(node.this) or "")
            if render is not None:
                return _call(render, node.this)
        return node

    return _bottom_up(tree, fn)


_REG_ARRAY_TEXT = {"regtype[]": "pg_regtype_array_out", "regclass[]": "pg_regclass_array_out"}


def _reg_array_kind(node: exp.Expression) -> str | None:
    """'regtype[]' for `x::regtype[]` and for COALESCE / NULLIF / CASE whose every value is one."""
    if isinstance(node, exp.Cast):
        name = _type_name(node.to)
        return name if name in _REG_ARRAY_TEXT else None
    if isinstance(node, (exp.Coalesce, exp.Nullif)):
        values = [node.this] if isinstance(node, exp.Nullif) else [node.this, *node.expressions]
    elif isinstance(node, exp.Case):
        values = [i.args["true"] for i in node.args.get("ifs") or []] + [node.args.get("default")]
    elif isinstance(node, exp.Paren):
        values = [node.this]
    else:
        return None
    kinds = {_reg_array_kind(v) if v is not None and not isinstance(v, exp.Null) else "null" for v in values}
    kinds.discard("null")
    return kinds.pop() if len(kinds) == 1 else None


_REG_TEXT: dict[str, Callable[[exp.Expression], exp.Expression]] = {
    "regclass": lambda v: _call("pg_regclass_out", v),
    "regtype": lambda v: _call("pg_regtype_out", v),
    "regnamespace": lambda v: _call("pg_regnamespace_out", v),
}


def array_comparisons(tree: exp.Expression, rw: _Rewriter) -> exp.Expression:
    """`pol.polroles = '{0}'` -> `= make_array(0)` (psql \\d policies), and
    `coalesce(a.fnames, '{}')` -> `coalesce(a.fnames, make_array())` (psycopg CompositeInfo)."""

    def fn(node: exp.Expression) -> exp.Expression:
        if isinstance(node, exp.Case):
            # CASE ... THEN acldefault(...) ELSE '{}' END (pg_dump): the untyped literal is an
            # array like the other branches
            branches = [i.args.get("true") for i in node.args.get("ifs") or []] + [node.args.get("default")]
            if any(_is_array_valued(b) for b in branches if b is not None):
                for holder, key in [*((i, "true") for i in node.args.get("ifs") or []), (node, "default")]:
                    value = holder.args.get(key)
                    items = array_literal(value.this) if isinstance(value, exp.Literal) and value.is_string else None
                    if items is not None:
                        holder.set(key, _make_array(items, False))
        if isinstance(node, exp.Coalesce) and isinstance(node.this, exp.Column):
            args = []
            for arg in node.expressions:
                items = array_literal(arg.this) if isinstance(arg, exp.Literal) and arg.is_string else None
                args.append(arg if items is None else _make_array(items, False))
            node.set("expressions", args)
        quantified = node.expression if isinstance(node, (exp.EQ, exp.NEQ)) else None
        if isinstance(quantified, exp.Any) or _func_name(quantified) == "all":
            # c.relkind = ANY('{r,p}') / <> ALL('{v,i}'): an untyped array literal (pgcli \\dt);
            # PostgreSQL reads it as an array of the other side's type
            key, inner = ("this", quantified.this) if isinstance(quantified, exp.Any) else \
                ("expressions", quantified.expressions[0] if len(quantified.expressions) == 1 else None)
            lit = inner.this if isinstance(inner, exp.Paren) else inner
            items = array_literal(lit.this) if isinstance(lit, exp.Literal) and lit.is_string else None
            if items is not None:
                numeric = bool(items) and all(v is not None and v.lstrip("-").isdigit() for v in items)
                array = exp.Paren(this=_make_array(items, numeric))
                quantified.set(key, array if key == "this" else [array])
            return node
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


_ARRAY_FUNCTIONS = frozenset({"acldefault", "array_agg", "make_array", "string_to_array", "array_remove"})


def _is_array_valued(node: exp.Expression) -> bool:
    if isinstance(node, exp.Column):
        return pg_relations.COLUMN_KINDS.get(node.name.lower(), "").endswith("[]")
    return isinstance(node, exp.Array | exp.ArrayAgg) or _func_name(node) in _ARRAY_FUNCTIONS


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
            array_type = _ARRAY_OF_KIND.get(pg_relations.COLUMN_KINDS.get(column.name.lower(), ""))
            if array_type is not None:
                cast = exp.Cast(this=param, to=exp.DataType.build(array_type))
                node.expression.set("this", exp.Paren(this=cast))
        return node

    return _bottom_up(tree, fn)
