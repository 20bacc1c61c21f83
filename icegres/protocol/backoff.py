"""Failed-login back-off per client address: password guessing from one address slows down
exponentially, without slowing anyone else.

Both front ends answer logins through it, and `icegres serve` gives them one table: failures over
pgwire and over Flight SQL count together, so a guesser gains nothing by switching ports. What the
authentication code calls, once it knows the result and before it answers (PostgreSQL's
auth_delay module sleeps at the same point, but a fixed time and only on failure):

    await backoff.before_answer(addr)      # waits for this address's turn
    backoff.failed(addr) | backoff.succeeded(addr)   # at once, with no await in between

(Flight SQL's handlers are asyncio coroutines: they book and record with `book` and `record` at
trio's clock, which trio-asyncio's loop runs on, and wait with an asyncio sleep: flightsql/auth.py.)

The rules:

- After `n` consecutive failed logins from an address, its next answer waits
  `min(max_delay, first_delay * 2**(n-1))` (defaults 1 s doubling to 30 s); a successful login
  clears the address. An address that never failed is answered at once.
- Every answer waits, a successful one too, and answers to one address are booked one after the
  other: a guesser gains nothing from many connections at once (their answers come out at the
  same pace), and a right guess is not told apart by answering sooner. The price: a user behind
  the same address (one NAT) as a guesser waits with it.
- An IPv6 address counts by its /64 (what one host is usually given); IPv4 by the address.
- Bounded: at most ADDRESSES_MAX addresses are remembered (the least recently failed goes
  first), and an address that has not failed for FORGET_AFTER_S is forgotten.

The waiting happens in the connection's (or the call's) own task, so the event loop and other
connections never wait. The table is plain Python driven by explicit times (`book`, `record`),
so unit tests need no clock.
"""

from __future__ import annotations

import ipaddress
from collections import OrderedDict
from dataclasses import dataclass
from typing import TYPE_CHECKING

import trio

if TYPE_CHECKING:
    from icegres.config import Settings

ADDRESSES_MAX = 65_536
FORGET_AFTER_S = 900.0


@dataclass
class _Address:
    failures: int = 0
    free_at: float = 0.0  # no answer to this address goes out before this time


def address_key(addr: str) -> str:
    """What the back-off counts by: the IPv4 address, an IPv6 address's /64, else the text."""
    try:
        ip = ipaddress.ip_address(addr.split("%", 1)[0])
    except ValueError:
        return addr
    if isinstance(ip, ipaddress.IPv6Address):
        if ip.ipv4_mapped is not None:
            return str(ip.ipv4_mapped)
        return str(ipaddress.IPv6Network((ip, 64), strict=False))
    return str(ip)


class AuthBackoff:
    def __init__(self, first_delay_s: float, max_delay_s: float, *, addresses_max: int = ADDRESSES_MAX,
                 forget_after_s: float = FORGET_AFTER_S) -> None:
        self.first_delay_s = first_delay_s
        self.max_delay_s = max(max_delay_s, first_delay_s)
        self.addresses_max = addresses_max
        self.forget_after_s = forget_after_s
        self._table: OrderedDict[str, _Address] = OrderedDict()

    @classmethod
    def for_settings(cls, settings: Settings) -> AuthBackoff:
        """The back-off --auth-failure-delay-ms and --auth-failure-delay-max-ms describe."""
        return cls(settings.auth_failure_delay_ms / 1000, settings.auth_failure_delay_max_ms / 1000)

    @property
    def enabled(self) -> bool:
        return self.first_delay_s > 0

    def delay_s(self, failures: int) -> float:
        """The wait an answer owes after `failures` consecutive failures."""
        if failures <= 0 or not self.enabled:
            return 0.0
        return min(self.max_delay_s, self.first_delay_s * 2.0 ** min(failures - 1, 64))

    def book(self, addr: str, now: float) -> float:
        """The time the next answer to `addr` may go out, booked: a second answer booked before
        this one is recorded waits behind it as if this one failed."""
        entry = self._table.get(address_key(addr))
        if entry is None:
            return now  # never failed (or forgotten): nothing to wait for, nothing to book
        at = max(now, entry.free_at)
        entry.free_at = at + self.delay_s(entry.failures + 1)
        return at

    def record(self, addr: str, ok: bool, now: float) -> None:
        """The answer to `addr` was a success (`ok`) or a failure."""
        key = address_key(addr)
        if ok:
            self._table.pop(key, None)
            return
        if not self.enabled:
            return
        entry = self._table.pop(key, None) or _Address()
        entry.failures += 1
        entry.free_at = max(entry.free_at, now + self.delay_s(entry.failures))
        self._table[key] = entry  # the most recently failed last
        self._forget(now)

    def _forget(self, now: float) -> None:
        table = self._table
        while table:
            oldest_key, oldest = next(iter(table.items()))
            if len(table) <= self.addresses_max and oldest.free_at + self.forget_after_s > now:
                return
            del table[oldest_key]

    def __len__(self) -> int:
        return len(self._table)

    # --- what authentication calls (trio time) -------------------------------------------------

    async def before_answer(self, addr: str) -> None:
        """Wait until an authentication answer may go to `addr` (other tasks run meanwhile)."""
        at = self.book(addr, trio.current_time())
        if at > trio.current_time():
            await trio.sleep_until(at)

    def failed(self, addr: str) -> None:
        self.record(addr, False, trio.current_time())

    def succeeded(self, addr: str) -> None:
        self.record(addr, True, trio.current_time())
