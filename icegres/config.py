"""One typed settings object: flags > environment (ICEGRES_*) > TOML config file > defaults.

Every option is declared once in OPTIONS; the command line flags, the environment twins, the config
file keys and docs/configuration.md (checked by a unit test) all come from that table.
"""

from __future__ import annotations

import argparse
import dataclasses
import ipaddress
import os
import re
import tomllib
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from icegres.pg.scram import MECHANISM as _SCRAM
from icegres.pg.scram import Verifier, make_verifier, parse_verifier

SCRAM_PREFIX = _SCRAM + "$"
DEFAULT_PORT = 5439
DEFAULT_DATABASE = "icegres"


@dataclass(frozen=True)
class Option:
    key: str  # config-file key and attribute name; flag is --key-with-dashes, env ICEGRES_KEY
    default: Any
    help: str
    kind: type = str
    secret: bool = False  # never printed, logged or echoed in errors

    @property
    def flag(self) -> str:
        return "--" + self.key.replace("_", "-")

    @property
    def env(self) -> str:
        return "ICEGRES_" + self.key.upper()


OPTIONS: tuple[Option, ...] = (
    Option("data_dir", ".icegres", "embedded lakehouse directory: SQLite catalog + warehouse; also the local cache directory"),
    Option("host", "127.0.0.1", "listen address; a non-loopback address requires passwords, and TLS (--tls-cert/--tls-key) unless --allow-plaintext"),
    Option("port", DEFAULT_PORT, "Postgres wire listen port (0 = any free port: see --ports-file)", int),
    Option("flight_port", None, "Arrow Flight SQL listen port: `serve` also serves Flight SQL there when set; `flight-serve --port` sets it (default 50051)", int),
    Option("ops_port", None, "HTTP operations port (same --host): GET /health (503 with the reasons when the write tail is poisoned, the quorum writer was fenced or lost its majority), /ready (200 once serving), /metrics (Prometheus text of the write ladder's counters); unset = off", int),
    Option("ports_file", None, "write the ports this process bound (--port, --flight-port, --ops-port; a keeper's --port) to this file as JSON with its pid, once bound and before it serves: how a script learns the ports of a server started with port 0"),
    Option("standby", False, "warm standby: start, open the lake, then wait for SIGUSR1 before winning the writer term, replaying and serving (SIGTERM before it: exit); `icegres supervise --warm-standby` keeps one ready to promote", bool),
    Option("result_compression", "none", "Flight SQL result bodies: none, or zstd (Arrow IPC buffers ZSTD-compressed in worker threads: about half the bytes for more CPU; pays off on slow links, not on loopback)"),
    Option("tls_cert", None, "PEM certificate (chain) file, with --tls-key: pgwire answers SSLRequest with TLS and accepts PostgreSQL 17's direct TLS (ALPN postgresql), and the Flight SQL port serves grpc+tls://"),
    Option("tls_key", None, "PEM private key file of --tls-cert"),
    Option("tls_required", False, "refuse pgwire clients that do not use TLS (28000, as a hostssl-only pg_hba.conf does; requires --tls-cert)", bool),
    Option("allow_plaintext", False, "serve a non-loopback --host without TLS (passwords and queries cross the network in the clear)", bool),
    Option("database", DEFAULT_DATABASE, "the database name clients connect to"),
    Option("branch", None, "serve a branch: every session starts with icegres.branch set to it, so unqualified reads and writes of each table that has that branch go to it (a preview environment; docs/time-travel.md)"),
    Option("password_file", None, "file of user:password or user:SCRAM-SHA-256$<iter>:<salt>$<StoredKey>:<ServerKey> lines (PostgreSQL's verifier format; plain passwords are hashed at load and not kept); with it (or ICEGRES_USERS, or --jwt-jwks) clients must log in"),
    Option("users", None, "user:password[,user:password] (a password may be a SCRAM-SHA-256$... verifier); switches to password authentication", secret=True),
    Option("auth_method", "scram-sha-256", "how pgwire clients prove a password, named as pg_hba.conf's methods: scram-sha-256 (SASL, with SCRAM-SHA-256-PLUS channel binding on TLS) or password (cleartext over the connection: use only with TLS)"),
    Option("jwt_jwks", None, "JWT logins: the identity provider's JWKS, a file or an http(s):// URL; a token is accepted as a password (--auth-method password) and through PostgreSQL 18's OAUTHBEARER, and as a Flight SQL bearer token (needs --jwt-issuer and --jwt-audience)"),
    Option("jwt_issuer", None, "JWT logins: the required `iss` claim (also the issuer OAUTHBEARER clients are pointed at)"),
    Option("jwt_audience", None, "JWT logins: the required `aud` claim"),
    Option("jwt_role_claim", "sub", "JWT logins: the claim naming the role, which must equal the login's user name"),
    Option("jwt_leeway_s", 5.0, "JWT logins: clock skew allowed on exp/nbf/iat, seconds", float),
    Option("oauth_scope", "openid", "OAUTHBEARER: the scope announced to clients in the discovery answer"),
    Option("max_connections", 100, "connections served at once, pgwire's and Flight SQL's together (one count in `serve`), from a pgwire client's startup packet or a Flight SQL connection's first call to its end (PostgreSQL's max_connections): beyond it a client gets 53300 'sorry, too many clients already' (pgwire FATAL, Flight SQL RESOURCE_EXHAUSTED)", int),
    Option("superuser_reserved_connections", 3, "of --max-connections, slots only --superusers may take (PostgreSQL's name): the last ones left answer others 53300 'remaining connection slots are reserved for non-replication superuser connections' once authenticated (a Flight SQL connection at its first authenticated call)", int),
    Option("superusers", None, "user[,user]: who may take the reserved slots and call pg_cancel_backend/pg_terminate_backend on others' sessions (default: the first configured user; under trust, every user)"),
    Option("authentication_timeout", 60.0, "seconds a client has from connecting to finishing its startup packet and authentication (PostgreSQL's authentication_timeout), or, over Flight SQL, to a call whose credentials verify (under trust: any call): a silent or stalled client is then closed without a message (Flight SQL: an HTTP/2 GOAWAY), freeing its slot", float),
    Option("auth_failure_delay_ms", 1000, "failed-login back-off per client address, over pgwire and Flight SQL alike (failures on either count together): after a failed login, the next authentication answer to that address waits this long, doubling per further failure up to --auth-failure-delay-max-ms; a successful login clears it (0 = off)", int),
    Option("auth_failure_delay_max_ms", 30000, "the cap of the failed-login back-off's delay", int),
    Option("drain_timeout_s", 30.0, "on SIGTERM/SIGINT: stop accepting, let running statements finish up to this many seconds, then end every session with FATAL 57P01 and exit", float),
    Option("log_min_duration_statement", -1, "log every statement that ran at least this many ms as `duration: … ms  statement: …` (PostgreSQL's name; -1 = off, 0 = every statement)", int),
    Option("log_statement", "none", "log a structured line (correlation id, user, tag or SQLSTATE, duration, rows, redacted text) for each completed statement of a class (PostgreSQL's name): none, ddl, mod (ddl and writes) or all"),
    Option("log_min_error_statement", "error", "log the structured line of each statement that failed with at least this severity (PostgreSQL's name and levels: debug5 … error, log, fatal, panic; panic = never)"),
    Option("query_threads", 4, "worker threads running DataFusion and catalog calls", int),
    Option("max_concurrent_queries", None, "heavy statements (joins, unnests, table functions, aggregates, sorts and windows over more than 4M rows) running at once, each in an execution process that a cancel kills; the rest queue, statement_timeout counting the wait; default: the number of CPUs", int),
    Option("query_memory", "25%", "memory of query execution: MiB (512), a size (256MB, 2GB) or a share of the machine's RAM (25%), split evenly between the server and its --max-concurrent-queries execution processes; sorts, aggregates and joins spill to <data-dir>/spill beyond their share, and a statement that still cannot fit fails with 53200 out of memory"),
    Option("log_level", "INFO", "Python logging level"),
    Option("catalog_uri", None, "catalog: unset = embedded SQLite; http(s)://… = Iceberg REST catalog; postgresql://… = SQL catalog on PostgreSQL; sqlite:///path/catalog.db = another directory's embedded catalog", secret=True),
    Option("warehouse", None, "warehouse location or name the catalog expects (REST: e.g. s3://bucket; SQL: file:// or s3:// root)"),
    Option("catalog_name", "icegres", "catalog name (the SQL catalog's catalog_name column; REST: a label)"),
    Option("catalog_token", None, "REST: a pre-minted bearer token", secret=True),
    Option("catalog_credential", None, "REST: OAuth2 client credentials id:secret", secret=True),
    Option("catalog_oauth2_uri", None, "REST: OAuth2 token endpoint (default: the catalog's /v1/oauth/tokens)"),
    Option("catalog_scope", None, "REST: OAuth2 scope"),
    Option("catalog_sigv4", None, "REST: sign catalog calls with AWS SigV4 as signing-name:region (e.g. s3tables:us-east-1, glue:eu-west-1)"),
    Option("catalog_timeout_s", 10.0, "timeout of one catalog call, seconds", float),
    Option("s3_endpoint", None, "S3-compatible endpoint URL (e.g. http://127.0.0.1:8333)"),
    Option("s3_access_key", None, "S3 access key id", secret=True),
    Option("s3_secret_key", None, "S3 secret access key", secret=True),
    Option("s3_region", None, "S3 region"),
    Option("s3_path_style", False, "use path-style S3 addressing (MinIO, SeaweedFS)", bool),
    Option("file_cache_mb", 4096, "local copies of data files on object stores, under <data-dir>/file-cache, up to this many MiB: a table is read from them once all of its snapshot's files are copied (in the background); Iceberg data files never change, so copies need no invalidation (0 = off: every scan reads the store)", int),
    Option("sequence_block", 32, "values of a sequence (serial, identity, nextval) this server reserves in the catalog at once, at least: one catalog commit per block; a server's unused values are lost when it stops (gaps, as in PostgreSQL); a sequence's CACHE asks for more", int),
    Option("write_buffer_ms", 0, "group-commit window: autocommit INSERT/COPY into tables without a primary key are acked from memory and committed to the lake per table at most this many ms later (0 = off: every write commits before its ack)", int),
    Option("tail_dir", None, "local write-ahead log directory: buffered writes are fsynced here before the ack and replayed at start-up (requires --write-buffer-ms > 0)"),
    Option("tail_url", None, "postgresql://… URL of a PostgreSQL database holding the write-ahead log instead of --tail-dir: buffered writes are committed there before the ack and replayed at start-up; the tail id derives from the catalog and the data dir (requires --write-buffer-ms > 0; exclusive with --tail-dir)", secret=True),
    Option("maintain", False, "automatic table maintenance: a background task compacts small files, rewrites manifests and expires snapshots of every table by policy, one table at a time under a lease in the catalog (no two servers maintain one table at once), within --maintain-duty-cycle; a table property icegres.maintain.enabled=false (and icegres.maintain.* thresholds) overrides it per table (docs/maintenance.md)", bool),
    Option("maintain_interval_s", 60.0, "automatic maintenance: seconds between its looks at the tables (sooner once write-buffer flushes added many files to one)", float),
    Option("maintain_duty_cycle", 0.25, "automatic maintenance: the share of time its jobs may take (after a job of t seconds it rests t*(1-d)/d), in (0, 1]", float),
    Option("tail_quorum", None, "host:port,host:port,host:port of `icegres keeper` processes holding the write-ahead log instead of --tail-dir: the server wins a writer term from a majority of them, replays what they hold, and acks a buffered write once a majority fsynced it; each flush asserts the term at the lake (requires --write-buffer-ms > 0; exclusive with --tail-dir and --tail-url; docs/quorum-protocol.md)"),
)
OPTIONS_BY_KEY = {o.key: o for o in OPTIONS}


@dataclass(frozen=True)
class Settings:
    data_dir: Path = Path(".icegres")
    host: str = "127.0.0.1"
    port: int = DEFAULT_PORT
    flight_port: int | None = None  # Arrow Flight SQL (grpc) listen port; None: no Flight SQL
    ops_port: int | None = None  # HTTP /health, /ready, /metrics (icegres/protocol/http.py); None: off
    ports_file: str | None = None  # JSON of the ports bound (icegres/listeners.py); None: not written
    standby: bool = False  # wait for SIGUSR1 before opening the tail and serving (icegres/supervise.py)
    result_compression: str = "none"  # Flight SQL IPC body compression: none | zstd
    tls_cert: str | None = None  # PEM files: with both, pgwire and the Flight SQL port speak TLS
    tls_key: str | None = None
    tls_required: bool = False  # pgwire: a StartupMessage outside TLS is refused (28000)
    allow_plaintext: bool = False  # a non-loopback --host may serve without TLS
    database: str = DEFAULT_DATABASE
    branch: str | None = None  # every session's icegres.branch (a preview environment)
    # user -> SCRAM verifier (never a password); with no users and no --jwt-jwks, trust (only
    # allowed on loopback, see refuse_open_trust).
    users: dict[str, Verifier] = field(default_factory=dict, repr=False)
    auth_method: str = "scram-sha-256"  # scram-sha-256 | password (AUTH_METHODS)
    jwt_jwks: str | None = None  # JWKS file or URL: JWT logins on (protocol/tokens.py)
    jwt_issuer: str | None = None
    jwt_audience: str | None = None
    jwt_role_claim: str = "sub"
    jwt_leeway_s: float = 5.0
    oauth_scope: str = "openid"
    max_connections: int = 100
    superuser_reserved_connections: int = 3
    superusers: str | None = None  # comma list; None: the first configured user (every user under trust)
    authentication_timeout: float = 60.0  # seconds, as PostgreSQL's authentication_timeout
    auth_failure_delay_ms: int = 1000
    auth_failure_delay_max_ms: int = 30000
    drain_timeout_s: float = 30.0
    log_min_duration_statement: int = -1  # ms, PostgreSQL's name: -1 off, 0 every statement
    log_statement: str = "none"  # PostgreSQL's name: none, ddl, mod, all
    log_min_error_statement: str = "error"  # PostgreSQL's name: a severity
    query_threads: int = 4
    max_concurrent_queries: int | None = None  # None: os.cpu_count() (engine/executor.py)
    query_memory: str = "25%"  # memory.parse_size_bytes reads it; checked by resolve()
    log_level: str = "INFO"
    catalog_uri: str | None = field(default=None, repr=False)
    warehouse: str | None = None
    catalog_name: str = "icegres"
    catalog_token: str | None = field(default=None, repr=False)
    catalog_credential: str | None = field(default=None, repr=False)
    catalog_oauth2_uri: str | None = None
    catalog_scope: str | None = None
    catalog_sigv4: str | None = None
    catalog_timeout_s: float = 10.0
    s3_endpoint: str | None = None
    s3_access_key: str | None = field(default=None, repr=False)
    s3_secret_key: str | None = field(default=None, repr=False)
    s3_region: str | None = None
    s3_path_style: bool = False
    file_cache_mb: int = 4096
    sequence_block: int = 32
    write_buffer_ms: int = 0
    tail_dir: str | None = None
    tail_url: str | None = field(default=None, repr=False)
    tail_quorum: str | None = None
    maintain: bool = False  # automatic maintenance (engine/maintenance/scheduler.py)
    maintain_interval_s: float = 60.0
    maintain_duty_cycle: float = 0.25

    @property
    def query_memory_bytes(self) -> int:
        return parse_size_bytes(self.query_memory)

    @property
    def warehouse_dir(self) -> Path:
        return self.data_dir / "warehouse"

    @property
    def catalog_db(self) -> Path:
        return self.data_dir / "catalog.db"

    def redacted(self) -> dict[str, Any]:
        """The settings as they may be logged: secrets replaced, URIs stripped of credentials."""
        out: dict[str, Any] = {}
        for option in OPTIONS:
            if option.key in ("users", "password_file"):
                continue
            value = getattr(self, option.key)
            if value is not None and option.secret:
                value = redact_uri(value) if option.key in _SECRET_URIS else "***"
            out[option.key] = value
        return out


_SECRET_URIS = ("catalog_uri", "tail_url")
_PASSWORD_PARAM = re.compile(r"([?&]password=)[^&#]*", re.IGNORECASE)


def redact_uri(uri: str) -> str:
    """postgresql://user:secret@host/db -> postgresql://user:***@host/db (and ?password=*** too)."""
    uri = _PASSWORD_PARAM.sub(r"\1***", uri)
    scheme, sep, rest = uri.partition("://")
    if not sep or "@" not in rest:
        return uri
    auth, _, host = rest.rpartition("@")
    user = auth.split(":", 1)[0]
    return f"{scheme}://{user}:***@{host}" if ":" in auth else uri


def add_arguments(parser: argparse.ArgumentParser | argparse._ArgumentGroup, keys: tuple[str, ...], *,
                  config: bool = True) -> None:
    """Flags for the named options (then --config, unless `config` is False) on a parser or an
    argument group; values default to None so the other sources can fill in."""
    for key in keys:
        option = OPTIONS_BY_KEY[key]
        default = f" (default {option.default})" if option.default not in (None, False) else ""
        # argparse %-formats help text: a literal % (--query-memory's 25%) is written %%.
        default = default.replace("%", "%%")
        option = dataclasses.replace(option, help=option.help.replace("%", "%%"))
        if option.kind is bool:
            parser.add_argument(option.flag, action="store_const", const=True, default=None,
                                help=f"{option.help} (env {option.env})")
        else:
            parser.add_argument(option.flag, type=option.kind, default=None, metavar=_metavar(option),
                                help=f"{option.help} (env {option.env}){default}")
    if config:
        parser.add_argument("--config", default=None, metavar="FILE",
                            help="TOML file with the same keys as the flags (env ICEGRES_CONFIG)")


def _metavar(option: Option) -> str:
    """What --help shows after a flag: the kind of value (PORT, DIR, MS, ...), not the key again."""
    for suffix, metavar in (("port", "PORT"), ("tls_key", "FILE"), ("_dir", "DIR"), ("_file", "FILE"), ("_ms", "MS"), ("_mb", "MB"),
                            ("_s", "SECONDS"), ("_uri", "URI"), ("_url", "URL"), ("_key", "KEY"), ("_cert", "FILE")):
        if option.key.endswith(suffix):
            return metavar
    return "N" if option.kind is int else option.key.upper()


def resolve(args: Mapping[str, Any], environ: Mapping[str, str] | None = None) -> Settings:
    """Settings from parsed flags, then the environment, then the config file, then defaults."""
    environ = os.environ if environ is None else environ
    config_path = args.get("config") or environ.get("ICEGRES_CONFIG")
    file_values: dict[str, Any] = {}
    if config_path:
        with open(config_path, "rb") as f:
            file_values = tomllib.load(f)
        unknown = set(file_values) - set(OPTIONS_BY_KEY)
        if unknown:
            raise ValueError(f"unknown keys in {config_path}: {', '.join(sorted(unknown))}")
    values: dict[str, Any] = {}
    for option in OPTIONS:
        value = args.get(option.key)
        if value is None and option.env in environ:
            value = _parse(option, environ[option.env])
        if value is None and option.key in file_values:
            value = _parse(option, file_values[option.key])
        values[option.key] = option.default if value is None else value
    users = load_users(values.pop("password_file"), values.pop("users"))
    values["auth_method"] = check_auth(values["auth_method"], values["jwt_jwks"], values["jwt_issuer"],
                                       values["jwt_audience"])
    values["data_dir"] = Path(values["data_dir"])
    values["log_statement"] = str(values["log_statement"]).strip().lower()
    values["log_min_error_statement"] = str(values["log_min_error_statement"]).strip().lower()
    check_limits(values)
    check_query_limits(values["query_memory"], values["max_concurrent_queries"])
    check_write_ladder(values["write_buffer_ms"], values["tail_dir"], values["tail_url"], values["tail_quorum"])
    values["result_compression"] = check_flight_transport(values["result_compression"], values["tls_cert"],
                                                          values["tls_key"])
    if values["tls_required"] and not values["tls_cert"]:
        raise ValueError("--tls-required needs TLS: give --tls-cert and --tls-key")
    return Settings(users=users, **values)


RESULT_COMPRESSIONS = ("none", "zstd")
AUTH_METHODS = ("scram-sha-256", "password")


def check_auth(auth_method: str, jwt_jwks: str | None, jwt_issuer: str | None, jwt_audience: str | None) -> str:
    """The normalised --auth-method, once the authentication options make sense together."""
    method = (auth_method or "").strip().lower()
    if method not in AUTH_METHODS:
        raise ValueError(f"--auth-method must be one of {', '.join(AUTH_METHODS)}, not {auth_method!r}")
    if jwt_jwks and not (jwt_issuer and jwt_audience):
        # A token minted by the same provider for another service must not log in here.
        raise ValueError("--jwt-jwks needs --jwt-issuer and --jwt-audience: tokens are only accepted "
                         "from one issuer, for this audience")
    if (jwt_issuer or jwt_audience) and not jwt_jwks:
        raise ValueError("--jwt-issuer and --jwt-audience need --jwt-jwks (the provider's keys)")
    return method


def is_loopback(host: str) -> bool:
    if host in ("localhost",):
        return True
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return False


def refuse_open_trust(settings: Settings, what: str) -> None:
    """Trust authentication is for loopback only: a front end refuses to serve another address
    without passwords or tokens (`what` names it in the message)."""
    if not settings.users and not settings.jwt_jwks and not is_loopback(settings.host):
        raise SystemExit(
            f"refusing to serve {what}{settings.host} without passwords: trust auth is for loopback only "
            "(set --password-file or ICEGRES_USERS)"
        )


def refuse_plaintext(settings: Settings, what: str) -> None:
    """Passwords and results cross a network only encrypted: a front end refuses to serve a
    non-loopback address without --tls-cert/--tls-key unless --allow-plaintext says so (`what`
    names it in the message). One certificate covers pgwire and Flight SQL, so one check does."""
    if not (settings.tls_cert and settings.tls_key) and not settings.allow_plaintext and not is_loopback(settings.host):
        raise SystemExit(
            f"refusing to serve {what}{settings.host} without TLS: give --tls-cert and --tls-key, "
            "or --allow-plaintext to send passwords and data in the clear"
        )


def check_flight_transport(result_compression: str, tls_cert: str | None, tls_key: str | None) -> str:
    """The normalised compression name, once the Flight transport options make sense together."""
    codec = (result_compression or "none").strip().lower()
    if codec not in RESULT_COMPRESSIONS:
        raise ValueError(f"--result-compression must be one of {', '.join(RESULT_COMPRESSIONS)}, not {result_compression!r}")
    if bool(tls_cert) != bool(tls_key):
        raise ValueError("--tls-cert and --tls-key go together: give both PEM files (certificate and its private key)")
    return codec


def check_query_limits(query_memory: str, max_concurrent_queries: int | None) -> None:
    """--query-memory parses and --max-concurrent-queries is positive, or start-up stops with
    this ValueError."""
    parse_size_bytes(query_memory)
    if max_concurrent_queries is not None and max_concurrent_queries < 1:
        raise ValueError("--max-concurrent-queries must be at least 1")


# --query-memory's default share of the machine's memory (docs/configuration.md says why 25%).
MIN_QUERY_MEMORY_BYTES = 16 << 20
_SIZE = re.compile(r"^\s*(\d+(?:\.\d+)?)\s*(%|[kmgt]i?b?|b)?\s*$", re.IGNORECASE)
_UNITS = {"b": 1, "k": 1 << 10, "m": 1 << 20, "g": 1 << 30, "t": 1 << 40}


def physical_memory_bytes() -> int:
    """The machine's RAM, or the cgroup's memory limit when one is set below it."""
    total = os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES")
    try:
        limit = Path("/sys/fs/cgroup/memory.max").read_text().strip()
    except OSError:
        return total
    return min(total, int(limit)) if limit.isdigit() else total


def parse_size_bytes(text: str, *, total_bytes: int | None = None) -> int:
    """`--query-memory`: a number of MiB (`512`), a size with a unit (`256MB`, `2GiB`, `1.5g`;
    binary multiples) or a share of the machine's memory (`25%`). ValueError on anything else."""
    m = _SIZE.match(str(text))
    if not m:
        raise ValueError(f"--query-memory must be MiB, a size such as 512MB or 2GB, or a share such as 25%, not {text!r}")
    number, unit = float(m.group(1)), (m.group(2) or "m").lower()
    if unit == "%":
        if not 0 < number <= 100:
            raise ValueError(f"--query-memory share must be in (0, 100]%, not {text!r}")
        size = int((total_bytes or physical_memory_bytes()) * number / 100)
    else:
        size = int(number * _UNITS[unit[0]])
    if size < MIN_QUERY_MEMORY_BYTES:
        raise ValueError(f"--query-memory must be at least {MIN_QUERY_MEMORY_BYTES >> 20} MB, not {text!r}")
    return size


def check_limits(values: Mapping[str, Any]) -> None:
    """The connection limits and time-outs make sense together, or start-up stops with this
    ValueError."""
    if values["max_connections"] < 1:
        raise ValueError("--max-connections must be at least 1")
    if not 0 <= values["superuser_reserved_connections"] < values["max_connections"]:
        raise ValueError("--superuser-reserved-connections must be at least 0 and less than --max-connections")
    if values["authentication_timeout"] <= 0:
        raise ValueError("--authentication-timeout must be > 0 seconds")
    if values["auth_failure_delay_ms"] < 0 or values["auth_failure_delay_max_ms"] < values["auth_failure_delay_ms"]:
        raise ValueError("--auth-failure-delay-ms must be >= 0 and at most --auth-failure-delay-max-ms")
    if values["drain_timeout_s"] < 0:
        raise ValueError("--drain-timeout-s must be >= 0")
    if values["maintain_interval_s"] <= 0:
        raise ValueError("--maintain-interval-s must be > 0 seconds")
    if not 0 < values["maintain_duty_cycle"] <= 1:
        raise ValueError("--maintain-duty-cycle must be > 0 and at most 1")
    if values["log_min_duration_statement"] < -1:
        raise ValueError("--log-min-duration-statement must be -1 (off), 0 (every statement) or a number of ms")
    if values["log_statement"] not in ("none", "ddl", "mod", "all"):
        raise ValueError("--log-statement must be one of none, ddl, mod, all")
    if values["log_min_error_statement"] not in ("debug5", "debug4", "debug3", "debug2", "debug1", "info", "notice",
                                                 "warning", "error", "log", "fatal", "panic"):
        raise ValueError("--log-min-error-statement must be a severity: debug5 … debug1, info, notice, warning, "
                         "error, log, fatal or panic")


def superusers(settings: Settings) -> frozenset[str] | None:
    """Who counts as a superuser (the reserved connection slots, signalling others' sessions):
    --superusers, else the first configured user; None means every user (trust: no users and no
    token logins). Token users are never superusers unless --superusers names them."""
    if settings.superusers:
        return frozenset(u.strip() for u in settings.superusers.split(",") if u.strip())
    if not settings.users:
        return frozenset() if settings.jwt_jwks else None
    return frozenset([next(iter(settings.users))])


def authorization_superusers(settings: Settings) -> frozenset[str] | None:
    """Who is a superuser to GRANT/REVOKE and the privilege checks (engine/authz.py) without being
    a role of the catalog: --superusers, else every configured user (each could do everything
    before roles existed: an upgrade keeps them able to); None, under trust or with token logins
    (--jwt-jwks) and no --superusers, is every login that is no role of the catalog: a token's
    role could do everything before roles existed too, and is held to grants once it is made a
    role (CREATE ROLE) or --superusers names the superusers."""
    if settings.superusers:
        return frozenset(u.strip() for u in settings.superusers.split(",") if u.strip())
    if not settings.users or settings.jwt_jwks:
        return None
    return frozenset(settings.users)


def check_write_ladder(write_buffer_ms: int, tail_dir: str | None, tail_url: str | None = None,
                       tail_quorum: str | None = None) -> None:
    """The write-ladder options make sense together, or start-up stops with this ValueError."""
    if write_buffer_ms < 0:
        raise ValueError("--write-buffer-ms must be >= 0 (0 turns the write buffer off)")
    if tail_quorum:
        if tail_dir or tail_url:
            raise ValueError("--tail-quorum is exclusive with --tail-dir and --tail-url: the write buffer has one tail")
        if write_buffer_ms == 0:
            raise ValueError("--tail-quorum needs the write buffer: set --write-buffer-ms (ICEGRES_WRITE_BUFFER_MS) "
                             "to a window > 0, e.g. 200")
        from icegres.machines.drivers.quorum import parse_addresses

        parse_addresses(tail_quorum)  # a ValueError names the bad address
    if tail_dir and tail_url:
        raise ValueError(
            "--tail-dir and --tail-url are exclusive: the write buffer has one tail, a local "
            "directory or a PostgreSQL database; give only one of them"
        )
    for flag, given in (("--tail-dir", tail_dir), ("--tail-url", tail_url)):
        if given and write_buffer_ms == 0:
            raise ValueError(
                f"{flag} needs the write buffer: set --write-buffer-ms (ICEGRES_WRITE_BUFFER_MS) "
                "to a window > 0, e.g. 200"
            )
    if tail_url:
        scheme, sep, rest = tail_url.partition("://")
        if not sep or scheme.lower() not in ("postgresql", "postgres") or not rest:
            # Not a URL at all (a keyword DSN, say) may hold a password anywhere: not echoed.
            shown = f"not {redact_uri(tail_url)!r}" if sep else "(the value given is not a URL)"
            raise ValueError(
                f"--tail-url must be a postgresql://[user[:password]@]host[:port]/database URL, {shown}"
            )


def _parse(option: Option, raw: Any) -> Any:
    if option.kind is bool and isinstance(raw, str):
        return raw.strip().lower() in ("1", "true", "yes", "on")
    return option.kind(raw)


def parse_users(spec: str, *, lines: bool = False) -> dict[str, Verifier]:
    """`user:password[,user:password]` (the ICEGRES_USERS format; with `lines`, one entry per line,
    the --password-file format, where a password may hold a comma) -> user -> verifier.

    An entry in PostgreSQL's `SCRAM-SHA-256$...` format is taken as it is; any other is a plain
    password, hashed here (4096 PBKDF2 iterations, ~2 ms each: this runs at start-up, before
    anything is served) and dropped, so the process keeps no password."""
    users: dict[str, Verifier] = {}
    for item in (spec.splitlines() if lines else spec.replace("\n", ",").split(",")):
        item = item.strip()
        if not item or item.startswith("#"):
            continue
        user, sep, secret = item.partition(":")
        if not sep or not user:
            raise ValueError("users must be given as user:password[,user:password]")
        if secret.startswith(SCRAM_PREFIX):
            verifier = parse_verifier(secret)
            if verifier is None:
                raise ValueError(f"user {user!r}: malformed SCRAM-SHA-256 verifier (PostgreSQL's format is "
                                 "SCRAM-SHA-256$<iterations>:<salt>$<StoredKey>:<ServerKey>)")
            users[user] = verifier
        else:
            users[user] = make_verifier(secret)
    return users


def load_users(password_file: str | None, users_spec: str | None = None) -> dict[str, Verifier]:
    """Users from --password-file (one user:password or user:verifier per line) and ICEGRES_USERS."""
    users: dict[str, Verifier] = {}
    if password_file:
        users.update(parse_users(Path(password_file).read_text(), lines=True))
    if users_spec:
        users.update(parse_users(users_spec))
    return users
