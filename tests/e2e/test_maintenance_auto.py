"""Automatic maintenance (`serve --maintain`, issue 30; docs/maintenance.md "Automatic maintenance") on
real servers: a table written by many small flushes of the write buffer gets compacted and its
snapshots expired while a reader checks every answer; table properties turn it off or tune it per
table; two servers with --maintain on one catalog never run a job on one table at the same time."""

from __future__ import annotations

import re
import threading
import time
from collections.abc import Callable
from pathlib import Path

import psycopg
import pytest

from icegres.config import Settings
from icegres.engine.catalog import Lakehouse
from tests.support.icegres_server import IcegresServer, running_icegres, start_icegres, stop
from tests.support.ops import get

pytestmark = [pytest.mark.e2e, pytest.mark.timeout(240)]

JOB_LINE = re.compile(r"maintenance (?P<table>\S+): (?P<ops>\S+) in [\d.]+s \(epoch (?P<epoch>\d+), "
                      r"held (?P<start>[\d.]+)-(?P<end>[\d.]+);")


def metrics(server: IcegresServer) -> dict[str, int]:
    status, text = get(server.ops_port, "/metrics")
    assert status == 200
    return {m.group(1): int(m.group(2))
            for m in re.finditer(r"^icegres_maintenance_(\w+)_total (\d+)$", text, re.MULTILINE)}


def wait_for(what: str, check: Callable[[], bool], timeout_s: float = 120, logs: tuple[Path, ...] = ()) -> None:
    deadline = time.monotonic() + timeout_s
    while not check():
        if time.monotonic() > deadline:
            tails = "\n".join(p.read_text()[-4000:] for p in logs)
            raise AssertionError(f"timed out waiting for {what}\n{tails}")
        time.sleep(0.25)


def lake_table(data_dir: Path, name: str):  # noqa: ANN201 - a pyiceberg Table
    return Lakehouse.from_settings(Settings(data_dir=data_dir)).load_table("demo", name)


def conn(server: IcegresServer) -> psycopg.Connection:
    return psycopg.connect(server.dsn(), autocommit=True)


class Reader:
    """Reads the table over and over in a thread of its own: every answer must be the prefix
    0..n-1 the single writer has written so far (no row lost, none twice), n never going back.
    It pauses between reads, as a dashboard polls: a foreground that is never quiet defers each
    job by the scheduler's longest deferral (30 s), which would only make the test slow."""

    PAUSE_S = 0.2

    def __init__(self, server: IcegresServer, table: str) -> None:
        self.server, self.table = server, table
        self.reads = 0
        self.seen = 0
        self.failure: BaseException | None = None
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)

    def __enter__(self) -> Reader:
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        self._thread.join(timeout=30)
        if self.failure is not None:
            raise AssertionError(f"the reader failed after {self.reads} reads") from self.failure

    def _run(self) -> None:
        try:
            with conn(self.server) as c:
                while not self._stop.is_set():
                    n, total, distinct = c.execute(
                        f"select count(*), coalesce(sum(id), 0), count(distinct id) from demo.{self.table}").fetchone()
                    assert n == distinct, f"{n} rows but {distinct} distinct ids: a row twice"
                    assert total == n * (n - 1) // 2, f"{n} rows summing to {total}: not the prefix 0..{n - 1}"
                    assert n >= self.seen, f"{n} rows after {self.seen}: rows went missing"
                    self.seen = n
                    self.reads += 1
                    self._stop.wait(self.PAUSE_S)
        except BaseException as exc:  # noqa: BLE001 - re-raised by __exit__
            self.failure = exc


def test_small_flushes_are_compacted_and_expired_while_a_reader_reads(tmp_path: Path) -> None:
    data_dir = tmp_path / "data"
    # An interval of an hour: only the write buffer's flushes can start a round here.
    args = ("--maintain", "--maintain-interval-s", "3600", "--write-buffer-ms", "20", "--ops-port", "0")
    with running_icegres(data_dir, args=args) as server, conn(server) as c:
        c.execute("create schema demo")
        c.execute("create table demo.events (id bigint, v text)")
        c.execute('alter table demo.events set ("icegres.maintain.compact.min-files" = 10, '
                  '"icegres.maintain.expire.max-snapshot-age-ms" = 0, "icegres.maintain.expire.min-snapshots" = 5)')
        rows = 70
        with Reader(server, "events") as reader:
            for i in range(rows):
                c.execute("insert into demo.events values (%s, %s)", (i, f"v{i}"))
                time.sleep(0.05)  # past the 20 ms window: a flush (one small file) per row
            wait_for("a compaction and an expiry", lambda: metrics(server).get("files_compacted", 0) > 0
                     and metrics(server).get("snapshots_expired", 0) > 0, logs=(server.log_path,))
            wait_for("the reader to see every row", lambda: reader.seen == rows)
        assert reader.reads > 10
        assert c.execute("select count(*), sum(id) from demo.events").fetchone() == (rows, rows * (rows - 1) // 2)
        counted = metrics(server)
        assert counted["jobs_run"] >= 1, counted
        log = server.log_path.read_text()
        jobs = [m for m in JOB_LINE.finditer(log) if m["table"] == "demo.events"]
        assert jobs and "compact" in jobs[0]["ops"], log[-3000:]
        assert "expire" in "+".join(m["ops"] for m in jobs)
    # The lake, read by pyiceberg after the server is gone: every row once, in fewer files than
    # rows, and fewer snapshots than commits.
    table = lake_table(data_dir, "events")
    ids = sorted(table.scan().to_arrow().column("id").to_pylist())
    assert ids == list(range(rows))
    assert len(table.inspect.files()) < rows // 2
    assert len(table.metadata.snapshots) < rows // 2


def test_table_properties_turn_maintenance_off_or_tune_it(tmp_path: Path) -> None:
    data_dir = tmp_path / "data"
    args = ("--maintain", "--maintain-interval-s", "0.5", "--ops-port", "0")
    with running_icegres(data_dir, args=args) as server, conn(server) as c:
        c.execute("create schema demo")
        settings = {"off": '"icegres.maintain.enabled" = false, "icegres.maintain.compact.min-files" = 5',
                    "low": '"icegres.maintain.compact.min-files" = 5',
                    "plain": None}  # the server's default: 20 small files
        for name, props in settings.items():
            c.execute(f"create table demo.{name} (id bigint)")
            if props:
                c.execute(f"alter table demo.{name} set ({props})")
            for i in range(12):
                c.execute(f"insert into demo.{name} values ({i})")

        def files(name: str) -> int:
            return c.execute(f'select count(*) from demo."{name}$files"').fetchone()[0]

        wait_for("demo.low's compaction", lambda: files("low") < 12, logs=(server.log_path,))
        rounds = metrics(server)["rounds"]
        wait_for("three more rounds", lambda: metrics(server)["rounds"] >= rounds + 3)
        assert files("off") == 12 and files("plain") == 12
        for name in settings:
            assert c.execute(f"select count(*), sum(id) from demo.{name}").fetchone() == (12, 66)
        log = server.log_path.read_text()
        maintained = {m["table"] for m in JOB_LINE.finditer(log)}
        assert maintained == {"demo.low"}, log[-3000:]


def test_two_servers_never_maintain_one_table_at_once(tmp_path: Path) -> None:
    a_dir, b_dir = tmp_path / "a" / "data", tmp_path / "b" / "data"
    a_dir.parent.mkdir()
    b_dir.parent.mkdir()
    args = ("--maintain", "--maintain-interval-s", "0.3", "--maintain-duty-cycle", "1", "--ops-port", "0")
    with running_icegres(a_dir, args=args) as a:
        with running_icegres(b_dir, args=(*args, "--catalog-uri", f"sqlite:///{a_dir / 'catalog.db'}")) as b, \
                conn(a) as ca, conn(b) as cb:
            ca.execute("create schema demo")
            ca.execute("create table demo.shared (id bigint)")
            ca.execute('alter table demo.shared set ("icegres.maintain.compact.min-files" = 3, '
                       '"icegres.maintain.expire.max-snapshot-age-ms" = 0, '
                       '"icegres.maintain.expire.min-snapshots" = 2)')
            rows = 0

            def jobs_run() -> int:
                return metrics(a)["jobs_run"] + metrics(b)["jobs_run"]

            deadline = time.monotonic() + 150
            # Bursts of writes through both servers, until both have maintained the table a few
            # times. (Bursts: a compaction re-checks its files at each rebase, and a steady stream
            # of commits faster than that starves it; docs/maintenance.md.)
            while not (metrics(a)["jobs_run"] >= 2 and metrics(b)["jobs_run"] >= 2) or jobs_run() < 6:
                assert time.monotonic() < deadline, (metrics(a), metrics(b), a.log_tail(3000), b.log_tail(3000))
                for _ in range(3):
                    for c in (ca, cb):
                        c.execute("insert into demo.shared values (%s)", (rows,))
                        rows += 1
                time.sleep(1.0)
                print(round(time.monotonic() - deadline + 150, 1), metrics(a), metrics(b), flush=True)
            for c in (ca, cb):
                assert c.execute("select count(*), sum(id), count(distinct id) from demo.shared").fetchone() == \
                    (rows, rows * (rows - 1) // 2, rows)
            spans = sorted((float(m["start"]), float(m["end"]), int(m["epoch"]), name)
                           for name, srv in (("a", a), ("b", b))
                           for m in JOB_LINE.finditer(srv.log_path.read_text()) if m["table"] == "demo.shared")
            assert len(spans) >= 6
            for first, second in zip(spans, spans[1:], strict=False):
                assert first[1] <= second[0], f"two jobs on demo.shared at once: {first} and {second}"
                assert second[2] > first[2], f"lease epochs do not increase: {first} then {second}"
            # (A job may fail: a compaction that keeps losing its commit to this stream of INSERTs
            # gives up with 40001 and commits nothing, as docs/maintenance-compaction.md says.)


def test_a_drain_ends_maintenance_and_its_worker_process(tmp_path: Path) -> None:
    import psutil

    data_dir = tmp_path / "data"
    started = start_icegres(["serve", "--data-dir", str(data_dir), "--host", "127.0.0.1", "--port", "0",
                             "--ops-port", "0", "--maintain", "--maintain-interval-s", "0.3"], log_dir=tmp_path)
    server = IcegresServer("127.0.0.1", started.ports["port"], data_dir, started.log_path, started.proc.pid,
                           ports=started.ports)
    try:
        with conn(server) as c:
            c.execute("create schema demo")
            c.execute("create table demo.t (id bigint)")
            c.execute('alter table demo.t set ("icegres.maintain.compact.min-files" = 3)')
            for i in range(6):
                c.execute(f"insert into demo.t values ({i})")
        wait_for("a job", lambda: metrics(server)["jobs_run"] >= 1, logs=(server.log_path,))

        def workers() -> list[psutil.Process]:
            return [p for p in psutil.Process(started.proc.pid).children(recursive=True)
                    if "icegres.engine.maintenance.worker" in " ".join(p.cmdline())]

        running = workers()
        assert len(running) == 1, running  # one worker process, kept between jobs
    finally:
        stop(started.proc)
    assert started.proc.returncode == 0, server.log_tail(3000)
    gone, alive = psutil.wait_procs(running, timeout=10)
    assert not alive, f"the maintenance process outlived the server: {alive}"
    assert "Traceback" not in server.log_path.read_text(), server.log_tail(3000)
