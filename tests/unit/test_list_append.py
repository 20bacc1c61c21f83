"""The list-append checker (icegres/verify/list_append.py) on hand-made histories: each anomaly it
claims to find, in a history holding exactly that anomaly, and valid histories (aborted and
unknown-outcome transactions included) that must check clean; then histories of the reference
store, which must check clean under snapshot isolation (and SERIALIZABLE when run serially) and
must not when first-committer-wins is switched off."""

from __future__ import annotations

import random

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from icegres.verify.list_append import (
    DUPLICATE_ELEMENTS,
    G0,
    G1A,
    G1B,
    G1C,
    G2,
    G_SINGLE,
    INCOMPATIBLE_ORDER,
    INTERNAL,
    LOST_UPDATE,
    UNKNOWN_VALUE,
    History,
    Status,
    check,
    simulate,
    txn,
)

pytestmark = pytest.mark.unit


def history(*txns):
    return History(tuple(txns))


def kinds(h, **kwargs) -> set[str]:
    return set(check(h, **kwargs).counts)


def only(h, kind, **kwargs):
    """The report of `h`, asserted to hold exactly one anomaly, of `kind`."""
    report = check(h, **kwargs)
    assert dict(report.counts) == {kind: 1}, report.anomalies
    return report.anomalies[0]


# --- each anomaly, alone ---------------------------------------------------------------------------


def test_a_cycle_of_appends_alone_is_g0():
    # x: T1 then T2; y: T2 then T1. Only T3's reads reveal the orders.
    anomaly = only(history(
        txn(1, ("append", "x", 1), ("append", "y", 4)),
        txn(2, ("append", "x", 2), ("append", "y", 3)),
        txn(3, ("r", "x", [1, 2]), ("r", "y", [3, 4])),
    ), G0)
    assert set(anomaly.txns) == {1, 2}
    assert "T1 appended 1 to key 'x', then T2 appended 2" in anomaly.explanation
    assert "T2 appended 3 to key 'y', then T1 appended 4" in anomaly.explanation


def test_reading_an_aborted_append_is_g1a():
    anomaly = only(history(
        txn(1, ("append", "x", 1), status="fail"),
        txn(2, ("r", "x", [1])),
    ), G1A)
    assert anomaly.txns == (2, 1)
    assert "T1, which aborted" in anomaly.explanation


def test_reading_another_transactions_first_of_two_appends_is_g1b():
    anomaly = only(history(
        txn(1, ("append", "x", 1), ("append", "x", 2)),
        txn(2, ("r", "x", [1])),
        txn(3, ("r", "x", [1, 2])),
    ), G1B)
    assert anomaly.txns == (2, 1)
    assert "whose last append to it was 2" in anomaly.explanation


def test_two_transactions_each_reading_the_others_append_is_g1c():
    anomaly = only(history(
        txn(1, ("append", "x", 1), ("r", "y", [2])),
        txn(2, ("append", "y", 2), ("r", "x", [1])),
    ), G1C)
    assert set(anomaly.txns) == {1, 2}


def test_seeing_one_of_a_transactions_appends_but_not_the_other_is_g_single():
    # Read skew: T1 reads x before T2 and y after it.
    anomaly = only(history(
        txn(0, ("append", "x", 1), ("append", "y", 2)),
        txn(2, ("append", "x", 3), ("append", "y", 4)),
        txn(1, ("r", "x", [1]), ("r", "y", [2, 4])),
        txn(3, ("r", "x", [1, 3]), ("r", "y", [2, 4])),
    ), G_SINGLE)
    assert anomaly.txns == (1, 2)
    assert "T1 read key 'x' as [1], without 3, which T2 appended" in anomaly.explanation
    assert "T1 read key 'y' as [2, 4], which T2 appended to" in anomaly.explanation


def test_two_committed_appends_to_one_read_version_are_a_lost_update():
    anomaly = only(history(
        txn(0, ("append", "x", 1)),
        txn(1, ("r", "x", [1]), ("append", "x", 2)),
        txn(2, ("r", "x", [1]), ("append", "x", 3)),
    ), LOST_UPDATE)
    assert anomaly.txns == (1, 2)


def test_a_lost_update_that_a_later_read_orders_is_also_a_g_single():
    # T3 shows 3 landed after 2: T2 appended to a version it did not see (T2 -rw-> T1 -ww-> T2).
    report = check(history(
        txn(0, ("append", "x", 1)),
        txn(1, ("r", "x", [1]), ("append", "x", 2)),
        txn(2, ("r", "x", [1]), ("append", "x", 3)),
        txn(3, ("r", "x", [1, 2, 3])),
    ))
    assert dict(report.counts) == {G_SINGLE: 1, LOST_UPDATE: 1}
    cycle = next(a for a in report.anomalies if a.kind == G_SINGLE)
    assert cycle.txns == (2, 1)
    assert cycle.explanation.startswith("T2 read key 'x' as [1], without 2, which T1 appended; "
                                        "T1 appended 2 to key 'x', then T2 appended 3")


def test_write_skew_is_g2_under_serializable_and_allowed_under_snapshot_isolation():
    h = history(
        txn(0, ("append", "x", 1), ("append", "y", 2)),
        txn(1, ("r", "x", [1]), ("r", "y", [2]), ("append", "x", 3)),
        txn(2, ("r", "x", [1]), ("r", "y", [2]), ("append", "y", 4)),
        txn(3, ("r", "x", [1, 3]), ("r", "y", [2, 4])),
    )
    assert check(h).valid
    anomaly = only(h, G2, serializable=True)
    assert set(anomaly.txns) == {1, 2}


def test_reads_neither_of_which_is_a_prefix_of_the_other_are_incompatible():
    only(history(
        txn(1, ("append", "x", 1)),
        txn(2, ("append", "x", 2)),
        txn(3, ("r", "x", [1, 2])),
        txn(4, ("r", "x", [2])),
    ), INCOMPATIBLE_ORDER)


def test_a_value_read_twice_in_one_list_is_a_duplicate():
    only(history(
        txn(1, ("append", "x", 1)),
        txn(2, ("r", "x", [1, 1])),
    ), DUPLICATE_ELEMENTS)


def test_a_value_nobody_appended_is_reported():
    anomaly = only(history(
        txn(1, ("append", "x", 1)),
        txn(2, ("r", "x", [1, 9])),
    ), UNKNOWN_VALUE)
    assert "no transaction appended 9" in anomaly.explanation


def test_a_read_missing_the_transactions_own_append_is_internal():
    only(history(
        txn(1, ("append", "x", 1), ("r", "x", [])),
    ), INTERNAL)


def test_a_read_changing_between_two_reads_of_one_transaction_is_internal():
    only(history(
        txn(1, ("r", "x", [])),
        txn(2, ("r", "x", []), ("r", "x", [5])),
        txn(5, ("append", "x", 5)),
    ), INTERNAL)


def test_an_anomaly_among_many_valid_transactions_is_found():
    base = simulate(random.Random(7), txns=3000, processes=6)
    assert check(base).valid
    skew = (
        txn(10_000_000, ("append", "sx", 1), ("append", "sy", 2)),
        txn(10_000_002, ("append", "sx", 3), ("append", "sy", 4)),
        txn(10_000_001, ("r", "sx", [1]), ("r", "sy", [2, 4])),
        txn(10_000_003, ("r", "sx", [1, 3]), ("r", "sy", [2, 4])),
    )
    txns = list(base.txns)
    for offset, t in enumerate(skew):
        txns.insert(1000 + 500 * offset, t)
    report = check(History(tuple(txns)))
    assert dict(report.counts) == {G_SINGLE: 1}
    assert report.anomalies[0].txns == (10_000_001, 10_000_002)


# --- valid histories -------------------------------------------------------------------------------


def test_aborted_and_unknown_transactions_in_a_valid_history():
    report = check(history(
        txn(1, ("append", "x", 1)),
        txn(2, ("r", "x", [1]), ("append", "x", 2), status="fail"),  # 40001: never visible
        txn(3, ("append", "x", 3), ("r", "y", None), status="info"),  # COMMIT's answer lost; it landed
        txn(4, ("append", "y", 9), status="info"),  # lost too, and it did not land
        txn(5, ("r", "x", [1, 3]), ("r", "y", [])),
        txn(6, ("r", "x", [1])),  # an older snapshot: still valid without real time
        txn(7, ("r", "x", [1, 3]), ("append", "x", 7), ("r", "x", [1, 3, 7])),
    ), serializable=True)
    assert report.valid, report.anomalies
    assert (report.ok, report.failed, report.unknown, report.ops) == (4, 1, 2, 12)
    assert report.summary() == "valid"


def test_an_empty_history_is_valid():
    assert check(History(())).valid


def test_the_report_counts_every_anomaly_and_keeps_a_few_examples():
    txns = [txn(0, ("append", "x", 0))]
    txns += [txn(i, ("r", "x", [0]), ("append", "x", i)) for i in range(1, 40)]
    report = check(History(tuple(txns)))
    assert report.counts == {LOST_UPDATE: 1}  # one version, 39 writers: one anomaly
    assert len(report.anomalies[0].txns) == 39
    assert report.summary().startswith("lost-update (T1, T2, ")


def test_a_value_appended_twice_is_a_malformed_history():
    with pytest.raises(ValueError, match="appended to key 'x' twice"):
        check(history(txn(1, ("append", "x", 1)), txn(2, ("append", "x", 1))))


def test_two_transactions_with_one_id_are_a_malformed_history():
    with pytest.raises(ValueError, match="two transactions are named T1"):
        check(history(txn(1, ("r", "x", [])), txn(1, ("r", "x", []))))


# --- the reference store ---------------------------------------------------------------------------


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(rng=st.randoms(use_true_random=False), processes=st.integers(1, 8), keys=st.integers(1, 6),
       txns=st.integers(1, 150))
def test_snapshot_isolated_histories_check_clean(rng, processes, keys, txns):
    h = simulate(rng, txns=txns, processes=processes, keys=keys, appends_per_key_max=8,
                 abort_share=0.1, unknown_share=0.1)
    report = check(h)
    assert report.valid, report.anomalies
    assert report.txns == txns


@settings(max_examples=40, deadline=None)
@given(rng=st.randoms(use_true_random=False), keys=st.integers(1, 6), txns=st.integers(1, 150))
def test_serial_histories_are_serializable(rng, keys, txns):
    h = simulate(rng, txns=txns, processes=1, keys=keys, appends_per_key_max=8, abort_share=0.1,
                 unknown_share=0.1)
    report = check(h, serializable=True)
    assert report.valid, report.anomalies


def test_concurrent_snapshot_isolated_histories_show_write_skew_under_serializable():
    h = simulate(random.Random(3), txns=2000, processes=8, keys=4)
    assert check(h).valid
    assert G2 in check(h, serializable=True).counts


def test_a_store_without_first_committer_wins_loses_updates():
    h = simulate(random.Random(5), txns=500, processes=6, first_committer_wins=False)
    report = check(h)
    assert LOST_UPDATE in report.counts
    assert not report.valid
    assert all(a.kind in report.counts for a in report.anomalies)
    assert {t.status for t in h.txns} <= set(Status)


# --- the cycle search against brute force ----------------------------------------------------------


def _simple_cycles(n, edges):
    """Every simple cycle of a tiny graph, as node lists starting from their least node."""
    out = []

    def walk(path, on_path):
        for (a, b) in edges:
            if a != path[-1]:
                continue
            if b == path[0]:
                out.append(list(path))
            elif b > path[0] and b not in on_path:
                walk([*path, b], on_path | {b})

    for start in range(n):
        walk([start], {start})
    return [list(c) for c in {tuple(c) for c in out}]


@settings(max_examples=300, deadline=None)
@given(n=st.integers(2, 6), edges=st.lists(st.tuples(st.integers(0, 5), st.integers(0, 5), st.integers(0, 2)),
                                           max_size=14), serializable=st.booleans())
def test_the_cycle_search_finds_what_brute_force_finds(n, edges, serializable):
    from icegres.verify import list_append as la

    labels: dict[tuple[int, int], set[int]] = {}
    graph = la._Graph(n)
    for a, b, kind in edges:
        if a < n and b < n and a != b:
            graph.add(kind, a, b)
            labels.setdefault((a, b), set()).add(kind)
    facts = la._Facts(tuple(la.Txn(i, 0, (), Status.OK) for i in range(n)))
    found = la._Findings()
    la._cycles(graph, facts, found, serializable=serializable)
    cycles = [list(zip(c, [*c[1:], c[0]], strict=True)) for c in _simple_cycles(n, list(labels))]

    def shaped(cycle, rw_edges):
        """Some labelling of the cycle's edges has exactly `rw_edges` rw edges (None: one or more)
        and ww or wr on the others."""
        have_rw = [e for e in cycle if la.RW in labels[e]]
        other_ok = {e for e in cycle if labels[e] & {la.WW, la.WR}}
        if rw_edges == 0:
            return len(other_ok) == len(cycle)
        return any(set(cycle) - {e} <= other_ok for e in have_rw) if rw_edges == 1 else bool(have_rw)

    g0 = any(all(la.WW in labels[e] for e in c) for c in cycles)
    g1c = any(shaped(c, 0) and any(la.WR in labels[e] for e in c) for c in cycles)
    g_single = any(shaped(c, 1) for c in cycles)
    assert (G0 in found.counts) == g0
    assert (G1C in found.counts) == g1c
    assert (G_SINGLE in found.counts) == g_single
    if G2 in found.counts:
        assert serializable and any(shaped(c, None) for c in cycles)
    if serializable and not g_single and any(shaped(c, None) for c in cycles):
        assert G2 in found.counts
    for anomaly in found.examples():  # each witness is a cycle of the graph
        ring = list(anomaly.txns)
        assert all((a, b) in labels for a, b in zip(ring, [*ring[1:], ring[0]], strict=True))
