"""The dashboard and `/metrics` served by a real `switchyard run`, over HTTP."""

from __future__ import annotations

import json
import socket
import subprocess

import pytest
from prometheus_client.parser import text_string_to_metric_families

from gateway.testing import wait_until
from tests.e2e.conftest import Switchyard
from tests.e2e.dashboard import HOSTILE, fetch, make_dead_letter, start_with_dashboard
from tests.process import SWITCHYARD

pytestmark = pytest.mark.e2e


def _samples(text: str) -> dict[tuple[str, tuple[tuple[str, str], ...]], float]:
    return {(s.name, tuple(sorted(s.labels.items()))): s.value
            for family in text_string_to_metric_families(text) for s in family.samples}


def test_metrics_count_messages_by_channel_and_read_the_queue_at_scrape_time(switchyard: Switchyard) -> None:
    url = start_with_dashboard(switchyard)
    first = switchyard.send("hello")
    switchyard.send("hello again")
    switchyard.reply_to(first["messageId"])
    make_dead_letter(switchyard, conversation="c-dead")
    wait_until(lambda: len(switchyard.events("job.succeeded")) >= 2 and switchyard.events("heartbeat.ok"), 20)

    answer = fetch(url + "metrics")
    assert answer.status == 200 and answer.headers["Content-Type"].startswith("text/plain")
    samples = _samples(answer.text)
    console = (("channel", "console"),)
    assert samples[("switchyard_messages_claimed_total", console)] >= 5  # 2 answered + 3 failed attempts
    assert samples[("switchyard_messages_answered_total", console)] == 2
    assert samples[("switchyard_messages_failed_total", console)] == 1
    assert samples[("switchyard_message_retries_total", console)] == 2
    assert samples[("switchyard_dead_letters_total", (("kind", "message"),))] == 1
    assert samples[("switchyard_processing_duration_seconds_count", console)] == 2
    assert samples[("switchyard_provider_duration_seconds_count", (("kind", "selector"),))] >= 2
    assert samples[("switchyard_provider_duration_seconds_count", (("kind", "step"),))] >= 2
    assert samples[("switchyard_heartbeat_rtt_seconds_count", (("profile", "beat"),))] >= 1
    assert samples[("switchyard_channel_up", (("profile", "beat"), ("type", "heartbeat")))] == 1
    # no console channel runs here: the replies (2 answers, 1 apology) wait in outgoing/, the dead letter in failed/;
    # a heartbeat's reply passes through outgoing/ every half second, so wait for a scrape between two beats
    wait_until(lambda: _samples(fetch(url + "metrics").text)[
        ("switchyard_queue_depth", (("folder", "outgoing"),))] == 3, 20)
    assert samples[("switchyard_queue_depth", (("folder", "failed"),))] == 1
    assert samples[("switchyard_queue_oldest_age_seconds", (("folder", "failed"),))] >= 0
    switchyard.send("one more")
    wait_until(lambda: _samples(fetch(url + "metrics").text)[
        ("switchyard_queue_depth", (("folder", "outgoing"),))] == 4, 20)


def test_page_and_state_show_queue_dead_letters_runs_channels_heartbeat_and_events(switchyard: Switchyard) -> None:
    url = start_with_dashboard(switchyard)
    hello = switchyard.send("start build")
    switchyard.reply_to(hello["messageId"])
    make_dead_letter(switchyard)
    wait_until(lambda: switchyard.events("heartbeat.ok"), 20)

    state = fetch(url + "api/state").json()
    assert {q["folder"]: q["depth"] for q in state["queue"]}["failed"] == 1
    [letter] = state["dead_letters"]
    assert letter["conversation"] == HOSTILE and "failed 3 time(s)" in letter["reason"]
    [run] = [r for r in state["runs"] if r["workflowId"] == "build"]
    assert run["state"] == "done" and [s["id"] for s in run["steps"]] == ["Plan", "Build", "Test"]
    assert all(step["status"] == "completed" for step in run["steps"])
    [beat] = state["channels"]
    assert beat["profile"] == "beat" and beat["state"] == "running" and beat["last_inbound"]
    assert state["heartbeats"]["beat"][-1]["rtt_ms"] >= 0
    assert any(e["event"] == "job.failed.final" for e in state["events"])

    page = fetch(url)
    assert page.status == 200 and page.headers["Content-Type"].startswith("text/html")
    html = page.text
    for shown in ("Queue", "In flight", "Dead letters (1)", "Recent runs", "Channels", "Heartbeat round trip",
                  "Last events", "<svg", 'class="retry"', run["runId"], "Plan", "failed 3 time(s)"):
        assert shown in html, shown
    assert "<img" not in html and "<script>window" not in html  # the hostile name is text, never markup
    assert "&lt;img src=x onerror=" in html
    assert "default-src 'self'" in page.headers["Content-Security-Policy"]  # and no inline script would run


def test_retry_over_http_brings_a_dead_letter_back_to_an_answer(switchyard: Switchyard) -> None:
    url = start_with_dashboard(switchyard)
    sent = make_dead_letter(switchyard, conversation="c-retry")
    [name] = [letter["name"] for letter in fetch(url + "api/state").json()["dead_letters"]]
    retry = url + "api/dead-letters/retry"
    body = json.dumps({"names": [name]}).encode()
    assert fetch(retry, data=body, headers={"Content-Type": "text/plain"}).status == 415  # no cross-site form
    assert fetch(retry, data=json.dumps({"names": ["nope.json"]}).encode(),
                 headers={"Content-Type": "application/json"}).status == 404

    answer = fetch(retry, data=body, headers={"Content-Type": "application/json"})
    assert answer.status == 200 and answer.json() == {"retried": [name]}
    wait_until(lambda: any(e.get("conversation") == "c-retry" for e in switchyard.events("job.succeeded")), 20)
    wait_until(lambda: any("answered" in r["message"] for r in switchyard.replies(sent["messageId"])), 20)
    assert fetch(url + "api/state").json()["dead_letters"] == []


def test_a_non_loopback_dashboard_without_token_env_is_refused_at_start(switchyard: Switchyard) -> None:
    switchyard.configure({"dashboard": {"port": 0, "host": "0.0.0.0"}})
    run = subprocess.run([SWITCHYARD, "--home", str(switchyard.home.root), "run"], env=switchyard.env,
                         capture_output=True, text=True, timeout=60, stdin=subprocess.DEVNULL)
    assert run.returncode == 2
    assert "dashboard" in run.stderr and "token_env" in run.stderr

    switchyard.configure({"dashboard": {"port": 0, "host": "0.0.0.0", "token_env": "SY_DASH_TOKEN_UNSET"}})
    run = subprocess.run([SWITCHYARD, "--home", str(switchyard.home.root), "run"], env=switchyard.env,
                         capture_output=True, text=True, timeout=60, stdin=subprocess.DEVNULL)
    assert run.returncode == 2 and "dashboard.token_env" in run.stderr and "SY_DASH_TOKEN_UNSET" in run.stderr


def test_the_token_is_required_and_never_written_anywhere(switchyard: Switchyard) -> None:
    token = "s3cret-dashboard-token-42"
    switchyard.env["SY_DASH_TOKEN"] = token
    url = start_with_dashboard(switchyard, host="0.0.0.0", token_env="SY_DASH_TOKEN")
    local = url.replace("0.0.0.0", "127.0.0.1")
    for path in ("", "metrics", "api/state"):
        assert fetch(local + path).status == 401
        assert fetch(local + path, headers={"Authorization": "Bearer wrong"}).status == 401
        assert fetch(local + path, headers={"Authorization": f"Bearer {token}"}).status == 200
    assert fetch(local + "?token=wrong").status == 401

    redirect = fetch(local + f"?token={token}")
    assert redirect.status == 303 and "token" not in redirect.headers["Location"]
    cookie = redirect.headers["Set-Cookie"].split(";")[0]
    assert "HttpOnly" in redirect.headers["Set-Cookie"]
    assert fetch(local, headers={"Cookie": cookie}).status == 200

    switchyard.send("hello")
    wait_until(lambda: switchyard.events("job.succeeded"), 20)
    assert switchyard.stop() == 0
    assert token not in switchyard.output()
    assert token not in switchyard.home.events_file.read_text()


def test_without_a_token_only_loopback_host_names_are_answered(switchyard: Switchyard) -> None:
    url = start_with_dashboard(switchyard)
    assert fetch(url).status == 200
    assert fetch(url, headers={"Host": "localhost"}).status == 200
    assert fetch(url, headers={"Host": "attacker.example"}).status == 403  # DNS rebinding


def test_a_message_being_processed_is_shown_in_flight_with_its_conversation_and_elapsed_time(
        switchyard: Switchyard) -> None:
    url = start_with_dashboard(switchyard, channels=[])
    slow = switchyard.send("sleep 3 then answer", conversationId="c-slow")

    def in_flight() -> list[dict[str, object]]:
        return [m for m in fetch(url + "api/state").json()["in_flight"] if float(str(m["elapsed_s"])) >= 0.5]

    [message] = wait_until(in_flight, 20)
    assert message["conversation"] == "c-slow" and message["channel"] == "console"
    assert "c-slow" in fetch(url).text
    assert _samples(fetch(url + "metrics").text)[("switchyard_messages_in_flight", ())] == 1
    switchyard.reply_to(slow["messageId"])
    wait_until(lambda: fetch(url + "api/state").json()["in_flight"] == [], 10)  # settled just after the reply


def test_a_port_in_use_is_reported_and_the_gateway_runs_on_without_a_dashboard(switchyard: Switchyard) -> None:
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        switchyard.configure({"dashboard": {"port": taken.getsockname()[1]}})
        switchyard.start()
        [failed] = wait_until(lambda: switchyard.events("dashboard.failed"), 15)
        assert "address already in use" in failed["reason"].lower()
        sent = switchyard.send("hello")
        switchyard.reply_to(sent["messageId"])
        assert "cannot listen" in switchyard.output()


def test_pending_tool_approvals_are_listed_and_answered_once_over_http(switchyard: Switchyard) -> None:
    import time

    from gateway.approvals import Approval, FileApprovals
    from gateway.scope import ConversationScope

    url = start_with_dashboard(switchyard)
    now = time.time()
    store = FileApprovals(switchyard.home)
    store.request(Approval(id="dash01", scope=ConversationScope("console", "console", "desk").key, title=HOSTILE,
                           options=[{"id": "ok", "name": "Allow once", "kind": "allow_once"},
                                    {"id": "no", "name": "Reject", "kind": "reject_once"}],
                           address={"channel": "console", "conversationId": "desk", "messageId": "m1"},
                           owner="elsewhere:1:1", created_at=now, expires_at=now + 600))
    [listed] = fetch(url + "api/state").json()["approvals"]
    assert (listed["id"], listed["title"], listed["options"]) == ("dash01", HOSTILE, "Allow once, Reject")
    html = fetch(url).text
    assert 'class="approval" data-id="dash01" data-verdict="allow"' in html and "Tool approvals (1)" in html
    assert "<img" not in html, "a tool call's title is text, never markup"
    answer = url + "api/approvals/answer"
    body = json.dumps({"id": "dash01", "verdict": "deny"}).encode()
    assert fetch(answer, data=body, headers={"Content-Type": "text/plain"}).status == 415  # no cross-site form
    assert fetch(answer, data=json.dumps({"id": "nope", "verdict": "deny"}).encode(),
                 headers={"Content-Type": "application/json"}).status == 404
    denied = fetch(answer, data=body, headers={"Content-Type": "application/json"})
    assert denied.status == 200 and denied.json()["allowed"] is False and denied.json()["state"] == "answered"
    again = fetch(answer, data=json.dumps({"id": "dash01", "verdict": "allow"}).encode(),
                  headers={"Content-Type": "application/json"})
    assert again.status == 409 and again.json()["by"] == "dashboard"
    stored = store.get("dash01")
    assert stored is not None and stored.choice == "no"
    assert fetch(url + "api/state").json()["approvals"] == []
    # no turn here waits for it (its owner is another process): the operator's answer is audited all the same, once
    audit = switchyard.cli("audit", "--json", "--by", "operator")
    assert audit.returncode == 0, audit.stderr
    assert [(r["action"], r["where"], r["what"]) for r in json.loads(audit.stdout)] == [
        ("approval.answer", "dashboard", f"denied {HOSTILE}")]
