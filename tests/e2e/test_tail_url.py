"""The write ladder's Postgres tail end to end: `icegres serve --write-buffer-ms N --tail-url URL`.

Real server processes on the embedded SQLite lake, a real PostgreSQL 15 (`real_postgres`) holding the
tail, real psycopg clients, pyiceberg looking at the catalog from outside. What is proven: acked
INSERTs survive SIGKILL of the server (at random moments, and right after a flush committed but
before the tail heard of it) and are replayed exactly once on restart; the trim watermark is fed back
(the tail's rows are deleted once in the lake); SIGTERM drains; a second server of the same
deployment (same tail id) is refused while the first owns the tail; bad option combinations and a
bad URL stop start-up with one clear line, the URL's password redacted everywhere.
"""

from __future__ import annotations

import contextlib
import os
import random
import re
import signal
import subprocess
import sys
import time
from collections import Counter
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import psycopg
import pytest

from tests.support import ladder
from tests.support.icegres_server import refused_port
from tests.support.ladder import Server, Writers, catalog, lake_ids
from tests.support.postgres import PostgresServer

pytestmark = [pytest.mark.e2e, pytest.mark.timeout(300)]

WINDOW_MS = 200
PASSWORD = "tail-s3cret-pw"  # trust auth ignores it; it must never show up in any output
TAIL_ID = "icegres.tail-id"
TAIL_LSN = "icegres.tail-lsn"


def tail_url(pg: PostgresServer, *, password: str = PASSWORD, dbname: str | None = None) -> str:
    return f"postgresql://{pg.user}:{password}@{pg.host}:{pg.port}/{dbname or pg.dbname}"


def redacted(url: str) -> str:
    return url.replace(f":{PASSWORD}@", ":***@")


@contextlib.contextmanager
def serve(data_dir: Path, url: str, *args: str, window_ms: int = WINDOW_MS, faults: str = "") -> Iterator[Server]:
    # The URL goes through the environment twin: it is a secret, kept off the command line.
    env = {"ICEGRES_FAULTS": faults, "ICEGRES_TAIL_URL": url}
    srv = None
    try:
        with ladder.serve(data_dir, "--write-buffer-ms", str(window_ms), *args, env=env, timeout_s=90) as srv:
            yield srv
    finally:
        if srv is not None:
            assert PASSWORD not in srv.log(), "the tail URL's password was logged"


def run_serve(data_dir: Path, *args: str, env: dict[str, str] | None = None) -> subprocess.CompletedProcess[str]:
    """`icegres serve` that is expected to stop at start-up: its exit code and output."""
    cmd = [sys.executable, "-m", "icegres", "serve", "--data-dir", str(data_dir), "--port", "0", *args]
    return subprocess.run(cmd, capture_output=True, text=True, timeout=90, stdin=subprocess.DEVNULL,
                          env={**os.environ, **(env or {})})


def flush_summaries(data_dir: Path, ns: str) -> list[dict[str, str]]:
    table = catalog(data_dir).load_table((ns, "t"))
    return [dict(s.summary.additional_properties) for s in table.metadata.snapshots
            if s.summary is not None and s.summary.get(TAIL_ID)]


def tail_rows(pg: PostgresServer, tail_id: str) -> tuple[int, int]:
    """(rows the Postgres tail still holds for `tail_id`, its persisted trim point)."""
    with psycopg.connect(pg.dsn(), autocommit=True) as conn:
        (rows,) = conn.execute("SELECT count(*) FROM icegres_tail WHERE tail_id = %s", (tail_id,)).fetchone()
        owner = conn.execute("SELECT trimmed_lsn FROM icegres_tail_owner WHERE tail_id = %s", (tail_id,)).fetchone()
    return int(rows), int(owner[0]) if owner else -1


def wait_trimmed(pg: PostgresServer, tail_id: str, through: int, timeout_s: float = 20) -> None:
    """The lake's watermark was fed back: the tail deletes its rows up to `through`."""
    deadline = time.monotonic() + timeout_s
    while True:
        rows, trimmed = tail_rows(pg, tail_id)
        if rows == 0 and trimmed >= through:
            return
        assert time.monotonic() < deadline, f"tail {tail_id} not trimmed: {rows} rows left, trimmed_lsn {trimmed} < {through}"
        time.sleep(0.1)


@pytest.fixture
def data_dir(tmp_path: Path) -> Path:
    d = tmp_path / "data"
    d.mkdir()
    return d


def check_exactly_once(data_dir: Path, ns: str, acked: list[int]) -> list[int]:
    ids = lake_ids(data_dir, ns)
    dupes = [i for i, n in Counter(ids).items() if n > 1]
    assert not dupes, f"duplicated after replay: {dupes[:10]}"
    missing = set(acked) - set(ids)
    assert not missing, f"acked but lost: {sorted(missing)[:10]} ({len(missing)} rows)"
    return ids


# --- start-up errors --------------------------------------------------------------------------------


def test_option_combinations_are_start_up_errors(tmp_path: Path, real_postgres: PostgresServer) -> None:
    url = tail_url(real_postgres)
    no_window = run_serve(tmp_path / "d", env={"ICEGRES_TAIL_URL": url})
    assert no_window.returncode == 2, no_window.stderr
    assert "--tail-url needs the write buffer" in no_window.stderr

    both = run_serve(tmp_path / "d", "--write-buffer-ms", "100", "--tail-dir", str(tmp_path / "wal"),
                     env={"ICEGRES_TAIL_URL": url})
    assert both.returncode == 2, both.stderr
    assert "--tail-dir and --tail-url are exclusive" in both.stderr

    not_a_url = run_serve(tmp_path / "d", "--write-buffer-ms", "100",
                          env={"ICEGRES_TAIL_URL": f"host=db password={PASSWORD}"})
    assert not_a_url.returncode == 2, not_a_url.stderr
    assert "--tail-url must be a postgresql://" in not_a_url.stderr

    mysql = run_serve(tmp_path / "d", "--write-buffer-ms", "100",
                      env={"ICEGRES_TAIL_URL": f"mysql://u:{PASSWORD}@db/x"})
    assert mysql.returncode == 2, mysql.stderr
    assert "mysql://u:***@db/x" in mysql.stderr
    for proc in (no_window, both, not_a_url, mysql):
        assert PASSWORD not in proc.stdout + proc.stderr
        assert "Traceback" not in proc.stderr


@pytest.mark.parametrize("where", ["closed-port", "no-such-database"])
def test_a_bad_tail_url_fails_start_up_with_one_clear_line(tmp_path: Path, real_postgres: PostgresServer,
                                                           where: str) -> None:
    with refused_port() as closed:
        if where == "closed-port":
            url = f"postgresql://{real_postgres.user}:{PASSWORD}@127.0.0.1:{closed}/{real_postgres.dbname}"
        else:
            url = tail_url(real_postgres, dbname="no_such_tail_db")
        started = time.monotonic()
        proc = run_serve(tmp_path / "d", "--write-buffer-ms", "100", "--tail-url", url)
    assert time.monotonic() - started < 60
    assert proc.returncode == 1, proc.stderr
    output = proc.stdout + proc.stderr
    assert PASSWORD not in output, "the tail URL's password was printed"
    assert "Traceback" not in output
    lines = [line for line in proc.stderr.splitlines() if line.startswith("icegres: ")]
    assert len(lines) == 1, proc.stderr
    assert lines[0].startswith(f"icegres: cannot open the Postgres tail at {redacted(url)}: "), lines[0]
    if where == "no-such-database":
        assert "no_such_tail_db" in lines[0] and "does not exist" in lines[0]


# --- durability ------------------------------------------------------------------------------------


def _kill_round(data_dir: Path, url: str, ns: str, base: int, *, kill_after_s: float, faults: str = "") -> tuple[list[int], int]:
    """Writers against a fresh server; SIGKILL it (or let a fault crash it). Returns the acked ids
    and how many records the server replayed when it started."""
    with serve(data_dir, url, faults=faults) as srv:
        replayed = int(re.findall(r"replayed (\d+) records", srv.log())[-1])
        with Writers(srv, f"{ns}.t", 6, base=base) as writers:
            deadline = time.monotonic() + kill_after_s
            while time.monotonic() < deadline and srv.proc.poll() is None:
                time.sleep(0.01)
            if srv.proc.poll() is None:
                srv.stop(signal.SIGKILL)
        if not faults:
            assert srv.proc.returncode == -signal.SIGKILL, (srv.proc.returncode, srv.log()[-3000:])
        assert not writers.errors, writers.errors
        if faults:
            assert "icegres-fault: reached after-flush-commit" in srv.log(), srv.log()[-3000:]
        return list(writers.acked), replayed


def test_sigkill_then_restart_replays_every_acked_row_exactly_once(data_dir: Path, real_postgres: PostgresServer) -> None:
    url = tail_url(real_postgres)
    with serve(data_dir, url) as srv:
        ns = ladder.make_table(srv, prefix="u")
        assert srv.stop() == 0
    rng = random.Random(61)
    rounds: list[dict[str, Any]] = [dict(kill_after_s=rng.uniform(0.15, 1.2)) for _ in range(4)]
    # A flush committed (its snapshot holds the watermark) and the process died before the tail
    # heard of it: replay must skip exactly those records.
    rounds.append(dict(kill_after_s=30, faults="after-flush-commit=crash"))
    acked: list[int] = []
    replayed = 0
    for n, r in enumerate(rounds):
        got, _ = _kill_round(data_dir, url, ns, (n + 1) * 100_000_000, **r)
        acked += got
        # The restart replays what the lake lacks and flushes it before it serves.
        with serve(data_dir, url) as srv:
            replayed += int(re.findall(r"replayed (\d+) records", srv.log())[-1])
            ids = check_exactly_once(data_dir, ns, acked)
            with srv.connect() as conn:
                assert conn.execute(f"select count(*), count(distinct id) from {ns}.t").fetchone() == (len(ids), len(ids))
            assert srv.stop() == 0, srv.log()[-3000:]
        assert len(lake_ids(data_dir, ns)) == len(ids), "a clean restart replays nothing twice"
    assert len(acked) > 50 and replayed > 0, (len(acked), replayed)
    # Every flush carries the one stable tail id, and the watermark only moves forward.
    summaries = flush_summaries(data_dir, ns)
    tail_ids = {s[TAIL_ID] for s in summaries}
    assert len(tail_ids) == 1, tail_ids
    (tail_id,) = tail_ids
    lsns = [int(s[TAIL_LSN]) for s in summaries]
    assert lsns == sorted(lsns)
    # The trim watermark was fed back: after the clean stop the tail holds nothing the lake has.
    wait_trimmed(real_postgres, tail_id, max(lsns))


def test_sigterm_drains_every_acked_row(data_dir: Path, real_postgres: PostgresServer) -> None:
    url = tail_url(real_postgres)
    with serve(data_dir, url, window_ms=5000) as srv:
        ns = ladder.make_table(srv, prefix="u")
        with Writers(srv, f"{ns}.t", 4) as writers:
            time.sleep(0.5)
            assert lake_ids(data_dir, ns) == [], "a 5 s window: nothing flushed yet"
            assert srv.stop(signal.SIGTERM) == 0, srv.log()[-3000:]
        assert "write buffer flushed" in srv.log()
    assert not writers.errors, writers.errors
    assert len(writers.acked) > 10
    check_exactly_once(data_dir, ns, writers.acked)
    summaries = flush_summaries(data_dir, ns)
    (tail_id,) = {s[TAIL_ID] for s in summaries}
    wait_trimmed(real_postgres, tail_id, max(int(s[TAIL_LSN]) for s in summaries))
    # Nothing left to replay.
    with serve(data_dir, url) as srv:
        assert re.findall(r"replayed (\d+) records", srv.log())[-1] == "0"
        srv.stop()
    check_exactly_once(data_dir, ns, writers.acked)


def test_a_second_server_on_the_same_tail_is_refused(data_dir: Path, real_postgres: PostgresServer) -> None:
    url = tail_url(real_postgres)
    with serve(data_dir, url) as first:
        ns = ladder.make_table(first, prefix="u")
        with first.connect() as conn:
            conn.execute(f"insert into {ns}.t values (1, 0, 'first')")
        # Same catalog and data directory: the same deployment, so the same tail id.
        started = time.monotonic()
        second = run_serve(data_dir, "--write-buffer-ms", str(WINDOW_MS), env={"ICEGRES_TAIL_URL": url})
        assert time.monotonic() - started < 60
        assert second.returncode == 1, second.stderr[-3000:]
        assert PASSWORD not in second.stdout + second.stderr
        lines = [line for line in second.stderr.splitlines() if line.startswith("icegres: ")]
        assert len(lines) == 1, second.stderr[-3000:]
        assert "is owned by another live server" in lines[0] and redacted(url) in lines[0], lines[0]
        assert f":{first.proc.pid}" in lines[0], "the refusal names the owner"
        # The owner was not disturbed: it still acks durable writes and serves them.
        with first.connect() as conn:
            conn.execute(f"insert into {ns}.t values (2, 0, 'after the refusal')")
            assert conn.execute(f"select id from {ns}.t order by id").fetchall() == [(1,), (2,)]
        assert first.stop() == 0, first.log()[-3000:]
    check_exactly_once(data_dir, ns, [1, 2])
