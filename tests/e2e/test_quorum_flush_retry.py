"""A quorum writer's flush that loses a race to another commit is retried and lands.

Found by `icegres verify` (the fencing claim's author): a lake-fenced flush retries as a
recovery, which charges the earlier attempt before it looks for its token; with one attempt
allowed, every retry gave up after looking, and after its tries the flush was dropped — five
acknowledged rows never reached the lake (and the keepers trimmed them)."""

from __future__ import annotations

import time
from pathlib import Path

import psycopg
import pyarrow as pa
import pytest

from icegres.engine.catalog import Lakehouse
from tests.support.icegres_server import running_icegres
from tests.support.keepers import start_keepers

pytestmark = [pytest.mark.e2e, pytest.mark.timeout(180)]


def _ids(data_dir: Path) -> list[int]:
    table = Lakehouse.embedded(data_dir).catalog.load_table("s.t")
    return sorted(table.scan().to_arrow().column("id").to_pylist())


def test_a_flush_that_lost_a_race_to_another_commit_lands_on_retry(tmp_path: Path) -> None:
    keepers = start_keepers(tmp_path)
    data_dir = tmp_path / "lake"
    try:
        args = ("--write-buffer-ms", "500", "--tail-quorum", ",".join(k.address for k in keepers))
        # Every publish waits 3 s once its snapshot is written: room for another commit to land.
        with running_icegres(data_dir, args=args, env={"ICEGRES_FAULTS": "before-publish=sleep:3"}) as srv:
            with psycopg.connect(srv.dsn(), autocommit=True) as conn:
                conn.execute("create schema s")
                conn.execute("create table s.t (id bigint)")
                published = srv.log_tail(100_000).count("reached before-publish")
                for n in range(5):
                    conn.execute("insert into s.t values (%s)", (n,))  # acknowledged from the quorum tail
            deadline = time.monotonic() + 30
            while srv.log_tail(100_000).count("reached before-publish") == published:
                assert time.monotonic() < deadline, srv.log_tail()
                time.sleep(0.05)
            # The flush is between writing its snapshot and publishing it: another writer commits.
            Lakehouse.embedded(data_dir).catalog.load_table("s.t").append(pa.table({"id": pa.array([100], pa.int64())}))
            deadline = time.monotonic() + 60
            while _ids(data_dir) != [0, 1, 2, 3, 4, 100]:
                assert time.monotonic() < deadline, (_ids(data_dir), srv.log_tail())
                time.sleep(0.2)
    finally:
        for keeper in keepers:
            keeper.stop()
