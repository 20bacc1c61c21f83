"""The catalog's change token: read on the loop only when no wait is needed."""

from __future__ import annotations

import sqlite3
import threading
import time

import pytest

from icegres.engine.catalog import BUSY, Lakehouse

pytestmark = pytest.mark.unit


@pytest.fixture
def lake(tmp_path):
    lh = Lakehouse.embedded(tmp_path)
    lh.create_namespace_if_missing("demo")
    return lh, tmp_path / "catalog.db"


def test_the_token_now_is_the_token_and_moves_with_another_connections_commit(lake) -> None:
    lh, db = lake
    assert lh.change_token_now() is BUSY  # the watch connection is opened by a thread first
    first = lh.change_token()
    assert lh.change_token_now() == first
    lh.create_namespace_if_missing("other")  # a commit on pyiceberg's own connection
    assert lh.change_token_now() == lh.change_token() != first


def test_a_writer_holding_the_lock_makes_it_busy_and_the_thread_waits_it_out(lake) -> None:
    lh, db = lake
    before = lh.change_token()
    writer = sqlite3.connect(db, isolation_level=None, check_same_thread=False)
    writer.execute("begin exclusive")
    writer.execute("create table t (x int)")
    assert lh.change_token_now() is BUSY  # never waits

    def commit_soon() -> None:
        time.sleep(0.2)
        writer.execute("commit")

    committer = threading.Thread(target=commit_soon)
    committer.start()
    started = time.monotonic()
    after = lh.change_token()  # a worker thread's read waits for the commit
    waited = time.monotonic() - started
    # The commit is visible before execute() returns in the committer; closing the connection
    # while that thread is still inside it crashes sqlite3, so wait for the thread first.
    committer.join(timeout=10)
    writer.close()
    assert waited >= 0.15
    assert after != before


def test_another_thread_reading_makes_it_busy(lake) -> None:
    lh, _ = lake
    lh.change_token()
    with lh._lock:
        assert lh.change_token_now() is BUSY
