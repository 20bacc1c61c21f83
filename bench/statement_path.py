"""The path a statement takes through icegres's modules, from the pgwire session to DataFusion.

    python -m bench.statement_path [--sql "select ..." ...] [--cold-sql "create ..." ...] [--literal] [--json]

A pgwire Session is driven in-process over a memory stream (startup, then one simple Query on a
small embedded lake); while the Query runs, every call and return in every thread is traced. Only
icegres's own modules count, and the bottom layer (icegres.pg, icegres.sql.lexer / shape, the
package faces) is left out: those are helpers any layer may call. Reported:

- modules: the distinct modules the statement entered, in the order it first entered them;
- re-entries (callbacks): calls into a module that is already on the call stack below the caller
  (a module calling back up into one that called it, directly or through others). A layered
  design has none: control goes down and comes back by returning. tests/unit/test_statement_path.py
  holds these at zero;
- returns (the literal count): calls into a module the statement entered before, on the stack or
  not, callbacks included: a module that calls a lower one twice in sequence returns to it once.
  A coroutine resumed by the event loop (an `await` completing) is control coming back by
  returning, not a call, and is not counted; the first frame of a worker thread is a call (the
  hop's caller is on another thread: it shows as "(thread)").

It only needs the pgwire session and the engine's `Engine`, so it runs on older checkouts too
(PYTHONPATH=<checkout>) to compare a before with an after.
"""

from __future__ import annotations

import argparse
import dis
import inspect
import json
import struct
import sys
import tempfile
import threading
from collections import Counter
from pathlib import Path
from typing import Any

DEFAULT_SQL = "select count(*) from demo.t where id > 5"
_BOTTOM = ("icegres.pg.", "icegres.sql.lexer", "icegres.sql.shape", "icegres.faults", "icegres.allocator",
           "icegres.collector")


def _lake(data_dir: Path):
    import pyarrow as pa

    from icegres.engine.catalog import Lakehouse

    try:
        from icegres.engine.lake import Engine
    except ImportError:  # a checkout before the engine split
        from icegres.engine.engine import Engine

    lake = Lakehouse.embedded(data_dir)
    lake.create_namespace_if_missing("demo")
    table = lake.catalog.create_table(("demo", "t"), schema=pa.schema([pa.field("id", pa.int64())]))
    table.append(pa.table({"id": pa.array(range(100), pa.int64())}))
    engine = Engine(lake)
    engine.refresh()
    return engine


def _frame(tag: bytes, body: bytes) -> bytes:
    return tag + struct.pack("!i", len(body) + 4) + body


def _startup() -> bytes:
    body = struct.pack("!i", 196608) + b"user\x00bench\x00database\x00icegres\x00\x00"
    return struct.pack("!i", len(body) + 4) + body


class Tracer:
    """Per thread: the stack of icegres modules (one entry per frame), the modules entered, the
    calls that re-entered a module already below on the stack (callbacks) and the calls into a
    module entered before (returns, the literal count)."""

    def __init__(self) -> None:
        self.on = False  # set for the measured statement only; threads are traced from their start
        self.lock = threading.Lock()
        self.stacks: dict[int, list[str]] = {}
        self.order: list[str] = []
        self.reentries: Counter[tuple[str, str]] = Counter()
        self.entered: set[str] = set()
        self.returns: Counter[tuple[str, str]] = Counter()

    def __call__(self, frame, event, arg):  # noqa: ANN001 - sys.setprofile's signature
        if not self.on or event not in ("call", "return"):
            return
        module = frame.f_globals.get("__name__", "")
        ours = module.startswith("icegres") and not module.startswith(_BOTTOM) and module != "icegres"
        stack = self.stacks.setdefault(threading.get_ident(), [])
        if event == "call":
            if ours:
                # Frames of other code (the standard library, trio) are transparent: a module that
                # calls dataclasses.replace on its own class has not left itself.
                below = [m for m in stack if m]
                caller = below[-1] if below else None
                if caller != module:
                    resumed = _resumed(frame)
                    with self.lock:
                        if module not in self.order:
                            self.order.append(module)
                        if module in below:
                            self.reentries[(caller or "", module)] += 1
                        if not resumed:
                            if module in self.entered:
                                self.returns[(caller or "(thread)", module)] += 1
                        self.entered.add(module)
            stack.append(module if ours else "")
        elif stack:
            stack.pop()


_RESUME = dis.opmap.get("RESUME")
_SUSPENDABLE = inspect.CO_GENERATOR | inspect.CO_COROUTINE | inspect.CO_ASYNC_GENERATOR | inspect.CO_ITERABLE_COROUTINE
_code_bytes: dict[Any, bytes] = {}


def _resumed(frame) -> bool:  # noqa: ANN001 - a frame object
    """Whether this 'call' event resumes a suspended generator or coroutine (RESUME's argument is
    0 only at the start of a function: Python 3.11+), rather than starting a call."""
    code = frame.f_code
    if _RESUME is None or not code.co_flags & _SUSPENDABLE:
        return False
    raw = _code_bytes.get(code)
    if raw is None:
        raw = _code_bytes[code] = code.co_code  # (a copy per access in 3.11: keep one)
    at = frame.f_lasti
    return 0 <= at < len(raw) - 1 and raw[at] == _RESUME and raw[at + 1] != 0


_current: Tracer | None = None
_installed = False


def _dispatch(frame, event, arg):  # noqa: ANN001 - sys.setprofile's signature
    tracer = _current
    if tracer is not None:
        tracer(frame, event, arg)


def _install() -> None:
    """Profile this thread and every thread started from now on, once per process: a worker
    thread is reused across statements (trio's thread cache), so it must carry the dispatcher
    from its start. A thread started before this call is not seen: trace in a fresh process."""
    global _installed
    if not _installed:
        threading.setprofile(_dispatch)
        sys.setprofile(_dispatch)
        _installed = True


async def _run(engine, sql: str, tracer: Tracer, warm: bool) -> None:
    import trio
    import trio.testing

    from icegres.config import Settings
    from icegres.protocol.pgwire.server import PgServer
    from icegres.protocol.pgwire.session import Session

    server = PgServer(Settings(data_dir=Path(tempfile.gettempdir())), engine)
    client, server_end = trio.testing.memory_stream_pair()
    session = Session(server, server_end, "bench")

    async def until_ready() -> bytes:
        got = b""
        while True:
            got += await client.receive_some(65536)
            if b"Z\x00\x00\x00\x05" in got:
                return got

    global _current
    _install()
    _current = tracer
    async with trio.open_nursery() as nursery:
        nursery.start_soon(session.run)
        await client.send_all(_startup())
        await until_ready()
        if warm:  # imports, caches; a statement that changes the catalog is measured --cold
            await client.send_all(_frame(b"Q", sql.encode() + b"\x00"))
            await until_ready()
        tracer.on = True
        try:
            await client.send_all(_frame(b"Q", sql.encode() + b"\x00"))
            reply = await until_ready()
        finally:
            tracer.on = False
            _current = None
        assert b"E" not in reply[:1], reply
        await client.send_all(_frame(b"X", b""))
        nursery.cancel_scope.cancel()


def trace(sql: str, *, warm: bool = True) -> dict[str, Any]:
    """The modules `sql` enters and the calls that re-entered one, on a fresh small lake. Worker
    threads are seen only if none was started in this process before the first trace."""
    import trio

    with tempfile.TemporaryDirectory() as tmp:
        engine = _lake(Path(tmp))
        tracer = Tracer()
        trio.run(_run, engine, sql, tracer, warm)
    return {"sql": sql, "modules": tracer.order, "reentries": sum(tracer.reentries.values()),
            "reentered": [f"{a} -> {b} ({n})" for (a, b), n in tracer.reentries.most_common()],
            "returns": sum(tracer.returns.values()),
            "returned": [f"{a} -> {b} ({n})" for (a, b), n in tracer.returns.most_common()]}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--sql", action="append", help=f"a statement to trace (default: {DEFAULT_SQL!r})")
    parser.add_argument("--cold-sql", action="append", default=[],
                        help="a statement traced without a warm-up run (DDL)")
    parser.add_argument("--literal", action="store_true",
                        help="list the returns too: every call into a module entered before")
    parser.add_argument("--json", action="store_true")
    args = parser.parse_args(argv)
    _install()  # before any thread starts
    cases = [(sql, True) for sql in (args.sql or ([] if args.cold_sql else [DEFAULT_SQL]))]
    cases += [(sql, False) for sql in args.cold_sql]
    found = [trace(sql, warm=warm) for sql, warm in cases]
    if args.json:
        print(json.dumps(found, indent=2))
        return 0
    for one in found:
        print(f"{len(one['modules'])} modules, {one['reentries']} re-entries (callbacks), "
              f"{one['returns']} returns (literal): {one['sql']}")
        print("  path: " + " -> ".join(m.removeprefix("icegres.") for m in one["modules"]))
        for line in one["reentered"]:
            print("  re-entered: " + line)
        for line in one["returned"] if args.literal else ():
            print("  returned to: " + line)
    return 0


if __name__ == "__main__":
    sys.exit(main())
