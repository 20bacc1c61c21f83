"""The shape of the house, measured on the import graph of icegres/ (docs/architecture.md, "Layers").

Every import counts: at module top, inside functions (lazy) and under TYPE_CHECKING. A module may
import its own layer or a lower one, never a higher one; no two modules import each other, even
through others; no module grows past MODULE_LINES_MAX (generated protobuf code aside).
"""

from __future__ import annotations

import ast
from collections import defaultdict
from pathlib import Path

import pytest

pytestmark = pytest.mark.unit

ROOT = Path(__file__).resolve().parents[2]
PACKAGE = ROOT / "icegres"
MODULE_LINES_MAX = 1000

# Bottom to top. A module belongs to the first entry that is it or a package holding it.
LAYERS: tuple[tuple[str, ...], ...] = (
    # PostgreSQL's vocabulary and process-wide trivia: importable by everyone, importing no one.
    ("icegres.pg", "icegres.faults", "icegres.collector", "icegres.allocator", "icegres.gil_switch", "icegres.stacks", "icegres.listeners", "icegres.tls",
     "icegres"),
    # Pure statement text (lexer, Statement, parse) and the durable machines with their drivers.
    ("icegres.sql", "icegres.machines"),
    ("icegres.config", "icegres.progress"),
    ("icegres.engine",),
    ("icegres.ladder",),
    ("icegres.protocol",),
    ("icegres.seed", "icegres.supervise", "icegres.serve", "icegres.verify", "icegres.branches",
     "icegres.maintain_cli"),
    ("icegres.cli", "icegres.maintain_compact_cli", "icegres.__main__"),
)


def _modules() -> dict[str, Path]:
    out = {}
    for path in PACKAGE.rglob("*.py"):
        parts = path.relative_to(ROOT).with_suffix("").parts
        name = ".".join(parts[:-1] if parts[-1] == "__init__" else parts)
        out[name] = path
    return out


MODULES = _modules()


def _owner(name: str) -> str | None:
    """The module an imported name lives in (`icegres.pg.errors.PgError` -> `icegres.pg.errors`)."""
    while name and name not in MODULES:
        name = name.rpartition(".")[0]
    return name or None


def import_graph() -> dict[str, set[str]]:
    """module -> the icegres modules it imports (itself excluded)."""
    edges: dict[str, set[str]] = defaultdict(set)
    for name, path in MODULES.items():
        package = name if path.name == "__init__.py" else name.rpartition(".")[0]
        for node in ast.walk(ast.parse(path.read_text())):
            targets: list[str] = []
            if isinstance(node, ast.Import):
                targets = [alias.name for alias in node.names]
            elif isinstance(node, ast.ImportFrom):
                base = node.module or ""
                if node.level:
                    up = package.split(".")[: len(package.split(".")) - node.level + 1]
                    base = ".".join([*up, base] if base else up)
                targets = [f"{base}.{a.name}" if f"{base}.{a.name}" in MODULES else base for a in node.names]
            for target in targets:
                owner = _owner(target) if target.startswith("icegres") else None
                if owner is not None and owner != name:
                    edges[name].add(owner)
    return edges


def layer_of(name: str) -> int:
    for level, members in enumerate(LAYERS):
        for member in members:
            if name == member or (member != "icegres" and name.startswith(member + ".")):
                return level
    raise AssertionError(f"{name} is in no layer: add it to LAYERS")


def cycles(edges: dict[str, set[str]]) -> list[list[str]]:
    """The strongly connected components of more than one module (Tarjan, iteratively)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    on_stack: set[str] = set()
    stack: list[str] = []
    found: list[list[str]] = []
    for root in sorted(MODULES):
        if root in index:
            continue
        work = [(root, iter(sorted(edges.get(root, ()))))]
        index[root] = low[root] = len(index)
        stack.append(root)
        on_stack.add(root)
        while work:
            node, children = work[-1]
            child = next(children, None)
            if child is not None:
                if child not in index:
                    index[child] = low[child] = len(index)
                    stack.append(child)
                    on_stack.add(child)
                    work.append((child, iter(sorted(edges.get(child, ())))))
                elif child in on_stack:
                    low[node] = min(low[node], index[child])
                continue
            work.pop()
            if work:
                low[work[-1][0]] = min(low[work[-1][0]], low[node])
            if low[node] == index[node]:
                component = []
                while True:
                    member = stack.pop()
                    on_stack.discard(member)
                    component.append(member)
                    if member == node:
                        break
                if len(component) > 1:
                    found.append(sorted(component))
    return found


def test_every_module_is_in_a_layer() -> None:
    for name in MODULES:
        layer_of(name)


def test_no_import_runs_up_a_layer() -> None:
    upward = sorted(
        f"{name} (layer {layer_of(name)}) imports {target} (layer {layer_of(target)})"
        for name, targets in import_graph().items()
        for target in targets
        if layer_of(target) > layer_of(name)
    )
    assert upward == []


def test_no_import_cycles() -> None:
    assert cycles(import_graph()) == []


def test_no_module_over_the_size_limit() -> None:
    sizes = {name: len(path.read_text().splitlines()) for name, path in MODULES.items()
             if not path.name.endswith("_pb2.py")}
    assert {name: n for name, n in sizes.items() if n > MODULE_LINES_MAX} == {}


# sqlglot's entry points that read SQL text into a tree; icegres.sql.parse is the one caller.
_SQLGLOT_PARSERS = frozenset({"parse_one", "maybe_parse", "transpile", "to_table", "to_column", "parse_into"})


def sqlglot_parses(tree: ast.AST) -> list[int]:
    """The lines of `tree` that call one of sqlglot's parsers (`sqlglot.parse(...)` too)."""
    return sorted(
        node.lineno for node in ast.walk(tree)
        if isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute)
        and (node.func.attr in _SQLGLOT_PARSERS
             or (node.func.attr == "parse" and isinstance(node.func.value, ast.Name) and node.func.value.id == "sqlglot"))
    )


def test_sql_text_is_parsed_only_by_icegres_sql_parse() -> None:
    """One dialect and one cache for every statement, expression and name icegres reads."""
    found = {name: lines for name, path in MODULES.items()
             if name != "icegres.sql.parse" and (lines := sqlglot_parses(ast.parse(path.read_text())))}
    assert found == {}
    assert sqlglot_parses(ast.parse("import sqlglot\nsqlglot.parse_one('select 1', read='postgres')")) == [2]


def test_the_checks_can_fail() -> None:
    """The graph and the cycle finder see what they must: a known import and a made-up cycle."""
    edges = import_graph()
    assert "icegres.pg.errors" in edges["icegres.engine.query"]
    assert "icegres.engine.query" in edges["icegres.protocol.pgwire.session"]
    made_up = {k: set(v) for k, v in edges.items()}
    made_up["icegres.pg.errors"] = {"icegres.engine.query"}
    assert any("icegres.pg.errors" in c and "icegres.engine.query" in c for c in cycles(made_up))
    assert layer_of("icegres.engine.query") > layer_of("icegres.pg.errors")
