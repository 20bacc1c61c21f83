"""Progress of a long maintenance command on stderr: a bar (rich's) where stderr is a terminal,
one line per step elsewhere (a log, a pipe, CI), so that what a person watches moves and what a
machine keeps stays readable. stdout carries only the command's report (a table or --json).
"""

from __future__ import annotations

import sys
from types import TracebackType
from typing import Any, TextIO


class Steps:
    """A task of `total` steps (None: not known ahead), advanced by `step`.

    With a bar, each step's note is the bar's description; without one, each note is a line."""

    def __init__(self, label: str, total: int | None = None, *, stream: TextIO | None = None,
                 terminal: bool | None = None) -> None:
        self._stream = stream if stream is not None else sys.stderr
        self._label = label
        self._bar: Any = None
        self._task: Any = None
        self.done = 0
        if terminal if terminal is not None else _is_terminal(self._stream):
            from rich.console import Console
            from rich.progress import (
                BarColumn,
                MofNCompleteColumn,
                Progress,
                TextColumn,
                TimeElapsedColumn,
            )

            console = Console(file=self._stream, force_terminal=True)
            self._bar = Progress(TextColumn("{task.description}"), BarColumn(), MofNCompleteColumn(),
                                 TimeElapsedColumn(), console=console, transient=False)
            self._task = self._bar.add_task(label, total=total)

    def __enter__(self) -> Steps:
        if self._bar is not None:
            self._bar.start()
        return self

    def __exit__(self, kind: type[BaseException] | None, value: BaseException | None,
                 traceback: TracebackType | None) -> None:
        if self._bar is not None:
            self._bar.stop()

    def total(self, total: int) -> None:
        """The number of steps, once it is known."""
        if self._bar is not None:
            self._bar.update(self._task, total=total)

    def step(self, note: str, count: int = 1) -> None:
        self.done += count
        if self._bar is not None:
            self._bar.update(self._task, advance=count, description=f"{self._label}: {note}" if note else self._label)
        elif note:
            print(note, file=self._stream, flush=True)


def _is_terminal(stream: TextIO) -> bool:
    try:
        return stream.isatty()
    except (AttributeError, ValueError):
        return False
