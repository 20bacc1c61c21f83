"""`icegres serve | seed`: the command line. Heavy imports happen inside each command."""

from __future__ import annotations

import argparse
import logging
import sys
import time

from icegres.config import Settings, add_arguments, resolve

_CATALOG_KEYS = (
    "catalog_uri", "warehouse", "catalog_name", "catalog_token", "catalog_credential",
    "catalog_oauth2_uri", "catalog_scope", "catalog_sigv4", "catalog_timeout_s",
    "s3_endpoint", "s3_access_key", "s3_secret_key", "s3_region", "s3_path_style",
)


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="icegres", description="A Postgres-wire endpoint over an Iceberg lakehouse.")
    sub = parser.add_subparsers(dest="command", required=True)
    serve = sub.add_parser("serve", help="serve the lakehouse to Postgres clients")
    serve_keys = ("data_dir", "host", "port", "flight_port", "database", "password_file", "query_threads",
                  "log_level", "write_buffer_ms", "tail_dir", "tail_url", *_CATALOG_KEYS)
    add_arguments(serve, serve_keys)
    flight = sub.add_parser("flight-serve", help="serve the lakehouse to Arrow Flight SQL (ADBC) clients only")
    flight.add_argument("--port", dest="flight_port", type=int, default=None,
                        help="Flight SQL listen port (env ICEGRES_FLIGHT_PORT) (default 50051)")
    add_arguments(flight, tuple(k for k in serve_keys if k not in ("port", "flight_port")))
    seed = sub.add_parser("seed", help="write the deterministic demo tables (idempotent), on any catalog")
    add_arguments(seed, ("data_dir", "log_level", *_CATALOG_KEYS))
    seed.add_argument("--rows", type=int, default=1_000_000, help="rows in demo.trips")
    return parser


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    try:
        settings = resolve(vars(args))
    except (OSError, ValueError) as exc:
        print(f"icegres: bad configuration: {exc}", file=sys.stderr)
        return 2
    logging.basicConfig(level=settings.log_level.upper(), format="%(asctime)s %(levelname)s %(name)s: %(message)s")
    if args.command == "seed":
        return _seed(settings, args.rows)
    if args.command in ("serve", "flight-serve"):
        return _serve(settings, pgwire=args.command == "serve")
    return 2


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


def _serve(settings: Settings, *, pgwire: bool = True) -> int:
    started = time.monotonic()
    import trio

    from icegres.engine.engine import Engine
    from icegres.protocol.pgwire.errors import PgError
    from icegres.protocol.pgwire.server import PgServer

    lakehouse = _open_lakehouse(settings)
    if lakehouse is None:
        return 1
    engine = Engine(lakehouse, database=settings.database)
    try:
        engine.refresh()
    except PgError as exc:
        print(f"icegres: {exc.message}", file=sys.stderr)
        return 1
    server = PgServer(settings, engine) if pgwire else None
    flight = None
    if not pgwire or settings.flight_port is not None:
        from icegres.protocol.flightsql.server import FlightServer

        # One engine and one pool of query threads for both protocols.
        flight = FlightServer(settings, engine, limiter=server.limiter if server is not None else None)
    log = logging.getLogger("icegres")

    async def run() -> None:
        import signal

        from icegres.config import redact_uri
        from icegres.ladder import open_ladder, pg_tail_id

        # The signal receiver is open before the ladder starts, so a SIGTERM during replay waits
        # for the replay (and then drains) instead of killing the process halfway.
        with trio.open_signal_receiver(signal.SIGTERM, signal.SIGINT) as signals:
            tail_id = pg_tail_id(settings) if settings.tail_url else None
            async with open_ladder(engine, write_buffer_ms=settings.write_buffer_ms,
                                   tail_dir=settings.tail_dir, tail_url=settings.tail_url,
                                   tail_id=tail_id) as ladder:
                if ladder is not None:
                    if settings.tail_url:
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
                    async for _ in signals:
                        log.info("shutting down")
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
        cause = _find(exc, (PoisonedTail, AppendFailed))
        if cause is not None:
            print(f"icegres: cannot open the WAL tail {settings.tail_dir}: {cause}", file=sys.stderr)
            return 1
        raise
    return 0


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
