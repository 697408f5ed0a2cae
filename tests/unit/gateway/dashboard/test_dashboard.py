"""gateway/dashboard: its settings, its token, and the page escaping everything a sender controls."""

from __future__ import annotations

from pathlib import Path

import pytest
from prometheus_client.parser import text_string_to_metric_families

from gateway.dashboard import dashboard_token
from gateway.dashboard.metrics import Metrics
from gateway.dashboard.page import sections
from gateway.dashboard.state import Activity
from gateway.settings import DashboardSettings, SettingsError, load_settings

HOSTILE = '<img src=x onerror=alert(1)>"\'&'


def _load(tmp_path: Path, text: str) -> DashboardSettings:
    path = tmp_path / "settings.yaml"
    path.write_text(text)
    return load_settings(path).dashboard


def test_the_dashboard_is_off_by_default_and_on_loopback_when_a_port_is_set(tmp_path: Path) -> None:
    assert _load(tmp_path, "{}").port is None
    on = _load(tmp_path, "dashboard: {port: 8765}")
    assert (on.port, on.host, on.token_env) == (8765, "127.0.0.1", None)
    for loopback in ("localhost", "::1", "127.0.0.2"):
        assert _load(tmp_path, f"dashboard: {{port: 8765, host: '{loopback}'}}").token_env is None


@pytest.mark.parametrize("host", ["0.0.0.0", "192.168.1.5", "gateway.example.org", "::"])
def test_a_non_loopback_host_needs_token_env(tmp_path: Path, host: str) -> None:
    with pytest.raises(SettingsError, match="dashboard: token_env: required"):
        _load(tmp_path, f"dashboard: {{port: 8765, host: '{host}'}}")
    assert _load(tmp_path, f"dashboard: {{port: 8765, host: '{host}', token_env: T}}").token_env == "T"


def test_the_token_comes_from_the_variable_token_env_names() -> None:
    settings = DashboardSettings(port=1, host="0.0.0.0", token_env="DASH_T")
    assert dashboard_token(settings, {"DASH_T": "abc123"}) == "abc123"
    with pytest.raises(SettingsError, match="dashboard.token_env: the environment variable DASH_T is not set"):
        dashboard_token(settings, {})
    assert dashboard_token(DashboardSettings(port=1), {}) is None


def test_every_value_a_sender_controls_is_escaped() -> None:
    state = {
        "queue": [{"folder": "incoming", "depth": 1, "oldest_age_s": 3.0}],
        "in_flight": [{"name": HOSTILE, "channel": HOSTILE, "profile": HOSTILE, "conversation": HOSTILE,
                       "attempt": 1, "elapsed_s": 1.0}],
        "dead_total": 1,
        "dead_letters": [{"name": HOSTILE, "kind": "message", "conversation": HOSTILE, "reason": HOSTILE,
                          "attempts": 3, "failed_at": HOSTILE}],
        "runs": [{"runId": HOSTILE, "workflowId": HOSTILE, "conversation": HOSTILE, "state": HOSTILE,
                  "updatedAt": HOSTILE, "steps": [{"id": HOSTILE, "status": HOSTILE, "durationMs": 5}]}],
        "channels": [{"profile": HOSTILE, "type": HOSTILE, "state": "disabled", "reason": HOSTILE,
                      "last_inbound": HOSTILE, "last_outbound": None, "retries": 0, "rate_limited": 0}],
        "heartbeats": {HOSTILE: [{"ts": "t", "rtt_ms": 5, "ok": True}, {"ts": "t", "rtt_ms": 9, "ok": False}]},
        "events": [{"ts": "t", "event": HOSTILE, HOSTILE: HOSTILE}],
    }
    html = sections(state)
    assert "<img" not in html and "'&" not in html and "\"'" not in html
    assert html.count("&lt;img src=x onerror=alert(1)&gt;") >= 15
    assert 'data-name="&lt;img src=x onerror=alert(1)&gt;&quot;&#x27;&amp;"' in html
    assert '<circle' in html  # the failed beat is marked on the chart


def test_activity_counts_each_profiles_traffic_retries_and_429s() -> None:
    activity = Activity()
    activity.observe({"ts": "t1", "event": "message.claimed", "job_id": "a.json", "channel": "slack",
                      "profile": "team", "conversation": "C1", "attempt": 1})
    activity.observe({"ts": "t2", "event": "outgoing.retry", "channel": "slack", "profile": "team",
                      "rate_limited": True})
    activity.observe({"ts": "t3", "event": "outgoing.retry", "channel": "slack", "profile": "team",
                      "rate_limited": False})
    activity.observe({"ts": "t4", "event": "outgoing.sent", "channel": "slack", "profile": "team"})
    assert activity.profile_counts("team") == {"last_inbound": "t1", "last_outbound": "t4", "retries": 2,
                                               "rate_limited": 1}


def test_in_flight_is_what_was_claimed_and_not_settled_nor_gone_from_processing() -> None:
    activity = Activity()
    for name in ("a.json", "b.json", "c.json"):
        activity.observe({"event": "message.claimed", "job_id": name, "channel": "console", "conversation": name})
    activity.observe({"event": "job.succeeded", "kind": "message", "job_id": "a.json"})
    activity.observe({"event": "job.failed.retryable", "kind": "message", "job_id": "b.json"})  # still claimed
    assert [m["conversation"] for m in activity.in_flight()] == ["b.json", "c.json"]
    assert [m["name"] for m in activity.in_flight({"c.json"})] == ["c.json"]  # b.json left processing/
    assert activity.in_flight()[0]["elapsed_s"] >= 0


def test_a_channel_label_is_a_known_channel_type_or_other_so_payloads_cannot_add_series_without_end() -> None:
    metrics = Metrics(lambda: {"queue": [], "in_flight": 0, "channels": {}, "heartbeat_last_ms": {}},
                      channels=["console", "slack"])
    for channel in ["console", "slack", *(f"made-up-{n}" for n in range(100)), None, 7]:
        metrics.observe({"event": "message.claimed", "channel": channel})
        metrics.observe({"event": "job.succeeded", "kind": "message", "channel": channel, "duration_ms": 5})
        metrics.observe({"event": "outgoing.retry", "channel": channel, "rate_limited": True})
    labels = {s.labels.get("channel") for family in text_string_to_metric_families(metrics.text().decode())
              for s in family.samples} - {None}
    assert labels == {"console", "slack", "other"}
    claimed = {s.labels["channel"]: s.value for family in text_string_to_metric_families(metrics.text().decode())
               for s in family.samples if s.name == "switchyard_messages_claimed_total"}
    assert claimed == {"console": 1, "slack": 1, "other": 102}


def test_usage_metrics_count_cost_tokens_and_turns_by_provider_and_a_configured_profile_else_other() -> None:
    metrics = Metrics(lambda: {"queue": [], "in_flight": 0, "channels": {}, "heartbeat_last_ms": {}},
                      channels=["telegram"], profiles=["tg"])
    for profile in ["tg", "tg", *(f"made-up-{n}" for n in range(50))]:
        metrics.observe({"event": "usage.recorded", "provider": "claude", "profile": profile, "usd": 0.5,
                         "tokens_in": 100, "tokens_out": 20, "seconds": 1.5})
    metrics.observe({"event": "usage.limit_reached", "kind": "sender"})
    samples = [s for family in text_string_to_metric_families(metrics.text().decode()) for s in family.samples
               if s.name.startswith("switchyard_usage") and s.name.endswith("_total")]
    value = {(s.name, s.labels.get("profile"), s.labels.get("direction")): s.value for s in samples}
    assert value[("switchyard_usage_usd_total", "tg", None)] == 1.0
    assert value[("switchyard_usage_usd_total", "other", None)] == 25.0
    assert value[("switchyard_usage_tokens_total", "tg", "in")] == 200
    assert value[("switchyard_usage_tokens_total", "tg", "out")] == 40
    assert value[("switchyard_usage_turns_total", "other", None)] == 50
    assert value[("switchyard_usage_limit_reached_total", None, None)] == 1
    assert {s.labels.get("profile") for s in samples} == {"tg", "other", None}
