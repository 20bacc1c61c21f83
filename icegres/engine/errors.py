"""DataFusion and pyiceberg failures -> PgError with the SQLSTATE a Postgres client expects.

PostgreSQL also says where in the statement an error is (ErrorResponse field 'P', a 1-based
character offset). DataFusion's planner does not, but its messages name the thing that failed (a
column, a table, a function) and its parser gives a line and column, so `locate` finds the token in
the statement text. The numbers follow PostgreSQL: a column or relation reference is placed at the
start of its (possibly qualified) name, a function call at the start of the function's name, a
syntax error at the offending token and "end of input" one past the last character.
"""

from __future__ import annotations

import re
from collections.abc import Callable
from dataclasses import dataclass
from enum import Enum

from icegres.pg import big_str
from icegres.pg import errors as e
from icegres.pg.errors import PgError
from icegres.sql.lexer import Kind, Token, tokenize, unterminated_message


class Anchor(Enum):
    """What in the statement an error points at; each kind has its own way of finding it."""

    COLUMN = "column"
    TABLE = "table"
    FUNCTION = "function"
    LINE_COLUMN = "line_column"  # the parser's own coordinates: meaningful only for the text it parsed
    END = "end"  # "found: EOF"
    UNTERMINATED = "unterminated"  # a quote or comment that never closes
    QUALIFIER = "qualifier"  # `nope.*` with no relation nope in FROM
    PARAMETER = "parameter"  # `$2` in a statement given fewer values


@dataclass(frozen=True)
class Target:
    """Where an error points, as DataFusion's message tells it."""

    anchor: Anchor
    name: tuple[str, ...] = ()  # identifier parts, case as DataFusion resolved them
    line: int = 0  # 1-based, LINE_COLUMN only
    column: int = 0  # 1-based, in characters, LINE_COLUMN only


AMBIGUOUS_COLUMN = "42702"

# Ordered: the first pattern that matches the DataFusion message decides the SQLSTATE.
_RULES: tuple[tuple[re.Pattern[str], str, str | Callable[..., str | tuple[str, str]] | None], ...] = (
    # A PgError raised inside one of our UDFs (pg_functions.py), as DataFusion quotes its repr.
    (re.compile(r"""value: PgError\('(\w{5})', (?:'((?:[^'\\]|\\.)*)'|"((?:[^"\\]|\\.)*)")\)"""), "",
     lambda sqlstate, single, double: (sqlstate, single if single is not None else double)),
    (re.compile(r'unrecognized configuration parameter "([^"]+)"'), e.UNDEFINED_OBJECT, 'unrecognized configuration parameter "{0}"'),
    (re.compile(r"Placeholder '\$(\d+)' was not provided a value"), e.UNDEFINED_PARAMETER, "there is no parameter ${0}"),
    (re.compile(r"table '(?:datafusion\.)?([^']+)' not found"), e.UNDEFINED_TABLE, 'relation "{0}" does not exist'),
    (re.compile(r"No field named ([^.\s]+(?:\.[^.\s]+)*)\."), e.UNDEFINED_COLUMN, 'column {0} does not exist'),
    (re.compile(r"No field named (.+?)(?:\. Valid fields|\. Did you|$)"), e.UNDEFINED_COLUMN, 'column {0} does not exist'),
    (re.compile(r"Ambiguous reference to unqualified field (\S+)"), AMBIGUOUS_COLUMN, 'column reference "{0}" is ambiguous'),
    (re.compile(r"Invalid qualifier (\S+)"), e.UNDEFINED_TABLE, 'missing FROM-clause entry for table "{0}"'),
    (re.compile(r"Invalid function '([^']+)'"), e.UNDEFINED_FUNCTION, "function {0} does not exist"),
    (re.compile(r"(?:Unknown|Invalid) (?:scalar )?function[: ]+'?([\w.]+)"), e.UNDEFINED_FUNCTION, "function {0} does not exist"),
    (re.compile(r"ParserError\(\"(.*?)\"?\)?$", re.S), e.SYNTAX_ERROR, "syntax error: {0}"),
    (re.compile(r"ParserError|sql parser error", re.I), e.SYNTAX_ERROR, None),
    (re.compile(r"TokenizerError\(\"(.*?)\"?\)?$", re.S), e.SYNTAX_ERROR, "syntax error: {0}"),
    (re.compile(r"Correlated scalar subquery must be aggregated"), e.FEATURE_NOT_SUPPORTED,
     "a correlated subquery used as a value must aggregate what it selects in icegres "
     "(for example max(...)), so that it returns at most one row"),
    (re.compile(r"Scalar subquery returned more than one row"), "21000",
     "more than one row returned by a subquery used as an expression"),
    (re.compile(r"Inconsistent data length across values list"), e.SYNTAX_ERROR, "VALUES lists must all be the same length"),
    (re.compile(r"Divide by zero|division by zero", re.I), e.DIVISION_BY_ZERO, "division by zero"),
    # A date written right whose fields name no day (Feb 30, month 13, year 0): PostgreSQL's
    # date_in reads the fields, then finds them out of range.
    (re.compile(r"Cannot cast string '([ \t\n\r\f\v]*\d{4}-\d{1,2}-\d{1,2}[ \t\n\r\f\v]*)' to value of Date32"),
     e.DATETIME_FIELD_OVERFLOW, 'date/time field value out of range: "{0}"'),
    # (greedy: the value itself may hold quotes)
    (re.compile(r"Cannot cast string '(.*)' to value of (\w+)", re.S), e.INVALID_TEXT_REPRESENTATION,
     lambda value, arrow: f'invalid input syntax for type {_ARROW_TYPE_NAMES.get(arrow, arrow)}: "{value}"'),
    # A number that does not fit the type it is cast to: PostgreSQL's "integer out of range".
    (re.compile(r"(?:Can't cast value -?[0-9.eE+-]+ to type|value of -?\d+ is out of range) (Int(?:16|32|64))"),
     e.NUMERIC_VALUE_OUT_OF_RANGE, lambda arrow: f"{_ARROW_TYPE_NAMES[arrow]} out of range"),
    (re.compile(r"is too large to store in a Decimal(?:128|256) of precision"), e.NUMERIC_VALUE_OUT_OF_RANGE,
     "numeric field overflow"),
    (re.compile(r"Cast error|Cannot cast|Parser error", re.I), e.INVALID_TEXT_REPRESENTATION, None),
    (re.compile(r"overflow", re.I), e.NUMERIC_VALUE_OUT_OF_RANGE, None),
    (re.compile(r"not implemented|Unsupported|not supported", re.I), e.FEATURE_NOT_SUPPORTED, None),
    (re.compile(r"Error during planning|Schema error|type_coercion|Coercion", re.I), "42804", None),
)
# DataFusion's ResourcesExhausted: the query memory pool (engine/memory.py) cannot grant what an
# operator that cannot spill needs. PostgreSQL's words, DataFusion's account as the detail.
_RESOURCES_EXHAUSTED = re.compile(r"Resources exhausted: (.*)", re.I | re.S)

# Arrow's names for the types DataFusion casts text to, as PostgreSQL names them in messages.
_ARROW_TYPE_NAMES = {"Int16": "smallint", "Int32": "integer", "Int64": "bigint", "Float32": "real",
                     "Float64": "double precision", "Boolean": "boolean", "Date32": "date",
                     "Decimal128": "numeric", "Decimal256": "numeric"}


def _clean(message: str) -> str:
    message = message.strip()
    # "Optimizer rule '...' failed / caused by / <the fault>": the innermost cause says what is wrong.
    if "\ncaused by\n" in message:
        message = message.rsplit("\ncaused by\n", 1)[1].strip()
    # DataFusion wraps messages as 'DataFusion error: Error during planning: ...'; clients want the last part.
    for prefix in ("DataFusion error: ", "Error during planning: ", "Schema error: ", "Execution error: ",
                   "Optimizer rule '", "External error: ", "Arrow error: "):
        if message.startswith(prefix) and prefix != "Optimizer rule '":
            message = message[len(prefix):]
    return message.splitlines()[0] if message else "internal error"


def from_datafusion(exc: BaseException, sql: str | None = None, *, verbatim: bool = True) -> PgError:
    """The PgError a Postgres client should see for a DataFusion failure.

    With `sql` (the statement as the client sent it) the error carries PostgreSQL's position when
    the token can be found. `verbatim` says DataFusion parsed `sql` itself rather than a rewrite of
    it: only then do the parser's line and column refer to `sql`. Names are looked up either way.
    """
    if isinstance(exc, PgError):
        return exc
    text = str(exc)
    if len(text) > 2 * _EDGE_CHARS + len(_ELIDED):
        return _from_long(text, sql, verbatim)
    return _from_text(text, sql, verbatim)


# A message over twice this is read by its two ends, the middle elided (`_from_long`).
_EDGE_CHARS = 4096
_ELIDED = "\x00icegres: elided\x00"  # (no DataFusion message holds a NUL)


def _from_long(text: str, sql: str | None, verbatim: bool) -> PgError:
    """`from_datafusion` of a long message: DataFusion quotes a value it cannot cast whole, and
    for a 50 MB literal the rules' searches over the message held the GIL for 4 s in all (one
    that backtracks through the value, others that scan it to the end), during which every
    session waited. Every rule finds what it reads near the message's ends, so the rules read
    its two ends, and the middle goes back where the message quotes it."""
    lo, hi = _EDGE_CHARS, len(text) - _EDGE_CHARS
    head, tail = text[:lo], text[hi:]
    err = _from_text(head + _ELIDED + tail, sql, verbatim)
    if _ELIDED not in err.message:
        return err
    before, _, after = err.message.partition(_ELIDED)
    # A message that is DataFusion's first line (`_clean`: it runs to a line break of the tail or
    # to its end) ends at the middle's first line break, if it has one. (Searched and joined in
    # place: each copy of the middle holds the GIL.)
    at = len(after)
    first_line = after == tail[:at] and (at == len(tail.rstrip()) or tail[at] in "\n\r")
    breaks = [k for k in (text.find("\n", lo, hi), text.find("\r", lo, hi)) if k >= 0] if first_line else []
    end = min(breaks) if breaks else hi
    # (the middle sliced a part at a time and joined with the GIL let go: pg/big_str.py)
    middle = [text[k:min(k + big_str.BIG_CHARS, end)] for k in range(lo, end, big_str.BIG_CHARS)]
    err.message = big_str.join([before, *middle] if breaks else [before, *middle, after])
    return err


def _from_text(text: str, sql: str | None, verbatim: bool) -> PgError:
    exhausted = _RESOURCES_EXHAUSTED.search(text)
    if exhausted:
        return PgError(e.OUT_OF_MEMORY, "out of memory", detail=exhausted.group(1).strip().splitlines()[0],
                       hint="The statement needs more than --query-memory allows for what it cannot spill "
                            "(a join's build side); raise it or make the statement smaller.")
    for pattern, sqlstate, template in _RULES:
        m = pattern.search(text)
        if m:
            if template is None:
                msg = _clean(text)
            else:
                msg = template(*m.groups()) if callable(template) else template.format(*m.groups())
            if isinstance(msg, tuple):  # the rule read the SQLSTATE from the text too
                sqlstate, msg = msg
            err = PgError(sqlstate, msg)
            break
    else:
        err = PgError(e.INTERNAL_ERROR, _clean(text))
    target = target_of(text, err.sqlstate)
    if target is not None and err.sqlstate == e.UNDEFINED_COLUMN:
        err.message = _column_message(target.name)
    if target is not None and sql is not None:
        _place(err, target, sql, verbatim=verbatim)
    return err


def _place(err: PgError, target: Target, sql: str, *, verbatim: bool) -> None:
    """Give `err` its position in `sql`, and PostgreSQL's wording where we now know the token."""
    if target.anchor in (Anchor.LINE_COLUMN, Anchor.END) and not verbatim:
        return
    tokens = tokenize(sql)
    if target.anchor in (Anchor.COLUMN, Anchor.TABLE):
        word = _keyword_misread_as_name(tokens, target.name[-1:] if target.anchor is Anchor.TABLE else target.name)
        if word is not None:
            # DataFusion took a reserved word for a name (`select from where`); PostgreSQL's
            # grammar rejects the word itself.
            err.sqlstate, err.message = e.SYNTAX_ERROR, f'syntax error at or near "{word.text}"'
            err.position = _char_position(word.start)
            return
    err.position = locate(sql, target, tokens)
    if err.position is None:
        return
    if target.anchor is Anchor.TABLE:
        chain = _matching_chain(tokens, target)
        if chain is not None:
            # PostgreSQL names the schema and the relation, never the database of a three-part name.
            err.message = f'relation "{".".join(chain.parts[-2:])}" does not exist'
    elif target.anchor is Anchor.END and err.sqlstate == e.SYNTAX_ERROR:
        err.message, err.detail = "syntax error at end of input", _parser_says(err.message)
    elif target.anchor is Anchor.LINE_COLUMN:
        at = next((t for t in tokens if _char_position(t.start) == err.position), None)
        if at is not None:
            err.message, err.detail = f'syntax error at or near "{at.text}"', _parser_says(err.message)
    elif target.anchor is Anchor.UNTERMINATED:
        bad = next(t for t in tokens if t.kind is Kind.UNTERMINATED)
        err.message = unterminated_message(bad.text)


def _parser_says(message: str) -> str | None:
    # DataFusion's explanation ("Expected: ..., found: ...") stays available as the detail.
    said = message.removeprefix("syntax error: ")
    said = _LINE_COLUMN.sub("", said).strip()
    return said if said and said != message else None


def _column_message(name: tuple[str, ...]) -> str:
    # PostgreSQL quotes a bare column name but prints a qualified one as relation.column, unquoted.
    if len(name) == 1:
        return f'column "{name[0]}" does not exist'
    return f"column {name[-2]}.{name[-1]} does not exist"


# --------------------------------------------------------------------------------------------------
# What DataFusion's message points at

_LINE_COLUMN = re.compile(r"at Line: (\d+), Column: (\d+)")
_FOUND_EOF = re.compile(r"found: EOF\b")
_TABLE = re.compile(r"table '(?:datafusion\.)?([^']+)' not found")
_FIELD = re.compile(r'No field named ((?:"(?:[^"]|"")*"|[^\s".]+)(?:\.(?:"(?:[^"]|"")*"|[^\s".]+))*)')
_FUNCTION = re.compile(r"Invalid function '([^']+)'")
_AMBIGUOUS = re.compile(r"Ambiguous reference to unqualified field (\S+)")
_QUALIFIER = re.compile(r"Invalid qualifier (\S+)")
_TOKENIZER = re.compile(r"TokenizerError")
_PLACEHOLDER = re.compile(r"Placeholder '(\$\d+)'")


def target_of(message: str, sqlstate: str) -> Target | None:
    """What a DataFusion error message says the error is about, if it says (pure)."""
    if sqlstate == e.UNDEFINED_COLUMN and (m := _FIELD.search(message)):
        return Target(Anchor.COLUMN, parse_name(m.group(1)))
    if sqlstate == AMBIGUOUS_COLUMN and (m := _AMBIGUOUS.search(message)):
        return Target(Anchor.COLUMN, parse_name(m.group(1)))
    if sqlstate == e.UNDEFINED_TABLE and (m := _QUALIFIER.search(message)):
        return Target(Anchor.QUALIFIER, parse_name(m.group(1)))
    if sqlstate == e.UNDEFINED_TABLE and (m := _TABLE.search(message)):
        return Target(Anchor.TABLE, parse_name(m.group(1)))
    if sqlstate == e.UNDEFINED_PARAMETER and (m := _PLACEHOLDER.search(message)):
        return Target(Anchor.PARAMETER, (m.group(1),))
    if sqlstate == e.UNDEFINED_FUNCTION and (m := _FUNCTION.search(message)):
        return Target(Anchor.FUNCTION, tuple(m.group(1).split(".")))
    if sqlstate != e.SYNTAX_ERROR:
        return None
    if _TOKENIZER.search(message):
        return Target(Anchor.UNTERMINATED)
    if m := _LINE_COLUMN.search(message):
        return Target(Anchor.LINE_COLUMN, line=int(m.group(1)), column=int(m.group(2)))
    if _FOUND_EOF.search(message):
        return Target(Anchor.END)
    return None


def parse_name(text: str) -> tuple[str, ...]:
    """`demo."My Table"` -> ('demo', 'My Table'): dotted parts, double quotes honoured and removed."""
    parts: list[str] = []
    i, n = 0, len(text)
    while i < n:
        if text[i] == '"':
            j = i + 1
            buf = []
            while j < n:
                if text[j] == '"':
                    if text.startswith('""', j):
                        buf.append('"')
                        j += 2
                        continue
                    break
                buf.append(text[j])
                j += 1
            parts.append("".join(buf))
            i = j + 1
        else:
            j = text.find(".", i)
            j = n if j < 0 else j
            parts.append(text[i:j])
            i = j
        if i < n and text[i] == ".":
            i += 1
    return tuple(parts)


# --------------------------------------------------------------------------------------------------
# Finding the token


@dataclass(frozen=True)
class Chain:
    """A possibly qualified name as written: `demo."Trips".id` is one chain of three parts."""

    parts: tuple[str, ...]
    first: int  # token index of the first part
    last: int  # token index of the last part

    def start(self, tokens: list[Token]) -> int:
        return tokens[self.first].start


def chains(tokens: list[Token]) -> list[Chain]:
    """Every maximal dotted name in the token list, in textual order."""
    out: list[Chain] = []
    i, n = 0, len(tokens)
    while i < n:
        if tokens[i].kind not in (Kind.NAME, Kind.QUOTED_NAME) or (i > 0 and tokens[i - 1].text == "."):
            i += 1
            continue
        parts = [tokens[i].value]
        j = i
        while (j + 2 < n and tokens[j + 1].text == "."
               and tokens[j + 2].kind in (Kind.NAME, Kind.QUOTED_NAME)):
            parts.append(tokens[j + 2].value)
            j += 2
        out.append(Chain(tuple(parts), i, j))
        i = j + 1
    return out


# Keywords after which a name is being defined or names a relation, not a column reference.
_NOT_A_COLUMN_AFTER = frozenset({"as", "from", "join", "into", "update", "table", "only"})
_RELATION_AFTER = frozenset({"from", "join", "only", "lateral", "update", "into", "table", ","})


def locate(sql: str, target: Target, tokens: list[Token] | None = None) -> int | None:
    """PostgreSQL's 1-based character position in `sql` for what `target` names, or None (pure).

    None whenever the token cannot be told apart with confidence: a wrong caret is worse than none.
    """
    if tokens is None:
        tokens = tokenize(sql)
    if target.anchor is Anchor.LINE_COLUMN:
        return _line_column_position(sql, target.line, target.column)
    if target.anchor is Anchor.END:
        return len(sql) + 1
    if target.anchor is Anchor.UNTERMINATED:
        bad = [t for t in tokens if t.kind is Kind.UNTERMINATED]
        return _char_position(bad[0].start) if bad else None
    if target.anchor is Anchor.PARAMETER:
        param = next((t for t in tokens if t.kind is Kind.PARAM and t.text == target.name[0]), None)
        return None if param is None else _char_position(param.start)
    chain = _matching_chain(tokens, target)
    return None if chain is None else _char_position(chain.start(tokens))


def _char_position(offset: int) -> int:
    return offset + 1


def _line_column_position(sql: str, line: int, column: int) -> int | None:
    lines = sql.split("\n")
    if not 1 <= line <= len(lines) or not 1 <= column <= len(lines[line - 1]) + 1:
        return None
    return sum(len(x) + 1 for x in lines[: line - 1]) + column


def _matching_chain(tokens: list[Token], target: Target) -> Chain | None:
    name = target.name
    if not name:
        return None
    found = chains(tokens)

    def follows(c: Chain) -> str:
        return tokens[c.last + 1].text if c.last + 1 < len(tokens) else ""

    def precedes(c: Chain) -> str:
        return tokens[c.first - 1].value if c.first > 0 else ""

    if target.anchor is Anchor.QUALIFIER:
        stars = [c for c in found if c.parts == name and follows(c) == "."]
        return stars[0] if stars else None
    if target.anchor is Anchor.FUNCTION:
        # DataFusion names the function without the pg_catalog. a rewrite may have dropped.
        calls = [c for c in found if follows(c) == "(" and c.parts[-len(name):] == name]
        return calls[0] if calls else None
    if target.anchor is Anchor.TABLE:
        # The default schema DataFusion added (`public.missing`) was not written, and the
        # database a rewrite dropped (`icegres.demo.missing`) was: either may end the other.
        named = [c for c in found if follows(c) != "("
                 and (name[-len(c.parts):] == c.parts or c.parts[-len(name):] == name)]
        in_from = [c for c in named if precedes(c) in _RELATION_AFTER]
        return (in_from or named or [None])[0]
    refs = [c for c in found if c.parts == name and follows(c) != "(" and precedes(c) not in _NOT_A_COLUMN_AFTER]
    refs = [c for c in refs if not _is_table_alias(tokens, c, found)]
    return refs[0] if refs else None


def _is_table_alias(tokens: list[Token], chain: Chain, found: list[Chain]) -> bool:
    """`from demo.cities nope`: a name right after a relation in FROM is its alias."""
    before = next((c for c in found if c.last == chain.first - 1), None)
    return (before is not None and before.first > 0
            and tokens[before.first - 1].value in _RELATION_AFTER)


# PostgreSQL's reserved keywords that cannot be a column or table name unquoted, yet DataFusion's
# parser sometimes takes as one. Those that are also expressions (current_user, true, ...) are left out.
_RESERVED = frozenset({
    "all", "analyse", "analyze", "and", "any", "array", "as", "asc", "asymmetric", "both", "case",
    "cast", "check", "collate", "column", "constraint", "create", "default", "deferrable", "desc",
    "distinct", "do", "else", "end", "except", "fetch", "for", "foreign", "from", "grant", "group",
    "having", "in", "initially", "intersect", "into", "lateral", "leading", "limit", "not", "offset",
    "on", "only", "or", "order", "placing", "primary", "references", "returning", "select", "some",
    "symmetric", "table", "then", "to", "trailing", "union", "unique", "using", "variadic", "when",
    "where", "window", "with",
})


def _keyword_misread_as_name(tokens: list[Token], name: tuple[str, ...]) -> Token | None:
    """The reserved word DataFusion parsed as the unknown name, if that is what happened."""
    if len(name) != 1 or name[0] not in _RESERVED:
        return None
    word = name[0]
    if any(t.kind is Kind.QUOTED_NAME and t.value == word for t in tokens):
        return None  # a quoted "where" is a legitimate name
    for i, t in enumerate(tokens):
        if t.kind is Kind.NAME and t.value == word and i > 0:
            before = tokens[i - 1]
            # An operand position: right after another keyword, an operator or an open list.
            if (before.kind is Kind.NAME and before.value in _RESERVED) or before.text in ("(", ",", "=", "<", ">", "+", "-", "*", "/"):
                return t
    return None
