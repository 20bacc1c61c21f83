"""A statement, as every layer below the front end receives it.

A front end cuts a Query message into statements (`pieces.split_statements`) and classifies each
one here (`classify`), once: what it is (a query for DataFusion, a write, or one of the session
commands the front end answers itself), its command tag and its command's details. What later
stages need of its text is derived once and kept on the object: its literal shape (the key of
every per-shape cache), its sqlglot tree (one parse, shared: read it, copy it to change it), the
highest `$n` it names, and the tables it may read.

A statement's text is the one the engine reads. A front end whose clients name parameters `?`
(Flight SQL: the DB-API's qmark style) classifies with `qmark=True`, and the statement carries
its text with those placeholders numbered `$1..$n` (`placeholders.number_qmarks`), read once
here: nothing below scans for `?`.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, replace
from enum import Enum
from functools import cached_property
from typing import TYPE_CHECKING

from icegres.pg.errors import FEATURE_NOT_SUPPORTED, SYNTAX_ERROR, PgError
from icegres.sql.escapes import Refusal, unescaped
from icegres.sql.lexer import Kind as TokenKind
from icegres.sql.lexer import scan, strip_leading_comments, tokenize
from icegres.sql.placeholders import number_qmarks
from icegres.sql.shape import literal_shape
from icegres.sql.time_travel import travel_of

if TYPE_CHECKING:
    from sqlglot import exp


class Kind(Enum):
    QUERY = "query"  # planned by DataFusion: SELECT, WITH, VALUES, TABLE, EXPLAIN, SHOW-as-query
    SET = "set"
    SHOW = "show"
    RESET = "reset"
    BEGIN = "begin"
    COMMIT = "commit"
    ROLLBACK = "rollback"
    SAVEPOINT = "savepoint"
    RELEASE = "release"
    ROLLBACK_TO = "rollback_to"
    DECLARE = "declare"
    FETCH = "fetch"
    MOVE = "move"
    CLOSE = "close"
    DEALLOCATE = "deallocate"
    DISCARD = "discard"
    LISTEN = "listen"  # LISTEN/UNLISTEN/NOTIFY: accepted, nothing is ever notified
    LOCK = "lock"  # LOCK TABLE ... IN ACCESS SHARE MODE: a block's snapshot already holds its tables
    COPY_TO = "copy_to"
    COPY_FROM = "copy_from"
    WRITE = "write"  # INSERT/UPDATE/DELETE/MERGE and DDL: the commit machine (a later issue)
    UNSUPPORTED = "unsupported"


@dataclass(frozen=True)
class Statement:
    kind: Kind
    sql: str  # as the engine reads it: `?` placeholders already numbered (`classify(qmark=True)`)
    tag: str  # CommandComplete tag word(s) for commands that carry no row count
    name: str | None = None  # setting, savepoint, cursor or prepared-statement name
    value: str | None = None  # SET value, DECLARE/COPY query, FETCH count
    flag: bool = False  # SET LOCAL, COPY ... CSV, FETCH BACKWARD ...
    options: tuple[tuple[str, str], ...] = ()

    @cached_property
    def shape(self) -> str:
        """The text with its value literals masked (`shape.literal_shape`)."""
        return literal_shape(self.sql)

    @cached_property
    def tree(self) -> exp.Expression:
        """The statement's sqlglot tree (PgError 42601 if it does not parse). Shared with every
        statement of the same text: read it; `tree_copy()` gives one to change."""
        from icegres.sql.parse import parse

        return parse(self.sql)

    def tree_copy(self) -> exp.Expression:
        return self.tree.copy()

    def rewritten(self, sql: str, tree: exp.Expression) -> Statement:
        """This statement as the engine rewrote it (its views or time-travel references
        expanded): the text `sql`, written out from `tree`, which it carries as its tree, so that
        the expanded text is not parsed again. `tree` is shared from then on: never change it."""
        out = replace(self, sql=sql)
        out.__dict__["tree"] = tree  # where `tree`'s cached_property keeps its value
        return out

    @cached_property
    def max_param(self) -> int:
        """The highest `$n` the statement names (0: none)."""
        if "$" not in self.sql:
            return 0
        return max((int(t.text[1:]) for t in tokenize(self.sql) if t.kind is TokenKind.PARAM), default=0)

    def table_refs(self, search_path: list[str]) -> set[tuple[str, str]] | None:
        """Every (schema, table) the statement may read (`tree_table_refs`); None also when it
        cannot be parsed."""
        try:
            tree = self.tree
        except PgError:
            return None
        return tree_table_refs(tree, search_path)

    def lake_refs(self, search_path: list[str]) -> set[tuple[str, str]] | None:
        """`tree_lake_refs` of the statement; None when it cannot be parsed."""
        try:
            tree = self.tree
        except PgError:
            return None
        return tree_lake_refs(tree, search_path)


def tree_table_refs(tree: exp.Expression, search_path: list[str]) -> set[tuple[str, str]] | None:
    """Every (schema, table) `tree` may read, with unqualified names expanded over
    `search_path`; None when it reads the catalog relations (which need the whole lakehouse).
    CTE names are not tables."""
    refs, catalog = _tree_refs(tree, search_path)
    return None if catalog else refs


def inserts_constants(tree: exp.Expression) -> bool:
    """Whether `tree` is an INSERT whose rows are VALUES of literals and parameters (it reads no
    table), its VALUES a tree or read without one (`parse.ConstantValues`)."""
    from sqlglot import exp

    from icegres.sql.parse import ConstantValues

    if not isinstance(tree, exp.Insert):
        return False
    source = tree.expression
    return isinstance(source, ConstantValues) or (isinstance(source, exp.Values) and tree.find(exp.Select) is None)


def tree_lake_refs(tree: exp.Expression, search_path: list[str]) -> set[tuple[str, str]]:
    """The lake tables `tree` may read besides any catalog relations: what a statement over
    pg_catalog must still have mounted (a catalog name that may also be a lake table, such as
    an unqualified `tables`, is among them)."""
    return _tree_refs(tree, search_path, all_names=True)[0]


def _tree_refs(tree: exp.Expression, search_path: list[str],
               all_names: bool = False) -> tuple[set[tuple[str, str]], bool]:
    from sqlglot import exp

    ctes = {cte.alias_or_name.lower() for cte in tree.find_all(exp.CTE)}
    # A write's target is a relation whatever a CTE is named: `WITH t AS (…) DELETE FROM t`
    # deletes from the table t, as in PostgreSQL.
    target = tree.this if isinstance(tree, exp.Insert | exp.Update | exp.Delete | exp.Merge) else None
    target = target.this if isinstance(target, exp.Schema) else target
    travelled = any(t.args.get("version") is not None or "@" in t.name or "$" in t.name
                    for t in tree.find_all(exp.Table))
    refs: set[tuple[str, str]] = set()
    catalog = False
    for table in tree.find_all(exp.Table):
        name = table.name
        if not name or (travelled and travel_of(table) is not None):
            continue  # a snapshot, ref or metadata table: not the table's head (time_travel.py)
        schema = table.db
        if schema:
            if schema.lower() in _CATALOG_SCHEMAS:
                if not all_names:
                    return refs, True
                catalog = True
                continue
            refs.add((schema, name))
        elif name.lower() not in ctes or table is target:
            if name.lower().startswith("pg_") or name.lower() in ("tables", "columns"):
                if not all_names:
                    return refs, True
                catalog = True
            refs.update((s, name) for s in search_path if s not in _CATALOG_SCHEMAS)
    return refs, catalog


_CATALOG_SCHEMAS = ("pg_catalog", "information_schema")


# EXPLAIN [ANALYZE] [VERBOSE] [(options)] before the statement it explains.
EXPLAIN_PREFIX = re.compile(r"\s*EXPLAIN(?:\s+(?:ANALYZE|VERBOSE|\([^)]*\)))*\s+", re.IGNORECASE)


def query(sql: str) -> Statement:
    """A statement the engine runs as a query (a DECLARE's or COPY's query, a catalog probe)."""
    return Statement(Kind.QUERY, sql, "SELECT")


_IDENT = r'(?:"(?:[^"]|"")+"|[A-Za-z_][A-Za-z0-9_$.]*)'


def unquote_ident(name: str) -> str:
    if name.startswith('"') and name.endswith('"'):
        return name[1:-1].replace('""', '"')
    return name.lower()


def classify(sql: str, *, qmark: bool = False) -> Statement:
    """The statement `sql` is, classified once. `qmark`: `?` placeholders are positional
    parameters, numbered `$1..$n` in order (PgError 42601 if it names `$n` as well)."""
    stripped = strip_leading_comments(sql)
    text = stripped.rstrip().rstrip(";").rstrip()
    if qmark:
        text = number_qmarks(text)
    text = _escape_strings_read(text, len(sql) - len(stripped))
    m = re.match(r"[A-Za-z]+", text)
    word = m.group(0).upper() if m else ""
    handler = _HANDLERS.get(word)
    if handler is not None:
        return handler(text)
    if word == "WITH" and (main := _with_main_word(text)) in ("INSERT", "UPDATE", "DELETE", "MERGE"):
        return Statement(Kind.WRITE, text, main)
    if word in ("SELECT", "WITH", "VALUES", "TABLE", "EXPLAIN") or text.startswith("("):
        return Statement(Kind.QUERY, text, "SELECT")
    if word in _WRITE_WORDS:
        return Statement(Kind.WRITE, text, word)
    return Statement(Kind.UNSUPPORTED, text, word)


def _escape_strings_read(text: str, lead: int) -> str:
    """`text` with each E'…' string that has a backslash escape checked as PostgreSQL's scanner
    reads it (PgError where it refuses one: its cursor counts `lead` characters before `text`)
    and written as the standard string of its value, padded with spaces to its length so that
    every later token keeps its offset (error cursors). DataFusion's parser reads escapes its
    own way: it refuses a surrogate pair and a character made of escaped bytes (`\\303\\251`)."""
    if "\\" not in text:
        return text
    out, pos = [], 0
    for kind, start, end in scan(text):
        if kind is not TokenKind.STRING or text[start] not in "eE" or "\\" not in text[start:end]:
            continue
        value = unescaped([text[start + 2 : end - 1]])
        if isinstance(value, Refusal):
            raise value.error(lead + start + 2)
        written = "'" + b"".join(value.pieces).decode().replace("'", "''") + "'"
        out += [text[pos:start], written, " " * (end - start - len(written))]
        pos = end
    return "".join([*out, text[pos:]]) if out else text


def _with_main_word(text: str) -> str:
    """The first word of a WITH statement's own statement (after its CTEs), upper-cased: the word
    at the top level that follows a CTE's closing parenthesis, not its AS ("" if none)."""
    depth, after_body = 0, False
    for kind, start, end in scan(text):
        if kind is TokenKind.OP and text[start] == "(":
            depth += 1
        elif kind is TokenKind.OP and text[start] == ")":
            depth -= 1
            after_body = depth == 0
            continue
        elif depth == 0 and after_body and kind is TokenKind.NAME:
            word = text[start:end].upper()
            if word not in ("AS", "NOT", "MATERIALIZED"):  # (`c(n) AS …`: a column list closed)
                return word
        if depth == 0:
            after_body = False
    return ""


_WRITE_WORDS = {
    "INSERT", "UPDATE", "DELETE", "MERGE", "CREATE", "DROP", "ALTER", "TRUNCATE", "GRANT",
    "REVOKE", "COMMENT", "VACUUM", "ANALYZE", "REFRESH", "CALL", "DO", "PREPARE",
    "EXECUTE", "CHECKPOINT", "CLUSTER", "REINDEX", "IMPORT", "SECURITY", "REASSIGN",
}


def _set(text: str) -> Statement:
    body = text[3:].strip()
    m = re.match(rf"(?:(SESSION|LOCAL)\s+)?SESSION\s+AUTHORIZATION\s+({_IDENT}|'(?:[^']|'')*')\s*$", body, re.I)
    if m:  # the `session_authorization` setting, as PostgreSQL keeps it (DEFAULT: the login user)
        raw = m.group(2)
        value = _setting_value(raw) if raw.startswith("'") or raw.upper() == "DEFAULT" else unquote_ident(raw)
        return Statement(Kind.SET, text, "SET", "session_authorization", value, (m.group(1) or "").upper() == "LOCAL")
    local = False
    m = re.match(r"(SESSION|LOCAL)\s+", body, re.I)
    if m:
        local = m.group(1).upper() == "LOCAL"
        body = body[m.end() :]
    m = re.match(r"TIME\s+ZONE\s+(.*)$", body, re.I | re.S)
    if m:
        return Statement(Kind.SET, text, "SET", "timezone", _setting_value(m.group(1), "timezone"), local)
    if re.match(r"(TRANSACTION|CHARACTERISTICS\s+AS\s+TRANSACTION)\b", body, re.I):
        mode = re.search(r"ISOLATION\s+LEVEL\s+(READ\s+UNCOMMITTED|READ\s+COMMITTED|REPEATABLE\s+READ|SERIALIZABLE)", body, re.I)
        value = " ".join(mode.group(1).lower().split()) if mode else None
        access = _access_mode(body)
        if access and body.upper().startswith("CHARACTERISTICS"):  # the session's default
            access = (("default_transaction_read_only", access[0][1]),)
        return Statement(Kind.SET, text, "SET", "transaction_isolation", value, local, options=access)
    m = re.match(rf"ROLE\s+({_IDENT}|'(?:[^']|'')*')\s*$", body, re.I)
    if m:  # SET ROLE name | NONE: the `role` setting, as PostgreSQL keeps it
        raw = m.group(1)
        value = _setting_value(raw, "role") if raw.startswith("'") else unquote_ident(raw)
        return Statement(Kind.SET, text, "SET", "role", value, local)
    if re.match(r"(SCHEMA|NAMES)\s", body, re.I):
        key, _, rest = body.partition(" ")
        name = "search_path" if key.upper() == "SCHEMA" else "client_encoding"
        return Statement(Kind.SET, text, "SET", name, _setting_value(rest, name), local)
    m = re.match(rf"({_IDENT})\s*(?:=|\s+TO\s+|\s+to\s+)(.*)$", body, re.S | re.I)
    if not m:
        return Statement(Kind.UNSUPPORTED, text, "SET", value="syntax")
    name = unquote_ident(m.group(1))
    return Statement(Kind.SET, text, "SET", name, _setting_value(m.group(2), name.lower()), local)


# Settings whose value is a list of names: PostgreSQL keeps a quoted name quoted in it
# (GUC_LIST_QUOTE); every other setting takes a double-quoted identifier's text
# (pgcli: SET TIME ZONE "Etc/UTC").
_LIST_SETTINGS = frozenset({"search_path", "temp_tablespaces", "session_preload_libraries",
                            "local_preload_libraries", "shared_preload_libraries"})


def _setting_value(raw: str, name: str = "") -> str | None:
    """`'a', b, "C"` -> `a, b, "C"`-style string as PostgreSQL stores it; DEFAULT -> None."""
    raw = raw.strip()
    if raw.upper() in ("DEFAULT", "LOCAL"):
        return None
    parts = []
    for item in _split_list(raw):
        item = item.strip()
        if item.startswith("'") and item.endswith("'") and len(item) >= 2:
            parts.append(item[1:-1].replace("''", "'"))
        elif item.upper().startswith("E'") and item.endswith("'"):
            parts.append(item[2:-1].replace("''", "'").replace("\\'", "'"))
        elif item.startswith('"') and item.endswith('"') and len(item) >= 2 and name not in _LIST_SETTINGS:
            parts.append(item[1:-1].replace('""', '"'))
        else:
            parts.append(item)
    return ", ".join(parts)


def _split_list(raw: str) -> list[str]:
    """`raw` split at its top-level commas: not within quotes, nor within parentheses (COPY's
    `force_quote (a, b)`)."""
    items, cur, quote, depth = [], [], None, 0
    for ch in raw:
        if quote:
            cur.append(ch)
            if ch == quote:
                quote = None
        elif ch in "'\"":
            quote = ch
            cur.append(ch)
        elif ch == "," and depth == 0:
            items.append("".join(cur))
            cur = []
        else:
            depth += {"(": 1, ")": -1}.get(ch, 0)
            cur.append(ch)
    items.append("".join(cur))
    return items


def _show(text: str) -> Statement:
    body = text[4:].strip()
    m = re.match(r"TRANSACTION\s+ISOLATION\s+LEVEL$", body, re.I)
    if m:
        return Statement(Kind.SHOW, text, "SHOW", "transaction_isolation")
    m = re.match(r"TIME\s+ZONE$", body, re.I)
    if m:
        return Statement(Kind.SHOW, text, "SHOW", "timezone")
    m = re.match(rf"({_IDENT})$", body)
    if not m:
        return Statement(Kind.UNSUPPORTED, text, "SHOW", value="syntax")
    return Statement(Kind.SHOW, text, "SHOW", unquote_ident(m.group(1)))


def _reset(text: str) -> Statement:
    body = text[5:].strip()
    if re.match(r"ALL$", body, re.I):
        return Statement(Kind.RESET, text, "RESET", None)
    if re.match(r"TIME\s+ZONE$", body, re.I):
        return Statement(Kind.RESET, text, "RESET", "timezone")
    if re.match(r"SESSION\s+AUTHORIZATION$", body, re.I):
        return Statement(Kind.RESET, text, "RESET", "session_authorization")
    m = re.match(rf"({_IDENT})$", body)
    if not m:
        return Statement(Kind.UNSUPPORTED, text, "RESET", value="syntax")
    return Statement(Kind.RESET, text, "RESET", unquote_ident(m.group(1)))


def _begin(text: str) -> Statement:
    body = text.split(None, 1)[1] if len(text.split(None, 1)) > 1 else ""
    if text.upper().startswith("START") and not re.match(r"TRANSACTION\b", body, re.I):
        return Statement(Kind.UNSUPPORTED, text, "START", value="syntax")
    mode = re.search(r"ISOLATION\s+LEVEL\s+(READ\s+UNCOMMITTED|READ\s+COMMITTED|REPEATABLE\s+READ|SERIALIZABLE)", body, re.I)
    value = " ".join(mode.group(1).lower().split()) if mode else None
    tag = "START TRANSACTION" if text.upper().startswith("START") else "BEGIN"
    return Statement(Kind.BEGIN, text, tag, value=value, options=_access_mode(body))


def _access_mode(body: str) -> tuple[tuple[str, str], ...]:
    """READ ONLY / READ WRITE among a transaction's modes, as the setting it sets."""
    access = re.search(r"\bREAD\s+(ONLY|WRITE)\b", body, re.I)
    if access is None:
        return ()
    return (("transaction_read_only", "on" if access.group(1).upper() == "ONLY" else "off"),)


def _commit(text: str) -> Statement:
    if re.match(r"(COMMIT|END)(\s+(WORK|TRANSACTION))?(\s+AND\s+NO\s+CHAIN)?$", text, re.I):
        return Statement(Kind.COMMIT, text, "COMMIT")
    if re.match(r"COMMIT\s+PREPARED\b", text, re.I):
        return Statement(Kind.UNSUPPORTED, text, "COMMIT PREPARED")
    return Statement(Kind.UNSUPPORTED, text, "COMMIT", value="syntax")


def _rollback(text: str) -> Statement:
    m = re.match(rf"ROLLBACK(?:\s+(?:WORK|TRANSACTION))?\s+TO\s+(?:SAVEPOINT\s+)?({_IDENT})$", text, re.I)
    if m:
        return Statement(Kind.ROLLBACK_TO, text, "ROLLBACK", unquote_ident(m.group(1)))
    if re.match(r"(ROLLBACK|ABORT)(\s+(WORK|TRANSACTION))?(\s+AND\s+NO\s+CHAIN)?$", text, re.I):
        return Statement(Kind.ROLLBACK, text, "ROLLBACK")
    return Statement(Kind.UNSUPPORTED, text, "ROLLBACK", value="syntax")


def _savepoint(text: str) -> Statement:
    m = re.match(rf"SAVEPOINT\s+({_IDENT})$", text, re.I)
    if not m:
        return Statement(Kind.UNSUPPORTED, text, "SAVEPOINT", value="syntax")
    return Statement(Kind.SAVEPOINT, text, "SAVEPOINT", unquote_ident(m.group(1)))


def _release(text: str) -> Statement:
    m = re.match(rf"RELEASE\s+(?:SAVEPOINT\s+)?({_IDENT})$", text, re.I)
    if not m:
        return Statement(Kind.UNSUPPORTED, text, "RELEASE", value="syntax")
    return Statement(Kind.RELEASE, text, "RELEASE", unquote_ident(m.group(1)))


def _declare(text: str) -> Statement:
    m = re.match(
        rf"DECLARE\s+({_IDENT})\s+((?:BINARY|INSENSITIVE|ASENSITIVE|NO\s+SCROLL|SCROLL|\s)*)CURSOR"
        r"(\s+(?:WITH|WITHOUT)\s+HOLD)?\s+FOR\s+(.*)$",
        text, re.I | re.S,
    )
    if not m:
        return Statement(Kind.UNSUPPORTED, text, "DECLARE CURSOR", value="syntax")
    binary = "BINARY" in m.group(2).upper()
    return Statement(Kind.DECLARE, text, "DECLARE CURSOR", unquote_ident(m.group(1)), m.group(4).strip(), binary)


_FETCH_DIR = re.compile(
    rf"(?:FETCH|MOVE)\s+(?:(NEXT|PRIOR|FIRST|LAST|ALL|FORWARD\s+ALL|FORWARD\s+\d+|FORWARD|"
    rf"BACKWARD\s+ALL|BACKWARD\s+\d+|BACKWARD|ABSOLUTE\s+-?\d+|RELATIVE\s+-?\d+|-?\d+)\s+)?"
    rf"(?:(?:FROM|IN)\s+)?({_IDENT})$",
    re.I,
)


def _fetch(text: str) -> Statement:
    kind = Kind.MOVE if text[:4].upper() == "MOVE" else Kind.FETCH
    m = _FETCH_DIR.match(text)
    if not m:
        return Statement(Kind.UNSUPPORTED, text, kind.name, value="syntax")
    direction = " ".join((m.group(1) or "NEXT").upper().split())
    return Statement(kind, text, kind.name, unquote_ident(m.group(2)), direction)


def _close(text: str) -> Statement:
    m = re.match(rf"CLOSE\s+({_IDENT})$", text, re.I)
    if not m:
        return Statement(Kind.UNSUPPORTED, text, "CLOSE CURSOR", value="syntax")
    name = m.group(1)
    if name.upper() == "ALL":
        return Statement(Kind.CLOSE, text, "CLOSE CURSOR ALL", None)
    return Statement(Kind.CLOSE, text, "CLOSE CURSOR", unquote_ident(name))


def _deallocate(text: str) -> Statement:
    m = re.match(rf"DEALLOCATE\s+(?:PREPARE\s+)?({_IDENT})$", text, re.I)
    if not m:
        return Statement(Kind.UNSUPPORTED, text, "DEALLOCATE", value="syntax")
    name = m.group(1)
    if name.upper() == "ALL":
        return Statement(Kind.DEALLOCATE, text, "DEALLOCATE ALL", None)
    return Statement(Kind.DEALLOCATE, text, "DEALLOCATE", unquote_ident(name))


def _discard(text: str) -> Statement:
    m = re.match(r"DISCARD\s+(ALL|PLANS|SEQUENCES|TEMP|TEMPORARY)$", text, re.I)
    if not m:
        return Statement(Kind.UNSUPPORTED, text, "DISCARD", value="syntax")
    what = m.group(1).upper()
    return Statement(Kind.DISCARD, text, f"DISCARD {'TEMP' if what.startswith('TEMP') else what}", value=what)


def _listen(text: str) -> Statement:
    word = text.split()[0].upper()
    return Statement(Kind.LISTEN, text, word)


_LOCK = re.compile(r"LOCK\s+(?:TABLE\s+)?(?P<names>.*?)(?:\s+IN\s+(?P<mode>[A-Z ]+?)\s+MODE)?(?:\s+NOWAIT)?\s*$",
                   re.I | re.S)


def _lock(text: str) -> Statement:
    """LOCK [TABLE] [ONLY] name [*] [, ...] [IN mode MODE] [NOWAIT]: the mode (PostgreSQL's
    default is ACCESS EXCLUSIVE) and the names as written."""
    m = _LOCK.match(text)
    if not m or not m.group("names").strip():
        return Statement(Kind.UNSUPPORTED, text, "LOCK", value="syntax")
    mode = " ".join((m.group("mode") or "ACCESS EXCLUSIVE").upper().split())
    names = tuple((name.strip().removeprefix("ONLY ").removeprefix("only ").rstrip("*").strip(), "")
                  for name in _split_list(m.group("names")))
    return Statement(Kind.LOCK, text, "LOCK TABLE", value=mode, options=names)


def _copy(text: str) -> Statement:
    m = re.match(r"COPY\s+(\(.*\)|[^\s(]+(?:\s*\([^)]*\))?)\s+(TO|FROM)\s+(STDOUT|STDIN)\b(.*)$", text, re.I | re.S)
    if not m:
        return Statement(Kind.UNSUPPORTED, text, "COPY", value="copy")
    source, direction, rest = m.group(1).strip(), m.group(2).upper(), m.group(4)
    options = _copy_options(rest)
    kind = Kind.COPY_TO if direction == "TO" else Kind.COPY_FROM
    return Statement(kind, text, "COPY", value=source, options=tuple(options.items()))


def _copy_options(rest: str) -> dict[str, str]:
    rest = rest.strip()
    if rest.upper().startswith("WITH"):
        rest = rest[4:].strip()
    opts: dict[str, str] = {}
    if rest.startswith("("):
        for item in _split_list(rest.strip()[1:-1]):
            parts = item.strip().split(None, 1)
            if parts:
                opts[parts[0].lower()] = _setting_value(parts[1]) if len(parts) > 1 else "true"
        return opts
    # Legacy syntax: COPY ... TO STDOUT [BINARY] [CSV [HEADER] [DELIMITER 'x'] [NULL 'x']]
    tokens = re.findall(r"'(?:[^']|'')*'|\S+", rest)
    i = 0
    while i < len(tokens):
        t = tokens[i].upper()
        if t in ("CSV", "BINARY"):
            opts["format"] = t.lower()
        elif t == "HEADER":
            opts["header"] = "true"
        elif t in ("DELIMITER", "NULL", "QUOTE", "ESCAPE") and i + 1 < len(tokens):
            opts[t.lower()] = _setting_value(tokens[i + 1]) or ""
            i += 1
        elif t == "FORCE" and i + 1 < len(tokens) and tokens[i + 1].upper() == "QUOTE":
            # FORCE QUOTE * | FORCE QUOTE a, b
            i += 2
            names = [tokens[i]] if i < len(tokens) else []
            while i + 1 < len(tokens) and (names[-1].endswith(",") or tokens[i + 1].startswith(",")):
                i += 1
                names.append(tokens[i])
            opts["force_quote"] = " ".join(names)
        elif t == "AS":
            pass
        i += 1
    return opts


_HANDLERS = {
    "SET": _set,
    "SHOW": _show,
    "RESET": _reset,
    "BEGIN": _begin,
    "START": _begin,
    "COMMIT": _commit,
    "END": _commit,
    "ROLLBACK": _rollback,
    "ABORT": _rollback,
    "SAVEPOINT": _savepoint,
    "RELEASE": _release,
    "DECLARE": _declare,
    "FETCH": _fetch,
    "MOVE": _fetch,
    "CLOSE": _close,
    "DEALLOCATE": _deallocate,
    "DISCARD": _discard,
    "LISTEN": _listen,
    "UNLISTEN": _listen,
    "NOTIFY": _listen,
    "COPY": _copy,
    "LOCK": _lock,
}


def refusal(stmt: Statement) -> PgError:
    """The error for a statement icegres does not run: a syntax error for what PostgreSQL would
    not parse either, else 0A000 naming it (with why, where a reason helps)."""
    if stmt.value == "syntax":
        return PgError(SYNTAX_ERROR, f'syntax error at or near "{stmt.tag}"')
    if stmt.kind is Kind.WRITE:
        return PgError(FEATURE_NOT_SUPPORTED, f"{stmt.tag} is not supported", hint=_WRITE_HINTS.get(stmt.tag))
    if stmt.tag in _KNOWN_UNSUPPORTED:
        return PgError(FEATURE_NOT_SUPPORTED, f"{stmt.tag} is not supported")
    first = stmt.sql.split(None, 1)[0][:40] if stmt.sql.strip() else ""
    return PgError(SYNTAX_ERROR, f'syntax error at or near "{first}"', position=1)


# Why a PostgreSQL command that changes state has no counterpart here, where a reason helps.
_WRITE_HINTS = {
    "VACUUM": "Iceberg tables have no dead tuples to reclaim: a DELETE or UPDATE rewrites data files.",
    "ANALYZE": "Queries are planned with the statistics of the Iceberg manifests and Parquet footers, "
               "which every commit writes; there is nothing to collect.",
    "GRANT": "icegres has no per-table privileges; access is by the server's authentication (docs/configuration.md).",
    "REVOKE": "icegres has no per-table privileges; access is by the server's authentication (docs/configuration.md).",
    "LOCK": "Writers never block each other: conflicting commits fail with 40001 (docs/limitations.md).",
    "CALL": "icegres has no stored procedures.",
    "DO": "icegres has no procedural languages.",
}

# PostgreSQL statements icegres recognises but does not implement (anything else is a syntax error).
_KNOWN_UNSUPPORTED = {
    "LOAD", "REASSIGN", "SECURITY", "IMPORT", "COMMIT PREPARED", "PREPARE", "EXECUTE", "LISTEN",
    "NOTIFY", "COPY", "FETCH", "MOVE", "DECLARE CURSOR", "SET", "SHOW", "RESET", "START",
    "SAVEPOINT", "RELEASE", "ROLLBACK", "COMMIT", "DEALLOCATE", "DISCARD", "CLOSE CURSOR",
}
