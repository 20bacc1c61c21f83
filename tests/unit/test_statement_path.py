"""A statement followed from the pgwire session down to DataFusion enters each module once: no
module calls back into one that called it (bench/statement_path.py traces every thread, in a
fresh process so that every worker thread carries its tracer)."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

pytestmark = pytest.mark.unit

ROOT = Path(__file__).resolve().parents[2]
WARM = [
    "select count(*) from demo.t where id > 5",
    "select c.relname from pg_catalog.pg_class c where c.relname = 't'",
    "insert into demo.t values (1000)",
    "update demo.t set id = id + 1 where id = 7 returning id",
    "delete from demo.t where id = 3",
]
COLD = ["create table demo.u (a int)"]


def test_every_statement_goes_down_and_comes_back() -> None:
    args = [sys.executable, "-m", "bench.statement_path", "--json"]
    args += [a for sql in WARM for a in ("--sql", sql)] + [a for sql in COLD for a in ("--cold-sql", sql)]
    done = subprocess.run(args, cwd=ROOT, capture_output=True, text=True, timeout=240)
    assert done.returncode == 0, done.stderr[-3000:]
    found = {one["sql"]: one for one in json.loads(done.stdout)}
    assert set(found) == set(WARM + COLD)
    for sql, one in found.items():
        # The trace saw the worker threads (the engine runs there), not only the session's task.
        assert "icegres.engine.lake" in one["modules"], sql
        assert one["reentered"] == [], sql


class Frame:
    """What the tracer reads of a frame: a plain function's, in `module`."""

    f_code = (lambda: None).__code__
    f_lasti = 0

    def __init__(self, module: str) -> None:
        self.f_globals = {"__name__": module}


def test_the_tracer_counts_a_call_back() -> None:
    from bench.statement_path import Tracer

    tracer = Tracer()
    tracer.on = True
    for module in ("icegres.engine.query", "dataclasses", "icegres.engine.views", "icegres.engine.query"):
        tracer(Frame(module), "call", None)
    assert tracer.reentries == {("icegres.engine.views", "icegres.engine.query"): 1}
    assert tracer.order == ["icegres.engine.query", "icegres.engine.views"]
    assert tracer.returns == {("icegres.engine.views", "icegres.engine.query"): 1}  # a return too


def test_the_tracer_counts_a_return_to_a_module_left_as_a_return_only() -> None:
    """The literal count: a second call into a lower module from the same caller returns to a
    module already left, which the layering allows (no callback)."""
    from bench.statement_path import Tracer

    tracer = Tracer()
    tracer.on = True
    query, lake = Frame("icegres.engine.query"), Frame("icegres.engine.lake")
    for frame, event in ((query, "call"), (lake, "call"), (lake, "return"), (lake, "call"), (lake, "return")):
        tracer(frame, event, None)
    assert tracer.reentries == {}
    assert tracer.returns == {("icegres.engine.query", "icegres.engine.lake"): 1}


def test_a_resumed_coroutine_is_no_call() -> None:
    """An `await` completing resumes its coroutine with a 'call' event: control coming back by
    returning, which the literal count leaves out."""
    from bench.statement_path import _resumed

    def numbers():
        yield 1
        yield 2

    seen = []

    def profile(frame, event, arg):  # noqa: ANN001, ANN202 - sys.setprofile's signature
        if event == "call" and frame.f_code is numbers.__code__:
            seen.append(_resumed(frame))

    sys.setprofile(profile)
    try:
        assert list(numbers()) == [1, 2]
    finally:
        sys.setprofile(None)
    assert seen == [False, True, True]
