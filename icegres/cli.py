"""`icegres serve | seed`: the command line. Heavy imports happen inside each command."""

from __future__ import annotations

import argparse
import logging
import os
import sys
import time
from pathlib import Path

from icegres.config import DEFAULT_PORT, Settings, load_users


def _env(name: str, default: str | None = None) -> str | None:
    return os.environ.get(f"ICEGRES_{name}", default)


def _common(p: argparse.ArgumentParser) -> None:
    p.add_argument("--data-dir", default=_env("DATA_DIR", ".icegres"),
                   help="embedded lakehouse directory: SQLite catalog + warehouse (env ICEGRES_DATA_DIR; default ./.icegres)")


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="icegres", description=__doc__)
    sub = parser.add_subparsers(dest="command", required=True)

    serve = sub.add_parser("serve", help="serve the lakehouse to Postgres clients")
    _common(serve)
    serve.add_argument("--host", default=_env("HOST", "127.0.0.1"), help="listen address (env ICEGRES_HOST)")
    serve.add_argument("--port", type=int, default=int(_env("PORT", str(DEFAULT_PORT)) or DEFAULT_PORT),
                       help=f"listen port (env ICEGRES_PORT; default {DEFAULT_PORT})")
    serve.add_argument("--database", default=_env("DATABASE", "icegres"), help="database name clients connect to")
    serve.add_argument("--password-file", default=_env("PASSWORD_FILE"),
                       help="file of user:password lines; with it (or ICEGRES_USERS) clients must log in")
    serve.add_argument("--query-threads", type=int, default=int(_env("QUERY_THREADS", "4") or 4),
                       help="worker threads running DataFusion and catalog calls")
    serve.add_argument("--log-level", default=_env("LOG_LEVEL", "INFO"))

    seed = sub.add_parser("seed", help="write the deterministic demo tables (idempotent)")
    _common(seed)
    seed.add_argument("--rows", type=int, default=1_000_000, help="rows in demo.trips")
    return parser


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    if args.command == "seed":
        return _seed(args)
    if args.command == "serve":
        return _serve(args)
    return 2


def _seed(args: argparse.Namespace) -> int:
    from icegres.engine.catalog import Lakehouse
    from icegres.seed import seed

    lakehouse = Lakehouse.embedded(Path(args.data_dir))
    seed(lakehouse, trips_rows=args.rows)
    return 0


def _serve(args: argparse.Namespace) -> int:
    started = time.monotonic()
    logging.basicConfig(level=args.log_level.upper(), format="%(asctime)s %(levelname)s %(name)s: %(message)s")
    try:
        users = load_users(args.password_file)
    except (OSError, ValueError) as exc:
        print(f"icegres: cannot read users: {exc}", file=sys.stderr)
        return 2
    settings = Settings(
        data_dir=Path(args.data_dir), host=args.host, port=args.port, database=args.database,
        users=users, query_threads=args.query_threads,
    )
    import trio

    from icegres.engine.catalog import Lakehouse
    from icegres.engine.engine import Engine
    from icegres.protocol.pgwire.server import PgServer

    try:
        lakehouse = Lakehouse.embedded(settings.data_dir)
        engine = Engine(lakehouse, database=settings.database)
        engine.refresh()
    except Exception as exc:
        print(f"icegres: cannot open the catalog at {settings.data_dir}: {exc}", file=sys.stderr)
        return 1
    server = PgServer(settings, engine)

    async def run() -> None:
        async with trio.open_nursery() as nursery:
            await nursery.start(server.serve)
            auth = "password" if users else "trust"
            logging.getLogger("icegres").info(
                "serving %s on %s:%d (database %s, %s auth) after %.2fs",
                lakehouse.description, settings.host, settings.port, settings.database, auth,
                time.monotonic() - started,
            )
            import signal

            with trio.open_signal_receiver(signal.SIGTERM, signal.SIGINT) as signals:
                async for _ in signals:
                    logging.getLogger("icegres").info("shutting down")
                    nursery.cancel_scope.cancel()
                    return

    try:
        trio.run(run)
    except OSError as exc:
        print(f"icegres: cannot listen on {settings.host}:{settings.port}: {exc}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
