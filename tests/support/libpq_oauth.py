"""A libpq 18 OAuth flow for tests: a bearer token handed to libpq through its documented
PQsetAuthDataHook (PQAUTHDATA_OAUTH_BEARER_TOKEN), so that psycopg, on the libpq its binary
package ships, logs in with PostgreSQL 18's OAUTHBEARER as an application with a custom flow would.

The hook is process-wide (libpq has one), so `bearer_tokens(...)` installs it for the duration of a
block and restores the default after.
"""

from __future__ import annotations

import contextlib
import ctypes
import glob
import os
from collections.abc import Iterator

PQAUTHDATA_OAUTH_BEARER_TOKEN = 1  # libpq-fe.h: PGauthData (PQAUTHDATA_PROMPT_OAUTH_DEVICE is 0)


class PGoauthBearerRequest(ctypes.Structure):
    _fields_ = [
        ("openid_configuration", ctypes.c_char_p),
        ("scope", ctypes.c_char_p),
        ("async_", ctypes.c_void_p),
        ("cleanup", ctypes.c_void_p),
        ("token", ctypes.c_void_p),
        ("user", ctypes.c_void_p),
    ]


HOOK = ctypes.CFUNCTYPE(ctypes.c_int, ctypes.c_int, ctypes.c_void_p, ctypes.c_void_p)


def psycopg_libpq() -> ctypes.CDLL:
    """The libpq psycopg runs on (its binary package's own copy): dlopen of the same file returns
    the library already loaded, so a hook set here is the one psycopg's connections call."""
    import psycopg
    import psycopg_binary

    assert psycopg.pq.__impl__ == "binary", psycopg.pq.__impl__
    libs = glob.glob(os.path.join(os.path.dirname(psycopg_binary.__file__), os.pardir,
                                  "psycopg_binary.libs", "libpq-*.so*"))
    assert libs, "psycopg_binary ships no libpq"
    return ctypes.CDLL(os.path.realpath(libs[0]))


@contextlib.contextmanager
def bearer_tokens(token: str, seen: list[tuple[str, str]] | None = None) -> Iterator[None]:
    """libpq answers every OAuth token request with `token`; `seen` collects what the server
    pointed libpq at (discovery URI, scope)."""
    lib = psycopg_libpq()
    assert lib.PQlibVersion() >= 180000, lib.PQlibVersion()
    buffer = ctypes.create_string_buffer(token.encode())  # libpq copies it before we return

    def hook(kind: int, conn: int, data: int) -> int:
        if kind != PQAUTHDATA_OAUTH_BEARER_TOKEN:
            return lib.PQdefaultAuthDataHook(kind, ctypes.c_void_p(conn), ctypes.c_void_p(data))
        request = PGoauthBearerRequest.from_address(data)
        if seen is not None:
            seen.append(((request.openid_configuration or b"").decode(), (request.scope or b"").decode()))
        request.token = ctypes.cast(buffer, ctypes.c_void_p)
        return 1

    callback = HOOK(hook)
    lib.PQsetAuthDataHook.argtypes = [ctypes.c_void_p]
    lib.PQdefaultAuthDataHook.argtypes = [ctypes.c_int, ctypes.c_void_p, ctypes.c_void_p]
    lib.PQsetAuthDataHook(ctypes.cast(callback, ctypes.c_void_p))
    try:
        yield
    finally:
        lib.PQsetAuthDataHook(None)  # NULL restores libpq's default hook, before `callback` goes
