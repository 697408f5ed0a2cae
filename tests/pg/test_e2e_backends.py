"""Spec-002 end-to-end tests of tests/e2e/test_lifecycle.py, run again on the postgres backend.

The same test functions, given a `switchyard run` whose settings say `queue: {backend: postgres}`; its
replies are read from `switchyard_outbox` (delivery to a channel is the channel owner's part), so the
tests chosen are those that look at replies, events and the provider's log, not at the file queue's
folders. They run on the file backend in tests/e2e/test_lifecycle.py itself.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import psycopg
import pytest
import yaml

from tests.e2e import test_lifecycle as lifecycle
from tests.e2e.conftest import Switchyard
from tests.process import clean_environment

pytestmark = [pytest.mark.e2e, pytest.mark.timeout(120)]


class PgSwitchyard(Switchyard):
    """`switchyard run` on the postgres backend; replies are the rows of switchyard_outbox."""

    def __init__(self, root: Path, env: dict[str, str], dsn: str):
        super().__init__(root, {**env, "SWITCHYARD_DSN": dsn})
        self.dsn = dsn

    def configure(self, settings: dict[str, Any] | None = None, orchestrator: dict[str, Any] | None = None) -> None:
        super().configure(settings, orchestrator)
        written = yaml.safe_load(self.home.settings_file.read_text())
        written["queue"] = {**written.get("queue", {}), "backend": "postgres", "lease_sec": 2}
        self.home.settings_file.write_text(yaml.safe_dump(written))

    def replies(self, message_id: str | None = None) -> list[dict[str, Any]]:
        with psycopg.connect(self.dsn) as conn:
            rows = conn.execute("SELECT name, payload FROM switchyard_outbox ORDER BY id").fetchall()
        found = []
        for name, payload in rows:
            data = payload if isinstance(payload, dict) else json.loads(payload)
            data["_file"] = name
            if message_id is None or data.get("messageId") == message_id:
                found.append(data)
        return found


@pytest.fixture
def switchyard(tmp_path: Path, fake_log: Path, pg_dsn: str) -> Iterator[Switchyard]:
    from gateway.pg import schema

    schema.migrate(pg_dsn)
    state = tmp_path / "fake-state"
    state.mkdir()
    env = clean_environment({"FAKE_LOG": str(fake_log), "FAKE_STATE": str(state)})
    instance = PgSwitchyard(tmp_path / "home", env, pg_dsn)
    yield instance
    if instance.process is not None:
        instance.process.kill()
        instance.process.wait(10)


@pytest.fixture
def fake_log(tmp_path: Path) -> Path:
    return tmp_path / "provider-calls.jsonl"


SHARED: list[Callable[..., None]] = [
    lifecycle.test_a_dropped_message_is_answered_with_every_outgoing_field,
    lifecycle.test_one_conversation_is_sequential_while_others_run_concurrently,
    lifecycle.test_forced_failures_are_requeued_with_events_then_answered,
    lifecycle.test_a_repeated_message_id_is_answered_once,
    lifecycle.test_a_message_answered_before_a_restart_is_not_answered_again,
    lifecycle.test_files_dropped_while_stopped_are_processed_at_start,
    lifecycle.test_without_channels_sigint_also_exits_zero,
]


@pytest.mark.parametrize("spec_test", SHARED, ids=lambda f: f.__name__)
def test_on_postgres(spec_test: Callable[..., None], request: pytest.FixtureRequest) -> None:
    wanted = spec_test.__code__.co_varnames[:spec_test.__code__.co_argcount]
    spec_test(**{name: request.getfixturevalue(name) for name in wanted})
