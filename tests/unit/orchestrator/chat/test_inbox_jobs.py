"""Jobs authored by a channel (the prompt inbox): the profile's workflow starts directly, idempotently."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from gateway.api import HandlerContext
from gateway.home import Home
from gateway.settings import ChannelProfile, QueueSettings, Settings
from gateway.telemetry.events import EventLog
from orchestrator.storage.files.runs import RunStore
from tests.fakes.orchestrator import NO_CHAT_TOOLS, FakeOutbox, Flow, ScriptedSelector

CONFIG = """
    selector: {provider: sel}
    reply_within_sec: 5
    workflows:
      review: {steps: [{id: Review, provider: echo, prompt: "reviewed {{input.repo}}/{{input.branch}}: {{message}}"}]}
      chat: {steps: [{id: Reply, provider: echo}]}
      approve: {steps: [{id: Plan, provider: echo}, {id: Ask, input: {prompt: "Ship it?"}}]}
"""
JOB = {"job_id": "j-1-fix-abc", "state": "queued", "repo": "app", "branch": "main", "slug": "fix",
       "timestamp": "1", "inbox_file": "/x/inbox/app/main/1_fix.md", "source_timestamp": "1",
       "metadata": {"trigger_source": "inbox"}}


async def _flow(home: Home, events: EventLog, outbox: FakeOutbox, selector: ScriptedSelector,
                write_config: Callable[[str], Path], start: Callable[..., Any], workflow: str) -> Flow:
    write_config(CONFIG)
    settings = Settings(chat_tools=NO_CHAT_TOOLS,
                        queue=QueueSettings(fsync=False), providers={"sel": selector.provider},
                        channels=[ChannelProfile.model_validate({"id": "prompts", "type": "inbox",
                                                                 "workflow": workflow})])
    context = HandlerContext(home=home, settings=settings, events=events, outbox=outbox, queue_stats=dict)
    return Flow(await start(context), home.root, outbox)


def _inbox_message(**fields: Any) -> dict[str, Any]:
    return {"channel": "inbox", "channelProfileId": "prompts", "messageId": JOB["job_id"],
            "conversationId": "app/main", "job": JOB, **fields}


async def test_an_inbox_job_runs_the_profile_workflow_without_the_selector(
    home: Home, events: EventLog, outbox: FakeOutbox, selector: ScriptedSelector,
    write_config: Callable[[str], Path], start: Callable[..., Any],
) -> None:
    f = await _flow(home, events, outbox, selector, write_config, start, "review")
    events.emit("job.created", job_id=JOB["job_id"], state="queued")
    ack, _ = await f.send("fix the login", **_inbox_message())
    assert ack.message == "Queued job j-1-fix-abc (workflow review)." and ack.workflowRunId == "j-1-fix-abc"
    run = await f.settled("j-1-fix-abc")
    assert selector.calls == 0
    assert run.input["repo"] == "app" and run.job.inbox_file == JOB["inbox_file"] and run.job.branch == "main"
    [result] = outbox.payloads
    extra = result.model_extra or {}
    assert result.message == "reviewed app/main: fix the login" and result.channel == "inbox"
    assert extra["runState"] == "done" and result.job is not None and result.job.job_id == "j-1-fix-abc"
    assert [e["event"] for e in f.job_events("j-1-fix-abc")].count("job.created") == 1
    again, _ = await f.send("fix the login", **_inbox_message())
    stored = [run.runId for run in RunStore(home, fsync=False).newest(0)[0]]
    assert again.workflowRunId == "j-1-fix-abc" and stored.count("j-1-fix-abc") == 1 and len(stored) == 1
    assert len(outbox.payloads) == 1


@pytest.mark.parametrize(("workflow", "why"), [
    ("nope", "workflow 'nope' is not defined"),
    ("approve", "workflow 'approve' asks for input (step Ask), which a job from a file cannot answer"),
])
async def test_a_workflow_the_job_cannot_run_is_a_final_failure_for_the_channel(
    home: Home, events: EventLog, outbox: FakeOutbox, selector: ScriptedSelector,
    write_config: Callable[[str], Path], start: Callable[..., Any], workflow: str, why: str,
) -> None:
    f = await _flow(home, events, outbox, selector, write_config, start, workflow)
    answer, _ = await f.send("x", **_inbox_message())
    assert why in answer.message
    assert (answer.model_extra or {})["runState"] == "failed_final"
    assert list(home.runs.glob("j-*")) == []


async def test_ordinary_channels_still_use_the_selector(
    home: Home, events: EventLog, outbox: FakeOutbox, selector: ScriptedSelector,
    write_config: Callable[[str], Path], start: Callable[..., Any],
) -> None:
    selector.answer({"action": "workflow_start", "workflowId": "chat"})
    f = await _flow(home, events, outbox, selector, write_config, start, "review")
    answer, _ = await f.send("hello")
    assert answer.message == "hello" and selector.calls == 1
