"""What information_schema shows a role: only the objects it has some privilege on, as
PostgreSQL's information_schema views say in their WHERE clauses.

icegres materialises information_schema's rows once per catalog snapshot, for every session; the
per-session condition is added here, to the statement: a reference to `information_schema.tables`
(columns, views) becomes a subquery over it keeping the rows `icegres_may_see(schema, name)`
allows (any privilege on the table, or membership in its owner: PostgreSQL's test),
`information_schema.schemata` the schemas it owns or may use or create in, and
`information_schema.table_privileges` and `column_privileges` keep the rows whose grantor or
grantee is one of the session's roles or PUBLIC (`icegres_is_my_role`). A superuser's statements are left as they are.
pg_catalog is not filtered: PostgreSQL shows every role every relation's row there.
"""

from __future__ import annotations

from sqlglot import exp

from icegres.engine.rewrite.tree import _Rewriter

_BY_TABLE = {"tables", "columns", "views"}
_BY_ROLE = {"table_privileges", "column_privileges"}
_BY_SCHEMA = {"schemata"}


def visible_catalog_rows(tree: exp.Expression, rw: _Rewriter) -> exp.Expression:
    env = rw.env
    authorization = getattr(env, "authorization", None)
    if authorization is None:
        return tree
    if authorization.current().is_superuser(authorization.principal(env.user, env.settings.get("role"))):
        return tree
    for table in list(tree.find_all(exp.Table)):
        name = table.name.lower()
        if (table.db or "").lower() != "information_schema" or name not in _BY_TABLE | _BY_ROLE | _BY_SCHEMA:
            continue
        if isinstance(table.parent, exp.Subquery):
            continue
        if name in _BY_SCHEMA:
            condition = exp.Anonymous(this="icegres_may_see_schema", expressions=[exp.column("schema_name")])
        elif name in _BY_TABLE:
            condition = exp.Anonymous(this="icegres_may_see", expressions=[
                exp.column("table_schema"), exp.column("table_name")])
        else:
            condition = exp.or_(exp.Anonymous(this="icegres_is_my_role", expressions=[exp.column("grantor")]),
                                exp.Anonymous(this="icegres_is_my_role", expressions=[exp.column("grantee")]))
        inner = exp.select("*").from_(exp.Table(this=exp.to_identifier(table.name),
                                                db=exp.to_identifier("information_schema"))).where(condition)
        alias = table.alias or table.name
        table.replace(exp.Subquery(this=inner, alias=exp.TableAlias(this=exp.to_identifier(alias))))
    return tree
