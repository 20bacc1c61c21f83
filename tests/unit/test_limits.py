"""The connection-slot counter and the failed-login back-off, driven with explicit times."""

from __future__ import annotations

import pytest
import trio
import trio.testing

from icegres.config import Settings, superusers
from icegres.pg.errors import PgError
from icegres.protocol.backoff import AuthBackoff, address_key
from icegres.protocol.limits import RESERVED, TOO_MANY, Slots

pytestmark = pytest.mark.unit


def test_slots_refuse_beyond_the_limit_and_keep_the_reserved_ones_for_superusers():
    slots = Slots(3, 1, frozenset({"root"}))
    slots.take()
    slots.take()
    slots.check_reserved("alice")  # 1 free after alice's own: not yet into the reserve
    slots.take()
    with pytest.raises(PgError) as exc:
        slots.check_reserved("alice")
    assert (exc.value.sqlstate, exc.value.message, exc.value.severity) == ("53300", RESERVED, "FATAL")
    slots.check_reserved("root")
    with pytest.raises(PgError, match=TOO_MANY):
        slots.take()
    slots.release()
    assert slots.taken == 2


def test_superusers_default_to_the_first_user_and_to_everyone_under_trust():
    assert superusers(Settings(users={"a": "x", "b": "y"})) == frozenset({"a"})
    assert superusers(Settings(users={"a": "x"}, superusers="b, c")) == frozenset({"b", "c"})
    assert superusers(Settings()) is None
    assert Slots(1, 0, None).is_superuser("anyone")


def test_backoff_doubles_to_its_cap_and_a_success_clears_it():
    b = AuthBackoff(1.0, 4.0)
    assert b.book("10.0.0.1", 0.0) == 0.0  # never failed: at once
    b.record("10.0.0.1", False, 0.0)
    assert b.book("10.0.0.1", 0.0) == 1.0
    b.record("10.0.0.1", False, 1.0)
    assert b.book("10.0.0.1", 1.0) == 3.0  # 2 s after the second failure
    b.record("10.0.0.1", False, 3.0)
    at = b.book("10.0.0.1", 3.0)
    assert at == 7.0  # 4 s: capped
    b.record("10.0.0.1", True, at)
    assert b.book("10.0.0.1", at) == at and len(b) == 0
    assert b.book("10.0.0.2", 0.0) == 0.0  # another address never waited


def test_answers_booked_at_once_come_out_one_after_another():
    b = AuthBackoff(1.0, 30.0)
    b.record("10.0.0.1", False, 0.0)
    times = [b.book("10.0.0.1", 0.0) for _ in range(4)]
    assert times == sorted(times) and len(set(times)) == 4 and times[0] == 1.0


def test_backoff_forgets_and_is_bounded():
    b = AuthBackoff(1.0, 2.0, addresses_max=3, forget_after_s=10.0)
    for i in range(5):
        b.record(f"10.0.0.{i}", False, 0.0)
    assert len(b) == 3
    b.record("10.0.1.1", False, 100.0)  # the others' waits ended long ago
    assert len(b) == 1


def test_address_keys():
    assert address_key("127.0.0.1") == "127.0.0.1"
    assert address_key("2001:db8::1") == address_key("2001:db8::ffff") == "2001:db8::/64"
    assert address_key("::ffff:10.1.2.3") == "10.1.2.3"
    assert address_key("fuzz") == "fuzz"


def test_before_answer_sleeps_in_its_own_task():
    async def main() -> list[float]:
        b = AuthBackoff(1.0, 30.0)
        b.failed("10.0.0.1")
        done: list[float] = []

        async def answer(addr: str) -> None:
            await b.before_answer(addr)
            done.append(trio.current_time())

        async with trio.open_nursery() as n:
            n.start_soon(answer, "10.0.0.1")
            n.start_soon(answer, "10.0.0.2")
        return done

    done = trio.run(main, clock=trio.testing.MockClock(autojump_threshold=0))
    assert done == [0.0, 1.0]
