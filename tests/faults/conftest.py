"""Fault tests: every test in this folder carries the `faults` marker (deselect with `-m "not faults"`)."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from tests.faults.harness import GatewayRun


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    for item in items:
        if "tests/faults/" in item.nodeid.replace("\\", "/"):
            item.add_marker(pytest.mark.faults)


@pytest.fixture(autouse=True)
def _no_gateway_left_running() -> Iterator[None]:
    """Kills every `switchyard run` a test started, also when it failed half-way."""
    yield
    for run in GatewayRun.started:
        if run.alive():
            run.kill()
    GatewayRun.started.clear()
