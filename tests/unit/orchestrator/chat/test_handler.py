"""orchestrator/chat/handler.py: the status fast path, slash commands, status precedence, orchestrator choice."""

from __future__ import annotations

from collections.abc import Callable
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import pytest

from gateway.api import HandlerContext, PermanentError
from gateway.home import Home
from gateway.settings import ChannelProfile, OrchestratorRef, QueueSettings, Settings
from gateway.telemetry.events import EventLog, read_events
from gateway.testing import async_wait_until
from orchestrator import Orchestrator
from orchestrator.runs.jobs import iso
from orchestrator.runs.state import Conversation, RunState, StepState, conversation_key
from orchestrator.storage.files.runs import RunStore
from tests.fakes.orchestrator import NO_CHAT_TOOLS, FakeOutbox, ScriptedSelector, make_message

NO_RUN = "no active workflow run found for this conversation"
CONFIG = """
    selector: {provider: sel}
    agents: {a: {provider: echo}}
    workflows:
      build: {description: Build it, steps: [{id: Plan, agent: a}, {id: Test, command: [echo, ok]}]}
"""


def _store_run(home: Home, run_id: str, conversation_id: str, *, active: bool = True) -> RunState:
    message = make_message("build", conversationId=conversation_id)
    run = RunState(runId=run_id, workflowId="build", orchestratorId="main", state="running", currentStep="Test",
                   message=message.model_dump(mode="json"),
                   conversation=Conversation(channel="console", conversationId=conversation_id),
                   steps={"Plan": StepState(status="completed"), "Test": StepState(status="running")})
    return RunStore(home, fsync=False).create(run, conversation_key(message) if active else None)


def _files(folder: Path) -> dict[str, bytes]:
    """Every file under `folder` (state, events, the active index) by relative path, with its bytes."""
    return {str(p.relative_to(folder)): p.read_bytes() for p in sorted(folder.rglob("*")) if p.is_file()}


@pytest.fixture
async def orchestrator(
    selector: ScriptedSelector, make_context: Callable[..., HandlerContext],
    write_config: Callable[[str], Path], start: Callable[..., Any],
) -> Orchestrator:
    write_config(CONFIG)
    selector.answer({"action": "workflow_status"})
    result: Orchestrator = await start(make_context({"sel": selector.provider}))
    return result


@pytest.mark.parametrize("text", ["status", " STATUS ", "Progress", "/status", "/PROGRESS"])
async def test_status_fast_path_calls_no_provider_and_changes_nothing(
    home: Home, selector: ScriptedSelector, orchestrator: Orchestrator, text: str
) -> None:
    _store_run(home, "r-a", "c1")
    before = _files(home.runs)
    [answer] = await orchestrator.handle(make_message(text, workflowRunId="r-a"))
    head, *lines = answer.message.splitlines()
    assert head.startswith("Run r-a (workflow build): running, step 2/2 Test, elapsed ")
    assert lines[:2] == ["  ✓ Plan", "  ▶ Test"] and lines[2].startswith("Last event: run.created")
    assert (answer.workflowRunId, answer.workflowStepId, answer.agent) == ("r-a", "Test", "switchyard")
    assert not selector.calls_file.exists()
    assert _files(home.runs) == before, "the status fast path wrote to the run's files"
    assert list(home.select_incoming.iterdir()) == []
    stored = RunStore(home).load("r-a")
    assert stored is not None and stored.state == "running" and stored.currentStep == "Test"


async def test_status_fast_path_works_even_with_a_broken_orchestrator_yaml(
    home: Home, orchestrator: Orchestrator, write_config: Callable[[str], Path]
) -> None:
    _store_run(home, "r-a", "c1")
    write_config("selector: {provider: nowhere}\n")
    [answer] = await orchestrator.handle(make_message("status", workflowRunId="r-a"))
    assert answer.message.startswith("Run r-a (workflow build): running")


async def test_status_precedence(home: Home, selector: ScriptedSelector, orchestrator: Orchestrator) -> None:
    _store_run(home, "r-a", "c1")
    _store_run(home, "r-b", "c2")
    _store_run(home, "r-old", "c1", active=False)
    [named] = await orchestrator.handle(make_message("status", workflowRunId="r-old", conversationId="c1"))
    assert named.message.startswith("Run r-old ")
    [elsewhere] = await orchestrator.handle(make_message("status", workflowRunId="r-b", conversationId="c1"))
    assert elsewhere.message == "no workflow run 'r-b' found", "another conversation's run is not reachable"
    [active] = await orchestrator.handle(make_message("/status", conversationId="c1"))
    assert active.message.startswith("Run r-a ")
    [none] = await orchestrator.handle(make_message("/status", conversationId="c3"))
    assert none.message == NO_RUN and none.workflowRunId is None
    assert selector.calls == 0
    [selected] = await orchestrator.handle(make_message("how is it going?", conversationId="c3"))
    assert (selected.message, selected.agent) == (NO_RUN, "selector")
    [selected_active] = await orchestrator.handle(make_message("how is it going?", conversationId="c2"))
    assert selected_active.message.startswith("Run r-b ")


def _ended(home: Home, run_id: str, conversation_id: str, state: str, seconds_ago: int, **steps: str) -> None:
    """A run of `conversation_id` that ended in `state` `seconds_ago`, its steps' statuses as given."""
    run = _store_run(home, run_id, conversation_id)
    finished = iso(datetime.now(UTC) - timedelta(seconds=seconds_ago))
    states = {name: StepState(status=status) for name, status in steps.items()}  # type: ignore[arg-type]
    RunStore(home, fsync=False).save(run.model_copy(update={
        "state": state, "currentStep": None, "delivery": "reply", "steps": {**run.steps, **states},
        "job": run.job.model_copy(update={"finished_at": finished})}))


async def test_status_after_the_run_ended_keeps_its_sentence_and_says_how_the_conversations_last_run_ended(
    home: Home, selector: ScriptedSelector, orchestrator: Orchestrator
) -> None:
    _ended(home, "r-a", "c1", "done", 125, Test="completed")
    _ended(home, "r-b", "c2", "failed_final", 3 * 3600 + 5, Test="failed")
    _ended(home, "r-c", "c4", "cancelled", 2 * 86400, Test="failed")
    answers = {}
    for conversation in ("c1", "c2", "c3", "c4"):
        [answers[conversation]] = await orchestrator.handle(make_message("/status", conversationId=conversation))
    assert answers["c1"].message.splitlines() == [NO_RUN, "Last run: r-a (workflow build) done 2 min ago."]
    assert answers["c2"].message.splitlines() == [NO_RUN, "Last run: r-b (workflow build) failed at step Test 3 h ago."]
    assert answers["c4"].message.splitlines() == [NO_RUN, "Last run: r-c (workflow build) cancelled 2 days ago."]
    assert answers["c3"].message == NO_RUN, "another conversation's last run was shown"
    assert all(answer.workflowRunId is None for answer in answers.values()) and selector.calls == 0


async def test_status_shows_the_run_its_conversations_waiting_message_started(
    home: Home, orchestrator: Orchestrator
) -> None:
    """A run whose starting message still waits for it is not the conversation's active run yet
    (RunExecutor.begin); `/status`, which runs beside that message (gateway.payloads), shows it all the same."""
    run = _store_run(home, "r-a", "c1", active=False)  # as RunExecutor.begin(waits=True) stores it
    assert RunStore(home).active_for("console/console/c1") is None and run.state == "running"
    [answer] = await orchestrator.handle(make_message("/status", conversationId="c1"))
    assert answer.message.startswith("Run r-a (workflow build): running, step 2/2 Test")
    assert answer.workflowRunId == "r-a"


async def test_an_unknown_named_run_is_reported_not_replaced(home: Home, orchestrator: Orchestrator) -> None:
    _store_run(home, "r-a", "c1")
    [status] = await orchestrator.handle(make_message("/status", workflowRunId="r-ghost", conversationId="c1"))
    assert status.message == "no workflow run 'r-ghost' found"
    [cancel] = await orchestrator.handle(make_message("/cancel", workflowRunId="r-ghost", conversationId="c1"))
    assert cancel.message == "Nothing is running."
    assert RunStore(home).load("r-a").state == "running"  # type: ignore[union-attr]


async def test_help_lists_workflows_without_a_provider(selector: ScriptedSelector, orchestrator: Orchestrator) -> None:
    [answer] = await orchestrator.handle(make_message("/help"))
    assert "- build: Build it" in answer.message and "/cancel" in answer.message
    assert answer.agent == "switchyard" and selector.calls == 0


async def test_message_to_a_run_not_waiting_for_input(home: Home, orchestrator: Orchestrator) -> None:
    _store_run(home, "r-a", "c1")
    [answer] = await orchestrator.handle(make_message("main branch please", workflowRunId="r-a"))
    assert answer.message.startswith("Run r-a (workflow build): running")
    assert answer.message.endswith("\n(this run is not waiting for input)")


async def test_unknown_slash_command_goes_to_the_selector(
    selector: ScriptedSelector, orchestrator: Orchestrator
) -> None:
    await orchestrator.handle(make_message("/deploy now"))
    assert selector.calls == 1


async def test_an_orchestrator_yaml_that_never_validated_is_a_permanent_error(
    make_context: Callable[..., HandlerContext], write_config: Callable[[str], Path], start: Callable[..., Any],
) -> None:
    write_config("agents: {a: {provider: nowhere}}\n")
    orchestrator = await start(make_context())
    with pytest.raises(PermanentError, match="agents.a.provider: unknown provider 'nowhere'"):
        await orchestrator.handle(make_message("hello"))


@pytest.fixture
def quick_config_checks(monkeypatch: pytest.MonkeyPatch) -> None:
    """Each orchestrator.yaml is looked at every 50 ms, not every 2 s (set before the orchestrator starts)."""
    monkeypatch.setattr("orchestrator.chat.handler.CONFIG_CHECK_SEC", 0.05)


@pytest.mark.usefixtures("quick_config_checks")
async def test_a_broken_edit_is_reported_at_once_and_the_last_valid_orchestrator_yaml_answers(
    orchestrator: Orchestrator, write_config: Callable[[str], Path], events: EventLog,
) -> None:
    write_config("agents: {a: {provider: nowhere}}\n")
    await async_wait_until(lambda: [e for e in read_events(events.path)
                                    if e["event"] == "orchestrator.config_rejected"])
    answer = await orchestrator.handle(make_message("/help"))
    assert "build" in answer[0].message  # a workflow of the last valid file


async def test_channel_profile_selects_its_orchestrator(
    home: Home, events: EventLog, outbox: FakeOutbox, start: Callable[..., Any]
) -> None:
    settings = Settings(
        queue=QueueSettings(fsync=False), chat_tools=NO_CHAT_TOOLS,
        orchestrators={"main": OrchestratorRef(workspace="orchestrators/main"),
                       "ops": OrchestratorRef(workspace="ops-ws")},
        channels=[ChannelProfile(id="pager", type="console", orchestrator="ops")],
    )
    (home.root / "ops-ws").mkdir()
    (home.root / "ops-ws" / "orchestrator.yaml").write_text(
        "agents: {a: {provider: echo}}\nworkflows: {restart: {description: Restart, steps: [{id: R, agent: a}]}}\n")
    context = HandlerContext(home=home, settings=settings, events=events, outbox=outbox, queue_stats=dict)
    orchestrator = await start(context)
    [ops] = await orchestrator.handle(make_message("/help", channelProfileId="pager"))
    [main] = await orchestrator.handle(make_message("/help", channelProfileId="console"))
    assert "- restart: Restart" in ops.message and "restart" not in main.message
    assert "- chat: Reply to a chat message" in main.message


async def test_default_orchestrator_echoes_a_chat_message(
    make_context: Callable[..., HandlerContext], start: Callable[..., Any]
) -> None:
    orchestrator = await start(make_context())
    [answer] = await orchestrator.handle(make_message("hello [send_file: /tmp/x.txt]"))
    assert answer.message == "You said: hello [send_file: /tmp/x.txt]", "the user's own tag is echoed as text"
    assert answer.files == []
    assert answer.agent == "echo" and answer.workflowStepId == "Reply"


async def test_an_edit_of_a_taken_message_reaches_the_agent_marked_edited(
    selector: ScriptedSelector, orchestrator: Orchestrator
) -> None:
    """Issue 23 §3: an edit queued as its own message (`editOf`) is shown to the agent as "(edited) <text>"; a
    message that is no edit is shown as it is."""
    await orchestrator.handle(make_message("plain words first"))
    await orchestrator.handle(make_message("build the docs please", editOf="m1"))
    requests = selector.requests()
    assert "(edited) build the docs please" in requests, requests[-2000:]
    assert "plain words first" in requests and "(edited) plain words first" not in requests
