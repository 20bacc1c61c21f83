"""What a run leaves in the deployment's tails, removed at its end (unless --keep): the scratch
log directories beside --tail-dir, and the scratch servers' rows in the --tail-url database. Only
what this run's servers made: their tail ids derive from their own data directories."""

from __future__ import annotations

import contextlib
import shutil
from collections.abc import Iterable
from pathlib import Path

from icegres.verify.deployment import Deployment, TailPlan

__all__ = ["remove_scratch_tails"]


def remove_scratch_tails(deployment: Deployment, plans: Iterable[TailPlan], server_dirs: Iterable[Path]) -> None:
    server_dirs = list(server_dirs)
    for plan in plans:
        if plan.kind == "dir" and f".verify-{deployment.run_id}" in Path(plan.value).name:
            shutil.rmtree(plan.value, ignore_errors=True)
        elif plan.kind == "url":
            with contextlib.suppress(Exception):  # the tail database went away: nothing to tidy
                _delete_pg_rows(plan.value, [_pg_tail_id(deployment, d) for d in server_dirs])


def _pg_tail_id(deployment: Deployment, data_dir: Path) -> str:
    from icegres.config import resolve
    from icegres.serve import pg_tail_id

    environ = {**deployment.env_for(), "ICEGRES_DATA_DIR": str(data_dir)}
    return pg_tail_id(resolve({}, environ=environ))


def _delete_pg_rows(url: str, tail_ids: list[str]) -> None:
    import psycopg

    from icegres.machines.drivers.pgtail import DEFAULT_TABLE

    with psycopg.connect(url, autocommit=True, connect_timeout=5) as conn:
        for table in (DEFAULT_TABLE, f"{DEFAULT_TABLE}_owner"):
            exists = conn.execute("select to_regclass(%s)", (table,)).fetchone()[0]
            if exists is not None:
                conn.execute(f"delete from {table} where tail_id = any(%s)", (tail_ids,))  # noqa: S608
