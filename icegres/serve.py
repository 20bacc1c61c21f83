"""One serving process, wired: `icegres serve`, `icegres flight-serve` and `icegres keeper`.

`serve` binds its ports first (`icegres/listeners.py`: a busy port is one line before anything
is created, and port 0 is reported by --ports-file), opens the lakehouse and the engine, then,
inside one trio run: the operations endpoint first (so /health answers while the tail
replays), a warm standby's wait for SIGUSR1 (it binds its ports after it), the write
tail the options name (`open_tail`) and the write ladder over it (`icegres.ladder.open_ladder`,
which attaches it to the engine once replayed), the pgwire and Flight SQL front ends, and the
SIGTERM/SIGINT that drains every acknowledged row into the lake before the process exits. Every
start-up failure an operator can fix ends as one line on stderr and exit status 1.

The tail's identity lives here too (`pg_tail_id`, `quorum_tail_id`): it is derived from the
deployment's options, which the tails themselves never see. The command line (`icegres/cli.py`)
parses the options and calls in; heavy imports happen inside each function.
"""

from __future__ import annotations

import json
import logging
import signal
import sys
import time
from collections.abc import AsyncIterator
from contextlib import AbstractAsyncContextManager, asynccontextmanager
from typing import TYPE_CHECKING, Any

from icegres.config import Settings, redact_uri, refuse_open_trust, refuse_plaintext
from icegres.listeners import BoundPort, CannotListen, bind_port, write_ports_file

if TYPE_CHECKING:
    from icegres.engine.catalog import Lakehouse
    from icegres.engine.file_cache import FileCache
    from icegres.engine.lake import Engine
    from icegres.machines.drivers.tail import Tail

__all__ = ["open_lakehouse", "open_tail", "pg_tail_id", "quorum_tail_id", "serve", "serve_keeper"]

log = logging.getLogger("icegres")


def open_lakehouse(settings: Settings) -> Lakehouse | None:
    """The lakehouse the options name, or None (after one line on stderr) when its catalog cannot
    be reached."""
    from icegres.engine.catalog import CatalogUnavailable, Lakehouse

    try:
        return Lakehouse.from_settings(settings)
    except CatalogUnavailable as exc:
        print(f"icegres: {exc}", file=sys.stderr)
        return None


def _authorization(lakehouse: Any, settings: Settings) -> Any:
    """The roles and privileges every server of this catalog shares (engine/acl_store.py)."""
    from icegres.config import authorization_superusers
    from icegres.engine.acl_store import AclStore
    from icegres.engine.authz import Authorization

    return Authorization(AclStore(lakehouse), authorization_superusers(settings))


def _file_cache(settings: Settings) -> FileCache | None:
    """The local copies of remote data files (--file-cache-mb), for catalogs whose files may be
    remote: the embedded lake's files are local already."""
    if settings.file_cache_mb <= 0 or not settings.catalog_uri or settings.catalog_uri.startswith("sqlite:"):
        return None
    from icegres.engine.file_cache import FileCache as Cache

    root = settings.data_dir / "file-cache"
    try:
        return Cache(root, settings.file_cache_mb << 20)
    except OSError as exc:  # an unwritable data dir costs the copies, not the server
        log.warning("no file cache (%s): every scan reads the store", exc)
        return None


def recover_last_run(engine: Any, settings: Settings) -> None:
    """What the last run left in the data directory, dealt with before anything is served:
    transaction blocks' catalog changes a crash left half done are finished or undone, and
    temporary tables' files (sessions that ended with the process) removed."""
    import trio

    from icegres.engine.catalog_world import recover_pending
    from icegres.engine.intents import FileIntents

    engine.intents = FileIntents(settings.data_dir / "intents")
    # Temporary tables live as long as their session: whatever a killed server left is garbage.
    import shutil

    engine.temp_root = settings.data_dir / "temp"
    shutil.rmtree(engine.temp_root, ignore_errors=True)
    try:
        trio.run(recover_pending, engine.lakehouse, engine.intents)
    except Exception as exc:  # the catalog is down: nothing can be served anyway
        from icegres.pg.errors import PgError

        raise PgError("58030", f"could not recover transactions left by the last run: {type(exc).__name__}: {exc}") from exc
    # Data files a killed or failed write staged and nothing published (engine/staging.py).
    from icegres.engine.staged_world import recover_staged
    from icegres.engine.staging import FileStaging

    engine.staging = FileStaging(settings.data_dir / "staged")
    deleted, kept = trio.run(recover_staged, engine.lakehouse, engine.staging)
    if deleted or kept:
        log.info("staged files of earlier runs: %d unreferenced deleted, %d records kept", deleted, kept)


# --- serve / flight-serve ---------------------------------------------------------------------------


def serve(settings: Settings, *, pgwire: bool = True) -> int:
    """Serve until SIGTERM/SIGINT (pgwire, plus Flight SQL with --flight-port; Flight SQL alone
    when `pgwire` is False). The process's exit status."""
    started = time.monotonic()
    # Trust beyond loopback, then every port, before anything else: neither refusal may leave a
    # data directory behind. A warm standby binds when it is promoted, once the writer it
    # replaces is gone.
    refuse_open_trust(settings, "" if pgwire else "Flight SQL on ")
    refuse_plaintext(settings, "" if pgwire else "Flight SQL on ")
    bound: dict[str, BoundPort] = {}
    if not settings.standby:
        try:
            bound = bind_ports(settings, pgwire=pgwire)
        except CannotListen as exc:
            print(f"icegres: {exc}", file=sys.stderr)
            return 1
    import trio

    from icegres import collector
    from icegres.engine.lake import Engine
    from icegres.pg.errors import PgError
    from icegres.protocol.pgwire.server import PgServer

    lakehouse = open_lakehouse(settings)
    if lakehouse is None:
        return 1
    file_cache = _file_cache(settings)
    from icegres.engine.executor import Executors, default_slots
    from icegres.engine.memory import runtime_env, spill_dir

    # --query-memory in equal shares: the server's own pool (light statements, and heavy ones
    # that run here) and each execution process's (executor.py).
    slots = settings.max_concurrent_queries or default_slots()
    share_bytes = settings.query_memory_bytes // (slots + 1)
    spill = spill_dir(settings.data_dir)  # (this process's own; its execution processes share it)
    runtime = runtime_env(share_bytes, spill)
    engine = Engine(lakehouse, database=settings.database, file_cache=file_cache, runtime=runtime)
    engine.sequence_block = max(1, settings.sequence_block)  # (engine/sequences.py)
    engine.authorization = _authorization(lakehouse, settings)
    if settings.branch:
        engine.session_defaults["icegres.branch"] = settings.branch
        log.info("every session starts on branch %s (icegres.branch)", settings.branch)
    engine.executors = Executors(slots, share_bytes, spill, stores=engine.stores.configs)
    try:
        recover_last_run(engine, settings)
        # The listing only: tables are mounted when first named (lazy mounting), so start-up
        # reads no manifest or data file and a damaged table cannot stop it.
        engine.refresh(set())
    except PgError as exc:
        print(f"icegres: {exc.message}", file=sys.stderr)
        if file_cache is not None:
            file_cache.close()
        return 1

    def front_ends(ports: dict[str, BoundPort]) -> tuple[PgServer | None, Any]:
        server = PgServer(settings, engine, bound=ports["port"]) if pgwire else None
        flight = None
        if "flight_port" in ports:
            from icegres.protocol.flightsql.server import FlightServer

            # One engine, one pool of query threads, one failed-login back-off and one count of
            # connections against --max-connections for both protocols.
            flight = FlightServer(settings, engine, limiter=server.limiter if server is not None else None,
                                  bound=ports["flight_port"], backoff=server.backoff if server is not None else None,
                                  slots=server.slots if server is not None else None)
        return server, flight

    fronts = front_ends(bound) if bound else None  # a standby's come with its ports

    async def run() -> None:
        nonlocal bound, fronts
        if settings.standby:
            if not await _promoted(engine):
                return
            bound = bind_ports(settings, pgwire=pgwire)
            fronts = front_ends(bound)
            if not (settings.tail_dir or settings.tail_url or settings.tail_quorum):
                # With a tail, replay refreshes the engine; without one, the lake moved since start-up.
                await trio.to_thread.run_sync(engine.refresh, set())
        assert fronts is not None
        # The operations endpoint comes up first: /health answers (and /ready says 503) while
        # the tail replays, so a supervisor can tell a slow start from a dead one.
        async with trio.open_nursery() as outer:
            ops = None
            if "ops_port" in bound:
                from icegres.protocol.http import OpsServer

                ops = OpsServer(settings, engine, bound=bound["ops_port"])
                await outer.start(ops.serve)
            await serving(ops, *fronts)
            outer.cancel_scope.cancel()

    async def serving(ops: Any, server: PgServer | None, flight: Any) -> None:
        from icegres.ladder import open_ladder

        # The signal receiver is open before the ladder starts, so a SIGTERM during replay waits
        # for the replay (and then drains) instead of killing the process halfway.
        with trio.open_signal_receiver(signal.SIGTERM, signal.SIGINT) as signals:
            async with open_tail(settings) as tail, open_ladder(
                engine, write_buffer_ms=settings.write_buffer_ms, tail=tail
            ) as ladder:
                if ladder is not None:
                    log.info("write buffer on: %d ms window, %s (replayed %d records)",
                             settings.write_buffer_ms, _shown(settings, tail), ladder.replayed_records)
                async with trio.open_nursery() as nursery:
                    if server is not None:
                        await nursery.start(server.serve)
                    if flight is not None:
                        await nursery.start(flight.serve)
                    auth = "password" if settings.users or settings.jwt_jwks else "trust"
                    log.info(
                        "serving %s on %s:%d (database %s, %s auth) after %.2fs",
                        lakehouse.description, settings.host,
                        server.port if server is not None else flight.port, settings.database, auth,
                        time.monotonic() - started,
                    )
                    if ops is not None:
                        ops.set_ready()
                    # After the "serving" line, which tests and operators wait for.
                    collector.settle()
                    engine.executors.prestart()
                    nursery.start_soon(recheck_damaged, engine)
                    maintainer = maintenance(settings, engine, server, flight, ladder, ops)
                    if maintainer is not None:
                        await nursery.start(maintainer.run)
                    async for _ in signals:
                        log.info("shutting down")
                        if ops is not None:
                            ops.set_stopping()  # /ready is 503 from the start of the drain
                        # Stop accepting; running statements finish (up to --drain-timeout-s),
                        # then every session ends with FATAL 57P01 (PgServer.drain); Flight SQL's
                        # running calls finish as well, new ones are refused (flightsql/drain.py).
                        async with trio.open_nursery() as draining:
                            for front in (server, flight):
                                if front is not None:
                                    draining.start_soon(front.drain, settings.drain_timeout_s)
                            if maintainer is not None:
                                # Its job stops at its next check, commits nothing more, releases its lease.
                                draining.start_soon(maintainer.stop)
                        if ladder is not None:
                            # Every acked row goes to the lake before the process exits.
                            await ladder.shutdown()
                            log.info("write buffer flushed: %s", ladder.stats())
                        nursery.cancel_scope.cancel()
                        return

    try:
        trio.run(run)
    except Exception as exc:
        from icegres.machines.drivers.quorum import QuorumAppendFailed
        from icegres.machines.drivers.tail import AppendFailed, TailUnavailable
        from icegres.machines.wal import PoisonedTail

        if _explain(exc, ((CannotListen,), "icegres: "), ((TailUnavailable,), "icegres: "),
                    ((QuorumAppendFailed,), f"icegres: cannot open the quorum tail on {settings.tail_quorum}: "),
                    ((PoisonedTail, AppendFailed), f"icegres: cannot open the WAL tail {settings.tail_dir}: ")):
            return 1
        raise
    finally:
        engine.executors.close()
        if file_cache is not None:
            file_cache.close()  # a copy in progress would otherwise hold the exit
    return 0


def maintenance(settings: Settings, engine: Engine, server: Any, flight: Any, ladder: Any, ops: Any) -> Any:
    """`--maintain`'s scheduler (engine/maintenance/scheduler.py), wired to the write ladder's
    flushes, /metrics and the foreground's load; None when off."""
    if not settings.maintain:
        return None
    import os
    import socket

    from icegres.engine.maintenance.scheduler import Maintainer
    from icegres.protocol.statement_metrics import STATEMENTS

    limiter = server.limiter if server is not None else getattr(flight, "limiter", None)

    class Load:
        def load(self) -> tuple[int, int]:
            running = limiter.borrowed_tokens if limiter is not None else 0
            return running, STATEMENTS.count()

    port = server.port if server is not None else flight.port
    maintainer = Maintainer(engine, interval_s=settings.maintain_interval_s, duty_cycle=settings.maintain_duty_cycle,
                            holder=f"{socket.gethostname()}:{port}/pid {os.getpid()}", foreground=Load(),
                            settings=settings)
    if ladder is not None:
        ladder.flushed = maintainer.noticed
    if ops is not None:
        ops.maintenance = maintainer
    return maintainer


# How often the tables found damaged are tried again with no statement naming them, so /health
# and /metrics recover once a file is restored. Only damaged tables are read: a healthy lake
# costs nothing.
DAMAGED_RECHECK_S = 10.0


async def recheck_damaged(engine: Engine, period_s: float = DAMAGED_RECHECK_S) -> None:
    """Forever: every `period_s`, mount the damaged tables again (engine/damage.py)."""
    import trio

    while True:
        await trio.sleep(period_s)
        if len(engine.damage):
            try:
                await trio.to_thread.run_sync(engine.recheck_damaged)
            except Exception as exc:  # the catalog is down: the next statement says so
                log.warning("re-checking damaged tables: %s", exc)


def bind_ports(settings: Settings, *, pgwire: bool = True) -> dict[str, BoundPort]:
    """Bind (not yet listen on) every port this server serves, keyed by option (`port`,
    `flight_port`, `ops_port`), and write --ports-file. Raises CannotListen, every socket closed."""
    from icegres.protocol.flightsql.server import DEFAULT_FLIGHT_PORT

    wanted: list[tuple[str, int, str]] = []
    if pgwire:
        wanted.append(("port", settings.port, "--port"))
    if not pgwire or settings.flight_port is not None:
        flight_port = settings.flight_port if settings.flight_port is not None else DEFAULT_FLIGHT_PORT
        wanted.append(("flight_port", flight_port, "--flight-port" if pgwire else "--port"))
    if settings.ops_port is not None:
        wanted.append(("ops_port", settings.ops_port, "--ops-port"))
    bound: dict[str, BoundPort] = {}
    try:
        for key, port, flag in wanted:
            bound[key] = bind_port(settings.host, port, flag=flag)
        if settings.ports_file:
            write_ports_file(settings.ports_file, settings.host, {k: b.port for k, b in bound.items()})
    except OSError as exc:
        for each in bound.values():
            each.close()
        raise CannotListen(f"cannot write --ports-file {settings.ports_file}: {exc.strerror or exc}") from None
    except BaseException:
        for each in bound.values():
            each.close()
        raise
    # DEBUG: a start-up that fails later must still be one line on stderr; the "serving" line
    # and each front end's own line name the ports at INFO.
    log.debug("bound %s on %s", ", ".join(f"{b.flag} {b.port}" for b in bound.values()), settings.host)
    return bound


async def _promoted(engine: Engine) -> bool:
    """A warm standby waits here, lake open, until SIGUSR1 (True) or SIGTERM/SIGINT (False)."""
    import trio

    from icegres.supervise import warm_up

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


# --- the write tail ---------------------------------------------------------------------------------


@asynccontextmanager
async def open_tail(settings: Settings) -> AsyncIterator[Tail | None]:
    """The write tail the options name (--tail-dir, --tail-url or --tail-quorum), open for the
    block; None without one. Raises TailUnavailable (or the tail's own refusal) when it cannot be
    opened."""
    if not (settings.tail_dir or settings.tail_url or settings.tail_quorum):
        yield None
        return
    # These two lines time a failover's phases (bench/failover.py): start-up, then the tail's
    # opening (a quorum writer's election), then replay.
    log.info("opening the write tail")
    async with _tail(settings) as tail:
        log.info("write tail open: %d records recovered", len(tail.replay))
        yield tail


def _tail(settings: Settings) -> AbstractAsyncContextManager[Tail]:
    if settings.tail_quorum:
        from icegres.machines.drivers.quorum import open_ladder_quorum_tail

        return open_ladder_quorum_tail(settings.tail_quorum, quorum_tail_id(settings))
    if settings.tail_url:
        from icegres.machines.drivers.pgtail import claim_pg_tail

        return claim_pg_tail(settings.tail_url, pg_tail_id(settings), shown_url=redact_uri(settings.tail_url))
    from icegres.machines.drivers.wal import open_wal_tail

    assert settings.tail_dir
    return open_wal_tail(settings.tail_dir)


def _shown(settings: Settings, tail: Tail | None) -> str:
    """The tail in the "write buffer on" line (no secret)."""
    from icegres.machines.drivers.tail import LakeFencedTail

    if isinstance(tail, LakeFencedTail) and settings.tail_quorum:
        return f"quorum tail {tail.tail_id} on {settings.tail_quorum} (writer term {tail.writer_term})"
    if isinstance(tail, LakeFencedTail) and settings.tail_url:
        return f"Postgres tail {tail.tail_id} at {redact_uri(settings.tail_url)} (epoch {tail.writer_term})"
    if tail is not None:
        return f"WAL tail {settings.tail_dir}"
    return "memory only"


def quorum_tail_id(settings: Settings) -> str:
    """The quorum tail's id (the `icegres.tail-id` of its flushes): a hash of the catalog and the
    sorted keeper addresses, the same for every writer of that quorum, wherever it runs (a
    replacement writer finds its predecessor's watermark). A new keeper set is a new tail: drain
    the old one (SIGTERM) before changing it."""
    import hashlib

    from icegres.machines.drivers.quorum import parse_addresses

    catalog = redact_uri(settings.catalog_uri) if settings.catalog_uri else "embedded"
    keepers = sorted(f"{h}:{p}" for h, p in parse_addresses(settings.tail_quorum or ""))
    identity = json.dumps([catalog, settings.catalog_name, settings.warehouse, keepers])
    if not settings.catalog_uri:
        # The embedded catalog lives in the data directory: that is the lake's identity.
        identity = json.dumps([identity, str(settings.data_dir.expanduser().resolve())])
    return "q" + hashlib.sha256(identity.encode()).hexdigest()[:24]


def pg_tail_id(settings: Settings) -> str:
    """The Postgres tail's id (its row key, and the `icegres.tail-id` of its flushes): a hash of
    the catalog (URI without its password, name, warehouse) and the absolute data directory.

    Stable across restarts of one deployment; two servers with the same catalog and the same
    data directory path are the same deployment, and the second one is refused while the first
    holds the tail. Changing the data directory (or the catalog) starts a new, empty tail: let
    the old server drain (SIGTERM) first.
    """
    import hashlib

    catalog = redact_uri(settings.catalog_uri) if settings.catalog_uri else "embedded"
    identity = json.dumps([catalog, settings.catalog_name, settings.warehouse,
                           str(settings.data_dir.expanduser().resolve())])
    return "pg-" + hashlib.sha256(identity.encode()).hexdigest()[:24]


# --- keeper -----------------------------------------------------------------------------------------


def serve_keeper(settings: Settings, *, init: bool, rejoin: str | None = None) -> int:
    """Run one keeper of a quorum tail until SIGTERM/SIGINT. The process's exit status."""
    import trio

    from icegres.machines.drivers.keeper import KeeperRefused, run_keeper
    from icegres.machines.drivers.quorum import parse_addresses

    try:
        peers = parse_addresses(rejoin) if rejoin else []
    except ValueError as exc:
        print(f"icegres keeper: --rejoin: {exc}", file=sys.stderr)
        return 2
    # The port before the data directory: a busy one must leave no --init'ed log behind.
    try:
        bound = bind_port(settings.host, settings.port)
        # Connections queue from here: the log is opened (or caught up) before the keeper
        # accepts, and one told the port by the ports file must wait, not be refused (verify's
        # probe of fresh keepers was, now and then).
        bound.backlog()
        if settings.ports_file:
            write_ports_file(settings.ports_file, settings.host, {"port": bound.port})
    except CannotListen as exc:
        print(f"icegres keeper: {exc}", file=sys.stderr)
        return 1
    except OSError as exc:
        print(f"icegres keeper: cannot write --ports-file {settings.ports_file}: {exc.strerror or exc}",
              file=sys.stderr)
        return 1

    async def run() -> None:
        with trio.open_signal_receiver(signal.SIGTERM, signal.SIGINT) as signals:
            async with trio.open_nursery() as nursery:
                async def keeper() -> None:
                    await run_keeper(settings.data_dir, settings.host, bound.port, init=init, rejoin=peers,
                                     bound=bound)
                    nursery.cancel_scope.cancel()

                nursery.start_soon(keeper)
                async for _ in signals:
                    log.info("keeper shutting down")
                    nursery.cancel_scope.cancel()

    try:
        trio.run(run)
    except Exception as exc:
        if _explain(exc, ((KeeperRefused,), "icegres keeper: "), ((CannotListen,), "icegres keeper: "),
                    ((OSError,), "icegres keeper: ")):
            return 1
        raise
    return 0


def _explain(exc: BaseException, *cases: tuple[tuple[type[BaseException], ...], str]) -> bool:
    """Print `prefix` and the exception for the first case whose kinds are in `exc` (through
    exception groups): a start-up failure an operator can fix is one line, not a traceback."""
    for kinds, prefix in cases:
        found = _find(exc, kinds)
        if found is not None:
            print(f"{prefix}{found}", file=sys.stderr)
            return True
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
