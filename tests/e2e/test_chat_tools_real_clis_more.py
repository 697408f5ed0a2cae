"""The REAL agent CLIs with the chat tools, beyond a message (tests/e2e/test_chat_tools_real_clis.py): a PNG of
the run's own workspace reaches the Telegram fake as one photo with its caption; a question `ask`s the chat (with
Yes/No, or with the options the model gave as a list), a tap answers it and the agent goes on with the answer; a
reminder set by the real claude fires once after the gateway was killed with SIGKILL. The model is the scripted
fake on 127.0.0.1 (tests/fakes/acp/scripted_model.py); what each CLI does is recorded in tests/fakes/clis/MCP.md.
Skipped where a CLI is not installed."""

from __future__ import annotations

import asyncio
import contextlib
import json
import os
import signal
import sys
from collections.abc import AsyncIterator, Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml

from gateway.api import HandlerContext
from gateway.home import Home
from gateway.models import IncomingPayload
from gateway.settings import ChannelProfile, ProviderSettings, QueueSettings, Settings
from gateway.telemetry.events import EventLog
from gateway.testing import async_wait_until
from gateway.testing.rig import ChannelRig, send_like_the_dispatcher
from tests.e2e import test_chat_tools_real_clis as base
from tests.e2e.conftest import Switchyard
from tests.e2e.test_chat_tools_files import png
from tests.fakes.acp.helpers import real_provider
from tests.fakes.acp.scripted_model import Call, ScriptedModel
from tests.fakes.orchestrator import AGENT_VARIABLES, REMOTE_AGENT_CONFIG, FakeOutbox, isolate_real_cli, make_message
from tests.fakes.telegram_server import FakeTelegram
from tests.integration.test_real_endpoints import real_cli
from tests.integration.test_telegram import TOKEN_ENV as TELEGRAM_TOKEN_ENV
from tests.integration.test_telegram import TelegramDriver
from tests.process import pid_alive

pytestmark = [pytest.mark.e2e, pytest.mark.timeout(180)]
secure_home = base.secure_home  # the fixture: a home gemini reads its settings file in
KEY = base.KEY_VARIABLE
ONE_SHOT = sorted(base.MODELS)
ACP = ["acp-claude", "acp-codex", "acp-gemini"]
CAPTION = "this week's chart"
CHART_CONFIG = """
selector: {provider: rules}
diagnostics: {provider: rules}
reply_within_sec: 60
rules: {default_workflow: chart}
agents:
  helper:
    provider: remote
    prompt: "{{message}} [mcp=send_file:path=RUNS/{{run.id}}/workspace/chart.png|caption=CAPTION]"
workflows:
  chart:
    description: Draw the chart, then have the agent send it
    steps:
      - id: Draw
        command:
          - PYTHON
          - -c
          - "import os, shutil, sys; shutil.copy(sys.argv[1], os.environ['SWITCHYARD_WORKSPACE'] + '/chart.png')"
          - SOURCE
      - {id: Send, agent: helper}
"""
"""The Draw step writes the PNG into the run's own workspace (`$SWITCHYARD_WORKSPACE`, runs/<id>/workspace/); the
agent of the Send step is asked to send it from there."""


def provider(cli: str, model: ScriptedModel) -> ProviderSettings:
    """A one-shot preset (`claude`) or a live ACP session of the real adapter (`acp-claude`)."""
    if cli.startswith("acp-"):
        return real_provider(cli.removeprefix("acp-"), model.url, KEY)
    return base.one_shot_provider(cli, model)


def context(home: Home, events: EventLog, outbox: FakeOutbox, remote: ProviderSettings, config: str,
            channel: ChannelProfile) -> HandlerContext:
    workspace = home.root / "orchestrators" / "main"
    workspace.mkdir(parents=True, exist_ok=True)
    (workspace / "orchestrator.yaml").write_text(config)
    settings = Settings(providers={"remote": remote}, queue=QueueSettings(fsync=False), channels=[channel])
    return HandlerContext(home=home, settings=settings, events=events, outbox=outbox, queue_stats=lambda: {})


@pytest.fixture
async def telegram(monkeypatch: pytest.MonkeyPatch) -> AsyncIterator[FakeTelegram]:
    async with FakeTelegram() as fake:
        monkeypatch.setenv(TELEGRAM_TOKEN_ENV, fake.token)
        yield fake


@pytest.mark.parametrize("cli", ONE_SHOT + ACP)
async def test_the_real_cli_sends_a_png_of_its_workspace_as_one_telegram_photo(
    secure_home: Home, events: EventLog, start: Callable[[HandlerContext], Any], tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch, outbox: FakeOutbox, telegram: FakeTelegram, cli: str,
) -> None:
    """A message from the Telegram fake runs the chart workflow; the CLI calls `send_file` on the PNG of its run's
    workspace; what the turn wrote, delivered by the telegram channel, is one sendPhoto with the caption."""
    isolate_real_cli(tmp_path, monkeypatch, KEY, f"sk-real-{cli}")
    image = png()
    source = tmp_path / "chart.png"
    source.write_bytes(image)
    config = (CHART_CONFIG.replace("RUNS", str(secure_home.runs)).replace("CAPTION", CAPTION)
              .replace("PYTHON", json.dumps(sys.executable)).replace("SOURCE", json.dumps(str(source))))
    rig = ChannelRig(TelegramDriver(telegram), secure_home.root)
    channel = await rig.start()
    try:
        async with ScriptedModel() as model:
            assert rig.context is not None
            orchestrator = await start(context(secure_home, events, outbox, provider(cli, model), config,
                                               rig.context.profile))
            await rig.driver.user_says("send me the chart")
            [received] = await async_wait_until(rig.incoming, timeout_s=30)
            answers = await orchestrator.handle(IncomingPayload.model_validate(received))
        for payload in [p for p in [*outbox.payloads, *answers] if not p.draft]:  # as the dispatcher sends
            await send_like_the_dispatcher(channel, payload)
    finally:
        await rig.stop()
    photos = [(s.method, s.filename, s.caption, s.data) for s in telegram.sent if s.method == "sendPhoto"]
    assert photos == [("sendPhoto", "chart.png", CAPTION, image)], (telegram.calls, [a.message for a in answers])
    assert telegram.calls.count("sendPhoto") == 1
    assert any(call.tool_call and call.tool_call.split(":")[0].endswith("send_file") for call in model.calls)
    assert any("sent chart.png" in p.message for p in answers), answers  # the model read the tool's result


TOOL_RESULT = {"claude": '"{\\"result\\":\\"ANSWER\\"}"', "codex": 'Output:\n{"result":"ANSWER"}',
               "gemini": '{"output": "<untrusted_context>\\nANSWER\\n</untrusted_context>"}'}
"""How each CLI hands the model the result ANSWER of `ask` (tests/fakes/clis/MCP.md), as the scripted model
quotes it back: claude the JSON text, codex after its own `Wall time: … Output:` lines, gemini inside
untrusted_context."""


def quoted(cli: str, answer: str) -> str:
    """What the scripted model quotes of the CLI's tool result `answer` of `ask`."""
    return TOOL_RESULT[cli.removeprefix("acp-")].replace("ANSWER", answer)


def answered(model: ScriptedModel, result: str) -> list[Call]:
    """The model's requests that carried a tool result holding `result` (what it quoted back)."""
    return [call for call in model.calls if call.answer.startswith("the tool said") and result in call.answer]


@pytest.mark.parametrize("cli", [c for c in ONE_SHOT if c != "claude"] + ACP)
async def test_the_real_cli_asks_and_goes_on_with_the_option_tapped(
    secure_home: Home, events: EventLog, start: Callable[[HandlerContext], Any], tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch, outbox: FakeOutbox, cli: str,
) -> None:
    """The CLI calls `ask`; the question reaches the conversation with Yes/No buttons; the second is tapped by
    the sender; the call returns "No" to the CLI, which hands it to the model in the tool result, and the model's
    final text (quoting it) reaches the chat. claude -p: tests/e2e/test_chat_tools_real_clis.py."""
    isolate_real_cli(tmp_path, monkeypatch, KEY, f"sk-real-{cli}")
    async with ScriptedModel() as model:
        orchestrator = await start(context(secure_home, events, outbox, provider(cli, model), REMOTE_AGENT_CONFIG,
                                           ChannelProfile(id="console", type="console")))
        turn = asyncio.create_task(orchestrator.handle(make_message(f"[mcp=ask:question=Which branch, {cli}?]")))
        try:
            [question] = await async_wait_until(lambda: [p for p in outbox.payloads if p.buttons], timeout_s=90)
            assert question.message.startswith(f"❓ Which branch, {cli}?")
            assert [b.label for b in question.buttons] == ["Yes", "No"]
            [tapped] = await orchestrator.handle(make_message("No", button=question.buttons[1].id))
            assert tapped.message == "Answered: No"
            replies = await asyncio.wait_for(turn, 90)
        finally:
            turn.cancel()
            with contextlib.suppress(asyncio.CancelledError, Exception):
                await turn

        def chat() -> list[str]:
            return [p.message for p in [*replies, *outbox.payloads] if not p.draft]
        try:
            final = await async_wait_until(lambda: [m for m in chat() if m.startswith("the tool said")], timeout_s=30)
        except AssertionError as exc:
            answers = [c.answer for c in model.calls]
            raise AssertionError(f"the chat got {chat()}, the model answered {answers}") from exc
    [seen] = answered(model, quoted(cli, "No"))
    assert final[0] == seen.answer, (final, seen.answer)
    assert not answered(model, "no answer"), [c.answer for c in model.calls]
    assert any(c.tool_call and c.tool_call.split(":")[0].endswith("ask") for c in model.calls)


COLOURS = ["red", "green", "blue"]


@pytest.fixture
def tool_calls(monkeypatch: pytest.MonkeyPatch) -> list[tuple[str, dict[str, Any]]]:
    """(tool, arguments) of each call the chat tools' MCP server receives, as the CLI sent them (before the SDK
    validates them)."""
    from mcp.server.mcpserver import MCPServer

    received: list[tuple[str, dict[str, Any]]] = []
    real = MCPServer.call_tool

    async def recorded(self: MCPServer, name: str, arguments: dict[str, Any], *args: Any, **kwargs: Any) -> Any:
        received.append((name, dict(arguments)))
        return await real(self, name, arguments, *args, **kwargs)

    monkeypatch.setattr(MCPServer, "call_tool", recorded)
    return received


@pytest.mark.parametrize("cli", ONE_SHOT + ACP)
async def test_the_real_cli_asks_with_options_and_goes_on_with_the_one_tapped(
    secure_home: Home, events: EventLog, start: Callable[[HandlerContext], Any], tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch, outbox: FakeOutbox, tool_calls: list[tuple[str, dict[str, Any]]], cli: str,
) -> None:
    """The model calls `ask` with a list of three options; the CLI passes the list to the server as a list
    (MCP.md); the question reaches the conversation with those three buttons; "green" is tapped, the CLI hands
    the model "green" in the tool result, and the model's final text (quoting it) reaches the chat."""
    isolate_real_cli(tmp_path, monkeypatch, KEY, f"sk-real-{cli}")
    asked = f"[mcp=ask:question=Which colour, {cli}?|options:={json.dumps(COLOURS)}]"
    async with ScriptedModel() as model:
        orchestrator = await start(context(secure_home, events, outbox, provider(cli, model), REMOTE_AGENT_CONFIG,
                                           ChannelProfile(id="console", type="console")))
        turn = asyncio.create_task(orchestrator.handle(make_message(asked)))
        try:
            [question] = await async_wait_until(lambda: [p for p in outbox.payloads if p.buttons], timeout_s=90)
            assert question.message.startswith(f"❓ Which colour, {cli}?")
            assert [b.label for b in question.buttons] == COLOURS
            [tapped] = await orchestrator.handle(make_message("green", button=question.buttons[1].id))
            assert tapped.message == "Answered: green"
            replies = await asyncio.wait_for(turn, 90)
        finally:
            turn.cancel()
            with contextlib.suppress(asyncio.CancelledError, Exception):
                await turn
        final = await async_wait_until(lambda: [p.message for p in [*replies, *outbox.payloads] if not p.draft
                                                and p.message.startswith("the tool said")], timeout_s=30)
    assert [arguments for name, arguments in tool_calls if name == "ask"] == [
        {"question": f"Which colour, {cli}?", "options": COLOURS}]  # a list, as the model gave it
    [seen] = answered(model, quoted(cli, "green"))
    assert final[0] == seen.answer, (final, seen.answer)


REMINDER_TEXT = "stretch your legs"
REMINDER_DELAY = "in 3s"  # the kill comes as the reminder is stored (mid-turn: claude held at its next model
# request): the reminder is due well after the kill, and the restart may come before or after it


def _remote_claude(model: ScriptedModel) -> dict[str, Any]:
    remote = base.one_shot_provider("claude", model)
    return remote.model_dump(mode="json", exclude_none=True, exclude_unset=True)


def _reminded(switchyard: Switchyard) -> list[dict[str, Any]]:
    return [r for r in switchyard.replies() if r["message"] == REMINDER_TEXT and r.get("conversationId") == "ops"]


def _isolated(switchyard: Switchyard, tmp_path: Path) -> Path:
    """The gateway's environment as isolate_real_cli makes a test's: a HOME of its own, the fake key, none of
    the user's agent variables."""
    user_home = tmp_path / "user-home"
    user_home.mkdir(exist_ok=True)
    for name in AGENT_VARIABLES:
        switchyard.env.pop(name, None)
    switchyard.env.update(HOME=str(user_home), **{KEY: "sk-real-claude"})
    return user_home


@pytest.fixture
def no_claude_left(tmp_path: Path) -> Iterator[None]:
    """Whatever a failed test left running with the test's HOME (a claude the restart did not end) is killed."""
    yield
    for pid in _running_with_home(tmp_path / "user-home"):
        with contextlib.suppress(ProcessLookupError):
            os.kill(pid, signal.SIGKILL)


@pytest.mark.parametrize("kill_at", ["answered", "mid-turn"])
@pytest.mark.usefixtures("no_claude_left")
async def test_a_reminder_the_real_claude_sets_fires_once_after_a_kill_9(switchyard: Switchyard, tmp_path: Path,
                                                                         kill_at: str) -> None:
    """`switchyard run` as a process, its agent the real claude -p: claude calls `remind("in 3s", text)`; the
    gateway is killed with SIGKILL before it is due, once the turn has answered (`answered`) or as soon as the
    reminder is stored, claude still running (`mid-turn`: the restarted gateway retries the turn, the real claude
    calls `remind` again and is told it was set before). Restarted, the gateway fires it: its text reaches the
    conversation once, and the one-off is removed."""
    real_cli("claude")
    async with ScriptedModel() as model:
        orchestrator = {**yaml.safe_load(REMOTE_AGENT_CONFIG)}
        channels = [{"id": "beat", "type": "heartbeat", "interval_sec": 3600}]
        switchyard.configure({"providers": {"remote": _remote_claude(model)}, "channels": channels}, orchestrator)
        user_home = _isolated(switchyard, tmp_path)
        if kill_at == "mid-turn":
            model.hold_tool_results()  # claude's request after the tool call waits: it is mid-turn at the kill
        await asyncio.to_thread(switchyard.start)
        switchyard.send(f"[mcp=remind:when={REMINDER_DELAY}|text={REMINDER_TEXT}]", messageId="r1",
                        channel="heartbeat", channelProfileId="beat", conversationId="ops")
        if kill_at == "mid-turn":
            await async_wait_until(lambda: list((switchyard.home.state / "reminders").glob("*.json")), 90, 0.01)
        answer = [] if kill_at == "mid-turn" else await async_wait_until(lambda: _answered(switchyard), 90)
        await asyncio.to_thread(switchyard.kill)
        left = _running_with_home(user_home)  # a claude the killed gateway ran goes on by itself
        assert left or kill_at == "answered", "claude ended with its gateway: the kill came too late"
        assert not _reminded(switchyard), "fired before the kill: the delay is too short for this machine"
        rows = await asyncio.to_thread(_reminder_rows, switchyard)
        assert [row["deliver"] for row in rows] == ["beat/ops"]
        await asyncio.to_thread(switchyard.start)
        assert not any(pid_alive(pid) for pid in left), "the restarted gateway did not end it"  # before it started
        model.release()  # the retried turn's claude gets its answer after the tool call
        answer = answer or await async_wait_until(lambda: _answered(switchyard), 90)
        await async_wait_until(lambda: _reminded(switchyard), timeout_s=60)
        await async_wait_until(lambda: not _reminder_rows(switchyard), timeout_s=30)  # a fired one-off goes
        assert len(_reminded(switchyard)) == 1, _reminded(switchyard)
        fired = [e for e in switchyard.events("schedule.fired") if e["schedule"] == rows[0]["schedule"]]
        assert len(fired) == 1, fired
    said = {"answered": "reminder set: once at", "mid-turn": "set before the gateway restarted, not set again"}
    assert said[kill_at] in answer[0]["message"], answer
    calls = [c for c in model.calls if c.tool_call == f"mcp__switchyard__remind: when={REMINDER_DELAY}|text="
             f"{REMINDER_TEXT}"]
    assert len(calls) == {"answered": 1, "mid-turn": 2}[kill_at], [c.summary() for c in model.calls]


def _answered(switchyard: Switchyard) -> list[dict[str, Any]]:
    return [r for r in switchyard.replies("r1") if "the tool said" in r["message"]]


def _running_with_home(user_home: Path) -> list[int]:
    """The processes whose HOME is the test's own (what the gateway started: it has that HOME) still running."""
    needle = f"HOME={user_home}".encode()
    found = []
    for entry in Path("/proc").iterdir():
        with contextlib.suppress(OSError):
            if entry.name.isdigit() and needle in entry.joinpath("environ").read_bytes().split(b"\0"):
                found.append(int(entry.name))
    return [pid for pid in found if pid_alive(pid)]


def _reminder_rows(switchyard: Switchyard) -> list[dict[str, Any]]:
    listed = switchyard.cli("schedules", "--json")
    assert listed.returncode == 0, listed.stderr
    return [row for row in json.loads(listed.stdout) if row["schedule"].startswith("reminder:")
            and row["conversation"] == "conv:heartbeat/beat/ops"]
