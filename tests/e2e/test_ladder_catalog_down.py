"""The write ladder with the catalog down: a server on SeaweedFS's REST catalog keeps acking into its
tail while SeaweedFS is stopped, is killed with SIGKILL while the catalog is still down, and after
SeaweedFS returns the restarted server replays every acked row into the lake exactly once."""

from __future__ import annotations

import signal
import time
from collections import Counter
from pathlib import Path

import pytest
from pyiceberg.catalog import load_catalog

from tests.support.ladder import Server, Writers, make_table, serve

pytestmark = [pytest.mark.e2e, pytest.mark.timeout(300)]

WINDOW_MS = 100


def lake_ids(stack, ns: str) -> list[int]:
    """Every id in the table's current snapshot, read by pyiceberg over REST (not through icegres)."""
    table = load_catalog("check", **stack.pyiceberg_properties()).load_table((ns, "t"))
    if table.current_snapshot() is None:
        return []
    return table.scan(selected_fields=("id",)).to_arrow().column("id").to_pylist()


def wait_acks(writers: Writers, more_than: int, srv: Server, timeout_s: float = 30) -> None:
    deadline = time.monotonic() + timeout_s
    while writers.count() <= more_than:
        assert not writers.errors, writers.errors
        assert srv.proc.poll() is None, srv.log()[-3000:]
        assert time.monotonic() < deadline, f"no acks beyond {more_than} within {timeout_s} s\n{srv.log()[-3000:]}"
        time.sleep(0.02)


@pytest.mark.parametrize("tail", ["tail-dir", "tail-url"])
def test_sigkill_with_the_catalog_down_loses_no_acked_row(stack, real_postgres, tmp_path: Path, tail: str) -> None:
    data_dir = tmp_path / "data"
    data_dir.mkdir()
    env = stack.env()
    if tail == "tail-dir":
        tail_args = ("--tail-dir", str(tmp_path / "wal"))
    else:
        pg = real_postgres
        tail_args = ("--tail-url", f"postgresql://{pg.user}@{pg.host}:{pg.port}/{pg.dbname}")
    args = ("--write-buffer-ms", str(WINDOW_MS), *tail_args)

    with serve(data_dir, *args, env=env) as srv:
        ns = make_table(srv, prefix="down")
        with Writers(srv, f"{ns}.t", 4) as writers:
            wait_acks(writers, 20, srv)
            stack.stop_seaweed(graceful=False)
            try:
                # Acks go on from the tail while no flush can reach the lake.
                deadline = time.monotonic() + 30
                while "staging failed, will retry" not in srv.log():
                    assert time.monotonic() < deadline, srv.log()[-3000:]
                    time.sleep(0.05)
                wait_acks(writers, writers.count() + 20, srv)
                srv.stop(signal.SIGKILL)
            except BaseException:
                stack.start_seaweed()
                raise
        assert not writers.errors, writers.errors
        acked = list(writers.acked)

    stack.start_seaweed()
    with serve(data_dir, *args, env=env, timeout_s=120) as srv:
        # Replay flushed before serving: the lake alone holds every acked row, once.
        ids = lake_ids(stack, ns)
        dupes = [i for i, n in Counter(ids).items() if n > 1]
        assert not dupes, f"duplicated after replay: {dupes[:10]}"
        missing = set(acked) - set(ids)
        assert not missing, f"acked but lost: {sorted(missing)[:10]}"
        with srv.connect() as conn:
            assert conn.execute(f"select count(*) from {ns}.t").fetchone() == (len(ids),)
        srv.stop()
