"""The command line's shape (icegres/cli.py): serve's flag groups and the version."""

from __future__ import annotations

from importlib.metadata import version as installed

import pytest

from icegres.cli import SERVE_GROUPS, SERVE_KEYS, build_parser, version

pytestmark = pytest.mark.unit


def test_every_serve_flag_is_in_exactly_one_group() -> None:
    grouped = [key for _, _, keys in SERVE_GROUPS for key in keys]
    assert sorted(grouped) == sorted(SERVE_KEYS) and len(grouped) == len(set(grouped))


def test_the_version_is_the_installed_distributions() -> None:
    assert version() == installed("icegres")


def test_flight_serve_port_0_is_a_port_not_unset() -> None:
    args = build_parser().parse_args(["flight-serve", "--port", "0"])
    assert args.flight_port == 0
