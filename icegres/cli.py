"""`icegres serve | flight-serve | seed | keeper | supervise`: the command line. Heavy imports happen inside each command."""

from __future__ import annotations

import argparse
import logging
import sys
import time
from typing import TYPE_CHECKING

from icegres.config import Settings, add_arguments, resolve

if TYPE_CHECKING:
    from icegres.engine.file_cache import FileCache

_CATALOG_KEYS = (
    "catalog_uri", "warehouse", "catalog_name", "catalog_token", "catalog_credential",
    "catalog_oauth2_uri", "catalog_scope", "catalog_sigv4", "catalog_timeout_s",
    "s3_endpoint", "s3_access_key", "s3_secret_key", "s3_region", "s3_path_style",
)

SERVE_KEYS = ("data_dir", "host", "port", "flight_port", "ops_port", "standby", "result_compression", "tls_cert", "tls_key",
              "database", "password_file", "query_threads", "log_level", "write_buffer_ms", "tail_dir",
              "tail_url", "tail_quorum", "file_cache_mb", *_CATALOG_KEYS)


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="icegres", description="A Postgres-wire endpoint over an Iceberg lakehouse.")
    sub = parser.add_subparsers(dest="command", required=True)
    serve = sub.add_parser("serve", help="serve the lakehouse to Postgres clients")
    serve_keys = SERVE_KEYS
    add_arguments(serve, serve_keys)
    flight = sub.add_parser("flight-serve", help="serve the lakehouse to Arrow Flight SQL (ADBC) clients only")
    flight.add_argument("--port", dest="flight_port", type=int, default=None,
                        help="Flight SQL listen port (env ICEGRES_FLIGHT_PORT) (default 50051)")
    add_arguments(flight, tuple(k for k in serve_keys if k not in ("port", "flight_port")))
    seed = sub.add_parser("seed", help="write the deterministic demo tables (idempotent), on any catalog")
    add_arguments(seed, ("data_dir", "log_level", *_CATALOG_KEYS))
    seed.add_argument("--rows", type=int, default=1_000_000, help="rows in demo.trips")
    supervise = sub.add_parser("supervise", help="run `icegres serve` as a child and replace it when it exits or "
                               "its /health stays 503 or silent (needs --ops-port; icegres/supervise.py)")
    add_arguments(supervise, serve_keys)
    supervise.add_argument("--start-timeout-s", type=float, default=60.0,
                           help="replace a child whose /ready is not 200 within this many seconds (default 60)")
    supervise.add_argument("--health-timeout-s", type=float, default=3.0,
                           help="replace a serving child whose /health is 503 or silent this long (default 3)")
    supervise.add_argument("--probe-interval-ms", type=int, default=200, help="probe period (default 200)")
    supervise.add_argument("--warm-standby", action="store_true",
                           help="keep a second `serve --standby` child (started, lake open) and promote it with "
                                "SIGUSR1 instead of starting a replacement cold")
    keeper = sub.add_parser("keeper", help="run one acceptor of a quorum tail (docs/quorum-protocol.md)")
    add_arguments(keeper, ("data_dir", "host", "port", "log_level"))
    keeper.add_argument("--init", action="store_true",
                        help="create a new keeper in an empty --data-dir (refused when it already holds a log; "
                             "never use it to restart a keeper that lost its disk)")
    keeper.add_argument("--rejoin", metavar="HOST:PORT,...",
                        help="replace a keeper that lost its disk: catch up from these other keepers (for 3 "
                             "keepers, both others must be up) before answering anyone (docs/quorum-protocol.md)")
    return parser


def main(argv: list[str] | None = None) -> int:
    from icegres import allocator

    allocator.configure()  # before any command imports DataFusion
    args = build_parser().parse_args(argv)
    try:
        settings = resolve(vars(args))
    except (OSError, ValueError) as exc:
        print(f"icegres: bad configuration: {exc}", file=sys.stderr)
        return 2
    logging.basicConfig(level=settings.log_level.upper(), format="%(asctime)s %(levelname)s %(name)s: %(message)s")
    if args.command == "seed":
        return _seed(settings, args.rows)
    if args.command == "keeper":
        if args.port is None:
            # The default port is the Postgres one: a keeper must be given its own.
            print("icegres keeper: --port is required", file=sys.stderr)
            return 2
        return _keeper(settings, init=args.init, rejoin=args.rejoin)
    if args.command == "supervise":
        return _supervise(settings, vars(args))
    if args.command in ("serve", "flight-serve"):
        return _serve(settings, pgwire=args.command == "serve")
    return 2


def _supervise(settings: Settings, args: dict) -> int:
    from functools import partial

    import trio

    from icegres.supervise import Policy, child_argv, supervise

    if settings.ops_port is None:
        print("icegres supervise: --ops-port is required (the supervisor probes /ready and /health)", file=sys.stderr)
        return 2
    policy = Policy(start_timeout_s=args["start_timeout_s"], health_timeout_s=args["health_timeout_s"],
                    probe_interval_ms=args["probe_interval_ms"])
    # The supervisor decides which child is the standby: --standby is never forwarded.
    keys = tuple(k for k in SERVE_KEYS if k != "standby")
    return trio.run(partial(supervise, child_argv(args, keys), settings.host, settings.ops_port, policy,
                            warm_standby=args["warm_standby"]))


def _open_lakehouse(settings: Settings):
    from icegres.engine.catalog import CatalogUnavailable, Lakehouse

    try:
        return Lakehouse.from_settings(settings)
    except CatalogUnavailable as exc:
        print(f"icegres: {exc}", file=sys.stderr)
        return None


def _seed(settings: Settings, rows: int) -> int:
    from icegres.seed import seed

    lakehouse = _open_lakehouse(settings)
    if lakehouse is None:
        return 1
    seed(lakehouse, trips_rows=rows)
    return 0


def _keeper(settings: Settings, *, init: bool, rejoin: str | None = None) -> int:
    import signal

    import trio

    from icegres.machines.drivers.keeper import KeeperRefused, run_keeper
    from icegres.machines.drivers.quorum import parse_addresses

    try:
        peers = parse_addresses(rejoin) if rejoin else []
    except ValueError as exc:
        print(f"icegres keeper: --rejoin: {exc}", file=sys.stderr)
        return 2

    async def run() -> None:
        with trio.open_signal_receiver(signal.SIGTERM, signal.SIGINT) as signals:
            async with trio.open_nursery() as nursery:
                async def keeper() -> None:
                    await run_keeper(settings.data_dir, settings.host, settings.port, init=init, rejoin=peers)
                    nursery.cancel_scope.cancel()

                nursery.start_soon(keeper)
                async for _ in signals:
                    logging.getLogger("icegres").info("keeper shutting down")
                    nursery.cancel_scope.cancel()

    try:
        trio.run(run)
    except Exception as exc:
        refused = _find(exc, (KeeperRefused,))
        if refused is not None:
            print(f"icegres keeper: {refused}", file=sys.stderr)
            return 1
        listen = _find(exc, (OSError,))
        if listen is not None:
            print(f"icegres keeper: cannot listen on {settings.host}:{settings.port}: {listen}", file=sys.stderr)
            return 1
        raise
    return 0


def _file_cache(settings: Settings) -> FileCache | None:
    """The local copies of remote data files (--file-cache-mb), for catalogs whose files may be
    remote: the embedded lake's files are local already."""
    if settings.file_cache_mb <= 0 or not settings.catalog_uri:
        return None
    from icegres.engine.file_cache import FileCache as Cache

    root = settings.data_dir / "file-cache"
    try:
        return Cache(root, settings.file_cache_mb << 20)
    except OSError as exc:  # an unwritable data dir costs the copies, not the server
        logging.getLogger("icegres").warning("no file cache (%s): every scan reads the store", exc)
        return None


def _serve(settings: Settings, *, pgwire: bool = True) -> int:
    started = time.monotonic()
    import trio

    from icegres import collector
    from icegres.engine.engine import Engine
    from icegres.protocol.pgwire.errors import PgError
    from icegres.protocol.pgwire.server import PgServer

    lakehouse = _open_lakehouse(settings)
    if lakehouse is None:
        return 1
    file_cache = _file_cache(settings)
    engine = Engine(lakehouse, database=settings.database, file_cache=file_cache)
    try:
        engine.refresh()
    except PgError as exc:
        print(f"icegres: {exc.message}", file=sys.stderr)
        if file_cache is not None:
            file_cache.close()
        return 1
    server = PgServer(settings, engine) if pgwire else None
    flight = None
    if not pgwire or settings.flight_port is not None:
        from icegres.protocol.flightsql.server import FlightServer

        # One engine and one pool of query threads for both protocols.
        flight = FlightServer(settings, engine, limiter=server.limiter if server is not None else None)
    log = logging.getLogger("icegres")

    async def run() -> None:
        # The operations endpoint comes up first: /health answers (and /ready says 503) while
        # the tail replays, so a supervisor can tell a slow start from a dead one.
        if settings.standby:
            if not await _promoted(engine):
                return
            if not (settings.tail_dir or settings.tail_url or settings.tail_quorum):
                # With a tail, replay refreshes the engine; without one, the lake moved since start-up.
                await trio.to_thread.run_sync(engine.refresh)
        async with trio.open_nursery() as outer:
            ops = None
            if settings.ops_port is not None:
                from icegres.protocol.http import OpsServer

                ops = OpsServer(settings, engine)
                await outer.start(ops.serve)
            await serving(ops)
            outer.cancel_scope.cancel()

    async def serving(ops) -> None:
        import signal

        from icegres.config import redact_uri
        from icegres.ladder import open_ladder, pg_tail_id, quorum_tail_id

        # The signal receiver is open before the ladder starts, so a SIGTERM during replay waits
        # for the replay (and then drains) instead of killing the process halfway.
        with trio.open_signal_receiver(signal.SIGTERM, signal.SIGINT) as signals:
            tail_id = pg_tail_id(settings) if settings.tail_url else None
            if settings.tail_quorum:
                tail_id = quorum_tail_id(settings)
            async with open_ladder(engine, write_buffer_ms=settings.write_buffer_ms,
                                   tail_dir=settings.tail_dir, tail_url=settings.tail_url,
                                   tail_id=tail_id, tail_quorum=settings.tail_quorum) as ladder:
                if ladder is not None:
                    if settings.tail_quorum:
                        tail = f"quorum tail {tail_id} on {settings.tail_quorum} (writer term {ladder.tail.writer_term})"
                    elif settings.tail_url:
                        tail = f"Postgres tail {tail_id} at {redact_uri(settings.tail_url)}"
                    elif settings.tail_dir:
                        tail = f"WAL tail {settings.tail_dir}"
                    else:
                        tail = "memory only"
                    log.info("write buffer on: %d ms window, %s (replayed %d records)",
                             settings.write_buffer_ms, tail, ladder.replayed_records)
                async with trio.open_nursery() as nursery:
                    if server is not None:
                        await nursery.start(server.serve)
                    if flight is not None:
                        await nursery.start(flight.serve)
                    auth = "password" if settings.users else "trust"
                    log.info(
                        "serving %s on %s:%d (database %s, %s auth) after %.2fs",
                        lakehouse.description, settings.host,
                        settings.port if server is not None else flight.port, settings.database, auth,
                        time.monotonic() - started,
                    )
                    if ops is not None:
                        ops.set_ready()
                    # After the "serving" line, which tests and operators wait for.
                    collector.settle()
                    async for _ in signals:
                        log.info("shutting down")
                        if ops is not None:
                            ops.set_stopping()
                        if ladder is not None:
                            # Every acked row goes to the lake before the process exits.
                            await ladder.shutdown()
                            log.info("write buffer flushed: %s", ladder.stats())
                        nursery.cancel_scope.cancel()
                        return

    try:
        trio.run(run)
    except OSError as exc:
        print(f"icegres: cannot listen on {settings.host}:{settings.port}: {exc}", file=sys.stderr)
        return 1
    except Exception as exc:
        from icegres.ladder import TailUnavailable
        from icegres.machines.drivers.wal import AppendFailed
        from icegres.machines.wal import PoisonedTail

        unavailable = _find(exc, (TailUnavailable,))
        if unavailable is not None:
            print(f"icegres: {unavailable}", file=sys.stderr)
            return 1
        from icegres.machines.drivers.quorum import QuorumAppendFailed

        quorum = _find(exc, (QuorumAppendFailed,))
        if quorum is not None:
            print(f"icegres: cannot open the quorum tail on {settings.tail_quorum}: {quorum}", file=sys.stderr)
            return 1
        cause = _find(exc, (PoisonedTail, AppendFailed))
        if cause is not None:
            print(f"icegres: cannot open the WAL tail {settings.tail_dir}: {cause}", file=sys.stderr)
            return 1
        raise
    finally:
        if file_cache is not None:
            file_cache.close()  # a copy in progress would otherwise hold the exit
    return 0


async def _promoted(engine) -> bool:
    """A warm standby waits here, lake open, until SIGUSR1 (True) or SIGTERM/SIGINT (False)."""
    import signal

    import trio

    from icegres.supervise import warm_up

    log = logging.getLogger("icegres")
    with trio.open_signal_receiver(signal.SIGUSR1, signal.SIGTERM, signal.SIGINT) as signals:
        # `icegres supervise` starts a standby with SIGUSR1 blocked: an early promotion is
        # pending, and arrives here now that the receiver is open.
        signal.pthread_sigmask(signal.SIG_UNBLOCK, {signal.SIGUSR1})
        await trio.to_thread.run_sync(warm_up, engine)
        log.info("warm standby: waiting for SIGUSR1 to take over")
        async for sig in signals:
            if sig == signal.SIGUSR1:
                log.info("warm standby: promoted")
                return True
            return False
    return False


def _find(exc: BaseException, kinds: tuple[type, ...]) -> BaseException | None:
    """The first exception of `kinds` in `exc` or, through exception groups, inside it."""
    if isinstance(exc, kinds):
        return exc
    if isinstance(exc, BaseExceptionGroup):
        for inner in exc.exceptions:
            found = _find(inner, kinds)
            if found is not None:
                return found
    return None


if __name__ == "__main__":
    sys.exit(main())
