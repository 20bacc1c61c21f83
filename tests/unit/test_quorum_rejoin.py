"""The catch-up of a keeper that lost its disk: the rejoin core, the acceptor's catching-up state,
the writer's rejoin-count rule, the codec of the new messages, and an in-process catch-up of a real
keeper server on 127.0.0.1."""

from __future__ import annotations

from pathlib import Path

import pytest
import trio

from icegres.machines.drivers.keeper import (
    KeeperRefused,
    KeeperServer,
    Rejoin,
    open_keeper_log,
    run_keeper,
)
from icegres.machines.drivers.quorum import Timing, open_quorum_tail
from icegres.machines.quorum import (
    Accepted,
    AcceptorPhase,
    AcceptorState,
    CatchUp,
    CaughtUp,
    Config,
    Entry,
    FromAcceptor,
    Persist,
    Phase,
    Prepare,
    Promised,
    QuorumProtocolError,
    Refused,
    Reply,
    Send,
    Snapshot,
    Term,
    Tick,
    acceptor_step,
    recover,
    recover_acceptor,
    rejoining_acceptor,
    step,
)
from icegres.machines.quorum_format import CorruptFrame, decode_frame, encode_frame
from icegres.machines.quorum_rejoin import (
    AskPeer,
    Install,
    RejoinConfig,
    RejoinPhase,
    SnapshotReceived,
    merge,
    peers_needed,
    rejoin_step,
    start_rejoin,
)
from tests.support.purity import imported_roots

pytestmark = pytest.mark.unit

T1, T2, T3 = Term(1, "a"), Term(2, "b"), Term(3, "c")


# --- how many peers ------------------------------------------------------------------------------


def test_peers_needed_meets_every_quorum_the_lost_member_was_in() -> None:
    # members - majority + 1 others: for 3 keepers both others, for 5 three of the four.
    assert [peers_needed(n) for n in (2, 3, 4, 5, 7)] == [1, 2, 2, 3, 4]
    for members in range(2, 10):
        majority = members // 2 + 1
        others = members - 1
        # Any set of peers_needed others meets any set of majority - 1 others.
        assert peers_needed(members) + (majority - 1) > others
    with pytest.raises(ValueError):
        peers_needed(1)


# --- the rejoin core -----------------------------------------------------------------------------


def test_two_rounds_raise_the_counts_then_merge() -> None:
    state, effects = start_rejoin(RejoinConfig(peers=2))
    assert effects == [AskPeer(0, CatchUp(0)), AskPeer(1, CatchUp(0))]
    state, effects = rejoin_step(state, SnapshotReceived(0, Snapshot(T1, 0, 2, ())))
    assert effects == [] and state.phase is RejoinPhase.ASKING
    state, effects = rejoin_step(state, SnapshotReceived(1, Snapshot(T1, 0, 1, ())))
    # The target is above every count in use: the lost incarnation's count was one of them.
    assert state.phase is RejoinPhase.FETCHING and state.target == 3
    assert effects == [AskPeer(0, CatchUp(3)), AskPeer(1, CatchUp(3))]
    # A round-one answer arriving late is not a snapshot taken after the raise.
    state, effects = rejoin_step(state, SnapshotReceived(0, Snapshot(T2, 0, 2, ())))
    assert effects == [] and state.answers == {}
    a = Snapshot(T2, 1, 3, (Entry(2, T1, b"x"), Entry(3, T2, b"y")))
    b = Snapshot(T1, 2, 3, (Entry(3, T1, b"old"), Entry(4, T1, b"z")))
    state, effects = rejoin_step(state, SnapshotReceived(0, a))
    assert effects == []
    state, effects = rejoin_step(state, SnapshotReceived(1, b))
    assert state.phase is RejoinPhase.DONE
    (install,) = effects
    assert isinstance(install, Install) and install.peers == (0, 1)
    assert install.state == merge([a, b])
    # Done is terminal: the driver has stopped; anything more is its bug.
    for event in (SnapshotReceived(0, a), Tick()):
        with pytest.raises(QuorumProtocolError):
            rejoin_step(state, event)


def test_merge_takes_the_highest_of_everything() -> None:
    merged = merge(
        [
            Snapshot(T2, 1, 3, (Entry(2, T1, b"x"), Entry(3, T2, b"y"))),
            Snapshot(T3, 2, 4, (Entry(3, T1, b"old"), Entry(4, T1, b"z"))),
        ]
    )
    assert merged.promised == T3 and merged.trimmed == 2 and merged.rejoins == 4
    # Slot 2 is at or below the highest trim point (in the lake); slot 3 takes the higher term.
    assert dict(merged.accepted) == {3: Entry(3, T2, b"y"), 4: Entry(4, T1, b"z")}
    assert merged.phase is AcceptorPhase.CATCHING_UP  # installed through CaughtUp
    with pytest.raises(QuorumProtocolError, match="two values"):
        merge(
            [Snapshot(T1, 0, 1, (Entry(1, T1, b"a"),)), Snapshot(T1, 0, 1, (Entry(1, T1, b"b"),))]
        )


def test_ticks_ask_the_peers_that_did_not_answer() -> None:
    state, _ = start_rejoin(RejoinConfig(peers=4, retry_ticks=2))
    state, _ = rejoin_step(state, SnapshotReceived(2, Snapshot(T1, 0, 0, ())))
    state, effects = rejoin_step(state, Tick())
    assert effects == []
    state, effects = rejoin_step(state, Tick())
    assert [e.peer for e in effects] == [0, 1, 3]
    with pytest.raises(QuorumProtocolError, match="no peer"):
        rejoin_step(state, SnapshotReceived(4, Snapshot(T1, 0, 0, ())))


# --- the acceptor --------------------------------------------------------------------------------


def test_a_catching_up_acceptor_refuses_everything_and_changes_nothing() -> None:
    state = rejoining_acceptor()
    for request in (Prepare(T1), Prepare(T1, 5), CatchUp(3)):
        after, effects = acceptor_step(state, request)
        assert after == state
        (reply,) = effects
        assert isinstance(reply, Reply) and isinstance(reply.message, Refused)
        assert "catching up" in reply.message.reason


def test_caught_up_persists_the_merge_before_serving() -> None:
    merged = merge([Snapshot(T2, 1, 3, (Entry(3, T2, b"y"),)), Snapshot(T1, 0, 3, ())])
    state, effects = acceptor_step(rejoining_acceptor(), CaughtUp(merged))
    assert state.phase is AcceptorPhase.SERVING
    assert effects == [Persist(T2, 1, (Entry(3, T2, b"y"),), 3)]
    assert recover_acceptor([effects[0]]) == state
    with pytest.raises(QuorumProtocolError):
        acceptor_step(state, CaughtUp(merged))  # only once, only from catching up


def test_a_peer_raises_its_count_durably_before_its_snapshot() -> None:
    held = AcceptorState(promised=T2, trimmed=1, accepted={2: Entry(2, T2, b"x")}, rejoins=1)
    state, effects = acceptor_step(held, CatchUp(4))
    assert state.rejoins == 4
    persist, reply = effects
    assert persist == Persist(T2, 1, rejoins=4)
    assert reply == Reply(Snapshot(T2, 1, 4, (Entry(2, T2, b"x"),)))
    # Asked again (or asked only, round one): no write, the same snapshot.
    assert acceptor_step(state, CatchUp(4)) == (state, [reply])
    assert acceptor_step(state, CatchUp(0)) == (state, [reply])
    # Every later promise carries the raised count.
    _, effects = acceptor_step(state, Prepare(T3))
    assert effects[-1].message.rejoins == 4


def test_a_prepare_with_a_higher_count_raises_the_acceptors() -> None:
    state, effects = acceptor_step(AcceptorState(promised=T2, rejoins=1), Prepare(T2, 3))
    assert state.rejoins == 3 and effects[0] == Persist(T2, 0, rejoins=3)
    assert effects[1].message == Promised(T2, 0, (), 3)


def test_an_accept_with_a_higher_count_raises_the_acceptors() -> None:
    from icegres.machines.quorum import Accept, Accepted

    held = AcceptorState(promised=T2, accepted={1: Entry(1, T2, b"x")}, rejoins=1)
    # A duplicate, but of a higher count: the raise is persisted before the answer.
    state, effects = acceptor_step(held, Accept(T2, 1, (b"x",), 2))
    assert state.rejoins == 2
    assert effects == [Persist(T2, 0, (), 2), Reply(Accepted(T2, 1, 1, 2))]
    assert acceptor_step(state, Accept(T2, 1, (b"x",), 2)) == (state, [effects[1]])


# --- the writer's rule ---------------------------------------------------------------------------


def test_promises_of_different_counts_never_make_a_majority() -> None:
    state, _ = recover(Config(acceptors=3, retry_ticks=1), "w", round=5)
    term = state.term
    # Acceptor 0's promise may come from an incarnation that lost its disk since.
    state, effects = step(state, FromAcceptor(0, Promised(term, 0, (), rejoins=0)))
    state, effects = step(state, FromAcceptor(1, Promised(term, 0, (), rejoins=1)))
    assert state.phase is Phase.ELECTING and set(state.promises) == {1}
    # A promise of the lower count is ignored from now on ...
    state, effects = step(state, FromAcceptor(2, Promised(term, 0, (), rejoins=0)))
    assert state.phase is Phase.ELECTING and set(state.promises) == {1}
    # ... and the retry asks the others with the higher count, so they raise theirs.
    state, effects = step(state, Tick())
    assert {(e.acceptor, e.message) for e in effects if isinstance(e, Send)} == {
        (0, Prepare(term, 1)),
        (2, Prepare(term, 1)),
    }
    state, effects = step(state, FromAcceptor(0, Promised(term, 0, (), rejoins=1)))
    assert state.phase is Phase.LEADING


def test_votes_of_different_counts_never_make_a_majority() -> None:
    from icegres.machines.quorum import Accept, Accepted, Acknowledge, AppendRequested

    state, _ = recover(Config(acceptors=3, retry_ticks=1), "w", round=5)
    term = state.term
    for acceptor in (0, 1):
        state, _ = step(state, FromAcceptor(acceptor, Promised(term, 0, ())))
    assert state.phase is Phase.LEADING
    state, _ = step(state, AppendRequested(b"r1"))
    # Keeper 0's Accepted left its old incarnation; keeper 1 accepted after a catch-up's snapshot.
    state, effects = step(state, FromAcceptor(0, Accepted(term, 1, 1, rejoins=0)))
    state, effects = step(state, FromAcceptor(1, Accepted(term, 1, 1, rejoins=1)))
    assert effects == [] and state.acked == 0
    # A late vote of the lower count is ignored; the retry asks keepers 0 and 2 again.
    state, effects = step(state, FromAcceptor(2, Accepted(term, 1, 1, rejoins=0)))
    assert effects == [] and dict(state.votes[1]) == {1: 1}
    state, effects = step(state, Tick())
    assert {e.acceptor for e in effects if isinstance(e, Send)} == {0, 2}
    assert all(isinstance(e.message, Accept) for e in effects if isinstance(e, Send))
    state, effects = step(state, FromAcceptor(0, Accepted(term, 1, 1, rejoins=1)))
    assert effects == [Acknowledge(1, 1)]


# --- the codec -----------------------------------------------------------------------------------


def test_new_messages_roundtrip_and_old_persists_keep_their_bytes() -> None:
    for message in (
        Prepare(T1, 7),
        CatchUp(0),
        CatchUp(9),
        Promised(T1, 2, (Entry(3, T2, b"x"),), 5),
        Accepted(T1, 4, 6, 2),
        Snapshot(T2, 2, 3, (Entry(3, T2, b"x"), Entry(9, T1, b""))),
        Refused("catching up: é"),
        Persist(T1, 0, (Entry(1, T1, b"p"),), 2),
    ):
        assert decode_frame(encode_frame(message))[0] == message
    # A Persist without a rejoin count is still kind 21: logs written before catch-ups read back.
    assert encode_frame(Persist(T1, 0))[16] == 21
    assert encode_frame(Persist(T1, 0, rejoins=1))[16] == 22
    long = Refused("x" * 5000)
    assert len(decode_frame(encode_frame(long))[0].reason) == 1024


def test_a_kind_22_persist_with_count_0_is_corrupt() -> None:
    frame = bytearray(encode_frame(Persist(T1, 0, rejoins=1)))
    body = bytearray(frame[16:])
    at = 1 + 8 + 1 + 1 + 8  # kind, round, writer length, "a", trimmed: then the count
    body[at : at + 8] = (0).to_bytes(8, "little")
    from icegres.machines.quorum_format import _HEADER_CRC, _PREFIX, MAGIC
    from icegres.machines.wal_format import checksum

    prefix = _PREFIX.pack(MAGIC, len(body), checksum(bytes(body)))
    with pytest.raises(CorruptFrame, match="count of 0"):
        decode_frame(prefix + _HEADER_CRC.pack(checksum(prefix)) + bytes(body))


# --- a real keeper server catching up (in process, 127.0.0.1) -------------------------------------

FAST = Timing(append_timeout_seconds=2.0, election_timeout_seconds=5.0)


async def test_a_wiped_keeper_catches_up_before_it_answers(tmp_path: Path) -> None:
    dirs = [tmp_path / f"k{i}" for i in range(3)]
    with trio.fail_after(30):
        async with trio.open_nursery() as nursery:
            servers: list[KeeperServer] = []
            scopes: list[trio.CancelScope] = []
            for d in dirs:
                scope = trio.CancelScope()
                server = KeeperServer(open_keeper_log(d, init=True))

                async def serve(
                    server=server, scope=scope, *, task_status=trio.TASK_STATUS_IGNORED
                ):
                    with scope:
                        await server.serve(task_status=task_status)

                await nursery.start(serve)
                servers.append(server)
                scopes.append(scope)
            addresses = [f"127.0.0.1:{s.port}" for s in servers]
            async with open_quorum_tail(addresses, timing=FAST, writer="first") as tail:
                for i in range(10):
                    await tail.append(b"rec-%d" % i)
            # Keeper 0 loses its disk: stopped, its directory emptied.
            scopes[0].cancel()
            servers[0].log.close()
            (dirs[0] / "keeper.log").unlink()
            with pytest.raises(KeeperRefused, match="--rejoin"):
                open_keeper_log(dirs[0])
            # It rejoins on its old port from the two others.
            peers = [("127.0.0.1", s.port) for s in servers[1:]]
            rejoined = KeeperServer(None, "127.0.0.1", servers[0].port)
            await nursery.start(rejoined.serve)
            # Before its catch-up it refuses a writer's prepare outright.
            stream = await trio.open_tcp_stream("127.0.0.1", servers[0].port)
            await stream.send_all(encode_frame(Prepare(Term(99, "x"))))
            reply, _ = decode_frame(await stream.receive_some(65536))
            assert isinstance(reply, Refused)
            await stream.aclose()
            installed = await Rejoin(peers).run()
            await rejoined.install(dirs[0], installed)
            state = rejoined.state
            assert state.phase is AcceptorPhase.SERVING and state.rejoins == 1
            assert sorted(e.payload for e in state.accepted.values()) == sorted(
                b"rec-%d" % i for i in range(10)
            )
            assert state.promised.writer == "first"
            # Durable: its new log folds to the same state.
            assert open_keeper_log(dirs[0]).state == state
            # Keeper 1 stops: the rejoined keeper and keeper 2 carry the quorum, with everything.
            scopes[1].cancel()
            async with open_quorum_tail(addresses, timing=FAST, writer="second") as second:
                assert [p for _, p in second.replay] == [b"rec-%d" % i for i in range(10)]
            nursery.cancel_scope.cancel()
    for server in [rejoined, *servers[1:]]:  # keeper 0's old log was closed when it was wiped
        if server.log is not None:
            server.log.close()


async def test_rejoin_refuses_a_directory_with_a_log_and_itself_as_a_peer(tmp_path: Path) -> None:
    open_keeper_log(tmp_path / "k", init=True).close()
    with pytest.raises(KeeperRefused, match="without --rejoin"):
        await run_keeper(tmp_path / "k", "127.0.0.1", 0, rejoin=[("127.0.0.1", 2)])
    with pytest.raises(KeeperRefused, match="names this keeper"):
        await run_keeper(tmp_path / "e", "127.0.0.1", 7, rejoin=[("127.0.0.1", 7)])
    with pytest.raises(KeeperRefused, match="exclude"):
        await run_keeper(tmp_path / "e", "127.0.0.1", 7, init=True, rejoin=[("127.0.0.1", 8)])


def test_the_rejoin_core_imports_no_io() -> None:
    import ast

    from icegres.machines import quorum_rejoin

    roots = imported_roots(quorum_rejoin)
    tree = ast.parse(Path(quorum_rejoin.__file__).read_text())
    assert roots <= {"__future__", "collections", "dataclasses", "enum", "typing", "icegres"}, roots
    assert not any("drivers" in (getattr(n, "module", "") or "") for n in ast.walk(tree))


async def test_the_catch_up_driver_ignores_answers_after_its_install() -> None:
    rejoin = Rejoin([("127.0.0.1", 1), ("127.0.0.1", 2)])
    for peer in (0, 1):
        rejoin._step(SnapshotReceived(peer, Snapshot(T1, 0, 0, ())))
    for peer in (0, 1):
        rejoin._step(SnapshotReceived(peer, Snapshot(T2, 0, 1, (Entry(1, T2, b"x"),))))
    assert rejoin.installed is not None and rejoin.state.phase is RejoinPhase.DONE
    # A duplicate snapshot and a tick after the install: ignored, not a protocol error.
    rejoin._step(SnapshotReceived(0, Snapshot(T2, 0, 1, ())))
    rejoin._step(Tick())
    assert rejoin.installed.state.promised == T2
