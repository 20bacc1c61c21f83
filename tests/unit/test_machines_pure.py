"""Every module of icegres/machines (drivers aside) is a pure core: stdlib only, no I/O.

Each core's own unit tests assert its imports too; this test covers every module at once, so a new
machine is held to it from its first commit."""

from __future__ import annotations

import ast
import importlib
import pkgutil

import pytest

import icegres.machines
from tests.support.purity import imported_roots

# What a core may import: the pure parts of the standard library, and the other cores.
ALLOWED_ROOTS = {
    "__future__",
    "collections",
    "dataclasses",
    "enum",
    "typing",
    "re",
    "struct",
    "zlib",
}
CORES = sorted(
    info.name for info in pkgutil.iter_modules(icegres.machines.__path__) if not info.ispkg
)


def test_the_cores_are_found() -> None:
    assert {"commit", "buffer", "wal", "pgtail", "quorum", "txblock"} <= set(CORES), CORES


@pytest.mark.parametrize("name", CORES)
def test_a_core_imports_only_pure_modules(name: str) -> None:
    module = importlib.import_module(f"icegres.machines.{name}")
    roots = imported_roots(module)
    assert roots - {"icegres"} <= ALLOWED_ROOTS, roots - ALLOWED_ROOTS
    tree = ast.parse(open(module.__file__).read())
    for node in ast.walk(tree):
        if isinstance(node, ast.ImportFrom) and node.module and node.module.startswith("icegres"):
            inside = node.module == "icegres.machines" or node.module.startswith(
                "icegres.machines."
            )
            assert inside and ".drivers" not in node.module, node.module
        if isinstance(node, ast.Import):
            for alias in node.names:
                assert not alias.name.startswith("icegres") or alias.name.startswith(
                    "icegres.machines."
                ), alias.name
