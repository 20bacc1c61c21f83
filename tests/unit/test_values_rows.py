"""sql/values_rows.py: a big INSERT's VALUES of constants read by the lexer, not parsed into a
tree; and sql/parse.py handing such a statement out with its rows as one node. What the reader
takes it must read exactly as the parser does; what it does not take is the parser's."""

from __future__ import annotations

from decimal import Decimal

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from sqlglot import exp

from icegres.sql.parse import BIG_TEXT, ConstantValues, parse, whole
from icegres.sql.values_rows import DEFAULT, Cast, Expression, Number, Placeholder, read

pytestmark = pytest.mark.unit


def test_constants_are_read_as_columns_and_the_head_as_written():
    rows = read('insert into "A".b (x, "Y") values (1, -2.5), (+3e2, $4), (null, TRUE), (\'it\'\'s\', false);')
    assert rows is not None and rows.head == 'insert into "A".b (x, "Y")' and (rows.width, rows.count) == (2, 4)
    assert rows.columns == ([b"1", b"+3e2", None, "it's"], [b"-2.5", 4, True, False])
    assert [type(v) for v in rows.columns[0]] == [Number, Number, type(None), str]
    assert type(rows.columns[1][1]) is Placeholder


def test_no_value_is_tracked_by_the_garbage_collector():
    """A big list holds its values for its statement's life: none may be an object the cyclic
    collector tracks, or its full collections walk them all, holding the GIL (values_rows.py)."""
    import gc

    rows = read("insert into t values (1, -2.5, 'a', $$b$$, $3, null, true, DEFAULT), (2, 3e4, 'c', 'd', $4, 5, false, 6)")
    assert rows is not None
    assert not any(gc.is_tracked(v) for column in rows.columns for v in column if v is not DEFAULT)  # (one object)


@pytest.mark.parametrize("sql", [
    "insert into t values (1), (2, 3)",  # rows of two widths: PostgreSQL's 42601, from the parser
    "insert into t values (-x)", "insert into t values ((select 1))", "insert into t values (1 + (values (1)))",
    "insert into t values ((table u))", "insert into t values ($1 + 1)", "insert into t values (1 + $1)",
    "insert into t values (f(1)]", "insert into t values (f(1);",
    "insert into t values ('a' 'b')", "insert into t values ('a'\n'b')",  # (glued across a newline)
    "insert into t values (- -1)", "insert into t values (default::int)", "insert into t values (-1::int)",
    "insert into t values ('a'::text || 'b')", "insert into t values ('a'::varchar(3) || 'b')",
    "insert into t values ('1'::text::int)", "insert into t values (1::)", "insert into t values (1::'x')",
    "insert into t values (1::(int))",
    "insert into t as x values (1)", "insert into t values (1),", "insert into t (a) (b) values (1)",
    "insert into t.(a) values (1)", "insert into t values (1); select 1", "insert into t select 1",
    "insert into t values ('unterminated)", "update t set a = 1", "insert t values (1)",
])
def test_anything_else_is_the_parsers(sql):
    assert read(sql) is None


def test_a_constant_cast_to_a_one_word_type_is_read_with_its_type():
    rows = read("insert into t values ($1::INTEGER, '2024-01-01'::date, 5::numeric, null::text), (1, 'a', 2, true)")
    assert rows is not None
    assert [c[0] for c in rows.columns] == [Cast(1, "INTEGER"), Cast("2024-01-01", "date"), Cast(b"5", "numeric"),
                                          Cast(None, "text")]
    assert type(rows.columns[0][0].value) is Placeholder and type(rows.columns[2][0].value) is Number


def test_default_dollar_quotes_and_longer_type_names_are_read():
    rows = read("insert into t values (DEFAULT, $$it's$$, '1'::double precision, 'a'::varchar(3), "
                "0::pg_catalog.int4, 'x'::character varying (5), $q$a$$b$q$), (default, '', 2, 'b', 1, 'y', '')")
    assert rows is not None
    assert [c[0] for c in rows.columns] == [DEFAULT, "it's", Cast("1", "double precision"), Cast("a", "varchar(3)"),
                                          Cast(b"0", "pg_catalog.int4"), Cast("x", "character varying (5)"), "a$$b"]
    assert rows.columns[0][1] is DEFAULT


def test_any_other_item_is_an_expression_as_written():
    rows = read("insert into t values (1 + 1, now(), 'a' || 'b', E'\\t', \"default\", ARRAY[1, 2], f(a, (b)), x IS NULL), "
                "((1), now( ), 'a'||'b', B'1', -2, 3, 'c', 'd' COLLATE \"C\") returning *")
    assert rows is not None and rows.tail == "returning *"
    assert [type(c[0]) for c in rows.columns] == [Expression] * 8
    assert [c[0] for c in rows.columns] == ["1 + 1", "now()", "'a' || 'b'", "E'\\t'", '"default"', "ARRAY[1, 2]",
                                          "f(a, (b))", "x IS NULL"]
    assert [c[1] for c in rows.columns] == ["(1)", "now( )", "'a'||'b'", "B'1'", b"-2", b"3", "c", "'d' COLLATE \"C\""]
    assert [type(c[1]) for c in rows.columns][4:7] == [Number, Number, str]


def test_comments_and_spacing_are_skipped():
    rows = read("insert /* c */ into t\n  values -- rows\n (1 , 'a' ) ,(\t- 2,'b')")
    assert rows is not None and rows.columns == ([b"1", b"-2"], ["a", "b"])


_CONSTANT = st.one_of(
    st.integers(-10**20, 10**20).map(str),
    st.decimals(allow_nan=False, allow_infinity=False, places=3).map(lambda d: f"{d:f}"),
    st.sampled_from(["1e3", ".5", "5.", "-0", "+7", "2E-3"]),
    st.text(st.characters(blacklist_categories=("Cs",), blacklist_characters="\x00"), max_size=8).map(
        lambda s: "'" + s.replace("'", "''") + "'"),
    st.sampled_from(["null", "NULL", "true", "False", "$1", "$12"]),
)
_TYPES = ("int", "date", "TEXT", "numeric", "double precision", "varchar(3)", "numeric(10, 2)",
          "timestamp with time zone", "int[]")
_CASTED = st.one_of(_CONSTANT.filter(lambda c: c[:1] not in "+-"), _CONSTANT.filter(lambda c: c[:1] not in "+-").map(
    lambda c: c + "::" + _TYPES[len(c) % len(_TYPES)]))


@settings(max_examples=200, deadline=None)
@given(st.lists(st.lists(st.one_of(_CONSTANT, _CASTED), min_size=3, max_size=3), min_size=1, max_size=6))
def test_the_reader_reads_what_the_parser_reads(rows):
    sql = "insert into t (a, b, c) values " + ", ".join("(" + ", ".join(row) + ")" for row in rows)
    read_rows = read(sql)
    assert read_rows is not None
    parsed = whole(ConstantValues(rows=read_rows))
    assert isinstance(parsed, exp.Insert) and isinstance(parsed.expression, exp.Values)
    for r, row in enumerate(parsed.expression.expressions):
        for c, item in enumerate(row.expressions):
            value = read_rows.columns[c][r]
            if isinstance(item, exp.Cast):
                assert isinstance(value, Cast) and exp.DataType.build(value.type, dialect="postgres") == item.to
                item, value = item.this, value.value
            if isinstance(item, exp.Null):
                assert value is None
            elif isinstance(item, exp.Boolean):
                assert value is item.this
            elif isinstance(item, exp.Parameter):
                assert type(value) is Placeholder and str(value) == str(item.this.this)
            elif isinstance(item, exp.Literal) and item.is_string:
                assert type(value) is str and value == item.this
            else:
                negative = isinstance(item, exp.Neg)
                literal = item.this if negative else item
                assert isinstance(value, Number) and isinstance(literal, exp.Literal)
                value = value.decode()
                assert Decimal(value) == Decimal(("-" if negative else "") + literal.this)  # (sqlglot writes .5 as 0.5)


def test_a_big_insert_of_constants_is_parsed_to_its_head_and_one_node():
    sql = "insert into s.t (a, b) values " + ", ".join(f"({i}, 'x{i}')" for i in range(BIG_TEXT // 8))
    assert len(sql) > BIG_TEXT
    tree = parse(sql)
    assert isinstance(tree, exp.Insert) and isinstance(tree.expression, ConstantValues)
    assert [t.name for t in tree.find_all(exp.Table)] == ["t"] and [c.name for c in tree.this.expressions] == ["a", "b"]
    assert tree.copy().expression.args["rows"] is tree.expression.args["rows"]  # (shared, not copied)
    full = whole(tree.expression)
    assert isinstance(full.expression, exp.Values) and len(full.expression.expressions) == BIG_TEXT // 8
    # A big statement the reader does not take is parsed whole, as before.
    assert isinstance(parse(sql.replace("(0, 'x0')", "((select 1), 'x0')")).expression, exp.Values)


@pytest.mark.parametrize("tail", ["returning *", "RETURNING a, b || 'x' as c;", "on conflict do nothing",
                                  "on conflict (a) do update set b = excluded.b where t.a > $1 returning a -- c"])
def test_an_on_conflict_or_returning_tail_is_parsed_with_the_head(tail):
    """What follows the rows is the parser's: the tree has it as the whole parse has it."""
    rows = ", ".join(f"({i}, 'x{i}')" for i in range(BIG_TEXT // 8))
    sql = f"insert into s.t (a, b) values {rows} {tail}"
    read_rows = read(sql)
    assert read_rows is not None and read_rows.count == BIG_TEXT // 8 and not read_rows.tail.endswith(";")
    tree = parse(sql)
    assert isinstance(tree.expression, ConstantValues)
    full = whole(tree.expression)
    for arg in ("returning", "conflict"):
        assert (tree.args.get(arg) is None) == (full.args.get(arg) is None)
        assert tree.args.get(arg) is None or tree.args[arg].sql() == full.args[arg].sql()
