"""Session settings (GUCs): defaults, validation, and which ones are reported to the client."""

from __future__ import annotations

import re
from dataclasses import dataclass

from icegres.pg.errors import INVALID_PARAMETER_VALUE, SYNTAX_ERROR, UNDEFINED_OBJECT, PgError

# Sent as ParameterStatus at startup and again whenever they change: psql and psqlODBC fall back to
# pre-PG12 catalog queries without server_version, psycopg2 fails without client_encoding, and pgjdbc
# silently decodes binary timestamps wrong without integer_datetimes=on (CLIENTS.md).
REPORTED = (
    "application_name", "client_encoding", "DateStyle", "default_transaction_read_only",
    "in_hot_standby", "integer_datetimes", "IntervalStyle", "is_superuser", "server_encoding",
    "server_version", "session_authorization", "standard_conforming_strings", "TimeZone",
)
_REPORTED_BY_KEY = {name.lower(): name for name in REPORTED}


def canonical_name(key: str) -> str:
    """A setting's name as PostgreSQL spells it (`DateStyle`, `TimeZone`), for a lower-case key."""
    return _REPORTED_BY_KEY.get(key, key)

# Left alone by RESET ALL (GUC_NO_RESET_ALL): whom the session acts as.
NO_RESET_ALL = frozenset({"session_authorization", "role"})

READ_ONLY = {
    "server_version", "server_encoding", "integer_datetimes", "in_hot_standby", "is_superuser",
    "session_authorization", "server_version_num", "max_identifier_length", "lc_collate",
    "lc_ctype", "block_size", "max_index_keys", "max_function_args", "segment_size", "ssl",
}


def defaults(server_version: str, user: str, *, ssl: bool = False) -> dict[str, str]:
    """A session's settings before its startup packet's (`ssl`: the server has TLS configured,
    which PostgreSQL's server-wide `ssl` reports, whatever this connection uses)."""
    return {
        "application_name": "",
        "client_encoding": "UTF8",
        "datestyle": "ISO, MDY",
        "default_transaction_read_only": "off",
        "in_hot_standby": "off",
        "integer_datetimes": "on",
        "intervalstyle": "postgres",
        "is_superuser": "on",
        "server_encoding": "UTF8",
        "server_version": server_version,
        "server_version_num": _version_num(server_version),
        "session_authorization": user,
        "role": "none",  # SET ROLE's: current_user is this role unless "none"
        "standard_conforming_strings": "on",
        "timezone": "UTC",
        "search_path": '"$user", public',
        "extra_float_digits": "1",
        "statement_timeout": "0",
        "lock_timeout": "0",
        "idle_in_transaction_session_timeout": "0",
        # the level in force: every transaction reads one snapshot (_isolation)
        "transaction_isolation": "repeatable read",
        "default_transaction_isolation": "repeatable read",
        "transaction_read_only": "off",
        "transaction_deferrable": "off",
        "default_transaction_deferrable": "off",
        "max_identifier_length": "63",
        "lc_collate": "C.UTF-8",
        "lc_ctype": "C.UTF-8",
        "lc_messages": "C.UTF-8",
        "lc_monetary": "C.UTF-8",
        "lc_numeric": "C.UTF-8",
        "lc_time": "C.UTF-8",
        "jit": "off",
        "default_table_access_method": "heap",
        "bytea_output": "hex",
        "max_index_keys": "32",
        "max_function_args": "100",
        "block_size": "8192",
        "segment_size": "131072",
        "client_min_messages": "notice",
        "synchronous_commit": "on",
        "work_mem": "4MB",
        "row_security": "on",
        "escape_string_warning": "on",
        "backslash_quote": "safe_encoding",
        "array_nulls": "on",
        "geqo": "on",
        "enable_seqscan": "on",
        "cursor_tuple_fraction": "0.1",
        "xmloption": "content",
        "timezone_abbreviations": "Default",
        "check_function_bodies": "on",
        "plan_cache_mode": "auto",
        "ssl": "on" if ssl else "off",
        "password_encryption": "scram-sha-256",
        "max_connections": "100",
        "default_text_search_config": "pg_catalog.english",
        # pg_dump sets these on every connection
        "synchronize_seqscans": "on",
        "quote_all_identifiers": "off",
        "idle_session_timeout": "0",
        "default_tablespace": "",
        "lo_compat_privileges": "off",
    }


def _version_num(version: str) -> str:
    major, _, minor = version.partition(".")
    return f"{int(major)}{int(minor or 0):04d}"


def reported_name(key: str) -> str | None:
    """The ParameterStatus spelling of a setting, if it is one clients are told about."""
    return _REPORTED_BY_KEY.get(key)


def startup_options(options: str) -> list[tuple[str, str]]:
    """The settings in a startup packet's `options` (`PGOPTIONS='-c search_path=tpch'`), as
    PostgreSQL reads them (pg_split_opts, then process_postgres_switches): words split on
    whitespace, a backslash taking the next character literally; `-c name=value` or
    `--name=value`, dashes in a name read as underscores. Anything else is an error."""
    words: list[str] = []
    word: list[str] = []
    started = False
    chars = iter(options)
    for ch in chars:
        if ch.isspace():
            if started:
                words.append("".join(word))
                word, started = [], False
            continue
        if ch == "\\":
            ch = next(chars, "")
        word.append(ch)
        started = True
    if started:
        words.append("".join(word))
    out: list[tuple[str, str]] = []
    i = 0
    while i < len(words):
        w = words[i]
        if w == "-c" or (w.startswith("-c") and len(w) > 2):
            arg = w[2:] if len(w) > 2 else (words[i + 1] if i + 1 < len(words) else None)
            i += 1 if len(w) > 2 else 2
            if arg is None:
                raise PgError(SYNTAX_ERROR, 'invalid command-line argument for server process: -c',
                              hint='Try "postgres --help" for more information.')
            flag = "-c "
        elif w.startswith("--") and len(w) > 2:
            arg, flag = w[2:], "--"
            i += 1
        else:
            raise PgError(SYNTAX_ERROR, f"invalid command-line argument for server process: {w}",
                          hint='Try "postgres --help" for more information.')
        name, eq, value = arg.partition("=")
        if not eq:
            raise PgError(SYNTAX_ERROR, f"{flag}{arg} requires a value")
        out.append((name.replace("-", "_").lower(), value))
    return out


@dataclass(frozen=True)
class Change:
    key: str
    value: str


def validate(key: str, value: str | None, current: dict[str, str], initial: dict[str, str]) -> Change:
    """The stored value for `SET key = value` (None means DEFAULT), or a PgError."""
    if key in READ_ONLY:
        raise PgError("55P02", f'parameter "{key}" cannot be changed')
    if key not in current and "." not in key:
        raise PgError(UNDEFINED_OBJECT, f'unrecognized configuration parameter "{key}"')
    if value is None:
        return Change(key, initial.get(key, ""))
    check = _VALIDATORS.get(key)
    return Change(key, check(value) if check else value)


def _client_encoding(value: str) -> str:
    # asyncpg sends 'utf-8' with the quotes; PostgreSQL accepts any spelling of UTF8.
    if value.strip("'\"").replace("-", "").replace("_", "").upper() in ("UTF8", "UNICODE"):
        return "UTF8"
    raise PgError(INVALID_PARAMETER_VALUE, f'invalid value for parameter "client_encoding": "{value}"',
                  detail="icegres speaks UTF8 only")


def _timezone(value: str) -> str:
    import zoneinfo

    v = value.strip()
    if v.upper() in ("UTC", "GMT", "Z", "ZULU", "UCT"):
        return "UTC"
    if re.fullmatch(r"[+-]?\d{1,2}(:\d\d)?", v):
        return v  # POSIX-style offsets; rendering treats them as fixed offsets
    try:
        zoneinfo.ZoneInfo(v)
    except Exception:
        raise PgError(INVALID_PARAMETER_VALUE, f'invalid value for parameter "TimeZone": "{value}"') from None
    return v


def _datestyle(value: str) -> str:
    parts = {p.strip().upper() for p in value.split(",")}
    if parts - {"ISO", "MDY", "DMY", "YMD", "US", "EUROPEAN", "NONEURO", "NONEUROPEAN"}:
        raise PgError(INVALID_PARAMETER_VALUE, f'invalid value for parameter "DateStyle": "{value}"',
                      detail="icegres renders dates in ISO style only")
    order = "DMY" if parts & {"DMY", "EUROPEAN"} else "YMD" if "YMD" in parts else "MDY"
    return f"ISO, {order}"


def _int(name: str, lo: int, hi: int):
    def check(value: str) -> str:
        try:
            n = int(value)
        except ValueError:
            raise PgError(INVALID_PARAMETER_VALUE, f'invalid value for parameter "{name}": "{value}"') from None
        if not lo <= n <= hi:
            raise PgError(INVALID_PARAMETER_VALUE, f"{n} is outside the valid range for parameter \"{name}\" ({lo} .. {hi})")
        return str(n)

    return check


_DURATION = re.compile(r"^\s*(-?\d+(?:\.\d*)?|-?\.\d+)\s*(us|ms|s|min|h|d)?\s*$")
_UNIT_MS = {None: 1, "us": 0.001, "ms": 1, "s": 1000, "min": 60_000, "h": 3_600_000, "d": 86_400_000}
_SHOWN_UNITS = (("d", 86_400_000), ("h", 3_600_000), ("min", 60_000), ("s", 1000))
_INT_MAX = 2**31 - 1


def duration_ms(value: str, name: str = "statement_timeout") -> int:
    """A time setting in milliseconds, read as PostgreSQL's parse_int does (units case-sensitive,
    a bare number in ms, fractions rounded)."""
    m = _DURATION.match(value)
    if not m:
        hint = 'Valid units for this parameter are "us", "ms", "s", "min", "h", and "d".' \
            if re.match(r"^\s*-?[\d.]+\s*\S", value) else None
        raise PgError(INVALID_PARAMETER_VALUE, f'invalid value for parameter "{name}": "{value}"', hint=hint)
    ms = round(float(m.group(1)) * _UNIT_MS[m.group(2)])
    if not 0 <= ms <= _INT_MAX:
        raise PgError(INVALID_PARAMETER_VALUE,
                      f'{ms} ms is outside the valid range for parameter "{name}" (0 .. {_INT_MAX})')
    return ms


def show_duration(ms: int) -> str:
    """How SHOW prints a time setting: in the largest unit that holds it whole (`500ms`, `1min`)."""
    if ms == 0:
        return "0"
    for unit, size in _SHOWN_UNITS:
        if ms % size == 0:
            return f"{ms // size}{unit}"
    return f"{ms}ms"


def _timeout(name: str):
    def check(value: str) -> str:
        return show_duration(duration_ms(value, name))

    return check


def _isolation(name: str):
    def check(value: str) -> str:
        """The level a transaction runs at when asked for `value`: every transaction reads one
        snapshot (PostgreSQL's REPEATABLE READ), so the two weaker levels get that one, as the
        standard allows; SHOW reports the level in force."""
        v = " ".join(value.lower().split())
        if v not in ("read uncommitted", "read committed", "repeatable read", "serializable"):
            raise PgError(INVALID_PARAMETER_VALUE, f'invalid value for parameter "{name}": "{value}"')
        return "serializable" if v == "serializable" else "repeatable read"

    return check


def _intervalstyle(value: str) -> str:
    if value.lower() != "postgres":
        raise PgError(INVALID_PARAMETER_VALUE, f'invalid value for parameter "IntervalStyle": "{value}"',
                      detail="icegres renders intervals in postgres style only")
    return "postgres"


def _on_off(name: str):
    def check(value: str) -> str:
        v = value.lower()
        if v in ("on", "true", "yes", "1", "t"):
            return "on"
        if v in ("off", "false", "no", "0", "f"):
            return "off"
        raise PgError(INVALID_PARAMETER_VALUE, f'parameter "{name}" requires a Boolean value')

    return check


_VALIDATORS = {
    "client_encoding": _client_encoding,
    "timezone": _timezone,
    "datestyle": _datestyle,
    "extra_float_digits": _int("extra_float_digits", -15, 3),
    "statement_timeout": _timeout("statement_timeout"),
    "lock_timeout": _timeout("lock_timeout"),
    "idle_in_transaction_session_timeout": _timeout("idle_in_transaction_session_timeout"),
    "transaction_isolation": _isolation("transaction_isolation"),
    "default_transaction_isolation": _isolation("default_transaction_isolation"),
    "intervalstyle": _intervalstyle,
    "standard_conforming_strings": _on_off("standard_conforming_strings"),
    "jit": _on_off("jit"),
    "synchronize_seqscans": _on_off("synchronize_seqscans"),
    "quote_all_identifiers": _on_off("quote_all_identifiers"),
    "idle_session_timeout": _timeout("idle_session_timeout"),
    "transaction_read_only": _on_off("transaction_read_only"),
    "default_transaction_read_only": _on_off("default_transaction_read_only"),
}
