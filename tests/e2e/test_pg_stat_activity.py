"""pg_stat_activity and the backend signals, with psycopg against a real server."""

from __future__ import annotations

import threading
import time

import psycopg
import pytest

from tests.support.icegres_server import running_icegres

pytestmark = pytest.mark.e2e


@pytest.fixture(scope="module")
def srv(tmp_path_factory):
    base = tmp_path_factory.mktemp("activity")
    pwfile = base / "users"
    pwfile.write_text("root:r00t\nalice:a1ice\nbob:b0b\n")
    with running_icegres(base / "data", args=("--password-file", str(pwfile)), user="root", password="r00t") as s:
        yield s


def test_every_session_is_listed_with_its_state(srv):
    with psycopg.connect(srv.dsn(user="alice", password="a1ice", application_name="etl")) as alice, \
            psycopg.connect(srv.dsn()) as root:
        alice.execute("select 42")
        alice_pid = alice.info.backend_pid
        rows = root.execute("select pid, datname, usename, application_name, client_addr, client_port, state, "
                            "query, backend_type, backend_start is not null, query_start is not null, "
                            "wait_event_type, wait_event from pg_stat_activity order by pid").fetchall()
        by_pid = {r[0]: r for r in rows}
        assert set(by_pid) >= {alice_pid, root.info.backend_pid}
        a = by_pid[alice_pid]
        # psycopg opened a transaction for `select 42` (not autocommit): idle in transaction
        assert a[1:5] == ("icegres", "alice", "etl", "127.0.0.1")
        assert a[5] > 0 and a[6] == "idle in transaction" and a[7] == "select 42"
        # PostgreSQL 15: a session waiting for its client's next message waits on ClientRead
        assert a[8:] == ("client backend", True, True, "Client", "ClientRead")
        me = by_pid[root.info.backend_pid]
        assert me[6] == "active" and "pg_stat_activity" in me[7]
        assert me[11:] == (None, None)  # running, waiting on nothing


def test_idle_and_active_wait_events(srv):
    """PostgreSQL 15's wait events: an idle session waits on Client/ClientRead; one running a
    statement (computing, not waiting on a lock or I/O PostgreSQL would name) shows NULL."""
    with psycopg.connect(srv.dsn(user="alice", password="a1ice"), autocommit=True) as alice, \
            psycopg.connect(srv.dsn(), autocommit=True) as root:
        pid = alice.info.backend_pid
        query = "select state, wait_event_type, wait_event, query from pg_stat_activity where pid = %s"
        alice.execute("select 1")
        assert root.execute(query, (pid,)).fetchone() == ("idle", "Client", "ClientRead", "select 1")

        long_query = "select count(*) from generate_series(1, 2000000000)"
        errors: list[BaseException] = []

        def run() -> None:
            try:
                alice.execute(long_query)
            except BaseException as exc:  # noqa: BLE001
                errors.append(exc)

        runner = threading.Thread(target=run)
        runner.start()
        deadline = time.monotonic() + 10
        while (row := root.execute(query, (pid,)).fetchone())[0] != "active" and time.monotonic() < deadline:
            time.sleep(0.05)
        assert row == ("active", None, None, long_query)
        root.execute("select pg_cancel_backend(%s)", (pid,))
        runner.join(30)
        assert isinstance(errors[0], psycopg.errors.QueryCanceled), errors
        assert root.execute(query, (pid,)).fetchone()[:3] == ("idle", "Client", "ClientRead")


def test_others_query_is_hidden_from_non_superusers(srv):
    with psycopg.connect(srv.dsn(user="alice", password="a1ice"), autocommit=True) as alice, \
            psycopg.connect(srv.dsn(user="bob", password="b0b"), autocommit=True) as bob:
        alice.execute("select 'alice secret query'")
        row = bob.execute("select usename, query, state from pg_stat_activity where pid = %s",
                          (alice.info.backend_pid,)).fetchone()
        assert row == ("alice", "<insufficient privilege>", None)


def test_cancel_and_terminate_backend(srv):
    with psycopg.connect(srv.dsn(user="alice", password="a1ice"), autocommit=True) as alice, \
            psycopg.connect(srv.dsn(user="bob", password="b0b"), autocommit=True) as bob, \
            psycopg.connect(srv.dsn(), autocommit=True) as root:
        pid = alice.info.backend_pid
        with pytest.raises(psycopg.errors.InsufficientPrivilege,
                           match="must be a member of the role whose query is being canceled"):
            bob.execute("select pg_cancel_backend(%s)", (pid,))
        with pytest.raises(psycopg.errors.InsufficientPrivilege,
                           match="must be a superuser to terminate superuser process"):
            bob.execute("select pg_terminate_backend(%s)", (root.info.backend_pid,))
        assert root.execute("select pg_cancel_backend(999999)").fetchone() == (False,)

        errors: list[BaseException] = []

        def long_query() -> None:
            try:
                alice.execute("select count(*) from generate_series(1, 2000000000)")
            except BaseException as exc:  # noqa: BLE001
                errors.append(exc)

        t = threading.Thread(target=long_query)
        t.start()
        time.sleep(1.0)
        assert root.execute("select pg_cancel_backend(%s)", (pid,)).fetchone() == (True,)
        t.join(30)
        assert isinstance(errors[0], psycopg.errors.QueryCanceled)
        assert alice.execute("select 1").fetchone() == (1,)  # the session lives on

        assert root.execute("select pg_terminate_backend(%s)", (pid,)).fetchone() == (True,)
        with pytest.raises(psycopg.OperationalError, match="terminating connection due to administrator command"):
            for _ in range(50):
                alice.execute("select 1")
                time.sleep(0.05)
        gone = root.execute("select count(*) from pg_stat_activity where pid = %s", (pid,)).fetchone()
        assert gone == (0,)
