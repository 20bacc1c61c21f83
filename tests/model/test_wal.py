"""Model tests of the WAL tail machine: random schedules with disk faults, trace replay, the driver."""

from __future__ import annotations

import random
import time
from pathlib import Path

import pytest
from hypothesis import strategies as st
from hypothesis.stateful import initialize, precondition, rule

from icegres.machines import wal
from tests.model.scaffold import (
    Binding,
    MachineModel,
    ModelMachine,
    ModelTests,
    register,
    type_names,
)
from tests.model.trace import load_spec
from tests.model.wal_world import (
    EXERCISED,
    RUN_CHECKERS,
    STEP_CHECKERS,
    WalHarness,
    check_step_invariants,
)

SPEC = load_spec("wal")

pytestmark = pytest.mark.model

DISK_FAULTS = ("io_error", "fail", "lost")
TORN = ("prefix", "none", "zeros", "garbage")


def drive(rng: random.Random, harness: WalHarness, steps: int) -> None:
    """A seeded walk: concurrent appends, effects performed in any order, lake flushes, stale
    watermarks, crashes (power or process, torn tails) and bit flips. The seed draws the group
    fsync window, which disk faults are on and how often, and whether crashes and bit flips are."""
    harness.apply({"op": "open", "window": rng.random() < 0.5})
    faults = tuple(f for f in DISK_FAULTS if rng.random() < 0.6)
    fault_rate = rng.choice((0.05, 0.15, 0.4)) if faults else 0.0
    crashes = rng.random() < 0.5
    bitflips = rng.random() < 0.15
    for _ in range(steps):
        if not harness.alive:
            # Recovery refused a damaged tail: an operator's turn, nothing more to drive.
            harness.apply({"op": "expect", "refused": True})
            return
        ops = ["append"] * 3 + ["deliver"] if harness.running else []
        ops += ["perform"] * 4 if harness.pending else []
        ops += ["flush"]
        ops += ["crash"] if crashes else []
        ops += ["bitflip"] if bitflips and harness.disk.files else []
        op = rng.choice(ops)
        if op == "append":
            harness.apply({"op": "append", "size": rng.randint(1, 160)})
        elif op == "perform":
            fault = rng.choice(faults) if rng.random() < fault_rate else "ok"
            harness.apply({"op": "perform", "which": rng.randrange(8), "fault": fault})
        elif op == "flush":
            harness.apply({"op": "flush", "pick": rng.randrange(16), "deliver": rng.random() < 0.7})
        elif op == "deliver":
            harness.apply({"op": "deliver", "stale": rng.random() < 0.3})
        elif op == "crash":
            mode, torn = rng.choice(("power", "process")), rng.choice(TORN)
            harness.apply({"op": "crash", "mode": mode, "torn": torn, "cut": rng.randrange(401)})
        else:
            file, offset, bit = rng.randrange(4), rng.randrange(2001), rng.randrange(8)
            harness.apply({"op": "bitflip", "file": file, "offset": offset, "bit": bit})


def settle(harness: WalHarness) -> None:
    if harness.alive:
        harness.apply({"op": "settle"})


def acknowledged(harness: WalHarness) -> bool:
    return any("Acknowledge" in effects for *_, effects in harness.steps)


MODEL = register(
    MachineModel(
        name="wal",
        spec=SPEC,
        harness=lambda: WalHarness(SPEC),
        step_checkers=STEP_CHECKERS,
        run_checkers=RUN_CHECKERS,
        levels={"top": SPEC},
        exercised=EXERCISED,
        bindings=(
            Binding(
                SPEC,
                wal.Phase,
                initial=wal.Phase.STARTING,
                events=type_names(wal.Event),
                effects=type_names(wal.Effect),
                handlers=wal._HANDLERS,
            ),
        ),
        drive=drive,
        settle=settle,
        progress=acknowledged,
        walk_steps=200,
        walks_ci=100,
        examples_ci=250,
        example_steps=50,
        required_traces=frozenset({"torn-tail-cut-acked-kept", "fsync-failure-poisons"}),
    )
)
walk = MODEL.walk

# "ok" first and most often: faults are the exception, and shrinking moves towards "ok".
fault_strategy = st.sampled_from(("ok",) * 12 + DISK_FAULTS)


class WalMachine(ModelMachine):
    """Concurrent appends, performed effects in any order, flushes, crashes and disk damage."""

    model = MODEL

    @initialize(window=st.booleans())
    def open(self, window: bool) -> None:
        self.harness.apply({"op": "open", "window": window})

    @precondition(lambda self: self.harness.running)
    @rule(size=st.integers(1, 160))
    def append(self, size: int) -> None:
        self.harness.apply({"op": "append", "size": size})

    @precondition(lambda self: self.harness.alive and self.harness.pending)
    @rule(which=st.integers(0, 7), fault=fault_strategy)
    def perform(self, which: int, fault: str) -> None:
        self.harness.apply({"op": "perform", "which": which, "fault": fault})

    @precondition(lambda self: self.harness.alive)
    @rule(pick=st.integers(0, 15), deliver=st.booleans())
    def flush(self, pick: int, deliver: bool) -> None:
        self.harness.apply({"op": "flush", "pick": pick, "deliver": deliver})

    @precondition(lambda self: self.harness.running)
    @rule(stale=st.booleans())
    def deliver(self, stale: bool) -> None:
        self.harness.apply({"op": "deliver", "stale": stale})

    @precondition(lambda self: self.harness.alive)
    @rule(
        mode=st.sampled_from(("power", "process")),
        torn=st.sampled_from(TORN),
        cut=st.integers(0, 400),
    )
    def crash(self, mode: str, torn: str, cut: int) -> None:
        self.harness.apply({"op": "crash", "mode": mode, "torn": torn, "cut": cut})

    @precondition(lambda self: self.harness.alive and self.harness.disk.files)
    @rule(file=st.integers(0, 3), offset=st.integers(0, 2000), bit=st.integers(0, 7))
    def bitflip(self, file: int, offset: int, bit: int) -> None:
        self.harness.apply({"op": "bitflip", "file": file, "offset": offset, "bit": bit})

    @precondition(lambda self: not self.harness.alive)
    @rule()
    def refused(self) -> None:
        # Recovery refused a damaged tail: an operator's turn, nothing more to drive.
        self.harness.apply({"op": "expect", "refused": True})


TestWalMachine = WalMachine.TestCase
TestWalMachine.settings = MODEL.hypothesis_settings()


# --- the checkers are live -----------------------------------------------------------------------


def test_harness_catches_an_early_ack() -> None:
    """Acknowledging before the fsync is caught."""
    harness = WalHarness(SPEC)
    harness.apply({"op": "open", "window": False})
    harness.apply({"op": "settle"})
    harness.apply({"op": "append", "size": 10})
    harness.apply({"op": "perform", "which": 0, "fault": "ok"})  # the write, not the fsync
    harness._on_ack(harness.state, 1, 1)
    with pytest.raises(AssertionError, match="before its fsync"):
        check_step_invariants(harness)


def test_harness_catches_a_lost_acked_record() -> None:
    harness = WalHarness(SPEC)
    for inp in (
        {"op": "open", "window": False},
        {"op": "settle"},
        {"op": "append", "size": 10},
        {"op": "settle"},
    ):
        harness.apply(inp)
    f = next(iter(harness.disk.files.values()))
    f.durable = b""  # the disk forgets an acked record behind the harness's back
    with pytest.raises(AssertionError, match="not durable"):
        check_step_invariants(harness)


# --- the trio driver: a real directory (real fsync) and a virtual-time store ----------------------

import os  # noqa: E402

import trio  # noqa: E402
import trio.testing  # noqa: E402

from icegres.machines.drivers.wal import AppendFailed, DirectoryStore, open_wal_tail, read_tail  # noqa: E402
from icegres.machines.wal import Config, PoisonedTail  # noqa: E402

REAL = Config(segment_bytes_max=4096, batch_bytes_max=1024)


async def test_driver_real_directory_concurrent_appends_survive_reopen(tmp_path: Path) -> None:
    acked: dict[int, bytes] = {}

    async def writer(tail, i: int) -> None:
        for j in range(10):
            payload = f"w{i}-{j}".encode() * 20
            acked[await tail.append(payload)] = payload

    async with open_wal_tail(tmp_path, REAL, new_tail_id="t1") as tail:
        assert tail.replay == ()
        async with trio.open_nursery() as nursery:
            for i in range(8):
                nursery.start_soon(writer, tail, i)
        assert sorted(acked) == list(range(1, 81)) and tail.durable_lsn == 80
        tail.advance_watermark(30)
        await trio.sleep(0.05)  # deletion runs in the background
    names = sorted(os.listdir(tmp_path))
    assert names[-1] == "LOCK"  # the directory's writer lock (one server per --tail-dir)
    assert len(names) > 2 and all(n.endswith(".t1.wal") for n in names[:-1])
    async with open_wal_tail(tmp_path, REAL, watermark_lsn=lambda tail_id: 30) as tail:
        assert [(r.lsn, r.payload) for r in tail.replay] == [(k, acked[k]) for k in range(31, 81)]
        assert await tail.append(b"more") == 81


def _segments(path: Path) -> list[Path]:
    """The directory's segment files, oldest first (its LOCK file aside)."""
    return sorted(p for p in path.iterdir() if p.suffix == ".wal")


async def test_driver_recovers_a_killed_writer_at_random_truncations(tmp_path: Path) -> None:
    rng = random.Random(6)
    for round_ in range(6):
        path = tmp_path / f"r{round_}"
        async with open_wal_tail(path, REAL, new_tail_id="t1") as tail:
            payloads = [bytes([round_]) * rng.randrange(1, 300) for _ in range(12)]
            for p in payloads:
                await tail.append(p)
        last = _segments(path)[-1]
        size = last.stat().st_size
        cut = rng.randrange(0, size)
        os.truncate(last, cut)  # what a kill mid-write leaves behind
        recovery = await read_tail(path, REAL)
        lsns = [r.lsn for r in recovery.replay]
        assert lsns == list(range(1, len(lsns) + 1))  # a prefix, never garbage
        assert [r.payload for r in recovery.replay] == payloads[: len(lsns)]
        async with open_wal_tail(path, REAL) as tail:
            assert await tail.append(b"after") == len(lsns) + 1
        assert (await read_tail(path, REAL)).cuts == ()  # the torn tail was cut for good


async def test_driver_refuses_a_poisoned_directory(tmp_path: Path) -> None:
    async with open_wal_tail(tmp_path, REAL, new_tail_id="t1") as tail:
        for _ in range(3):
            await tail.append(b"x" * 50)
    (segment,) = _segments(tmp_path)
    data = bytearray(segment.read_bytes())
    data[30] ^= 1  # inside the first record's body, two valid ones follow
    segment.write_bytes(bytes(data))
    with pytest.raises(PoisonedTail):
        async with open_wal_tail(tmp_path, REAL):
            pass


class VirtualStore:
    """A segment store in memory whose fsync takes virtual time, with scripted fsync failures."""

    def __init__(self, fsync_seconds: float, fail_fsyncs: int = 0) -> None:
        self.files: dict[str, bytearray] = {}
        self.fsync_seconds = fsync_seconds
        self.fail_fsyncs = fail_fsyncs
        self.fsyncs: list[tuple[float, int]] = []  # (virtual time, file length)

    async def read_all(self) -> dict[str, bytes]:
        return {k: bytes(v) for k, v in self.files.items()}

    async def create(self, name: str) -> None:
        self.files[name] = bytearray()

    async def write(self, name: str, offset: int, data: bytes) -> None:
        self.files[name][offset:] = data

    async def fsync(self, name: str) -> None:
        await trio.sleep(self.fsync_seconds)
        self.fsyncs.append((trio.current_time(), len(self.files[name])))
        if self.fail_fsyncs:
            self.fail_fsyncs -= 1
            raise OSError(5, "Input/output error")

    async def truncate_and_fsync(self, name: str, length: int) -> None:
        del self.files[name][length:]

    async def sync_directory(self) -> None:
        pass

    async def delete(self, names: list[str]) -> None:
        for n in names:
            self.files.pop(n, None)

    def close(self) -> None:
        pass


@pytest.fixture
def mock_clock() -> trio.testing.MockClock:
    return trio.testing.MockClock(autojump_threshold=0)


STORES = pytest.mark.parametrize("store_class", ["VirtualStore", "FusedVirtualStore"])


@STORES
async def test_driver_group_fsync_shares_fsyncs_in_virtual_time(mock_clock, store_class) -> None:
    store = globals()[store_class](fsync_seconds=1.0)
    done: dict[int, float] = {}

    async def append(tail, payload: bytes) -> None:
        lsn = await tail.append(payload)
        done[lsn] = trio.current_time()

    async with open_wal_tail(store, Config(), new_tail_id="t1") as tail:
        start = trio.current_time()
        async with trio.open_nursery() as nursery:
            nursery.start_soon(append, tail, b"first")
            await trio.sleep(0.1)  # the first fsync is in flight
            for i in range(7):
                nursery.start_soon(append, tail, b"rider%d" % i)
    assert len(store.fsyncs) == 2  # eight writers, two fsyncs
    if isinstance(store, FusedVirtualStore):
        assert store.separate_fsyncs == 0  # each batch's fsync came with its write
    assert done[1] - start == pytest.approx(1.0)
    assert all(done[lsn] - start == pytest.approx(2.0) for lsn in range(2, 9))


async def test_driver_group_window_waits_then_writes_once(mock_clock) -> None:
    store = VirtualStore(fsync_seconds=0.0)
    config = Config(group_fsync_window_seconds=0.5)
    async with open_wal_tail(store, config, new_tail_id="t1") as tail:
        start = trio.current_time()
        async with trio.open_nursery() as nursery:
            for i in range(4):
                nursery.start_soon(tail.append, b"p%d" % i)
        assert trio.current_time() - start == pytest.approx(0.5)
    assert len(store.fsyncs) == 1


@STORES
async def test_driver_fsync_failure_poisons_and_reports(mock_clock, store_class) -> None:
    # Fused: the failed fsync of a write is reported at the Fsync that follows, and poisons.
    store = globals()[store_class](fsync_seconds=0.1, fail_fsyncs=1)
    errors: list[AppendFailed] = []

    async def append(tail, payload: bytes) -> None:
        try:
            await tail.append(payload)
        except AppendFailed as exc:
            errors.append(exc)

    async with open_wal_tail(store, Config(), new_tail_id="t1") as tail:
        async with trio.open_nursery() as nursery:
            nursery.start_soon(append, tail, b"a")
            await trio.sleep(0.05)
            nursery.start_soon(append, tail, b"b")
        assert sorted(e.outcome_unknown for e in errors) == [False, True]
        report = tail.health()
        assert not report.ok and report.phase == "poisoned" and "fsync failed" in report.reason
        with pytest.raises(AppendFailed):
            await tail.append(b"c")
    assert len(store.fsyncs) == 1  # never retried
    assert getattr(store, "separate_fsyncs", 0) == 0


class FusedVirtualStore(VirtualStore):
    """A VirtualStore that can write and fsync in one call, as DirectoryStore does."""

    def __init__(self, fsync_seconds: float, fail_fsyncs: int = 0) -> None:
        super().__init__(fsync_seconds, fail_fsyncs)
        self.separate_fsyncs = 0

    async def write_then_fsync(self, name: str, offset: int, data: bytes) -> OSError | None:
        await self.write(name, offset, data)
        try:
            await VirtualStore.fsync(self, name)
        except OSError as exc:
            return exc
        return None

    async def fsync(self, name: str) -> None:
        self.separate_fsyncs += 1
        await VirtualStore.fsync(self, name)



class ScriptedDirectoryStore(DirectoryStore):
    """A real directory whose fused write (the one the driver submits without a task) can be
    slowed down or failed after the tail opened."""

    def __init__(self, path: Path) -> None:
        super().__init__(path)
        self.delay_s = 0.0
        self.fail: str | None = None  # "write" or "fsync"

    def _write_then_fsync(self, name: str, offset: int, data: bytes) -> OSError | None:
        time.sleep(self.delay_s)
        if self.fail == "write":
            raise OSError(28, "No space left on device")
        if self.fail == "bug":
            raise RuntimeError("a bug in the store")
        if self.fail == "fsync":
            self._write(name, offset, data)
            return OSError(5, "Input/output error")
        return super()._write_then_fsync(name, offset, data)


@pytest.mark.parametrize("fail", ["write", "fsync", "bug"])
async def test_driver_a_failed_submitted_write_poisons_and_reports(tmp_path: Path, fail: str) -> None:
    store = ScriptedDirectoryStore(tmp_path)
    async with open_wal_tail(store, REAL, new_tail_id="t1") as tail:
        assert await tail.append(b"fine") == 1
        store.fail = fail
        with pytest.raises(AppendFailed) as failed:
            await tail.append(b"lost")
        assert failed.value.outcome_unknown  # its bytes were being written
        report = tail.health()
        assert not report.ok and report.phase == "poisoned"
        expected = {"fsync": "fsync failed", "write": "No space left on device", "bug": "a bug in the store"}
        assert expected[fail] in report.reason
        with pytest.raises(AppendFailed):
            await tail.append(b"refused")
    assert [r.payload for r in (await read_tail(tmp_path, REAL)).replay][:1] == [b"fine"]


async def test_driver_leaving_the_tail_waits_for_a_submitted_write(tmp_path: Path) -> None:
    store = ScriptedDirectoryStore(tmp_path)
    async with open_wal_tail(store, REAL, new_tail_id="t1") as tail:
        store.delay_s = 0.3
        with trio.move_on_after(0.05):
            await tail.append(b"in flight")  # its client gives up; the write goes on
        started = trio.current_time()
    assert trio.current_time() - started > 0.1  # the exit waited for the store's answer
    assert [r.payload for r in (await read_tail(tmp_path, REAL)).replay] == [b"in flight"]


# --- the shared tests (tests/model/scaffold.py): last, so that coverage counts every run above ---


class TestWalModel(ModelTests):
    model = MODEL
