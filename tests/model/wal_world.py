"""An in-memory disk with faults and the input-driven harness for the WAL machine's model tests.

`SimDisk` keeps two views of every file: what the process sees (the page cache) and what survives
a power loss (written by fsync). Faults arrive as harness inputs, so a recorded input list replays
a run exactly:

- a process crash keeps the page cache (the restarted process reads unsynced bytes);
- a power crash keeps only durable bytes, plus a torn prefix (or zeros, or garbage) of the
  unsynced part of each file; files whose creation no directory fsync covered vanish;
- an fsync may fail (the pages are dropped: fsyncgate) or lie (reports success, persists nothing,
  and a later fsync writes zeros there: the pages were marked clean);
- a bit may flip anywhere in a file.

`WalHarness.apply(input)` is the single entry point for hypothesis rules and trace replay alike.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from icegres.machines.wal import (
    Acknowledge,
    AppendRequested,
    Config,
    CreateSegment,
    DeleteSegments,
    DirectorySynced,
    Effect,
    Event,
    FailAppends,
    Fsync,
    FsyncDone,
    FsyncFailed,
    IoFailed,
    Phase,
    PoisonedTail,
    RefuseAppend,
    SegmentCreated,
    SegmentSynced,
    StartTimer,
    State,
    SyncDirectory,
    SyncSegment,
    TimerFired,
    WatermarkAdvanced,
    Write,
    WriteDone,
    health,
    recover,
    step,
)
from icegres.machines.wal_format import Record, segment_name
from tests.model.scaffold import Exercised, check_every_transition_exercised
from tests.model.trace import Spec

TAIL_ID = "t1"
SETTLE_STEPS_MAX = 400

# Every spec transition any harness took in this process (the run-scope coverage invariant).
EXERCISED: Exercised = set()

FAULTS_BY_EFFECT = {
    "Write": ("ok", "io_error"),
    "Fsync": ("ok", "fail", "lost"),
    "SyncSegment": ("ok", "fail", "lost", "io_error"),
    "CreateSegment": ("ok", "io_error"),
    "SyncDirectory": ("ok", "fail"),
    "DeleteSegments": ("ok",),
    "StartTimer": ("ok",),
}
FAULTS = ("ok", "io_error", "fail", "lost")


def model_config(window: bool) -> Config:
    # Small bounds, so that rotation and batch limits are reached in short schedules.
    return Config(
        segment_bytes_max=300,
        batch_bytes_max=150,
        group_fsync_window_seconds=0.005 if window else 0.0,
    )


# --- the simulated disk --------------------------------------------------------------------------


@dataclass
class SimFile:
    volatile: bytearray = field(default_factory=bytearray)
    durable: bytes = b""
    synced: int = 0  # how far a reported-successful fsync has covered (truthfully or not)
    lost: list[tuple[int, int]] = field(default_factory=list)  # never reach the disk

    def persist(self) -> None:
        data = bytearray(self.volatile)
        for start, end in self.lost:
            data[start:end] = bytes(max(0, min(end, len(data)) - start))
        self.durable = bytes(data)


class SimDisk:
    def __init__(self) -> None:
        self.files: dict[str, SimFile] = {}
        self.durable_names: set[str] = set()

    def create(self, name: str) -> None:
        assert name not in self.files, f"{name} exists"
        self.files[name] = SimFile()

    def write(self, name: str, offset: int, data: bytes) -> None:
        f = self.files[name]
        assert offset == len(f.volatile), (name, offset, len(f.volatile))
        f.volatile[offset:] = data

    def fsync(self, name: str, fault: str) -> bool:
        """True when the fsync reports success."""
        f = self.files[name]
        if fault in ("fail", "lost"):
            # fail: the kernel drops the dirty pages and marks them clean; lost: a lying device.
            f.lost.append((len(f.durable), len(f.volatile)))
        if fault == "fail":
            return False
        f.persist()
        f.synced = len(f.volatile)
        return True

    def truncate(self, name: str, length: int) -> None:
        f = self.files[name]
        del f.volatile[length:]
        f.lost = [(s, min(e, length)) for s, e in f.lost if s < length]

    def sync_directory(self) -> None:
        self.durable_names = set(self.files)

    def delete(self, names: list[str]) -> None:
        for name in names:
            self.files.pop(name, None)
        self.sync_directory()

    def crash(self, mode: str, torn: str, cut: int) -> None:
        if mode == "process":
            return  # the page cache survives
        survivors: dict[str, SimFile] = {}
        for name in sorted(self.durable_names & set(self.files)):
            f = self.files[name]
            data = bytearray(f.durable)
            extra = len(f.volatile) - len(data)
            if extra > 0 and torn != "none":
                k = cut % (extra + 1)
                if torn == "prefix":
                    data += f.volatile[len(data) : len(data) + k]
                elif torn == "zeros":
                    data += bytes(k)
                else:
                    data += bytes((i * 131 + cut) % 251 for i in range(k))
            survivors[name] = SimFile(data, bytes(data), len(data))
        self.files = survivors
        self.durable_names = set(survivors)

    def view(self) -> dict[str, bytes]:
        """What a restarted process reads."""
        return {name: bytes(f.volatile) for name, f in self.files.items()}


# --- the harness ---------------------------------------------------------------------------------


@dataclass
class Extent:
    """Where the harness wrote a record: for checking durability and deletions."""

    name: str
    start: int
    end: int
    lsn: int
    payload: bytes


class WalHarness:
    def __init__(self, spec: Spec) -> None:
        self.spec = spec
        self.inputs: list[dict[str, Any]] = []
        self.steps: list[tuple[str, str, str, tuple[str, ...]]] = []
        self.disk = SimDisk()
        self.config = model_config(False)
        self.state: State | None = None
        self.pending: list[Effect] = []  # effects the world still has to perform
        self.refused: str | None = None  # recovery refused to start: the run is over
        self.payloads = 0
        self.payload_of: dict[int, bytes] = {}  # the latest payload given each LSN
        self.extents: dict[int, Extent] = {}  # LSN -> where its bytes are (latest write)
        self.must_survive: dict[int, bytes] = {}  # acked or replayed, above the lake watermark
        self.replaying: dict[int, bytes] = {}  # recovered, becomes must_survive once opened
        self.failed: set[bytes] = set()  # definitely failed appends: must never be replayed
        self.damaged: set[bytes] = set()  # hit by a lying fsync or a bit flip
        self.damage_names: set[str] = set()  # files holding damage
        self.lake_watermark = 0
        self.last_assigned = 0
        self.last_acked = 0
        self.core_watermark_seen = 0
        self.violations: dict[str, list[str]] = {}
        self.poisoned_at_step: int | None = None

    # The one entry point.

    def apply(self, inp: dict[str, Any]) -> None:
        self.inputs.append(inp)
        handler = getattr(self, f"_op_{inp['op']}", None)
        if handler is None:
            raise ValueError(f"unknown input op {inp['op']!r}")
        handler(inp)
        check_step_invariants(self)

    def _violate(self, name: str, message: str) -> None:
        self.violations.setdefault(name, []).append(message)

    # Queries hypothesis rules use to build valid inputs.

    @property
    def running(self) -> bool:
        return (
            self.refused is None
            and self.state is not None
            and self.state.phase not in (Phase.STARTING, Phase.OPENING)
        )

    @property
    def alive(self) -> bool:
        return self.refused is None and self.state is not None

    def flushable(self) -> int:
        """The highest LSN the lake may commit: a contiguous run of must-survive records."""
        lsn = self.lake_watermark
        while lsn + 1 in self.must_survive:
            lsn += 1
        return lsn

    # Inputs.

    def _op_open(self, inp: dict[str, Any]) -> None:
        assert self.state is None, "open once, first"
        self.config = model_config(bool(inp.get("window", False)))
        self._recover()

    def _op_append(self, inp: dict[str, Any]) -> None:
        state = self._state()
        self.payloads += 1
        tag = f"p{self.payloads}:".encode()
        payload = (tag * (inp["size"] // len(tag) + 1))[: max(inp["size"], len(tag))]
        lsn = state.next_lsn
        poisoned = state.phase is Phase.POISONED
        self._step(AppendRequested(payload))
        if poisoned:
            return
        if lsn != self.last_assigned + 1:
            self._violate("lsns_dense", f"assigned {lsn} after {self.last_assigned}")
        self.last_assigned = lsn
        self.payload_of[lsn] = payload
        self.extents.pop(lsn, None)

    def _op_perform(self, inp: dict[str, Any]) -> None:
        if not self.pending:
            raise ValueError("nothing to perform")
        effect = self.pending.pop(inp["which"] % len(self.pending))
        fault = inp.get("fault", "ok")
        if fault not in FAULTS_BY_EFFECT[type(effect).__name__]:
            fault = "ok"
        event = self._perform(effect, fault)
        if event is not None:
            self._step(event)

    def _perform(self, effect: Effect, fault: str) -> Event | None:
        disk = self.disk
        match effect:
            case Write(segment=segment, offset=offset, data=data):
                name = self._name(segment)
                # io_error: ENOSPC half-way. The records wholly in the written half are in the
                # page cache all the same: a process restart reads them back and replays them.
                written = data[: len(data) // 2] if fault == "io_error" else data
                disk.write(name, offset, written)
                at = offset
                for lsn in range(effect.first_lsn, effect.last_lsn + 1):
                    size = len(_encoded(lsn, self.payload_of[lsn]))
                    if at + size > offset + len(written):
                        break
                    self.extents[lsn] = Extent(name, at, at + size, lsn, self.payload_of[lsn])
                    at += size
                return IoFailed("ENOSPC") if fault == "io_error" else WriteDone()
            case Fsync(segment=segment):
                name = self._name(segment)
                self._mark_lost(name, fault)
                return FsyncDone() if disk.fsync(name, fault) else FsyncFailed("EIO")
            case SyncSegment(segment=segment, length=length):
                name = self._name(segment)
                if fault == "io_error":
                    return IoFailed("EIO on ftruncate")
                disk.truncate(name, length)
                for lsn, ext in list(self.extents.items()):
                    if ext.name == name and ext.end > length:
                        del self.extents[lsn]
                self._mark_lost(name, fault)
                return SegmentSynced(segment) if disk.fsync(name, fault) else FsyncFailed("EIO")
            case CreateSegment(first_lsn=first):
                if fault == "io_error":
                    return IoFailed("ENOSPC")
                disk.create(self._name(first))
                disk.fsync(self._name(first), "ok")
                disk.sync_directory()
                return SegmentCreated(first)
            case SyncDirectory():
                if fault == "fail":
                    return FsyncFailed("EIO on directory fsync")
                disk.sync_directory()
                return DirectorySynced()
            case DeleteSegments(segments=segments):
                names = [self._name(s) for s in segments]
                for name in names:
                    self._check_deletable(name)
                disk.delete(names)
                return None
            case StartTimer(timer=timer):
                return TimerFired(timer)
        raise AssertionError(f"not a performable effect {effect!r}")

    def _mark_lost(self, name: str, fault: str) -> None:
        if fault not in ("fail", "lost"):
            return
        f = self.disk.files[name]
        start, end = len(f.durable), len(f.volatile)
        for ext in self.extents.values():
            if ext.name == name and ext.start < end and ext.end > start:
                self.damaged.add(ext.payload)
                self.damage_names.add(name)

    def _check_deletable(self, name: str) -> None:
        state = self._state()
        current = segment_name(TAIL_ID, state.segments[-1].first_lsn) if state.segments else None
        if name == current:
            self._violate("deleted_only_below_watermark", f"deleted the current segment {name}")
        above = [e.lsn for e in self.extents.values() if e.name == name]
        above = [lsn for lsn in above if lsn > self.lake_watermark]
        if above:
            self._violate(
                "deleted_only_below_watermark",
                f"deleted {name} holding LSNs {above} above the lake's {self.lake_watermark}",
            )

    def _op_flush(self, inp: dict[str, Any]) -> None:
        """The lake commits records up to some LSN (its watermark is durable in the lake)."""
        top = self.flushable()
        span = top - self.lake_watermark
        if span > 0:
            self.lake_watermark += 1 + inp["pick"] % span
            for lsn in [lsn for lsn in self.must_survive if lsn <= self.lake_watermark]:
                del self.must_survive[lsn]
        if inp.get("deliver", True) and self.running:
            self._step(WatermarkAdvanced(self.lake_watermark))

    def _op_deliver(self, inp: dict[str, Any]) -> None:
        """Tell the core the lake's watermark (or, `stale`, an older one)."""
        lsn = max(0, self.lake_watermark - 1) if inp.get("stale") else self.lake_watermark
        self._step(WatermarkAdvanced(lsn))

    def _op_crash(self, inp: dict[str, Any]) -> None:
        self.disk.crash(inp["mode"], inp.get("torn", "none"), inp.get("cut", 0))
        self.pending = []
        self.replaying = {}
        self._recover()

    def _op_bitflip(self, inp: dict[str, Any]) -> None:
        names = sorted(self.disk.files)
        name = names[inp["file"] % len(names)]
        f = self.disk.files[name]
        if not f.volatile:
            return
        at = inp["offset"] % len(f.volatile)
        mask = 1 << (inp["bit"] % 8)
        f.volatile[at] ^= mask
        if at < len(f.durable):
            durable = bytearray(f.durable)
            durable[at] ^= mask
            f.durable = bytes(durable)
        self.damage_names.add(name)
        for ext in self.extents.values():
            if ext.name == name and ext.start <= at < ext.end:
                self.damaged.add(ext.payload)

    def _op_settle(self, inp: dict[str, Any]) -> None:
        """Liveness: with faults gone, every outstanding append is answered within a bound."""
        for _ in range(SETTLE_STEPS_MAX):
            if not self.pending:
                break
            self._op_perform({"which": 0, "fault": "ok"})
        assert not self.pending, f"did not settle: {self.pending}"
        if self.alive:
            state = self._state()
            assert state.phase in (Phase.IDLE, Phase.POISONED), state.phase
            assert not state.pending and not state.inflight

    def _op_expect(self, inp: dict[str, Any]) -> None:
        """An assertion written into hand-made traces."""
        if "refused" in inp:
            assert (self.refused is not None) == inp["refused"], self.refused
        if "phase" in inp:
            assert self._state().phase.value == inp["phase"], (self._state().phase, inp)
        if "durable_lsn" in inp:
            assert self._state().durable_lsn == inp["durable_lsn"], self._state()
        if "replayed" in inp:
            assert sorted(self.last_replay) == inp["replayed"], self.last_replay
        if "segments" in inp:
            assert len(self.disk.files) == inp["segments"], sorted(self.disk.files)

    # Recovery.

    last_replay: list[int] = []

    def _recover(self) -> None:
        try:
            recovery = recover(
                self.disk.view(),
                self.config,
                watermark_lsn=self.lake_watermark,
                new_tail_id=TAIL_ID,
            )
        except PoisonedTail as exc:
            self.refused = str(exc)
            if not (self.damage_names & set(self.disk.files)):
                self._violate("recovery_exact", f"refused to start an undamaged tail: {exc}")
            self.state = None
            return
        self._check_recovery(recovery.replay)
        # What recovery did not return is gone (only damage may take an acked record away).
        returned = {r.lsn: r.payload for r in recovery.replay}
        self.must_survive = {
            lsn: p for lsn, p in self.must_survive.items() if returned.get(lsn) == p
        }
        next_lsn = recovery.state.next_lsn
        self.extents = {lsn: e for lsn, e in self.extents.items() if lsn < next_lsn}
        self.poisoned_at_step = None
        self.last_replay = [r.lsn for r in recovery.replay]
        self.replaying = {r.lsn: r.payload for r in recovery.replay}
        # A fresh incarnation: appends before the crash that recovery did not return are gone.
        self.last_assigned = recovery.state.next_lsn - 1
        self.last_acked = self.last_assigned
        self.core_watermark_seen = recovery.state.watermark_lsn
        self._record(State(config=self.config), "TailRecovered", recovery.state, recovery.effects)

    def _check_recovery(self, replay: tuple[Record, ...]) -> None:
        name = "recovery_exact"
        got = {r.lsn: r.payload for r in replay}
        lsns = [r.lsn for r in replay]
        if lsns != list(range(self.lake_watermark + 1, self.lake_watermark + 1 + len(lsns))):
            self._violate(name, f"replay LSNs {lsns} not dense from {self.lake_watermark + 1}")
        for lsn, payload in self.must_survive.items():
            if payload in self.damaged:
                continue
            if got.get(lsn) != payload:
                self._violate(name, f"acked LSN {lsn} missing or changed after recovery")
        for record in replay:
            if record.tail_id != TAIL_ID:
                self._violate(name, f"LSN {record.lsn} of a foreign tail {record.tail_id}")
            if self.payload_of.get(record.lsn) != record.payload:
                self._violate(name, f"LSN {record.lsn} replayed garbage")
            if record.payload in self.failed:
                self._violate(name, f"LSN {record.lsn} was a definitely failed append")

    # Stepping the core, checked against the spec.

    def _step(self, event: Event) -> None:
        before = self._state()
        after, effects = step(before, event)
        self._record(before, type(event).__name__, after, effects)

    def _record(self, before: State, event: str, after: State, effects: list[Effect]) -> None:
        names = tuple(type(e).__name__ for e in effects)
        transition = self.spec.check_step(before.phase.value, event, after.phase.value, names)
        EXERCISED.add(("top", transition))
        self.steps.append((before.phase.value, event, after.phase.value, names))
        if before.phase is Phase.OPENING and after.phase is not Phase.OPENING:
            if after.phase is not Phase.POISONED:
                self.must_survive.update(
                    (lsn, p) for lsn, p in self.replaying.items() if lsn > self.lake_watermark
                )
            self.replaying = {}
        if after.phase is Phase.POISONED and self.poisoned_at_step is None:
            self.poisoned_at_step = len(self.steps)
        if after.watermark_lsn < self.core_watermark_seen:
            self._violate(
                "watermark_monotonic", f"{after.watermark_lsn} < {self.core_watermark_seen}"
            )
        self.core_watermark_seen = after.watermark_lsn
        self.state = after
        for effect in effects:
            match effect:
                case Acknowledge(first_lsn=first, last_lsn=last):
                    self._on_ack(before, first, last)
                case FailAppends(unknown=unknown, failed=failed):
                    for lsn in failed:
                        self.failed.add(self.payload_of[lsn])
                    del unknown
                case RefuseAppend():
                    pass
                case _:
                    self.pending.append(effect)

    def _on_ack(self, before: State, first: int, last: int) -> None:
        if before.phase is Phase.POISONED or self.poisoned_at_step is not None:
            self._violate("nothing_acked_after_poison", f"acked {first}..{last} after poison")
        if first != self.last_acked + 1:
            self._violate("lsns_dense", f"acked {first}..{last} after {self.last_acked}")
        self.last_acked = last
        for lsn in range(first, last + 1):
            ext = self.extents.get(lsn)
            f = self.disk.files.get(ext.name) if ext else None
            if ext is None or f is None or f.synced < ext.end:
                self._violate("acked_only_after_fsync", f"LSN {lsn} acked before its fsync")
            if lsn > self.lake_watermark:
                self.must_survive[lsn] = self.payload_of[lsn]

    def _state(self) -> State:
        assert self.state is not None, "no tail (refused or not opened)"
        return self.state

    def _name(self, first_lsn: int) -> str:
        return segment_name(TAIL_ID, first_lsn)


def _encoded(lsn: int, payload: bytes) -> bytes:
    from icegres.machines.wal_format import encode_record

    return encode_record(Record(lsn, TAIL_ID, payload))


# --- invariants ----------------------------------------------------------------------------------


def _no_violations(name: str) -> Callable[[WalHarness], None]:
    def check(h: WalHarness) -> None:
        assert not h.violations.get(name), f"{name}: {h.violations[name]}"

    return check


def check_acked_records_durable(h: WalHarness) -> None:
    if not h.alive:
        return
    for lsn, payload in h.must_survive.items():
        if payload in h.damaged or lsn <= h.lake_watermark:
            continue
        ext = h.extents.get(lsn)
        f = h.disk.files.get(ext.name) if ext else None
        assert ext is not None and f is not None, f"acked LSN {lsn}: its segment is gone"
        assert ext.name in h.disk.durable_names, f"acked LSN {lsn}: {ext.name} not durable"
        want = _encoded(lsn, payload)
        assert f.durable[ext.start : ext.end] == want, f"acked LSN {lsn} is not durable"


def check_nothing_acked_after_poison(h: WalHarness) -> None:
    _no_violations("nothing_acked_after_poison")(h)
    if h.state is not None and h.state.phase is Phase.POISONED:
        report = health(h.state)
        assert not report.ok and report.reason, report


def check_watermark_monotonic(h: WalHarness) -> None:
    _no_violations("watermark_monotonic")(h)
    if h.state is not None:
        assert h.state.watermark_lsn <= h.lake_watermark, (h.state.watermark_lsn, h.lake_watermark)


def check_spec_transitions_only(h: WalHarness) -> None:
    allowed = {(t.source, t.event, t.target, t.effects) for t in h.spec.transitions}
    stray = [s for s in h.steps if s not in allowed]
    assert not stray, f"steps outside the spec: {stray}"


STEP_CHECKERS: dict[str, Callable[[WalHarness], None]] = {
    "acked_only_after_fsync": _no_violations("acked_only_after_fsync"),
    "lsns_dense": _no_violations("lsns_dense"),
    "acked_records_durable": check_acked_records_durable,
    "recovery_exact": _no_violations("recovery_exact"),
    "deleted_only_below_watermark": _no_violations("deleted_only_below_watermark"),
    "nothing_acked_after_poison": check_nothing_acked_after_poison,
    "watermark_monotonic": check_watermark_monotonic,
    "spec_transitions_only": check_spec_transitions_only,
}
RUN_CHECKERS: dict[str, Callable[..., None]] = {
    "every_transition_exercised": check_every_transition_exercised,
}


def check_step_invariants(h: WalHarness) -> None:
    for check in STEP_CHECKERS.values():
        check(h)
