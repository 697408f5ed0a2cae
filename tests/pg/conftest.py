"""PostgreSQL backend tests: no `switchyard` process a test started outlives it, also when it failed."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from tests.faults.harness import GatewayRun


@pytest.fixture(autouse=True)
def _no_process_left_running() -> Iterator[None]:
    yield
    for run in GatewayRun.started:
        if run.alive():
            run.kill()
    GatewayRun.started.clear()
