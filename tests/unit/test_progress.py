"""icegres/progress.py: a bar on a terminal, a line per noted step elsewhere."""

from __future__ import annotations

import io

import pytest

from icegres.progress import Steps

pytestmark = pytest.mark.unit


def test_without_a_terminal_each_noted_step_is_a_line_and_a_silent_step_none():
    out = io.StringIO()
    with Steps("t: compacting", stream=out) as steps:
        steps.total(2)
        steps.step("[1/2] group a")
        steps.step("")
        steps.step("[2/2] group b")
    assert out.getvalue().splitlines() == ["[1/2] group a", "[2/2] group b"] and steps.done == 3


def test_on_a_terminal_a_bar_counts_the_steps():
    out = io.StringIO()
    with Steps("t: deleting files", stream=out, terminal=True) as steps:
        steps.total(3)
        for _ in range(3):
            steps.step("")
    shown = out.getvalue()
    assert "t: deleting files" in shown and "3/3" in shown and "\x1b[" in shown  # (drawn, with escapes)
