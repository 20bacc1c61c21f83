"""Stepping a machine core in place without ever re-entering it.

A driver steps its core from whoever has something to report (a writer, a thread's answer, a
timer), and performing a step's effects may report something at once (an answer known
synchronously). That report must wait until the step in progress has performed all its effects,
and then be stepped before anything reported later: `InOrder` queues it and the outermost call
drains the queue, so the core sees one event at a time, in the order they were reported.
"""

from __future__ import annotations

from collections import deque
from collections.abc import Callable
from typing import Generic, TypeVar

T = TypeVar("T")


class InOrder(Generic[T]):
    """`handle(item)` for every item given, one at a time, in order (module doc)."""

    def __init__(self, handle: Callable[[T], None]) -> None:
        self._handle = handle
        self._pending: deque[T] = deque()
        self._busy = False

    def __call__(self, item: T) -> None:
        self._pending.append(item)
        if self._busy:
            return  # the outermost call handles it after the item in progress
        self._busy = True
        try:
            while self._pending:
                self._handle(self._pending.popleft())
        finally:
            self._busy = False
