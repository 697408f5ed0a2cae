"""Presets pointed at a custom model endpoint (`base_url`, `api_key_env`): the fake CLIs (tests/fakes/clis) call
the fake model server (tests/fakes/model_server.py) the way the real CLIs do once configured right, so a
reply proves the preset configured each CLI the way it reads it."""

from __future__ import annotations

import json
import stat
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from pydantic import ValidationError

from gateway.api import HandlerContext, PermanentError
from gateway.home import Home
from gateway.settings import ProviderSettings
from orchestrator import Orchestrator
from tests.fakes.clis import FakeClis
from tests.fakes.model_server import ModelServer
from tests.fakes.orchestrator import REMOTE_AGENT_CONFIG, make_message

KEY_VARIABLE = "SWITCHYARD_TEST_MODEL_KEY"
# how each CLI reads the endpoint: (path prefix in base_url, the API path it calls, its own key variable,
# the private home variable the preset sets, or None)
CLIS = {
    "claude": ("/anthropic", "/anthropic/v1/messages", "ANTHROPIC_API_KEY", None),
    "codex": ("/openai/v1", "/openai/v1/responses", "OPENAI_API_KEY", "CODEX_HOME"),
    "gemini": ("/google", "/google/v1beta/models/", "GEMINI_API_KEY", "GEMINI_CLI_HOME"),
}

Start = Callable[..., Any]


@pytest.fixture
def user_home(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """An empty HOME for the user running switchyard: nothing may be written into it."""
    path = tmp_path / "user-home"
    path.mkdir()
    monkeypatch.setenv("HOME", str(path))
    return path


@pytest.fixture
def remote(make_context: Callable[..., HandlerContext], write_config: Callable[[str], Path],
           start: Callable[[HandlerContext], Any]) -> Start:
    """`await remote(cli, **settings)`: an orchestrator whose agent is the provider `remote` of that preset."""

    async def build(cli: str, **settings: Any) -> Orchestrator:
        write_config(REMOTE_AGENT_CONFIG)
        provider = ProviderSettings.model_validate({"type": cli, **settings})
        return await start(make_context({"remote": provider}))  # type: ignore[no-any-return]

    return build


@pytest.mark.parametrize("cli", sorted(CLIS))
async def test_a_preset_with_base_url_and_api_key_env_answers_from_that_endpoint_with_that_key(
    fake_clis: FakeClis, remote: Start, home: Home, user_home: Path, monkeypatch: pytest.MonkeyPatch, cli: str,
) -> None:
    prefix, api_path, own_variable, private_home = CLIS[cli]
    monkeypatch.setenv(KEY_VARIABLE, f"sk-{cli}-from-the-gateway")
    monkeypatch.setenv(own_variable, "the-users-own-key")  # the provider's key wins over the user's own
    async with ModelServer(reply=f"{cli} via the endpoint") as server:
        orchestrator = await remote(cli, base_url=server.url + prefix, api_key_env=KEY_VARIABLE)
        answers = [await orchestrator.handle(make_message(text, conversationId="c1"))
                   for text in ("my name is Ada", "what is my name?")]
    assert [answer.message for [answer] in answers] == [f"{cli} via the endpoint"] * 2
    assert [call.path.startswith(api_path) for call in server.model_calls] == [True, True]
    assert {call.api_key for call in server.model_calls} == {f"sk-{cli}-from-the-gateway"}
    first, second = fake_clis.calls(cli)
    for call in (first, second):
        assert KEY_VARIABLE not in call["env_keys"], "the variable api_key_env names never reaches the CLI"
        assert call["env"][own_variable] == f"sk-{cli}-from-the-gateway"
    assert ("resume" in second["argv"]) or ("--resume" in second["argv"]), "the second turn continues the session"
    if private_home is not None:
        folder = Path(first["env"][private_home])
        assert folder.is_relative_to(home.root / "providers" / "remote")
        assert stat.S_IMODE((home.root / "providers" / "remote").stat().st_mode) == 0o700
        assert second["env"][private_home] == str(folder), "one CLI home per provider keeps its sessions"
        assert KEY_VARIABLE not in "".join(p.read_text() for p in folder.rglob("*") if p.is_file())
    assert list(user_home.iterdir()) == [], "nothing is written into the user's own ~/.codex or ~/.gemini"


@pytest.mark.parametrize("cli", sorted(CLIS))
async def test_a_provider_without_the_endpoint_settings_gets_no_private_home(
    fake_clis: FakeClis, remote: Start, home: Home, cli: str,
) -> None:
    orchestrator = await remote(cli)
    [answer] = await orchestrator.handle(make_message("hello"))
    assert answer.message == "echo: hello"
    [call] = fake_clis.calls(cli)
    assert not {"CODEX_HOME", "GEMINI_CLI_HOME", "ANTHROPIC_BASE_URL"} & set(call["env_keys"])
    written = [path.name for path in (home.root / "providers").rglob("*") if path.is_file()]
    # gemini -p takes the chat tools' MCP server from a system-defaults file (docs/chat-tools.md): no home of its own
    assert written == (["gemini-system-defaults.json"] if cli == "gemini" else [])


async def test_codex_with_only_a_base_url_calls_it_without_a_key(
    fake_clis: FakeClis, remote: Start, monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setenv("OPENAI_API_KEY", "the-users-own-key")
    async with ModelServer(reply="a local model") as server:
        orchestrator = await remote("codex", base_url=server.url + "/v1", model="llama3.2")
        [answer] = await orchestrator.handle(make_message("hello"))
    assert answer.message == "a local model"
    [request] = server.model_calls
    assert request.api_key is None and request.body["model"] == "llama3.2"


async def test_an_unset_key_variable_is_refused_at_once_naming_it(
    fake_clis: FakeClis, remote: Start, monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.delenv(KEY_VARIABLE, raising=False)
    orchestrator = await remote("claude", base_url="http://127.0.0.1:9/anthropic", api_key_env=KEY_VARIABLE)
    with pytest.raises(PermanentError) as refused:  # told at once, and the message is dead-lettered
        await orchestrator.handle(make_message("hello"))
    assert refused.value.reply is not None
    assert f"the environment variable {KEY_VARIABLE} (api_key_env) is not set" in refused.value.reply
    assert fake_clis.calls("claude") == []


@pytest.mark.parametrize(("settings", "words"), [
    ({"type": "codex", "base_url": "localhost:8080/v1"}, "base_url: 'localhost:8080/v1' is not an http"),
    ({"type": "claude", "base_url": "ftp://proxy"}, "is not an http:// or https:// URL"),
    ({"type": "ollama", "base_url": "http://127.0.0.1:11434"}, "base_url: only for the claude, codex, gemini"),
    ({"command": ["my-agent"], "api_key_env": "K"}, "api_key_env: only for the claude, codex, gemini"),
])
def test_endpoint_settings_are_validated(settings: dict[str, Any], words: str) -> None:
    with pytest.raises(ValidationError) as invalid:
        ProviderSettings.model_validate(settings)
    assert words in str(invalid.value)


def test_gemini_runs_unattended_without_updating_itself_or_reporting(tmp_path: Path) -> None:
    """The private settings.json that selects gemini's API-key auth also turns off its auto-update, its update
    notice, usage statistics and telemetry (one-shot and `gemini --acp` alike read it)."""
    from orchestrator.agents.clis import PRESETS

    env = PRESETS["gemini"].endpoint_env(ProviderSettings(type="gemini", base_url="http://127.0.0.1:9/google"),
                                         "key", tmp_path)
    written = json.loads((Path(env["GEMINI_CLI_HOME"]) / ".gemini" / "settings.json").read_text())
    assert written["security"]["auth"]["selectedType"] == "gemini-api-key"
    assert written["general"] == {"enableAutoUpdate": False, "enableAutoUpdateNotification": False}
    assert written["privacy"]["usageStatisticsEnabled"] is False and written["telemetry"]["enabled"] is False
