"""engine/big_values.py `settled`: a DML statement's big literal (a BigText parameter) stays a
parameter only where PostgreSQL would read the untyped literal as text; elsewhere it is written
back as the literal it was, for the statement's context to type it."""

from __future__ import annotations

import pytest

from icegres.engine.big_values import hex_bytes, joined, settled, value_places
from icegres.sql.parse import parse
from icegres.sql.pieces import BigText

pytestmark = pytest.mark.unit

COLUMNS = {"s": "text", "v": "text"}  # the target's text columns; `id` is an integer, `b` a bytea


def _kept(sql: str, inserted: list[str] | None = None, alias: str = "t") -> tuple[str, list[str]]:
    """The statement as settled (its big values `$n`, written-back ones 'big<n>') and the names
    of the parameters it keeps."""
    tree = parse(sql)
    params = {str(n): BigText((f"big{n}".encode(),), 4, 4) for n in range(1, 10)}
    params["9"] = 42  # a client's own parameter: always bound
    out, left = settled(tree, params, value_places(COLUMNS, alias, inserted))
    return out.sql(dialect="postgres"), sorted(left or {})


@pytest.mark.parametrize(("sql", "kept"), [
    ("update t set s = $1, id = $2, b = $3 where id = $9", ["1", "9"]),
    ("update t set s = $1 || s where t.s = $2 and s like $3 and id = $4", ["1", "2", "3", "9"]),
    ("update t set s = upper($1) where s in (select $2) and other.s = $3", ["1", "9"]),
    ("delete from t where s <> $1 and b = $2", ["1", "9"]),
    # (beside a string literal or a number under `||`, PostgreSQL resolves the literal as text)
    ("update t set s = 'q' || $1, v = ('a' || s) || $2, id = length(2 || $3) where 'x' < $4 and b = b || $5",
     ["1", "2", "3", "4", "9"]),
    ("merge into t using (select $1 as id) src on t.id = src.id when matched then update set v = $2 "
     "when not matched then insert (id, s) values (src.id, $3)", ["2", "3", "9"]),
])
def test_a_big_value_stays_a_parameter_only_where_its_context_is_a_text_column(sql, kept):
    assert _kept(sql)[1] == kept


@pytest.mark.parametrize(("sql", "kept"), [
    ("update t set id = length($1), s = md5($2) || lower($3) where id = $9", ["1", "2", "3", "9"]),
    ("update t set s = left($1, $2) || repeat($3, $4) || substring($5, $6)", ["1", "3", "5", "9"]),
    ("update t set s = replace($1, $2, $3) where strpos(s, $4) > 0 and starts_with(s, $5)", ["1", "2", "3", "4", "5", "9"]),
    ("update t set s = concat($1, id), b = sha256($2), v = octet_length($3)::text", ["1", "9"]),
    ("insert into t (id, s) values (length($1), upper($2))", ["1", "2", "9"]),
    ("update t set s = upper(($1)) where s = (select lower($2))", ["9"]),
])
def test_a_big_value_stays_a_parameter_where_a_string_function_reads_it_as_text(sql, kept):
    """Where PostgreSQL's function resolution makes an untyped literal text (`md5`, `length`:
    text among its candidates); not where it is a count (`left`'s), another function's argument
    (`sha256` takes bytea), inside parentheses or a subquery."""
    assert _kept(sql, ["id", "s"] if sql.startswith("insert") else None)[1] == kept


def test_a_value_assigned_to_a_number_or_char_column_stays_a_parameter_but_not_one_compared_with_it():
    """Assigned, the string goes through the column type's input function as the literal's did;
    compared, the number's (or char(n)'s) comparison types the literal."""
    columns = {**COLUMNS, "n": "assigned", "c": "assigned"}
    tree = parse("update t set n = $1, c = $2 where n = $3 and c = $4")
    params = {str(k): BigText((b"big",), 3, 3) for k in range(1, 5)}
    assert sorted(settled(tree, params, value_places(columns, "t"))[1] or {}) == ["1", "2"]
    tree = parse("insert into t (n, c, id) values ($1, $2, $3)")
    assert sorted(settled(tree, params, value_places(columns, "", ["n", "c", "id"]))[1] or {}) == ["1", "2"]


def test_an_insert_keeps_values_and_select_items_that_go_into_text_columns():
    assert _kept("insert into t (id, s, b) values ($1, $2, $3), ($4, $5, $6)", ["id", "s", "b"])[1] == ["2", "5", "9"]
    assert _kept("insert into t (id, s) select $1, $2", ["id", "s"])[1] == ["2", "9"]
    assert _kept("insert into t (id, s) select * from (select $1, $2) x", ["id", "s"])[1] == ["9"]


def test_a_written_back_value_is_the_literal_it_was():
    sql, kept = _kept("update t set b = $3, s = $1 where id = $9")
    assert sql == "UPDATE t SET b = 'big3', s = $1 WHERE id = $9" and kept == ["1", "9"]


def test_an_engine_query_reads_a_big_value_from_a_cross_joined_table_where_it_is_per_row():
    big = {"1": BigText((b"big",), 3, 3), "2": BigText((b"big",), 3, 3), "3": 7}
    tree = joined(parse("select id, case when id = $3 then $1 else s end from t where s <> $1 and x in (select $2)"), big)
    assert tree.sql(dialect="postgres") == (
        "SELECT id, CASE WHEN id = $3 THEN _icegres_big_1.icegres_big_value_1 ELSE s END FROM t "
        "CROSS JOIN icegres_work.w.big_param_1 AS _icegres_big_1 "
        "WHERE s <> _icegres_big_1.icegres_big_value_1 AND x IN (SELECT $2)")
    # (an aggregate's select keeps the scalar subquery: its rows are groups)
    assert joined(parse("select count(*) from t where s = $1"), big).sql(dialect="postgres") == \
        "SELECT COUNT(*) FROM t WHERE s = $1"
    assert joined(parse("select 1, $1 union all select 2, 'x'"), big).sql(dialect="postgres") == (
        "SELECT 1, _icegres_big_1.icegres_big_value_1 FROM icegres_work.w.big_param_1 AS _icegres_big_1 "
        "UNION ALL SELECT 2, 'x'")


def test_a_bytea_hex_value_is_bound_to_its_bytes_decoded_a_piece_at_a_time():
    value = BigText((b"\\x41f", b"f42", b""), 8, 8)
    decoded = hex_bytes(value)
    assert decoded is not None and decoded.binary and (decoded.pieces, decoded.size) == ((b"A", b"\xffB", b""), 3)
    for refused in (b"\\x4", b"\\x4g", b"\\x41 42", b"x41", b"\\\\x41"):  # odd, bad digit, blank, no \x, escape
        assert hex_bytes(BigText((refused,), len(refused), len(refused))) is None
    tree = parse("update t set b = $1, s = $2 where id = $9")
    params = {"1": BigText((b"\\x41",), 4, 4), "2": BigText((b"\\x41",), 4, 4), "9": 1}
    out, left = settled(tree, params, value_places({"b": "bytea", "s": "text"}, "t"))
    assert out.sql(dialect="postgres") == "UPDATE t SET b = $1, s = $2 WHERE id = $9"
    assert left["1"].binary and b"".join(left["1"].pieces) == b"A" and left["2"] is params["2"]


def test_a_joined_value_is_not_copied_into_every_row_of_the_join():
    """An UPDATE's rewrite of a 1,000-row file setting one row to a 5 MB value: were the joined
    value a plain string column, the join would copy it into each of the 1,000 rows (5 GB, past a
    string array's 2 GB of offsets: DataFusion's "offset overflow"); as a dictionary it is one
    value, cast to text once per output row that carries it (`plain_columns`)."""
    import datafusion
    import pyarrow as pa

    from icegres.engine import big_values

    value = b"ab" * 2_500_000
    params = {"1": BigText((value[:1000], value[1000:]), len(value), len(value))}
    ctx = datafusion.SessionContext()
    rows = 1000
    ctx.register_record_batches("t", [[pa.record_batch([pa.array(range(rows), pa.int32()), pa.array(["x"] * rows)],
                                                       names=["id", "s"])]])
    tree = joined(parse("select id, case when id = 5 then $1 else s end as s, $1 as v from t where s <> $1 and id < 7"),
                  params)
    df = big_values.plain_columns(big_values.sql(ctx, tree.sql(dialect="postgres"), params))
    assert [f.type for f in df.schema()] == [pa.int32(), pa.string(), pa.string()]
    table = df.to_arrow_table().sort_by("id")
    assert table.num_rows == 7
    assert [len(s) for s in table.column("s").to_pylist()] == [1, 1, 1, 1, 1, len(value), 1]
    assert set(table.column("v").to_pylist()) == {value.decode()}
    tree = joined(parse("select id, case when id = 5 then $1 else s end as s from t where s <> $1"), params)
    table = big_values.plain_columns(big_values.sql(ctx, tree.sql(dialect="postgres"), params)).to_arrow_table()
    assert sorted(len(s) for s in table.column("s").to_pylist())[-2:] == [1, len(value)]
