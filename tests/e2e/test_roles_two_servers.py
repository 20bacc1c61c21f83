"""Roles, grants and policies made on one icegres server are in force on another server of the
same catalog (they live in the catalog: engine/acl_store.py), and GRANTs made on both at once are
all kept (compare-and-swap, re-applied on a lost race)."""

from __future__ import annotations

import threading
import time

import psycopg
import pytest

from tests.support.icegres_server import running_icegres

pytestmark = [pytest.mark.e2e, pytest.mark.timeout(240)]

SEEN_WITHIN_S = 10.0  # a server reads the state again at most a second after it last did


def _eventually(check, what: str) -> None:
    deadline = time.monotonic() + SEEN_WITHIN_S
    while True:
        try:
            if check():
                return
        except psycopg.Error:
            pass
        if time.monotonic() > deadline:
            raise AssertionError(f"not within {SEEN_WITHIN_S} s: {what}")
        time.sleep(0.2)


def _may_read(dsn: str, table: str) -> bool:
    with psycopg.connect(dsn, autocommit=True) as conn:
        try:
            conn.execute(f"SELECT count(*) FROM {table}").fetchone()
            return True
        except psycopg.errors.InsufficientPrivilege:
            return False


def test_grants_and_policies_made_on_one_server_hold_on_the_other(tmp_path) -> None:
    with running_icegres(tmp_path / "a") as a:
        catalog = f"sqlite:///{tmp_path / 'a' / 'catalog.db'}"
        with running_icegres(tmp_path / "b", args=("--catalog-uri", catalog)) as b:
            with psycopg.connect(a.dsn(), autocommit=True) as admin:
                for sql in ("CREATE SCHEMA shop", "CREATE TABLE shop.items (id int, owner text)",
                            "INSERT INTO shop.items VALUES (1, 'analyst'), (2, 'other')",
                            "CREATE ROLE analyst LOGIN", "GRANT USAGE ON SCHEMA shop TO analyst"):
                    admin.execute(sql)
            as_analyst_on_b = b.dsn(user="analyst")
            assert not _may_read(as_analyst_on_b, "shop.items")
            with psycopg.connect(a.dsn(), autocommit=True) as admin:
                admin.execute("GRANT SELECT ON shop.items TO analyst")
            _eventually(lambda: _may_read(as_analyst_on_b, "shop.items"), "the GRANT made on a, on b")
            with psycopg.connect(a.dsn(), autocommit=True) as admin:
                admin.execute("ALTER TABLE shop.items ENABLE ROW LEVEL SECURITY")
                admin.execute("CREATE POLICY own ON shop.items USING (owner = current_user)")

            def only_own_rows() -> bool:
                with psycopg.connect(as_analyst_on_b, autocommit=True) as conn:
                    return conn.execute("SELECT id FROM shop.items ORDER BY id").fetchall() == [(1,)]
            _eventually(only_own_rows, "the policy made on a, on b")
            with psycopg.connect(a.dsn(), autocommit=True) as admin:
                admin.execute("CREATE VIEW shop.everything AS SELECT * FROM shop.items")
            with psycopg.connect(as_analyst_on_b, autocommit=True) as conn:
                with pytest.raises(psycopg.errors.InsufficientPrivilege, match="permission denied for view everything"):
                    conn.execute("SELECT * FROM shop.everything")
            with psycopg.connect(b.dsn(), autocommit=True) as admin:
                admin.execute("REVOKE SELECT ON shop.items FROM analyst")
            _eventually(lambda: not _may_read(a.dsn(user="analyst"), "shop.items"), "the REVOKE made on b, on a")


def test_grants_made_on_two_servers_at_once_are_all_kept(tmp_path) -> None:
    roles = [f"r{i}" for i in range(16)]
    with running_icegres(tmp_path / "a") as a:
        catalog = f"sqlite:///{tmp_path / 'a' / 'catalog.db'}"
        with running_icegres(tmp_path / "b", args=("--catalog-uri", catalog)) as b:
            with psycopg.connect(a.dsn(), autocommit=True) as admin:
                admin.execute("CREATE SCHEMA s")
                admin.execute("CREATE TABLE s.t (a int)")
                for role in roles:
                    admin.execute(f"CREATE ROLE {role}")
            errors: list[BaseException] = []

            def grant_all(dsn: str, mine: list[str]) -> None:
                try:
                    with psycopg.connect(dsn, autocommit=True) as conn:
                        for role in mine:
                            conn.execute(f"GRANT SELECT ON s.t TO {role}")
                except BaseException as exc:  # noqa: BLE001 (reported below)
                    errors.append(exc)

            threads = [threading.Thread(target=grant_all, args=(a.dsn(), roles[0::2])),
                       threading.Thread(target=grant_all, args=(b.dsn(), roles[1::2]))]
            for thread in threads:
                thread.start()
            for thread in threads:
                thread.join()
            assert errors == []

            def all_granted() -> bool:
                with psycopg.connect(a.dsn(), autocommit=True) as conn:
                    rows = conn.execute("SELECT grantee FROM information_schema.table_privileges "
                                        "WHERE table_schema = 's' AND privilege_type = 'SELECT'").fetchall()
                return {r[0] for r in rows} >= set(roles)
            _eventually(all_granted, "every GRANT of both servers")


def test_a_block_whose_grant_another_server_made_impossible_commits_nothing(tmp_path) -> None:
    """A block's data and its role and privilege changes commit together where they can: its
    GRANT to a role another server dropped meanwhile fails the COMMIT (PostgreSQL's error for
    that role), and the block's INSERT is not committed either."""
    with running_icegres(tmp_path / "a") as a:
        catalog = f"sqlite:///{tmp_path / 'a' / 'catalog.db'}"
        with running_icegres(tmp_path / "b", args=("--catalog-uri", catalog)) as b:
            with psycopg.connect(a.dsn(), autocommit=True) as on_a, psycopg.connect(b.dsn(), autocommit=True) as on_b:
                on_a.execute("CREATE TABLE blk_items (id int)")
                on_a.execute("CREATE ROLE blk_reader")
                _eventually(lambda: on_b.execute("SELECT count(*) FROM pg_roles WHERE rolname = 'blk_reader'")
                            .fetchone() == (1,), "the role seen on b")
                on_a.execute("BEGIN")
                on_a.execute("INSERT INTO blk_items VALUES (1)")
                on_a.execute("GRANT SELECT ON blk_items TO blk_reader")
                on_b.execute("DROP ROLE blk_reader")
                with pytest.raises(psycopg.errors.UndefinedObject, match='role "blk_reader" does not exist'):
                    on_a.execute("COMMIT")
                assert on_a.execute("SELECT count(*) FROM blk_items").fetchone() == (0,)
                assert on_a.execute("SELECT count(*) FROM pg_roles WHERE rolname = 'blk_reader'").fetchone() == (0,)
