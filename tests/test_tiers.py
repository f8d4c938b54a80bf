"""The tier check in tests/conftest.py: it refuses a test with no tier or with two, and its tiers are
the markers registered in pyproject.toml."""

from __future__ import annotations

import tomllib
from pathlib import Path
from types import SimpleNamespace

import pytest

from tests.conftest import TIERS, tier_errors

pytestmark = pytest.mark.unit


def fake_item(nodeid: str, *marks: pytest.MarkDecorator) -> SimpleNamespace:
    """What the check reads of a collected test: its node id and its markers."""
    return SimpleNamespace(nodeid=nodeid, iter_markers=lambda: [m.mark for m in marks])


def test_one_tier_passes_none_or_two_fail():
    ok = fake_item("t.py::ok", pytest.mark.unit, pytest.mark.parametrize("x", [1]))
    untiered = fake_item("t.py::untiered", pytest.mark.asyncio)
    doubled = fake_item("t.py::doubled", pytest.mark.model, pytest.mark.e2e)
    errors = tier_errors([ok, untiered, doubled])
    assert len(errors) == 2
    assert errors[0].startswith("t.py::untiered: tier markers []")
    assert errors[1].startswith("t.py::doubled: tier markers ['e2e', 'model']")
    assert tier_errors([ok]) == []


def test_the_tiers_are_the_registered_markers():
    options = tomllib.loads((Path(__file__).resolve().parents[1] / "pyproject.toml").read_text())
    registered = [line.split(":", 1)[0] for line in options["tool"]["pytest"]["ini_options"]["markers"]]
    assert registered == list(TIERS)
