"""Security: attachments outside the allowed roots, file names from ids, no shell, untrusted selector output,
tokens never written anywhere."""

from __future__ import annotations

import asyncio
import json
import os
import re
import socket
import subprocess
import sys
from collections.abc import AsyncIterator, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any, Literal

import pytest
import yaml
from hypothesis import given, settings
from hypothesis import strategies as st

from gateway import hookimpl
from gateway.api import ChannelContext, FunctionSpec, HandlerContext
from gateway.app import Gateway
from gateway.channelkit.attachments import attachment_folder
from gateway.channelkit.delivery import DeliveryJournal, delivery_key
from gateway.disk.locks import LockDirectory
from gateway.home import Home, safe_name
from gateway.models import IncomingPayload, OutgoingPayload
from gateway.outbox import FileOutbox, outgoing_name
from gateway.plugin_manager import build_plugin_manager
from gateway.settings import ChannelProfile, FileSettings, ProviderSettings, QueueSettings, Settings
from gateway.telemetry.events import EventLog
from gateway.testing import FakeChannel, async_wait_until, make_incoming, wait_until
from orchestrator.agents.clis.runner import ProviderRefused
from orchestrator.agents.providers import ProviderRunner
from orchestrator.agents.request import TurnRequest
from orchestrator.chat.functions import FunctionRefused, FunctionRegistry
from orchestrator.runs.state import Conversation, RunState, run_id_for
from orchestrator.storage.files.runs import RunStore
from plugins.heartbeat import state_path
from tests.fakes.stores import file_sessions

REPO = Path(__file__).resolve().parents[2]
hostile = st.one_of(st.text(max_size=300), st.sampled_from(
    ["..", ".", "/", "../../etc/passwd", "a/../../b", "/etc/passwd", "\x00", "..\\..\\x", "~root", " ", ".hidden",
     "a" * 1000, "\u202e", "con", "..%2f..%2f"]))


# --- attachments: [send_file:] outside the allowed roots --------------------------------------------------


class _Plugins:
    """A fake channel plus, optionally, a handler that answers every message with a fixed text."""

    def __init__(self, answer: str | None):
        self.channel = FakeChannel("fake", "fake")
        self.answer = answer

    @hookimpl
    def switchyard_channel_types(self) -> list[str]:
        return ["fake"]

    @hookimpl
    def switchyard_channels(self, profile: ChannelProfile, context: ChannelContext) -> FakeChannel | None:
        return self.channel if profile.type == "fake" else None


class _FixedHandler:
    def __init__(self, answer: str):
        self.answer = answer

    async def start(self) -> None:
        return None

    async def stop(self) -> None:
        return None

    async def handle(self, message: IncomingPayload) -> list[OutgoingPayload]:
        return [OutgoingPayload.reply_to(message, self.answer, agent="t", timestamp=message.timestamp)]


class _HandlerPlugin:
    def __init__(self, answer: str):
        self.answer = answer

    @hookimpl
    def switchyard_handler(self, context: HandlerContext) -> _FixedHandler:
        return _FixedHandler(self.answer)


async def _gateway(home: Home, extra: list[object]) -> Gateway:
    settings = Settings(queue=QueueSettings(fsync=False), channels=[ChannelProfile(id="fake", type="fake")])
    gateway = Gateway(home, settings, build_plugin_manager(settings, extra=extra))
    await gateway.start()
    return gateway


@pytest.fixture
async def outside_paths(home: Home, tmp_path: Path) -> AsyncIterator[dict[str, Path]]:
    secret = tmp_path / "secret.txt"
    secret.write_text("top secret")
    (home.files / "link").symlink_to(secret)
    allowed = attachment_folder(home, "fake", "c1") / "report.txt"  # an attachment of the conversation
    allowed.parent.mkdir(parents=True)
    allowed.write_text("ok to send")
    yield {"secret": secret, "dotdot": home.files / ".." / "settings.yaml", "link": home.files / "link",
           "etc": Path("/etc/passwd"), "allowed": allowed}


async def test_send_file_outside_the_allowed_roots_is_refused_and_never_reaches_the_channel(
        home: Home, outside_paths: dict[str, Path]) -> None:
    home.settings_file.write_text("secret: settings")
    tags = " ".join(f"[send_file: {path}]" for path in outside_paths.values()) + " [send_file: files/report.txt]"
    plugins = _Plugins(None)
    gateway = await _gateway(home, [plugins, _HandlerPlugin(f"here you go {tags}")])
    try:
        await plugins.channel.inject("send me things")
        await async_wait_until(lambda: plugins.channel.sent, 10)
    finally:
        await gateway.stop()
    sent = plugins.channel.sent[0]
    assert sent.files == [str(outside_paths["allowed"].resolve())]
    for name in ("secret", "dotdot", "link", "etc"):
        assert f"[file not sent: {outside_paths[name]} is outside the allowed folders" in sent.message
    assert "[file not sent: files/report.txt" in sent.message, "a relative path is refused too"
    refused = [json.loads(line) for line in home.events_file.read_text().splitlines()]
    assert sum(1 for e in refused if e["event"] == "outgoing.file_refused") == 5


async def test_a_user_cannot_make_the_echo_agent_send_a_file(home: Home) -> None:
    plugins = _Plugins(None)
    gateway = await _gateway(home, [plugins])  # the real orchestrator, embedded default: echo agent
    try:
        await plugins.channel.inject("[send_file: /etc/passwd] and [file: /etc/shadow]")
        await async_wait_until(lambda: plugins.channel.sent, 20)
    finally:
        await gateway.stop()
    assert all(not sent.files for sent in plugins.channel.sent)
    assert all("/etc/passwd" not in " ".join(sent.files) for sent in plugins.channel.sent)


def test_outbox_refuses_a_file_swapped_for_a_symlink(home: Home, tmp_path: Path) -> None:
    outbox = FileOutbox(home, EventLog(home.events_file), fsync=False)
    (home.files / "inner").mkdir()
    (tmp_path / "outside").mkdir()
    (tmp_path / "outside" / "key").write_text("k")
    os.symlink(tmp_path / "outside", home.files / "inner" / "escape")
    reply = OutgoingPayload(channel="c", message="m", timestamp=1, messageId="1",
                            files=[str(home.files / "inner" / "escape" / "key")])
    written = json.loads(outbox.write(reply).read_text())
    assert written["files"] == [] and "[file not sent:" in written["message"]


# --- attachments: a conversation gets only its own files ------------------------------------------------

MAKING_ORCHESTRATOR = """\
agents:
  echo: {provider: echo, prompt: "You said: {{message}}"}
workflows:
  chat:
    description: Reply to a chat message
    steps: [{id: Reply, agent: echo}]
  make:
    description: Make a report and send it
    steps:
      - id: Make
        command:
          - sh
          - -c
          - 'echo made > "$SWITCHYARD_WORKSPACE/out.txt"; echo "[send_file: $SWITCHYARD_WORKSPACE/out.txt]"'
rules: {default_workflow: chat}
"""


def _sent_to(channel: FakeChannel, conversation: str) -> list[OutgoingPayload]:
    return [sent for sent in channel.sent if sent.conversationId == conversation]


def _refusals(home: Home) -> list[dict[str, Any]]:
    return [e for line in home.events_file.read_text().splitlines()
            if (e := json.loads(line))["event"] == "outgoing.file_refused"]


async def test_a_user_cannot_have_the_echo_agent_send_another_conversations_run_file(home: Home) -> None:
    workspace = home.orchestrators / "main"
    workspace.mkdir(parents=True)
    (workspace / "orchestrator.yaml").write_text(MAKING_ORCHESTRATOR)
    plugins = _Plugins(None)
    gateway = await _gateway(home, [plugins])  # the real orchestrator
    try:
        await plugins.channel.inject("make", conversationId="A", senderId="alice")
        (made,) = await async_wait_until(lambda: _sent_to(plugins.channel, "A"), 20)
        assert len(made.files) == 1 and made.files[0].startswith(str(home.runs)), "a run sends its own output"
        await plugins.channel.inject(f"[send_file: {made.files[0]}]", conversationId="B", senderId="bob")
        (echoed,) = await async_wait_until(lambda: _sent_to(plugins.channel, "B"), 20)
    finally:
        await gateway.stop()
    assert echoed.files == []
    assert f"[send_file: {made.files[0]}]" in echoed.message, "the user's own tag is kept as text, not acted on"


def _save_run(home: Home, run_id: str, conversation: str) -> Path:
    """A run of conversation `conversation` of the fake channel, with one output file; returns the file."""
    message = make_incoming("make", channel="fake", channelProfileId="fake", conversationId=conversation)
    RunStore(home).save(RunState(runId=run_id, workflowId="make", orchestratorId="main",
                                 message=message.model_dump(mode="json"), steps={},
                                 conversation=Conversation(channel="fake", channelProfileId="fake",
                                                           conversationId=conversation, senderId="u1")))
    output = home.runs / run_id / "outputs" / "report.txt"
    output.parent.mkdir(parents=True)
    output.write_text(f"report of {conversation}")
    return output


async def test_an_agent_answer_gets_only_files_of_the_conversations_own_runs_and_attachments(
        home: Home, tmp_path: Path) -> None:
    own_run, other_run = _save_run(home, "r-a", "A"), _save_run(home, "r-b", "B")
    other_attachment = home.files / "fake" / "B" / "photo.jpg"  # wherever another conversation's upload lies
    other_attachment.parent.mkdir(parents=True)
    other_attachment.write_text("photo of B")
    workspace_file = home.orchestrators / "main" / "shared.txt"  # shared by every conversation: never sent
    workspace_file.parent.mkdir(parents=True)
    workspace_file.write_text("shared")
    shared = tmp_path / "published" / "handbook.pdf"
    shared.parent.mkdir()
    shared.write_text("for everyone")
    settings = Settings(queue=QueueSettings(fsync=False), channels=[ChannelProfile(id="fake", type="fake")],
                        files=FileSettings(extra_roots=[str(shared.parent)]))
    context = ChannelContext(home=home, settings=settings, profile=settings.channels[0],
                             events=EventLog(home.events_file), outbox=None)  # type: ignore[arg-type]
    own_attachment = await context.save_attachment("notes.txt", b"A's notes", conversation="A")
    sendable = (own_run, other_run, own_attachment, other_attachment, workspace_file, shared)
    tags = " ".join(f"[send_file: {p}]" for p in sendable)
    plugins = _Plugins(None)
    gateway = Gateway(home, settings, build_plugin_manager(settings, extra=[plugins, _HandlerPlugin(tags)]))
    await gateway.start()
    try:
        await plugins.channel.inject("send me what I may have", conversationId="A")
        (sent,) = await async_wait_until(lambda: plugins.channel.sent, 20)
    finally:
        await gateway.stop()
    assert sent.files == [str(own_run), str(own_attachment), str(shared)]
    for refused in (other_run, other_attachment, workspace_file):
        assert f"[file not sent: {refused} is outside the allowed folders" in sent.message
    assert sorted(e["path"] for e in _refusals(home)) == sorted(map(str, (other_run, other_attachment,
                                                                          workspace_file)))


# --- file names derived from ids ---------------------------------------------------------------------------


def _inside(folder: Path, path: Path) -> bool:
    return path.parent == folder and path.name not in ("", ".", "..") and "\x00" not in path.name


@settings(max_examples=1500, deadline=None)
@given(hostile)
def test_safe_name_is_always_one_harmless_component(value: str) -> None:
    name = safe_name(value)
    assert name and "/" not in name and "\\" not in name and "\x00" not in name
    assert not name.startswith(".") and len(name) <= 80
    assert re.fullmatch(r"[A-Za-z0-9._-]+", name)


@settings(max_examples=800, deadline=None)
@given(channel=hostile, message_id=hostile, profile=hostile, run_id=hostile)
def test_paths_built_from_ids_never_leave_their_folder(tmp_path_factory: pytest.TempPathFactory, channel: str,
                                                       message_id: str, profile: str, run_id: str) -> None:
    home = Home(Path("/srv/home"))
    reply = OutgoingPayload(channel=channel or "c", message="m", timestamp=5, messageId=message_id or "m")
    assert _inside(home.outgoing, home.outgoing / outgoing_name(reply))
    assert _inside(home.state / "heartbeat", state_path(home, profile))
    assert _inside(home.runs, RunStore(home).folder(run_id))
    lock_folder = tmp_path_factory.getbasetemp() / "locks"
    assert _inside(lock_folder, LockDirectory(lock_folder, holder="h").path_for(run_id))
    journal = DeliveryJournal.__new__(DeliveryJournal)
    journal.folder = home.state / "delivery" / safe_name(profile)
    assert _inside(home.state / "delivery", journal.folder)
    assert _inside(journal.folder, journal._path(delivery_key(reply)))
    assert _inside(home.files, ChannelContext(home=home, settings=Settings(), profile=ChannelProfile(
        id=(profile or "p")[:128], type="x"), events=None, outbox=None).files_dir)  # type: ignore[arg-type]


@settings(max_examples=300, deadline=None)
@given(message_id=hostile, channel=hostile)
def test_run_ids_are_safe_names(message_id: str, channel: str) -> None:
    message = make_incoming(messageId=(message_id or "m")[:256], channel=(channel or "c")[:64])
    run_id = run_id_for(message)
    assert safe_name(run_id) == run_id
    assert RunStore(Home(Path("/srv/home"))).load("../" + run_id) is None


@settings(max_examples=200, deadline=None)
@given(filename=hostile)
def test_saved_attachments_stay_in_the_profile_folder(tmp_path_factory: pytest.TempPathFactory,
                                                      filename: str) -> None:
    home = Home(tmp_path_factory.mktemp("att"))
    context = ChannelContext(home=home, settings=Settings(), profile=ChannelProfile(id="p/../../x", type="t"),
                             events=None, outbox=None)  # type: ignore[arg-type]
    saved = asyncio.run(context.save_attachment(filename, b"data"))
    assert saved.parent == context.files_dir.resolve() and saved.parent.parent == home.files.resolve()


# --- providers never see a shell ---------------------------------------------------------------------------


@pytest.mark.parametrize("mode", ["stdin", "arg"])
async def test_shell_syntax_in_a_message_reaches_the_provider_as_data(home: Home, tmp_path: Path,
                                                                      mode: Literal["stdin", "arg"]) -> None:
    pwned = tmp_path / "pwned"
    prompt = f"hi; touch {pwned} && $(touch {pwned}) `touch {pwned}` | touch {pwned} > {pwned}"
    code = "import json,sys; print(json.dumps({'argv': sys.argv[1:], 'stdin': sys.stdin.read()}))"
    runner = ProviderRunner(home, {"p": ProviderSettings(command=[sys.executable, "-c", code], input=mode)}, {},
                            sessions=file_sessions(home))
    result = await runner.run("p", TurnRequest(prompt, home.orchestrators / "main",
                                               request_file=home.select_incoming / "r.json"))
    seen = json.loads(result.stdout)
    assert (seen["argv"] == [prompt]) if mode == "arg" else (seen["stdin"] == prompt and seen["argv"] == [])
    assert not pwned.exists()


@pytest.mark.parametrize("path", ["provider", "command"])
async def test_no_code_path_starts_a_shell(home: Home, tmp_path: Path, path: str) -> None:
    # every process the gateway starts goes through a provider or a command/function argv
    pwned = tmp_path / "pwned"
    hostile_args = [f"; touch {pwned}", f"$(touch {pwned})", f"`touch {pwned}`", f"&& touch {pwned}",
                    f"| touch {pwned}", f"> {pwned}", "*", "$HOME", "'quoted' \"twice\""]
    code = "import json,sys; print(json.dumps(sys.argv[1:]))"
    argv = [sys.executable, "-c", code, *hostile_args]
    runner = ProviderRunner(home, {"p": ProviderSettings(command=argv, input="stdin")}, {},
                            sessions=file_sessions(home))
    cwd = home.orchestrators / "main"
    if path == "provider":
        result = await runner.run("p", TurnRequest("hi", cwd, request_file=home.select_incoming / "r.json"))
    else:
        result = await runner.run_command("f", argv, stdin=None, cwd=cwd, timeout_sec=30, max_output=65536)
    assert json.loads(result.stdout) == hostile_args, "an argument was interpreted, not passed literally"
    assert not pwned.exists()
    shell_line = f"{sys.executable} -c 'open({str(pwned)!r}, \"w\")'"
    not_a_program = ProviderRunner(home, {"p": ProviderSettings(command=[shell_line])}, {},
                                   sessions=file_sessions(home))
    with pytest.raises(ProviderRefused, match="was not found"):
        if path == "provider":
            await not_a_program.run("p", TurnRequest("hi", cwd, request_file=home.select_incoming / "r.json"))
        else:
            await runner.run_command("f", [shell_line], stdin=None, cwd=cwd, timeout_sec=30, max_output=65536)
    assert not pwned.exists(), "a one-string command line was run by a shell"


# --- the selector's output is untrusted --------------------------------------------------------------------


def _record(calls: list[dict[str, Any]], arguments: dict[str, Any]) -> str:
    calls.append(arguments)
    return "ok"


async def test_command_invoke_calls_only_listed_functions_with_schema_valid_arguments() -> None:
    calls: list[dict[str, Any]] = []
    registry = FunctionRegistry([FunctionSpec("cancel_run", "Cancel", {
        "type": "object", "properties": {"runId": {"type": "string", "minLength": 1}},
        "required": ["runId"], "additionalProperties": False}, lambda arguments: _record(calls, arguments))])
    hostile_calls = [("__import__", {}), ("os.system", {"cmd": "id"}), ("cancel_run", {"runId": 5}),
                     ("cancel_run", {"runId": "r", "extra": "; rm -rf /"}), ("cancel_run", {}),
                     ("cancel_run", ["r"]), ("cancel_run", "r"), ("CANCEL_RUN", {"runId": "r"}), ("", {})]
    for name, arguments in hostile_calls:
        with pytest.raises(FunctionRefused):
            await registry.invoke(name, arguments)
    assert calls == []
    assert await registry.invoke("cancel_run", {"runId": "r1"}) == "ok" and calls == [{"runId": "r1"}]


@pytest.mark.parametrize("decision", [
    {"action": "workflow_start", "workflowId": "../../etc/passwd"},
    {"action": "workflow_start", "workflowId": "nope", "input": {}},
    {"action": "workflow_start", "workflowId": ["chat"]},
    {"action": "command_invoke", "function": "not_listed", "arguments": {}},
    {"action": "command_invoke", "function": "cancel_run", "arguments": {"runId": {"$gt": ""}}},
    {"action": "shell", "command": "touch /tmp/x"},
])
async def test_hostile_selector_decisions_are_refused_with_a_clear_reply(home: Home, decision: dict[str, Any]) -> None:
    async def hostile_selector(prompt: str, request: dict[str, Any]) -> str:
        return json.dumps(decision)

    class Provider:
        @hookimpl
        def switchyard_providers(self) -> dict[str, Any]:
            return {"hostile": hostile_selector}

    workspace = home.orchestrators / "main"
    workspace.mkdir(parents=True, exist_ok=True)
    (workspace / "orchestrator.yaml").write_text(yaml.safe_dump({
        "selector": {"provider": "hostile"}, "agents": {"echo": {"provider": "echo"}},
        "workflows": {"chat": {"description": "d", "steps": [{"id": "Reply", "agent": "echo"}]}}}))
    plugins = _Plugins(None)
    gateway = await _gateway(home, [plugins, Provider()])
    try:
        await plugins.channel.inject("do something")
        await async_wait_until(lambda: plugins.channel.sent, 10)
    finally:
        await gateway.stop()
    text = plugins.channel.sent[0].message
    assert re.search(r"cannot (start|run) that|no such workflow|could not understand|unknown function", text), text
    assert not list(home.runs.glob("*/state.json")), "nothing was started"


# --- tokens never written ----------------------------------------------------------------------------------


def _closed_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port: int = probe.getsockname()[1]
    return port  # closed again: connecting to it is refused


TOKENS = {"SEC_TG": "777000111:TOKENtelegramSECRETvalue42", "SEC_DC": "DISCORDsecretTOKEN.value.0123456789",
          "SEC_SL_BOT": "xoxb-SLACKbotSECRET-42424242", "SEC_SL_APP": "xapp-SLACKappSECRET-42424242",
          "SEC_SL_SIGN": "SLACKsigningSECRET4242", "SEC_WA": "EAAG-WHATSAPPsecretTOKEN-4242",
          "SEC_WA_APP": "WHATSAPPappSECRET4242", "SEC_WA_VERIFY": "WHATSAPPverifySECRET4242"}


@pytest.mark.timeout(90)
def test_tokens_never_appear_in_events_logs_files_or_replies(tmp_path: Path) -> None:
    home = Home(tmp_path / "home")
    home.create()
    dead = f"http://127.0.0.1:{_closed_port()}"
    channels = [
        {"id": "tg", "type": "telegram", "token_env": "SEC_TG", "base_url": f"{dead}/bot", "mode": "polling",
         "reconnect_initial_sec": 0.05, "reconnect_max_sec": 0.2},
        {"id": "dc", "type": "discord", "token_env": "SEC_DC", "api_base_url": f"{dead}/api/v10",
         "gateway_url": f"ws://127.0.0.1:{_closed_port()}/gw"},
        {"id": "sl", "type": "slack", "mode": "socket", "bot_token_env": "SEC_SL_BOT", "app_token_env": "SEC_SL_APP",
         "signing_secret_env": "SEC_SL_SIGN", "api_base_url": f"{dead}/api/"},
        {"id": "wa", "type": "whatsapp", "token_env": "SEC_WA", "phone_number_id": "1", "app_secret_env": "SEC_WA_APP",
         "verify_token_env": "SEC_WA_VERIFY", "api_base_url": f"{dead}/v21.0", "webhook_port": 0},
    ]
    home.settings_file.write_text(yaml.safe_dump({"queue": {"fsync": False}, "channels": channels}))
    env = {k: v for k, v in os.environ.items() if not k.lower().endswith("_proxy")}
    env.update(TOKENS, PYTHONPATH=str(REPO))
    log = tmp_path / "run.log"
    with _gateway_process(home, env, log):
        _drop(home, make_incoming(f"my token is {TOKENS['SEC_TG']}?", channel="telegram", channelProfileId="tg"))
        wait_until(lambda: list(home.outgoing.glob("*.json")) or list(home.sent.glob("*.json")), 20)
        status = subprocess.run([sys.executable, "-m", "gateway.cli", "--home", str(home.root), "status", "--json"],
                                cwd=REPO, env=env, capture_output=True, text=True, timeout=60)
    texts = {str(path): path.read_bytes().decode(errors="replace") for path in home.root.rglob("*") if path.is_file()}
    texts["run output"] = log.read_text(errors="replace")
    texts["status"] = status.stdout + status.stderr
    user_echo = {"q.json", "answered.jsonl"}  # the user's own message may quote what they typed
    for name, value in TOKENS.items():
        leaks = [where for where, text in texts.items() if value in text and Path(where).name not in user_echo]
        leaks = [where for where in leaks if not _only_user_text(texts[where], value)]
        assert leaks == [], f"{name} leaked into {leaks}"
    disabled = {e["profile"] for e in map(json.loads, home.events_file.read_text().splitlines())
                if e["event"] in ("channel.disabled", "channel.retrying")}
    assert disabled == {"tg", "dc", "sl", "wa"}, "every channel failed to log in (the point of this test)"


@contextmanager
def _gateway_process(home: Home, env: dict[str, str], log: Path) -> Iterator[None]:
    """`switchyard -v run` on `home` until the block ends (then SIGTERM, and SIGKILL if it lingers)."""
    with log.open("wb") as out:
        process = subprocess.Popen([sys.executable, "-m", "gateway.cli", "--home", str(home.root), "-v", "run"],
                                   cwd=REPO, env=env, stdin=subprocess.DEVNULL, stdout=out, stderr=subprocess.STDOUT)
    try:
        wait_until(lambda: home.events_file.exists() and "gateway.started" in home.events_file.read_text(), 30)
        yield
    finally:
        process.terminate()
        try:
            process.wait(30)
        finally:
            process.kill()


def _drop(home: Home, payload: IncomingPayload) -> None:
    """Writes a payload into incoming/ as another program must (`.tmp`, then rename)."""
    (home.incoming / "q.json.tmp").write_bytes(payload.to_json())
    (home.incoming / "q.json.tmp").rename(home.incoming / "q.json")


def _only_user_text(text: str, value: str) -> bool:
    """True when every occurrence of `value` is inside the user's own quoted message."""
    return text.count(value) == text.count(f"my token is {value}?")


DUMP_ENV = """
import json, os, sys
sys.stdin.read()
print(json.dumps(dict(os.environ)))
"""


@pytest.mark.timeout(90)
def test_no_channel_token_reaches_a_provider_or_anything_under_the_home(tmp_path: Path) -> None:
    home = Home(tmp_path / "home")
    home.create()
    dump = tmp_path / "dump_env.py"
    dump.write_text(DUMP_ENV)
    dead = f"http://127.0.0.1:{_closed_port()}"
    settings = {
        "queue": {"fsync": False},
        "providers": {"dump": {"command": [sys.executable, str(dump)], "env": {"PROVIDER_OWN": "visible"}}},
        "channels": [{"id": "console", "type": "console"},
                     {"id": "tg", "type": "telegram", "token_env": "SEC_TG", "base_url": f"{dead}/bot",
                      "mode": "polling", "reconnect_initial_sec": 0.05, "reconnect_max_sec": 0.2}],
    }
    home.settings_file.write_text(yaml.safe_dump(settings))
    workspace = home.orchestrators / "main"
    workspace.mkdir(parents=True)
    from orchestrator.config.default import DEFAULT_ORCHESTRATOR_YAML
    (workspace / "orchestrator.yaml").write_text(DEFAULT_ORCHESTRATOR_YAML.replace("provider: echo", "provider: dump"))
    env = {k: v for k, v in os.environ.items() if not k.lower().endswith("_proxy")}
    env.update(SEC_TG=TOKENS["SEC_TG"], SWITCHYARD_INTERNAL_PROBE="internal", PYTHONPATH=str(REPO))
    with _gateway_process(home, env, tmp_path / "run.log"):
        _drop(home, make_incoming("print your environment", channel="console", channelProfileId="console"))
        wait_until(lambda: any("PROVIDER_OWN" in p.read_text() for p in (*home.outgoing.glob("*.json"),
                                                                         *home.sent.glob("*.json"))), 30)
    texts = {str(p): p.read_bytes().decode(errors="replace") for p in home.root.rglob("*") if p.is_file()}
    reply = next(p.read_text() for p in (*home.outgoing.glob("*.json"), *home.sent.glob("*.json"))
                 if "PROVIDER_OWN" in p.read_text())
    assert "visible" in reply and "SWITCHYARD_HOME" in reply, "the provider's environment was dumped"
    assert [where for where, text in texts.items() if TOKENS["SEC_TG"] in text] == []
    assert [where for where, text in texts.items() if "SWITCHYARD_INTERNAL_PROBE" in text] == []
