"""Every recipe in docs/clients.md runs as written (only the ports changed) against a server over
the demo lake, so the documentation cannot rot."""

from __future__ import annotations

import re
import shutil
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.e2e.test_pgjdbc import _jar
from tests.support.icegres_server import IcegresServer, running_icegres, seed_data_dir

pytestmark = [pytest.mark.e2e, pytest.mark.timeout(300)]

DOC = Path(__file__).parents[2] / "docs" / "clients.md"
_BLOCK = re.compile(r"```(sh|python|java)\n(.*?)```", re.S)


def _recipes() -> list[tuple[str, str]]:
    text = DOC.read_text()
    recipes = text[text.index("## Recipes"):]
    return [(lang, body) for lang, body in _BLOCK.findall(recipes)]


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[IcegresServer, int]]:
    data_dir = tmp_path_factory.mktemp("recipes") / "data"
    seed_data_dir(data_dir, rows=5000)
    with running_icegres(data_dir, args=("--flight-port", "0")) as srv:
        yield srv, srv.flight_port


def test_every_client_has_a_recipe() -> None:
    bodies = "\n".join(body for _, body in _recipes())
    for client in ("psql", "psycopg", "psycopg2", "asyncpg", "sqlalchemy", "pandas", "ibis", "pyodbc",
                   "adbc_driver_flightsql", "jdbc:postgresql"):
        assert client in bodies, client


@pytest.mark.parametrize(("lang", "body"), _recipes(), ids=lambda v: v.strip().splitlines()[0][:40] if "\n" in v else v)
def test_recipe_runs(server: tuple[IcegresServer, int], tmp_path: Path, lang: str, body: str) -> None:
    srv, flight = server
    code = body.replace("5439", str(srv.port)).replace("5440", str(flight))
    if lang == "sh":
        done = subprocess.run(["bash", "-c", code], capture_output=True, text=True, timeout=120)
    elif lang == "python":
        done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    else:
        assert shutil.which("javac"), "JDK missing; run infra/system-deps.sh"
        (tmp_path / "Recipe.java").write_text(code)
        subprocess.run(["javac", "-cp", str(_jar()), "-d", str(tmp_path), str(tmp_path / "Recipe.java")],
                       check=True, capture_output=True, timeout=120)
        done = subprocess.run(["java", "-cp", f"{_jar()}:{tmp_path}", "Recipe"], capture_output=True, text=True,
                              timeout=120)
    assert done.returncode == 0, done.stdout[-2000:] + done.stderr[-3000:]
    assert done.stdout.strip(), "a recipe prints what it read"
