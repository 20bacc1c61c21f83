"""The file cache: copies checked against their manifest size, kept within capacity, never
evicting a file a mounted snapshot reads, and found again by the next process."""

from __future__ import annotations

import io
import os
import threading
import time

import pytest

from icegres.engine.file_cache import FileCache, Wanted

pytestmark = pytest.mark.unit


class _Store:
    """Remote files by URI; counts opens."""

    def __init__(self, files: dict[str, bytes]) -> None:
        self.files = files
        self.opens: list[str] = []

    def open(self, uri: str) -> io.BytesIO:
        self.opens.append(uri)
        return io.BytesIO(self.files[uri])


def _fetch(cache: FileCache, store: _Store, uris: list[str]) -> bool:
    """Fetch and wait for `done` (False if the cache declined or done never came)."""
    ready = threading.Event()
    wanted = [Wanted(u, len(store.files[u])) for u in uris]
    if not cache.fetch(wanted, store.open, ready.set):
        return False
    return ready.wait(10)


def test_copies_are_made_once_and_read_back(tmp_path):
    store = _Store({"s3://b/t/a.parquet": b"a" * 1000, "s3://b/t/b.parquet": b"b" * 3000})
    cache = FileCache(tmp_path, capacity=10_000)
    assert cache.lookup("s3://b/t/a.parquet") is None
    assert _fetch(cache, store, list(store.files))
    for uri, data in store.files.items():
        local = cache.lookup(uri)
        assert local is not None and open(local, "rb").read() == data
        assert os.stat(local).st_mode & 0o777 == 0o600
    assert _fetch(cache, store, list(store.files))  # all here: done at once, nothing opened again
    assert sorted(store.opens) == sorted(store.files)
    assert cache.used_bytes == 4000


def test_a_copy_of_the_wrong_size_is_not_kept_nor_retried_at_once(tmp_path):
    store = _Store({"s3://b/t/a.parquet": b"a" * 10})
    cache = FileCache(tmp_path, capacity=10_000)
    ready = threading.Event()
    assert cache.fetch([Wanted("s3://b/t/a.parquet", 11)], store.open, ready.set)
    deadline = time.monotonic() + 10
    while store.opens == [] or cache._fetching:  # the copy ran and failed
        assert time.monotonic() < deadline
        time.sleep(0.01)
    assert not ready.is_set() and cache.lookup("s3://b/t/a.parquet") is None
    assert not any(p.name.endswith(".partial") for p in tmp_path.iterdir())
    assert not cache.fetch([Wanted("s3://b/t/a.parquet", 11)], store.open, ready.set)


def test_more_than_the_capacity_is_not_copied(tmp_path):
    store = _Store({"s3://b/a": b"a" * 600, "s3://b/b": b"b" * 600})
    cache = FileCache(tmp_path, capacity=1000)
    assert not _fetch(cache, store, ["s3://b/a", "s3://b/b"])
    assert store.opens == []


def test_room_is_made_from_unpinned_copies_least_recently_used_first(tmp_path):
    store = _Store({f"s3://b/{n}": n.encode() * 400 for n in "abcd"})
    cache = FileCache(tmp_path, capacity=1000, grace_s=0)
    assert _fetch(cache, store, ["s3://b/a"])
    assert _fetch(cache, store, ["s3://b/b"])
    pinned = {cache.lookup("s3://b/a")}  # a is read by a mount (and now also the most recent)
    cache.pin_with(lambda: pinned)
    assert _fetch(cache, store, ["s3://b/c"])  # evicts b, the unpinned one
    assert cache.lookup("s3://b/b") is None and cache.lookup("s3://b/a") is not None
    pinned.add(cache.lookup("s3://b/c"))
    store.opens.clear()
    assert not _fetch(cache, store, ["s3://b/d"])  # everything left is pinned: no room, no copy
    assert cache.lookup("s3://b/d") is None and cache.used_bytes == 800


def test_recently_read_copies_are_not_evicted(tmp_path):
    store = _Store({"s3://b/a": b"a" * 600, "s3://b/b": b"b" * 600})
    cache = FileCache(tmp_path, capacity=1000, grace_s=3600)
    assert _fetch(cache, store, ["s3://b/a"])
    assert not _fetch(cache, store, ["s3://b/b"])  # a was used moments ago: kept
    assert cache.lookup("s3://b/a") is not None


def test_the_next_process_finds_the_copies_and_clears_dead_partials(tmp_path):
    store = _Store({"s3://b/a": b"a" * 100})
    assert _fetch(FileCache(tmp_path, capacity=1000), store, ["s3://b/a"])
    dead = tmp_path / "x.parquet.999999999-1.partial"
    mine = tmp_path / f"y.parquet.{os.getpid()}-1.partial"
    dead.write_bytes(b"half")
    mine.write_bytes(b"half")
    again = FileCache(tmp_path, capacity=1000)
    assert again.lookup("s3://b/a") is not None and again.used_bytes == 100
    assert not dead.exists() and mine.exists()  # a live process may still be writing it


def test_a_request_sharing_files_with_one_in_flight_is_answered_too(tmp_path):
    """A commit re-mounts a table while its first copies are still being made: the new snapshot's
    request names files the first request is copying, and must still hear when all are here."""
    gate = threading.Event()
    store = _Store({"s3://b/a": b"a" * 100, "s3://b/new": b"n" * 50})
    slow = store.open

    def open_slowly(uri: str) -> io.BytesIO:
        if uri == "s3://b/a":
            gate.wait(10)
        return slow(uri)

    cache = FileCache(tmp_path, capacity=1000)
    first, second = threading.Event(), threading.Event()
    assert cache.fetch([Wanted("s3://b/a", 100)], open_slowly, first.set)
    assert cache.fetch([Wanted("s3://b/a", 100), Wanted("s3://b/new", 50)], open_slowly, second.set)
    assert not second.wait(0.2)  # "new" is here, "a" is not yet
    gate.set()
    assert first.wait(10) and second.wait(10)
    assert store.opens.count("s3://b/a") == 1


def test_serve_runs_without_copies_when_the_cache_directory_cannot_be_made(tmp_path, caplog):
    from icegres.config import Settings
    from icegres.serve import _file_cache

    blocker = tmp_path / "data"
    blocker.write_text("a file where the data dir should be")
    settings = Settings(data_dir=blocker, catalog_uri="http://127.0.0.1:1/catalog")
    assert _file_cache(settings) is None
    assert "no file cache" in caplog.text
    assert _file_cache(Settings(data_dir=tmp_path, catalog_uri=None)) is None  # embedded: local files
    made = _file_cache(Settings(data_dir=tmp_path, catalog_uri="http://127.0.0.1:1/catalog", file_cache_mb=5))
    assert made is not None and made.capacity == 5 << 20 and (tmp_path / "file-cache").is_dir()


def test_close_stops_a_copy_in_progress_at_its_next_chunk(tmp_path):
    started, release = threading.Event(), threading.Event()

    class Endless(io.RawIOBase):
        def readable(self) -> bool:
            return True

        def readinto(self, b) -> int:  # a huge remote file, one chunk at a time
            started.set()
            release.wait(10)
            b[:] = bytes(len(b))
            return len(b)

    cache = FileCache(tmp_path, capacity=1 << 40)
    ready = threading.Event()
    assert cache.fetch([Wanted("s3://b/huge", 1 << 39)], lambda uri: io.BufferedReader(Endless()), ready.set)
    assert started.wait(10)
    cache.close()
    release.set()
    deadline = time.monotonic() + 10
    while cache._fetching:
        assert time.monotonic() < deadline
        time.sleep(0.01)
    assert not ready.is_set() and cache.lookup("s3://b/huge") is None
    assert not list(tmp_path.iterdir())  # the partial copy is gone
