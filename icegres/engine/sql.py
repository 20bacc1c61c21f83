"""The rewrite path: statements DataFusion cannot plan as sent, made plannable with sqlglot.

Client catalog queries use PostgreSQL-only constructs (regclass casts, COLLATE, OPERATOR(...),
pg_catalog-qualified functions; see pg_rewrite.py) and unqualified names that PostgreSQL resolves
through search_path. Each distinct statement text is parsed once; QueryContext caches the result.
"""

from __future__ import annotations

import re
from collections.abc import Callable
from typing import TYPE_CHECKING

from icegres.pg.errors import SYNTAX_ERROR, PgError

if TYPE_CHECKING:
    from sqlglot import exp

    from icegres.engine.lake import SessionEnv


def parse(sql: str) -> exp.Expression:
    from sqlglot.errors import ParseError, TokenError

    from icegres.engine import pg_rewrite

    try:
        try:
            tree = pg_rewrite.parse(sql)
        except TokenError:
            # sqlglot's tokenizer reads `$1,$2` as the start of a dollar-quoted string.
            tree = pg_rewrite.parse(_space_placeholders(sql))
    except TokenError:
        raise PgError(SYNTAX_ERROR, "syntax error: unterminated quoted string or identifier") from None
    except ParseError as err:
        detail = err.errors[0] if err.errors else {}
        raise PgError(
            SYNTAX_ERROR,
            f"syntax error at or near \"{detail.get('highlight', '')}\""
            if detail.get("highlight")
            else "syntax error",
        ) from None
    if tree is None:
        raise PgError(SYNTAX_ERROR, "syntax error")
    return tree


def _space_placeholders(sql: str) -> str:
    """Put a space after each `$n` placeholder outside quotes (`$1,$2` -> `$1 ,$2 `)."""
    import re

    from icegres.engine.statements import split_quoted

    return "".join(part if quoted else re.sub(r"(\$\d+)", r"\1 ", part) for part, quoted in split_quoted(sql))


def qualify_tables(tree: exp.Expression, path: list[str],
                   has_table: Callable[[str, str], bool]) -> exp.Expression:
    """Give every unqualified lakehouse table the schema PostgreSQL's search_path would pick."""
    from sqlglot import exp

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


def rewrite_for_datafusion(sql: str, env: SessionEnv, has_table: Callable[[str, str], bool]) -> str:
    from icegres.engine import pg_rewrite

    tree = parse(sql)
    tree = qualify_tables(tree, env.search_path, has_table)
    tree = pg_rewrite.rewrite(tree, env)
    return pg_rewrite.to_sql(tree)


_REWRITE_MARKERS = (
    "pg_", "information_schema", "regclass", "regtype", "regnamespace", "regproc", "::oid",
    "collate", "operator(", "array(", "current_user", "session_user", "current_schema",
    "current_catalog", "any(", "::name", '::"char"', "version(", "current_setting",
    "set_config", "format_type", "current_database", "bytea",
    # DataFusion runs these, but not as PostgreSQL does: to_char reads chrono templates,
    # generate_series in a select list returns one list, not rows, and the others
    # (pg_rewrite.postgres_semantics).
    "to_char", "generate_series", "to_date", "to_timestamp", "similar to", "array_remove", "fetch ",
)


# extract(second ...) / date_part('second', ...): DataFusion's drops the fraction (pg_rewrite).
_SECONDS_PART = re.compile(r"(?:extract\s*\(\s*seconds?\b|date_part\s*\(\s*'seconds?')", re.IGNORECASE)


def needs_rewrite(sql: str) -> bool:
    """Whether `sql` goes through the rewrite path before DataFusion sees it."""
    low = sql.lower()
    return any(marker in low for marker in _REWRITE_MARKERS) or _SECONDS_PART.search(sql) is not None


_CATALOG_SCHEMAS = ("pg_catalog", "information_schema")


def table_refs(sql: str, search_path: list[str]) -> set[tuple[str, str]] | None:
    """Every (schema, table) the statement may read, with unqualified names expanded over
    search_path; None when it reads the catalog relations (which need the whole lakehouse) or
    cannot be parsed. CTE names are not tables."""
    from sqlglot import exp

    try:
        tree = parse(sql)
    except PgError:
        return None
    ctes = {cte.alias_or_name.lower() for cte in tree.find_all(exp.CTE)}
    refs: set[tuple[str, str]] = set()
    for table in tree.find_all(exp.Table):
        name = table.name
        if not name:
            continue
        schema = table.db
        if schema:
            if schema.lower() in _CATALOG_SCHEMAS:
                return None
            refs.add((schema, name))
        elif name.lower() not in ctes:
            if name.lower().startswith("pg_") or name.lower() in ("tables", "columns"):
                return None
            refs.update((s, name) for s in search_path if s not in _CATALOG_SCHEMAS)
    return refs
