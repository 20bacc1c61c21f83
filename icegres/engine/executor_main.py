"""An execution process (`python -m icegres.engine.executor_main FD POOL_BYTES SPILL_DIR SETTINGS`):
runs the plans the server sends it over the socket FD, one at a time, and sends back their
batches (engine/executor.py has the protocol and why the process exists).

It imports only DataFusion and pyarrow at start (about a second): a plan holding a Python UDF
imports that UDF's module when it is unpickled.
"""

from __future__ import annotations

import sys
import threading
from multiprocessing.connection import Connection
from typing import Any

SCHEMA, BATCH, DONE, ERROR = b"S", b"B", b"D", b"E"
# From the server: a plan to run (answered), or the object stores its plans read (not answered):
# JSON, bucket -> AmazonS3's keyword arguments, sent before a plan that names s3:// files.
# A plan is physical (PLAN + its bytes) or, where DataFusion's physical codec lacks a node,
# logical (LOGICAL + its bytes), planned here with the server's settings (the process's argv).
PLAN, LOGICAL, STORES = b"P", b"L", b"O"
# The execution processes' niceness: under CPU contention the kernel gives the server's threads
# (light statements, encoding, the event loop) about 10x their weight, so a runaway join slows a
# point lookup less; alone, a heavy statement still gets every core.
NICE = 10


def serve(conn: Connection, pool_bytes: int, spill: str, settings: dict[str, str]) -> None:
    from datafusion import RuntimeEnvBuilder, SessionConfig, SessionContext

    runtime = RuntimeEnvBuilder().with_fair_spill_pool(pool_bytes).with_temp_file_path(spill)
    config = SessionConfig()
    for key, value in settings.items():
        config = config.set(key, value)
    ctx = SessionContext(config, runtime)
    conn.send_bytes(DONE)  # ready
    stores = b""
    while True:
        try:
            message = conn.recv_bytes()
        except EOFError:
            return
        if message[:1] == STORES:
            if message != stores:  # the same stores as last time are registered already
                register_stores(ctx, message[1:])
                stores = message
            continue
        try:
            run(ctx, conn, message)
        except BrokenPipeError:
            return
        except BaseException as exc:  # noqa: BLE001 - every failure is the statement's, sent back as text
            conn.send_bytes(ERROR + str(exc).encode("utf-8", "replace"))
        else:
            conn.send_bytes(DONE)


def register_stores(ctx: Any, config: bytes) -> None:
    """The server's object stores, built again here (mounts.ObjectStores.configs)."""
    import json

    from datafusion.object_store import AmazonS3

    for bucket, kwargs in json.loads(config).items():
        ctx.register_object_store("s3://", AmazonS3(**kwargs), bucket)


def physical(ctx: Any, message: bytes) -> Any:
    """The physical plan of a PLAN or LOGICAL message."""
    from datafusion.plan import ExecutionPlan, LogicalPlan

    if message[:1] == PLAN:
        return ExecutionPlan.from_bytes(ctx, message[1:])
    return ctx.create_dataframe_from_logical_plan(LogicalPlan.from_bytes(ctx, message[1:])).execution_plan()


def run(ctx: Any, conn: Connection, message: bytes) -> None:
    """Every output partition of the plan pulled at once (a thread each: their streams run on
    DataFusion's runtime in parallel), each batch sent as it comes."""
    plan = physical(ctx, message)
    streams = [ctx.execute(plan, i) for i in range(plan.partition_count)]
    lock = threading.Lock()
    sent_schema = False
    failures: list[BaseException] = []

    def pull(stream: Any) -> None:
        nonlocal sent_schema
        try:
            for batch in stream:
                arrow = batch.to_pyarrow()
                with lock:
                    if failures:
                        return
                    if not sent_schema:
                        conn.send_bytes(SCHEMA + arrow.schema.serialize().to_pybytes())
                        sent_schema = True
                    conn.send_bytes(BATCH + arrow.serialize().to_pybytes())
        except BaseException as exc:  # noqa: BLE001
            with lock:
                failures.append(exc)

    # A thread even for one stream: the main thread's stack is the system's 8 MB, a started
    # thread's the deep one of icegres/stacks.py (a long string's cast needs it).
    threads = [threading.Thread(target=pull, args=(s,), daemon=True) for s in streams]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    if failures:
        raise failures[0]


def _die_with_parent() -> None:
    """Exit when the server is gone, however it went: a busy process would otherwise compute on
    until it next writes to the closed socket. Not PR_SET_PDEATHSIG: that fires when the thread
    that started the process ends, and the server starts them from short-lived threads."""
    import os
    import time

    parent = os.getppid()

    def watch() -> None:
        while os.getppid() == parent:
            time.sleep(0.5)
        os._exit(1)

    threading.Thread(target=watch, daemon=True, name="parent-watch").start()


def main(argv: list[str]) -> None:
    import os

    from icegres.stacks import deep_stacks

    deep_stacks()
    _die_with_parent()
    # Heavy statements yield the CPU to the server's own threads (point lookups, the wire).
    os.nice(NICE)
    import json

    fd, pool_bytes, spill, settings = int(argv[0]), int(argv[1]), argv[2], json.loads(argv[3])
    try:
        serve(Connection(fd), pool_bytes, spill, settings)
    except (BrokenPipeError, ConnectionResetError, EOFError):
        pass  # the server went away (stopped, or refused its configuration while we started)


if __name__ == "__main__":
    main(sys.argv[1:])
