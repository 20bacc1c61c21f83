"""protocol/pgwire/statements.py: a big Query or Parse, framed in pieces, decoded and compacted a
piece at a time — its big literals parameters where the engine can read them so (a query's, a
DML statement's), after the statement's own parameters — and as written everywhere else (DDL)."""

from __future__ import annotations

import struct

import pytest

from icegres.pg.errors import PgError
from icegres.protocol.pgwire import messages as m
from icegres.protocol.pgwire.framing import FrameDecoder
from icegres.protocol.pgwire.statements import parse_of_pieces, query_of_pieces
from icegres.sql.pieces import BigText
from icegres.sql.statement import Kind

pytestmark = pytest.mark.unit

BIG = "é" * 40_000 + "x" * 40_000  # over BIG_CHARS, as UTF-8 120 kB


def _parse_body(sql: str, oids: tuple[int, ...] = (), name: str = "") -> bytes:
    return (name.encode() + b"\0" + sql.encode() + b"\0" + struct.pack(f"!H{len(oids)}I", len(oids), *oids))


def _framed(kind: bytes, body: bytes, piece_bytes: int) -> m.MessagePieces:
    """What the decoder gives for the message fed `piece_bytes` at a time."""
    decoder = FrameDecoder()
    decoder.in_startup = False
    wire = kind + struct.pack("!i", len(body) + 4) + body
    out = None
    for at in range(0, len(wire), piece_bytes):
        decoder.feed(wire[at : at + piece_bytes])
        out = decoder.next_message() or out
    assert isinstance(out, m.MessagePieces) and out.kind == kind
    return out


def _values(params: dict | None) -> dict[str, str]:
    return {name: value.text() for name, value in (params or {}).items() if isinstance(value, BigText)}


@pytest.mark.parametrize("piece_bytes", [1000, 65536, 1 << 20])
def test_a_big_parse_is_framed_in_pieces_and_its_literal_follows_its_own_parameters(piece_bytes):
    sql = f"select length('{BIG}') + $1 where $2"
    msg = parse_of_pieces(_framed(b"P", _parse_body(sql, (23, 0, 25), name="s1"), piece_bytes).pieces)
    assert (msg.name, msg.param_oids) == ("s1", (23, 0, 25))
    [stmt] = msg.split.statements
    # Three declared types: $3 is the client's even though the text never names it.
    assert stmt.sql == "select length( $4 ) + $1 where $2" and msg.sql == stmt.sql
    assert _values(msg.split.params[0]) == {"4": BIG}


def test_a_big_parse_of_an_insert_or_an_update_binds_its_literal_and_of_ddl_keeps_it_as_written():
    insert = parse_of_pieces([_parse_body(f"insert into t values ($1, E'{BIG}\\n')", (23,))])
    assert insert.split.statements[0].sql == "insert into t values ($1,  $2 )"
    assert _values(insert.split.params[0]) == {"2": BIG + "\n"}
    update = parse_of_pieces([_parse_body(f"update t set s = '{BIG}' where id = $1 /* {BIG} */", (23,))])
    assert update.split.statements[0].sql == "update t set s =  $2  where id = $1"
    assert _values(update.split.params[0]) == {"2": BIG}
    view = parse_of_pieces([_parse_body(f"create view v as select '{BIG}' as s /* {BIG} */", ())])
    assert view.split.statements[0].sql == f"create view v as select '{BIG}' as s"
    assert view.split.params == [None]


def test_a_big_parse_that_is_not_one_well_formed_message_is_refused():
    body = _parse_body(f"select '{BIG}'", (23,))
    with pytest.raises(PgError, match="trailing bytes"):
        parse_of_pieces([body + b"\0"])
    with pytest.raises(PgError, match="message too short"):
        parse_of_pieces([body[:-1]])
    with pytest.raises(PgError, match="unterminated string"):
        parse_of_pieces([b"\0" + BIG.encode()])
    with pytest.raises(PgError, match="UTF8"):
        parse_of_pieces([b"\0select '" + b"\xff" * 70_000 + b"'\0\0\0"])


def test_a_big_query_binds_a_query_dml_and_table_ddl_literal_after_its_own_parameters_but_not_other_ddl():
    statements = (f"select length('{BIG}'); insert into t values (1, '{BIG}'); select '{BIG}', $1; "
                  f"update t set s = '{BIG}' where id = 1; create table u (s text default '{BIG}'); "
                  f"comment on table u is '{BIG}'; create view v as select '{BIG}' as s")
    msg = query_of_pieces(_framed(b"Q", statements.encode() + b"\0", 4096).pieces)
    kinds = [(s.kind, s.sql[:40]) for s in msg.split.statements]
    # (a simple Query's own $1 is bound to nothing: the engine's 42P02, as PostgreSQL's)
    assert kinds == [(Kind.QUERY, "select length( $1 )"), (Kind.WRITE, "insert into t values (1,  $1 )"),
                     (Kind.QUERY, "select  $2 , $1"), (Kind.WRITE, "update t set s =  $1  where id = 1"),
                     (Kind.WRITE, "create table u (s text default  $1 )"), (Kind.WRITE, "comment on table u is  $1"),
                     (Kind.WRITE, f"create view v as select '{BIG}' as s"[:40])]
    assert [_values(p) for p in msg.split.params] == [{"1": BIG}, {"1": BIG}, {"2": BIG}, {"1": BIG}, {"1": BIG},
                                                      {"1": BIG}, {}]


