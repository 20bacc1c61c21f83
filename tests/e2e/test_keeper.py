"""Three real `icegres keeper` processes on 127.0.0.1 and in-process writers (the trio driver),
then the same keepers behind `icegres serve --write-buffer-ms N --tail-quorum ...`.

One scenario, in order: a writer wins a term and appends; one keeper is SIGKILLed and appends
still acknowledge; a second is killed and appends fail with a clear error (no acknowledgement
without a majority), then resume when it returns; the first comes back with its state intact (its
log holds what it acknowledged before the kill); a second writer wins a higher term, recovers
every acknowledged record exactly once, and fences the first, whose next append fails as fenced.

Then `icegres serve` on the quorum tail: concurrent INSERTs go on through a keeper's SIGKILL, the
server is SIGKILLed mid-load and a replacement replays every acknowledged row exactly once; and a
SIGSTOPped writer resumed after its replacement flushed is refused at the lake (lake fencing).
"""

from __future__ import annotations

import os
import signal
import time
from collections import Counter
from pathlib import Path

import pytest
import trio

from icegres.machines.drivers.quorum import (
    QuorumUnavailable,
    Timing,
    WriterFenced,
    open_quorum_tail,
)
from tests.support.keepers import Keeper, start_keepers
from tests.support.ladder import Writers, lake_ids, make_table, serve

pytestmark = [pytest.mark.e2e, pytest.mark.timeout(120)]

TIMING = Timing(append_timeout_seconds=3.0, election_timeout_seconds=15.0)


async def test_three_keepers_majority_failures_and_fencing(tmp_path: Path) -> None:
    keepers = [Keeper(tmp_path / f"keeper{i}") for i in range(3)]
    acked: dict[int, bytes] = {}
    try:
        for keeper in keepers:
            await keeper.start_async(init=True)
        addresses = [k.address for k in keepers]
        with trio.fail_after(90):
            async with open_quorum_tail(addresses, timing=TIMING, writer="first") as first:
                assert first.replay == ()

                async def append(payload: bytes) -> int:
                    slot = await first.append(payload)
                    acked[slot] = payload
                    return slot

                for i in range(5):
                    await append(b"all-three-%d" % i)
                assert sorted(acked) == [1, 2, 3, 4, 5]
                # Each ack needed two votes: on a busy machine the third keeper may not have
                # saved any of them yet. Let it save one before it dies, so that what it keeps
                # below is something to compare with what was acked.
                with trio.fail_after(10):
                    while not keepers[0].durable_state().accepted:
                        await trio.sleep(0.02)

                # One keeper down: a majority remains, appends still acknowledge.
                await keepers[0].kill()
                async with trio.open_nursery() as nursery:
                    for i in range(10):
                        nursery.start_soon(append, b"two-of-three-%d" % i)
                assert sorted(acked) == list(range(1, 16))

                # Two down: no majority, no acknowledgement, and the error says so.
                await keepers[1].kill()
                with pytest.raises(QuorumUnavailable, match="majority") as info:
                    await first.append(b"no-majority")
                assert info.value.outcome_unknown  # it may still be chosen once a keeper returns
                assert len(acked) == 15

                # One returns: appends resume (behind the record whose outcome was unknown).
                await keepers[1].start_async()
                slot = await append(b"resumed")
                assert slot == 17, slot

                # The first keeper comes back: its log holds everything it accepted before.
                before = keepers[0].durable_state()
                await keepers[0].start_async()
                assert before.promised.writer == "first"
                # Slots 1-5 went to all three, but each ack needed two votes only: the killed
                # keeper may not have saved the last ones. What it did save is what was acked.
                held = {s: e.payload for s, e in before.accepted.items() if s <= 5}
                assert held and all(acked[s] == payload for s, payload in held.items())
                after = keepers[0].durable_state()
                assert after.promised >= before.promised
                assert all(after.accepted[s] == e for s, e in before.accepted.items())

                # A second writer wins a higher term and recovers every acked record once.
                async with open_quorum_tail(addresses, timing=TIMING, writer="second") as second:
                    replayed = dict(second.replay)
                    assert len(replayed) == len(second.replay)
                    for s, payload in acked.items():
                        assert replayed[s] == payload, s
                    extra = set(replayed) - set(acked)
                    assert {replayed[s] for s in extra} <= {b"no-majority"}
                    # The first writer is fenced: its next append fails as such.
                    with pytest.raises(WriterFenced):
                        await first.append(b"after-fencing")
                    assert first.health().phase == "fenced" and not first.health().ok
                    assert await second.append(b"second's") == second.replayed_through + 1
    finally:
        for keeper in keepers:
            keeper.stop()


# --- the write ladder on the quorum tail ----------------------------------------------------------


def test_serve_on_the_quorum_tail_survives_a_keeper_and_a_writer_kill(tmp_path: Path) -> None:
    """Concurrent INSERTs into a server on the quorum tail; one keeper is SIGKILLed mid-load and
    writes go on; then the server is SIGKILLed; a replacement replays: every acked row is in the
    lake exactly once, nothing unacknowledged is duplicated."""
    keepers = start_keepers(tmp_path)
    data_dir = tmp_path / "data"
    data_dir.mkdir()
    try:
        args = ("--write-buffer-ms", "300", "--tail-quorum", ",".join(k.address for k in keepers))
        with serve(data_dir, *args) as srv:
            assert "quorum tail" in srv.log()
            ns = make_table(srv, prefix="q")
            with Writers(srv, f"{ns}.t", 4) as writers:
                deadline = time.monotonic() + 20
                while writers.count() < 40 and time.monotonic() < deadline:
                    time.sleep(0.05)
                keepers[0].stop()  # SIGKILL one keeper mid-load
                mark = writers.count()
                while writers.count() < mark + 40 and time.monotonic() < deadline:
                    time.sleep(0.05)
                assert writers.count() >= mark + 40, srv.log()[-3000:]
                srv.stop(signal.SIGKILL)  # the writer dies mid-load, acked rows unflushed
            acked = list(writers.acked)
        assert len(acked) >= 80
        keepers[0].start()
        with serve(data_dir, *args) as srv:
            assert "replayed" in srv.log()
            with srv.connect() as conn:
                count = conn.execute(f"select count(*) from {ns}.t").fetchone()[0]
            assert srv.stop(signal.SIGTERM) == 0
        ids = lake_ids(data_dir, ns)
        counts = Counter(ids)
        assert not [i for i, n in counts.items() if n > 1], "a row is in the lake twice"
        missing = set(acked) - set(ids)
        assert not missing, f"{len(missing)} acknowledged rows lost"
        assert count == len(ids)
    finally:
        for keeper in keepers:
            keeper.stop()


def test_a_paused_writer_cannot_publish_after_its_replacement_flushed(tmp_path: Path) -> None:
    """SIGSTOP a writer holding acked, unflushed rows; a replacement wins a higher term, replays
    them and flushes; SIGCONT the old one: its flush is refused at the lake (the term its commit
    asserts is lower than the table's), so every row is in the lake exactly once."""
    keepers = start_keepers(tmp_path)
    data_dir = tmp_path / "data"
    data_dir.mkdir()
    quorum = ",".join(k.address for k in keepers)
    try:
        with serve(data_dir, "--write-buffer-ms", "200", "--tail-quorum", quorum) as setup:
            ns = make_table(setup, prefix="f")
            assert setup.stop(signal.SIGTERM) == 0
        # A long window: the old writer holds its acked rows unflushed when it is paused.
        with serve(data_dir, "--write-buffer-ms", "4000", "--tail-quorum", quorum) as old:
            with old.connect() as conn:
                for i in range(10):
                    conn.execute(f"insert into {ns}.t values (%s, 0, 'old')", (i,))
            os.kill(old.proc.pid, signal.SIGSTOP)
            try:
                with serve(data_dir, "--write-buffer-ms", "200", "--tail-quorum", quorum) as new:
                    assert "replayed 10 records" in new.log(), new.log()[-2000:]
                    with new.connect() as conn:
                        conn.execute(f"insert into {ns}.t values (100, 1, 'new')")
                    assert new.stop(signal.SIGTERM) == 0
            finally:
                os.kill(old.proc.pid, signal.SIGCONT)
            deadline = time.monotonic() + 30
            while "fenced at the lake" not in old.log() and time.monotonic() < deadline:
                time.sleep(0.1)
            # The lake refused it (the keepers had not told it yet: it sent them nothing new).
            assert "fenced at the lake" in old.log(), old.log()[-3000:]
            with old.connect() as conn, pytest.raises(Exception, match="fenced|durable"):
                conn.execute(f"insert into {ns}.t values (200, 2, 'after')")
        ids = lake_ids(data_dir, ns)
        assert sorted(ids) == [*range(10), 100], sorted(ids)
    finally:
        for keeper in keepers:
            keeper.stop()
