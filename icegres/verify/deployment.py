"""The deployment under test, as its scratch servers see it: the catalog and storage settings each
child gets (in its environment), and the tails the claims of the write ladder run on.

A scratch server never takes a production server's data directory or tail identity:
- the embedded catalog is shared through `--catalog-uri sqlite:///<data dir>/catalog.db`, so the
  server keeps its intents, temporary tables and caches in a directory of the run;
- `--tail-dir DIR` becomes a directory beside DIR (`DIR.verify-<run>/<server>`): the same file
  system and disk, never the production log;
- `--tail-url URL` is the same database, but the tail id derives from the data directory, so each
  scratch server has rows of its own (serve.pg_tail_id);
- `--tail-quorum` keepers hold one log for whoever wins the term: a scratch writer would depose the
  production one. They are used only when no writer holds them (`quorum_probe.quorum_problems`, called by `run.preflight`), or
  replaced by three local keepers (`--local-keepers`).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path

from icegres.config import OPTIONS_BY_KEY, Settings, redact_uri

__all__ = ["CATALOG_KEYS", "Deployment", "TailPlan"]

CATALOG_KEYS = ("catalog_uri", "warehouse", "catalog_name", "catalog_token", "catalog_credential",
                "catalog_oauth2_uri", "catalog_scope", "catalog_sigv4", "catalog_timeout_s",
                "s3_endpoint", "s3_access_key", "s3_secret_key", "s3_region", "s3_path_style", "file_cache_mb")


@dataclass(frozen=True)
class TailPlan:
    """One tail a claim of the write ladder runs on: `kind` ("dir", "url", "quorum"), how it is
    shown (never a password) and the flag that configures it."""

    kind: str
    shown: str
    flag: str
    value: str  # dir: the base beside the configured one; url: the URL; quorum: the keeper addresses

    def env(self, node_dir: Path) -> dict[str, str]:
        """The scratch server `node_dir`'s tail setting."""
        if self.kind == "dir":
            return {"ICEGRES_TAIL_DIR": str(Path(self.value) / node_dir.name)}
        if self.kind == "url":
            return {"ICEGRES_TAIL_URL": self.value}
        return {"ICEGRES_TAIL_QUORUM": self.value}


@dataclass(frozen=True)
class Deployment:
    settings: Settings
    run_id: str

    @property
    def catalog_shown(self) -> str:
        uri = self.settings.catalog_uri
        return redact_uri(uri) if uri else f"embedded catalog in {self.settings.data_dir.resolve()}"

    def catalog_env(self) -> dict[str, str]:
        """What every scratch server needs to open the deployment's catalog and storage."""
        env: dict[str, str] = {}
        for key in CATALOG_KEYS:
            value = getattr(self.settings, key)
            if value is None or value is False:
                continue
            env[OPTIONS_BY_KEY[key].env] = "true" if value is True else str(value)
        if not self.settings.catalog_uri:
            data_dir = self.settings.data_dir.resolve()
            env["ICEGRES_CATALOG_URI"] = f"sqlite:///{data_dir / 'catalog.db'}"
            env["ICEGRES_WAREHOUSE"] = (data_dir / "warehouse").as_uri()
        return env

    def tails(self, local_keepers: str | None = None) -> list[TailPlan]:
        """The configured tails (at most one: the flags are exclusive), as scratch plans;
        `local_keepers` replaces the configured keepers."""
        s = self.settings
        plans: list[TailPlan] = []
        if s.tail_dir:
            beside = Path(s.tail_dir).expanduser().resolve()
            plans.append(TailPlan("dir", f"--tail-dir beside {beside}", "--tail-dir",
                                  str(beside.with_name(f"{beside.name}.verify-{self.run_id}"))))
        if s.tail_url:
            plans.append(TailPlan("url", f"--tail-url {redact_uri(s.tail_url)}", "--tail-url", s.tail_url))
        if local_keepers:
            plans.append(TailPlan("quorum", f"three local keepers ({local_keepers})", "--tail-quorum", local_keepers))
        elif s.tail_quorum:
            plans.append(TailPlan("quorum", f"--tail-quorum {s.tail_quorum}", "--tail-quorum", s.tail_quorum))
        return plans

    @property
    def write_buffer_ms(self) -> int:
        """The deployment's group-commit window; 50 ms when it has none (a tail requires one)."""
        return self.settings.write_buffer_ms or 50

    def env_for(self, extra: Mapping[str, str] | None = None) -> dict[str, str]:
        return {**self.catalog_env(), **(extra or {})}
