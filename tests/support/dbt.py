"""dbt (dbt-core 1.11 + dbt-postgres 1.11, their own venv: infra/tool-venv.sh dbt) driven for real.

`DbtProject.copy` copies a project directory beside a profiles.yml that names one PostgreSQL-speaking
server (icegres or a real PostgreSQL) with the postgres adapter; `run` is the real `dbt` in a
subprocess, bounded, with a clean environment (no ~/.dbt, no usage stats).
"""

from __future__ import annotations

import json
import shutil
import subprocess
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import psycopg

from tests.support.tool_venv import tool_venv

DBT_TIMEOUT_S = 180  # one dbt command; a run takes seconds, most of it dbt starting


def dbt_executable() -> Path:
    """The `dbt` of the pinned venv, installed first if it is missing or stale."""
    return tool_venv("dbt") / "bin" / "dbt"


@dataclass(frozen=True)
class DbtTarget:
    """Where a profile points: any server that speaks PostgreSQL's protocol."""

    host: str
    port: int
    user: str
    password: str
    dbname: str

    def dsn(self) -> str:
        return f"host={self.host} port={self.port} user={self.user} password={self.password} dbname={self.dbname}"

    def profile(self, threads: int = 1) -> str:
        """profiles.yml with one output, the postgres adapter; the schema comes from $DBT_SCHEMA."""
        return ("icegres:\n"
                "  target: dev\n"
                "  outputs:\n"
                "    dev:\n"
                "      type: postgres\n"
                f"      host: {self.host}\n"
                f"      port: {self.port}\n"
                f"      user: {self.user}\n"
                f"      password: \"{self.password}\"\n"
                f"      dbname: {self.dbname}\n"
                "      schema: \"{{ env_var('DBT_SCHEMA') }}\"\n"
                f"      threads: {threads}\n"
                "      connect_timeout: 10\n")


@dataclass
class DbtProject:
    """One copy of a dbt project, its profile pointing at `target` with `schema`."""

    dbt: Path
    root: Path
    target: DbtTarget
    schema: str

    @classmethod
    def copy(cls, dbt: Path, source: Path, root: Path, target: DbtTarget, schema: str) -> DbtProject:
        shutil.copytree(source, root)
        (root / "profiles.yml").write_text(target.profile())
        return cls(dbt, root, target, schema)

    def run(self, *args: str) -> subprocess.CompletedProcess[str]:
        """`dbt <args>` in the project, bounded; its output is in the failure message if it fails."""
        env = {"PATH": f"{self.dbt.parent}:/usr/bin:/bin", "HOME": str(self.root), "LANG": "C.UTF-8",
               "TZ": "Etc/UTC", "DBT_PROFILES_DIR": str(self.root), "DBT_SEND_ANONYMOUS_USAGE_STATS": "false",
               "DBT_SCHEMA": self.schema}
        return subprocess.run([str(self.dbt), *args], cwd=self.root, env=env, capture_output=True, text=True,
                              timeout=DBT_TIMEOUT_S, stdin=subprocess.DEVNULL)

    def ok(self, *args: str) -> list[dict[str, Any]]:
        """`dbt <args>`, which must exit 0 with every node it ran a success; the run's results."""
        return self.succeeded(self.run(*args), *args)

    def succeeded(self, done: subprocess.CompletedProcess[str], *args: str) -> list[dict[str, Any]]:
        assert done.returncode == 0, f"dbt {' '.join(args)} exited {done.returncode}:\n{done.stdout[-6000:]}"
        results = json.loads((self.root / "target" / "run_results.json").read_text())["results"]
        assert results and all(r["status"] in ("success", "pass") for r in results), done.stdout[-6000:]
        return results

    def rows(self, sql: str) -> list[tuple[Any, ...]]:
        with psycopg.connect(self.target.dsn(), autocommit=True) as conn:
            return conn.execute(sql.format(schema=self.schema)).fetchall()
