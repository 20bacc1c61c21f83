"""The keeper's log and server, and the writer driver, in one trio run on 127.0.0.1."""

from __future__ import annotations

from pathlib import Path

import pytest
import trio

from icegres.machines.drivers.keeper import KeeperRefused, KeeperServer, open_keeper_log
from icegres.machines.drivers.quorum import (
    QuorumUnavailable,
    Timing,
    WriterFenced,
    open_quorum_tail,
    parse_addresses,
)
from icegres.machines.quorum import Entry, Persist, Term
from icegres.machines.quorum_format import encode_frame
from tests.support.icegres_server import refused_port

pytestmark = pytest.mark.unit

FAST = Timing(append_timeout_seconds=2.0, election_timeout_seconds=5.0)


def test_log_requires_init_and_refuses_init_twice(tmp_path: Path) -> None:
    with pytest.raises(KeeperRefused, match="--init"):
        open_keeper_log(tmp_path / "k")
    open_keeper_log(tmp_path / "k", init=True).close()
    with pytest.raises(KeeperRefused, match="without --init"):
        open_keeper_log(tmp_path / "k", init=True)
    open_keeper_log(tmp_path / "k").close()


def test_log_cuts_a_torn_tail_and_refuses_mid_log_damage(tmp_path: Path) -> None:
    keeper = open_keeper_log(tmp_path, init=True)
    t = Term(1, "w")
    records = [Persist(t, 0, (Entry(i, t, b"r%d" % i),)) for i in range(1, 4)]
    keeper.append_and_fsync(records)
    keeper.close()
    path = tmp_path / "keeper.log"
    whole = path.read_bytes()
    path.write_bytes(whole[:-3])  # a torn final write
    keeper = open_keeper_log(tmp_path)
    assert keeper.cut_bytes > 0 and sorted(keeper.state.accepted) == [1, 2]
    keeper.close()
    assert path.stat().st_size == len(encode_frame(records[0])) * 2
    damaged = bytearray(whole)
    damaged[20] ^= 1  # the first frame's body; valid frames follow
    path.write_bytes(bytes(damaged))
    with pytest.raises(KeeperRefused, match="damaged"):
        open_keeper_log(tmp_path)


def test_log_compaction_keeps_the_state(tmp_path: Path) -> None:
    keeper = open_keeper_log(tmp_path, init=True)
    t = Term(2, "w")
    keeper.append_and_fsync([Persist(t, 0, (Entry(i, t, b"x" * 50),)) for i in range(1, 30)])
    keeper.append_and_fsync([Persist(t, 20)])
    state = keeper.state
    before = keeper.size
    keeper.compact()
    assert keeper.size < before
    keeper.append_and_fsync([Persist(t, 20, (Entry(30, t, b"y"),))])
    keeper.close()
    reopened = open_keeper_log(tmp_path)
    assert reopened.state.trimmed == 20 and reopened.state.promised == t
    assert sorted(reopened.state.accepted) == [*sorted(state.accepted), 30]
    reopened.close()


def test_parse_addresses() -> None:
    assert parse_addresses("127.0.0.1:1, 127.0.0.1:2") == [("127.0.0.1", 1), ("127.0.0.1", 2)]
    assert parse_addresses(["[::1]:7"]) == [("::1", 7)]
    for bad in ("", "x", "h:0", "h:p", "a:1,a:1"):
        with pytest.raises(ValueError):
            parse_addresses(bad)


async def _keepers(nursery: trio.Nursery, dirs: list[Path]) -> list[KeeperServer]:
    servers = []
    for d in dirs:
        server = KeeperServer(open_keeper_log(d, init=not (d / "keeper.log").exists()))
        await nursery.start(server.serve)
        servers.append(server)
    return servers


async def test_writer_appends_recovers_and_is_fenced(tmp_path: Path) -> None:
    dirs = [tmp_path / f"k{i}" for i in range(3)]
    with trio.fail_after(30):
        async with trio.open_nursery() as nursery:
            servers = await _keepers(nursery, dirs)
            addresses = [f"127.0.0.1:{s.port}" for s in servers]
            async with open_quorum_tail(addresses, timing=FAST, writer="first") as tail:
                assert tail.replay == ()
                slots = [await tail.append(b"rec-%d" % i) for i in range(5)]
                assert slots == [1, 2, 3, 4, 5]
                async with trio.open_nursery() as writers:  # concurrent appends share fsyncs
                    for i in range(5, 25):
                        writers.start_soon(tail.append, b"rec-%d" % i)
                async with open_quorum_tail(addresses, timing=FAST, writer="second") as second:
                    assert [s for s, _ in second.replay] == list(range(1, 26))
                    assert dict(second.replay)[3] == b"rec-2"
                    with pytest.raises(WriterFenced):
                        await tail.append(b"late")
                    assert await second.append(b"next") == 26
            nursery.cancel_scope.cancel()
    for server in servers:
        server.log.close()
    # Every keeper's durable log folds to what it acknowledged.
    states = [open_keeper_log(d).state for d in dirs]
    held = [sum(1 for e in s.accepted.values() if e.payload) for s in states]
    assert sum(h >= 26 for h in held) >= 2, held


async def test_no_majority_no_ack(tmp_path: Path) -> None:
    dirs = [tmp_path / f"k{i}" for i in range(3)]
    with trio.fail_after(30):
        async with trio.open_nursery() as nursery:
            servers = await _keepers(nursery, dirs)
            # Two addresses where connections are refused: two of three keepers down from the start.
            with refused_port() as dead, refused_port() as also_dead:
                addresses = [f"127.0.0.1:{servers[0].port}", f"127.0.0.1:{dead}", f"127.0.0.1:{also_dead}"]
                timing = Timing(append_timeout_seconds=0.5, election_timeout_seconds=0.5)
                with pytest.raises(QuorumUnavailable, match="majority"):
                    async with open_quorum_tail(addresses, timing=timing):
                        pass
            nursery.cancel_scope.cancel()
    for server in servers:
        server.log.close()


async def test_fsync_runs_off_the_event_loop_and_a_failed_write_stops_the_keeper(tmp_path: Path) -> None:
    """The log is written and fsynced on another thread than the event loop's; a failed write
    stops the keeper (it never answers from state it cannot vouch for)."""
    import threading

    dirs = [tmp_path / f"k{i}" for i in range(3)]
    threads: set[int] = set()
    with trio.fail_after(30):
        async with trio.open_nursery() as nursery:
            servers = await _keepers(nursery, dirs)
            for server in servers:
                log, write = server.log, server.log.append_and_fsync

                def recorded(batch, write=write):
                    threads.add(threading.get_ident())
                    return write(batch)

                log.append_and_fsync = recorded
            addresses = [f"127.0.0.1:{s.port}" for s in servers]
            async with open_quorum_tail(addresses, timing=FAST, writer="w") as tail:
                assert await tail.append(b"one") == 1
                assert threads and threading.get_ident() not in threads

                def full(batch):
                    raise OSError(28, "No space left on device")

                servers[0].log.append_and_fsync = full
                assert await tail.append(b"two") == 2  # the other two are a majority
                with trio.fail_after(5):
                    while servers[0].failure is None:
                        await trio.sleep(0.01)
                assert "No space left on device" in servers[0].failure
            nursery.cancel_scope.cancel()
    for server in servers:
        server.log.close()


def test_incremental_fold_equals_recovery(tmp_path_factory: pytest.TempPathFactory) -> None:
    """The log's running state equals folding its records from scratch, and reopening agrees."""
    import random

    from icegres.machines.quorum import recover_acceptor

    rng = random.Random(8)
    for round_ in range(30):
        directory = tmp_path_factory.mktemp(f"fold{round_}")
        keeper = open_keeper_log(directory, init=True)
        records: list[Persist] = []
        for _ in range(rng.randrange(1, 8)):
            batch = []
            for _ in range(rng.randrange(1, 4)):
                term = Term(rng.randrange(1, 5), rng.choice("ab"))
                slots = sorted(rng.sample(range(1, 20), rng.randrange(0, 4)))
                entries = tuple(Entry(s, term, b"p%d" % rng.randrange(9)) for s in slots)
                batch.append(Persist(term, rng.randrange(0, 8), entries))
            keeper.append_and_fsync(batch)
            records += batch
            assert keeper.state == recover_acceptor(records)
        keeper.close()
        reopened = open_keeper_log(directory)
        assert reopened.state == recover_acceptor(records)
        reopened.close()
