"""Roles checked before anything starts (orchestrator/chat/access.py): a member typing an edit workflow's id is
refused and no agent starts, an admin's runs (and is audited once); a guest's /stop of another sender's turn is
refused, an admin's is audited; a run named by id is reachable only from its conversation; a function a role
does not hold is refused. Each refusal is one reply naming what the sender may do, and an `access.refused` event."""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from gateway.api import HandlerContext
from gateway.composition import open_backend
from gateway.home import Home
from gateway.settings import ChannelProfile, ProviderSettings, QueueSettings, Settings
from gateway.stores import AUDIT
from gateway.telemetry.events import EventLog, read_events
from gateway.testing import async_wait_until
from orchestrator import Orchestrator
from orchestrator.runs.state import run_id_for
from orchestrator.storage.files.runs import RunStore
from tests.fakes.clis import FakeClis
from tests.fakes.orchestrator import NO_CHAT_TOOLS, FakeOutbox, ScriptedSelector, make_message

CONFIG = """
    selector: {provider: SELECTOR}
    diagnostics: {provider: rules}
    reply_within_sec: 30
    agents:
      coder: {provider: coder}
      talker: {provider: slow}
    workflows:
      fix: {description: Edits the project, steps: [{id: Edit, agent: coder}]}
      chat: {description: Talks, steps: [{id: Talk, agent: talker}]}
      review: {description: Reviewed edits, allow: [member], steps: [{id: Edit, agent: coder}]}
    functions:
      shout: {description: Shouts, command: [echo, HEY]}
"""
PROFILE = ChannelProfile(id="console", type="console", roles={"admin": ["root"], "guest": ["eve"], "owner": ["boss"]},
                         default_role="member")


class Blocking:
    """A built-in provider that answers only when told to; counts its calls."""

    def __init__(self) -> None:
        self.calls = 0
        self.release = asyncio.Event()

    async def __call__(self, prompt: str, request: dict[str, Any]) -> str:
        self.calls += 1
        await self.release.wait()
        return f"answered {prompt}"


@pytest.fixture
def slow() -> Blocking:
    return Blocking()


@pytest.fixture
def build(home: Home, events: EventLog, outbox: FakeOutbox, write_config: Callable[[str], Path],
          start: Callable[..., Any], fake_clis: FakeClis, slow: Blocking,
          selector: ScriptedSelector) -> Callable[..., Any]:
    """Starts an Orchestrator whose `coder` provider is the fake claude in `mode: edit` (`sel`: the scripted
    selector)."""

    async def made(chooser: str = "rules") -> Orchestrator:
        write_config(CONFIG.replace("SELECTOR", chooser))
        providers = {"coder": ProviderSettings(type="claude", mode="edit", binary=fake_clis.path("claude")),
                     "sel": selector.provider}
        settings = Settings(chat_tools=NO_CHAT_TOOLS,
                            providers=providers, channels=[PROFILE], queue=QueueSettings(fsync=False))
        context = HandlerContext(home=home, settings=settings, events=events, outbox=outbox,
                                 queue_stats=lambda: {}, builtin_providers={"slow": slow})
        orchestrator: Orchestrator = await start(context)
        return orchestrator

    return made


def _refusals(home: Home) -> list[dict[str, Any]]:
    return [e for e in read_events(home.events_file) if e["event"] == "access.refused"]


def _audit(home: Home) -> list[Any]:
    return open_backend(home, Settings()).store(AUDIT).records()


async def test_a_member_typing_an_edit_workflow_is_refused_before_any_agent_and_an_admin_runs_it(
        home: Home, build: Callable[..., Any], fake_clis: FakeClis) -> None:
    orchestrator = await build()
    asked = make_message("fix the login page", senderId="ada")
    [refused] = await orchestrator.handle(asked)
    assert refused.message.startswith("You may not start workflow fix: it is for admin (it has an agent that "
                                      "edits files) (your role here: member). You may: start chat, review;")
    assert fake_clis.calls("claude") == [], "an agent started for a refused workflow"
    assert RunStore(home, fsync=False).load(run_id_for(asked)) is None
    [event] = _refusals(home)
    assert (event["sender"], event["role"], event["workflow"]) == ("ada", "member", "fix")

    [ran] = await orchestrator.handle(make_message("fix the login page", senderId="root"))
    assert ran.message == "echo: fix the login page", ran.message
    assert len(fake_clis.calls("claude")) == 1
    [record] = _audit(home)
    assert (record.action, record.by, record.details["workflow"]) == ("workflow.start_edit", "console/console/root",
                                                                       "fix")


async def test_allow_opens_an_edit_workflow_to_the_roles_it_names(build: Callable[..., Any],
                                                                   fake_clis: FakeClis) -> None:
    orchestrator = await build()
    [ran] = await orchestrator.handle(make_message("review this", senderId="ada"))
    assert ran.message == "echo: review this"
    [refused] = await orchestrator.handle(make_message("review this", senderId="eve"))
    assert refused.message.startswith("You may not start workflow review: it is for roles member (your role here: "
                                      "guest).")
    assert len(fake_clis.calls("claude")) == 1


async def test_the_selectors_decision_is_checked_before_it_starts_anything(
        home: Home, build: Callable[..., Any], selector: ScriptedSelector, fake_clis: FakeClis) -> None:
    started = await build("sel")  # a CLI selector: its decision is known only once it has run
    selector.answer({"action": "workflow_start", "workflowId": "fix"})
    [refused] = await started.handle(make_message("please make the page nicer", senderId="ada"))
    assert refused.message.startswith("You may not start workflow fix")
    assert fake_clis.calls("claude") == []
    selector.answer({"action": "command_invoke", "function": "shout", "arguments": {}})
    [function] = await started.handle(make_message("shout please", senderId="eve"))
    assert function.message.startswith("You may not run the command shout (your role here: guest).")
    [shouted] = await started.handle(make_message("shout please", senderId="ada"))
    assert shouted.message.strip() == "HEY"
    assert [r.action for r in _audit(home)] == ["function.invoke"]


async def test_a_guests_stop_of_another_senders_turn_is_refused_and_an_admins_is_audited(
        home: Home, build: Callable[..., Any], slow: Blocking) -> None:
    orchestrator = await build()
    talk = make_message("chat with me", senderId="ada", conversationId="group")
    first = asyncio.create_task(orchestrator.handle(talk))
    await async_wait_until(lambda: slow.calls == 1)

    [refused] = await orchestrator.handle(make_message("/stop", senderId="eve", conversationId="group"))
    assert refused.message.startswith("You may not stop what another sender started (only your own turns and "
                                      "runs) (your role here: guest).")
    assert not first.done(), "the guest's /stop stopped the member's turn"
    [cancel] = await orchestrator.handle(make_message("/cancel", senderId="eve", conversationId="group"))
    assert cancel.message.startswith("You may not stop")
    run = RunStore(home, fsync=False).load(run_id_for(talk))
    assert run is not None and run.state == "running"

    [stopped] = await orchestrator.handle(make_message("/stop", senderId="root", conversationId="group"))
    assert stopped.message.startswith("Stopped."), stopped.message
    assert await asyncio.wait_for(first, 5) == []
    [record] = _audit(home)
    assert (record.action, record.by, record.details["stopped"]) == ("turn.stop_other", "console/console/root",
                                                                      ["ada"])
    assert [e["permission"] for e in _refusals(home)] == ["turn.stop_others", "turn.stop_others"]


async def test_a_senders_own_stop_needs_no_permission(build: Callable[..., Any], slow: Blocking, home: Home) -> None:
    orchestrator = await build()
    talk = make_message("chat with me", senderId="eve", conversationId="dm")
    first = asyncio.create_task(orchestrator.handle(talk))
    await async_wait_until(lambda: slow.calls == 1)
    [stopped] = await orchestrator.handle(make_message("/stop", senderId="eve", conversationId="dm"))
    assert stopped.message.startswith("Stopped.")
    assert await asyncio.wait_for(first, 5) == []
    assert _audit(home) == [], "stopping one's own turn is no privileged action"


async def test_a_run_named_by_id_is_reachable_only_from_its_conversation(
        home: Home, build: Callable[..., Any], slow: Blocking) -> None:
    orchestrator = await build()
    talk = make_message("chat with me", senderId="ada", conversationId="mine")
    first = asyncio.create_task(orchestrator.handle(talk))
    await async_wait_until(lambda: slow.calls == 1)
    run_id = run_id_for(talk)
    unknown = f"no workflow run '{run_id}' found"
    for text in ("status", "/stop", "/cancel", "what now?"):
        [answer] = await orchestrator.handle(make_message(text, senderId="ada", conversationId="theirs",
                                                          workflowRunId=run_id))
        assert answer.message == unknown, (text, answer.message)
    assert not first.done()
    run = RunStore(home, fsync=False).load(run_id)
    assert run is not None and run.state == "running", "a run was stopped from another conversation"
    [owner] = await orchestrator.handle(make_message("status", senderId="boss", conversationId="theirs",
                                                     workflowRunId=run_id))
    assert owner.message.startswith(f"Run {run_id} "), "the owner role reaches any conversation's run"
    slow.release.set()
    await asyncio.wait_for(first, 5)


async def test_usage_of_another_sender_needs_usage_others(build: Callable[..., Any]) -> None:
    orchestrator = await build()
    [refused] = await orchestrator.handle(make_message("/usage root", senderId="ada"))
    assert refused.message.startswith("You may not see another sender's usage (your role here: member).")
    [allowed] = await orchestrator.handle(make_message("/usage ada", senderId="root"))
    assert not allowed.message.startswith("You may not")


async def test_cancel_run_of_another_senders_run_needs_stop_others(
        home: Home, build: Callable[..., Any], selector: ScriptedSelector, slow: Blocking) -> None:
    orchestrator = await build("sel")
    selector.answer({"action": "workflow_start", "workflowId": "chat"})
    talk = make_message("chat with me", senderId="ada", conversationId="group")
    first = asyncio.create_task(orchestrator.handle(talk))
    await async_wait_until(lambda: slow.calls == 1)
    run_id = run_id_for(talk)
    selector.answer({"action": "command_invoke", "function": "cancel_run", "arguments": {"runId": run_id}})
    [refused] = await orchestrator.handle(make_message("cancel ada's run", senderId="bob", conversationId="group"))
    assert refused.message.startswith("You may not stop what another sender started"), refused.message
    run = RunStore(home, fsync=False).load(run_id)
    assert run is not None and run.state == "running"
    [cancelled] = await orchestrator.handle(make_message("cancel my run", senderId="ada", conversationId="group"))
    assert cancelled.message.startswith("Cancelled run"), cancelled.message
    await asyncio.wait_for(first, 5)
