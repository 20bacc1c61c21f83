"""One typed settings object: flags > environment (ICEGRES_*) > defaults."""

from __future__ import annotations

import os
from dataclasses import dataclass, field
from pathlib import Path

DEFAULT_PORT = 5439
DEFAULT_DATABASE = "icegres"


@dataclass(frozen=True)
class Settings:
    data_dir: Path = Path(".icegres")
    host: str = "127.0.0.1"
    port: int = DEFAULT_PORT
    database: str = DEFAULT_DATABASE
    # user -> password; empty means trust (only allowed on loopback, see server.py).
    users: dict[str, str] = field(default_factory=dict)
    query_threads: int = 4

    @property
    def warehouse_dir(self) -> Path:
        return self.data_dir / "warehouse"

    @property
    def catalog_db(self) -> Path:
        return self.data_dir / "catalog.db"


def parse_users(spec: str) -> dict[str, str]:
    """`user:password[,user:password]` (the ICEGRES_USERS format) -> mapping."""
    users: dict[str, str] = {}
    for item in spec.replace("\n", ",").split(","):
        item = item.strip()
        if not item or item.startswith("#"):
            continue
        user, sep, password = item.partition(":")
        if not sep or not user:
            raise ValueError("users must be given as user:password[,user:password]")
        users[user] = password
    return users


def load_users(password_file: str | None) -> dict[str, str]:
    """Users from --password-file (one user:password per line) and ICEGRES_USERS."""
    users: dict[str, str] = {}
    if password_file:
        users.update(parse_users(Path(password_file).read_text()))
    env = os.environ.get("ICEGRES_USERS")
    if env:
        users.update(parse_users(env))
    return users
