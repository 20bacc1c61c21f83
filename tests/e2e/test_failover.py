"""`icegres supervise` over three real keepers: concurrent INSERTs, the child writer is SIGKILLed,
the supervisor starts a replacement (new writer term, replay) and INSERTs go on; then the
replacement is SIGSTOPped (wedged: /health silent) and the supervisor SIGKILLs and replaces it.
With `--warm-standby` the replacement is the waiting standby, promoted. Every acknowledged row is
in the lake exactly once."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import time
import urllib.error
import urllib.request
from collections import Counter
from pathlib import Path

import pytest

from tests.support.icegres_server import start_icegres
from tests.support.keepers import start_keepers
from tests.support.ladder import Server, Writers, lake_ids, make_table

pytestmark = [pytest.mark.e2e, pytest.mark.timeout(300)]

REPLACEMENT_TIMEOUT_S = 90  # a liveness bound on 2 shared cores, not a speed claim (bench/ measures failover)


def health(port: int) -> dict | None:
    try:
        with urllib.request.urlopen(f"http://127.0.0.1:{port}/health", timeout=2) as reply:
            return json.loads(reply.read())
    except urllib.error.HTTPError as exc:
        return json.loads(exc.read())
    except OSError:
        return None


def serving_pid(ops: int, other_than: int | None = None, timeout_s: float = REPLACEMENT_TIMEOUT_S) -> int:
    """The PID of the child once it serves (and is not `other_than`)."""
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        body = health(ops)
        if body and body.get("ready") and body.get("pid") != other_than:
            return int(body["pid"])
        time.sleep(0.05)
    raise AssertionError(f"no serving writer (other than pid {other_than}) within {timeout_s} s")


def wait_for(writers: Writers, n: int, timeout_s: float = 30) -> None:
    deadline = time.monotonic() + timeout_s
    while writers.count() < n and time.monotonic() < deadline and not writers.errors:
        time.sleep(0.05)
    assert not writers.errors, writers.errors
    assert writers.count() >= n, writers.count()


def wait_log(srv: Server, text: str, count: int = 1, timeout_s: float = 30) -> None:
    deadline = time.monotonic() + timeout_s
    while srv.log().count(text) < count and time.monotonic() < deadline:
        time.sleep(0.05)
    assert srv.log().count(text) >= count, srv.log()[-3000:]


@pytest.mark.parametrize("warm", [False, True], ids=["cold", "warm-standby"])
def test_supervisor_replaces_a_killed_and_a_wedged_writer(tmp_path: Path, warm: bool) -> None:
    keepers = start_keepers(tmp_path)
    data_dir = tmp_path / "data"
    data_dir.mkdir()
    sup: subprocess.Popen[bytes] | None = None
    current: int | None = None  # the child serving now (the supervisor reaps the ones it replaced)
    try:
        # Ports 0: the first child binds them, the supervisor reports them (its --ports-file) and
        # gives them to every replacement.
        argv = ["supervise", "--data-dir", str(data_dir), "--port", "0", "--ops-port", "0",
                "--write-buffer-ms", "300", "--health-timeout-s", "2",
                "--tail-quorum", ",".join(k.address for k in keepers), *(["--warm-standby"] if warm else [])]
        started = start_icegres(argv, log_dir=tmp_path, stem="supervise", timeout_s=REPLACEMENT_TIMEOUT_S)
        sup = started.proc
        srv = Server(sup, started.ports["port"], started.log_path, started.ports)
        ops = srv.ops_port
        first = current = serving_pid(ops)
        if warm:
            wait_log(srv, "warm standby started")
        ns = make_table(srv, prefix="s")
        acked: list[int] = []

        # Concurrent INSERTs; the child writer is SIGKILLed mid-load.
        with Writers(srv, f"{ns}.t", 4, base=0) as writers:
            wait_for(writers, 60)
            os.kill(first, signal.SIGKILL)
            second = current = serving_pid(ops, other_than=first)
        acked += writers.acked
        assert "replacing" not in srv.log() and f"writer pid {first} exited with signal SIGKILL" in srv.log()
        if warm:
            assert f"is the promoted standby (pid {second})" in srv.log(), srv.log()[-3000:]
            wait_log(srv, "warm standby started (pid", count=2)

        # The replacement serves, and it is then wedged: /health goes silent, the supervisor
        # SIGKILLs it by PID and starts a third writer.
        with Writers(srv, f"{ns}.t", 4, base=10_000_000) as writers:
            wait_for(writers, 60)
            os.kill(second, signal.SIGSTOP)
            current = serving_pid(ops, other_than=second)
        acked += writers.acked
        assert f"replacing writer pid {second}" in srv.log(), srv.log()[-3000:]
        with Writers(srv, f"{ns}.t", 2, base=20_000_000) as writers:
            wait_for(writers, 20)
        acked += writers.acked

        # SIGTERM to the supervisor drains the child to the lake; both exit cleanly.
        assert srv.stop(signal.SIGTERM) == 0, srv.log()[-3000:]
        sup = current = None
        ids = lake_ids(data_dir, ns)
        counts = Counter(ids)
        assert not [i for i, n in counts.items() if n > 1], "a row is in the lake twice"
        missing = set(acked) - set(ids)
        assert not missing, f"{len(missing)} acknowledged rows lost"
    finally:
        if sup is not None and sup.poll() is None:
            sup.kill()
            sup.wait(10)
        if current is not None:  # the supervisor died first: its child is ours to end
            try:
                os.kill(current, signal.SIGKILL)
            except ProcessLookupError:
                pass
        for keeper in keepers:
            keeper.stop()
