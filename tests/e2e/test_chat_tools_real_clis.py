"""The REAL claude and codex CLIs (one-shot presets) calling the chat tools over MCP, the model being the scripted
fake on 127.0.0.1 (tests/fakes/acp/scripted_model.py, `[mcp=TOOL:KEY=VALUE]`): the argv each preset gives
(tests/fakes/clis/MCP.md) really reaches the server, the call lands in the conversation before the answer, and a
refused call comes back to the model as a tool error while the turn goes on. Skipped where a CLI is not installed."""

from __future__ import annotations

import asyncio
import shutil
import tempfile
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

from gateway.api import HandlerContext
from gateway.home import Home
from gateway.models import OutgoingPayload
from gateway.settings import ChannelProfile, ProviderSettings, QueueSettings, Settings
from gateway.telemetry.events import EventLog
from gateway.testing import async_wait_until
from tests.fakes.acp.helpers import real_provider
from tests.fakes.acp.scripted_model import ScriptedModel
from tests.fakes.orchestrator import API_PREFIX, REMOTE_AGENT_CONFIG, FakeOutbox, isolate_real_cli, make_message
from tests.integration.test_real_endpoints import real_cli

pytestmark = [pytest.mark.timeout(120)]
KEY_VARIABLE = "SWITCHYARD_REAL_CLI_TEST_KEY"
MODELS = {"claude": None, "codex": "gpt-5.4", "gemini": "gemini-fake"}  # codex offers no tools to a model it does
# not know; gemini skips a settings file below a folder others may write (/tmp), so its home is made elsewhere


def one_shot_provider(cli: str, model: ScriptedModel) -> ProviderSettings:
    return ProviderSettings(type=cli, binary=real_cli(cli), base_url=model.url + API_PREFIX[cli],
                            api_key_env=KEY_VARIABLE, model=MODELS[cli], timeout_sec=90, first_output_sec=60)


def _context(home: Home, events: EventLog, outbox: FakeOutbox, provider: ProviderSettings) -> HandlerContext:
    """A handler's context on `home` whose orchestrator's chat workflow is one step of the provider `remote`."""
    workspace = home.root / "orchestrators" / "main"
    workspace.mkdir(parents=True, exist_ok=True)
    (workspace / "orchestrator.yaml").write_text(REMOTE_AGENT_CONFIG)
    settings = Settings(providers={"remote": provider}, queue=QueueSettings(fsync=False))
    return HandlerContext(home=home, settings=settings, events=events, outbox=outbox, queue_stats=lambda: {})


def not_notes(outbox: FakeOutbox) -> list[OutgoingPayload]:
    """What the turn wrote but its progress notes ("⏳ using …", written while a step runs past
    `progress_after_sec`, 8 s, which a loaded machine reaches)."""
    return [p for p in outbox.payloads if not (p.model_extra or {}).get("progressKey")]


@pytest.fixture
def secure_home(home: Home) -> Iterator[Home]:
    """The test's home in a folder no other user may write above (gemini's rule for its settings files): under
    the user's own home when the test's tmp is below /tmp."""
    folder = Path(tempfile.mkdtemp(prefix="switchyard-test-", dir=Path.home()))
    moved = Home(folder / "home")
    shutil.copytree(home.root, moved.root)
    yield moved
    shutil.rmtree(folder, ignore_errors=True)


@pytest.mark.parametrize("cli", sorted(MODELS))
async def test_the_real_cli_sends_a_message_through_the_chat_tools_before_its_answer(
    secure_home: Home, events: EventLog, start: Callable[[HandlerContext], Any], tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch, outbox: FakeOutbox, cli: str,
) -> None:
    isolate_real_cli(tmp_path, monkeypatch, KEY_VARIABLE, f"sk-real-{cli}")
    async with ScriptedModel() as model:
        orchestrator = await start(_context(secure_home, events, outbox, one_shot_provider(cli, model)))
        [answer] = await orchestrator.handle(make_message(f"[mcp=send_message:text=hello from {cli}]"))
    sent = not_notes(outbox)
    assert [p.message for p in sent] == [f"hello from {cli}"]
    assert sent[0].conversationId == "c1" and sent[0].agent == "remote"
    assert "sent (message 1 of at most 20 this turn)" in answer.message  # the model read the tool's result
    named = {"gemini": "mcp_switchyard_send_message"}.get(cli, "mcp__switchyard__send_message")  # MCP.md
    assert any(call.tool_call == f"{named}: text=hello from {cli}" for call in model.calls)


@pytest.mark.parametrize("cli", sorted(MODELS))
async def test_a_refused_call_is_a_tool_error_the_real_cli_hands_the_model(
    secure_home: Home, events: EventLog, start: Callable[[HandlerContext], Any], tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch, outbox: FakeOutbox, cli: str,
) -> None:
    isolate_real_cli(tmp_path, monkeypatch, KEY_VARIABLE, f"sk-real-{cli}")
    async with ScriptedModel() as model:
        orchestrator = await start(_context(secure_home, events, outbox, one_shot_provider(cli, model)))
        [answer] = await orchestrator.handle(make_message("[mcp=send_file:path=/etc/passwd]"))
    assert not_notes(outbox) == []
    assert "outside the folders this conversation may receive files from" in answer.message


@pytest.mark.parametrize("cli", sorted(MODELS))
async def test_the_real_cli_sets_a_reminder_in_its_own_conversation(
    secure_home: Home, events: EventLog, start: Callable[[HandlerContext], Any], tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch, outbox: FakeOutbox, cli: str,
) -> None:
    """The preset lets the CLI call `remind` (claude's --allowedTools, codex's approval mode, gemini's trust):
    the reminder is stored in the conversation of the turn, and the model reads the tool's answer."""
    from orchestrator.storage.files.reminders import FileReminders

    isolate_real_cli(tmp_path, monkeypatch, KEY_VARIABLE, f"sk-real-{cli}")
    async with ScriptedModel() as model:
        orchestrator = await start(_context(secure_home, events, outbox, one_shot_provider(cli, model)))
        [answer] = await orchestrator.handle(make_message("[mcp=remind:when=in 2h|text=stand up]"))
    assert "reminder set: once at" in answer.message, answer.message
    [stored] = FileReminders(secure_home).all()
    assert (stored.text, stored.conversationId, stored.conversation) == ("stand up", "c1", "conv:console/console/c1")


@pytest.mark.parametrize("like", ["claude", "codex", "gemini"])
async def test_a_live_acp_session_gets_the_chat_tools_in_its_mcp_servers_turn_after_turn(
    make_context: Callable[..., HandlerContext], write_config: Callable[[str], Path],
    start: Callable[[HandlerContext], Any], tmp_path: Path, monkeypatch: pytest.MonkeyPatch, outbox: FakeOutbox,
    like: str,
) -> None:
    """`session/new` carries the server (http, the token in a header); the session's second turn reaches it with
    the same token, now bound to that turn."""
    isolate_real_cli(tmp_path, monkeypatch, KEY_VARIABLE, f"sk-real-acp-{like}")
    write_config(REMOTE_AGENT_CONFIG)
    async with ScriptedModel() as model:
        orchestrator = await start(make_context({"remote": real_provider(like, model.url, KEY_VARIABLE)}))
        answers = [await orchestrator.handle(make_message(f"[mcp=send_message:text={like} turn {n}]"))
                   for n in (1, 2)]
    sent = [p.message for p in outbox.payloads if not p.draft]
    assert sent[:1] == [f"{like} turn 1"] and f"{like} turn 2" in sent, (sent, answers)


async def test_the_real_claude_asks_and_a_tap_returns_the_answer_to_it(
    home: Home, events: EventLog, write_config: Callable[[str], Path], start: Callable[[HandlerContext], Any],
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, outbox: FakeOutbox,
) -> None:
    """claude calls `ask`; the question reaches the conversation with buttons; a tap by a sender who may answer
    ends the call with that option, and claude's answer (the run's result) quotes it."""
    isolate_real_cli(tmp_path, monkeypatch, KEY_VARIABLE, "sk-real-claude")
    write_config(REMOTE_AGENT_CONFIG)
    async with ScriptedModel() as model:
        settings = Settings(providers={"remote": one_shot_provider("claude", model)}, queue=QueueSettings(fsync=False),
                            channels=[ChannelProfile(id="console", type="console")])
        context = HandlerContext(home=home, settings=settings, events=events, outbox=outbox,
                                 queue_stats=lambda: {})
        orchestrator = await start(context)
        turn = asyncio.create_task(orchestrator.handle(make_message("[mcp=ask:question=Which branch?]")))
        [question] = await async_wait_until(lambda: [p for p in outbox.payloads if p.buttons], timeout_s=60)
        assert question.message.startswith("❓ Which branch?")
        [tapped] = await orchestrator.handle(make_message("Yes", button=question.buttons[0].id))
        assert tapped.message == "Answered: Yes"
        replies = await asyncio.wait_for(turn, 60)
        done = await async_wait_until(lambda: [p for p in [*replies, *outbox.payloads] if "the tool said" in
                                                p.message], timeout_s=60)
    assert done[0].message == 'the tool said: "{\\"result\\":\\"Yes\\"}"', done[0].message  # the JSON, quoted
    assert any(call.tool_call == "mcp__switchyard__ask: question=Which branch?" for call in model.calls)


async def test_a_sandboxed_real_claude_reaches_its_chat_tools_through_the_model_only_relay(
    secure_home: Home, events: EventLog, start: Callable[[HandlerContext], Any], tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch, outbox: FakeOutbox,
) -> None:
    """`sandbox: bwrap` with `network: model-only` relays the model's host and the chat tools' endpoint, nothing
    else (orchestrator/agents/sandbox.py): the confined claude still sends through its tools."""
    if shutil.which("bwrap") is None:
        pytest.skip("needs bubblewrap (apt-get install bubblewrap)")
    isolate_real_cli(tmp_path, monkeypatch, KEY_VARIABLE, "sk-real-claude")
    async with ScriptedModel() as model:
        provider = one_shot_provider("claude", model).model_copy(update={"sandbox": "bwrap", "network": "model-only"})
        orchestrator = await start(_context(secure_home, events, outbox, provider))
        [answer] = await orchestrator.handle(make_message("[mcp=send_message:text=hello from the sandbox]"))
    assert [p.message for p in outbox.payloads] == ["hello from the sandbox"], answer.message
    assert "sent (message 1 of at most 20 this turn)" in answer.message
