"""Graceful drain on SIGTERM: /ready turns 503, no new connections, idle sessions end at once and
running statements get --drain-timeout-s before every session ends with FATAL 57P01; exit 0."""

from __future__ import annotations

import signal
import threading
import time
import urllib.error
import urllib.request

import psycopg
import pytest

from tests.support.icegres_server import start_icegres

pytestmark = pytest.mark.e2e


def _ready(port: int) -> int:
    try:
        with urllib.request.urlopen(f"http://127.0.0.1:{port}/ready", timeout=2) as reply:
            return reply.status
    except urllib.error.HTTPError as exc:
        return exc.code
    except OSError:
        return 0


def test_sigterm_drains_then_terminates_and_exits_0(tmp_path):
    started = start_icegres(["serve", "--data-dir", str(tmp_path / "data"), "--host", "127.0.0.1", "--port", "0",
                             "--ops-port", "0", "--drain-timeout-s", "3"], log_dir=tmp_path)
    proc, port, ops = started.proc, started.ports["port"], started.ports["ops_port"]
    dsn = f"host=127.0.0.1 port={port} user=icegres dbname=icegres"
    try:
        assert _ready(ops) == 200
        idle = psycopg.connect(dsn, autocommit=True)
        busy = psycopg.connect(dsn, autocommit=True)
        outcome: list[BaseException | object] = []

        def long_query() -> None:
            try:
                outcome.append(busy.execute("select count(*) from generate_series(1, 4000000000)").fetchone())
            except BaseException as exc:  # noqa: BLE001
                outcome.append(exc)

        runner = threading.Thread(target=long_query)
        runner.start()
        time.sleep(1.0)
        sent = time.monotonic()
        proc.send_signal(signal.SIGTERM)
        time.sleep(0.5)
        assert _ready(ops) in (503, 0)  # 503 while draining (0: the endpoint already went)
        with pytest.raises(psycopg.OperationalError):
            psycopg.connect(dsn, connect_timeout=3)  # no longer accepting
        with pytest.raises(psycopg.OperationalError, match="terminating connection due to administrator command"):
            idle.execute("select 1")  # idle: ended at the start of the drain
        runner.join(30)
        ended = time.monotonic() - sent
        assert isinstance(outcome[0], psycopg.OperationalError), outcome
        assert "terminating connection due to administrator command" in str(outcome[0])
        assert 2.5 <= ended < 15, ended  # after --drain-timeout-s, not before
        assert proc.wait(timeout=30) == 0
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
