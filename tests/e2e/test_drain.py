"""Graceful drain on SIGTERM: /ready turns 503, no new connections, idle sessions end at once and
running statements get --drain-timeout-s before every session ends with FATAL 57P01; exit 0."""

from __future__ import annotations

import contextlib
import signal
import socket
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
        assert _ready(ops) == 503  # draining: the endpoint stays up until the process exits
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


# ~2 s here (2 cores, shared): long enough to be running when SIGTERM arrives, far below the
# drain timeout. icegres has no pg_sleep.
COUNT = 600_000_000
STATEMENT = f"select count(*), sum(x) from generate_series(1, {COUNT}) as t(x)"


def test_a_running_statement_finishes_within_the_drain_timeout(tmp_path):
    """The drain lets a running statement answer in full: meanwhile /ready is 503 and the pgwire
    port refuses connections; the session then ends with 57P01, and the process exits 0 at once,
    not at the end of --drain-timeout-s."""
    started = start_icegres(["serve", "--data-dir", str(tmp_path / "data"), "--host", "127.0.0.1", "--port", "0",
                             "--ops-port", "0", "--drain-timeout-s", "60"], log_dir=tmp_path)
    proc, port, ops = started.proc, started.ports["port"], started.ports["ops_port"]
    dsn = f"host=127.0.0.1 port={port} user=icegres dbname=icegres"
    try:
        busy = psycopg.connect(dsn, autocommit=True)
        fatal: list[tuple[str | None, str | None]] = []  # an error that arrives while idle is a notice
        busy.add_notice_handler(lambda d: fatal.append((d.sqlstate, d.message_primary)))
        outcome: list[BaseException | object] = []

        def statement() -> None:
            try:
                outcome.append(busy.execute(STATEMENT).fetchone())
            except BaseException as exc:  # noqa: BLE001
                outcome.append(exc)
            outcome.append(time.monotonic())

        runner = threading.Thread(target=statement)
        runner.start()
        time.sleep(0.3)
        assert not outcome, "the statement ended before SIGTERM: make it longer"
        sent = time.monotonic()
        proc.send_signal(signal.SIGTERM)
        while (status := _ready(ops)) == 200 and time.monotonic() - sent < 2:
            time.sleep(0.01)  # the signal is handled on the server's next loop turn
        assert status == 503 and not outcome, (status, outcome)
        with pytest.raises(ConnectionRefusedError):
            socket.create_connection(("127.0.0.1", port), timeout=2).close()
        assert _ready(ops) == 503 and not outcome  # the statement is still running

        runner.join(60)
        assert outcome[0] == (COUNT, COUNT * (COUNT + 1) // 2), outcome
        answered = outcome[1]
        # The FATAL follows the statement's ReadyForQuery. If libpq reads both in one go (a busy
        # machine wakes the client late), it parses the FATAL while idle and hands it to the
        # notice processor (fe-protocol3.c: "ERROR messages are handled using the notice
        # processor"), so the next statement finds only the closed socket. PostgreSQL's own
        # FATAL after a statement races the same way; either way the client must have got 57P01.
        with pytest.raises(psycopg.OperationalError) as ended:
            busy.execute("select 1")
        if not isinstance(ended.value, psycopg.errors.AdminShutdown):
            assert "server closed the connection unexpectedly" in str(ended.value), ended.value
            assert fatal == [("57P01", "terminating connection due to administrator command")], (fatal, ended.value)
        else:
            assert "terminating connection due to administrator command" in str(ended.value)
        assert proc.wait(timeout=30) == 0
        exited = time.monotonic()
        assert exited - answered < 5, (exited - sent, answered - sent)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()


def test_a_running_flight_sql_query_finishes_within_the_drain_timeout(tmp_path):
    """Flight SQL drains as pgwire does: an ADBC client's query running when SIGTERM arrives gets
    its full result (its GetFlightInfo runs on, its DoGet is still served); meanwhile the port
    refuses new connections and a new call on an open connection is refused with UNAVAILABLE
    (57P03); the process then exits 0 at once, not at the end of --drain-timeout-s."""
    import adbc_driver_flightsql.dbapi as adbc
    import adbc_driver_manager

    started = start_icegres(["serve", "--data-dir", str(tmp_path / "data"), "--host", "127.0.0.1", "--port", "0",
                             "--flight-port", "0", "--ops-port", "0", "--drain-timeout-s", "60"], log_dir=tmp_path)
    proc, flight, ops = started.proc, started.ports["flight_port"], started.ports["ops_port"]
    uri = f"grpc://127.0.0.1:{flight}"
    try:
        busy = adbc.connect(uri, autocommit=True)
        idle = adbc.connect(uri, autocommit=True)
        with idle.cursor() as cur:  # its channel is open before the drain
            cur.execute("select 1")
            assert cur.fetchall() == [(1,)]
        outcome: list[BaseException | object] = []

        def statement() -> None:
            try:
                with busy.cursor() as cur:
                    cur.execute(STATEMENT)
                    outcome.append(cur.fetchall())
            except BaseException as exc:  # noqa: BLE001
                outcome.append(exc)
            outcome.append(time.monotonic())

        runner = threading.Thread(target=statement)
        runner.start()
        time.sleep(0.3)
        assert not outcome, "the statement ended before SIGTERM: make it longer"
        sent = time.monotonic()
        proc.send_signal(signal.SIGTERM)
        while (status := _ready(ops)) == 200 and time.monotonic() - sent < 2:
            time.sleep(0.01)
        assert status == 503 and not outcome, (status, outcome)
        with pytest.raises(ConnectionRefusedError):
            socket.create_connection(("127.0.0.1", flight), timeout=2).close()
        with idle.cursor() as cur, pytest.raises(adbc_driver_manager.Error,
                                                 match=r"shutting down \(SQLSTATE 57P03\) \(Unavailable"):
            cur.execute("select 2")
        assert not outcome  # the statement is still running

        runner.join(60)
        assert outcome[0] == [(COUNT, COUNT * (COUNT + 1) // 2)], outcome
        answered = outcome[1]
        assert proc.wait(timeout=30) == 0
        exited = time.monotonic()
        assert exited - answered < 5, (exited - sent, answered - sent)
        for conn in (busy, idle):
            with contextlib.suppress(adbc_driver_manager.Error):
                conn.close()
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
