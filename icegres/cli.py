"""`icegres serve | flight-serve | seed | keeper | supervise | verify | branch | maintain`: the command line. It parses the options
and hands each command to its room (`icegres/serve.py`, `icegres/supervise.py`, `icegres/seed.py`);
heavy imports happen there, inside each command."""

from __future__ import annotations

import argparse
import logging
import os
import sys

from icegres import branches, maintain_cli, maintain_compact_cli
from icegres.config import Settings, add_arguments, resolve

_CATALOG_KEYS = (
    "catalog_uri", "warehouse", "catalog_name", "catalog_token", "catalog_credential",
    "catalog_oauth2_uri", "catalog_scope", "catalog_sigv4", "catalog_timeout_s",
    "s3_endpoint", "s3_access_key", "s3_secret_key", "s3_region", "s3_path_style",
)

_AUTH_KEYS = ("auth_method", "jwt_jwks", "jwt_issuer", "jwt_audience", "jwt_role_claim", "jwt_leeway_s",
              "oauth_scope")

SERVE_KEYS = ("data_dir", "host", "port", "flight_port", "ops_port", "ports_file", "standby", "result_compression",
              "tls_cert", "tls_key", "tls_required", "allow_plaintext", "database", "branch", "password_file", "max_connections",
              "superuser_reserved_connections", "superusers", "authentication_timeout", "auth_failure_delay_ms",
              "auth_failure_delay_max_ms", "drain_timeout_s", "log_min_duration_statement", "log_statement",
              "log_min_error_statement", "query_threads", "max_concurrent_queries", "query_memory", "log_level",
              "write_buffer_ms", "tail_dir", "tail_url", "tail_quorum", "file_cache_mb", "sequence_block", *_CATALOG_KEYS,
              *_AUTH_KEYS, "maintain", "maintain_interval_s", "maintain_duty_cycle")

# What `icegres verify` shares with serve: where the lake is, and the write path it proves.
VERIFY_KEYS = ("data_dir", "write_buffer_ms", "tail_dir", "tail_url", "tail_quorum", "log_level", "file_cache_mb",
               *_CATALOG_KEYS)

# `serve --help` in groups, and in each group the flags most runs need first. Every key of
# SERVE_KEYS is in exactly one group (tests/unit/test_cli.py); --config closes the last one.
SERVE_GROUPS: tuple[tuple[str, str, tuple[str, ...]], ...] = (
    ("connection", "where clients connect, and who may",
     ("port", "host", "database", "branch", "password_file", "flight_port", "tls_cert", "tls_key", "tls_required",
      "allow_plaintext", "result_compression")),
    ("authentication", "passwords (SCRAM-SHA-256 by default) and JWT bearer tokens (docs/security.md)",
     _AUTH_KEYS),
    ("catalog and storage", "the lakehouse: embedded in --data-dir (SQLite catalog + local warehouse) unless "
     "--catalog-uri names another",
     ("data_dir", "catalog_uri", "warehouse", "catalog_name", "s3_endpoint", "s3_access_key", "s3_secret_key",
      "s3_region", "s3_path_style", "catalog_sigv4", "catalog_token", "catalog_credential", "catalog_oauth2_uri",
      "catalog_scope", "catalog_timeout_s", "file_cache_mb", "sequence_block")),
    ("write ladder", "opt-in; without --write-buffer-ms every write is one Iceberg commit before its ack "
     "(docs/architecture.md, 'The write ladder')",
     ("write_buffer_ms", "tail_dir", "tail_url", "tail_quorum")),
    ("maintenance", "opt-in automatic compaction, manifest rewrite and snapshot expiry (docs/maintenance.md)",
     ("maintain", "maintain_interval_s", "maintain_duty_cycle")),
    ("limits", "connections, log-in abuse, shutdown (docs/security.md, 'Limits and abuse')",
     ("max_connections", "superuser_reserved_connections", "superusers", "authentication_timeout",
      "auth_failure_delay_ms", "auth_failure_delay_max_ms", "drain_timeout_s")),
    ("operations", "health, readiness, ports, threads, logs",
     ("ops_port", "ports_file", "standby", "query_threads", "max_concurrent_queries", "query_memory", "log_level",
      "log_min_duration_statement", "log_statement", "log_min_error_statement")),
)
_SERVE_USAGE = "icegres {command} [--data-dir DIR] [--host HOST] [--port PORT] [options]"
_SERVE_EPILOG = ("Every flag has an ICEGRES_* environment twin and a key in the --config TOML file "
                 "(flag > environment > file > default): docs/configuration.md.")


def _add_serve_groups(parser: argparse.ArgumentParser, keys: tuple[str, ...], *, flight_only: bool = False) -> None:
    """serve's option groups on `parser`, each holding those of its flags that are in `keys`
    (`flight_only`: flight-serve, whose --port is the Flight SQL port)."""
    for title, description, group_keys in SERVE_GROUPS:
        group = parser.add_argument_group(title, description)
        if flight_only and title == "connection":
            group.add_argument("--port", dest="flight_port", type=int, default=None, metavar="PORT",
                               help="Flight SQL listen port, 0 = any free one (env ICEGRES_FLIGHT_PORT) "
                                    "(default 50051)")
        add_arguments(group, tuple(k for k in group_keys if k in keys), config=title == "operations")


def version() -> str:
    """The installed distribution's version (what pip knows), else the source tree's."""
    from importlib.metadata import PackageNotFoundError
    from importlib.metadata import version as installed

    try:
        return installed("icegres")
    except PackageNotFoundError:
        from icegres import __version__

        return __version__


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="icegres", description="A Postgres-wire endpoint over an Iceberg lakehouse.")
    parser.add_argument("--version", action="version", version=f"icegres {version()}")
    sub = parser.add_subparsers(dest="command", required=True)
    serve = sub.add_parser("serve", help="serve the lakehouse to Postgres clients",
                           usage=_SERVE_USAGE.format(command="serve"), epilog=_SERVE_EPILOG,
                           description="Serve the lakehouse to Postgres clients (and to Flight SQL ones "
                                       "with --flight-port) until SIGTERM or SIGINT.")
    _add_serve_groups(serve, SERVE_KEYS)
    flight = sub.add_parser("flight-serve", help="serve the lakehouse to Arrow Flight SQL (ADBC) clients only",
                            usage=_SERVE_USAGE.format(command="flight-serve"), epilog=_SERVE_EPILOG,
                            description="Serve the lakehouse to Arrow Flight SQL (ADBC) clients only, until "
                                        "SIGTERM or SIGINT.")
    _add_serve_groups(flight, tuple(k for k in SERVE_KEYS if k not in ("port", "flight_port", "tls_required")),
                      flight_only=True)
    seed = sub.add_parser("seed", help="write the deterministic demo tables (idempotent), on any catalog")
    add_arguments(seed, ("data_dir", "log_level", *_CATALOG_KEYS))
    seed.add_argument("--rows", type=int, default=1_000_000, help="rows in demo.trips")
    supervise = sub.add_parser("supervise", help="run `icegres serve` as a child and replace it when it exits or "
                               "its /health stays 503 or silent (needs --ops-port; icegres/supervise.py)",
                               usage=_SERVE_USAGE.format(command="supervise") + " --ops-port PORT",
                               epilog=_SERVE_EPILOG)
    supervisor = supervise.add_argument_group("supervisor", "when the child is replaced, and how")
    supervisor.add_argument("--start-timeout-s", type=float, default=60.0, metavar="SECONDS",
                            help="replace a child whose /ready is not 200 within this many seconds (default 60)")
    supervisor.add_argument("--health-timeout-s", type=float, default=3.0, metavar="SECONDS",
                            help="replace a serving child whose /health is 503 or silent this long (default 3)")
    supervisor.add_argument("--probe-interval-ms", type=int, default=200, metavar="MS", help="probe period (default 200)")
    supervisor.add_argument("--warm-standby", action="store_true",
                            help="keep a second `serve --standby` child (started, lake open) and promote it with "
                                 "SIGUSR1 instead of starting a replacement cold")
    _add_serve_groups(supervise, SERVE_KEYS)
    _add_verify(sub)
    branches.add_parser(sub, _CATALOG_KEYS)
    maintain_compact_cli.add_subcommands(maintain_cli.add_parser(sub, _CATALOG_KEYS), _CATALOG_KEYS)
    keeper = sub.add_parser("keeper", help="run one acceptor of a quorum tail (docs/quorum-protocol.md)")
    keeper.add_argument("--port", type=int, default=None, metavar="PORT",
                        help="this keeper's listen port, required: the writers' --tail-quorum lists every "
                             "keeper's host:port, so give each keeper a port of its own and keep it across "
                             "restarts (0 = any free port, reported in the log and --ports-file)")
    # A keeper's own words for the options it shares with serve: its directory holds a log, not a lake.
    keeper.add_argument("--data-dir", metavar="DIR", default=None,
                        help="this keeper's own directory, holding its log (keeper.log; --init creates it); "
                             "one per keeper (env ICEGRES_DATA_DIR) (default .icegres)")
    keeper.add_argument("--host", metavar="HOST", default=None,
                        help="listen address, as the writers' --tail-quorum names it (env ICEGRES_HOST) "
                             "(default 127.0.0.1)")
    add_arguments(keeper, ("ports_file", "log_level"))
    keeper.add_argument("--init", action="store_true",
                        help="create a new keeper in an empty --data-dir (refused when it already holds a log; "
                             "never use it to restart a keeper that lost its disk)")
    keeper.add_argument("--rejoin", metavar="HOST:PORT,...",
                        help="replace a keeper that lost its disk: catch up from these other keepers (for 3 "
                             "keepers, both others must be up) before answering anyone (docs/quorum-protocol.md)")
    return parser


def _add_verify(sub: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    verify = sub.add_parser("verify", help="re-prove the durability and isolation claims on this deployment, in a "
                            "scratch namespace (docs/verify.md)",
                            usage="icegres verify [serve's catalog and tail flags] [--only CLAIM,...] [--json] "
                                  "[--rounds N] [--keep]", epilog=_SERVE_EPILOG,
                            description="Start scratch servers on this deployment's catalog, storage and tails, "
                                        "crash them, race them, and check what they promise; one line per claim, "
                                        "then a table. Exit 0 iff every claim run passed, 1 if one failed, 2 on "
                                        "bad configuration.")
    _add_serve_groups(verify, VERIFY_KEYS)
    group = verify.add_argument_group("verify", "what to prove, and how hard")
    group.add_argument("--only", metavar="CLAIM,...", default=None,
                       help="run only these claims (default: all; a claim named here that cannot run fails the run)")
    group.add_argument("--json", action="store_true", help="print the results as one JSON document on stdout "
                       "(progress goes to stderr)")
    group.add_argument("--rounds", type=int, default=3, metavar="N",
                       help="crashes, kills and workload size scale with N (default 3)")
    group.add_argument("--keep", action="store_true",
                       help="leave the scratch namespace and the scratch servers' logs for inspection")
    group.add_argument("--scratch-namespace", default="icegres_verify", metavar="NAME",
                       help="the namespace verify creates, works in and drops (default icegres_verify)")
    group.add_argument("--local-keepers", action="store_true",
                       help="prove the quorum claims on three keepers this run starts on loopback instead of the "
                            "configured --tail-quorum")
    group.add_argument("--seed", type=int, default=None, help="the random seed (printed by every run, to repeat one)")


def main(argv: list[str] | None = None) -> int:
    from icegres import allocator, gil_switch, stacks

    allocator.configure()  # before any command imports DataFusion
    gil_switch.configure()
    stacks.deep_stacks()  # before any thread that may run DataFusion starts
    args = build_parser().parse_args(argv)
    try:
        settings = resolve(vars(args))
    except (OSError, ValueError) as exc:
        print(f"icegres: bad configuration: {exc}", file=sys.stderr)
        return 2
    logging.basicConfig(level=settings.log_level.upper(), format="%(asctime)s %(levelname)s %(name)s: %(message)s")
    if args.command == "seed":
        return _seed(settings, args.rows)
    if args.command == "branch":
        return branches.run(settings, args)
    if args.command == "maintain":
        if args.action in maintain_compact_cli.COMMANDS:
            return maintain_compact_cli.run(settings, args)
        return maintain_cli.run(settings, args)
    if args.command == "keeper":
        if args.port is None:
            # The default port is the Postgres one: a keeper must be given its own.
            print("icegres keeper: --port is required", file=sys.stderr)
            return 2
        from icegres.serve import serve_keeper

        return serve_keeper(settings, init=args.init, rejoin=args.rejoin)
    if args.command == "verify":
        from icegres.verify.run import Options, verify

        return verify(settings, Options(only=args.only, json=args.json, rounds=args.rounds, keep=args.keep,
                                        namespace=args.scratch_namespace, local_keepers=args.local_keepers,
                                        seed=args.seed))
    if args.command == "supervise":
        if settings.ops_port is None:
            print("icegres supervise: --ops-port is required (the supervisor probes /ready and /health)",
                  file=sys.stderr)
            return 2
        from icegres.supervise import run_supervisor

        # The supervisor decides which child is the standby: --standby is never forwarded.
        return run_supervisor(settings, vars(args), tuple(k for k in SERVE_KEYS if k != "standby"))
    if args.command in ("serve", "flight-serve"):
        from icegres.serve import serve

        code = serve(settings, pgwire=args.command == "serve")
        # Out without the interpreter's teardown: a statement the drain's end cancelled may still
        # be computing in DataFusion's threads (a plan that runs in the server; docs/limitations.md,
        # "Cancelling a statement inside a long operator"), and finalizing Python under them
        # crashed a cleanly drained server (SIGSEGV, exit -11, about one CI run in ten). What
        # serve owns is closed by now; the exit handlers (the scan sets' directories, logging's
        # flush) run here, then the process ends.
        import atexit

        atexit._run_exitfuncs()
        sys.stdout.flush()
        sys.stderr.flush()
        os._exit(code)
    return 2


def _seed(settings: Settings, rows: int) -> int:
    from icegres.seed import seed
    from icegres.serve import open_lakehouse

    lakehouse = open_lakehouse(settings)
    if lakehouse is None:
        return 1
    seed(lakehouse, trips_rows=rows)
    return 0


if __name__ == "__main__":
    sys.exit(main())
