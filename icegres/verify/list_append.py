"""A checker for list-append histories, after Jepsen's Elle (Kingsbury & Alvaro, VLDB 2020).

The workload: transactions of micro-operations on keyed lists, each either an append of a value
unique to its key or a read of the whole list. Because every read shows the key's entire history
of appends, the order in which versions were installed can be recovered from the reads alone
(the longest read of a key; every other read must be a prefix of it), and from that order the
dependencies between transactions follow, as Adya defines them:

- ww: T1 appended to k, and the next append to k in the key's order is T2's;
- wr: T2 read a version of k whose last element T1 appended;
- rw: T1 read a version of k, and the append that follows it in the key's order is T2's
  (an anti-dependency: T2 overwrote what T1 saw).

A cycle in that graph is an anomaly: G0 (ww only), G1c (ww and wr), G-single (exactly one rw:
read skew), G2 (two or more rw: write skew). Some anomalies show without a cycle: G1a (a read
saw an aborted transaction's append), G1b (a read saw one of another transaction's appends to a
key but not its later ones), lost update (two committed transactions read the same version of a
key and both appended to it), incompatible orders (two reads of a key neither of which is a
prefix of the other), duplicate elements, values nobody appended, and a transaction whose read
disagrees with its own earlier reads and appends ("internal").

Snapshot isolation forbids all but G2 (`SNAPSHOT_ISOLATION`); SERIALIZABLE forbids G2 as well
(`check(history, serializable=True)`). Real time is not checked: a history is valid if some order
of its committed transactions explains every read, whatever the clock said (the transactions'
start and end times are kept for the report).

What is not inferred, as in Elle: the position of an append nobody read (it is after every read
of its key, but not ordered against other unread appends), reads of a transaction that failed or
whose outcome is unknown (they need not be consistent), and the order of a key whose reads are
incompatible or hold duplicates (reported as such; the key contributes no edges).

The cycle search builds the graph once and works inside strongly connected components only
(iterative Tarjan: no recursion limit), so a history without cycles costs one linear pass:
1. SCCs of the whole graph; only a nontrivial one can hold a cycle of any kind.
2. Inside those, SCCs of ww+wr: each one holding a wr edge yields a G1c witness (BFS from the
   edge's head back to its tail), and inside those, SCCs of ww alone yield G0 witnesses.
3. G-single: for an rw edge u -> v, a path v ~> u over ww+wr. The ww+wr components of the SCC
   are ranked in a topological order that follows the history's order (Kahn's algorithm, least
   index first); v cannot reach u if its component ranks after u's, and the BFS never enters a
   component ranked after u's, so an SI-valid history (whose rw edges join concurrent
   transactions) costs about one concurrency window per backward rw edge.
4. G2 (only when asked): in an SCC with no G-single, the shortest cycle through an rw edge.

One witness per component and kind is reported; `Report.counts` counts every anomaly found and
`Report.anomalies` keeps the first `EXAMPLES_PER_KIND` of each kind. The module is pure: no I/O,
no clock. `simulate` below is a reference store (snapshot isolation with first-committer-wins,
or without it) whose histories the tests and the benchmark check.
"""

from __future__ import annotations

import bisect
import enum
import heapq
import random
from collections import defaultdict, deque
from collections.abc import Callable, Hashable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

__all__ = [
    "G0", "G1A", "G1B", "G1C", "G2", "G_SINGLE", "LOST_UPDATE", "INCOMPATIBLE_ORDER", "DUPLICATE_ELEMENTS",
    "UNKNOWN_VALUE", "INTERNAL", "KINDS", "SNAPSHOT_ISOLATION", "SERIALIZABLE", "EXAMPLES_PER_KIND",
    "Anomaly", "Append", "History", "Read", "Report", "Status", "Txn", "check", "simulate", "txn",
]

Key = Hashable
Value = int

# The anomaly kinds, most severe first (the order of Report.anomalies).
G0 = "G0"  # write cycle
G1A = "G1a"  # aborted read
G1B = "G1b"  # intermediate read
G1C = "G1c"  # circular information flow
G_SINGLE = "G-single"  # read skew: a cycle with exactly one anti-dependency
LOST_UPDATE = "lost-update"
G2 = "G2"  # write skew: a cycle with two or more anti-dependencies
INCOMPATIBLE_ORDER = "incompatible-order"
DUPLICATE_ELEMENTS = "duplicate-elements"
UNKNOWN_VALUE = "unknown-value"  # a read saw a value no transaction appended
INTERNAL = "internal"  # a read disagrees with the transaction's own earlier reads and appends
KINDS = (G0, G1A, G1B, G1C, G_SINGLE, LOST_UPDATE, G2, INCOMPATIBLE_ORDER, DUPLICATE_ELEMENTS,
         UNKNOWN_VALUE, INTERNAL)
SNAPSHOT_ISOLATION = frozenset(KINDS) - {G2}
SERIALIZABLE = frozenset(KINDS)
EXAMPLES_PER_KIND = 8
SHOWN_ELEMENTS_MAX = 6  # a list in an explanation shows at most its last few elements


# --- the history ---------------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class Append:
    key: Key
    value: Value


@dataclass(frozen=True, slots=True)
class Read:
    """A read of `key`: the whole list as the transaction saw it, or None if it was not observed
    (the transaction ended before the answer came)."""

    key: Key
    value: tuple[Value, ...] | None


MicroOp = Append | Read


class Status(enum.Enum):
    OK = "ok"  # committed
    FAIL = "fail"  # certainly not committed (aborted, e.g. 40001, or rolled back)
    INFO = "info"  # outcome unknown (the connection was lost during COMMIT)


@dataclass(frozen=True, slots=True)
class Txn:
    """One transaction attempt, named T<id>. `process` is the client that ran it; `start_s` and
    `end_s` (time.monotonic, optional) are when it began and when its outcome was known."""

    id: int
    process: int
    ops: tuple[MicroOp, ...]
    status: Status
    start_s: float | None = None
    end_s: float | None = None

    @property
    def name(self) -> str:
        return f"T{self.id}"


@dataclass(frozen=True)
class History:
    txns: tuple[Txn, ...]

    @property
    def ops(self) -> int:
        return sum(len(t.ops) for t in self.txns)


def txn(id: int, *ops: tuple[Any, ...], status: str | Status = Status.OK, process: int = 0) -> Txn:
    """A transaction from Elle-style micro-ops: `("append", k, v)` and `("r", k, [v, ...] or None)`."""
    micro: list[MicroOp] = []
    for f, key, value in ops:
        if f == "append":
            micro.append(Append(key, value))
        elif f == "r":
            micro.append(Read(key, None if value is None else tuple(value)))
        else:
            raise ValueError(f"unknown micro-op {f!r} (append or r)")
    return Txn(id, process, tuple(micro), Status(status))


# --- what the check found ------------------------------------------------------------------------


@dataclass(frozen=True)
class Anomaly:
    kind: str
    txns: tuple[int, ...]  # the transactions involved (a cycle: in its order)
    explanation: str

    def __str__(self) -> str:
        names = ", ".join(f"T{t}" for t in self.txns)
        return f"{self.kind} ({names}): {self.explanation}"


@dataclass(frozen=True)
class Report:
    """What `check` found. `counts` has every anomaly found by kind; `anomalies` the first
    EXAMPLES_PER_KIND of each, most severe kind first."""

    anomalies: tuple[Anomaly, ...]
    counts: Mapping[str, int]
    txns: int
    ok: int
    failed: int
    unknown: int
    ops: int
    edges: int  # dependency edges between transactions (ww + wr + rw, distinct)
    components: int  # nontrivial strongly connected components searched for cycles

    @property
    def valid(self) -> bool:
        return not self.counts

    def summary(self) -> str:
        """One line: 'valid', or the first anomaly and how many of each kind."""
        if self.valid:
            return "valid"
        tally = ", ".join(f"{n} {kind}" for kind, n in self.counts.items())
        return f"{self.anomalies[0]} [{tally}]"


# --- the check -------------------------------------------------------------------------------------


def check(history: History, *, serializable: bool = False) -> Report:
    """Every anomaly snapshot isolation forbids in `history` (and G2 if `serializable`).

    Raises ValueError for a history the workload cannot have produced: two transactions with one
    id, or one value appended twice to a key (values must be unique per key, as in Elle)."""
    found = _Findings()
    facts = _Facts(history.txns)
    graph = _Graph(len(history.txns))
    facts.index_appends()
    facts.read_txns(found)
    for key, reads in facts.reads_by_key.items():
        facts.order_key(key, reads, graph, found)
    facts.lost_updates(found)
    components = _cycles(graph, facts, found, serializable=serializable)
    statuses = [t.status for t in history.txns]
    return Report(
        anomalies=found.examples(),
        counts={kind: found.counts[kind] for kind in KINDS if found.counts.get(kind)},
        txns=len(statuses),
        ok=statuses.count(Status.OK),
        failed=statuses.count(Status.FAIL),
        unknown=statuses.count(Status.INFO),
        ops=history.ops,
        edges=graph.edges,
        components=components,
    )


class _Findings:
    def __init__(self) -> None:
        self.counts: dict[str, int] = defaultdict(int)
        self._examples: dict[str, list[Anomaly]] = defaultdict(list)

    def add(self, kind: str, txns: Sequence[int], explanation: str | Callable[[], str]) -> None:
        """Count an anomaly; keep it as an example while its kind has fewer than
        EXAMPLES_PER_KIND (`explanation` may be a function, called only then)."""
        self.counts[kind] += 1
        if len(self._examples[kind]) < EXAMPLES_PER_KIND:
            text = explanation if isinstance(explanation, str) else explanation()
            self._examples[kind].append(Anomaly(kind, tuple(txns), text))

    def examples(self) -> tuple[Anomaly, ...]:
        return tuple(a for kind in KINDS for a in self._examples.get(kind, ()))


class _Graph:
    """Dependency edges between transactions (by index in the history), one adjacency list per
    kind, each edge once."""

    def __init__(self, n: int) -> None:
        self.n = n
        self.ww: list[list[int]] = [[] for _ in range(n)]
        self.wr: list[list[int]] = [[] for _ in range(n)]
        self.rw: list[list[int]] = [[] for _ in range(n)]
        self._seen: set[int] = set()  # (kind, a, b) encoded as one int
        self.edges = 0

    def add(self, kind: int, a: int, b: int) -> None:
        code = (a * self.n + b) * 3 + kind
        if code not in self._seen:
            self._seen.add(code)
            (self.ww, self.wr, self.rw)[kind][a].append(b)
            self.edges += 1

    def has(self, kind: int, a: int, b: int) -> bool:
        return (a * self.n + b) * 3 + kind in self._seen


WW, WR, RW = 0, 1, 2
_EDGE_NAMES = ("ww", "wr", "rw")


@dataclass
class _KeyOrder:
    """A key's inferred version order: its longest read, and per position the transaction that
    appended the element there if it committed or may have (`appender`), and the nearest such
    appender at or before the position (`before`) and at or after it (`after`); -1 for none."""

    order: tuple[Value, ...]
    appender: list[int]
    before: list[int]
    after: list[int]


@dataclass
class _Facts:
    """The history indexed: who appended what, the reads of committed transactions by key, the
    external version each transaction read of each key, and the inferred orders."""

    txns: tuple[Txn, ...]
    writer: dict[tuple[Key, Value], int] = field(default_factory=dict)
    last_append: dict[tuple[int, Key], Value] = field(default_factory=dict)
    # key -> [(txn, the list it read, how much of it others appended)], committed txns only
    reads_by_key: dict[Key, list[tuple[int, tuple[Value, ...], int]]] = field(
        default_factory=lambda: defaultdict(list))
    external: dict[tuple[int, Key], tuple[Value, ...]] = field(default_factory=dict)
    rmw: list[tuple[int, Key]] = field(default_factory=list)  # committed txns that read k and appended to k
    orders: dict[Key, _KeyOrder] = field(default_factory=dict)
    unordered: set[Key] = field(default_factory=set)

    def index_appends(self) -> None:
        ids: set[int] = set()
        writer, last_append = self.writer, self.last_append
        for i, t in enumerate(self.txns):
            if t.id in ids:
                raise ValueError(f"history: two transactions are named T{t.id}")
            ids.add(t.id)
            for op in t.ops:
                if type(op) is Append:
                    kv = (op.key, op.value)
                    other = writer.get(kv)
                    if other is not None:
                        raise ValueError(f"history: {op.value!r} appended to key {op.key!r} twice "
                                         f"({self.txns[other].name}, {t.name}); values must be unique per key")
                    writer[kv] = i
                    last_append[(i, op.key)] = op.value

    def read_txns(self, found: _Findings) -> None:
        """Each committed transaction's reads: checked against its own earlier reads and appends
        (a read after its own appends must end with them), then filed by key with the length of
        the part others appended."""
        for i, t in enumerate(self.txns):
            if t.status is not Status.OK:
                continue
            own: dict[Key, list[Value]] = {}
            seen: dict[Key, tuple[Value, ...]] = {}
            for op in t.ops:
                key = op.key
                if type(op) is Append:
                    own.setdefault(key, []).append(op.value)
                    if key in seen:
                        seen[key] = (*seen[key], op.value)
                    continue
                value = op.value
                if value is None:
                    continue
                mine = own.get(key, ())
                expected = seen.get(key)
                if expected is not None and value != expected:
                    found.add(INTERNAL, (t.id,), f"{t.name} read key {key!r} as {_show(value)} after "
                                                 f"it had seen {_show(expected)} (its own appends included)")
                    continue
                if expected is None and mine and value[len(value) - len(mine):] != tuple(mine):
                    found.add(INTERNAL, (t.id,), f"{t.name} read key {key!r} as {_show(value)}, which "
                                                 f"lacks its own appends {list(mine)} at the end")
                    continue
                seen[key] = value
                theirs = len(value) - len(mine)
                self.reads_by_key[key].append((i, value, theirs))
                if (i, key) not in self.external:
                    self.external[(i, key)] = value[:theirs]
            # Read k and appended to k, in either order: a read after the append shows the same
            # snapshot, and under snapshot isolation two such transactions on one version of k
            # cannot both commit (first-committer-wins).
            self.rmw.extend((i, key) for key in own if (i, key) in self.external)

    def order_key(self, key: Key, reads: list[tuple[int, tuple[Value, ...], int]], graph: _Graph,
                  found: _Findings) -> None:
        """Infer `key`'s version order from its longest read, report the reads that contradict
        it or see values they must not, and add the key's ww, wr and rw edges."""
        txns, writer = self.txns, self.writer
        longest_at = max(range(len(reads)), key=lambda j: len(reads[j][1]))
        reader_of_longest, order, _ = reads[longest_at]
        consistent = True
        for i, value, _ in reads:
            if value and order[:len(value)] != value:
                consistent = False
                found.add(INCOMPATIBLE_ORDER, (txns[i].id, txns[reader_of_longest].id),
                          f"{txns[i].name} read key {key!r} as {_show(value)} and {txns[reader_of_longest].name} "
                          f"as {_show(order)}: neither is a prefix of the other")
        if not consistent:
            self.unordered.add(key)
            for i, value, theirs in reads:
                self._check_elements(key, i, value, theirs, found)
            return
        appender = [writer.get((key, v), -1) for v in order]
        duplicate_at = _first_duplicate(order)
        unknown_at = next((j for j, w in enumerate(appender) if w < 0), len(order))
        aborted_at = next((j for j, w in enumerate(appender) if w >= 0 and txns[w].status is Status.FAIL),
                          len(order))
        for i, value, theirs in reads:
            n = len(value)
            if n > duplicate_at:
                found.add(DUPLICATE_ELEMENTS, (txns[i].id,), f"{txns[i].name} read key {key!r} as {_show(value)}, "
                                                             f"which holds {order[duplicate_at]!r} twice")
            if n > unknown_at:
                found.add(UNKNOWN_VALUE, (txns[i].id,), f"{txns[i].name} read key {key!r} as {_show(value)}: "
                                                        f"no transaction appended {order[unknown_at]!r}")
            if n > aborted_at:
                w = appender[aborted_at]
                found.add(G1A, (txns[i].id, txns[w].id), f"{txns[i].name} read key {key!r} as {_show(value)}: "
                                                         f"{order[aborted_at]!r} was appended by {txns[w].name}, "
                                                         "which aborted")
            if theirs:
                self._check_intermediate(key, i, order[theirs - 1], appender[theirs - 1], value, found)
        if duplicate_at < len(order):
            self.unordered.add(key)
            return
        # Failed appenders are no versions of the key; unknown outcomes that were read committed.
        valid = [w if w >= 0 and txns[w].status is not Status.FAIL else -1 for w in appender]
        before, after = valid[:], valid[:]
        for j in range(1, len(before)):
            if before[j] < 0:
                before[j] = before[j - 1]
        for j in range(len(after) - 2, -1, -1):
            if after[j] < 0:
                after[j] = after[j + 1]
        self.orders[key] = _KeyOrder(order, valid, before, after)
        prev = -1
        for w in valid:
            if w >= 0:
                if prev >= 0 and prev != w:
                    graph.add(WW, prev, w)
                prev = w
        last = len(order)
        for i, _, theirs in reads:
            seen_from = -1
            if theirs:
                seen_from = before[theirs - 1]
                if seen_from >= 0 and seen_from != i:
                    graph.add(WR, seen_from, i)
            nxt = theirs
            # A read that ended inside another's appends (G1b, reported above) saw that
            # transaction: what it did not see begins after that transaction's appends.
            while nxt < last and after[nxt] == seen_from and seen_from >= 0:
                nxt += 1
            if nxt < last:
                w = after[nxt]
                if w >= 0 and w != i:
                    graph.add(RW, i, w)

    def _check_elements(self, key: Key, i: int, value: tuple[Value, ...], theirs: int, found: _Findings) -> None:
        """The slow path, for a key without an order: each read's elements on their own."""
        name = self.txns[i].name
        if _first_duplicate(value) < len(value):
            found.add(DUPLICATE_ELEMENTS, (self.txns[i].id,),
                      f"{name} read key {key!r} as {_show(value)}, which holds a value twice")
        for v in value:
            w = self.writer.get((key, v), -1)
            if w < 0:
                found.add(UNKNOWN_VALUE, (self.txns[i].id,),
                          f"{name} read key {key!r} as {_show(value)}: no transaction appended {v!r}")
                break
            if self.txns[w].status is Status.FAIL:
                found.add(G1A, (self.txns[i].id, self.txns[w].id), f"{name} read key {key!r} as {_show(value)}: "
                                                                   f"{v!r} was appended by {self.txns[w].name}, "
                                                                   "which aborted")
                break
        if theirs:
            self._check_intermediate(key, i, value[theirs - 1], self.writer.get((key, value[theirs - 1]), -1),
                                     value, found)

    def _check_intermediate(self, key: Key, i: int, last: Value, w: int, value: tuple[Value, ...],
                            found: _Findings) -> None:
        """G1b: the last element of what others appended is not its appender's last append to key."""
        if w < 0 or w == i or self.txns[w].status is Status.FAIL:
            return
        final = self.last_append[(w, key)]
        if final != last:
            found.add(G1B, (self.txns[i].id, self.txns[w].id),
                      f"{self.txns[i].name} read key {key!r} as {_show(value)}, ending in {last!r}: an "
                      f"intermediate state of {self.txns[w].name}, whose last append to it was {final!r}")

    def lost_updates(self, found: _Findings) -> None:
        """Committed transactions that read the same version of a key and both appended to it."""
        groups: dict[tuple[Key, Any], list[int]] = defaultdict(list)
        for i, key in self.rmw:
            version: Any = self.external[(i, key)]
            if key in self.orders:
                version = len(version)  # within a consistent key, the length names the version
            groups[(key, version)].append(i)
        for (key, _), members in groups.items():
            if len(members) > 1:
                names = [self.txns[i].name for i in members]
                who = " and ".join(names) if len(names) == 2 else f"{', '.join(names[:-1])} and {names[-1]}"
                seen = self.external[(members[0], key)]
                found.add(LOST_UPDATE, [self.txns[i].id for i in members],
                          f"{who} each read key {key!r} as {_show(seen)} and appended to it, and all "
                          "committed: each append but one was made to a version that was no longer the latest")

    def explain_edge(self, kind: int, a: int, b: int) -> str:
        """Why there is a `kind` edge from txn a to txn b (for a witness cycle), in words."""
        ta, tb = self.txns[a], self.txns[b]
        if kind == WW:
            for op in ta.ops:
                o = self.orders.get(op.key) if type(op) is Append else None
                if o is None or op.value not in o.order:
                    continue
                j = o.order.index(op.value)
                nxt = next((k for k in range(j + 1, len(o.order)) if o.appender[k] >= 0), None)
                if nxt is not None and o.appender[nxt] == b:
                    return f"{ta.name} appended {op.value!r} to key {op.key!r}, then {tb.name} appended {o.order[nxt]!r}"
        elif kind == WR:
            for op in tb.ops:
                seen = self.external.get((b, op.key))
                o = self.orders.get(op.key)
                if o is not None and seen and o.before[len(seen) - 1] == a:
                    return f"{tb.name} read key {op.key!r} as {_show(seen)}, which {ta.name} appended to"
        else:
            for op in ta.ops:
                seen = self.external.get((a, op.key))
                o = self.orders.get(op.key)
                if o is None or seen is None:
                    continue
                nxt = next((o.order[k] for k in range(len(seen), len(o.order)) if o.appender[k] == b), None)
                if nxt is not None:
                    return f"{ta.name} read key {op.key!r} as {_show(seen)}, without {nxt!r}, which {tb.name} appended"
        return f"{ta.name} -{_EDGE_NAMES[kind]}-> {tb.name}"


def _first_duplicate(values: tuple[Value, ...]) -> int:
    """The position of the first value that repeats an earlier one, or len(values)."""
    if len(set(values)) == len(values):
        return len(values)
    seen: set[Value] = set()
    for j, v in enumerate(values):
        if v in seen:
            return j
        seen.add(v)
    return len(values)


def _show(values: Sequence[Value]) -> str:
    if len(values) <= SHOWN_ELEMENTS_MAX:
        return repr(list(values))
    tail = ", ".join(repr(v) for v in values[-SHOWN_ELEMENTS_MAX:])
    return f"[…{len(values) - SHOWN_ELEMENTS_MAX} more, {tail}]"


# --- cycles ----------------------------------------------------------------------------------------


def _cycles(graph: _Graph, facts: _Facts, found: _Findings, *, serializable: bool) -> int:
    """Report a witness of each cycle kind per component (see the module doc); the number of
    nontrivial components of the whole graph."""
    everyone = range(graph.n)
    full = [graph.ww[v] + graph.wr[v] + graph.rw[v] for v in everyone]
    full_of, full_sccs = _sccs(full, everyone, None)
    if not full_sccs:
        return 0
    # ww+wr inside the whole graph's components (an edge between two is on no cycle), then ww
    # inside the ww+wr components.
    wwwr = [graph.ww[v] + graph.wr[v] for v in everyone]
    comp_of, wwwr_sccs = _sccs(wwwr, [v for scc in full_sccs for v in scc], full_of)
    ww_of, ww_sccs = _sccs(graph.ww, [v for scc in wwwr_sccs for v in scc], comp_of)
    for scc in ww_sccs:
        c = ww_of[scc[0]]
        path = _bfs_path(graph.ww, scc[0], scc[0], lambda w, c=c: ww_of[w] == c)
        assert path is not None, "a strongly connected component holds a cycle through each member"
        _report_cycle(G0, path[:-1], WW, graph, facts, found, "a cycle of appends, each after the one before")
    for scc in wwwr_sccs:
        _g1c(scc, graph, wwwr, comp_of, facts, found)
    for scc in full_sccs:
        if not _g_single(scc, graph, wwwr, comp_of, facts, found) and serializable:
            _g2(scc, graph, full, full_of, facts, found)
    return len(full_sccs)


def _g1c(scc: list[int], graph: _Graph, wwwr: list[list[int]], comp_of: list[int], facts: _Facts,
         found: _Findings) -> None:
    """A cycle through a wr edge of the ww+wr component `scc` (one made of ww edges alone is G0)."""
    _first_cycle(scc, graph.wr, wwwr, comp_of, facts, found, graph, G1C, WR,
                 "information flowed in a circle, each saw or followed the one before")


def _g_single(scc: list[int], graph: _Graph, wwwr: list[list[int]], comp_of: list[int], facts: _Facts,
              found: _Findings) -> bool:
    """Look for a cycle with exactly one rw edge in `scc`; report it, and whether one was found."""
    members = set(scc)
    rank = _ranks(scc, wwwr, comp_of, members)
    for u in sorted(scc):
        for v in graph.rw[u]:
            if v not in members:
                continue
            limit = rank[comp_of[u]]
            if rank[comp_of[v]] > limit:
                continue  # v's component comes after u's in a topological order: no path back
            path = _bfs_path(wwwr, v, u, lambda w, limit=limit: w in members and rank[comp_of[w]] <= limit)
            if path is not None:
                _report_cycle(G_SINGLE, [u, *path[:-1]], RW, graph, facts, found,
                              "read skew: a cycle with one anti-dependency, which snapshot isolation forbids")
                return True
    return False


def _g2(scc: list[int], graph: _Graph, full: list[list[int]], full_of: list[int], facts: _Facts,
        found: _Findings) -> None:
    """The shortest cycle through the first rw edge of `scc` (which has no G-single, so every
    cycle through an rw edge has two or more)."""
    _first_cycle(scc, graph.rw, full, full_of, facts, found, graph, G2, RW,
                 "write skew: a cycle with two or more anti-dependencies, which SERIALIZABLE forbids")


def _first_cycle(scc: list[int], first_edges: list[list[int]], adjacency: list[list[int]], comp_of: list[int],
                 facts: _Facts, found: _Findings, graph: _Graph, kind: str, edge: int, why: str) -> None:
    """Report the shortest cycle of component `scc` that begins with its first `first_edges`
    edge and returns over `adjacency` (inside one strongly connected component one always does)."""
    c = comp_of[scc[0]]
    for u in sorted(scc):
        for v in first_edges[u]:
            if comp_of[v] == c:
                path = _bfs_path(adjacency, v, u, lambda w: comp_of[w] == c)
                assert path is not None
                _report_cycle(kind, [u, *path[:-1]], edge, graph, facts, found, why)
                return


def _ranks(scc: list[int], wwwr: list[list[int]], comp_of: list[int], members: set[int]) -> dict[int, int]:
    """A topological rank of the ww+wr components inside `scc`, following the history's order
    where the edges leave a choice (Kahn's algorithm, the component with the least index first)."""
    indegree: dict[int, int] = {}
    least: dict[int, int] = {}
    succ: dict[int, set[int]] = defaultdict(set)
    for v in scc:
        c = comp_of[v]
        least[c] = min(least.get(c, v), v)
        indegree.setdefault(c, 0)
    for v in scc:
        c = comp_of[v]
        for w in wwwr[v]:
            d = comp_of[w]
            if w in members and d != c and d not in succ[c]:
                succ[c].add(d)
                indegree[d] += 1
    ready = [(least[c], c) for c, k in indegree.items() if k == 0]
    heapq.heapify(ready)
    rank: dict[int, int] = {}
    while ready:
        _, c = heapq.heappop(ready)
        rank[c] = len(rank)
        for d in succ[c]:
            indegree[d] -= 1
            if indegree[d] == 0:
                heapq.heappush(ready, (least[d], d))
    return rank


def _report_cycle(kind: str, cycle: list[int], first: int, graph: _Graph, facts: _Facts, found: _Findings,
                  what: str) -> None:
    """`cycle` lists transactions, each with an edge to the next and the last to the first; the
    first edge is of kind `first`, the others ww or wr (or rw, for G2) as the graph has them."""

    def explain() -> str:
        steps = []
        for at, (a, b) in enumerate(zip(cycle, [*cycle[1:], cycle[0]], strict=True)):
            if at == 0:
                edge = first
            elif kind != G0 and graph.has(WR, a, b):
                edge = WR
            elif graph.has(WW, a, b):
                edge = WW
            else:
                edge = RW
            steps.append(facts.explain_edge(edge, a, b))
        return f"{'; '.join(steps)}: {what}"

    found.add(kind, [facts.txns[i].id for i in cycle], explain)


def _sccs(adj: list[list[int]], nodes: Iterable[int], within: list[int] | None) -> tuple[list[int], list[list[int]]]:
    """Tarjan's strongly connected components of the graph `adj` restricted to `nodes`, without
    recursion; an edge counts only between nodes with the same `within` label (if given).
    Returns each node's component label (-1 outside `nodes`) and the nontrivial components."""
    n = len(adj)
    index = [-1] * n
    low = [0] * n
    on_stack = [False] * n
    label = [-1] * n
    allowed: list[bool] | None = None
    if within is not None:
        allowed = [False] * n
        for v in nodes:
            allowed[v] = True
    stack: list[int] = []
    out: list[list[int]] = []
    counter = 0
    labels = 0
    for root in nodes:
        if index[root] >= 0:
            continue
        index[root] = low[root] = counter
        counter += 1
        stack.append(root)
        on_stack[root] = True
        work = [(root, 0)]
        while work:
            v, at = work[-1]
            edges = adj[v]
            if at < len(edges):
                work[-1] = (v, at + 1)
                w = edges[at]
                if allowed is not None and (not allowed[w] or within[w] != within[v]):  # type: ignore[index]
                    continue
                if index[w] < 0:
                    index[w] = low[w] = counter
                    counter += 1
                    stack.append(w)
                    on_stack[w] = True
                    work.append((w, 0))
                elif on_stack[w] and index[w] < low[v]:
                    low[v] = index[w]
                continue
            work.pop()
            if work:
                u = work[-1][0]
                if low[v] < low[u]:
                    low[u] = low[v]
            if low[v] == index[v]:
                members = []
                while True:
                    w = stack.pop()
                    on_stack[w] = False
                    label[w] = labels
                    members.append(w)
                    if w == v:
                        break
                labels += 1
                if len(members) > 1:
                    out.append(members)
    return label, out


def _bfs_path(adj: list[list[int]], start: int, goal: int, allowed: Callable[[int], bool]) -> list[int] | None:
    """The shortest path start ~> goal (at least one edge, also when start == goal) through
    nodes `allowed` accepts: [start, ..., goal], or None."""
    parent: dict[int, int] = {} if start == goal else {start: start}
    queue = deque([start])
    while queue:
        v = queue.popleft()
        for w in adj[v]:
            if w in parent or not allowed(w):
                continue
            parent[w] = v
            if w == goal:
                path = [goal]
                while v != start:
                    path.append(v)
                    v = parent[v]
                path.append(start)
                return path[::-1]
            queue.append(w)
    return None


# --- a reference store -----------------------------------------------------------------------------


def simulate(rng: random.Random, *, txns: int, processes: int = 5, keys: int = 5, ops_max: int = 4,
             appends_per_key_max: int = 32, abort_share: float = 0.02, unknown_share: float = 0.01,
             first_committer_wins: bool = True) -> History:
    """The history of `txns` random list-append transactions run by `processes` concurrent
    clients against an in-memory store under snapshot isolation: each reads the versions
    committed when it began plus its own appends; at commit, first-committer-wins aborts it if
    a transaction that committed since it began appended to a key it appends to. One process
    is a serial execution (so its history is serializable too). Some transactions roll back on
    their own (`abort_share`) or lose their connection at COMMIT (`unknown_share`: committed or
    not, at random; recorded with status info and no reads). Without `first_committer_wins`
    the store is broken on purpose: the last to commit replaces each key it appended to with
    its own view, and what others committed meanwhile is lost (lost updates).

    Keys rotate as in Elle: `keys` are in play at a time, and one that has had
    `appends_per_key_max` appends is retired for a fresh one, so lists stay short."""
    history: dict[int, list[tuple[int, tuple[int, ...]]]] = {}  # key -> [(commit clock, list)]
    clock = 0
    live = list(range(keys))
    fresh_key = keys
    appends: dict[int, int] = defaultdict(int)
    value = 0
    out: list[Txn] = []
    running: dict[int, _Running] = {}
    started = 0

    def snapshot(key: int, at: int) -> list[int]:
        versions = history.get(key, ())
        j = bisect.bisect_right(versions, at, key=lambda version: version[0])
        return list(versions[j - 1][1]) if j else []

    while len(out) < txns:
        p = rng.randrange(processes)
        t = running.get(p)
        if t is None:
            if started < txns:
                started += 1
                running[p] = _Running(start=clock, ops_left=rng.randint(1, ops_max))
            continue
        if t.ops_left:
            t.ops_left -= 1
            key = rng.choice(live)
            view = t.views.get(key)
            if view is None:
                view = t.views[key] = snapshot(key, t.start)
            if rng.random() < 0.5:
                t.ops.append(Read(key, tuple(view)))
                continue
            value += 1
            view.append(value)
            t.writes.add(key)
            t.ops.append(Append(key, value))
            appends[key] += 1
            if appends[key] == appends_per_key_max:
                live[live.index(key)] = fresh_key
                fresh_key += 1
            continue
        del running[p]
        ops, writes, status = t.ops, t.writes, Status.OK
        roll = rng.random()
        if roll < abort_share or (first_committer_wins and any(
                history.get(k) and history[k][-1][0] > t.start for k in writes)):
            status = Status.FAIL
        elif roll < abort_share + unknown_share:
            status = Status.INFO
            ops = [Read(op.key, None) if type(op) is Read else op for op in ops]
            if rng.random() < 0.5:
                writes = set()  # the COMMIT never arrived
        if status is not Status.FAIL and writes:
            clock += 1
            for key in writes:
                history.setdefault(key, []).append((clock, tuple(t.views[key])))
        out.append(Txn(len(out), p, tuple(ops), status))
    return History(tuple(out))


@dataclass
class _Running:
    """A transaction of `simulate` in flight."""

    start: int  # the commit clock it reads at
    ops_left: int
    ops: list[MicroOp] = field(default_factory=list)
    views: dict[int, list[int]] = field(default_factory=dict)  # key -> the list as it sees it
    writes: set[int] = field(default_factory=set)
