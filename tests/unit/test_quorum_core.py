"""Direct, deterministic tests of the quorum tail's pure cores (acceptor and proposer)."""

from __future__ import annotations

from dataclasses import FrozenInstanceError

import pytest

from icegres.machines import quorum, quorum_format
from icegres.machines.quorum import (
    NOOP,
    Accept,
    Accepted,
    AcceptorState,
    Acknowledge,
    AppendRequested,
    Config,
    Entry,
    FromAcceptor,
    Persist,
    Phase,
    Prepare,
    Promised,
    QuorumProtocolError,
    RefuseAppend,
    Rejected,
    Replay,
    Reply,
    Send,
    State,
    StepDown,
    Term,
    Tick,
    Trim,
    Trimmed,
    WatermarkAdvanced,
    acceptor_step,
    health,
    recover,
    recover_acceptor,
    step,
)
from tests.support.purity import imported_roots

pytestmark = pytest.mark.unit

CONFIG = Config(acceptors=3, retry_ticks=2)
T1, T2 = Term(1, "a"), Term(2, "b")


def sends(effects, kind=None):
    return [
        e for e in effects if isinstance(e, Send) and (kind is None or isinstance(e.message, kind))
    ]


# --- acceptor ------------------------------------------------------------------------------------


def test_acceptor_persists_a_promise_before_replying() -> None:
    state, effects = acceptor_step(AcceptorState(), Prepare(T1))
    assert effects == [Persist(T1, 0), Reply(Promised(T1, 0, ()))]
    # A repeated prepare is answered again without a write; a lower one is rejected.
    assert acceptor_step(state, Prepare(T1))[1] == [Reply(Promised(T1, 0, ()))]
    assert acceptor_step(state, Prepare(Term(0, "")))[1] == [Reply(Rejected(Term(0, ""), T1))]
    assert acceptor_step(state, Prepare(Term(1, "0")))[1] == [Reply(Rejected(Term(1, "0"), T1))]


def test_acceptor_accepts_at_or_above_its_promise_and_reports_it_in_promises() -> None:
    state, _ = acceptor_step(AcceptorState(), Prepare(T1))
    state, effects = acceptor_step(state, Accept(T1, 1, (b"x", b"y")))
    entries = (Entry(1, T1, b"x"), Entry(2, T1, b"y"))
    assert effects == [Persist(T1, 0, entries), Reply(Accepted(T1, 1, 2))]
    assert acceptor_step(state, Accept(T1, 1, (b"x",)))[1] == [Reply(Accepted(T1, 1, 1))]
    state, effects = acceptor_step(state, Prepare(T2))
    assert effects[-1] == Reply(Promised(T2, 0, entries))
    assert acceptor_step(state, Accept(T1, 3, (b"z",)))[1] == [Reply(Rejected(T1, T2))]


def test_acceptor_trim_drops_records_and_recovery_folds_persists() -> None:
    state, e1 = acceptor_step(AcceptorState(), Accept(T1, 1, (b"a", b"b", b"c")))
    state, e2 = acceptor_step(state, Trim(T1, 2))
    assert e2 == [Persist(T1, 2), Reply(Trimmed(T1, 2))]
    assert sorted(state.accepted) == [3]
    persisted = [e for e in e1 + e2 if isinstance(e, Persist)]
    assert recover_acceptor(persisted) == state
    # Records at or below the trim point are acknowledged but not kept.
    state, effects = acceptor_step(state, Accept(T1, 1, (b"a",)))
    assert effects == [Reply(Accepted(T1, 1, 1))] and sorted(state.accepted) == [3]


def test_recover_acceptor_of_nothing_is_a_new_member() -> None:
    assert recover_acceptor([]) == AcceptorState()


# --- proposer ------------------------------------------------------------------------------------


def elect(promises: dict[int, Promised] | None = None, writer: str = "a", watermark: int = 0):
    state, effects = recover(CONFIG, writer, watermark=watermark)
    assert state.phase is Phase.ELECTING and len(sends(effects, Prepare)) == 3
    term = state.term
    for acceptor, promise in (
        promises or {0: Promised(term, 0, ()), 1: Promised(term, 0, ())}
    ).items():
        state, effects = step(state, FromAcceptor(acceptor, replace_term(promise, term)))
    return state, effects


def replace_term(promise: Promised, term: Term) -> Promised:
    return Promised(term, promise.trimmed, promise.entries)


def test_an_empty_log_elects_and_serves_at_once() -> None:
    state, effects = elect()
    assert state.phase is Phase.LEADING and effects == [Replay((), 0)]
    assert health(state).ok


def test_appends_ack_in_order_once_a_majority_accepted() -> None:
    state, _ = elect()
    state, e1 = step(state, AppendRequested(b"one"))
    state, e2 = step(state, AppendRequested(b"two"))
    assert [s.message for s in sends(e1)] == [Accept(state.term, 1, (b"one",))] * 3
    state, effects = step(state, FromAcceptor(0, Accepted(state.term, 2, 2)))
    state, effects = step(state, FromAcceptor(1, Accepted(state.term, 2, 2)))
    assert effects == []  # slot 2 is chosen but slot 1 is not yet: acks go in order
    state, effects = step(state, FromAcceptor(2, Accepted(state.term, 1, 1)))
    assert effects == []
    state, effects = step(state, FromAcceptor(0, Accepted(state.term, 1, 1)))
    assert effects == [Acknowledge(1, 2)] and state.acked == 2 and not state.inflight
    # Late answers change nothing.
    assert step(state, FromAcceptor(1, Accepted(state.term, 1, 2)))[1] == []


def test_recovery_picks_the_highest_term_value_fills_holes_and_reproposes() -> None:
    old, older = Term(5, "x"), Term(4, "y")
    promises = {
        0: Promised(T1, 0, (Entry(1, older, b"stale"), Entry(3, old, b"c"))),
        2: Promised(T1, 0, (Entry(1, old, b"new"), Entry(4, older, b"d"))),
    }
    state, effects = elect(promises)
    assert state.phase is Phase.RECOVERING
    assert dict(state.inflight) == {1: b"new", 2: NOOP, 3: b"c", 4: b"d"}
    accepts = [s.message for s in sends(effects) if s.acceptor == 1]
    assert accepts == [Accept(state.term, 1, (b"new", NOOP, b"c", b"d"))]
    for acceptor in (0, 1):
        state, effects = step(state, FromAcceptor(acceptor, Accepted(state.term, 1, 4)))
    assert state.phase is Phase.LEADING
    assert effects == [Replay(((1, b"new"), (3, b"c"), (4, b"d")), 4)]
    state, effects = step(state, AppendRequested(b"e"))
    assert sends(effects)[0].message.first_slot == 5


def test_recovery_starts_above_the_highest_trim_point() -> None:
    promises = {
        0: Promised(T1, 3, (Entry(4, T1, b"d"),)),
        1: Promised(T1, 1, (Entry(2, T1, b"b"), Entry(3, T1, b"c"), Entry(4, T1, b"d"))),
    }
    state, _ = elect(promises)
    assert dict(state.inflight) == {4: b"d"} and state.watermark == 3


def test_a_rejected_prepare_is_outbid_then_the_election_gives_up() -> None:
    config = Config(acceptors=3, election_attempts_max=2)
    state, _ = recover(config, "a")
    state, effects = step(state, FromAcceptor(0, Rejected(state.term, Term(7, "z"))))
    assert state.phase is Phase.ELECTING and state.term == Term(8, "a")
    assert len(sends(effects, Prepare)) == 3
    state, effects = step(state, FromAcceptor(1, Rejected(state.term, Term(9, "z"))))
    assert state.phase is Phase.FENCED and isinstance(effects[0], StepDown)


def test_a_higher_promise_fences_a_leader_at_once() -> None:
    state, _ = elect()
    state, _ = step(state, AppendRequested(b"x"))
    state, _ = step(state, AppendRequested(b"y"))
    state, effects = step(state, FromAcceptor(0, Accepted(state.term, 1, 1)))
    state, effects = step(state, FromAcceptor(2, Rejected(state.term, T2)))
    assert state.phase is Phase.FENCED
    assert effects == [StepDown(state.reason, range(1, 3))] and "outbid" in state.reason
    # Nothing more is acknowledged, whatever arrives.
    assert step(state, FromAcceptor(1, Accepted(state.term, 1, 2)))[1] == []
    assert isinstance(step(state, AppendRequested(b"z"))[1][0], RefuseAppend)
    assert not health(state).ok


def test_stale_rejections_and_promises_are_ignored() -> None:
    state, _ = elect()
    assert step(state, FromAcceptor(0, Rejected(Term(0, "a"), T1)))[1] == []
    assert step(state, FromAcceptor(0, Promised(state.term, 0, ())))[1] == []
    assert step(state, FromAcceptor(0, Trimmed(state.term, 0)))[1] == []


def test_ticks_resend_what_was_not_answered() -> None:
    state, _ = recover(CONFIG, "a")
    state, _ = step(state, FromAcceptor(1, Promised(state.term, 0, ())))
    state, effects = step(state, Tick())
    assert effects == []
    state, effects = step(state, Tick())
    assert [(s.acceptor, s.message) for s in effects] == [
        (0, Prepare(state.term)),
        (2, Prepare(state.term)),
    ]
    state, _ = step(state, FromAcceptor(2, Promised(state.term, 0, ())))
    state, _ = step(state, AppendRequested(b"x"))
    state, _ = step(state, AppendRequested(b"y"))
    state, _ = step(state, FromAcceptor(0, Accepted(state.term, 1, 2)))
    state, _ = step(state, Tick())
    state, effects = step(state, Tick())
    assert {s.acceptor for s in effects} == {1, 2}
    assert all(s.message == Accept(state.term, 1, (b"x", b"y")) for s in effects)


def test_watermark_sends_trims_and_never_passes_the_acks() -> None:
    state, _ = elect()
    state, _ = step(state, AppendRequested(b"x"))
    with pytest.raises(QuorumProtocolError):
        step(state, WatermarkAdvanced(1))
    for a in (0, 1):
        state, _ = step(state, FromAcceptor(a, Accepted(state.term, 1, 1)))
    state, effects = step(state, WatermarkAdvanced(1))
    assert [s.message for s in effects] == [Trim(state.term, 1)] * 3
    assert step(state, WatermarkAdvanced(1))[1] == []


def test_protocol_errors() -> None:
    state, _ = recover(CONFIG, "a")
    with pytest.raises(QuorumProtocolError):
        step(state, AppendRequested(b"x"))  # not leading yet
    leading, _ = elect()
    with pytest.raises(QuorumProtocolError):
        step(leading, AppendRequested(NOOP))
    with pytest.raises(QuorumProtocolError):
        step(leading, FromAcceptor(5, Accepted(leading.term, 1, 1)))
    with pytest.raises(ValueError):
        recover(CONFIG, "")
    with pytest.raises(ValueError):
        Config(acceptors=0)
    with pytest.raises(FrozenInstanceError):
        leading.phase = Phase.FENCED  # type: ignore[misc]
    assert State(config=CONFIG).phase is Phase.STARTING


def test_terms_are_unique_and_ordered() -> None:
    assert Term(1, "b") > Term(1, "a") > Term(0, "")
    assert Term(2, "a") > Term(1, "z")
    for term in (Term(0, ""), Term(7, "ab-12"), Term(2**63, "w")):
        assert Term.parse(str(term)) == term
    for bad in ("", "7", "x/a", "-1/a"):
        with pytest.raises(ValueError):
            Term.parse(bad)


@pytest.mark.parametrize("module", [quorum, quorum_format])
def test_the_core_imports_no_io(module) -> None:
    roots = imported_roots(module)
    assert roots <= {
        "__future__",
        "collections",
        "dataclasses",
        "enum",
        "typing",
        "icegres",
        "re",
        "struct",
        "zlib",
    }, roots
