"""PostgreSQL DDL -> frozen command values. Pure: no catalog, no I/O; `ddl_apply` performs them.

The statement frame (CREATE/DROP/ALTER, names, element lists, WITH options, ALTER actions) is a
small recursive-descent parser over sqlglot's postgres tokens: sqlglot 30 cannot parse DROP of a
name list, multi-action ALTER TABLE, DROP NOT NULL or RESET, and it accepts things PostgreSQL
rejects (a trailing comma in a column list). Each column's type and constraints are handed to
sqlglot's own parser through `icegres.sql.parse` (the statements' dialect and cache), which knows
PostgreSQL's type grammar (`timestamp with time zone`, `character varying(3)[]`, `int ARRAY`).

Errors are PgError: 42601 for what PostgreSQL would reject as a syntax error, 0A000 for valid
PostgreSQL that an Iceberg table cannot do, and PostgreSQL's own SQLSTATE where it has one.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import replace

from sqlglot import exp
from sqlglot.errors import ParseError, TokenError
from sqlglot.tokens import TokenType

from icegres.engine import ddl_checks, ddl_literals, ddl_refs, ddl_sequences, ddl_views
from icegres.engine.ddl_commands import (
    COMMENT_PROPERTY,
    AddCheck,
    AddColumn,
    AlterAction,
    AlterColumnType,
    AlterTable,
    CheckDef,
    ColumnDef,
    CommentColumn,
    CreateSchema,
    CreateTable,
    CreateTableAs,
    DdlCommand,
    DropColumn,
    DropConstraint,
    DropNotNull,
    DropSchema,
    DropTable,
    PartitionField,
    RenameColumn,
    RenameTable,
    ResetProperties,
    SetDefault,
    SetNotNull,
    SetProperties,
)
from icegres.engine.ddl_index import parse_create_index, parse_drop_index
from icegres.engine.ddl_options import (
    DIALECT,
    PARTITIONING_OPTION,
    checked_properties,
    ident_text,
    is_word,
    parse_partitioning,
)
from icegres.engine.pg_types import column_type
from icegres.pg import errors as e
from icegres.pg.errors import PgError
from icegres.sql import parse
from icegres.sql.databases import DATABASE_ALIASES


def parse_ddl(sql: str, database: str = "") -> DdlCommand:
    """Parse one CREATE/DROP SCHEMA, CREATE/DROP/ALTER TABLE, CREATE TABLE AS or CREATE/DROP/
    ALTER VIEW statement.

    Raises PgError 42601 on a syntax error (with a 1-based `position` where one is known) and
    0A000 for PostgreSQL the lake cannot do; a trailing semicolon is allowed.
    """
    return _Parser(sql, database).statement()


def parse_ddl_literals(sql: str, database: str, values: Mapping[str, object]) -> DdlCommand | None:
    """`parse_ddl` of a statement whose big literals are parameters (`values`, ddl_literals.py):
    the command, if every literal stood for a COMMENT's or DEFAULT's text; None (parse
    `ddl_literals.written_statement(sql, values)` instead) if any stood elsewhere or the parse failed."""
    literals = ddl_literals.Literals(values)
    try:
        command = _Parser(sql, database, literals).statement()
    except PgError:
        return None  # (its error is the written statement's to give, at its positions)
    return command if literals.all_used() and isinstance(command, CreateTable | AlterTable) else None




# PostgreSQL's fully reserved keywords: not usable as unquoted table, schema or column names.
_RESERVED = frozenset("""
ALL ANALYSE ANALYZE AND ANY ARRAY AS ASC ASYMMETRIC BOTH CASE CAST CHECK COLLATE COLUMN
CONSTRAINT CREATE CURRENT_CATALOG CURRENT_DATE CURRENT_ROLE CURRENT_TIME CURRENT_TIMESTAMP
CURRENT_USER DEFAULT DEFERRABLE DESC DISTINCT DO ELSE END EXCEPT FALSE FETCH FOR FOREIGN FROM
GRANT GROUP HAVING IN INITIALLY INTERSECT INTO LATERAL LEADING LIMIT LOCALTIME LOCALTIMESTAMP NOT
NULL OFFSET ON ONLY OR ORDER PLACING PRIMARY REFERENCES RETURNING SELECT SESSION_USER SOME
SYMMETRIC SYSTEM_USER TABLE THEN TO TRAILING TRUE UNION UNIQUE USER USING VARIADIC WHEN WHERE
WINDOW WITH
""".split())

# Object kinds PostgreSQL can CREATE/DROP/ALTER that are not icegres DDL: named in the 0A000.
_OTHER_OBJECTS = ("MATERIALIZED VIEW", "VIEW", "FUNCTION",
                  "PROCEDURE", "TYPE", "DOMAIN", "EXTENSION", "DATABASE", "ROLE", "USER",
                  "TRIGGER", "RULE", "POLICY", "OR REPLACE", "FOREIGN TABLE", "SERVER",
                  "PUBLICATION", "SUBSCRIPTION", "COLLATION", "AGGREGATE", "OPERATOR",
                  "TABLESPACE", "EVENT TRIGGER", "STATISTICS", "CAST")

_CONSTRAINT_KINDS = {"UNIQUE": "UNIQUE", "CHECK": "CHECK", "FOREIGN": "FOREIGN KEY",
                     "FOREIGN KEY": "FOREIGN KEY", "REFERENCES": "FOREIGN KEY",
                     "EXCLUDE": "EXCLUDE"}
_NO_INDEXES_HINT = ("Iceberg tables have no indexes or constraint checks; icegres refuses "
                    "constraints it cannot enforce rather than ignore them.")


def default_text(value: exp.Expression, position: int | None = None) -> str | None:
    """A DEFAULT expression as the SQL text kept for it (None for NULL), refused where PostgreSQL
    refuses it: a column reference or a subquery (0A000), an aggregate or window (42803)."""
    if isinstance(value, exp.Null):
        return None
    if value.find(exp.Column) is not None:
        raise PgError(e.FEATURE_NOT_SUPPORTED, "cannot use column reference in DEFAULT expression", position=position)
    if value.find(exp.Subquery, exp.Select) is not None:
        raise PgError(e.FEATURE_NOT_SUPPORTED, "cannot use subquery in DEFAULT expression", position=position)
    if value.find(exp.AggFunc, exp.Window) is not None:
        raise PgError("42803", "aggregate functions are not allowed in DEFAULT expressions", position=position)
    return value.sql(dialect="postgres", normalize_functions=False)


def _unsupported(what: str, hint: str | None = None, position: int | None = None,
                 *, plural: bool = False) -> PgError:
    verb = "are" if plural else "is"
    return PgError(e.FEATURE_NOT_SUPPORTED, f"{what} {verb} not supported", hint=hint,
                   position=position)


def _constraint_error(kind: str, position: int | None = None) -> PgError:
    return _unsupported(f"{kind} constraints", _NO_INDEXES_HINT, position, plural=True)


# --- the parser -----------------------------------------------------------------------------


class _Parser:
    def __init__(self, sql: str, database: str = "", literals: ddl_literals.Literals | None = None) -> None:
        self.sql = sql
        self.literals = literals  # a big literal's `$n` is its text in a COMMENT or DEFAULT
        self.database = database  # a three-part name may start with it (dbt names every relation so)
        try:
            tokens = list(DIALECT.tokenize(sql))
        except TokenError:
            raise PgError(e.SYNTAX_ERROR, "unterminated quoted string or identifier") from None
        while tokens and tokens[-1].token_type == TokenType.SEMICOLON:
            tokens.pop()
        self.toks = tokens
        self.i = 0

    # -- token helpers

    def _words(self, j: int) -> list[str] | None:
        if j >= len(self.toks) or not is_word(self.toks[j]):
            return None
        return self.toks[j].text.upper().split()

    def _match(self, words: tuple[str, ...], j: int | None = None) -> int:
        """How many tokens from j spell `words` (a token may hold several, like PRIMARY KEY); 0 if not."""
        start = j = self.i if j is None else j
        k = 0
        while k < len(words):
            parts = self._words(j)
            if parts is None or tuple(parts) != words[k:k + len(parts)]:
                return 0
            k += len(parts)
            j += 1
        return j - start

    def peek(self, *words: str) -> bool:
        return self._match(words) > 0

    def accept(self, *words: str) -> bool:
        n = self._match(words)
        self.i += n
        return n > 0

    def expect(self, *words: str) -> None:
        if not self.accept(*words):
            raise self.error()

    def peek_type(self, token_type: TokenType, j: int | None = None) -> bool:
        j = self.i if j is None else j
        return j < len(self.toks) and self.toks[j].token_type == token_type

    def accept_type(self, token_type: TokenType) -> bool:
        if self.peek_type(token_type):
            self.i += 1
            return True
        return False

    def expect_type(self, token_type: TokenType) -> None:
        if not self.accept_type(token_type):
            raise self.error()

    def at_end(self) -> bool:
        return self.i >= len(self.toks)

    def expect_end(self) -> None:
        if not self.at_end():
            raise self.error()

    def literal_ahead(self) -> bool:
        """Whether the next tokens are a big literal's `$n` (the tokenizer reads `$` and `n`)."""
        return (self.literals is not None and self.peek_type(TokenType.PARAMETER)
                and self.peek_type(TokenType.NUMBER, self.i + 1) and self.literals.has(self.toks[self.i + 1].text))

    def filled(self, text: str | None) -> str | None:
        """A DEFAULT's SQL text with its big literals written back."""
        return self.literals.filled(text) if self.literals is not None and text else text

    def position(self, j: int | None = None) -> int:
        j = self.i if j is None else j
        return self.toks[j].start + 1 if j < len(self.toks) else len(self.sql.rstrip().rstrip(";")) + 1

    def error(self, j: int | None = None) -> PgError:
        j = self.i if j is None else j
        if j >= len(self.toks):
            return PgError(e.SYNTAX_ERROR, "syntax error at end of input", position=self.position(j))
        tok = self.toks[j]
        text = self.sql[tok.start:tok.end + 1]
        if tok.token_type == TokenType.IDENTIFIER and tok.text == "":
            return PgError(e.SYNTAX_ERROR, f'zero-length delimited identifier at or near "{text}"',
                           position=tok.start + 1)
        return PgError(e.SYNTAX_ERROR, f'syntax error at or near "{text}"', position=tok.start + 1)

    def ident(self) -> str:
        """A schema, table or column name: quoted as written, unquoted folded to lower case."""
        if self.at_end():
            raise self.error()
        tok = self.toks[self.i]
        name = ident_text(tok)
        if name is None or name == "" or (tok.token_type != TokenType.IDENTIFIER
                                          and name.upper() in _RESERVED):
            raise self.error()
        self.i += 1
        return name

    def qualified_name(self) -> tuple[str | None, str]:
        start = self.i
        parts = [self.ident()]
        while self.accept_type(TokenType.DOT):
            parts.append(self.ident())
        if len(parts) == 1:
            return None, parts[0]
        if len(parts) == 2:
            return parts[0], parts[1]
        if len(parts) == 3 and parts[0] in (self.database, *DATABASE_ALIASES):
            return parts[1], parts[2]
        raise PgError(e.FEATURE_NOT_SUPPORTED,
                      f"cross-database references are not implemented: {'.'.join(parts)}",
                      position=self.position(start))

    def matching_paren(self, j: int) -> int:
        """Index of the token closing the parenthesis or bracket at j."""
        depth = 0
        for k in range(j, len(self.toks)):
            t = self.toks[k].token_type
            if t in (TokenType.L_PAREN, TokenType.L_BRACKET):
                depth += 1
            elif t in (TokenType.R_PAREN, TokenType.R_BRACKET):
                depth -= 1
                if depth == 0:
                    return k
        raise self.error(len(self.toks))

    def item_end(self, j: int) -> int:
        """Index of the comma, unmatched ')' or end that ends the list item starting at j."""
        depth = 0
        for k in range(j, len(self.toks)):
            t = self.toks[k].token_type
            if t in (TokenType.L_PAREN, TokenType.L_BRACKET):
                depth += 1
            elif t in (TokenType.R_PAREN, TokenType.R_BRACKET):
                if depth == 0:
                    return k
                depth -= 1
            elif t == TokenType.COMMA and depth == 0:
                return k
            elif t == TokenType.SEMICOLON:
                raise self.error(k)
        if depth:
            raise self.error(len(self.toks))
        return len(self.toks)

    def unsupported_object(self, verb: str) -> PgError:
        for kind in _OTHER_OBJECTS:
            if self.peek(*kind.split()):
                if kind == "OR REPLACE":
                    return _unsupported(f"{verb} OR REPLACE", position=self.position())
                return _unsupported(f"{verb} {kind}", position=self.position())
        return self.error()

    # -- statements

    def statement(self) -> DdlCommand:
        if self.accept("CREATE"):
            return self.create()
        if self.accept("DROP"):
            return self.drop()
        if self.accept("ALTER"):
            return self.alter()
        if self.accept("COMMENT"):
            return self.comment()
        raise self.error()

    def comment(self) -> AlterTable:
        """COMMENT ON TABLE t IS '...' | NULL, COMMENT ON COLUMN t.c IS ...: Iceberg's table
        `comment` property and the field's doc, which Spark and Trino show too."""
        self.expect("ON")
        if self.accept("TABLE"):
            schema, name = self.qualified_name()
            column = None
        elif self.accept("COLUMN"):
            start = self.i
            parts = [self.ident()]
            while self.accept_type(TokenType.DOT):
                parts.append(self.ident())
            if len(parts) not in (2, 3):
                raise PgError(e.SYNTAX_ERROR, "column name must be qualified", position=self.position(start))
            schema, name, column = (None, *parts) if len(parts) == 2 else tuple(parts)
        else:
            raise self.unsupported_object("COMMENT ON")
        self.expect("IS")
        if self.accept("NULL"):
            text = ""
        elif self.peek_type(TokenType.STRING):
            text = self.toks[self.i].text
            self.i += 1
        elif self.literal_ahead():
            text = self.literals.text(self.toks[self.i + 1].text)  # type: ignore[union-attr]
            self.i += 2
        else:
            raise self.error()
        self.expect_end()
        if column is not None:
            action: AlterAction = CommentColumn(column, text)
        elif text:
            action = SetProperties({COMMENT_PROPERTY: text})
        else:
            action = ResetProperties((COMMENT_PROPERTY,))
        return AlterTable(schema, name, (action,), tag="COMMENT")

    def create(self) -> DdlCommand:
        replace = self.accept("OR", "REPLACE")
        if self.peek("VIEW") or any(self.peek(w, "VIEW") for w in ("TEMP", "TEMPORARY", "RECURSIVE")):
            return ddl_views.create_view(self, or_replace=replace)
        if replace:
            raise self.unsupported_object("CREATE OR REPLACE")
        scoped = self.accept("GLOBAL") or self.accept("LOCAL")
        if self.accept("TEMP") or self.accept("TEMPORARY"):
            self.expect("TABLE")
            return self.create_table(temporary=True)
        if scoped:
            raise self.error()
        if self.peek("UNLOGGED"):
            raise _unsupported("CREATE UNLOGGED TABLE",
                               "Every icegres table is an Iceberg table with durable commits.",
                               self.position())
        if self.accept("TABLE"):
            return self.create_table()
        if self.accept("SEQUENCE"):
            return ddl_sequences.parse_create(self)
        if self.accept("SCHEMA"):
            return self.create_schema()
        if self.accept("INDEX"):
            return parse_create_index(self, unique=False)
        if self.accept("UNIQUE", "INDEX"):
            return parse_create_index(self, unique=True)
        raise self.unsupported_object("CREATE")

    def create_schema(self) -> CreateSchema:
        if_not_exists = self.accept("IF", "NOT", "EXISTS")
        authorization_hint = "icegres has no roles: omit AUTHORIZATION."
        if self.peek("AUTHORIZATION"):
            raise _unsupported("CREATE SCHEMA AUTHORIZATION", authorization_hint, self.position())
        start = self.i
        name = self.ident()
        if self.peek("AUTHORIZATION"):
            raise _unsupported("CREATE SCHEMA ... AUTHORIZATION", authorization_hint, self.position())
        if self.peek("CREATE") or self.peek("GRANT"):
            raise _unsupported("CREATE SCHEMA with schema elements",
                               "Run each CREATE TABLE as a statement of its own.", self.position())
        self.expect_end()
        if name.startswith("pg_"):
            raise PgError("42939", f'unacceptable schema name "{name}"',
                          detail='The prefix "pg_" is reserved for system schemas.',
                          position=self.position(start))
        return CreateSchema(name, if_not_exists)

    def drop(self) -> DdlCommand:
        if self.accept("VIEW"):
            return ddl_views.drop_view(self)
        if self.accept("TABLE"):
            if_exists = self.accept("IF", "EXISTS")
            names = [self.qualified_name()]
            while self.accept_type(TokenType.COMMA):
                names.append(self.qualified_name())
            cascade = self.drop_behavior()
            return DropTable(tuple(names), if_exists, cascade)
        if self.accept("SCHEMA"):
            if_exists = self.accept("IF", "EXISTS")
            schemas = [self.ident()]
            while self.accept_type(TokenType.COMMA):
                schemas.append(self.ident())
            cascade = self.drop_behavior()
            return DropSchema(tuple(schemas), if_exists, cascade)
        if self.accept("INDEX"):
            return parse_drop_index(self)
        if self.accept("SEQUENCE"):
            return ddl_sequences.parse_drop(self)
        raise self.unsupported_object("DROP")

    def drop_behavior(self) -> bool:
        cascade = self.accept("CASCADE")
        if not cascade:
            self.accept("RESTRICT")
        self.expect_end()
        return cascade

    # -- CREATE TABLE

    def create_table(self, temporary: bool = False) -> CreateTable | CreateTableAs:
        if_not_exists = self.accept("IF", "NOT", "EXISTS")
        at = self.position()
        schema, name = self.qualified_name()
        if temporary and schema not in (None, "pg_temp"):
            raise PgError("42P16", "cannot create temporary relation in non-temporary schema", position=at)
        if not temporary and schema == "pg_temp":
            temporary = True  # PostgreSQL: a table created in pg_temp is temporary
        if self.peek("PARTITION", "OF") or self.peek("OF"):
            raise _unsupported("CREATE TABLE ... OF", position=self.position())
        if self.peek_type(TokenType.L_PAREN) and not self.column_list_then_as():
            columns, primary_key, checks = self.table_elements(name)
            options = self.table_options(temporary)
            self.expect_end()
            partitioning, properties = self.split_options(options)
            known = {c.name for c in columns}
            for f in partitioning:
                if f.column not in known:
                    raise PgError(e.UNDEFINED_COLUMN,
                                  f'column "{f.column}" named in partition key does not exist')
            return CreateTable(schema, name, columns, if_not_exists, partitioning, properties,
                               primary_key, temporary, checks)
        column_names: tuple[str, ...] = ()
        if self.accept_type(TokenType.L_PAREN):
            names = [self.ident()]
            while self.accept_type(TokenType.COMMA):
                names.append(self.ident())
            self.expect_type(TokenType.R_PAREN)
            column_names = tuple(names)
        options = self.table_options(temporary)
        self.expect("AS")
        query_sql, with_data = self.query_text()
        partitioning, properties = self.split_options(options)
        return CreateTableAs(schema, name, query_sql, if_not_exists, partitioning, properties,
                             column_names, with_data, temporary)

    def column_list_then_as(self) -> bool:
        """At '(' after the table name: is this CTAS's column-name list, not column definitions?"""
        j = self.matching_paren(self.i) + 1
        if self._match(("WITH",), j) and self.peek_type(TokenType.L_PAREN, j + 1):
            j = self.matching_paren(j + 1) + 1
        return self._match(("AS",), j) > 0

    def query_text(self) -> tuple[str, bool]:
        if self.at_end():
            raise self.error()
        end = len(self.toks)
        with_data = True
        for words, data in ((("WITH", "NO", "DATA"), False), (("WITH", "DATA"), True)):
            j = end - len(words)
            if j >= self.i and self._match(words, j) == len(words):
                end, with_data = j, data
                break
        if self.peek("EXECUTE"):
            raise _unsupported("CREATE TABLE ... AS EXECUTE", position=self.position())
        if not (self.peek("SELECT") or self.peek("WITH") or self.peek("VALUES")
                or self.peek("TABLE") or self.peek_type(TokenType.L_PAREN)):
            raise self.error()
        if end <= self.i:
            raise self.error(end)
        first, last = self.toks[self.i], self.toks[end - 1]
        if self.accept("TABLE"):
            # TABLE t is PostgreSQL shorthand the query engine may not know.
            name_start = self.toks[self.i].start if not self.at_end() else len(self.sql)
            self.qualified_name()
            if self.i != end:
                raise self.error()
            return f"SELECT * FROM {self.sql[name_start:last.end + 1]}", with_data
        return self.sql[first.start:last.end + 1], with_data

    def table_elements(self, table: str) -> tuple[tuple[ColumnDef, ...], tuple[str, ...], tuple[CheckDef, ...]]:
        self.expect_type(TokenType.L_PAREN)
        columns: list[ColumnDef] = []
        primary_key: tuple[str, ...] = ()
        checks: list[CheckDef] = []
        if self.accept_type(TokenType.R_PAREN):
            return (), (), ()
        while True:
            start = self.i
            end = self.item_end(start)
            if end == start:
                raise self.error()
            if self.peek("CHECK") or (self.peek("CONSTRAINT") and self._match(("CHECK",), self.i + 2)):
                checks.append(self.check_constraint(end))
            elif self.peek("CONSTRAINT") or self.peek("PRIMARY") or self.peek("PRIMARY", "KEY") \
                    or self.peek("LIKE") or any(self.peek(*k.split()) for k in _CONSTRAINT_KINDS):
                key = self.table_constraint(end)
                if primary_key:
                    raise PgError("42P16", f'multiple primary keys for table "{table}" are not allowed',
                                  position=self.position(start))
                primary_key = key
            else:
                column, is_key = self.column_def(end, table)
                checks.extend(column.checks)  # (PostgreSQL names them in the order written)
                if is_key:
                    if primary_key:
                        raise PgError("42P16",
                                      f'multiple primary keys for table "{table}" are not allowed',
                                      position=self.position(start))
                    primary_key = (column.name,)
                if any(c.name == column.name for c in columns):
                    raise PgError("42701", f'column "{column.name}" specified more than once',
                                  position=self.position(start))
                columns.append(column)
            if self.accept_type(TokenType.COMMA):
                continue
            self.expect_type(TokenType.R_PAREN)
            break
        names = {c.name for c in columns}
        for key_column in primary_key:
            if key_column not in names:
                raise PgError(e.UNDEFINED_COLUMN, f'column "{key_column}" named in key does not exist')
        columns = [replace(c, not_null=True) if c.name in primary_key else c for c in columns]
        for c in columns:
            if c.name in primary_key:
                _check_key_type(c)
        return tuple(columns), primary_key, tuple(checks)

    def table_constraint(self, end: int) -> tuple[str, ...]:
        """A table constraint element; only PRIMARY KEY (a, b) is possible on Iceberg."""
        if self.peek("LIKE"):
            raise _unsupported("CREATE TABLE ... (LIKE ...)", position=self.position())
        if self.accept("CONSTRAINT"):
            self.ident()
        for words, kind in _CONSTRAINT_KINDS.items():
            if self.peek(*words.split()):
                raise _constraint_error(kind, self.position())
        if not (self.accept("PRIMARY", "KEY")):
            raise self.error()
        self.expect_type(TokenType.L_PAREN)
        key = [self.ident()]
        while self.accept_type(TokenType.COMMA):
            key.append(self.ident())
        self.expect_type(TokenType.R_PAREN)
        if self.i != end:
            if self.peek("INCLUDE") or self.peek("WITH") or self.peek("USING"):
                raise _unsupported("PRIMARY KEY index parameters", _NO_INDEXES_HINT, self.position())
            raise self.error()
        for j, name in enumerate(key):
            if name in key[:j]:
                raise PgError("42701", f'column "{name}" appears twice in primary key constraint')
        return tuple(key)

    def check_constraint(self, end: int, alter: bool = False) -> CheckDef:
        """`[CONSTRAINT name] CHECK (expr) [NO INHERIT] [NOT VALID]` up to token `end`."""
        name = self.ident() if self.accept("CONSTRAINT") else None
        self.expect("CHECK")
        check = ddl_checks.check_def(self.sql, self.toks[self.i:end], name, alter)
        self.i = end
        return check

    def column_def(self, end: int, table: str) -> tuple[ColumnDef, bool]:
        """`name type [constraints]` up to token `end`; True if it declares PRIMARY KEY."""
        name = self.ident()
        if self.i >= end:
            raise self.error()
        parsed = self.parse_column_body(end)
        kind = parsed.args.get("kind")
        if kind is None:
            raise self.error()
        type_start = self.i
        identity, sequence = ddl_sequences.serial_kind(kind), None
        if identity:
            kind = exp.DataType.build(identity)
            identity = "s"
        try:
            ctype = column_type(kind)
        except PgError as err:
            err.position = err.position or self.position(type_start)
            raise
        not_null = null = is_key = False
        default: str | None = None
        checks: list[CheckDef] = []
        for constraint in parsed.args.get("constraints") or []:
            c = constraint.args.get("kind") if isinstance(constraint, exp.ColumnConstraint) else constraint
            if isinstance(c, exp.NotNullColumnConstraint):
                if c.args.get("allow_null"):
                    null = True
                else:
                    not_null = True
                if null and not_null:
                    raise PgError(e.SYNTAX_ERROR, f'conflicting NULL/NOT NULL declarations for column '
                                                  f'"{name}" of table "{table}"', position=self.position(type_start))
            elif isinstance(c, exp.PrimaryKeyColumnConstraint):
                if c.args.get("options"):
                    raise _unsupported("PRIMARY KEY options", _NO_INDEXES_HINT, self.position(type_start))
                is_key = True
            elif isinstance(c, exp.DefaultColumnConstraint):
                default = self.filled(default_text(c.this, self.position(type_start)))
            elif isinstance(c, exp.UniqueColumnConstraint):
                raise _constraint_error("UNIQUE", self.position(type_start))
            elif isinstance(c, exp.CheckColumnConstraint):
                checks.append(ddl_checks.column_check(constraint, name))
            elif isinstance(c, exp.Reference):
                raise _constraint_error("FOREIGN KEY", self.position(type_start))
            elif isinstance(c, exp.GeneratedAsIdentityColumnConstraint) and c.args.get("expression") is None:
                if identity or default is not None:
                    raise PgError(e.SYNTAX_ERROR, f'both default and identity specified for column "{name}" of '
                                                  f'table "{table}"', position=self.position(type_start))
                identity, sequence = ddl_sequences.identity_of(c, ctype.pg_name)
                not_null = True
            elif isinstance(c, exp.GeneratedAsIdentityColumnConstraint | exp.ComputedColumnConstraint):
                raise _unsupported("generated columns", "Iceberg has no computed columns: compute "
                                   "the value in INSERT.", self.position(type_start), plural=True)
            elif isinstance(c, exp.CollateColumnConstraint):
                # Iceberg compares strings by their UTF-8 bytes, which is the C collation.
                if c.this.name.lower() not in ("c", "posix", "default"):
                    raise _unsupported(f'collation "{c.this.name}"',
                                       'Iceberg strings sort by bytes: only COLLATE "C" is possible.',
                                       self.position(type_start))
            else:
                raise _unsupported(f'column constraint "{constraint.sql(dialect="postgres")}"',
                                   position=self.position(type_start))
        self.i = end
        if identity and default is not None:
            raise PgError(e.SYNTAX_ERROR, f'multiple default values specified for column "{name}" of table "{table}"',
                          position=self.position(type_start))
        return ColumnDef(name, ctype, not_null or is_key or identity == "s", default, tuple(checks), identity,
                         sequence), is_key

    def parse_column_body(self, end: int) -> exp.ColumnDef:
        """sqlglot's parse of the type and constraints from the current token up to `end`."""
        first, last = self.toks[self.i], self.toks[end - 1]
        prefix = "CREATE TABLE _t (_c "
        body = self.sql[first.start:last.end + 1]
        try:
            tree = parse.parse_or_sqlglot_error(prefix + body + ")")
        except ParseError as exc:
            raise self.body_error(exc, first.start - len(prefix), end) from None
        exprs = tree.this.expressions if isinstance(tree, exp.Create) and isinstance(tree.this, exp.Schema) else []
        if len(exprs) != 1 or not isinstance(exprs[0], exp.ColumnDef) or exprs[0].name != "_c":
            raise self.error()
        return exprs[0]

    def body_error(self, exc: ParseError, offset: int, end: int) -> PgError:
        """The PostgreSQL-style syntax error for a sqlglot error inside a column body."""
        detail = exc.errors[0] if exc.errors else {}
        highlight = str(detail.get("highlight") or "")
        for j in range(self.i, end):
            tok = self.toks[j]
            if highlight and self.sql[tok.start:tok.end + 1] == highlight and tok.start > self.toks[self.i].start:
                return self.error(j)
        return self.error(end) if highlight in (")", "") else self.error(self.i)

    def table_options(self, temporary: bool = False) -> list[tuple[str, str]]:
        options: list[tuple[str, str]] = []
        while not self.at_end() and not self.peek("AS"):
            if self.accept("WITH"):
                if self.peek("OIDS"):
                    raise _unsupported("tables declared WITH OIDS", position=self.position(),
                                       plural=True)
                options.extend(self.option_list(with_values=True))
            elif self.accept("WITHOUT", "OIDS"):
                pass
            elif self.peek("INHERITS"):
                raise _unsupported("table inheritance", position=self.position())
            elif self.peek("PARTITION", "BY"):
                raise _unsupported("PARTITION BY", "Declare Iceberg partitioning with WITH "
                                   "(partitioning = 'day(ts), bucket(16, id)').", self.position())
            elif self.peek("USING"):
                raise _unsupported("table access methods", position=self.position(), plural=True)
            elif self.peek("ON", "COMMIT"):
                if not temporary:
                    raise PgError("42P16", "ON COMMIT can only be used on temporary tables",
                                  position=self.position())
                self.accept("ON", "COMMIT")
                if not self.accept("PRESERVE", "ROWS"):
                    raise _unsupported("ON COMMIT DELETE ROWS / DROP", "Temporary tables keep their rows "
                                       "until DROP TABLE or the end of the session.", self.position())
            elif self.peek("TABLESPACE"):
                raise _unsupported("TABLESPACE", position=self.position())
            else:
                raise self.error()
        return options

    def option_list(self, with_values: bool) -> list[tuple[str, str]]:
        """`( key [= value], ... )`; keys may be dotted (write.format.default); a bare key is 'true'."""
        self.expect_type(TokenType.L_PAREN)
        out: list[tuple[str, str]] = []
        while True:
            key = self.option_key()
            value = "true"
            if with_values and self.accept_type(TokenType.EQ):
                value = self.option_value()
            out.append((key, value))
            if self.accept_type(TokenType.COMMA):
                continue
            self.expect_type(TokenType.R_PAREN)
            return out

    def option_key(self) -> str:
        parts = []
        while True:
            if self.at_end():
                raise self.error()
            name = ident_text(self.toks[self.i])
            if not name:
                raise self.error()
            parts.append(name)
            self.i += 1
            if not self.accept_type(TokenType.DOT):
                return ".".join(parts)

    def option_value(self) -> str:
        if self.at_end():
            raise self.error()
        tok = self.toks[self.i]
        sign = ""
        if tok.token_type in (TokenType.DASH, TokenType.PLUS) and self.peek_type(TokenType.NUMBER, self.i + 1):
            sign = "-" if tok.token_type == TokenType.DASH else ""
            self.i += 1
            tok = self.toks[self.i]
        if tok.token_type in (TokenType.STRING, TokenType.NUMBER):
            self.i += 1
            return sign + tok.text
        name = ident_text(tok)
        if name is None:
            raise self.error()
        self.i += 1
        return name

    def split_options(self, options: list[tuple[str, str]]
                      ) -> tuple[tuple[PartitionField, ...], dict[str, str]]:
        partitioning: tuple[PartitionField, ...] = ()
        properties: dict[str, str] = {}
        for key, value in options:
            if key == PARTITIONING_OPTION:
                partitioning = parse_partitioning(value)
            else:
                properties[key] = value
        return partitioning, checked_properties(properties)

    # -- ALTER TABLE

    def alter(self) -> DdlCommand:
        if self.accept("VIEW"):
            return ddl_views.alter_view(self)
        if self.accept("SEQUENCE"):
            return ddl_sequences.parse_alter(self)
        if not self.accept("TABLE"):
            raise self.unsupported_object("ALTER")
        if_exists = self.accept("IF", "EXISTS")
        self.accept("ONLY")
        schema, name = self.qualified_name()
        self.accept_type(TokenType.STAR)
        if self.accept("RENAME"):
            if self.accept("TO"):
                new_name = self.ident()
                self.expect_end()
                return AlterTable(schema, name, (RenameTable(new_name),), if_exists)
            if self.peek("CONSTRAINT"):
                raise _unsupported("ALTER TABLE ... RENAME CONSTRAINT", _NO_INDEXES_HINT, self.position())
            self.accept("COLUMN")
            old = self.ident()
            self.expect("TO")
            new = self.ident()
            self.expect_end()
            return AlterTable(schema, name, (RenameColumn(old, new),), if_exists)
        if ddl_refs.starts_ref_change(self):
            return AlterTable(schema, name, (ddl_refs.parse_ref_change(self),), if_exists)
        if self.peek("SET", "SCHEMA"):
            raise _unsupported("ALTER TABLE ... SET SCHEMA",
                               "Create the table in the other schema with CREATE TABLE ... AS "
                               "SELECT and drop this one.", self.position())
        actions = [self.alter_action(name)]
        while self.accept_type(TokenType.COMMA):
            actions.append(self.alter_action(name))
        self.expect_end()
        return AlterTable(schema, name, tuple(actions), if_exists)

    def alter_action(self, table: str) -> AlterAction:
        start = self.i
        if self.accept("ADD"):
            if self.peek("CHECK") or (self.peek("CONSTRAINT") and self._match(("CHECK",), self.i + 2)):
                return AddCheck(self.check_constraint(self.item_end(self.i), alter=True))
            if self.accept("CONSTRAINT"):
                self.ident()
            for words, kind in {**_CONSTRAINT_KINDS, "PRIMARY KEY": "PRIMARY KEY"}.items():
                if self.peek(*words.split()):
                    raise PgError(e.FEATURE_NOT_SUPPORTED,
                                  f"ALTER TABLE ... ADD {kind} is not supported",
                                  hint=_NO_INDEXES_HINT, position=self.position())
            self.accept("COLUMN")
            if_not_exists = self.accept("IF", "NOT", "EXISTS")
            column, is_key = self.column_def(self.item_end(self.i), table)
            if is_key:
                raise _unsupported("ALTER TABLE ... ADD COLUMN ... PRIMARY KEY",
                                   "An Iceberg table's identifier fields are set when it is created.",
                                   self.position(start))
            return AddColumn(column, if_not_exists)
        if self.accept("DROP"):
            if self.accept("CONSTRAINT"):
                if_exists = self.accept("IF", "EXISTS")
                name = self.ident()
                _ = self.accept("CASCADE") or self.accept("RESTRICT")
                return DropConstraint(name, if_exists)
            self.accept("COLUMN")
            if_exists = self.accept("IF", "EXISTS")
            column_name = self.ident()
            if not self.accept("CASCADE"):
                self.accept("RESTRICT")
            return DropColumn(column_name, if_exists)
        if self.accept("ALTER"):
            self.accept("COLUMN")
            column_name = self.ident()
            if self.accept("SET", "DATA", "TYPE") or self.accept("TYPE"):
                end = self.item_end(self.i)
                for j in range(self.i, end):
                    if self._match(("USING",), j) or self._match(("COLLATE",), j):
                        raise _unsupported(f"ALTER COLUMN ... TYPE ... {self.toks[j].text.upper()}",
                                           "Iceberg changes a column's type only by widening it "
                                           "(integer to bigint, real to double precision, numeric "
                                           "to a larger precision).", self.position(j))
                if self.i >= end:
                    raise self.error()
                type_start = self.i
                parsed = self.parse_column_body(end)
                if parsed.args.get("constraints"):
                    raise self.error(type_start + 1)
                try:
                    new_type = column_type(parsed.args["kind"])
                except PgError as err:
                    err.position = err.position or self.position(type_start)
                    raise
                self.i = end
                return AlterColumnType(column_name, new_type)
            if self.accept("SET", "NOT", "NULL"):
                return SetNotNull(column_name)
            if self.accept("DROP", "NOT", "NULL"):
                return DropNotNull(column_name)
            if self.accept("DROP", "DEFAULT"):
                return SetDefault(column_name, None)
            if self.accept("SET", "DEFAULT"):
                end = self.item_end(self.i)
                if self.i >= end:
                    raise self.error()
                start = self.i
                body = self.sql[self.toks[start].start:self.toks[end - 1].end + 1]
                try:
                    value = parse.expression(body)
                except PgError as err:
                    if err.sqlstate != e.SYNTAX_ERROR:
                        raise
                    raise self.error(start) from None
                self.i = end
                return SetDefault(column_name, self.filled(default_text(value, self.position(start))))
            words = self._words(self.i)
            if words:
                raise _unsupported(f"ALTER COLUMN ... {' '.join(words)}", position=self.position())
            raise self.error()
        if self.accept("SET"):
            if self.peek_type(TokenType.L_PAREN):
                options = self.option_list(with_values=True)
                _refuse_partitioning(options)
                return SetProperties(checked_properties(dict(options)))
            words = self._words(self.i)
            if words:
                raise _unsupported(f"ALTER TABLE ... SET {' '.join(words)}", position=self.position())
            raise self.error()
        if self.accept("RESET"):
            keys = self.option_list(with_values=False)
            _refuse_partitioning(keys)
            return ResetProperties(tuple(k for k, _ in keys))
        words = self._words(self.i)
        if words and words[0] not in ("RENAME",) and words[0] not in _RESERVED:
            raise _unsupported(f"ALTER TABLE ... {' '.join(words)}", position=self.position())
        raise self.error()


def _refuse_partitioning(options: list[tuple[str, str]]) -> None:
    if any(key == PARTITIONING_OPTION for key, _ in options):
        raise _unsupported("changing the partitioning of an existing table",
                           "Create a new table with CREATE TABLE ... WITH (partitioning = '...') AS "
                           "SELECT.")


def _check_key_type(column: ColumnDef) -> None:
    # Iceberg identifier fields must be primitive and not floating point (the spec forbids it).
    if column.type.kind in ("float", "double", "list"):
        raise PgError(e.FEATURE_NOT_SUPPORTED,
                      f'primary key column "{column.name}" of type {column.type.pg_name} is not supported',
                      hint="Iceberg identifier fields cannot be floating point or arrays.")
