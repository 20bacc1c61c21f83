"""What a pure machine core imports: its tests assert no I/O module is among them."""

from __future__ import annotations

import ast
from pathlib import Path
from types import ModuleType


def imported_roots(module: ModuleType) -> set[str]:
    """The top-level package of every import statement in `module`'s source, wherever it stands
    (a function-level import counts too)."""
    tree = ast.parse(Path(module.__file__).read_text())
    roots: set[str] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            roots |= {alias.name.split(".")[0] for alias in node.names}
        elif isinstance(node, ast.ImportFrom) and node.module:
            roots.add(node.module.split(".")[0])
    return roots
