"""sqlglot rewrites that make real clients' SQL plannable by DataFusion, as PostgreSQL means it.

`rewrite(tree, env)` takes a statement parsed by `icegres.sql.parse` (sqlglot's postgres dialect,
taught `$1::oid[]`) and returns a tree that, written out by `to_sql`, DataFusion 55 plans against
the relations of pg_catalog.py and the functions of pg_functions.py. Each rewrite is a small
function naming the client that sends the construct, grouped by what it rewrites: names
(`names.py`), operators, casts, arrays, functions and the output column names, and run in the
order of `_STEPS` (after `scopes.bind_columns` has written the qualifier PostgreSQL would bind
each bare column to); tests/unit/test_pg_catalog.py runs every statement real clients sent to
PostgreSQL 15. `literals.py` spells typed literals for DataFusion when a tree is written out.

The output depends on env.search_path (regclass literals) and on the catalog, so cache it per
(statement, search_path) and forget it when the catalog changes. Top-level computed columns come
out aliased with the names PostgreSQL gives them (`pg_output_names`).

env: search_path, and optionally catalog_snapshot (see pg_catalog.current_index) and
relation_oid(schema, name).
"""

from __future__ import annotations

import re
from collections.abc import Callable
from typing import Any

from sqlglot import exp

from icegres.engine.rewrite.arrays import (
    _zero_based_names,
    array_bounds,
    array_subqueries,
    asyncpg_domain_base_types,
    expand_array,
    generate_subscripts,
    literal_oid_arguments,
    psql_publication_columns,
    zero_based_subscripts,
)
from icegres.engine.rewrite.casts import (
    array_comparisons,
    casts,
    regclass_text,
    typed_any_parameters,
)
from icegres.engine.rewrite.functions import (
    bounded_text_lengths,
    decorrelate_scalar_subqueries,
    exists_in_expressions,
    in_subqueries_in_expressions,
    json_build_object,
    lateral_derived_tables,
    pad_default_arguments,
    privilege_checks,
    sequence_functions,
)
from icegres.engine.rewrite.literals import to_sql, typed_literals
from icegres.engine.rewrite.names import (
    catalog_function_relations,
    local_database_qualifiers,
    postgres_semantics,
    qualify_catalog_tables,
    session_keywords,
    set_returning_functions,
    strip_function_schemas,
    to_char_formats,
)
from icegres.engine.rewrite.numeric import numeric_division
from icegres.engine.rewrite.operators import (
    boolean_literals,
    drop_collate,
    explicit_operators,
    like_escape,
)
from icegres.engine.rewrite.output_names import (
    asyncpg_oid_array_outputs,
    oid_array_aggregates,
    output_names,
    pg_output_names,
    scope_output_names,
)
from icegres.engine.rewrite.row_values import row_in_subqueries
from icegres.engine.rewrite.scopes import bind_columns
from icegres.engine.rewrite.tree import _Rewriter
from icegres.engine.rewrite.visibility import visible_catalog_rows
from icegres.sql import text_scan

__all__ = ["for_datafusion", "needs_rewrite", "pg_output_names", "qualify_tables", "rewrite", "to_sql", "typed_literals"]


def rewrite(expression: exp.Expression, env: Any) -> exp.Expression:
    """Return a copy of `expression` that DataFusion can plan; `expression` is left untouched."""
    tree = expression.copy()
    rw = _Rewriter(env, {cte.alias_or_name.lower() for cte in tree.find_all(exp.CTE)},
                   _zero_based_names(tree), pg_output_names(tree))
    for step in _STEPS:
        tree = step(tree, rw)
    return tree


_STEPS: tuple[Callable[[exp.Expression, _Rewriter], exp.Expression], ...] = (
    scope_output_names,
    local_database_qualifiers,
    catalog_function_relations,
    qualify_catalog_tables,
    visible_catalog_rows,
    bind_columns,
    row_in_subqueries,
    numeric_division,
    strip_function_schemas,
    set_returning_functions,
    to_char_formats,
    postgres_semantics,
    session_keywords,
    drop_collate,
    explicit_operators,
    like_escape,
    boolean_literals,
    sequence_functions,
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
    bounded_text_lengths,
    exists_in_expressions,
    in_subqueries_in_expressions,
    lateral_derived_tables,
    decorrelate_scalar_subqueries,
    oid_array_aggregates,
    asyncpg_oid_array_outputs,
    output_names,
)


def qualify_tables(tree: exp.Expression, path: list[str],
                   has_table: Callable[[str, str], bool]) -> exp.Expression:
    """Give every unqualified lakehouse table the schema PostgreSQL's search_path would pick."""
    ctes = {cte.alias_or_name.lower() for cte in tree.find_all(exp.CTE)}
    for table in tree.find_all(exp.Table):
        if table.args.get("db") or not table.name:
            continue
        name = table.name
        if name.lower() in ctes:
            continue
        for schema in path:
            if has_table(schema, name):
                table.set("db", exp.to_identifier(schema))
                break
    return tree


def for_datafusion(tree: exp.Expression, env: Any, has_table: Callable[[str, str], bool]) -> str:
    """The rewrite path: `tree` (left untouched) with its tables qualified over search_path and
    every rewrite step applied, as SQL text DataFusion plans."""
    return to_sql(rewrite(qualify_tables(tree.copy(), env.search_path, has_table), env))


_REWRITE_MARKERS = (
    "pg_", "information_schema", "regclass", "regtype", "regnamespace", "regproc", "::oid",
    "collate", "operator(", "array(", "current_user", "session_user", "current_schema",
    "current_catalog", "any(", "::name", '::"char"', "version(", "current_setting",
    "set_config", "format_type", "current_database", "bytea", "setval(",
    # DataFusion runs these, but not as PostgreSQL does: to_char reads chrono templates,
    # generate_series in a select list returns one list, not rows, and the others
    # (names.postgres_semantics).
    "to_char", "generate_series", "to_date", "to_timestamp", "similar to", "array_remove", "fetch ",
    # numeric quotients and averages at PostgreSQL's scale (numeric.py)
    "/", "avg(",
    # results over PostgreSQL's 1 GB refused before they are built (functions.bounded_text_lengths)
    "repeat(", "lpad(", "rpad(",
    "_privilege(",  # has_table_privilege and its kin (functions.privilege_checks)
)


# Searched in the lowered text (sql/text_scan.py; one alternation of all of them took 20x as
# long as these four): a marker; extract(second ...) / date_part('second', ...), whose fraction
# DataFusion drops (names.py); a cast to varchar(n) / char(n), whose length DataFusion ignores
# (casts.py).
_NEEDS_REWRITE = (
    # (literal words, each found by `in`: as one alternation they took 3x as long over 50 MB)
    *_REWRITE_MARKERS,
    re.compile(r"extract\s*\(\s*seconds?\b"),
    re.compile(r"date_part\s*\(\s*'seconds?'"),
    re.compile(r"(?:char|character|varying)\s*\(\s*\d"),
    # an X'…' bit string, which DataFusion would read as bytes (refused by sql/parse.py; a
    # string ending in x followed by one of hex digits takes the rewrite path too), and a U&'…'
    # string, whose escapes the parse reads and refuses as PostgreSQL does (DataFusion refuses
    # every one: 0A000)
    re.compile("x'[0-9a-f]*'"), re.compile("u&'"),
    # IN (subquery) and EXISTS, which DataFusion plans only as filters (functions.py)
    re.compile(r"in\s*\(\s*select\b"), re.compile(r"exists\s*\("),
)


def needs_rewrite(sql: str) -> bool:
    """Whether `sql` goes through the rewrite path before DataFusion sees it."""
    return text_scan.search(_NEEDS_REWRITE, sql)
