"""What a channel declares on its payloads, not its name, decides how the orchestrator treats them:
a `job` starts the profile's workflow without the selector, `invokeFunction` asks the rules selector
for one offered function. Any third-party channel gets both."""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from gateway import ChannelContext, FunctionSpec, IncomingPayload, Job
from gateway.api import HandlerContext
from gateway.home import Home
from gateway.payloads import parse_payload
from gateway.settings import ChannelProfile, QueueSettings, Settings
from gateway.telemetry.events import EventLog
from gateway.testing import async_wait_until
from orchestrator.agents.builtin import select_by_rules
from plugins import heartbeat
from plugins.heartbeat.channel import HeartbeatChannel
from tests.fakes.orchestrator import NO_CHAT_TOOLS, FakeOutbox, Flow, ScriptedSelector

CONFIG = """
    selector: {provider: sel}
    reply_within_sec: 5
    workflows:
      triage: {steps: [{id: Triage, provider: echo, prompt: "triaged {{input.repo}}#{{input.slug}}: {{message}}"}]}
      chat: {steps: [{id: Reply, provider: echo}]}
"""
RULES = """
    selector: {provider: rules}
    workflows:
      chat: {steps: [{id: Reply, provider: echo}]}
"""
TICKETS = ChannelProfile.model_validate({"id": "desk", "type": "tickets", "workflow": "triage"})


def _context(home: Home, events: EventLog, outbox: FakeOutbox, selector: ScriptedSelector | None = None,
             functions: list[FunctionSpec] | None = None) -> HandlerContext:
    providers = {"sel": selector.provider} if selector is not None else {}
    settings = Settings(chat_tools=NO_CHAT_TOOLS,
                        queue=QueueSettings(fsync=False), providers=providers, channels=[TICKETS])
    return HandlerContext(home=home, settings=settings, events=events, outbox=outbox, queue_stats=dict,
                          functions=functions or [])


async def test_a_third_party_channel_carrying_a_job_skips_the_selector(
    home: Home, events: EventLog, outbox: FakeOutbox, selector: ScriptedSelector,
    write_config: Callable[[str], Path], start: Callable[..., Any],
) -> None:
    write_config(CONFIG)
    f = Flow(await start(_context(home, events, outbox, selector)), home.root, outbox)
    job = Job(job_id="t-42", repo="shop", slug="refund", metadata={"ticket": 42})
    ack, _ = await f.send("customer wants a refund", channel="tickets", channelProfileId="desk", job=job)
    assert ack.message == "Queued job t-42 (workflow triage)." and ack.workflowRunId == "t-42"
    run = await f.settled("t-42")
    assert selector.calls == 0
    assert run.input == {"text": "customer wants a refund", "repo": "shop", "slug": "refund"}
    assert (run.job.repo, run.job.slug, run.job.metadata) == ("shop", "refund", {"ticket": 42})
    [result] = outbox.payloads
    assert result.message == "triaged shop#refund: customer wants a refund"
    assert result.job is not None and result.job.job_id == "t-42" and result.channel == "tickets"
    selector.answer({"action": "workflow_start", "workflowId": "chat"})
    chat, _ = await f.send("hello desk", channel="tickets", channelProfileId="desk")  # no job: chat
    assert selector.calls == 1 and chat.message == "hello desk"


def test_a_malformed_job_is_refused_with_its_reason() -> None:
    raw = b'{"channel": "tickets", "message": "x", "timestamp": 1, "messageId": "m", "job": {"repo": ["no"]}}'
    with pytest.raises(ValueError, match=r"wrong schema: job\.repo"):
        parse_payload(raw, 1 << 20)


def test_a_job_keeps_the_channels_own_keys_in_the_payload_json() -> None:
    raw = {"channel": "tickets", "message": "x", "timestamp": 1, "messageId": "m",
           "job": {"job_id": "t-1", "state": "queued", "retries": 0}, "custom": True}
    payload = IncomingPayload.model_validate(raw)
    assert payload.job is not None and payload.job.model_extra == {"state": "queued", "retries": 0}
    written = json.loads(payload.to_json())
    assert written["job"] == {"job_id": "t-1", "state": "queued", "retries": 0, "metadata": {}}
    assert written["custom"] is True


def _request(message: dict[str, Any], functions: list[str]) -> dict[str, Any]:
    return {"message": message, "workflows": [{"id": "chat"}], "rules": {"default_workflow": "chat"},
            "availableFunctions": [{"name": name} for name in functions], "allowedActions": []}


def test_the_rules_selector_invokes_the_function_a_message_asks_for_only_when_offered() -> None:
    asked = {"channel": "pager", "message": "ping", "invokeFunction": "pager_check"}
    assert select_by_rules(_request(asked, ["pager_check", "list_workflows"])) == {
        "action": "command_invoke", "function": "pager_check", "arguments": {}}
    assert select_by_rules(_request(asked, ["list_workflows"]))["action"] == "workflow_start"
    by_name_only = {"channel": "heartbeat", "message": "heartbeat"}  # the channel's name alone asks nothing
    assert select_by_rules(_request(by_name_only, ["heartbeat_check"]))["action"] == "workflow_start"


async def test_a_third_party_probe_is_answered_by_its_function_through_the_rules_selector(
    home: Home, events: EventLog, outbox: FakeOutbox, write_config: Callable[[str], Path],
    start: Callable[..., Any],
) -> None:
    write_config(RULES)
    check = FunctionSpec(name="pager_check", description="answers a pager probe",
                         parameters={"type": "object", "properties": {}}, call=lambda arguments: "PAGER_OK")
    f = Flow(await start(_context(home, events, outbox, functions=[check])), home.root, outbox)
    answer, _ = await f.send("are you there", channel="pager", invokeFunction="pager_check")
    assert answer.message == "PAGER_OK"


async def test_the_heartbeat_probe_asks_for_its_check_and_gets_heartbeat_ok(
    home: Home, events: EventLog, outbox: FakeOutbox, write_config: Callable[[str], Path],
    start: Callable[..., Any],
) -> None:
    profile = ChannelProfile.model_validate({"id": "beat", "type": "heartbeat", "interval_sec": 3600})
    settings = Settings(chat_tools=NO_CHAT_TOOLS, queue=QueueSettings(fsync=False), channels=[profile])
    channel = HeartbeatChannel(profile, ChannelContext(home=home, settings=settings, profile=profile,
                                                       events=events, outbox=outbox))
    probes: list[IncomingPayload] = []

    async def sink(payload: IncomingPayload) -> Path:
        probes.append(payload)
        return home.incoming / f"{payload.messageId}.json"

    home.create()
    await channel.start(sink)
    await async_wait_until(lambda: probes)
    await channel.stop()
    [probe] = probes
    assert probe.invokeFunction == "heartbeat_check"
    write_config(RULES)
    functions = heartbeat.switchyard_functions()
    f = Flow(await start(_context(home, events, outbox, functions=functions)), home.root, outbox)
    [answer] = await f.orchestrator.handle(probe)
    assert answer.message == heartbeat.OK
