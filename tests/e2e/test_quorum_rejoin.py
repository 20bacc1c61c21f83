"""Replacing a keeper that lost its disk, with real processes on 127.0.0.1.

Three `icegres keeper` processes and `icegres serve --tail-quorum` under concurrent INSERTs. One
keeper is SIGKILLed and its data directory wiped (a lost disk); a plain restart refuses (no log);
it comes back with `--rejoin` naming the other two, refuses writers until it caught up, then
serves. A different keeper is SIGKILLed: the rejoined one now carries the majority, and writes go
on. The server is SIGKILLed mid-load and a replacement replays from the two keepers left: every
acknowledged row is in the lake exactly once.
"""

from __future__ import annotations

import shutil
import signal
import subprocess
import sys
import time
from collections import Counter
from pathlib import Path

import pytest
import trio

from icegres.machines.quorum import Prepare, Refused, Term
from icegres.machines.quorum_format import IncompleteFrame, decode_frame, encode_frame
from tests.support.keepers import Keeper, start_keepers
from tests.support.ladder import Writers, lake_ids, make_table, serve

pytestmark = [pytest.mark.e2e, pytest.mark.timeout(240)]

CATCH_UP_TIMEOUT_S = 30
LOAD_TIMEOUT_S = 30
ROWS_PER_PHASE = 30


def _wait_caught_up(keeper: Keeper) -> None:
    deadline = time.monotonic() + CATCH_UP_TIMEOUT_S
    while "caught up and serving" not in keeper.log_path.read_text():
        assert time.monotonic() < deadline, keeper.log_path.read_text()[-3000:]
        assert keeper.proc is not None and keeper.proc.poll() is None, keeper.log_path.read_text()[-3000:]
        time.sleep(0.05)


def _wait_rows(writers: Writers, at_least: int, what: str, log: str = "") -> None:
    deadline = time.monotonic() + LOAD_TIMEOUT_S
    while writers.count() < at_least and time.monotonic() < deadline:
        time.sleep(0.05)
    assert writers.count() >= at_least, f"{what}: {writers.count()} < {at_least} acked\n{log}"


def _refuses_a_writer(port: int) -> bool:
    """True if the keeper on `port` answers a Prepare with Refused (catching up)."""

    async def probe() -> bool:
        with trio.fail_after(5):
            stream = await trio.open_tcp_stream("127.0.0.1", port)
            async with stream:
                # A term far below any real one: a serving keeper rejects it, never promises.
                await stream.send_all(encode_frame(Prepare(Term(1, "probe"))))
                data = b""
                while True:
                    chunk = await stream.receive_some(65536)
                    assert chunk, "the keeper closed the connection without an answer"
                    data += chunk
                    try:
                        message, _ = decode_frame(data)
                    except IncompleteFrame:
                        continue
                    return isinstance(message, Refused)

    return trio.run(probe)


def test_a_keeper_that_lost_its_disk_rejoins_and_carries_the_quorum(tmp_path: Path) -> None:
    keepers = start_keepers(tmp_path)
    data_dir = tmp_path / "data"
    data_dir.mkdir()
    quorum = ",".join(k.address for k in keepers)
    try:
        args = ("--write-buffer-ms", "300", "--tail-quorum", quorum)
        with serve(data_dir, *args) as srv:
            ns = make_table(srv, prefix="r")
            with Writers(srv, f"{ns}.t", 4) as writers:
                _wait_rows(writers, ROWS_PER_PHASE, "before any fault", srv.log()[-2000:])

                # Keeper 0 loses its disk mid-load.
                keepers[0].stop()  # SIGKILL
                shutil.rmtree(keepers[0].data_dir)
                mark = writers.count()
                _wait_rows(writers, mark + ROWS_PER_PHASE, "with keeper 0 gone")

                # A plain restart refuses: it would come back having forgotten its promises. (On
                # port 0: the refusal is the directory's; the keeper's own port stays untouched.)
                refused = subprocess.run(
                    [sys.executable, "-m", "icegres", "keeper", "--host", "127.0.0.1",
                     "--port", "0", "--data-dir", str(keepers[0].data_dir)],
                    capture_output=True, text=True, timeout=60,
                )
                assert refused.returncode == 1 and "--rejoin" in refused.stderr, refused.stderr

                # --rejoin: it catches up from the other two before it answers anyone.
                keepers[0].start("--rejoin", ",".join(k.address for k in keepers[1:]))
                _wait_caught_up(keepers[0])
                assert not _refuses_a_writer(keepers[0].port)
                caught_up = keepers[0].durable_state()
                assert caught_up.rejoins == 1 and caught_up.promised.round > 0
                mark = writers.count()
                _wait_rows(writers, mark + ROWS_PER_PHASE, "after the rejoin")

                # A different keeper dies: the rejoined one and keeper 2 are the majority now.
                keepers[1].stop()
                mark = writers.count()
                _wait_rows(writers, mark + ROWS_PER_PHASE, "with keeper 1 gone", srv.log()[-3000:])
                srv.stop(signal.SIGKILL)  # the writer dies too, acked rows unflushed
            acked = list(writers.acked)
        assert len(acked) >= 4 * ROWS_PER_PHASE
        # A replacement writer on keepers 0 (rejoined) and 2 replays what was acknowledged.
        with serve(data_dir, *args) as srv:
            assert "replayed" in srv.log()
            with srv.connect() as conn:
                count = conn.execute(f"select count(*) from {ns}.t").fetchone()[0]
            assert srv.stop(signal.SIGTERM) == 0
        ids = lake_ids(data_dir, ns)
        twice = [i for i, n in Counter(ids).items() if n > 1]
        assert not twice, f"rows in the lake twice: {twice[:10]}"
        missing = set(acked) - set(ids)
        assert not missing, f"{len(missing)} acknowledged rows lost"
        assert count == len(ids)
    finally:
        for keeper in keepers:
            keeper.stop()


def test_a_rejoining_keeper_refuses_writers_until_both_others_answer(tmp_path: Path) -> None:
    """With one of the two others down, the catch-up cannot finish: the keeper keeps refusing
    (a clear error, never a promise), and finishes once the other returns."""
    keepers = start_keepers(tmp_path)
    try:
        keepers[0].stop()
        shutil.rmtree(keepers[0].data_dir)
        keepers[2].stop()
        keepers[0].start("--rejoin", ",".join(k.address for k in keepers[1:]))
        time.sleep(1.0)
        assert _refuses_a_writer(keepers[0].port)
        assert not (keepers[0].data_dir / "keeper.log").exists()  # nothing durable yet
        keepers[2].start()
        _wait_caught_up(keepers[0])
        assert not _refuses_a_writer(keepers[0].port)
        assert [k.durable_state().rejoins for k in keepers] == [1, 1, 1]
    finally:
        for keeper in keepers:
            keeper.stop()
