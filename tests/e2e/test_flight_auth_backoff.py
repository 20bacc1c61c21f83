"""The failed-login back-off over Arrow Flight SQL (docs/security.md, "Failed-login back-off").

Wrong Basic passwords (the ADBC driver's Handshake) and bearer tokens this server never issued
(pyarrow.flight: one call per guess, where ADBC makes three) count against their client address in
the table pgwire's logins use (one `icegres serve` process, both front ends), and each answer to
that address waits its turn. A login from another loopback address (127.0.0.2, through a grpclib
channel bound there: neither driver can choose its source address) is not delayed.
"""

from __future__ import annotations

import asyncio
import threading
import time

import adbc_driver_flightsql.dbapi as adbc
import adbc_driver_manager
import psycopg
import pyarrow.flight
import pytest
from grpclib.client import Channel
from grpclib.exceptions import GRPCError
from grpclib.protocol import H2Protocol

from icegres.protocol.flightsql.client import FlightSqlClient
from tests.support.icegres_server import running_icegres

pytestmark = [pytest.mark.e2e, pytest.mark.timeout(120)]

PASSWORD = "alice-secret-2"
AUTH_HEADER = "adbc.flight.sql.authorization_header"
# The back-off's schedule here: 10 ms doubling to 1 s. Small enough that the test is quick, with
# a cap large enough that an address under back-off is told apart from one that is not.
FIRST_S, MAX_S = 0.010, 1.0


def delay_s(failures: int) -> float:
    """What the answer after `failures` consecutive failures waits (protocol/backoff.py)."""
    return min(MAX_S, FIRST_S * 2 ** (failures - 1)) if failures > 0 else 0.0


@pytest.fixture(scope="module")
def both(tmp_path_factory):
    """`icegres serve` with Flight SQL on, one password user, the back-off above."""
    base = tmp_path_factory.mktemp("flight-backoff")
    pwfile = base / "users"
    pwfile.write_text(f"alice:{PASSWORD}\n")
    args = ("--password-file", str(pwfile), "--flight-port", "0",
            "--auth-failure-delay-ms", str(int(FIRST_S * 1000)), "--auth-failure-delay-max-ms", str(int(MAX_S * 1000)))
    with running_icegres(base / "data", args=args, user="alice", password=PASSWORD) as srv:
        yield srv


def adbc_login(srv, password: str) -> tuple:
    """Log in over ADBC from 127.0.0.1 (Basic credentials, the Handshake) and run a query."""
    kwargs = {"username": "alice", "password": password}
    with adbc.connect(f"grpc://127.0.0.1:{srv.flight_port}", db_kwargs=kwargs, autocommit=True) as c, \
            c.cursor() as cur:
        cur.execute("select current_user")
        return cur.fetchone()


def refused(srv, password: str) -> str:
    """A wrong password's refusal over ADBC: "28P01" when it is the expected one."""
    try:
        adbc_login(srv, password)
    except adbc_driver_manager.Error as exc:
        text = str(exc)
        if "UNAUTHENTICATED" in text and 'password authentication failed for user "alice"' in text:
            return "28P01"
        return text
    return "logged in"


def bearer_refused(srv, token: str) -> str:
    """One call with a bearer token over pyarrow.flight: "28000" when refused as expected."""
    client = pyarrow.flight.FlightClient(f"grpc://127.0.0.1:{srv.flight_port}")
    options = pyarrow.flight.FlightCallOptions(headers=[(b"authorization", f"Bearer {token}".encode())])
    try:
        list(client.list_flights(options=options))
    except pyarrow.flight.FlightUnauthenticatedError as exc:
        return "28000" if "invalid or expired bearer token" in str(exc) else str(exc)
    finally:
        client.close()
    return "accepted"


class SourceChannel(Channel):
    """A grpclib channel whose connection leaves from `source` (another loopback address)."""

    def __init__(self, host: str, port: int, source: str) -> None:
        super().__init__(host, port)
        self._source = source

    async def _create_connection(self) -> H2Protocol:
        _, protocol = await self._loop.create_connection(self._protocol_factory, self._host, self._port,
                                                         local_addr=(self._source, 0))
        return protocol


def query_from(srv, source: str, password: str) -> list:
    """`select current_user` over Flight SQL with Basic credentials, from `source`."""

    async def run() -> list:
        client = FlightSqlClient("127.0.0.1", srv.flight_port, username="alice", password=password)
        client.close()
        client.channel = SourceChannel("127.0.0.1", srv.flight_port, source)
        async with client:
            return (await client.query("select current_user")).to_pylist()

    return asyncio.run(run())


def test_wrong_flight_logins_back_off_per_address_while_another_address_logs_in_at_once(both):
    assert adbc_login(both, PASSWORD) == ("alice",)  # 127.0.0.1 starts with a clean slate
    attempts = 10
    # Answers to one address go out one after the other, the n-th at least delay_s(k) after the
    # (n-1)-th, k the failures recorded when the n-th was booked. One guesser alone makes that
    # n - 1; with two at once the n-th may be booked while the other's answer is on its way, so k
    # is at least n - 2: the floor is the schedule less its last step.
    floor_s = sum(delay_s(n) for n in range(1, attempts - 1))  # 2.27 s
    failures: list[str] = []
    bystander: list[float] = []

    def other_address() -> None:
        while len(failures) < 8:  # the storm's answers are now a second apart
            time.sleep(0.01)
        started = time.monotonic()
        assert query_from(both, "127.0.0.2", PASSWORD) == [{"current_user": "alice"}]
        bystander.append(time.monotonic() - started)

    started = time.monotonic()
    side = threading.Thread(target=other_address)
    side.start()
    # Two guessers at once from 127.0.0.1, one with wrong passwords, one with bearer tokens this
    # server never issued: both kinds count, against the same address (the floor needs both).
    guessers = [
        threading.Thread(target=lambda: [failures.append(refused(both, f"wrong-{n}")) for n in range(attempts // 2)]),
        threading.Thread(target=lambda: [failures.append(bearer_refused(both, f"guess-{n}"))
                                         for n in range(attempts // 2)]),
    ]
    for t in guessers:
        t.start()
    for t in guessers:
        t.join()
    elapsed = time.monotonic() - started
    side.join()
    assert sorted(failures) == ["28000"] * (attempts // 2) + ["28P01"] * (attempts // 2)
    assert elapsed >= floor_s, (elapsed, floor_s)
    assert bystander and bystander[0] < 0.5, bystander
    # The bystander's calls do leave from 127.0.0.2: a refusal there is logged with that peer.
    with pytest.raises(GRPCError, match="28P01"):
        query_from(both, "127.0.0.2", "wrong-from-elsewhere")
    both.wait_log("from peer:127.0.0.2:")
    assert query_from(both, "127.0.0.2", PASSWORD) == [{"current_user": "alice"}]
    # A right password from the guessing address waits its turn (it is not told apart by coming
    # back sooner), then clears the address: the next failure is answered at once.
    assert adbc_login(both, PASSWORD) == ("alice",)
    t0 = time.monotonic()
    assert refused(both, "wrong-again") == "28P01"
    assert time.monotonic() - t0 < 0.5
    assert adbc_login(both, PASSWORD) == ("alice",)


def test_pgwire_and_flight_sql_failures_count_together(both):
    """One table for both front ends: switching protocols buys a guesser nothing."""
    assert adbc_login(both, PASSWORD) == ("alice",)  # 127.0.0.1 starts with a clean slate
    flight_failures = 8
    for n in range(flight_failures):
        assert refused(both, f"wrong-{n}") == "28P01"
    # The pgwire answer is booked a whole delay (1 s) after the last Flight SQL one, of which
    # the client's turnaround between the two may have used some; a table of pgwire's own
    # would answer it at once.
    t0 = time.monotonic()
    with pytest.raises(psycopg.OperationalError, match='password authentication failed for user "alice"'):
        psycopg.connect(both.dsn(password="wrong-over-pgwire"), connect_timeout=30).close()
    assert time.monotonic() - t0 >= delay_s(flight_failures) / 2
    # And the other way round: a pgwire login clears the address for Flight SQL too.
    with psycopg.connect(both.dsn(), connect_timeout=30):
        pass
    t0 = time.monotonic()
    assert refused(both, "wrong-after-pgwire-login") == "28P01"
    assert time.monotonic() - t0 < 0.5
    assert adbc_login(both, PASSWORD) == ("alice",)
