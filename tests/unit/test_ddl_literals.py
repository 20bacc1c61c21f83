"""engine/ddl_literals.py: a table DDL statement whose big literals are parameters parses to the
command its written text parses to — a COMMENT's text, a DEFAULT's SQL with the literal back in
place — and any other place for such a parameter gives None (the statement is
then parsed as written)."""

from __future__ import annotations

import pytest

from icegres.engine.ddl import parse_ddl, parse_ddl_literals
from icegres.engine.ddl_literals import written_statement
from icegres.sql.pieces import BigText

pytestmark = pytest.mark.unit

VALUE = "it's \u00e9 \\ $1 " * 1000


def _big(text: str) -> BigText:
    data = text.encode()
    # pieces that split a two-byte character, as a message's pieces may
    pieces = tuple(data[at:at + 1001] for at in range(0, len(data), 1001))
    return BigText(pieces, len(data), len(text))


def _literal(text: str) -> str:
    return "'" + text.replace("'", "''") + "'"


@pytest.mark.parametrize("with_params, written", [
    ("comment on table s.t is $1", "comment on table s.t is <v>"),
    ("comment on column t.c is $1", "comment on column t.c is <v>"),
    ("create table t (id int, s text default $1, n text default upper($3 || $2) check (n <> 'x'))",
     "create table t (id int, s text default <v>, n text default upper(<v>x || <w>) check (n <> 'x'))"),
    ("alter table t alter column s set default $1", "alter table t alter column s set default <v>"),
    ("alter table t add column d text default $1, alter column e set default $2",
     "alter table t add column d text default <v>, alter column e set default <w>"),
])
def test_the_command_is_the_one_the_written_statement_parses_to(with_params, written):
    values = {"1": _big(VALUE), "2": VALUE + "w", "3": _big(VALUE + "x")}
    values = {k: v for k, v in values.items() if f"${k}" in with_params}
    text = written.replace("<v>x", _literal(VALUE + "x")).replace("<v>", _literal(VALUE)).replace(
        "<w>", _literal(VALUE + "w"))
    assert parse_ddl_literals(with_params, "", values) == parse_ddl(text)
    assert written_statement(with_params, values).sql == text


@pytest.mark.parametrize("with_params", [
    "create table t as select $1::text as s",  # a query's literal
    "create table t (s text) with (write_format = $1)",  # an option's value
    "comment on table t is $1 || 'x'",  # a syntax error, the written statement's to report
    "create table t (s text default $1) -- unused: $2",
    "create table t (s text check (s <> $1))",  # a CHECK's text is parsed at every write: as written
    "alter table t add constraint k check (d < $1)",
])
def test_a_literal_anywhere_else_is_parsed_as_written(with_params):
    values = {"1": _big(VALUE), "2": VALUE} if "unused" in with_params else {"1": _big(VALUE)}
    assert parse_ddl_literals(with_params.partition(" --")[0], "", values) is None
