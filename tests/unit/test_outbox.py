"""A session's Outbox holds what a bytearray would, keeping big messages uncopied."""

from __future__ import annotations

import pytest
import trio
from hypothesis import given
from hypothesis import strategies as st

from icegres.protocol.pgwire import outbox
from icegres.protocol.pgwire.outbox import Outbox

pytestmark = pytest.mark.unit

_steps = st.lists(st.one_of(
    st.tuples(st.just("add"), st.binary(max_size=20)),
    st.tuples(st.just("truncate"), st.integers(0, 30)),
    st.tuples(st.just("take"), st.none()),
    st.tuples(st.just("clear"), st.none()),
), max_size=40)


@given(_steps)
def test_it_holds_what_a_bytearray_holds(steps: list[tuple[str, object]]) -> None:
    big_was, outbox.BIG = outbox.BIG, 8  # (messages of 8 bytes and more are kept as they are)
    try:
        box, model = Outbox(), bytearray()
        boundaries = [0]  # where messages begin: the only places a session truncates
        sent = b""
        for op, arg in steps:
            if op == "add":
                assert isinstance(arg, bytes)
                box += arg
                model += arg
                boundaries.append(len(model))
            elif op == "truncate":
                assert isinstance(arg, int)
                at = boundaries[arg % len(boundaries)]
                box.truncate(at)
                del model[at:]
                boundaries = [b for b in boundaries if b <= at]
            elif op == "take":
                sent += b"".join(box.take())
                model_sent, model = bytes(model), bytearray()
                assert sent.endswith(model_sent)
                boundaries = [0]
            else:
                box.clear()
                model.clear()
                boundaries = [0]
            assert len(box) == len(model)
            assert bytes(box) == bytes(model)
            assert bool(box) == bool(model)
    finally:
        outbox.BIG = big_was


def test_a_big_message_is_sent_as_the_object_it_is() -> None:
    big = b"x" * outbox.BIG
    box = Outbox()
    box += b"small"
    box += big
    box += b"tail"
    parts = box.take()
    assert parts[1] is big
    assert b"".join(parts) == b"small" + big + b"tail"
    assert len(box) == 0 and box.take() == []


def test_truncating_inside_a_big_message_is_refused() -> None:
    box = Outbox()
    box += b"x" * outbox.BIG
    with pytest.raises(ValueError, match="message boundary"):
        box.truncate(5)


def test_send_to_sends_everything_in_order() -> None:
    async def main() -> bytes:
        send, receive = trio.testing.memory_stream_pair()
        box = Outbox()
        box.extend([b"a", b"y" * outbox.BIG, b"b"])
        await box.send_to(send)
        assert not box
        got = b""
        while len(got) < outbox.BIG + 2:
            got += await receive.receive_some()
        return got

    assert trio.run(main) == b"a" + b"y" * outbox.BIG + b"b"
