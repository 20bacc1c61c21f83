"""The write ladder reaches the engine through a port the engine owns: `WriteLadder` offers every
member of `WriteLadderPort` (coroutines as coroutines), and no engine module imports the ladder."""

from __future__ import annotations

import ast
import inspect
from pathlib import Path

import pytest

from icegres.engine.ladder_port import WriteLadderPort
from icegres.ladder import WriteLadder

pytestmark = pytest.mark.unit

ENGINE_DIR = Path(__file__).resolve().parents[2] / "icegres" / "engine"


def _members(protocol: type) -> dict[str, object]:
    return {name: value for name, value in vars(protocol).items() if not name.startswith("_")}


def test_the_write_ladder_offers_every_member_of_the_port() -> None:
    members = _members(WriteLadderPort)
    assert {"has_entries", "visible", "watermark", "settle", "settle_blocking", "append", "stats"} <= set(members)
    for name, declared in members.items():
        offered = getattr(WriteLadder, name, None)
        assert offered is not None, name
        assert inspect.iscoroutinefunction(offered) == inspect.iscoroutinefunction(declared), name
        assert list(inspect.signature(offered).parameters) == list(inspect.signature(declared).parameters), name


def test_no_engine_module_imports_the_ladder() -> None:
    for path in sorted(ENGINE_DIR.glob("*.py")):
        for node in ast.walk(ast.parse(path.read_text())):
            names = [a.name for a in node.names] if isinstance(node, ast.Import) else []
            if isinstance(node, ast.ImportFrom) and node.module:
                names = [node.module]
            assert not any(n == "icegres.ladder" or n.startswith("icegres.ladder.") for n in names), path.name
