"""gateway/app.py configured_secrets: every value a `*_env` key names is masked in the event log, also as a
provider receives it (an `api_key_env` value is passed on stripped of surrounding whitespace)."""

from __future__ import annotations

from pathlib import Path

import pytest

from gateway.app import configured_secrets
from gateway.settings import Settings
from gateway.telemetry.events import EventLog, read_events


def test_a_key_with_surrounding_whitespace_is_masked_as_the_provider_gets_it(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("SY_TEST_PROXY_KEY", "  sk-proxy-1234567\n")
    remote = {"type": "claude", "base_url": "http://127.0.0.1:9", "api_key_env": "SY_TEST_PROXY_KEY"}
    settings = Settings.model_validate({"providers": {"remote": remote}})
    log = EventLog(tmp_path / "events.jsonl", secrets=configured_secrets(settings))
    log.emit("provider.failed", reason="claude said: invalid key sk-proxy-1234567")
    log.close()
    [event] = read_events(log.path)
    assert "sk-proxy-1234567" not in event["reason"] and "***" in event["reason"]
