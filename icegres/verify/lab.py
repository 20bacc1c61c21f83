"""What a claim gets to work with: the scratch namespace, scratch servers with the deployment's
settings, the configured tails, the number of rounds, a seeded random source and a progress bar."""

from __future__ import annotations

import random
import sys
import time
from collections.abc import Callable, Iterator, Mapping, Sequence
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import IO, Any

from icegres.verify.deployment import Deployment, TailPlan
from icegres.verify.nodes import Node, Nodes

__all__ = ["Lab", "Progress", "wait_until"]


@dataclass
class Progress:
    """A claim's progress: a bar redrawn in place on a terminal, a line per tenth otherwise."""

    out: IO[str] = field(default_factory=lambda: sys.stderr)
    label: str = ""
    total: int = 0
    done: int = 0
    _shown_tenth: int = -1

    def start(self, label: str, total: int) -> None:
        self.label, self.total, self.done, self._shown_tenth = label, max(1, total), 0, -1
        self._draw()

    def advance(self, n: int = 1) -> None:
        self.done = min(self.total, self.done + n)
        self._draw()

    def _draw(self) -> None:
        share = self.done / self.total
        if self.out.isatty():
            filled = int(share * 30)
            end = "\n" if self.done >= self.total else ""
            self.out.write(f"\r  {self.label} [{'#' * filled}{'.' * (30 - filled)}] {self.done}/{self.total}{end}")
            self.out.flush()
            return
        tenth = int(share * 10)
        if tenth != self._shown_tenth:
            self._shown_tenth = tenth
            self.out.write(f"  {self.label}: {self.done}/{self.total}\n")
            self.out.flush()


@dataclass
class Lab:
    deployment: Deployment
    namespace: str
    nodes: Nodes
    rounds: int
    rng: random.Random
    progress: Progress
    local_keepers: str | None = None  # "host:port,…" of keepers this run started, if asked
    claim: str = ""  # the running claim's name, prefixing its tables and servers

    def table(self, name: str) -> str:
        """A table of the scratch namespace, private to the running claim."""
        return f"{self.namespace}.{self.claim.replace('-', '_')}_{name}"

    def server(self, name: str, *, tail: TailPlan | None = None, write_buffer_ms: int | None = None,
               env: Mapping[str, str] | None = None, args: Sequence[str] = ()) -> Node:
        """Start the claim's scratch server `name` on the deployment's catalog (and `tail`, with the
        deployment's write buffer window unless `write_buffer_ms` says otherwise)."""
        node_name = f"{self.claim}-{name}"
        extra: dict[str, str] = {}
        if tail is not None:
            extra.update(tail.env(self.nodes.run_dir / node_name))
            extra["ICEGRES_WRITE_BUFFER_MS"] = str(write_buffer_ms or self.deployment.write_buffer_ms)
        elif write_buffer_ms:
            extra["ICEGRES_WRITE_BUFFER_MS"] = str(write_buffer_ms)
        return self.nodes.serve(node_name, self.deployment.env_for({**extra, **(env or {})}), args)

    def restart(self, node: Node) -> Node:
        return self.nodes.restart(node)

    def tails(self) -> list[TailPlan]:
        return self.deployment.tails(self.local_keepers)

    @property
    def run_dir(self) -> Path:
        return self.nodes.run_dir

    def connect(self, node: Node, **kwargs: Any) -> Any:
        """An autocommit psycopg connection to `node` (a client as the operator's would be)."""
        import psycopg

        return psycopg.connect(node.dsn(), autocommit=kwargs.pop("autocommit", True), **kwargs)

    @contextmanager
    def step(self, label: str, total: int) -> Iterator[Callable[[int], None]]:
        self.progress.start(f"{self.claim}: {label}", total)
        yield self.progress.advance


def wait_until(predicate: Callable[[], bool], timeout_s: float, interval_s: float = 0.02) -> bool:
    """Poll `predicate` until it holds or `timeout_s` passes; whether it held."""
    deadline = time.monotonic() + timeout_s
    while True:
        if predicate():
            return True
        if time.monotonic() > deadline:
            return False
        time.sleep(interval_s)

