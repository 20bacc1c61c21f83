"""ErrorResponse fields encoded in the worker thread that raised the error, where its message is big.

PostgreSQL quotes a value it cannot read whole (`invalid input syntax for type integer: "<50
MB>"`), and encoding that on the event loop (encode, strip NULs, frame: copies of 50 MB) stalled
every session for 0.3-0.8 s (issue 26). A job of the session's runs under `encoding_ahead`; the
fields it makes are kept beside what they were made from (`messages.said`), so an error changed
since (a position given on the loop) is encoded afresh. (A module of its own: the thread starts
here, and the engine's answer comes back up through messages.py without re-entering it.)
"""

from __future__ import annotations

import weakref
from collections.abc import Callable
from typing import Any

from icegres.pg.errors import PgError

AHEAD_CHARS = 64 * 1024
_ahead: weakref.WeakKeyDictionary[PgError, tuple[bytes, tuple[Any, ...]]] = weakref.WeakKeyDictionary()


def encoding_ahead(encode: Callable[[PgError], bytes], said: Callable[[PgError], tuple[Any, ...]],
                   fn: Callable[..., Any], *args: Any) -> Any:
    """`fn(*args)`, in a worker thread; a PgError it raises with a big message leaves with its
    fields encoded (`encode`), for `take`."""
    try:
        return fn(*args)
    except PgError as err:
        if len(err.message) > AHEAD_CHARS:
            _ahead[err] = (encode(err), said(err))
        raise


def take(err: PgError, now: tuple[Any, ...]) -> bytes | None:
    """The fields encoded ahead for `err` if it still says what it said then (`now`), once."""
    ahead = _ahead.pop(err, None)
    return ahead[0] if ahead is not None and ahead[1] == now else None
