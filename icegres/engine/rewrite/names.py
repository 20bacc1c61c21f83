"""Rewrites of names: catalog relations, schema-qualified functions, set-returning functions,
functions DataFusion has under PostgreSQL's name but not its semantics, session keywords."""

from __future__ import annotations

from sqlglot import exp

from icegres.engine import pg_relations
from icegres.engine.lake import PRIVATE_CATALOG
from icegres.engine.rewrite.tree import _bottom_up, _call, _func_name, _Rewriter
from icegres.pg.errors import (
    FEATURE_NOT_SUPPORTED,
    PgError,
)
from icegres.sql.databases import check_database

# --- names ------------------------------------------------------------------------------------


def local_database_qualifiers(tree: exp.Expression, rw: _Rewriter) -> exp.Expression:
    """"icegres"."demo"."t" -> "demo"."t": dbt and BI tools name every relation with its database.

    A name in another database is 0A000, as in PostgreSQL."""
    database = getattr(rw.env, "database", "")
    for table in tree.find_all(exp.Table):
        catalog = table.text("catalog")
        if catalog and catalog != PRIVATE_CATALOG:  # the engine's own work tables stay as named
            check_database(catalog, database, ".".join(p for p in (catalog, table.db, table.name)))
            table.set("catalog", None)
    return tree



def catalog_function_relations(tree: exp.Expression, rw: _Rewriter) -> exp.Expression:
    """FROM pg_catalog.pg_get_keywords() -> FROM pg_catalog.pg_get_keywords, the relation holding
    that function's rows (pgjdbc's getSQLKeywords, DBeaver, DataGrip)."""
    for table in list(tree.find_all(exp.Table)):
        if _func_name(table.this) in _FUNCTION_RELATIONS and not getattr(table.this, "expressions", None):
            table.set("this", exp.to_identifier(_func_name(table.this)))
            table.set("db", exp.to_identifier("pg_catalog"))
    return tree


_FUNCTION_RELATIONS = frozenset(r.name for r in pg_relations.RELATIONS if r.function)


def qualify_catalog_tables(tree: exp.Expression, rw: _Rewriter) -> exp.Expression:
    """pg_class -> pg_catalog.pg_class: PostgreSQL searches pg_catalog first, implicitly.

    Every client except psql sends some unqualified (psycopg: `FROM pg_type t`).
    """
    for table in tree.find_all(exp.Table):
        if isinstance(table.this, exp.Identifier) and not table.args.get("db"):
            name = table.name.lower()
            if name in pg_relations.CATALOG_RELATION_NAMES and name not in rw.cte_names:
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
            return _known_function(node.expression)
        if isinstance(node, exp.Table) and not isinstance(node.this, exp.Identifier):
            # FROM pg_catalog.generate_series(1, 32) pos(n)   (pgjdbc getImportedKeys)
            if node.args.get("db") and node.text("db").lower() == "pg_catalog":
                node.set("db", None)
        return node

    return _bottom_up(tree, fn)


def _known_function(call: exp.Func) -> exp.Func:
    """pg_catalog.array_agg(...) parses as an anonymous call: the function sqlglot knows by that
    name (an aggregate the later steps must see as one), where it knows one."""
    if not isinstance(call, exp.Anonymous):
        return call
    try:
        known = exp.func(str(call.this), *call.expressions, dialect="postgres")
    except Exception:  # sqlglot's builders raise what they like on arguments they don't take
        return call
    return known if not isinstance(known, exp.Anonymous) else call


def set_returning_functions(tree: exp.Expression, rw: _Rewriter) -> exp.Expression:
    """generate_series / unnest as PostgreSQL means them, wherever they stand.

    In FROM (pgjdbc getImportedKeys: `pg_catalog.generate_series(1, 32) pos(n)`) they become the
    lower-case calls DataFusion's table functions answer to; in a select list (psqlODBC
    foreignKeys: `generate_series(array_lower(conkey, 1), ...) as i`) PostgreSQL expands rows,
    while DataFusion's scalar generate_series returns a list, so it is unnested.
    regexp_split_to_table(t, p), which DataFusion lacks, is unnest(regexp_split_to_array(t, p))
    (pgcli's casing(): `regexp_split_to_table(prosrc, '\\W+')`).
    """

    def fn(node: exp.Expression) -> exp.Expression:
        if _func_name(node) == "regexp_split_to_table" and isinstance(node, exp.Anonymous):
            pieces = _call("regexp_split_to_array", *node.expressions)
            if not isinstance(node.parent, exp.Table):
                return exp.Unnest(expressions=[pieces])
            _name_series_column(node.parent, "regexp_split_to_table")
            return _call("unnest", pieces)
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


def _name_series_column(table: exp.Table, function: str = "generate_series") -> None:
    """PostgreSQL names the column of `generate_series(...) g` after its alias, and of a bare
    `generate_series(...)` after the function; DataFusion calls it `value` either way."""
    alias = table.args.get("alias")
    if alias is not None and alias.columns:
        return
    name = alias.this.copy() if alias is not None and alias.this else exp.to_identifier(function)
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
    - FETCH FIRST n ROWS ONLY is LIMIT n (DataFusion refused it);
    - gen_random_uuid() is DataFusion's uuid() (a version 4 UUID, as text)."""

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
        if isinstance(node, exp.Uuid) or (_func_name(node) == "gen_random_uuid" and not node.expressions):
            return _call("uuid")
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
