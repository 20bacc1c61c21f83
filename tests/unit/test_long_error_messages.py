"""engine/errors.py: a DataFusion message over a few kB (one quoting a 50 MB literal) is mapped by
reading its two ends, and the PgError is the one the whole message gives."""

from __future__ import annotations

import pytest

from icegres.engine import errors

pytestmark = pytest.mark.unit

VALUE = "ab'c\"d\u00e9 \n" * 3000  # quotes, a two-byte character and line breaks, 36,000 characters

MESSAGES = [
    f"Arrow error: Cast error: Cannot cast string '{VALUE}' to value of Int32 type",
    f"DataFusion error: Arrow error: Cast error: Cannot cast string '{VALUE}x' to value of Decimal128 type",
    "Execution error: it failed " + "y" * 20_000 + " here",  # one line
    "Execution error: it failed " + "y" * 20_000 + "\nsecond line " + "z" * 9_000,  # the break in the tail
    "Execution error: it failed " + "y" * 10_000 + "\r\n" + "z" * 20_000,  # the break in the middle
    "Error during planning: Invalid function 'nope' " + "w" * 20_000,
    'ParserError("Expected: an expression, found: ' + "v" * 20_000 + '")',
    "Optimizer rule 'simplify' failed\ncaused by\nDivide by zero " + "u" * 20_000,
]


@pytest.mark.parametrize("message", MESSAGES, ids=range(len(MESSAGES)))
def test_a_long_message_maps_as_the_whole_message_does(message):
    assert len(message) > 2 * errors._EDGE_CHARS + len(errors._ELIDED)
    whole = errors._from_text(message, None, True)  # the rules over the whole message
    got = errors.from_datafusion(Exception(message))
    assert (got.sqlstate, got.message, got.detail) == (whole.sqlstate, whole.message, whole.detail)


def test_a_cast_error_quotes_the_whole_value():
    got = errors.from_datafusion(Exception(MESSAGES[0]))
    assert (got.sqlstate, got.message) == ("22P02", f'invalid input syntax for type integer: "{VALUE}"')


def test_an_error_encoded_ahead_is_the_error_response_encoded_on_the_loop():
    """protocol/pgwire/errors_ahead.py: a big message's ErrorResponse fields made in the worker
    thread are the bytes `error_response` makes itself; an error changed since is made afresh."""
    from icegres.pg.errors import PgError
    from icegres.protocol.pgwire import errors_ahead
    from icegres.protocol.pgwire import messages as m

    def ahead(fn):  # (as the session runs its jobs)
        return errors_ahead.encoding_ahead(m.notice_fields, m.said, fn)

    def fails(position: int | None = None) -> PgError:
        err = PgError("22P02", f'invalid input syntax for type integer: "{VALUE * 2}\0{VALUE}"', detail="d\0")
        err.position = position
        return err

    for correlation in (None, "c0ffee"):
        plain = m.error_response(fails(), correlation)
        with pytest.raises(PgError) as raised:
            ahead(lambda: (_ for _ in ()).throw(fails()))
        assert raised.value in errors_ahead._ahead
        assert m.error_response(raised.value, correlation) == plain
        assert raised.value not in errors_ahead._ahead  # (taken once)
    with pytest.raises(PgError) as raised:
        ahead(lambda: (_ for _ in ()).throw(fails()))
    raised.value.position = 7  # given later, on the loop
    assert m.error_response(raised.value) == m.error_response(fails(7))
    assert m.error_response(raised.value) != m.error_response(fails())
